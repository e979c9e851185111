"""Running a checkpointed loop inside ``autodiff``: its steps, a schedule's actions, and the reverse pass.

Three ways to run the steps forward:
- ``record``: each step recorded as it runs (keep-all, or while a memory budget holds the records); a
  snapshot of the start is kept if anything may have to be recomputed;
- an offline schedule of ``checkpoint_schedules`` (``Sweep``): Revolve/Multistage, Mixed, two-level;
- ``dynamic``: unrecorded steps with snapshots placed online (``plan.Dynamic``).
Whatever ran forward, the reverse pass (``Loop.reverse_from``) walks down from the last step: a recorded step
is reversed at once, otherwise the gap back to the nearest snapshot is reversed by the schedule that fits
the memory left; a schedule whose sizes outgrow the room it was chosen in is given up there and the rest
reversed that way. A resumed run starts from what was saved and goes on the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from checkpoint_schedules import (
    CheckpointSchedule,
    Copy,
    EndForward,
    EndReverse,
    Forward,
    Move,
    Reverse,
    StorageType,
)

from pad import arrays, tape
from pad.checkpoint.plan import Choice, Dynamic, Sizes, choose
from pad.checkpoint.sizes import format_size
from pad.checkpoint.store import Store, _root
from pad.parallel import LaunchRecord
from pad.replay import Recording
from pad.tasks import unguarded


@dataclass
class Stats:
    """What a checkpointed loop did: pass ``stats=Stats()`` to ``loop``/``while_loop``.

    Complete once the loop's reverse pass has run (counts add up over the sessions of a resumed run).
    """

    nsteps: int = 0  # steps of the loop
    steps: int = 0  # step calls in all: first sweep, recomputations and the recorded re-runs
    snapshots_peak: int = 0  # most snapshots held at once
    peak_bytes: int = 0  # most snapshot bytes held at once (in memory or on disk)
    state_bytes: int = 0  # bytes of one copy of the state (the arrays the steps overwrite)
    schedule: str = "keep-all"  # the schedule that ran: keep-all, revolve, mixed, two-level, online ...
    memory: int | None = None  # the memory budget, bytes
    peak_memory: int = 0  # measured: most bytes held at once (snapshots, final state, kept records)
    peak_disk_bytes: int = 0  # most bytes of snapshots on disk at once
    snapshot_bytes: int = 0  # bytes of the largest snapshot (what its step reads of the state)
    record_bytes: int = 0  # bytes the records of one step keep (the largest)
    sessions: int = 1  # runs it took: 1 + the times it was stopped and resumed
    schedules: dict[str, int] = field(default_factory=dict)  # steps reversed under each schedule
    replayed: int = 0  # adjoint steps replayed from a record (``replay``)
    replayed_forward: int = 0  # unrecorded steps replayed from a record (``replay``)
    records: bool = True  # whether steps' records were kept (False: replayed on a GPU, snapshots only)

    @property
    def recomputed(self) -> int:
        """Step calls beyond the first sweep."""
        return self.steps - self.nsteps


class BudgetError(ValueError):
    """A memory budget too small for any schedule of this loop."""


class _Watched(list):
    """A step's records, each shown to ``watch`` as it is added (also from task threads)."""

    def __init__(self, watch: Callable[[Any], None]) -> None:
        super().__init__()
        self._watch = watch

    def append(self, rec: Any) -> None:
        self._watch(rec)
        super().append(rec)


class _Records(dict):
    """The records of a loop's recorded steps, by step: a step's leaving is shown to ``gone`` (its step,
    or None for every step)."""

    def __init__(self, gone: Callable[[int | None], None]) -> None:
        super().__init__()
        self._gone = gone

    def pop(self, t: Any, *default: Any) -> Any:
        self._gone(t)
        return super().pop(t, *default)

    def __delitem__(self, t: Any) -> None:
        self._gone(t)
        super().__delitem__(t)

    def clear(self) -> None:
        self._gone(None)
        super().clear()


