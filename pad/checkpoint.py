"""Checkpointed time loops: binomial (Revolve) schedules trade memory for recomputation.

Inside ``autodiff``, ``loop`` runs ``step`` through a ``checkpoint_schedules`` Multistage (Revolve) schedule:
it keeps at most ``snapshots`` copies of the loop's state, records only the step being reversed, and
recomputes the others from the nearest snapshot. The state is found, not declared: it is every array the
steps announce they overwrite (``Context.before_writes``). A snapshot copies those arrays; an array first
overwritten after a snapshot was taken is added to it, before the write, with the value it still holds.
Snapshots are restored before each recomputation.

A snapshot holds only what the step after it reads. When the first thing that step does to a state array is
a kernel launch that overwrites a range of it without reading it (``y[i + c] = ...`` over the launch, the
kernel never reading ``y``: ``Variant.overwrites``), that range is dropped from the snapshot once the step
has run, so a ping-pong step snapshots one array, not two. The records of the step's operations say what it
did first; an operation pad cannot see into (anything but a launch, or work in another thread) counts as
reading every array it has not yet seen overwritten. Restoring fills a dropped range with NaN, so a read pad
did not see (plain NumPy code in the step reading a state array before a launch overwrites it) shows up as
NaN in the gradient rather than as a wrong number.

``while_loop`` does not know its step count in advance: its forward pass keeps snapshots at multiples of a
period that doubles whenever more than ``snapshots`` would be held; its reverse pass reverses each interval
between two of them with an offline Revolve schedule using the slots that are free.

``segment`` keeps only its inputs (copied only if something later overwrites them) and recomputes ``fn`` in
the reverse pass. Outside ``autodiff`` all three are plain calls; in ``fwddiff`` they carry tangents.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from checkpoint_schedules import (
    Copy,
    EndForward,
    EndReverse,
    Forward,
    Move,
    MultistageCheckpointSchedule,
    Reverse,
    multistage,
    optimal_steps_binomial,
)

from pad import arrays, tape
from pad.parallel import LaunchRecord
from pad.tasks import unguarded

# The schedule library jit-compiles its small step-count helper with numba when numba is installed, which
# costs seconds at the first checkpointed loop of every process; its plain-Python form is just as exact
# and takes microseconds per call.
multistage.n_advance = getattr(multistage.n_advance, "py_func", multistage.n_advance)

__all__ = ["Stats", "loop", "optimal_recomputations", "segment", "while_loop"]


@dataclass
class Stats:
    """What a checkpointed loop did: pass ``stats=Stats()`` to ``loop``/``while_loop``.

    Complete once the loop's reverse pass has run.
    """

    nsteps: int = 0  # steps of the loop
    steps: int = 0  # step calls in all: first sweep, recomputations and the recorded re-runs
    snapshots_peak: int = 0  # most snapshots held at once
    peak_bytes: int = 0  # most snapshot bytes held at once (in memory or on disk)
    state_bytes: int = 0  # bytes of one copy of the state (the arrays the steps overwrite)

    @property
    def recomputed(self) -> int:
        """Step calls beyond the first sweep."""
        return self.steps - self.nsteps


# ---------------------------------------------------------------------------------------------- arrays
def _arrays_in(obj: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """The arrays in ``obj`` (nested lists, tuples, dicts and plain objects: 3 levels, 1000 items each)."""
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        yield path, obj
    elif depth >= 3 or isinstance(obj, (str, bytes, type, types.ModuleType)) or callable(obj):
        return
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj[:_BREADTH]):
            yield from _arrays_in(v, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, dict):
        for k, v in itertools.islice(obj.items(), _BREADTH):
            yield from _arrays_in(v, f"{path}[{k!r}]", depth + 1)
    elif hasattr(obj, "__dict__"):
        for k, v in itertools.islice(vars(obj).items(), _BREADTH):
            yield from _arrays_in(v, f"{path}.{k}", depth + 1)


_BREADTH = 1000


def _root(a: Any) -> Any:
    """The array that owns ``a``'s memory (``a`` itself unless it is a view)."""
    while getattr(a, "base", None) is not None and hasattr(a.base, "shape"):
        a = a.base
    return a


