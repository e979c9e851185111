"""Checkpointed time loops: schedules that trade memory for recomputation, sized by a memory budget.

Inside ``autodiff``, ``loop`` and ``while_loop`` keep what the reverse pass needs of their steps within a
budget and recompute the rest:
- ``snapshots=K``: at most K copies of the loop's state, Revolve (binomial) for ``loop``, snapshots placed
  online and the gaps between them reversed by Revolve for ``while_loop``;
- ``memory=SIZE`` (``"512MB"``, ``"4GB"``, bytes): the first step is run recorded, from a snapshot, which
  measures a snapshot and a step's records. If every step's records fit, every step is recorded and none
  is recomputed. Otherwise ``loop`` (step count known) runs the schedule of ``checkpoint_schedules`` with
  the fewest step calls in the budget: Revolve (snapshots), Mixed (units holding a snapshot or one step's
  records, so a step reversed from stored records is not run again), or, with ``directory``, two-level
  Multistage (snapshots in memory and on disk). ``while_loop`` (step count unknown: online) records steps
  while their records fit, then places snapshots online (``plan.Dynamic``) and, once the count is known,
  reverses each gap between snapshots with the best of those schedules for the memory left;
- neither: every step is recorded.
Snapshot copies run beside the step (a thread; on a GPU a second stream) and leave out what the step
overwrites unread (``store``). ``Stats`` reports the schedule, the step calls and the memory measured.
Under MPI every decision is taken on the largest sizes among the ranks of the loop's communicator (``comm=``,
or the one the step's ``pad.mpi`` records name), so every rank follows the same schedule.

``resumable=Resumable(directory, time_limit=..., identity=...)`` makes a loop save itself and raise ``Stopped``
at a step boundary once its time limit passes or SIGTERM comes; ``Resumable(directory, resume=True)``
continues it to the same gradient, bit for bit (``resume``).

``replay=phase`` promises that the step's pad operations depend on nothing but its arguments and ``phase(t)``
(``replay=lambda t: t == 0`` for a step whose first call differs), and that the loop needs nothing of its
Python between them (count steps in the condition, which runs before every step of the forward sweep, or
on the device): unrecorded steps and adjoint steps (a step recorded and reversed at once, as Revolve and
Mixed end each gap) are then replayed from a record of an earlier one of the same kind and phase
(``pad.graph``'s records; on a GPU one CUDA graph), without the step's and the tape's Python. A step whose
work cannot be replayed (tasks, receives from any rank) runs as it is; the ranks of a loop that communicates
agree on each replay, so a step that exchanges messages is replayed on all of them, messages included. On a
GPU, where a replay costs microseconds and a recorded step the tape's Python per operation, a memory budget
then keeps snapshots, not records: each step is recomputed once from its own snapshot where they all fit
(the snapshots are whole copies, made safe before the step, since a replay runs without the write
observer: each one kernel launch into one buffer, and one back to restore it).

``segment`` keeps only its inputs (copied only if something later overwrites them) and recomputes ``fn`` in
the reverse pass. Outside ``autodiff`` all three are plain calls; in ``fwddiff`` they carry tangents.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from pad import tape
from pad.checkpoint import resume as _resume
from pad.checkpoint.engine import BudgetError, Ended, Loop, Options, Outgrown, Stats, Sweep
from pad.checkpoint.layout import arrays_in, reachable
from pad.checkpoint.plan import Choice, Dynamic, Sizes, choose, revolve_steps
from pad.checkpoint.resume import EXIT_STOPPED, Resumable, ResumeError, Stopped
from pad.checkpoint.segment import segment
from pad.checkpoint.sizes import format_size, parse_size
from pad.checkpoint.store import SaveError

__all__ = [
    "EXIT_STOPPED",
    "BudgetError",
    "Resumable",
    "ResumeError",
    "SaveError",
    "Stats",
    "Stopped",
    "best_offline",
    "format_size",
    "loop",
    "optimal_recomputations",
    "parse_size",
    "segment",
    "while_loop",
]


def _options(
    snapshots: int | None,
    memory: int | str | None,
    storage: str,
    directory: str | None,
    resumable: Any,
    replay: Callable[[int], Any] | None = None,
    comm: Any = None,
) -> Options:
    if snapshots is not None and (
        isinstance(snapshots, bool) or not isinstance(snapshots, (int, np.integer)) or snapshots < 1
    ):
        raise ValueError(f"pad.checkpoint: snapshots must be None or an integer >= 1, got {snapshots!r}")
    if storage not in ("memory", "disk"):
        raise ValueError(f"pad.checkpoint: storage must be 'memory' or 'disk', got {storage!r}")
    budget = None
    if memory is not None:
        if snapshots is not None:
            raise ValueError("pad.checkpoint: give snapshots or memory, not both")
        if storage == "disk":
            raise ValueError(
                "pad.checkpoint: memory= budgets memory; for snapshots on disk beside it, pass directory="
            )
        try:
            budget = parse_size(memory)
        except ValueError as exc:
            raise ValueError(f"pad.checkpoint: memory: {exc}") from None
    if resumable is not None and not isinstance(resumable, Resumable):
        raise TypeError(f"pad.checkpoint: resumable must be a pad.checkpoint.Resumable, got {resumable!r}")
    if replay is not None and not callable(replay):
        raise TypeError(
            f"pad.checkpoint: replay must be None or a function of the step number, got {replay!r}"
        )
    ranks = getattr(comm, "private", comm)  # a pad.mpi.Comm's own traffic goes on its private duplicate
    if comm is not None and not (hasattr(ranks, "Allreduce") and hasattr(ranks, "Get_size")):
        raise TypeError(f"pad.checkpoint: comm must be an mpi4py or pad.mpi communicator, got {comm!r}")
    return Options(
        None if snapshots is None else int(snapshots),
        budget,
        storage,
        directory,
        resumable,
        replay=replay,
        comm=ranks,
    )


class _Record:
    """A checkpointed loop's record: its reverse pass (a schedule's, or walking down from the end)."""

    def __init__(self, lp: Loop, sweep: Sweep | None, done: int, resumed: bool) -> None:
        self._lp, self._sweep, self._done, self._resumed = lp, sweep, done, resumed

    def reverse(self) -> None:
        lp = self._lp
        r = lp.opts.resumable
        with lp.running():
            if self._resumed:
                _resume.restore_shadows(lp, r)
            done = self._done
            if self._sweep is not None:
                lp.take_final()
                self._sweep.run()
                done = self._sweep.reversed_from  # the offset, unless the schedule was given up
                lp.note(self._sweep.choice.name, self._sweep.offset + self._sweep.choice.n - done)
            lp.reverse_from(done)
        lp.close()
        _name(lp)
        if r is not None:
            r.finish()


def _name(lp: Loop) -> None:
    """The schedule that reversed most steps; ``online`` if the forward sweep placed snapshots itself."""
    if not lp.stats.schedules:
        return
    main = max(lp.stats.schedules, key=lambda k: lp.stats.schedules[k])
    online = lp.dynamic is not None or lp.switched
    if online and main == "keep-all" and len(lp.stats.schedules) > 1:
        main = max((k for k in lp.stats.schedules if k != "keep-all"), key=lambda k: lp.stats.schedules[k])
    lp.stats.schedule = ("online " if online else "") + main


def _start(
    lp: Loop, more: Callable[[int], bool], nsteps: int | None, expected: int | None = None
) -> tuple[Sweep | None, int, bool]:
    """Run a loop's forward sweep; returns (its schedule if offline, steps not yet reversed, resumed)."""
    opts = lp.opts
    r = opts.resumable
    if r is not None and r.saved is not None:
        m = _resume.restore(lp, r)
        if m["kind"] == "reverse":
            return None, int(m["step"]), True
        t = int(m["step"])
        if m["recording"]:
            lp.start_recording(t)
            return None, lp.forward(more, t), False
        slots = (m["dynamic"] or {}).get("slots") or opts.snapshots
        lp.start_dynamic(t, slots)
        levels = _resume.dynamic_levels(m)
        if levels and lp.dynamic is not None:
            lp.dynamic.levels.update(levels)
        return None, lp.forward(more, t), False
    if opts.snapshots is not None and nsteps is not None:
        choice = Choice("revolve", nsteps, 0, 0, opts.snapshots) if opts.storage == "disk" else None
        choice = choice or Choice("revolve", nsteps, revolve_steps(nsteps, opts.snapshots), opts.snapshots)
        if r is not None:
            lp.protected.add(0)
        sweep = Sweep(lp, choice, 0, held=False)
        sweep.run()
        lp.stats.schedule = "revolve"
        return sweep, 0, False
    if opts.snapshots is not None:
        lp.take(0, disk=opts.storage == "disk")
        lp.dynamic = Dynamic(opts.snapshots)
        lp.dynamic.start(0)
        if r is not None:
            lp.protected.add(0)
        return None, lp.forward(more, 0), False
    lp.start_recording(0)
    if opts.memory is None or (nsteps is None and expected is None):
        return None, lp.forward(more, 0), False
    if nsteps is not None:
        return _probe(lp, more, nsteps, online=False)
    assert expected is not None
    return _probe(lp, more, expected, online=True)