def _record_bytes(records: list[Any], roots: set[int]) -> int:
    """Bytes the kept values of a step's ``records`` hold by themselves: their copies, and the copies
    they will make when the state arrays they alias are overwritten (values an earlier step's records also
    keep are counted: the step's records alone would hold them)."""
    total, seen = 0, set()
    for rec in records:
        if not isinstance(rec, LaunchRecord):
            continue
        for kept in rec.kept.values():
            if id(kept) in seen:
                continue
            seen.add(id(kept))
            if kept.copied or id(_root(kept.array)) in roots:
                total += int(kept.array.nbytes)
    return total


@dataclass
class Options:
    snapshots: int | None = None
    memory: int | None = None
    storage: str = "memory"
    directory: str | None = None
    resumable: Any = None  # a pad.checkpoint.Resumable
    replay: Callable[[int], Any] | None = None  # the phase of step t: adjoint steps of one phase are replayed
    comm: Any = None  # the communicator whose ranks decide alike (None: learned from the steps' records)


_LIVE, _RECORD, _REPLAY = 0, 1, 2
"""A step's choice (``Loop._replayed``); the ranks of a loop take the least of theirs."""
_REFUSED, _UNSURE, _WORTH = 0, 1, 2
"""A step's record: never replayable, not now (it made arrays: the next step of its phase is recorded
again), or to replay."""


@dataclass
class _Replay:
    """The device work of an adjoint step (step ``t`` recorded and reversed at once), and the memory it
    writes: a replay is valid only while no value kept for the reverse pass lies there."""

    work: Recording
    written: list[tuple]  # ``arrays.extent`` of each array it writes
    checked: int = -1  # the context's ``live_version`` when no kept value was found there


