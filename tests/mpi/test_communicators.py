"""Split, Dup and Free: communicators created inside autodiff live until the reverse pass is done."""

import numpy as np
import pytest

import pad
import pad.mpi

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


def test_split_inside_autodiff(comm, rng):
    """Even and odd ranks reduce separately on a sub-communicator that is freed inside the function."""
    s, r = rng.normal(size=3), rng.normal(size=3)

    def f(s, r):
        sub = comm.Split(comm.rank % 2, -comm.rank)
        sub.Allreduce(s, r, pad.mpi.MAX)
        sub.Bcast(r, 0)
        sub.Free()

    pad.check_grad(f, pad.Dup(s, np.zeros(3)), pad.Dup(r, np.zeros(3)))


def test_dup_and_wrap(comm, rng):
    s, r = rng.normal(size=2), rng.normal(size=2)
    other = pad.mpi.Comm(comm.mpi.Dup())
    dup = comm.Dup()
    assert (dup.rank, dup.size, other.Get_rank(), other.Get_size()) == (
        comm.rank,
        comm.size,
        comm.rank,
        comm.size,
    )

    def f(s, r):
        dup.Allreduce(s, r)
        other.Scan(pad.mpi.IN_PLACE, r)

    pad.check_grad(f, pad.Dup(s, np.zeros(2)), pad.Dup(r, np.zeros(2)))
    dup.Free()
    other.Free()


def test_free_of_outside_communicator_refused(comm):
    dup = comm.Dup()
    with pytest.raises(RuntimeError, match="after autodiff returns"):
        pad.autodiff(lambda x: dup.Free(), pad.Dup(np.ones(1), np.ones(1)))
    dup.Free()