def _probe(
    lp: Loop, more: Callable[[int], bool], nsteps: int, online: bool
) -> tuple[Sweep | None, int, bool]:
    """A loop of ``nsteps`` steps in a memory budget: record steps from a snapshot of the start while every
    step's records would fit; once they would not and a step has found no new state (less than 1% more:
    the sizes are known), run the best offline schedule for the steps left (``_plan_rest``).

    ``online``: ``nsteps`` is what a ``while_loop`` expects; its condition still ends the loop, earlier or
    later, and the reverse pass walks down from the end (``Loop.reverse_from``), whose gaps between the
    schedule's snapshots it reverses as the schedule would (or better, in the memory then free).
    """
    budget = lp.opts.memory
    assert budget is not None
    t, ended = 0, False
    lp.planning = True
    while t < nsteps and lp.recording and not ended:
        known = lp.store.state_bytes()
        step = t
        t = lp.forward(functools.partial(_only, step, more), t)
        ended = t == step
        if not lp.recording:  # the records outgrew the budget: placing snapshots online now
            break
        if ended or t == nsteps:
            continue
        held, grew = lp.agreed(lp.held(), int(lp.store.state_bytes() > known * 1.01))
        if (nsteps - t) * lp.sizes.record + held <= budget and lp.keeps_records():
            continue
        if not grew:  # no new state worth the name (on any rank): the sizes are known
            plan = _plan_rest(lp, nsteps - t)
            if plan is None:
                continue
            asked = t  # the condition said yes to steps 0 .. t - 1 already
            choice, t = plan
            lp.recording = False
            sweep = Sweep(
                lp, choice, t, held=t == 0, watch_sizes=True, more=more if online else None, asked=asked
            )
            try:
                sweep.run()
            except Ended as end:  # the condition ended the loop before the expected count
                return None, int(end.args[0]), False
            except Outgrown as grown:  # go on online from here, with the snapshots taken so far
                t, asked_t = int(grown.args[0]), bool(grown.args[1])
                lp.start_dynamic(t)
                return None, lp.forward(more, t, asked=asked_t), False
            lp.stats.schedule = choice.name
            if not online or not more(nsteps):
                lp.stats.nsteps = nsteps
                return sweep, t, False
            lp.start_dynamic(nsteps)  # more steps than expected: on online from here
            return None, lp.forward(more, nsteps, asked=True), False
    lp.planning = False
    if ended:
        return None, t, False
    return None, lp.forward(more, t), False