class _Layout:
    """The identity and shape of every array among a loop's arguments, checked after each step."""

    def __init__(self, args: tuple) -> None:
        self._args = args
        self._seen = self._now()

    def _now(self) -> list[tuple[str, int, tuple]]:
        return [(p, id(a), tuple(a.shape)) for p, a in _arrays_in(self._args, "args")]

    def check(self, t: int) -> None:
        now = self._now()
        if now == self._seen:
            return
        for (path, ident, shape), (_, ident2, shape2) in zip(self._seen, now, strict=True):
            if shape != shape2:
                raise ValueError(
                    f"pad.checkpoint: step {t} changed the shape of {path} from {shape} to {shape2}; "
                    "a checkpointed step must keep the shapes of its arrays"
                )
            if ident != ident2:
                raise ValueError(
                    f"pad.checkpoint: step {t} replaced {path} by a new array; a checkpointed step must "
                    "update its arrays in place"
                )
        raise ValueError(f"pad.checkpoint: step {t} changed the arrays among its arguments")


def _check_snapshots(snapshots: int | None, storage: str) -> None:
    if snapshots is not None and (not isinstance(snapshots, (int, np.integer)) or snapshots < 1):
        raise ValueError(f"pad.checkpoint: snapshots must be None or an integer >= 1, got {snapshots!r}")
    if storage not in ("memory", "disk"):
        raise ValueError(f"pad.checkpoint: storage must be 'memory' or 'disk', got {storage!r}")


# ---------------------------------------------------------------------------------------------- snapshots
class _Saved:
    """One saved copy of an array, in memory or in a file; shared by every snapshot that holds it.

    With a ``hole`` (a range of flat elements the next step overwrites unread) ``data`` holds the elements
    before and after it, one after the other.
    """

    __slots__ = ("data", "hole", "nbytes", "shape")

    def __init__(self, data: Any, nbytes: int, shape: tuple, hole: tuple[int, int] | None = None) -> None:
        self.data, self.nbytes, self.shape, self.hole = data, nbytes, shape, hole


class _FirstTouch:
    """Watches one step's records: the state arrays whose first use overwrites a range of them unread.

    ``holes`` maps ``id(root)`` to (weak reference to the root, flat range overwritten). Any record that is
    not a launch (an MPI operation, a task) may have read anything: arrays not overwritten before it are
    read. A record made by another thread (a task's launch) leaves the step without holes altogether.
    """

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        self._read: set[int] = set()
        self._holes: dict[int, tuple[weakref.ref, int, int]] = {}
        self._blind = False
        self._foreign = False

    def __call__(self, rec: Any) -> None:
        if threading.get_ident() != self._thread:
            self._foreign = True
        if self._blind or self._foreign:
            return
        rec = unguarded(rec)
        if not isinstance(rec, LaunchRecord):
            self._blind = True
            return
        variant, args = rec.variant, rec.args
        for p in variant.loaded:  # reads first: a launch may read and overwrite views of one array
            root = _root(args[p])
            if id(root) not in self._holes:
                self._read.add(id(root))
        for p in sorted(variant.stored - variant.loaded):
            root = _root(args[p])
            if id(root) in self._holes or id(root) in self._read:
                continue
            span = _span(args[p], variant.overwrites.get(p), rec.n)
            if span is None:
                self._read.add(id(root))  # written in a way pad cannot bound (a[j] += v counts as a read)
            else:
                with contextlib.suppress(TypeError):  # an array type without weak references: no hole
                    self._holes[id(root)] = (weakref.ref(root), *span)

    def holes(self) -> dict[int, tuple[weakref.ref, int, int]]:
        return {} if self._foreign else self._holes


def _span(a: Any, offset: int | None, n: int) -> tuple[int, int] | None:
    """The flat elements of ``a``'s root that ``a[offset : offset + n]`` covers, or None if not a plain range."""
    if offset is None or n < 1 or not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "fc":
        return None
    if offset < 0 or offset + n > a.shape[0] or not a.flags.c_contiguous:
        return None
    root = _root(a)
    if not isinstance(root, np.ndarray) or root.dtype != a.dtype or not root.flags.c_contiguous:
        return None
    start, rem = divmod(arrays.address(a) - arrays.address(root), a.itemsize)
    if rem or start < 0 or start + a.shape[0] > root.size:
        return None
    return start + offset, start + offset + n


