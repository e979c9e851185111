"""Reductions: Reduce and Allreduce with SUM, PROD, MIN, MAX; Reduce_scatter_block; Scan and Exscan."""

import numpy as np
import pytest

import pad
import pad.mpi
from pad.mpi import IN_PLACE, MAX, MIN, PROD, SUM

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]

OPS = {"SUM": SUM, "PROD": PROD, "MIN": MIN, "MAX": MAX}


def dup(*arrays):
    return [pad.Dup(a, np.zeros_like(a)) for a in arrays]


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce(comm, rng, op, in_place):
    s, r = rng.uniform(0.5, 1.5, size=(2, 3)), rng.normal(size=(2, 3))
    pad.check_grad(lambda s, r: comm.Allreduce(IN_PLACE if in_place else s, r, OPS[op]), *dup(s, r))


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("op", list(OPS))
def test_reduce(comm, rng, op, in_place):
    root = comm.size - 1
    s, r = rng.uniform(0.5, 1.5, size=4), rng.normal(size=4)

    def f(s, r):
        comm.Reduce(IN_PLACE if in_place and comm.rank == root else s, r, OPS[op], root)

    pad.check_grad(f, *dup(s, r))


def test_mpi4py_ops_accepted(comm, rng):
    from mpi4py import MPI

    s, r = rng.normal(size=3), np.zeros(3)
    pad.check_grad(lambda s, r: comm.Allreduce(s, r, MPI.MAX), *dup(s, r))


@pytest.mark.parametrize("zeros", [1, 2])
def test_prod_with_zeros(comm, rng, everywhere, zeros):
    """Element 0 has a zero on `zeros` ranks, element 1 on none; the adjoint is the others' product."""
    p, me = comm.size, comm.rank
    values = rng.uniform(0.5, 1.5, size=(p, 2))  # row k: rank k's input, known to all
    values = np.random.default_rng(5).uniform(0.5, 1.5, size=(p, 2))
    values[:zeros, 0] = 0.0
    s, r = values[me].copy(), np.zeros(2)
    ds = np.zeros(2)
    pad.autodiff(lambda s, r: comm.Allreduce(s, r, PROD), pad.Dup(s, ds), pad.Dup(r, np.ones(2)))
    others = np.prod(np.delete(values, me, axis=0), axis=0)
    assert everywhere(np.allclose(ds, p * others))
    pad.check_grad(lambda s, r: comm.Allreduce(s, r, PROD), *dup(values[me].copy(), r))


@pytest.mark.parametrize("op", ["MIN", "MAX"])
def test_ties_go_to_lowest_rank(comm, everywhere, op):
    s, r, ds = np.array([1.0, float(comm.rank)]), np.zeros(2), np.zeros(2)
    pad.autodiff(lambda s, r: comm.Allreduce(s, r, OPS[op]), pad.Dup(s, ds), pad.Dup(r, np.ones(2)))
    winner = 0 if op == "MIN" else comm.size - 1  # element 1: rank k holds k
    want = [comm.size if comm.rank == 0 else 0.0, comm.size if comm.rank == winner else 0.0]
    assert everywhere(np.array_equal(ds, want))


def test_minmax_index_traffic(comm):
    """MAX's reverse moves the seeds (Allreduce) plus the winners' ranks (int32), nothing else."""
    p = comm.size
    with pad.mpi.trace() as events:
        pad.autodiff(lambda s, r: comm.Allreduce(s, r, MAX), *dup(np.ones(8), np.ones(8)))
    rev = [(e.call, e.nbytes) for e in events if e.phase == "reverse"]
    assert rev == [("Allreduce", 64 * (p - 1)), ("Allreduce", 32 * (p - 1))]


@pytest.mark.parametrize("in_place", [False, True])
def test_reduce_scatter_block(comm, rng, in_place):
    p = comm.size
    s, r = rng.normal(size=(p, 2)), rng.normal(size=(p, 2) if in_place else 2)
    pad.check_grad(lambda s, r: comm.Reduce_scatter_block(IN_PLACE if in_place else s, r, SUM), *dup(s, r))


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("call", ["Scan", "Exscan"])
def test_scans(comm, rng, call, in_place):
    s, r = rng.normal(size=3), rng.normal(size=3)
    pad.check_grad(lambda s, r: getattr(comm, call)(IN_PLACE if in_place else s, r, SUM), *dup(s, r))


def test_unsupported_op_fails_on_every_rank(comm):
    from mpi4py import MPI

    op = MPI.Op.Create(lambda a, b, dt: None, commute=True)
    try:
        with pytest.raises(NotImplementedError, match="user-defined op"):
            pad.autodiff(lambda s, r: comm.Allreduce(s, r, op), *dup(np.ones(2), np.ones(2)))
        with pytest.raises(NotImplementedError, match="PROD"):
            pad.autodiff(lambda s, r: comm.Scan(s, r, PROD), *dup(np.ones(2), np.ones(2)))
    finally:
        op.Free()


def test_integer_reduction_any_op(comm):
    from mpi4py import MPI

    i, j, x = np.array([comm.rank + 1]), np.zeros(1, np.int64), np.ones(1)
    pad.autodiff(lambda x: (comm.Allreduce(i, j, MPI.BOR), comm.Bcast(x, 0)), pad.Dup(x, np.ones(1)))
    assert j[0] == np.bitwise_or.reduce(np.arange(1, comm.size + 1))


def test_mismatched_shapes_fail_on_every_rank(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    n = 3 if comm.rank == 0 else 4
    with pytest.raises(pad.mpi.MismatchError, match=r"rank 0: .*3"):
        pad.autodiff(lambda s, r: comm.Allreduce(s, r), *dup(np.ones(n), np.ones(n)))


def test_mismatched_dtypes_fail_on_every_rank(comm):
    if comm.size == 1:
        pytest.skip("needs two ranks")
    dt = np.float32 if comm.rank == 1 else np.float64
    with pytest.raises(pad.mpi.MismatchError, match="disagree"):
        pad.autodiff(lambda s: comm.Bcast(s, 0), *dup(np.ones(3, dt)))
