"""What pad sends: the debug log, the byte counters (the reverse moves what the forward moved)."""

import numpy as np
import pytest

import pad
import pad.mpi
from pad.mpi import IN_PLACE

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


def test_debug_log(comm, capfd):
    r, p = comm.rank, comm.size
    x, y = np.ones(2), np.zeros(2)

    def f(x, y):
        pad.mpi.Request.Waitall([comm.Isend(x, (r + 1) % p, 7), comm.Irecv(y, (r - 1) % p, 7)])

    pad.mpi.set_debug(True)
    try:
        pad.autodiff(f, pad.Dup(x, np.zeros(2)), pad.Dup(y, np.ones(2)))
    finally:
        pad.mpi.set_debug(False)
    err = capfd.readouterr().err.splitlines()
    assert f"r{r} | Isend -> {(r + 1) % p} tag 7 | adjoint: Irecv" in err
    assert f"r{r} | Irecv <- {(r - 1) % p} tag 7 | adjoint: Isend" in err
    assert f"r{r} | adjoint of Isend: Irecv <- {(r + 1) % p} tag 7" in err
    assert f"r{r} | adjoint of Irecv: Isend -> {(r - 1) % p} tag 7" in err


LINEAR = {
    "Sendrecv": lambda c, s, r: c.Sendrecv(s, (c.rank + 1) % c.size, 0, r, (c.rank - 1) % c.size, 0),
    "Bcast": lambda c, s, r: c.Bcast(r, c.size - 1),
    "Reduce": lambda c, s, r: c.Reduce(s, r, pad.mpi.SUM, 0),
    "Allreduce": lambda c, s, r: c.Allreduce(s, r),
    "Gather": lambda c, s, r: c.Gather(s[:2], r, 0),
    "Scatter": lambda c, s, r: c.Scatter(s, r[:2], 0),
    "Allgather": lambda c, s, r: c.Allgather(s[:2], r),
    "Allgather IN_PLACE": lambda c, s, r: c.Allgather(IN_PLACE, r),
    "Alltoall": lambda c, s, r: c.Alltoall(s, r),
    "Reduce_scatter_block": lambda c, s, r: c.Reduce_scatter_block(s, r[:2]),
    "Scan": lambda c, s, r: c.Scan(s, r),
    "Exscan": lambda c, s, r: c.Exscan(s, r),
}


@pytest.mark.parametrize("name", list(LINEAR))
def test_reverse_moves_forward_bytes(comm, name):
    """Summed over ranks, a linear op's reverse receives exactly the bytes its forward received."""
    n = 2 * comm.size
    s, r = np.ones(n), np.ones(n)
    pad.mpi.reset_stats()
    pad.autodiff(lambda s, r: LINEAR[name](comm, s, r), pad.Dup(s, np.ones(n)), pad.Dup(r, np.ones(n)))
    st = pad.mpi.stats()
    fwd = comm.mpi.allreduce(st["forward"]["bytes"])
    rev = comm.mpi.allreduce(st["reverse"]["bytes"])
    assert fwd == rev
    assert fwd > 0 or comm.size == 1
