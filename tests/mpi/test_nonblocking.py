"""Non-blocking point-to-point: Isend, Irecv, Wait, Waitall."""

import numpy as np
import pytest

import pad
import pad.mpi

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


def test_ring_waitall(comm, rng):
    r, p = comm.rank, comm.size
    x, y = rng.normal(size=6), rng.normal(size=6)

    def f(x, y):
        reqs = [comm.Irecv(y, (r - 1) % p, tag=2), comm.Isend(x, (r + 1) % p, tag=2)]
        pad.mpi.Request.Waitall(reqs)

    pad.check_grad(f, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.zeros_like(y)))


def test_waits_in_different_orders(comm, rng):
    """Two messages with one tag, waited in opposite orders by sender and receiver: the adjoint messages
    still reach the right buffers (their private tags name the message, not the order)."""
    r, p = comm.rank, comm.size
    a, b, c, d = (rng.normal(size=3) for _ in range(4))

    def f(a, b, c, d):
        s1, s2 = comm.Isend(a, (r + 1) % p, tag=5), comm.Isend(b, (r + 1) % p, tag=5)
        r1, r2 = comm.Irecv(c, (r - 1) % p, tag=5), comm.Irecv(d, (r - 1) % p, tag=5)
        r2.Wait()
        r1.Wait()
        s1.Wait()
        s2.Wait()

    pad.check_grad(f, *(pad.Dup(v, np.zeros_like(v)) for v in (a, b, c, d)))


def test_irecv_any_source(comm, rng):
    r, p = comm.rank, comm.size
    x, y = rng.normal(size=4), rng.normal(size=4)

    def f(x, y):
        req = comm.Irecv(y, pad.mpi.ANY_SOURCE, pad.mpi.ANY_TAG)
        comm.Isend(x, (r + 1) % p, tag=r).Wait()
        req.Wait()

    pad.check_grad(f, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.zeros_like(y)))


def test_reverse_keeps_overlap(comm):
    """The reverses of the Waits start both adjoint transfers; the reverses of Isend/Irecv complete them."""
    r, p = comm.rank, comm.size
    x, y = np.ones(2), np.zeros(2)

    def f(x, y):
        pad.mpi.Request.Waitall([comm.Irecv(y, (r - 1) % p, 9), comm.Isend(x, (r + 1) % p, 9)])

    with pad.mpi.trace() as events:
        pad.autodiff(f, pad.Dup(x, np.zeros(2)), pad.Dup(y, np.ones(2)))
    assert [(e.call, e.op) for e in events if e.phase == "forward"] == [
        ("Isend", "Isend"),
        ("Irecv", "Irecv"),
    ]
    assert [(e.call, e.op) for e in events if e.phase == "reverse"] == [
        ("Irecv", "Isend"),
        ("Isend", "Irecv"),
    ]


def test_unwaited_isend_fails_on_every_rank(comm, everywhere):
    """Only rank 0 forgets its Wait; every rank gets the error (no rank is left in the reverse pass)."""
    r, p = comm.rank, comm.size
    x, y = np.ones(2), np.zeros(2)

    def f(x, y):
        req = comm.Isend(x, (r + 1) % p, 1)
        comm.Recv(y, (r - 1) % p, 1)
        if r != 0:
            req.Wait()

    with pytest.raises(RuntimeError, match="never waited") as err:
        pad.autodiff(f, pad.Dup(x, np.zeros(2)), pad.Dup(y, np.ones(2)))
    assert everywhere(("on this rank" in str(err.value)) == (r == 0))
