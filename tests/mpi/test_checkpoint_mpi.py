"""A checkpointed loop whose step exchanges halos (pad.mpi): every rank follows the same schedule, so the
reverse communication pairs up. The smoothing is a small NumPy op or a pad kernel launch."""

from __future__ import annotations

import math
import os
import signal

import numpy as np
import pytest

import pad
import pad.mpi
from pad import checkpoint, tape

M = 6  # interior cells per rank; u[0] and u[M + 1] are ghosts
pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]


def halo(comm, u):
    """Periodic ghost exchange: u[0] <- left neighbour's u[M], u[M+1] <- right neighbour's u[1]."""
    pad.mpi.Halo.structured(comm, (comm.size,), (M + 2,), ghost=1, periodic=True).exchange(u, "copy")


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
        v = ctx.writable(v)  # an array under differentiation is read-only to the program
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


@pytest.mark.parametrize("step", [_step, _kstep], ids=["numpy", "kernel"])
@pytest.mark.parametrize("nsteps,snapshots", [(1, 1), (9, 2), (40, 3)])
def test_checkpointed_halo_loop_matches_keep_everything(comm, everywhere, nsteps, snapshots, step):
    got, want = _grad(comm, nsteps, snapshots, step), _grad(comm, nsteps, None, step)
    ok = all(np.allclose(a, b, rtol=1e-13, atol=1e-15) for a, b in zip(got, want, strict=True))
    assert everywhere(ok and np.abs(got[0]).max() > 0), f"rank {comm.rank}: {got[0]} vs {want[0]}"


def test_checkpointed_halo_loop_check_grad(comm):
    rng = np.random.default_rng(10 + comm.rank)
    u = rng.uniform(0.0, 1.0, M + 2)
    pad.check_grad(
        lambda u, v: checkpoint.loop(_kstep, 6, comm, u, v, snapshots=2),
        pad.Dup(u, np.zeros(M + 2)),
        pad.Dup(np.zeros(M + 2), np.zeros(M + 2)),
    )


def _budget_grad(comm, nsteps, resumable=None, signal_at=None, stats=None, **opts):
    """(du, dv, u, v) of the halo loop's gradient as a ``while_loop`` with ``opts`` (a memory budget, say);
    rank 0 sends itself SIGTERM at its ``signal_at``-th step call."""
    rng = np.random.default_rng(comm.rank)
    u, v = rng.uniform(0.0, 1.0, M + 2), np.zeros(M + 2)
    du, dv = np.zeros(M + 2), np.zeros(M + 2)
    (dv if nsteps % 2 else du)[1 : M + 1] = 1.0 + comm.rank
    calls, count = [0], [0]

    def step(t, comm, u, v):
        calls[0] += 1
        if comm.rank == 0 and calls[0] == signal_at:
            os.kill(os.getpid(), signal.SIGTERM)
        count[0] = t + 1
        _kstep(t, comm, u, v)

    def more(comm, u, v):
        return count[0] < nsteps

    pad.autodiff(
        lambda u, v: checkpoint.while_loop(more, step, comm, u, v, resumable=resumable, stats=stats, **opts),
        pad.Dup(u, du),
        pad.Dup(v, dv),
    )
    return du, dv, u, v


def _same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


BUDGET = {"memory": 900}  # keeps three steps' records, then Mixed: 66 step calls for 20 steps


@pytest.mark.parametrize("memory", [700, 900, 1200, 2000])
def test_a_memory_budget_is_honoured_on_every_rank_with_the_same_bits(comm, everywhere, memory):
    """The measured peak stays within the budget (the halo's message buffers are no state: they are
    neither snapshotted nor counted), every step is kept where all fit (2000 bytes), and the gradient is
    keeping every step's, bit for bit."""
    want = _budget_grad(comm, 20)
    stats = checkpoint.Stats()
    got = _budget_grad(comm, 20, stats=stats, memory=memory)
    fits = memory >= 2000
    assert everywhere(stats.peak_memory <= memory and (stats.recomputed == 0) == fits), (
        f"rank {comm.rank}: peak {stats.peak_memory} in {memory}, {stats.recomputed} recomputed"
    )
    assert everywhere(stats.state_bytes == 2 * (M + 2) * 8), f"rank {comm.rank}: state {stats.state_bytes}"
    assert everywhere(_same(got, want)), f"rank {comm.rank}: {got[0]} vs {want[0]}"