class Loop:
    """A checkpointed loop's step, arguments, snapshots, records and counters."""

    def __init__(self, ctx: tape.Context, step: Callable[..., Any], args: tuple, opts: Options, stats: Stats):
        from pad.checkpoint.layout import Layout

        self.ctx, self.step, self.args, self.opts, self.stats = ctx, step, args, opts, stats
        self.stats.memory = opts.memory
        self._folder: str | None = None
        self.store = Store(ctx, folder=self.folder, spares=opts.memory is None)
        self.layout = Layout(args, ctx.is_scratch)
        self.records: dict[int, list[Any]] = _Records(self._forget)
        # the copies the recorded steps' kept values hold (measured): each step's account lies within it
        self.kept = tape.Account()
        # per recorded step while its records are kept: its account (the copies its kept values hold,
        # measured), at its end what they held and would still copy when the state arrays they alias are
        # overwritten (the step's record size), and what it owes (that, less what its account holds, at
        # least 0); the steps' debts summed, and the step of each account
        self.owing: dict[int, list[Any]] = {}
        self._owed = 0
        self._step_of: dict[tape.Account, int] = {}
        self.sizes = Sizes()
        self.protected: set[int] = set()  # snapshots kept to the end (a resumable run's start)
        self.progress = 0  # steps run or reversed in this session
        self.serial = ctx.serial  # shadows registered before the loop (see ``resume``)
        self.dynamic: Dynamic | None = None
        self.recording = False  # the forward records every step (keep-all) for now
        self.planning = False  # an expected step count: records stay until a schedule is planned
        self.comm = opts.comm if opts.comm is not None else getattr(opts.resumable, "comm", None)
        self._comm_given = self.comm is not None
        self.switched = False
        self.replays: dict[Any, _Replay | None] = {}  # by kind and phase: a record to replay, or None
        self._device_state: bool | None = None  # whether the state is in GPU memory (known once written)
        # the snapshot files: removed at the end of the reverse pass, after an error, or when forgotten
        self._remove = weakref.finalize(self, shutil.rmtree, "", True)
        self._remove.detach()

    # -- places ----------------------------------------------------------------------------------------
    def folder(self) -> str:
        """The folder of this loop's snapshot files, made on first use (removed with the loop)."""
        if self._folder is None:
            base = self.opts.directory
            if base is None and self.opts.resumable is not None:
                base = self.opts.resumable.rank_directory()
            if base is not None:
                os.makedirs(base, exist_ok=True)
            self._folder = tempfile.mkdtemp(prefix="pad-checkpoint-", dir=base)
            self._remove = weakref.finalize(self, shutil.rmtree, self._folder, True)
        return self._folder

    def close(self) -> None:
        self.store.close()
        self.records.clear()
        self.replays.clear()
        self._remove()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Observe the steps' writes; on an error let the snapshots go before it propagates."""
        try:
            with self.ctx.before_writes(self.store.capture):
                yield
        except BaseException:
            self.close()
            raise

    # -- steps -----------------------------------------------------------------------------------------
    def advance(self, t: int, record: bool) -> None:
        """Run step ``t``, recorded (kept in ``records[t]``) or not; with ``replay``, an unrecorded step is
        replayed from a record of an earlier one of its phase where it can be (``_replayed``)."""
        if record or self.opts.replay is None:
            self._run_step(t, record)
        else:
            self._replayed("forward", t, lambda: self._run_step(t, record=False), progress=1)

    def _run_step(self, t: int, record: bool) -> None:
        self.stats.steps += 1
        store = self.store
        store.begin_step()
        if record:
            recs = _Watched(self.watch)
            account = tape.Account(within=self.kept)
            with tape.recording_into(recs), tape.accounting(account):
                self.step(t, *self.args)
            self.records[t] = recs
        else:
            with tape.unrecorded(self.watch):
                self.step(t, *self.args)
        self.layout.check(t)
        store.end_step()
        if record:
            roots = {id(r) for r in store.roots()}
            bound = _record_bytes(recs, roots)
            self.sizes.record = max(self.sizes.record, account.bytes, bound)
            self._forget(t)  # a step recorded again
            self.owing[t] = [account, bound, 0]
            self._step_of[account] = t
            self._reckon(t)
        self.progress += 1
        self.track()

    def adjoint_step(self, t: int) -> None:
        """Step ``t`` run recorded and reversed at once, as Revolve's and Mixed's schedules end a gap (and
        every schedule runs a gap of one step)."""

        def run() -> None:
            self.advance(t, record=True)
            self.reverse_step(t)

        if self.opts.replay is None:
            run()
        else:
            self._replayed("adjoint", t, run, progress=2)

    def _replayed(self, kind: str, t: int, run: Callable[[], None], progress: int) -> None:
        """Run step ``t`` (``run``: an unrecorded ``forward`` step, or an ``adjoint`` one) or replay it.

        The device work of the first such step of a phase that does nothing but its own work (no snapshot
        waiting on its writes, no shadow made, no state array found, no earlier step's kept value copied)
        is recorded, and later steps of that kind and phase replay it (on a GPU as one CUDA graph) without
        the step's and the tape's Python, while no kept value lies in memory it writes.

        Ranks of a loop that communicates (its communicator spans several) agree on each choice, replay,
        record or run as it is, and on each record's worth: a step replayed on every rank repeats the
        messages it recorded on every rank, so the step's messages may be recorded with it.
        """
        key = (kind, self.opts.replay(t))  # type: ignore[misc]
        done = self.replays.get(key)
        quiet = self.store.quiet()
        agreeing = self._ranks() > 1
        if done is not None and quiet and self._free_of_kept(done):
            choice = _REPLAY
        else:
            choice = _RECORD if key not in self.replays and quiet else _LIVE
        if agreeing:
            choice = self._agree(choice)
        if choice == _REPLAY:
            self.stats.steps += 1
            if kind == "adjoint":
                self.stats.replayed += 1
            else:
                self.stats.replayed_forward += 1
            self.store.begin_step()
            done.work.replay()  # type: ignore[union-attr]
            self.store.end_step()
            self.progress += progress
            self.track()
            return
        if choice == _LIVE:
            run()
            if not agreeing and self._ranks() > 1:
                self._agree(_UNSURE)  # the ranks that recorded this step learnt of the others only now
            return
        ctx, store = self.ctx, self.store
        zeroed, joined, live = ctx.zeroed, store.joined, ctx.live_kept()
        work, written = Recording(ranks=self._ranks()), dict[int, tuple]()

        def note(targets: list[Any], _: Any) -> None:
            for a in targets:
                r = arrays.root(a)
                written.setdefault(id(r), arrays.extent(r))

        with work.making(), ctx.before_writes(note):
            run()
        clean = ctx.zeroed == zeroed and store.joined == joined and live <= ctx.live_kept()
        worth = _REFUSED if work.why is not None else _WORTH if clean else _UNSURE
        if self._ranks() > 1:
            worth = self._agree(worth)
        if worth == _WORTH:
            self.replays[key] = _Replay(work, list(written.values()))
        elif worth == _REFUSED:
            self.replays[key] = None  # its device work cannot be replayed: it runs as it is from now on

    def _ranks(self) -> int:
        """How many ranks the loop's communicator spans (1 where none is known)."""
        return 1 if self.comm is None else self.comm.Get_size()

    def _agree(self, value: int) -> int:
        """The least of ``value`` over the loop's ranks."""
        from mpi4py import MPI

        return int(self.comm.allreduce(value, op=MPI.MIN))  # type: ignore[union-attr]

    def _free_of_kept(self, done: _Replay) -> bool:
        """Whether no kept value lies in memory ``done`` writes (cached while the kept values stay)."""
        version = self.ctx.live_version
        if done.checked != version:
            if self.ctx.keeps_within(done.written):
                return False
            done.checked = version
        return True

    def watch(self, rec: Any) -> None:
        """Shown each record of the running step: the store's, and the loop learns the communicator of a
        record that communicates (the largest such, unless ``comm`` was given)."""
        self.store.watch(rec)
        comm = getattr(unguarded(rec), "comm", None)
        if comm is None or comm is self.comm or self._comm_given:
            return
        if self.comm is None or comm.Get_size() > self.comm.Get_size():
            self.comm = comm

    def agreed(self, *values: int) -> list[int]:
        """The largest of each of ``values`` (bytes measured here) over the loop's communicator, the loop's
        ``sizes`` made the largest too. Every decision on the schedule is taken on these, so the ranks of a
        loop that communicates take the same ones (their reverse messages pair up), each within the budget.
        """
        if self.comm is None or self.comm.Get_size() == 1:
            return list(values)
        from mpi4py import MPI

        s = self.sizes
        buf = np.array([s.snapshot, s.record, s.final, *values], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        s.snapshot, s.record, s.final = (int(x) for x in buf[:3])
        return [int(x) for x in buf[3:]]

    def reverse_step(self, t: int) -> None:
        tape.reverse_records(self.records.pop(t))
        self.progress += 1
        self.track()

    def take(self, n: int, disk: bool = False) -> None:
        """Snapshot ``n``. Where steps are replayed from records (``keeps_records`` says no), the copy is
        whole and made safe at once, so that the next step may be replayed too (a replay runs without the
        write observer that would settle what the copy leaves out)."""
        if self.keeps_records():
            self.store.take(n, disk=disk)
        else:
            self.store.take_whole(n, disk=disk)
        self.track()

    def keeps_records(self) -> bool:
        """Whether steps' records are worth keeping rather than recomputing the steps from snapshots: not
        where steps are replayed on a GPU (``replay``, the state in device memory): a recorded step and its
        reverse run the tape's Python per operation, a replayed one a CUDA graph. Known once a step has
        written the state (``Stats.records``)."""
        if self._device_state is None and self.opts.replay is not None:
            roots = self.store.roots()
            if roots:
                self._device_state = any(arrays.is_cupy(r) for r in roots)
                self.stats.records = not self._device_state
        return self.opts.replay is None or not self._device_state

    def drop(self, n: int) -> None:
        if n not in self.protected and self.store.holds(n):
            self.store.drop(n)

    def record_memory(self) -> int:
        """Bytes the copies kept by the recorded steps' values hold now (measured); updates the size of a
        step's records (the largest of what one holds and what it was bound to hold) and what the steps
        kept owe (``owed``) from the steps whose copies changed since: the others' are as they were."""
        changed, size = self.kept.changed, self.sizes.record
        while changed:
            account = changed.pop()
            size = max(size, account.bytes)
            t = self._step_of.get(account)
            if t is not None:
                self._reckon(t)
        self.sizes.record = size
        return self.kept.bytes

    def owed(self) -> int:
        """Bytes the kept records are bound to copy still: the copies their kept values will make when the
        state arrays they alias are overwritten, less those made (for each step kept, at least 0)."""
        self.record_memory()
        return self._owed

    def _reckon(self, t: int) -> None:
        entry = self.owing[t]
        account, bound, before = entry
        entry[2] = max(bound - account.bytes, 0)
        self._owed += entry[2] - before

    def _forget(self, t: int | None) -> None:
        """Step ``t``'s records go (None: every step's)."""
        for k in list(self.owing) if t is None else [t]:
            entry = self.owing.pop(k, None)
            if entry is not None:
                self._owed -= entry[2]
                self._step_of.pop(entry[0], None)

    def held(self) -> int:
        """Bytes held now: snapshots in memory, the final state's copy, spare buffers, kept records."""
        return self.store.memory_bytes() + self.record_memory()

    def track(self) -> None:
        """Measure: bytes held now (snapshots in memory, the final copy, kept records), their peak."""
        s, store = self.stats, self.store
        held = self.held()
        s.peak_memory = max(s.peak_memory, held)
        s.peak_bytes = max(s.peak_bytes, store.snapshot_bytes())
        s.peak_disk_bytes = max(s.peak_disk_bytes, store.disk_bytes())
        s.snapshots_peak = max(s.snapshots_peak, store.snapshot_count())
        s.state_bytes = max(s.state_bytes, store.state_bytes())
        self.sizes.final = max(self.sizes.final, s.state_bytes)
        self.sizes.snapshot = max(self.sizes.snapshot, store.largest_snapshot())
        s.snapshot_bytes, s.record_bytes = self.sizes.snapshot, self.sizes.record

    def note(self, schedule: str, steps: int) -> None:
        self.stats.schedules[schedule] = self.stats.schedules.get(schedule, 0) + steps

    # -- budgets ---------------------------------------------------------------------------------------
    def check_budget(self) -> None:
        """Refuse a budget that cannot hold one snapshot, one step's records and the final state's copy."""
        budget = self.opts.memory
        if budget is None:
            return
        self.agreed()
        need = self.sizes.minimum
        if budget < need:
            raise BudgetError(
                f"pad.checkpoint: memory={format_size(budget)} is too small for this loop: it needs at "
                f"least {format_size(need)} (a snapshot of {format_size(self.sizes.snapshot)}, one step's "
                f"records of {format_size(self.sizes.record)} and the final state's copy of "
                f"{format_size(self.sizes.final)})"
            )

    def free(self, start: int | None = None) -> int:
        """Memory left for a schedule (agreed: the least over the ranks): the budget less what is held, the
        snapshot at ``start`` not counted (the schedule uses it), less the final state's copy if not yet
        taken."""
        store = self.store
        used = 0
        if start is not None and store.holds(start) and start not in store.on_disk:
            used = store.held[start].nbytes
        return self._room(used)

    def _room(self, uncounted: int) -> int:
        """The budget less what is held but ``uncounted`` bytes and less the final state's copy if not yet
        taken, the least over the ranks."""
        assert self.opts.memory is not None
        (used,) = self.agreed(self.held() - uncounted)
        return self.opts.memory - used - (0 if self.store.holds(-1) else self.sizes.final)

    def disk_slots(self) -> int:
        """Snapshots the disk may hold for a two-level schedule: with a folder for them (``directory``, or a
        resumable run's), half the free space there."""
        base = self.opts.directory or (self.opts.resumable.directory if self.opts.resumable else None)
        if base is None or self.opts.memory is None:
            return 0
        free = 0
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(base).free
        (least,) = self.agreed(-free)  # the least free disk over the ranks
        return 0 if self.sizes.snapshot <= 0 else -least // 2 // self.sizes.snapshot

    def slots(self) -> int | None:
        """Snapshots a memory budget holds now, those held included (None: no budget)."""
        if self.opts.memory is None:
            return None
        held = self.store.steps_total()
        return max(1, (self._room(held) - self.sizes.record) // max(self.sizes.snapshot, 1))

    def record_fits(self) -> bool:
        """Whether the next step's records still fit the budget beside what is held, the copies the kept
        records are bound to make counted (the next step's writes make them), on every rank."""
        if self.opts.memory is None:
            return True
        owed = self.owed()
        (held,) = self.agreed(self.held() + owed)
        return held + self.sizes.record <= self.opts.memory

    # -- stopping and saving ---------------------------------------------------------------------------
    def stop_forward(self, t: int) -> None:
        """Before step ``t`` of the forward sweep: save and stop if the run was asked to stop."""
        r = self.opts.resumable
        if r is not None and r.should_stop(self.progress):
            r.save_forward(self, t)

    def stop_reverse(self, done: int) -> None:
        """Steps ``done`` and later are reversed: save and stop if asked to and it can be resumed here."""
        r = self.opts.resumable
        if r is None or not (done == 0 or self.store.holds(0)):
            return
        if r.should_stop(self.progress):
            r.save_reverse(self, done)

    # -- forward ---------------------------------------------------------------------------------------
    def start_recording(self, t: int) -> None:
        """Record every step from ``t`` on, keeping a snapshot at ``t`` if a fallback or a resumed run may
        need it (a resumable run keeps it to the end)."""
        self.recording = True
        if self.opts.resumable is not None and t == 0:
            self.protected.add(t)
        if (self.opts.memory is not None or self.opts.resumable is not None) and not self.store.holds(t):
            self.take(t)

    def start_dynamic(self, t: int, slots: int | None = None) -> None:
        """From step ``t`` on, unrecorded steps with snapshots placed online (``slots`` of them in all)."""
        self.recording = False
        if self.records:
            self.switched = True
        self.records.clear()
        if slots is None:
            self.check_budget()
            slots = max(1, self.free() // max(self.sizes.snapshot, 1) + len(self.store.positions()))
        dyn = self.dynamic = Dynamic(slots)
        for k, p in enumerate(self.store.positions()):
            if k == 0 or p in self.protected:
                dyn.start(p)
            else:
                dyn.levels[p] = 0

    def forward(self, more: Callable[[int], bool], t: int, asked: bool = False) -> int:
        """Run steps from ``t`` while ``more(t)``, recording or placing snapshots; returns the step count.
        ``asked``: ``more(t)`` said yes already (the condition is asked once a step). Under a memory budget,
        recording stops once the records would not fit, or after the first step where they are not worth
        keeping (``keeps_records``)."""
        while asked or more(t):
            asked = False
            self.stop_forward(t)
            if self.recording and self.records and self.opts.memory is not None:
                keep = self.keeps_records() or self.planning  # a planned schedule may replace the records
                if not (self.record_fits() and keep):
                    self.start_dynamic(t)
            if self.recording:
                self.advance(t, record=True)
                if len(self.records) == 1 and self.opts.memory is not None:
                    self.check_budget()
            else:
                assert self.dynamic is not None
                drops, take = self.dynamic.place(t, self.slots())
                for d in drops:
                    self.drop(d)
                if take:
                    self.take(t)
                self.advance(t, record=False)
            t += 1
        return t

    # -- reverse ---------------------------------------------------------------------------------------
    def reverse_from(self, done: int) -> None:
        """Reverse steps ``done - 1`` down to 0 (the later ones are reversed)."""
        t = done - 1
        if any(k not in self.records for k in range(t + 1)):
            self.take_final()
        while t >= 0:
            self.stop_reverse(t + 1)
            if t in self.records:
                self.reverse_step(t)
                self.note("keep-all", 1)
                t -= 1
                continue
            start = t if self.store.holds(t) else max(p for p in self.store.positions() if p <= t)
            for k in range(start, t):  # records of a schedule given up: the gap's schedule makes its own
                self.records.pop(k, None)
            self.store.restore(start, drop=False)
            choice = self.plan(start, t + 1 - start)
            if start == t:  # one step: every schedule runs it recorded and reverses it (``Sweep._adjoint``)
                self.adjoint_step(t)
                self.stop_reverse(t)
                self.note(choice.name, 1)
                self.drop(start)
                t -= 1
                continue
            sweep = Sweep(
                self, choice, start, held=True, watch_sizes=self.opts.memory is not None, in_reverse=True
            )
            sweep.run_all()
            self.note(choice.name, t + 1 - sweep.reversed_from)
            if sweep.reversed_from == start:
                self.drop(start)
            t = sweep.reversed_from - 1
        if self.store.holds(-1):
            self.store.restore(-1, drop=True)

    def take_final(self) -> None:
        """Copy the final state, to put it back after the reverse pass (which restores earlier states)."""
        if not self.store.holds(-1):
            self.store.take(-1, step_follows=False)
            self.track()

    def plan(self, start: int, n: int) -> Choice:
        """The schedule for the gap of ``n`` steps from the snapshot at ``start``."""
        opts = self.opts
        if opts.memory is None:
            slots = max(1, (opts.snapshots or 1) - len([p for p in self.store.positions() if p < start]))
            if opts.storage == "disk":
                return Choice("revolve", n, 0, 0, slots)
            return Choice("revolve", n, 0, slots)
        free = self.free(start)
        choice = choose(n, free, self.sizes, self.disk_slots(), records=self.keeps_records(), held=True)
        return choice if choice is not None else Choice("revolve", n, 0, 1, room=free)


class Ended(Exception):
    """The loop's condition ended it before the schedule's step count (``while_loop``'s expected steps)."""


class Outgrown(Exception):
    """The sizes a schedule was chosen for have grown (a state array appeared late): the next step would
    overrun the memory budget."""


class _GivenUp(Exception):
    """The sizes a schedule was chosen for have grown past the room it was chosen in: its reverse part stops."""


class Sweep:
    """A loop's steps ``offset .. offset+n-1`` run through a ``checkpoint_schedules`` schedule.

    ``held``: the state at ``offset`` is a snapshot already. ``watch_sizes``: raise ``Outgrown`` in the
    forward sweep when what is held, the next step's records and the final state's copy would overrun the
    memory budget (the sizes the schedule was chosen for have grown); in the reverse part, give the rest
    of the schedule up once its need at the sizes measured (agreed over the ranks) outgrows the room it was
    chosen in: steps ``reversed_from`` and later are reversed, and the loop's reverse pass goes on from
    there, planning each gap in the memory then free (``Loop.reverse_from``). ``more``:
    the loop's condition, asked before each step of the forward sweep (``Ended`` when it says no) from step
    ``asked`` on: a schedule that starts again from the loop's start runs steps it was asked for already.
    ``in_reverse``: a gap reversed in the loop's reverse pass (its forward part is no forward sweep: no stop
    is saved there).
    """

    def __init__(
        self,
        lp: Loop,
        choice: Choice,
        offset: int,
        held: bool,
        watch_sizes: bool = False,
        more: Callable[[int], bool] | None = None,
        in_reverse: bool = False,
        asked: int = 0,
    ) -> None:
        self._lp, self._offset, self._held, self._watch_sizes = lp, offset, held, watch_sizes
        self._more, self._asked = more, asked
        self._in_reverse = in_reverse
        self.choice = choice
        if choice.name == "keep-all":  # every step's records kept: Mixed with a unit for each
            sched: CheckpointSchedule = Choice("mixed", choice.n, choice.n, max(choice.n - 1, 0)).schedule()
        else:
            sched = choice.schedule()
        self._actions = iter(sched)
        self._ahead: list[Any] = []  # actions looked at ahead, the next last
        self._forward_done = False
        self._planned = replace(lp.sizes) if watch_sizes else None  # the sizes the choice was made for
        self.reversed_from = offset + choice.n  # steps from here on are reversed
        self.given_up = False

    @property
    def offset(self) -> int:
        return self._offset

    def run_all(self) -> None:
        self.run()
        self.run()

    def run(self) -> None:
        """Carry out the schedule's actions up to its end of the forward pass, or of the reverse pass (or
        until it is given up)."""
        if self.given_up:
            return
        try:
            self._run()
        except _GivenUp:
            self.given_up = True

    def _run(self) -> None:
        lp, off = self._lp, self._offset
        while (action := self._next()) is not None:
            if isinstance(action, Forward) and self._adjoint(action):
                continue
            if isinstance(action, Forward):
                self._forward(action)
            elif isinstance(action, Reverse):
                for t in reversed(range(int(action.n0), int(action.n1))):
                    lp.reverse_step(off + t)
                    self.reversed_from = off + t
                    lp.stop_reverse(off + t)
            elif isinstance(action, (Copy, Move)):
                self._watch(None)
                n = off + int(action.n)
                if lp.store.holds(n) and n >= 0:
                    lp.store.restore(n, drop=False)
                    if isinstance(action, Move):
                        lp.drop(n)
            elif isinstance(action, EndForward):
                self._forward_done = True
                return
            elif isinstance(action, EndReverse):
                return
            else:  # pragma: no cover - the schedules emit only the actions above
                raise RuntimeError(f"pad.checkpoint: unexpected schedule action {action!r}")

    def _next(self) -> Any:
        """The schedule's next action (one looked at ahead first), or None at its end."""
        if self._ahead:
            return self._ahead.pop()
        return next(self._actions, None)

    def _adjoint(self, action: Forward) -> bool:
        """Run ``action`` and the action after it as one adjoint step (``Loop.adjoint_step``) if it is one:
        a step recorded and then reversed at once, after the forward sweep (in a gap of the reverse pass, a
        forward end between them is passed over); whether it did."""
        n0, n1 = int(action.n0), int(action.n1)
        after_sweep = self._forward_done or self._in_reverse
        if not (action.write_adj_deps and not action.write_ics and n1 == n0 + 1 and after_sweep):
            return False
        if self._lp.opts.replay is None:
            return False
        seen = [self._next()]
        while self._in_reverse and isinstance(seen[-1], EndForward):
            seen.append(self._next())
        last = seen[-1]
        if not (isinstance(last, Reverse) and int(last.n0) == n0 and int(last.n1) == n1):
            self._ahead.extend(reversed(seen))
            return False
        self._forward_done = True
        t = self._offset + n0
        self._watch(t)
        self._lp.adjoint_step(t)
        self.reversed_from = t
        self._lp.stop_reverse(t)
        return True

    def _forward(self, action: Forward) -> None:
        lp, off = self._lp, self._offset
        n0, n1 = int(action.n0), int(action.n1)
        disk = action.storage == StorageType.DISK
        reverse_part = self._forward_done or self._in_reverse
        if reverse_part:
            self._watch(off + n0)
        if action.write_ics and not (self._held and n0 == 0):
            lp.take(off + n0, disk=disk)
        for t in range(n0, n1):
            if not reverse_part:
                if self._more is not None and off + t >= self._asked and not self._more(off + t):
                    raise Ended(off + t)
                lp.stop_forward(off + t)
                if self._watch_sizes and lp.opts.memory is not None:
                    (held,) = lp.agreed(lp.held() + (0 if lp.store.holds(-1) else lp.sizes.final))
                    if held + lp.sizes.record > lp.opts.memory:  # (the step, whether it was asked for)
                        raise Outgrown(off + t, self._more is not None and off + t >= self._asked)
            elif t > n0:
                self._watch(off + t)
            lp.advance(off + t, record=action.write_adj_deps)

    def _watch(self, live: int | None) -> None:
        """In the reverse part: give the schedule up (``_GivenUp``) if the sizes outgrew its room. ``live``:
        the step the state is at, before a step of a forward action (None: before a restore); it is kept as
        a snapshot unless one at or below it is held, so that the loop's reverse pass can go on."""
        lp, planned = self._lp, self._planned
        if planned is None or not (self._forward_done or self._in_reverse):
            return  # no budget, or the forward sweep (``Outgrown`` there)
        lp.agreed()
        now, choice = lp.sizes, self.choice
        grown = now.snapshot > planned.snapshot or now.record > planned.record or now.final > planned.final
        if not grown or choice.need(now) + now.final - planned.final <= choice.room:
            return
        if live is not None and not any(p <= live for p in lp.store.positions()):
            lp.store.take(live, step_follows=False)
            lp.track()
        raise _GivenUp
