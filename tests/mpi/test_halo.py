"""The structured-mesh halo exchange (shared points summed, ghost layers copied)."""

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
