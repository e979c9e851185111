"""A checkpointed loop whose step exchanges halos (pad.mpi): every rank follows the same schedule, so the
reverse communication pairs up. The smoothing is a small NumPy op or a pad kernel launch."""

from __future__ import annotations

import errno
import hashlib
import math
import os
import signal

import numpy as np
import pytest

import pad
import pad.mpi
from pad import checkpoint, tape
from pad.checkpoint import resume as saves
from tests.time_limits import PassesAfter

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


def _uneven(rank):
    """Interior cells of a rank in the uneven halo loop: the ranks' states differ several times over."""
    return 4 + 40 * rank


def _uneven_grad(comm, nsteps, while_, given=False, **opts):
    """((du, dv, u, v), Stats) of the halo loop (kernel step) with ``_uneven(rank)`` cells on each rank, as
    a ``loop`` or a ``while_loop``; ``given``: its communicator passed as ``comm=``."""
    m = _uneven(comm.rank)
    rng = np.random.default_rng(comm.rank)
    u, v = rng.uniform(0.0, 1.0, m + 2), np.zeros(m + 2)
    du, dv = np.zeros(m + 2), np.zeros(m + 2)
    (dv if nsteps % 2 else du)[1 : m + 1] = 1.0 + comm.rank
    stats, count = checkpoint.Stats(), [0]

    def step(t, comm, u, v):
        count[0] = t + 1
        src, dst = (u, v) if t % 2 == 0 else (v, u)
        pad.mpi.Halo.structured(comm, (comm.size,), (len(src),), ghost=1, periodic=True).exchange(src, "copy")
        pad.launch(_smooth, len(src) - 2, src, dst)

    if given:
        opts["comm"] = comm

    def run(u, v):
        if while_:
            checkpoint.while_loop(lambda *_: count[0] < nsteps, step, comm, u, v, stats=stats, **opts)
        else:
            checkpoint.loop(step, nsteps, comm, u, v, stats=stats, **opts)

    pad.autodiff(run, pad.Dup(u, du), pad.Dup(v, dv))
    return (du, dv, u, v), stats


@pytest.mark.parametrize(
    "while_,states,given",
    [
        (False, 4, False),
        (True, 4, False),
        (False, 9, False),
        (True, 9, False),
        (False, 4, True),
        (True, 40, True),
    ],
)
def test_ranks_of_uneven_sizes_follow_one_schedule_within_the_budget(comm, everywhere, while_, states, given):
    """Each rank holds a state of its own size, the budget is ``states`` copies of the largest: a rank
    deciding on its own sizes would keep every step where another recomputes, and their reverse messages
    would not pair up (a hang). The ranks decide on the largest sizes among them, over the communicator
    the halo's messages record (or ``comm=``): the same schedule and step calls everywhere, each rank's
    peak within the budget, and keeping every step's gradient, bit for bit."""
    memory = states * 16 * (_uneven(comm.size - 1) + 2)
    want, _ = _uneven_grad(comm, 20, while_)
    got, stats = _uneven_grad(comm, 20, while_, memory=memory, given=given)
    done = (stats.schedule, stats.steps, stats.snapshots_peak, sorted(stats.schedules.items()))
    every = comm.mpi.allgather(done)
    assert everywhere(all(d == every[0] for d in every)), every
    assert everywhere(stats.peak_memory <= memory), f"rank {comm.rank}: peak {stats.peak_memory} in {memory}"
    assert everywhere((stats.recomputed == 0) == (states >= 40)), f"rank {comm.rank}: {done}"
    assert everywhere(_same(got, want)), f"rank {comm.rank}: {got[0]} vs {want[0]}"


def test_a_budget_too_small_for_one_rank_is_refused_by_every_rank(comm, everywhere):
    """The last rank's state does not fit where the first rank's would: every rank raises ``BudgetError``
    (none goes on alone, to wait for the others' messages)."""
    if comm.size == 1:
        pytest.skip("needs two ranks or more")
    memory = 3 * 16 * (_uneven(0) + 2)
    with pytest.raises(checkpoint.BudgetError) as refused:
        _uneven_grad(comm, 20, False, memory=memory)
    assert everywhere("is too small for this loop" in str(refused.value)), str(refused.value)


def _folder(comm, tmp_path_factory):
    return comm.mpi.bcast(str(tmp_path_factory.mktemp("resume")) if comm.rank == 0 else None)