def _only(step: int, more: Callable[[int], bool], t: int) -> bool:
    return t == step and more(t)


def _plan_rest(lp: Loop, n: int) -> tuple[Choice, int] | None:
    """The schedule for the loop's ``n`` steps after the ``t`` recorded so far (a snapshot counted whole:
    what the first steps left unread says little of the later ones'), and where it starts: keeping those
    records (at ``t``), letting them go (at ``t``; they are recomputed from the start's snapshot at the end),
    or starting again from that snapshot (at 0), whichever makes fewer step calls. None: keep recording."""
    assert lp.opts.memory is not None
    held = lp.held()
    state, held, unrecorded = lp.agreed(lp.store.state_bytes(), held, held - lp.record_memory())
    whole = lp.sizes.snapshot = max(lp.sizes.snapshot, state)
    sizes = Sizes(whole, lp.sizes.record, lp.sizes.final)
    t, disk = len(lp.records), lp.disk_slots()
    recorded, records = held - unrecorded, lp.keeps_records()
    budget = lp.opts.memory - sizes.final
    keep = choose(n, budget - held, sizes, disk, records)
    if keep is not None and keep.name == "keep-all":
        return None
    options = [(keep.steps, keep, t, "keep")] if keep is not None else []
    drop = choose(n, budget - held + recorded, sizes, disk, records)
    if drop is not None:
        options.append((drop.steps + t, drop, t, "drop"))
    again = choose(n + t, budget - held + recorded + whole, sizes, disk, records, held=True)
    if again is not None:
        options.append((again.steps + t, again, 0, "again"))
    if not options:
        return None
    _, choice, start, how = min(options, key=lambda o: o[0])
    if how != "keep":
        lp.records.clear()
    if how == "again":
        lp.store.restore(0, drop=False)
    return choice, start