def _remove(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


class _Store:
    """The snapshots of one loop: the state arrays found so far and, per step, a copy of each."""

    def __init__(self, ctx: tape.Context, storage: str, directory: str | None, stats: Stats) -> None:
        self._ctx = ctx
        self._roots: dict[int, weakref.ref] = {}
        self._held: dict[int, dict[int, _Saved]] = {}
        self._dead: list[int] = []  # roots that died since the last _purge
        self._stats = stats
        self._dir: str | None = None
        self._files = 0
        self.disk = storage == "disk"
        if self.disk:
            if directory is not None:
                os.makedirs(directory, exist_ok=True)
            self._dir = tempfile.mkdtemp(prefix="pad-checkpoint-", dir=directory)
        # removes the snapshot files: at the end of the reverse pass, after an error, or when forgotten
        self.close = weakref.finalize(self, _remove, self._dir)

    def _save(self, a: Any) -> _Saved:
        if self._dir is None:
            return _Saved(a.copy(), a.nbytes, a.shape)
        self._files += 1
        path = os.path.join(self._dir, f"{self._files}.npy")
        np.save(path, a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a)
        return _Saved(path, a.nbytes, a.shape)

    def _forget(self, key: int) -> Callable[[Any], None]:
        """A temporary array the step wrote has died: its copies go at the next :meth:`_purge`. Not at once:
        the callback runs whenever the garbage collector does, also inside this store's loops over its
        dicts, which must not change size under them (an 8-rank LULESH gradient failed so)."""

        def gone(_: Any) -> None:
            self._dead.append(key)

        return gone

    def _purge(self) -> None:
        while self._dead:
            key = self._dead.pop()
            self._roots.pop(key, None)
            for snap in self._held.values():
                self._discard([snap.pop(key)] if key in snap else [])

    def _known(self, r: Any) -> bool:
        ref = self._roots.get(id(r))
        return ref is not None and ref() is r

    def capture(self, arrays: list[Any]) -> None:
        """Observer of writes: an array first overwritten now joins the state and every held snapshot."""
        self._purge()
        new = [r for r in map(_root, arrays) if not self._known(r)]
        for r in new:
            self._roots[id(r)] = weakref.ref(r, self._forget(id(r)))
            if self._held:
                saved = self._save(r)
                for snap in self._held.values():
                    snap[id(r)] = saved
        if new:
            self._account()

    def trim(self, n: int, holes: dict[int, tuple[weakref.ref, int, int]]) -> None:
        """Drop from snapshot ``n`` the ranges that step ``n`` overwrites before anything reads them."""
        self._purge()
        snap = self._held.get(n)
        if not snap:
            return
        for k, (ref, lo, hi) in holes.items():
            saved, mine = snap.get(k), self._roots.get(k)
            r = ref()
            if mine is None or mine() is not r or r is None or saved is None or saved.hole is not None:
                continue
            if tuple(saved.shape) != tuple(r.shape) or not 0 <= lo < hi <= r.size:
                continue
            whole = np.load(saved.data, mmap_mode="r") if self._dir is not None else saved.data
            flat = whole.reshape(-1)
            part = self._save(np.concatenate((flat[:lo], flat[hi:])))
            snap[k] = _Saved(part.data, part.nbytes, saved.shape, (lo, hi))
            self._discard([saved])

    def take(self, n: int, account: bool = True) -> None:
        self._purge()
        live = [(k, ref()) for k, ref in list(self._roots.items())]
        self._held[n] = {k: self._save(r) for k, r in live if r is not None}
        if account:
            self._account()

    @contextlib.contextmanager
    def preserved(self) -> Iterator[None]:
        """Put the state back as it is now when the block ends (the reverse pass leaves primals as found)."""
        final = -1
        self.take(final, account=False)
        yield
        self.restore(final, drop=True)

    def holds(self, n: int) -> bool:
        return n in self._held

    def positions(self) -> list[int]:
        return sorted(k for k in self._held if k >= 0)

    def restore(self, n: int, drop: bool) -> None:
        """Put the state back as it was at step ``n`` (and forget that snapshot if ``drop``)."""
        self._purge()
        snap = self._held[n]
        pairs = [
            (self._ctx.writable(r), snap[k])  # arrays under differentiation are read-only to the program
            for k, ref in list(self._roots.items())
            if (r := ref()) is not None and k in snap
        ]
        for r, saved in pairs:
            if tuple(r.shape) != tuple(saved.shape):
                raise ValueError(
                    f"pad.checkpoint: an array of the loop state changed shape from {saved.shape} to "
                    f"{r.shape}; a checkpointed step must keep the shapes of its arrays"
                )
        self._ctx.will_write([r for r, _ in pairs])
        for r, saved in pairs:
            data = np.load(saved.data, mmap_mode="r") if self._dir is not None else saved.data
            if saved.hole is None:
                r[...] = data
                continue
            lo, hi = saved.hole
            flat = r.reshape(-1)  # a view: only C-contiguous roots get holes
            flat[:lo] = data[:lo]
            flat[hi:] = data[lo:]
            flat[lo:hi] = np.nan  # the next step overwrites it unread; a read pad did not see shows as NaN
        if drop:
            self.drop(n)

    def drop(self, n: int) -> None:
        self._discard(list(self._held.pop(n).values()))

    def _discard(self, saved: list[_Saved]) -> None:
        if self._dir is None:
            return
        held = {id(s) for snap in self._held.values() for s in snap.values()}
        for s in saved:
            if id(s) not in held:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(s.data)

    def _account(self) -> None:
        self._purge()
        snaps = [snap for n, snap in self._held.items() if n >= 0]
        unique = {id(s): s.nbytes for snap in snaps for s in snap.values()}
        self._stats.peak_bytes = max(self._stats.peak_bytes, sum(unique.values()))
        state = sum(r.nbytes for ref in list(self._roots.values()) if (r := ref()) is not None)
        self._stats.state_bytes = max(self._stats.state_bytes, state)
        self._stats.snapshots_peak = max(self._stats.snapshots_peak, len(snaps))


# ---------------------------------------------------------------------------------------------- running
class _Loop:
    """A checkpointed loop's step, arguments, snapshots and counters."""

    def __init__(
        self,
        ctx: tape.Context,
        step: Callable[..., Any],
        args: tuple,
        storage: str,
        directory: str | None,
        stats: Stats | None,
    ) -> None:
        self.ctx, self.step, self.args = ctx, step, args
        self.stats = Stats() if stats is None else stats
        self.store = _Store(ctx, storage, directory, self.stats)
        self.layout = _Layout(args)

    def advance(self, t: int, records: list[tape.Record] | None, fresh: bool = False) -> None:
        """Run step ``t``: recorded into ``records``, or (``None``) without recording.

        ``fresh``: a snapshot was just taken at ``t``; drop from it what the step overwrites unread.
        """
        self.stats.steps += 1
        first = _FirstTouch() if fresh else None
        if records is None:
            with tape.unrecorded(first):
                self.step(t, *self.args)
        else:
            start = len(records)
            with tape.recording_into(records):
                self.step(t, *self.args)
            if first is not None:
                for rec in records[start:]:
                    first(rec)
        self.layout.check(t)
        if first is not None:
            self.store.trim(t, first.holes())

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Observe the steps' writes; on an error remove the snapshots before it propagates."""
        try:
            with self.ctx.before_writes(self.store.capture):
                yield
        except BaseException:
            self.store.close()
            raise


class _Sweep:
    """Steps ``offset .. offset+n-1`` of a loop run through a Multistage (Revolve) schedule.

    ``held`` says the state at ``offset`` is already a snapshot (``while_loop``'s intervals).
    """

    def __init__(self, lp: _Loop, offset: int, n: int, slots: int, held: bool) -> None:
        self._lp, self._offset, self._held = lp, offset, held
        ram, on_disk = (0, slots) if lp.store.disk else (slots, 0)
        self._actions = iter(MultistageCheckpointSchedule(n, ram, on_disk))
        self._records: list[tape.Record] = []

    def run(self) -> None:
        """Carry out the schedule's actions up to its end of the forward pass, or of the reverse pass."""
        lp, off = self._lp, self._offset
        for action in self._actions:
            if isinstance(action, Forward):
                fresh = action.write_ics and not (self._held and action.n0 == 0)
                if fresh:
                    lp.store.take(off + action.n0)
                records = self._records if action.write_adj_deps else None
                for t in range(action.n0, action.n1):
                    lp.advance(off + t, records, fresh=fresh and t == action.n0)
            elif isinstance(action, Reverse):
                tape.reverse_records(self._records)
            elif isinstance(action, (Copy, Move)):
                lp.store.restore(off + action.n, drop=isinstance(action, Move))
            elif isinstance(action, (EndForward, EndReverse)):
                return
            else:  # pragma: no cover - Multistage emits only the actions above
                raise RuntimeError(f"pad.checkpoint: unexpected schedule action {action!r}")


class _LoopRecord:
    """``loop``'s record: its reverse carries on the Revolve schedule from the end of the forward pass."""

    def __init__(self, lp: _Loop, sweep: _Sweep) -> None:
        self._lp, self._sweep = lp, sweep

    def reverse(self) -> None:
        with self._lp.running(), self._lp.store.preserved():
            self._sweep.run()
        self._lp.store.close()


class _WhileRecord:
    """``while_loop``'s record: reverses the intervals between its snapshots, last first, each by Revolve."""

    def __init__(self, lp: _Loop, nsteps: int, snapshots: int) -> None:
        self._lp, self._n, self._s = lp, nsteps, snapshots

    def reverse(self) -> None:
        store = self._lp.store
        marks = store.positions()
        with self._lp.running(), store.preserved():
            for i in reversed(range(len(marks))):
                a, b = marks[i], (marks[i + 1] if i + 1 < len(marks) else self._n)
                store.restore(a, drop=False)
                sweep = _Sweep(self._lp, a, b - a, self._s - i, held=True)
                sweep.run()  # forward part
                sweep.run()  # reverse part
                if store.holds(a):
                    store.drop(a)
        store.close()


# ---------------------------------------------------------------------------------------------- public
def loop(
    step: Callable[..., Any],
    nsteps: int,
    *args: Any,
    snapshots: int | None = None,
    storage: str = "memory",
    directory: str | None = None,
    stats: Stats | None = None,
) -> None:
    """Call ``step(t, *args)`` for ``t in range(nsteps)``; inside ``autodiff`` keep at most ``snapshots``.

    ``snapshots=None`` keeps everything (records every step). ``storage="disk"`` writes the snapshots to
    files in a fresh folder under ``directory`` (the system's temporary folder by default), removed when the
    reverse pass ends or fails. ``stats`` (a ``Stats``) counts steps, recomputations and snapshot memory.
    """
    _check_snapshots(snapshots, storage)
    if snapshots is None or not tape.is_recording() or nsteps < 1:
        for t in range(nsteps):
            step(t, *args)
        if stats is not None:
            stats.nsteps = stats.steps = nsteps
        return
    ctx = tape.current()
    assert ctx is not None
    lp = _Loop(ctx, step, args, storage, directory, stats)
    lp.stats.nsteps = nsteps
    sweep = _Sweep(lp, 0, nsteps, snapshots, held=False)
    with lp.running():
        sweep.run()
    ctx.record(_LoopRecord(lp, sweep))


def optimal_recomputations(nsteps: int, snapshots: int) -> int:
    """The fewest step calls beyond the first sweep that reverse ``nsteps`` steps with ``snapshots``
    snapshots: those of the offline binomial (Revolve) schedule, which ``loop`` follows (``Stats.recomputed``
    counts the same calls). ``while_loop``, which learns its step count only at the end, makes more."""
    if nsteps < 1:
        return 0
    return int(optimal_steps_binomial(nsteps, min(snapshots, nsteps - 1))) - nsteps


def while_loop(
    cond: Callable[..., Any],
    step: Callable[..., Any],
    *args: Any,
    snapshots: int | None = None,
    storage: str = "memory",
    directory: str | None = None,
    stats: Stats | None = None,
) -> int:
    """``t = 0; while cond(*args): step(t, *args); t += 1`` with an online checkpointing schedule.

    ``cond`` is evaluated on primal values only; inside ``autodiff`` it may not read a shadow array. Returns
    the number of steps taken. Options as for ``loop``.
    """
    _check_snapshots(snapshots, storage)
    ctx = tape.current()
    if ctx is not None and ctx.reverse_mode:
        _refuse_shadow_reads(ctx, cond, args)
    if snapshots is None or not tape.is_recording():
        t = 0
        while cond(*args):
            step(t, *args)
            t += 1
        if stats is not None:
            stats.nsteps = stats.steps = t
        return t
    assert ctx is not None
    lp = _Loop(ctx, step, args, storage, directory, stats)
    store, t, period = lp.store, 0, 1
    with lp.running():
        while cond(*args):
            if t % period == 0:
                if len(store.positions()) >= snapshots:  # thin out: keep every other snapshot
                    period *= 2
                    for k in store.positions():
                        if k % period:
                            store.drop(k)
                if t % period == 0:
                    store.take(t)
            lp.advance(t, None, fresh=store.holds(t))
            t += 1
    lp.stats.nsteps = t
    if t == 0:
        store.close()
    else:
        ctx.record(_WhileRecord(lp, t, snapshots))
    return t


def _refuse_shadow_reads(ctx: tape.Context, cond: Callable[..., Any], args: tuple) -> None:
    """Refuse a ``while_loop`` condition that can see a shadow array (argument, closure, global, default)."""
    seen: list[tuple[str, Any]] = list(_arrays_in(args, "args"))
    code = getattr(cond, "__code__", None)
    if code is not None:
        cells = zip(code.co_freevars, getattr(cond, "__closure__", None) or (), strict=False)
        for name, cell in cells:
            with contextlib.suppress(ValueError):  # an empty cell
                seen += _arrays_in(cell.cell_contents, name)
        scope = getattr(cond, "__globals__", {})
        for name in code.co_names:
            if name in scope:
                seen += _arrays_in(scope[name], name)
        seen += _arrays_in(getattr(cond, "__defaults__", None) or (), "defaults")
    if hasattr(cond, "__self__"):
        seen += _arrays_in(cond.__self__, "self")
    for path, a in seen:
        if ctx.is_shadow(a):
            raise ValueError(
                f"pad.checkpoint.while_loop: the condition can read {path}, a shadow array; the number "
                "of steps must depend on primal values only"
            )


class _SegmentRecord:
    """``segment``'s record: restore the inputs, rerun ``fn`` recording it, and reverse that."""

    def __init__(self, fn: Callable[..., Any], args: tuple, inputs: list[tuple[Any, tape.Kept]]) -> None:
        self._fn, self._args, self._inputs = fn, args, inputs

    def reverse(self) -> None:
        ctx = tape.current()
        assert ctx is not None
        changed = [(ctx.writable(a), k) for a, k in self._inputs if k.copied]
        now = [a.copy() for a, _ in changed]  # to leave the primal arrays as the reverse pass found them
        ctx.will_write([a for a, _ in changed])
        for a, k in changed:
            a[...] = k.array
        for _, k in self._inputs:
            k.release()
        records: list[tape.Record] = []
        with tape.recording_into(records):
            self._fn(*self._args)
        tape.reverse_records(records)
        for (a, _), value in zip(changed, now, strict=True):
            a[...] = value


def segment(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` keeping nothing for the reverse pass but its inputs; recompute it there.

    Inside ``autodiff``, ``fn`` must update its arguments in place (an array it returns would be a new one
    when recomputed, cut off from its seed).
    """
    if not tape.is_recording():
        return fn(*args)
    ctx = tape.current()
    assert ctx is not None
    inputs: dict[int, tuple[Any, tape.Kept]] = {}
    for _, a in _arrays_in(args, "args"):
        r = _root(a)
        inputs.setdefault(id(r), (r, ctx.keep(r)))
    written: dict[int, tuple[weakref.ref, Any]] = {}

    def before(arrays: list[Any]) -> None:
        for a in arrays:
            r = _root(a)
            if id(r) not in inputs and id(r) not in written:
                written[id(r)] = (weakref.ref(r), r.copy())

    with ctx.before_writes(before), tape.unrecorded():
        result = fn(*args)
    if any(True for _ in _arrays_in(result, "result")):
        raise TypeError(
            "pad.checkpoint.segment: fn returned an array; inside autodiff a segment must update its "
            "arguments in place"
        )
    kept = list(inputs.values())
    for ref, copy in written.values():
        r = ref()
        if r is not None:  # state outside the arguments (e.g. a closure's array): restore it as well
            k = tape.Kept(copy)
            k.copied = True
            kept.append((r, k))
    ctx.record(_SegmentRecord(fn, args, kept))
    return result
