"""pad.mpi with CuPy buffers: staged through host memory, differentiated like NumPy buffers."""

import numpy as np
import pytest

import pad
import pad.mpi

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def test_plain_calls_stage_device_buffers():
    comm = pad.mpi.COMM_WORLD
    s, r = cp.arange(4, dtype=cp.float64), cp.zeros(4)
    comm.Allreduce(s, r, pad.mpi.SUM)
    assert cp.allclose(r, comm.size * s)
    req = comm.Irecv(r, comm.rank, 3)
    comm.Isend(s + 1, comm.rank, 3).Wait()
    req.Wait()
    assert cp.allclose(r, s + 1)


@pytest.mark.parametrize("op", ["SUM", "MAX"])
def test_allreduce_gradient(op):
    comm = pad.mpi.COMM_WORLD
    s, r = cp.asarray(np.random.default_rng(comm.rank).normal(size=5)), cp.zeros(5)
    f = lambda s, r: comm.Allreduce(s, r, getattr(pad.mpi, op))  # noqa: E731
    pad.check_grad(f, pad.Dup(s, cp.zeros(5)), pad.Dup(r, cp.zeros(5)))


def test_nonblocking_ring_gradient():
    comm = pad.mpi.COMM_WORLD
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    x, y = cp.asarray(np.random.default_rng(comm.rank).normal(size=4)), cp.zeros(4)

    def f(x, y):
        pad.mpi.Request.Waitall([comm.Irecv(y, left, 1), comm.Isend(x, right, 1)])

    pad.check_grad(f, pad.Dup(x, cp.zeros(4)), pad.Dup(y, cp.zeros(4)))