def _run(
    step: Callable[..., Any],
    args: tuple,
    opts: Options,
    stats: Stats | None,
    more: Callable[[int], bool],
    nsteps: int | None,
    expected: int | None = None,
) -> int:
    ctx = tape.current()
    assert ctx is not None
    lp = Loop(ctx, step, args, opts, Stats() if stats is None else stats)
    if nsteps is not None:
        lp.stats.nsteps = nsteps
    with lp.running():
        sweep, done, resumed = _start(lp, more, nsteps, expected)
    if nsteps is not None:
        lp.stats.nsteps = nsteps
    elif sweep is None and not resumed:
        lp.stats.nsteps = done
    n = lp.stats.nsteps
    if n == 0:
        lp.close()
        if opts.resumable is not None:
            opts.resumable.finish()
        return 0
    ctx.record(_Record(lp, sweep, done, resumed))
    return n


def loop(
    step: Callable[..., Any],
    nsteps: int,
    *args: Any,
    snapshots: int | None = None,
    memory: int | str | None = None,
    storage: str = "memory",
    directory: str | None = None,
    stats: Stats | None = None,
    resumable: Resumable | None = None,
    replay: Callable[[int], Any] | None = None,
    comm: Any = None,
) -> None:
    """Call ``step(t, *args)`` for ``t in range(nsteps)``; inside ``autodiff`` keep what the reverse pass
    needs within ``snapshots`` copies of the state or ``memory`` bytes (see the module's documentation).

    Neither: every step is recorded. ``storage="disk"`` writes the ``snapshots`` to files in a fresh folder
    under ``directory`` (the system's temporary folder by default), removed when the reverse pass ends or
    fails; with ``memory``, ``directory`` lets a two-level schedule keep snapshots there too. ``stats`` (a
    ``Stats``) reports the schedule, step calls and memory. ``resumable``: see ``Resumable``. ``replay``:
    see the module's documentation. ``comm`` (mpi4py or ``pad.mpi``): the ranks that take every decision
    on the schedule alike, on the largest sizes among them; by default the communicator of the step's
    ``pad.mpi`` calls (the largest, if several), or ``resumable``'s.
    """
    opts = _options(snapshots, memory, storage, directory, resumable, replay, comm)
    plain = opts.snapshots is None and opts.memory is None and opts.resumable is None
    if plain or not tape.is_recording() or nsteps < 1:
        for t in range(nsteps):
            step(t, *args)
        if stats is not None:
            stats.nsteps = stats.steps = nsteps
        return
    _run(step, args, opts, stats, lambda t: t < nsteps, int(nsteps))