def _stop(comm, folder, **how):
    """Run until stopped (``Resumable`` options and ``signal_at`` in ``how``); where it stopped, on
    every rank."""
    signal_at = how.pop("signal_at", None)
    clock_after = how.pop("clock_after", None)
    with checkpoint.Resumable(folder, comm=comm, **how) as r:
        if clock_after is not None and comm.rank == comm.size - 1:
            r.clock = PassesAfter(clock_after)
        try:
            _budget_grad(comm, 20, resumable=r, signal_at=signal_at, **BUDGET)
        except checkpoint.Stopped as stop:
            return stop.where
    return None


def _resume(comm, folder, **how):
    with checkpoint.Resumable(folder, comm=comm, resume=True, **how) as r:
        return _budget_grad(comm, 20, resumable=r, **BUDGET)


def _agreed_where(comm, where):
    every = comm.mpi.allgather(where)
    return every[0] if len(set(every)) == 1 else f"ranks disagree: {every}"


@pytest.mark.parametrize(
    "how,part",
    [
        ({"signal_at": 5}, "forward sweep"),
        ({"signal_at": 30}, "reverse pass"),
        ({"time_limit": 1.0, "clock_after": 4}, "forward sweep"),
        ({"time_limit": 1.0, "clock_after": 30}, "reverse pass"),
    ],
    ids=["sigterm-forward", "sigterm-reverse", "time-limit-forward", "time-limit-reverse"],
)
def test_a_stop_on_one_rank_stops_every_rank_and_the_run_resumes_to_the_same_bits(
    comm, everywhere, tmp_path_factory, how, part
):
    """SIGTERM, or the time limit, reaches one rank only: every rank saves at the same step; the resumed
    run's gradient is the uninterrupted run's, bit for bit, on every rank, and it leaves nothing."""
    folder = _folder(comm, tmp_path_factory)
    want = _budget_grad(comm, 20, **BUDGET)
    where = _agreed_where(comm, _stop(comm, folder, **how))
    assert where is not None and part in where, where
    got = _resume(comm, folder)
    assert everywhere(_same(got, want)), f"rank {comm.rank}: {got[0]} vs {want[0]}"
    comm.Barrier()
    assert everywhere(not os.listdir(folder)), os.listdir(folder)


