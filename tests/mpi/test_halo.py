"""The structured-mesh halo exchange (shared points summed, ghost layers copied)."""

import itertools

import numpy as np
import pytest

import pad
import pad.mpi

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


def grid(size, d):
    """A grid of ``size`` ranks in ``d`` (1 or 2) dimensions."""
    if d == 1:
        return (size,)
    return (size // 2, 2) if size % 2 == 0 else (size, 1)


@pytest.mark.parametrize("d", [1, 2])
def test_shared_points_sum(comm, rng, everywhere, d):
    """Every copy of a shared point ends up with the sum of all copies' values (corners included)."""
    dims, shape = grid(comm.size, d), (4,) * d
    halo = pad.mpi.Halo.structured(comm, dims, shape)
    a = np.full(shape, comm.rank + 1.0)
    halo.exchange(a, "sum")
    # a point on a block corner shared by m blocks holds the sum of their ranks + 1; check the interior
    # and, on a 1-D chain, the shared ends
    interior = a[(slice(1, -1),) * d]
    ok = np.all(interior == comm.rank + 1.0)
    if d == 1 and comm.size > 1:
        left = comm.rank + 1.0 + (comm.rank if comm.rank > 0 else 0)
        ok = ok and a[0] == left
    assert everywhere(ok)
    x = rng.normal(size=shape)
    pad.check_grad(lambda x: halo.exchange(x, "sum"), pad.Dup(x, np.zeros_like(x)))


@pytest.mark.parametrize("periodic", [False, True])
def test_ghost_copy(comm, rng, everywhere, periodic):
    dims, w = grid(comm.size, 2), 1
    halo = pad.mpi.Halo.structured(comm, dims, (5, 4), ghost=w, periodic=periodic)
    a = np.full((5, 4), -1.0)
    a[1:-1, 1:-1] = comm.rank
    halo.exchange(a, "copy")
    me = np.unravel_index(comm.rank, dims)
    up = (me[0] - 1) % dims[0] if periodic else me[0] - 1
    want = -1.0 if up < 0 else float(np.ravel_multi_index((up, me[1]), dims))
    assert everywhere(np.all(a[0, 1:-1] == want))
    x = rng.normal(size=(5, 4))
    pad.check_grad(lambda x: halo.exchange(x, "copy"), pad.Dup(x, np.zeros_like(x)))


def test_bad_grid(comm):
    with pytest.raises(ValueError, match="ranks"):
        pad.mpi.Halo.structured(comm, (comm.size + 1,), (3,))


# ------------------------------------------------------------------ hand-built links, fields, shared copies
def agree_on_dot(comm, f, x, rng):
    """The dot-product identity ``<J v, w> == <v, J^T w>`` of the linear map ``f`` (in place on ``x``),
    summed over ranks, with random tangent ``v`` and seed ``w``; and ``J v`` equals ``f`` applied to ``v``."""
    v, w = rng.normal(size=x.shape), rng.normal(size=x.shape)
    jv = v.copy()
    pad.fwddiff(f, pad.Dup(x.copy(), jv))
    jtw = w.copy()
    pad.autodiff(f, pad.Dup(x.copy(), jtw))
    fv = v.copy()
    f(fv)
    lhs = comm.mpi.allreduce(float(np.vdot(jv, w)))
    rhs = comm.mpi.allreduce(float(np.vdot(v, jtw)))
    assert abs(lhs) > 1e-3  # non-trivial seeds
    return bool(np.isclose(lhs, rhs, rtol=1e-12, atol=0.0) and np.array_equal(jv, fv))


def ring_links(comm, kind, n):
    """Each rank sends two points to its right neighbour and receives two into its ghosts ``n, n + 1`` from
    its left one: a send-only link and a receive-only link (``None`` regions), as index arrays or slices."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    if kind == "index":
        send, recv = np.array([4, 1]), np.array([n + 1, n])
    else:
        send, recv = (slice(1, 3),), (slice(n, n + 2),)
    return [(right, send, None, 5, 0), (left, None, recv, 0, 5)], send, recv


def ring_values(rank, fields, n):
    """Three fields of ``n`` points and two ghosts: ``100 * rank + 10 * field + point``."""
    return 100.0 * rank + 10.0 * np.arange(fields)[:, None] + np.arange(n + 2)[None, :]


@pytest.mark.parametrize("kind", ["index", "slices"])
@pytest.mark.parametrize("op", ["copy", "sum"])
def test_hand_built_regions_move_all_fields(comm, rng, everywhere, kind, op):
    """Regions of the trailing axis (an index array or a tuple of slices); the leading axis holds three fields
    that travel in one message per link; a ``None`` region sends or receives nothing."""
    n, fields = 6, 3
    links, send, recv = ring_links(comm, kind, n)
    halo = pad.mpi.Halo(comm, links)
    a = ring_values(comm.rank, fields, n)
    want = a.copy()
    left = ring_values((comm.rank - 1) % comm.size, fields, n)
    at = (lambda r: (Ellipsis, *r)) if kind == "slices" else (lambda r: (Ellipsis, r))
    want[at(recv)] = left[at(send)] + (want[at(recv)] if op == "sum" else 0.0)
    x = a.copy()
    with pad.mpi.trace() as events:
        pad.autodiff(lambda a: halo.exchange(a, op), pad.Dup(x, np.zeros_like(x)))
    calls = sorted(e.call for e in events if e.phase == "forward" and e.call in ("Isend", "Irecv"))
    halo.exchange(a, op)
    assert everywhere(np.array_equal(a, want) and np.array_equal(x, want) and calls == ["Irecv", "Isend"])
    assert everywhere(agree_on_dot(comm, lambda a: halo.exchange(a, op), a, rng))


def sharers(comm, dims, shape):
    """For each point of this rank's block (``ghost=0``): ``[(rank, index of the point in that rank's block)]``
    of every block that holds it, this one included."""
    me = np.array(np.unravel_index(comm.rank, dims))
    out = {}
    for idx in np.ndindex(*shape):
        options = []
        for k, (p, n) in enumerate(zip(idx, shape, strict=True)):
            options.append(
                [0]
                + ([-1] if p == 0 and me[k] > 0 else [])
                + ([1] if p == n - 1 and me[k] < dims[k] - 1 else [])
            )
        out[idx] = [
            (
                int(np.ravel_multi_index(tuple(me + off), dims)),
                tuple(p - o * (n - 1) for p, o, n in zip(idx, off, shape, strict=True)),
            )
            for off in itertools.product(*options)
        ]
    return out


def block_values(rank, shape, fields):
    """``(fields, *shape)`` values that name the rank, the field and the point."""
    flat = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return np.stack([1e5 * f + 1e3 * rank + flat for f in range(fields)])


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("op", ["copy", "sum"])
def test_shared_points_with_fields(comm, rng, everywhere, d, op):
    """``ghost=0``: "sum" gives every copy of a shared point the sum of all copies (corners of up to 4
    blocks included); "copy" gives every copy the highest sharer's value, sending only to lower ranks and
    receiving only from higher ones. Two fields in one message."""
    dims, shape, fields = grid(comm.size, d), ((4, 3) if d == 2 else (5,)), 2
    halo = pad.mpi.Halo.structured(comm, dims, shape)
    assert halo.shared
    a = block_values(comm.rank, shape, fields)
    want = np.empty_like(a)
    for idx, holders in sharers(comm, dims, shape).items():
        if op == "copy":
            rank, at = max(holders)
            want[(slice(None), *idx)] = block_values(rank, shape, fields)[(slice(None), *at)]
        else:
            want[(slice(None), *idx)] = sum(
                block_values(r, shape, fields)[(slice(None), *at)] for r, at in holders
            )
    x = a.copy()
    with pad.mpi.trace() as events:
        pad.autodiff(lambda a: halo.exchange(a, op), pad.Dup(x, np.zeros_like(x)))
    peers = [
        (e.call, int(e.where.split()[1]))
        for e in events
        if e.phase == "forward" and e.call in ("Isend", "Irecv")
    ]
    if op == "copy":
        direction = all(r < comm.rank if call == "Isend" else r > comm.rank for call, r in peers)
    else:
        direction = len(peers) == 2 * len(halo.links)
    halo.exchange(a, op)
    assert everywhere(np.array_equal(a, want) and np.array_equal(x, want) and direction)
    assert everywhere(agree_on_dot(comm, lambda a: halo.exchange(a, op), a, rng))


@pytest.mark.parametrize("shared", [False, True])
def test_shared_flag_of_hand_built_links(comm, rng, everywhere, shared):
    """A 1-D chain whose blocks share their end points, built by hand with index arrays: with
    ``shared=True`` a copy gives both copies the higher rank's value; without it the two ranks swap values."""
    n = 5
    links = []
    if comm.rank + 1 < comm.size:
        links.append((comm.rank + 1, np.array([n - 1]), np.array([n - 1]), 1, 2))
    if comm.rank > 0:
        links.append((comm.rank - 1, np.array([0]), np.array([0]), 2, 1))
    halo = pad.mpi.Halo(comm, links, shared=shared)
    a = 10.0 * comm.rank + np.arange(n, dtype=np.float64)
    want = a.copy()
    if comm.rank > 0 and not shared:
        want[0] = 10.0 * (comm.rank - 1) + n - 1  # the left neighbour's last point
    if comm.rank + 1 < comm.size:
        want[n - 1] = 10.0 * (comm.rank + 1)  # the right neighbour's first point, in both modes
    halo.exchange(a, "copy")
    assert everywhere(np.array_equal(a, want))
    assert everywhere(agree_on_dot(comm, lambda a: halo.exchange(a, "copy"), a, rng))


@pytest.mark.parametrize("periodic", [False, True])
def test_ghost_layers_with_fields(comm, rng, everywhere, periodic):
    """``ghost=1`` on a ``(2, 5, 4)`` array: both fields' ghost rows come from the neighbour above."""
    dims = grid(comm.size, 2)
    halo = pad.mpi.Halo.structured(comm, dims, (5, 4), ghost=1, periodic=periodic)
    assert not halo.shared
    a = np.full((2, 5, 4), -1.0)
    a[:, 1:-1, 1:-1] = comm.rank + np.array([0.0, 0.5])[:, None, None]
    halo.exchange(a, "copy")
    me = np.unravel_index(comm.rank, dims)
    up = (me[0] - 1) % dims[0] if periodic else me[0] - 1
    above = float(np.ravel_multi_index((up, me[1]), dims)) if up >= 0 else None
    ok = all(np.all(a[f, 0, 1:-1] == (-1.0 if above is None else above + 0.5 * f)) for f in range(2))
    assert everywhere(ok)
    assert everywhere(agree_on_dot(comm, lambda a: halo.exchange(a, "copy"), a, rng))
