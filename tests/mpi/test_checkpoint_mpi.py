"""A checkpointed loop whose step exchanges halos: every rank follows the same schedule, so the reverse
communication pairs up. The halo exchange is a small test-only differentiable op on mpi4py (its adjoint is
the transposed exchange), standing in for pad.mpi, which is built on another branch; the smoothing is a
NumPy op or a pad kernel launch."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad
from pad import checkpoint, tape

MPI = pytest.importorskip("mpi4py.MPI")
M = 6  # interior cells per rank; u[0] and u[M + 1] are ghosts


class _HaloRecord:
    def __init__(self, comm, du):
        self.comm, self.du = comm, du

    def reverse(self):
        """Transpose: send each ghost's shadow back to its owner, which accumulates it; zero the ghosts."""
        comm, du = self.comm, self.du
        left, right = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size
        from_right, from_left = np.empty(1), np.empty(1)
        comm.Sendrecv(du[M + 1 :].copy(), dest=right, recvbuf=from_left, source=left)
        comm.Sendrecv(du[:1].copy(), dest=left, recvbuf=from_right, source=right)
        du[1] += from_left[0]
        du[M] += from_right[0]
        du[0] = du[M + 1] = 0.0


def halo(comm, u):
    """Periodic halo exchange: u[0] <- left neighbour's u[M], u[M+1] <- right neighbour's u[1]."""
    left, right = (comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size
    ctx = tape.current()
    if ctx is not None:
        ctx.will_write([u[:1], u[M + 1 :]])
    comm.Sendrecv(u[M : M + 1].copy(), dest=right, recvbuf=u[:1], source=left)
    comm.Sendrecv(u[1:2].copy(), dest=left, recvbuf=u[M + 1 :], source=right)
    if ctx is None:
        return
    du = ctx.shadow(u)
    if ctx.reverse_mode:
        ctx.record(_HaloRecord(comm, du))
    else:
        comm.Sendrecv(du[M : M + 1].copy(), dest=right, recvbuf=du[:1], source=left)
        comm.Sendrecv(du[1:2].copy(), dest=left, recvbuf=du[M + 1 :], source=right)


class _SmoothRecord:
    def __init__(self, u, du, dv):
        self.u, self.du, self.dv = u, du, dv

    def reverse(self):
        u, du, dv = self.u.value, self.du, self.dv
        g = dv[1 : M + 1].copy()
        dv[...] = 0.0
        du[1 : M + 1] += 0.6 * np.cos(u[1 : M + 1]) * g
        du[0:M] += 0.2 * np.cos(u[0:M]) * g
        du[2 : M + 2] += 0.2 * np.cos(u[2 : M + 2]) * g


def smooth(u, v):
    """v[i] = 0.2 sin(u[i-1]) + 0.6 sin(u[i]) + 0.2 sin(u[i+1]) on the interior; ghosts of v are zero."""
    ctx = tape.current()
    if ctx is not None and ctx.reverse_mode:
        kept = ctx.keep(u)
    if ctx is not None:
        ctx.will_write([v])
    s = np.sin(u[1 : M + 1])
    new = np.zeros_like(v)
    new[1 : M + 1] = 0.6 * s + 0.2 * np.sin(u[0:M]) + 0.2 * np.sin(u[2 : M + 2])
    v[...] = new
    if ctx is None:
        return
    du, dv = ctx.shadow(u), ctx.shadow(v)
    if ctx.reverse_mode:
        ctx.record(_SmoothRecord(kept, du, dv))
    else:
        t = np.zeros_like(v)
        t[1 : M + 1] = (
            0.6 * np.cos(u[1 : M + 1]) * du[1 : M + 1]
            + 0.2 * np.cos(u[0:M]) * du[0:M]
            + 0.2 * np.cos(u[2 : M + 2]) * du[2 : M + 2]
        )
        dv[...] = t


@pad.kernel
def _smooth(i, u, v):
    j = i + 1
    v[j] = 0.6 * math.sin(u[j]) + 0.2 * math.sin(u[j - 1]) + 0.2 * math.sin(u[j + 1])


def ksmooth(u, v):
    """``smooth`` as a kernel launch (the ghosts of v are left alone)."""
    pad.launch(_smooth, M, u, v)


def _step(t, comm, u, v, op=smooth):
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    halo(comm, src)
    op(src, dst)


def _kstep(t, comm, u, v):
    _step(t, comm, u, v, ksmooth)


def _grad(comm, nsteps, snapshots, step=_step):
    rng = np.random.default_rng(comm.rank)
    u, v = rng.uniform(0.0, 1.0, M + 2), np.zeros(M + 2)
    du, dv = np.zeros(M + 2), np.zeros(M + 2)
    last = dv if nsteps % 2 else du
    last[1 : M + 1] = 1.0 + comm.rank
    pad.autodiff(
        lambda u, v: checkpoint.loop(step, nsteps, comm, u, v, snapshots=snapshots),
        pad.Dup(u, du),
        pad.Dup(v, dv),
    )
    return du, u, v


def _all(ok: bool) -> bool:
    return bool(MPI.COMM_WORLD.allreduce(bool(ok), op=MPI.LAND))


@pytest.mark.mpi
@pytest.mark.parametrize("step", [_step, _kstep], ids=["numpy", "kernel"])
@pytest.mark.parametrize("nsteps,snapshots", [(1, 1), (9, 2), (40, 3)])
def test_checkpointed_halo_loop_matches_keep_everything(nsteps, snapshots, step):
    comm = MPI.COMM_WORLD
    got, want = _grad(comm, nsteps, snapshots, step), _grad(comm, nsteps, None, step)
    ok = all(np.allclose(a, b, rtol=1e-13, atol=1e-15) for a, b in zip(got, want, strict=True))
    assert _all(ok and np.abs(got[0]).max() > 0), f"rank {comm.rank}: {got[0]} vs {want[0]}"


@pytest.mark.mpi
def test_checkpointed_halo_loop_check_grad():
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(10 + comm.rank)
    u = rng.uniform(0.0, 1.0, M + 2)
    pad.check_grad(
        lambda u, v: checkpoint.loop(_kstep, 6, comm, u, v, snapshots=2),
        pad.Dup(u, np.zeros(M + 2)),
        pad.Dup(np.zeros(M + 2), np.zeros(M + 2)),
    )
