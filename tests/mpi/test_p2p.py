"""Blocking point-to-point: Send, Recv, Sendrecv."""

import numpy as np
import pytest

import pad
import pad.mpi

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_send_recv_chain(comm, rng, dtype):
    r, p = comm.rank, comm.size
    x, y = rng.normal(size=5).astype(dtype), rng.normal(size=5).astype(dtype)

    def f(x, y):
        if r > 0:
            comm.Recv(y, r - 1, tag=3)
        if r < p - 1:
            comm.Send(x, r + 1, tag=3)

    tol = {"rtol": 1e-3, "atol": 1e-4} if dtype == np.float32 else {}
    pad.check_grad(f, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.zeros_like(y)), **tol)


def test_send_recv_adjoint_values(comm, everywhere):
    """Rank r's input gets rank r+1's seed; a rank that received has its seed consumed."""
    r, p = comm.rank, comm.size
    x, y = np.full(3, float(r)), np.zeros(3)
    dx, dy = np.full(3, 10.0 * r), np.full(3, float(r + 1))

    def f(x, y):
        if r > 0:
            comm.Recv(y, r - 1, tag=0)
        if r < p - 1:
            comm.Send(x, r + 1, tag=0)

    pad.autodiff(f, pad.Dup(x, dx), pad.Dup(y, dy))
    want_dx = 10.0 * r + (r + 2 if r < p - 1 else 0)
    want_dy = 0.0 if r > 0 else 1.0
    assert everywhere(np.all(dx == want_dx) and np.all(dy == want_dy))


def test_recv_any_source_and_partial(comm, rng):
    """A wildcard receive into a buffer longer than the message: only the received part is differentiated."""
    r, p = comm.rank, comm.size
    x, y = rng.normal(size=3), rng.normal(size=5)

    def f(x, y):
        comm.Send(x, (r + 1) % p, tag=r) if p > 1 else None
        if p > 1:
            comm.Recv(y, pad.mpi.ANY_SOURCE, pad.mpi.ANY_TAG)

    if p == 1:
        pytest.skip("needs a peer")
    if r % 2 == 0:  # even ranks send first: no cycle of blocking sends
        pad.check_grad(f, pad.Dup(x, np.zeros(3)), pad.Dup(y, np.zeros(5)))
    else:

        def g(x, y):
            comm.Recv(y, pad.mpi.ANY_SOURCE, pad.mpi.ANY_TAG)
            comm.Send(x, (r + 1) % p, tag=r)

        pad.check_grad(g, pad.Dup(x, np.zeros(3)), pad.Dup(y, np.zeros(5)))


def test_sendrecv_ring(comm, rng):
    r, p = comm.rank, comm.size
    x, y = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))

    def f(x, y):
        comm.Sendrecv(x, (r + 1) % p, 7, y, (r - 1) % p, 7)

    pad.check_grad(f, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.zeros_like(y)))


def test_integer_messages_pass_through(comm, rng):
    r, p = comm.rank, comm.size
    ix, iy, x = np.arange(4) + r, np.zeros(4, np.int64), rng.normal(size=2)

    def f(x):
        comm.Sendrecv(ix, (r + 1) % p, 1, iy, (r - 1) % p, 1)
        comm.Sendrecv(x, (r + 1) % p, 2, x.copy(), (r - 1) % p, 2)

    pad.check_grad(f, pad.Dup(x, np.zeros_like(x)))
    assert np.array_equal(iy, np.arange(4) + (r - 1) % p)


def test_reverse_of_send_is_recv(comm):
    r, p = comm.rank, comm.size
    x, y = np.ones(4), np.zeros(4)

    def f(x, y):
        comm.Sendrecv(x, (r + 1) % p, 4, y, (r - 1) % p, 4)

    with pad.mpi.trace() as events:
        pad.autodiff(f, pad.Dup(x, np.zeros(4)), pad.Dup(y, np.ones(4)))
    fwd = [(e.call, e.tag) for e in events if e.phase == "forward"]
    rev = [(e.call, e.where, e.nbytes) for e in events if e.phase == "reverse"]
    assert fwd == [("Sendrecv", 4)]
    assert rev == [("Sendrecv", f"-> {(r - 1) % p} <- {(r + 1) % p}", 32)]