def while_loop(
    cond: Callable[..., Any],
    step: Callable[..., Any],
    *args: Any,
    snapshots: int | None = None,
    memory: int | str | None = None,
    storage: str = "memory",
    directory: str | None = None,
    stats: Stats | None = None,
    resumable: Resumable | None = None,
    expected_steps: int | None = None,
    replay: Callable[[int], Any] | None = None,
    comm: Any = None,
) -> int:
    """``t = 0; while cond(*args): step(t, *args); t += 1`` with an online checkpointing schedule.

    ``cond`` is evaluated on primal values only; inside ``autodiff`` it may not read a shadow array. Returns
    the number of steps taken. Options as for ``loop``; with ``memory``, ``expected_steps`` (a previous run's
    count, say) lets the forward sweep place its snapshots as the best offline schedule for that count would,
    whatever count the condition then gives.
    """
    opts = _options(snapshots, memory, storage, directory, resumable, replay, comm)
    ctx = tape.current()
    if ctx is not None and ctx.reverse_mode:
        _refuse_shadow_reads(ctx, cond, args)
    plain = opts.snapshots is None and opts.memory is None and opts.resumable is None
    if plain or not tape.is_recording():
        t = 0
        while cond(*args):
            step(t, *args)
            t += 1
        if stats is not None:
            stats.nsteps = stats.steps = t
        return t
    expected = None if expected_steps is None else int(expected_steps)
    return _run(step, args, opts, stats, lambda t: bool(cond(*args)), None, expected)


def optimal_recomputations(nsteps: int, snapshots: int) -> int:
    """The fewest step calls beyond the first sweep that reverse ``nsteps`` steps with ``snapshots``
    snapshots: those of the offline binomial (Revolve) schedule, which ``loop`` follows (``Stats.recomputed``
    counts the same calls). ``while_loop``, which learns its step count only at the end, makes more."""
    if nsteps < 1:
        return 0
    return revolve_steps(nsteps, snapshots) - nsteps


def best_offline(nsteps: int, memory: int | str, stats: Stats) -> tuple[str, int] | None:
    """The schedule an offline ``loop`` of ``nsteps`` steps would pick in ``memory``, and its step calls
    beyond the first sweep, for a loop whose measured sizes ``stats`` gives (the best of keep-all, Revolve
    and Mixed there, or of Revolve alone where the loop kept no records: what ``while_loop``'s online
    schedule is compared with); None where none fits (an
    online run can still finish there: it sized its budget by the state of its first steps, which a
    loop's state may outgrow)."""
    budget = parse_size(memory)
    sizes = Sizes(stats.snapshot_bytes, stats.record_bytes, stats.state_bytes)
    if nsteps < 1:
        return "keep-all", 0
    if stats.records and nsteps * sizes.record + sizes.snapshot <= budget:
        return "keep-all", 0
    choice = choose(nsteps, budget - sizes.final, sizes, records=stats.records)
    return None if choice is None else (choice.name, choice.recomputed)


def _refuse_shadow_reads(ctx: tape.Context, cond: Callable[..., Any], args: tuple) -> None:
    """Refuse a ``while_loop`` condition that can see a shadow array (argument, closure, global, default)."""
    for path, a in list(arrays_in(args, "args")) + reachable(cond):
        if ctx.is_shadow(a):
            raise ValueError(
                f"pad.checkpoint.while_loop: the condition can read {path}, a shadow array; the number "
                "of steps must depend on primal values only"
            )