def _digest(folder):
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                out[os.path.relpath(os.path.join(root, name), folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def test_a_save_from_another_rank_count_is_refused_and_kept(comm, everywhere, tmp_path_factory):
    """The ranks split in two groups of other sizes: each refuses the save, naming the rank counts; the
    save is left as it was and the whole communicator then resumes it."""
    if comm.size == 1:
        pytest.skip("needs two ranks or more")
    folder = _folder(comm, tmp_path_factory)
    want = _budget_grad(comm, 20, **BUDGET)
    assert _stop(comm, folder, signal_at=5) is not None
    comm.Barrier()
    before = _digest(folder)
    group = comm.mpi.Split(int(comm.rank == 0), comm.rank)
    size = group.Get_size()
    try:
        with pytest.raises(checkpoint.ResumeError) as refused:
            checkpoint.Resumable(folder, comm=group, resume=True)
    finally:
        group.Free()
    said = str(refused.value)
    assert everywhere(f"{comm.size} ranks (this run has {size})" in said), said
    comm.Barrier()
    assert everywhere(_digest(folder) == before)
    assert everywhere(_same(_resume(comm, folder), want))


def test_a_damaged_save_on_one_rank_is_refused_by_every_rank(comm, everywhere, tmp_path_factory):
    """The last rank's part of the save is damaged: every rank refuses it (none goes on alone, to wait for
    the others), the last rank's error naming the file, and nothing is changed."""
    folder = _folder(comm, tmp_path_factory)
    assert _stop(comm, folder, signal_at=5) is not None
    comm.Barrier()
    if comm.rank == comm.size - 1:
        part = os.path.join(folder, f"rank-{comm.rank}", "save-1")
        largest = max(
            (os.path.join(part, n) for n in os.listdir(part) if n.endswith(".npy")), key=os.path.getsize
        )
        with open(largest, "r+b") as fh:
            fh.seek(-1, os.SEEK_END)
            last = fh.read(1)
            fh.seek(-1, os.SEEK_END)
            fh.write(bytes([last[0] ^ 0xFF]))
    comm.Barrier()
    before = _digest(folder)
    with pytest.raises(checkpoint.ResumeError) as refused:
        _resume(comm, folder)
    said = str(refused.value)
    assert everywhere(f"rank {comm.size - 1}'s save 1" in said and "checksum" in said), said
    comm.Barrier()
    assert everywhere(_digest(folder) == before)


_HIDDEN = {}


def _count_hidden():
    """A write to an array that the loop's arguments and step do not reach (the step calls this)."""
    counter = _HIDDEN.setdefault("calls", np.zeros(1))
    tape.current().will_write([counter])
    counter += 1.0


def test_a_save_that_one_rank_cannot_name_fails_on_every_rank(comm, everywhere, tmp_path_factory):
    """The last rank's step writes an array the save cannot name: every rank raises (none waits for the
    others), the others naming that rank, and the directory holds no save."""
    folder = _folder(comm, tmp_path_factory)
    last = comm.rank == comm.size - 1

    def step(t, comm, u, v):
        if t == 2 and comm.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        if last:
            _count_hidden()
        _kstep(t, comm, u, v)

    u, v = np.linspace(0.0, 1.0, M + 2), np.zeros(M + 2)
    with checkpoint.Resumable(folder, comm=comm) as r, pytest.raises(ValueError) as failed:
        pad.autodiff(
            lambda u, v: checkpoint.loop(step, 10, comm, u, v, resumable=r, **BUDGET),
            pad.Dup(u, np.ones(M + 2)),
            pad.Dup(v, np.zeros(M + 2)),
        )
    said = str(failed.value)
    named = "is not reachable from the loop's arguments" in said
    assert everywhere(named and (last or f"rank {comm.size - 1}: " in said)), said
    comm.Barrier()
    assert everywhere(not os.path.exists(os.path.join(folder, "pad-run.json")))


def test_a_disk_that_fills_on_one_rank_fails_the_save_on_every_rank(
    comm, everywhere, tmp_path_factory, monkeypatch
):
    """The last rank's disk is full while the second save is written: every rank raises ``SaveError``
    naming that rank, and the directory still holds the first save, which then resumes on all of them."""
    folder = _folder(comm, tmp_path_factory)
    want = _budget_grad(comm, 20, **BUDGET)
    assert _stop(comm, folder, signal_at=5) is not None
    if comm.rank == comm.size - 1:

        def full(*_, **__):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(saves.np, "save", full)
    with pytest.raises(checkpoint.SaveError) as failed:
        _stop(comm, folder, resume=True, signal_at=3)
    monkeypatch.undo()
    said = str(failed.value)
    at = f"rank {comm.size - 1}: " if comm.size > 1 else ""
    assert everywhere(f"({at}No space left on device); it still holds save 1" in said), said
    comm.Barrier()
    assert everywhere(sorted(os.listdir(os.path.join(folder, f"rank-{comm.rank}"))) == ["save-1"])
    assert everywhere(_same(_resume(comm, folder), want))


def _reduce_step(t, comm, u, v):
    """A kernel launch, then an Allreduce in place: a step that makes no new arrays, so ``replay`` records it."""
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    ksmooth(src, dst)
    comm.Allreduce(pad.mpi.IN_PLACE, dst, pad.mpi.SUM)


def _halo_step(t, halo, u, v):
    """A ghost exchange, then a kernel launch: the exchange's message buffers are the ``Halo``'s, made in its
    first exchange, so later steps make no new arrays and ``replay`` records them."""
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    halo.exchange(src, "copy")
    ksmooth(src, dst)


@pytest.mark.parametrize("step", [_reduce_step, _halo_step])
def test_a_replayed_loop_replays_the_steps_that_communicate(comm, everywhere, step):
    """The ranks of a checkpointed loop agree on each replay, so a step that communicates over all of them
    is replayed on all of them (its messages with it): steps replayed on every rank count, and the gradient
    is the one without replays, to the last bit."""
    ranks = pad.mpi.Halo.structured(comm, (comm.size,), (M + 2,), ghost=1, periodic=True)
    with_ = comm if step is _reduce_step else ranks

    def grad(replay):
        rng = np.random.default_rng(comm.rank)
        u, v = rng.uniform(0.0, 1.0, M + 2), np.zeros(M + 2)
        du, dv = np.zeros(M + 2), np.ones(M + 2)
        stats = checkpoint.Stats()
        pad.autodiff(
            lambda u, v: checkpoint.loop(step, 12, with_, u, v, snapshots=3, replay=replay, stats=stats),
            pad.Dup(u, du),
            pad.Dup(v, dv),
        )
        return du, stats

    (got, stats), (want, _) = grad(lambda t: t % 2), grad(None)
    replayed = (stats.replayed, stats.replayed_forward)
    assert everywhere(np.array_equal(got, want) and min(replayed) > 0), (replayed, np.abs(got - want).max())
