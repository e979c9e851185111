"""Data-movement collectives: Bcast, Gather, Scatter, Allgather, Alltoall, Barrier (IN_PLACE forms too)."""

import numpy as np
import pytest

import pad
import pad.mpi
from pad.mpi import IN_PLACE

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


def dup(*arrays):
    return [pad.Dup(a, np.zeros_like(a)) for a in arrays]


@pytest.mark.parametrize("root", ["first", "last"])
def test_bcast(comm, rng, root):
    root = 0 if root == "first" else comm.size - 1
    x = rng.normal(size=(3, 2))
    pad.check_grad(lambda x: comm.Bcast(x, root), *dup(x))


def test_bcast_reverse_is_one_reduce(comm):
    x = np.ones(4)
    with pad.mpi.trace() as events:
        pad.autodiff(lambda x: comm.Bcast(x, 0), pad.Dup(x, np.ones(4)))
    assert [(e.call, e.where) for e in events if e.phase == "reverse"] == [("Reduce", "root 0")]


@pytest.mark.parametrize("in_place", [False, True])
def test_gather(comm, rng, in_place):
    p, root = comm.size, comm.size // 2
    s, r = rng.normal(size=3), rng.normal(size=3 * p)

    def f(s, r):
        if in_place and comm.rank == root:
            comm.Gather(IN_PLACE, r, root)
        else:
            comm.Gather(s, r, root)

    pad.check_grad(f, *dup(s, r))


@pytest.mark.parametrize("in_place", [False, True])
def test_scatter(comm, rng, in_place):
    p, root = comm.size, comm.size - 1
    s, r = rng.normal(size=2 * p), rng.normal(size=2)

    def f(s, r):
        if in_place and comm.rank == root:
            comm.Scatter(s, IN_PLACE, root)
        else:
            comm.Scatter(s, r, root)

    pad.check_grad(f, *dup(s, r))


@pytest.mark.parametrize("in_place", [False, True])
def test_allgather(comm, rng, in_place):
    p = comm.size
    s, r = rng.normal(size=2), rng.normal(size=(p, 2))
    pad.check_grad(lambda s, r: comm.Allgather(IN_PLACE if in_place else s, r), *dup(s, r))


def test_allgather_reverse_is_reduce_scatter(comm):
    p = comm.size
    with pad.mpi.trace() as events:
        pad.autodiff(lambda s, r: comm.Allgather(s, r), *dup(np.ones(2), np.ones(2 * p)))
    assert [(e.call, e.nbytes) for e in events if e.phase == "reverse"] == [
        ("Reduce_scatter_block", 16 * (p - 1))
    ]


@pytest.mark.parametrize("in_place", [False, True])
def test_alltoall(comm, rng, in_place):
    p = comm.size
    s, r = rng.normal(size=(p, 3)), rng.normal(size=(p, 3))
    pad.check_grad(lambda s, r: comm.Alltoall(IN_PLACE if in_place else s, r), *dup(s, r))


def test_barrier_mirrored(comm, rng):
    x = rng.normal(size=2)

    def f(x):
        comm.Barrier()
        comm.Bcast(x, 0)

    with pad.mpi.trace() as events:
        pad.autodiff(f, pad.Dup(x, np.ones(2)))
    assert [e.call for e in events if e.phase == "reverse"] == ["Reduce", "Barrier"]
    pad.check_grad(f, *dup(x))


def test_zero_shadow_rank_takes_part(comm, rng, everywhere):
    """Rank 0's input is Const and its seed zero: it still makes the adjoint calls (else the others hang)."""
    s, r = rng.normal(size=2), np.zeros(2 * comm.size)
    if comm.rank == 0:
        pad.autodiff(lambda s, r: comm.Allgather(s, r), pad.Const(s), pad.Dup(r, np.zeros_like(r)))
        ds = None
    else:
        ds = np.zeros(2)
        pad.autodiff(lambda s, r: comm.Allgather(s, r), pad.Dup(s, ds), pad.Dup(r, np.ones_like(r)))
    # every rank but 0 seeded all of r with ones: each block's shadow sums to size - 1
    assert everywhere(ds is None or np.all(ds == comm.size - 1))
    pad.check_grad(lambda s, r: comm.Allgather(s, r), pad.Const(s) if comm.rank == 0 else dup(s)[0], *dup(r))


def test_integer_buffers_pass_through(comm):
    i = np.arange(3) if comm.rank == 0 else np.zeros(3, np.int64)
    x = np.ones(2) * comm.rank
    with pad.mpi.trace() as events:
        pad.autodiff(lambda x: (comm.Bcast(i, 0), comm.Bcast(x, 0)), pad.Dup(x, np.ones(2)))
    assert np.array_equal(i, np.arange(3))
    assert [e.call for e in events if e.phase == "reverse"] == ["Reduce"]
