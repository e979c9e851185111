"""The program-level tape: shadows, recording and the autodiff/fwddiff drivers.

The tape knows nothing of kernels' insides or of MPI. An operation (a launch, a message, a task) asks the
current context for the shadows of its arrays, tells it which arrays it is about to overwrite (and writes
them through ``writable``: arrays under differentiation are read-only to the program), keeps the values its
adjoint will need, and appends a record whose ``reverse()`` runs its adjoint. Reverse mode runs
the primal once, then the records' adjoints in reverse order; forward mode runs each operation's tangent
version immediately, so it records nothing.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import itertools
import linecache
import os
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

import numpy as np

from pad import arrays, replay
from pad.annotations import Active, Const, Dup, DupNoNeed
from pad.kernel import checks

__all__ = [
    "Account",
    "Active",
    "ActiveScalar",
    "Const",
    "Context",
    "Dup",
    "Kept",
    "Record",
    "autodiff",
    "current",
    "fwddiff",
]


# ---------------------------------------------------------------------------------------------- shadow pool
POOL = arrays.Pool(1 << 30)
"""The host arrays that ``autodiff`` allocated for itself (shadows of arrays that came without one: a step's
state, its intermediates; copies of values its adjoints need that the step overwrites) are kept here at its
end for the next ``autodiff``. A program differentiated step by step (LULESH's per-cycle gradient) would
otherwise get fresh pages from the OS at every step, whose first touches fault: on the project's VM that was
a tenth of LULESH's gradient time."""


# ---------------------------------------------------------------------------------------------- active scalars
class ActiveScalar(float):
    """The float a differentiated function receives for an ``Active`` (or, in ``fwddiff``, a ``Dup``) scalar.

    Operations recognise it by type: a kernel launch treats it as an active scalar argument. Python
    arithmetic on it would silently drop the derivative, so it raises instead.
    """

    slot: int
    tangent: float

    def __new__(cls, value: float, slot: int, tangent: float = 0.0) -> ActiveScalar:
        obj = super().__new__(cls, value)
        obj.slot = slot
        obj.tangent = tangent
        return obj

    def _refuse(self, *_: object) -> Any:
        raise TypeError(
            "Python arithmetic on an Active scalar inside pad.autodiff/fwddiff is not differentiated; "
            "pass the scalar to a kernel (pad.launch) and compute with it there, or use float(s) for a constant"
        )

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = _refuse


# ---------------------------------------------------------------------------------------------- records
class Record(Protocol):
    """One recorded operation: ``reverse()`` runs its adjoint on the context's shadows.

    A record whose adjoint communicates has ``comm``, the mpi4py communicator it communicates on: whatever
    decides when records are made and reversed (a checkpointed loop's schedule) decides alike on its ranks.
    """

    def reverse(self) -> None: ...


class Account:
    """Bytes of the private copies held by the values kept while this account was current (``accounting``):
    what a part of a program (a checkpointed loop's recorded steps) holds for its adjoints, measured.

    ``within``: an account charged alike (a checkpointed loop's, summing its steps' accounts), which notes in
    its ``changed`` the accounts within it whose bytes changed, so that a reader of their sizes looks at
    those alone (a loop of many recorded steps would otherwise walk all of them after each step)."""

    __slots__ = ("bytes", "changed", "within")

    def __init__(self, within: Account | None = None) -> None:
        self.bytes = 0
        self.within = within
        self.changed: set[Account] = set()

    def charge(self, nbytes: int) -> None:
        """Add ``nbytes`` (less than 0: a copy freed) to this account and the one it lies within."""
        self.bytes += nbytes
        within = self.within
        if within is not None:
            within.bytes += nbytes
            within.changed.add(self)


class Kept:
    """A value an adjoint needs: the live array until something overwrites it, then a private copy.

    Under ``PAD_DEBUG`` it also holds a digest of the value, so that ``changed()`` tells a write pad did not
    see (NumPy's, to an array pad does not protect) from none."""

    __slots__ = ("account", "array", "copied", "digest", "extent", "users")

    def __init__(self, array: Any) -> None:
        self.array = array
        self.extent = arrays.extent(array)  # its memory, for the overlap tests of every later write
        self.copied = False
        self.users = 0
        self.account = _account.get()
        self.digest = _digest(array) if checks.enabled() else None

    def changed(self) -> bool:
        """Whether the value changed since it was kept (known only under ``PAD_DEBUG``)."""
        return self.digest is not None and _digest(self.array) != self.digest

    @property
    def value(self) -> Any:
        return self.array

    def scratch(self) -> Any:
        """The value as an array the caller may overwrite (a copy unless this is the last private user)."""
        self.users -= 1
        if self.copied and self.users <= 0:
            return self.array
        scratch = arrays.copy(self.array)
        replay.done(arrays.assign, scratch, self.array)
        return scratch

    def release(self) -> None:
        self.users -= 1


def _digest(a: Any) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(arrays.to_host(a)).tobytes(), digest_size=16).digest()


def _may_own(a: int | None, b: int | None) -> bool:
    """Whether memories owned by ``a`` and ``b`` (``arrays.owner``; None: not known) may overlap."""
    return a is None or b is None or a == b


def _is_float_array(a: Any) -> bool:
    return hasattr(a, "dtype") and hasattr(a, "shape") and a.dtype.kind == "f"


# ---------------------------------------------------------------------------------------------- contexts
class Unread:
    """Whether a watched shadow (``Context.watch_unread``) is still unasked for since its launch."""

    __slots__ = ("unread",)

    def __init__(self) -> None:
        self.unread = True


class Context:
    """State of one ``autodiff`` or ``fwddiff`` call, shared by every operation it runs."""

    reverse_mode: bool

    def __init__(self, reverse_mode: bool) -> None:
        self.reverse_mode = reverse_mode
        self.records: list[Record] = []
        self.active_adjoints: list[float] = []
        # id(array) -> (reference to the array, its shadow); regions: arrays whose views share the shadow,
        # with the id of the NumPy array that owns their memory (``arrays.owner``: views of other owners
        # never lie in them). Arrays are referenced weakly: an intermediate that dies (a step's temporary)
        # leaves both maps.
        self._shadow_by_id: dict[int, tuple[Callable[[], Any], Any]] = {}
        self._regions: dict[int, tuple[Callable[[], Any], Any, int | None]] = {}
        self._const_ids: dict[int, Any] = {}
        self._serials: dict[int, int] = {}  # id(array) -> the order in which its shadow was registered
        self._registered = 0
        self._live: dict[tuple, Kept] = {}
        # the same, by the NumPy array that owns their memory (None: not known): a write compares its extent
        # with the kept values of its owner and of None only (distinct owners' memories never overlap)
        self._live_by_owner: dict[int | None, dict[tuple, Kept]] = {}
        self.kept_bytes = 0  # bytes of the private copies that kept values hold now (see ``will_write``)
        # Arrays allocated for this context alone (no caller holds them), weakly: those still alive at the end
        # go to the pool, and holding them would keep what the run frees early (checkpointing's copies).
        self._owned: list[Callable[[], Any]] = []
        self._lock = threading.RLock()
        self._dying: list[tuple[int, Any]] = []  # arrays that died while another thread held the lock
        self.guard: Callable[[Record, list[Any]], Record] | None = None
        # autodiff(fuse=True): the last launch's primal run waits here; any later pad operation runs it
        # first (``current()``), and if none comes, the launch's fused adjoint makes its outputs (its plain
        # one, where they all are in ``unneeded``: the ids of the arrays given as DupNoNeed).
        self.fuse = False
        self.pending: Any = None
        self.unneeded: set[int] = set()
        # Checks an operation leaves for the end of the reverse pass, so that it need not wait for a device
        # in the middle of it (a GPU adjoint's tape overflow flag).
        self.after_reverse: list[Callable[[], None]] = []
        # Host arrays given as Dup, read-only to the code between pad operations while ``f`` runs and its
        # adjoint: id -> (the array, a writable alias made before its flag was cleared, how to name it)
        self.protected: dict[int, tuple[np.ndarray, np.ndarray, str]] = {}
        # PAD_DEBUG: the arrays launches left, with digests of their values (``settle``, ``verify``)
        self._settled: dict[int, tuple[Callable[[], Any], bytes, str]] = {}
        # id(array) -> weak reference: buffers an operation made for itself (``scratch``)
        self._scratch: dict[int, Callable[[], Any]] = {}
        # Counters a checkpointed loop compares around a step it records for replaying (``pad.checkpoint``):
        # zero shadows made, and changes to the kept values not yet copied.
        self.zeroed = 0
        self.live_version = 0
        # The zero shadows made while a launch asks for its shadows (``launch_shadows``), else None
        self._fresh_zeros: list[Any] | None = None
        # memory (``arrays.extent``) found to hold no kept value, valid while ``live_version`` is unchanged
        self._unaliased: tuple[int, set[tuple]] = (0, set())
        # Shadows this context made zero (no caller's seed in them), weakly: id -> reference
        self._made: dict[int, Callable[[], Any]] = {}
        # Such shadows of outputs a launch only stores (``watch_unread``), by their extents, until an
        # operation asks for one of them (or for a view of it) again
        self._unread: dict[int, tuple[tuple, Unread]] = {}

    # -- shadows -------------------------------------------------------------------------------------
    def bind(self, x: Any, dx: Any) -> None:
        """Register ``dx`` as the shadow of ``x`` (and of every view into ``x``)."""
        with self._lock:
            self._remember(x, dx, region=True)

    def mark_const(self, x: Any) -> None:
        with self._lock:
            self._const_ids[id(x)] = x

    def shadow(self, x: Any) -> Any | None:
        """The shadow of array ``x``: ``None`` if ``x`` is inactive (Const, or not floating point).

        Arrays first seen here (intermediates the function allocates) get a zero shadow; a view into a
        registered array gets the matching view into its shadow. Once a ``guard`` is set (pad.tasks sets
        it), the shadows an operation asks for are noted and handed to the guard with its record.
        """
        dx = self._lookup_shadow(x)
        if dx is not None and self._unread:
            self._asked(dx)
        if dx is not None and self.guard is not None:
            touched = _touched.get()
            if touched is not None:
                touched.append(dx)
        return dx

    def launch_shadows(self, args: tuple) -> tuple[list[Any | None], list[Any]]:
        """The shadows of a launch's arguments (None for scalars and inactive arrays), and those of them made
        zero now: the arrays' first use in ``f``."""
        made: list[Any] = []
        self._fresh_zeros = made
        try:
            shadows = [
                self.shadow(a) if hasattr(a, "shape") and getattr(a, "ndim", 0) > 0 else None for a in args
            ]
            return shadows, made
        finally:
            self._fresh_zeros = None

    def made_zero(self, dx: Any) -> bool:
        """Whether shadow ``dx`` is one this context made zero, not one the caller gave (with its seed)."""
        ref = self._made.get(id(dx))
        return ref is not None and ref() is dx

    def watch_unread(self, shadows: list[Any]) -> list[Unread]:
        """Watch shadows this context made zero (``made_zero``) of outputs a launch stores and does not
        read: each stays ``unread`` while no later operation asks for it (or for a view of it), and so holds
        zero when the launch's adjoint runs (only later operations' adjoints, which run first, add into it),
        which may then leave that output out."""
        watched = []
        with self._lock:
            for dx in shadows:
                flag = Unread()
                self._unread[id(flag)] = (arrays.extent(dx), flag)
                watched.append(flag)
        return watched

    def _asked(self, dx: Any) -> None:
        """An operation asked for shadow ``dx``: the watched shadows it overlaps may be added into now."""
        span = arrays.extent(dx)
        with self._lock:
            for key, (watched, flag) in list(self._unread.items()):
                if arrays.overlap(span, watched):
                    flag.unread = False
                    del self._unread[key]

    @staticmethod
    def left_zero(shadows: Iterable[Any], made: list[Any]) -> None:
        """Note that the adjoint of the launch whose shadows ``launch_shadows`` just gave leaves ``shadows``
        zero throughout. The shadows it ``made`` zero that those are, or are views of all of (no adjoint after
        that launch's adds to them), are zero again after every reverse pass: a replay of the step needs no
        fill of them."""
        for dx in shadows:
            for z in made:
                if arrays.reaches_all(dx, z):
                    replay.left_as_filled(z)

    def scratch(self, a: Any) -> None:
        """Mark ``a``, a buffer an operation allocated for itself and reads only before it returns (a
        message buffer), as none of the program's state: a checkpointed loop that sees it written neither
        snapshots nor saves it (the operation makes a new one when it runs again)."""
        key = id(a)

        def gone(ref: Any) -> None:
            if self._scratch.get(key) is ref:
                del self._scratch[key]

        self._scratch[key] = weakref.ref(a, gone)

    def is_scratch(self, a: Any) -> bool:
        """Whether ``a`` is a buffer marked by ``scratch`` (and still alive)."""
        ref = self._scratch.get(id(a))
        return ref is not None and ref() is a

    def is_shadow(self, x: Any) -> bool:
        """Whether array ``x`` shares memory with the shadow of a registered array."""
        with self._lock:
            regions = list(self._regions.values())
        return hasattr(x, "nbytes") and any(arrays.may_share_memory(x, dbase) for _, dbase, _ in regions)

    def _lookup_shadow(self, x: Any) -> Any | None:
        hit = self._shadow_by_id.get(id(x))
        if hit is not None and hit[0]() is x:
            return hit[1]
        if id(x) in self._const_ids or not _is_float_array(x):
            return None
        with self._lock:
            hit = self._shadow_by_id.get(id(x))
            if hit is not None and hit[0]() is x:
                return hit[1]
            dx = self._view_of_registered(x)
            if dx is None and self._register_root(x):
                dx = self._view_of_registered(x)
            self._remember(x, self._zero_shadow(x) if dx is None else dx, region=dx is None)
            return self._shadow_by_id[id(x)][1]

    def _zero_shadow(self, x: Any) -> Any:
        self.zeroed += 1
        dx = self._owned_like(x, arrays.zeros_like, lambda a: arrays.fill(a, 0))
        key = id(dx)
        self._made[key] = weakref.ref(dx, lambda ref: self._made.get(key) is ref and self._made.pop(key))
        replay.done(arrays.zero, dx)
        if self._fresh_zeros is not None:
            self._fresh_zeros.append(dx)
        return dx

    def _copy(self, x: Any) -> Any:
        copy = self._owned_like(x, arrays.copy, lambda a: arrays.copyto(a, x))
        replay.done(arrays.assign, copy, x)
        return copy

    def _owned_like(self, x: Any, make: Callable[[Any], Any], refill: Callable[[np.ndarray], None]) -> Any:
        """``make(x)``, for this context alone; in reverse mode a pooled host array ``refill``-ed instead
        where one has ``x``'s shape and dtype, and the result goes to the pool at the end (``autodiff``)."""
        if not (self.reverse_mode and isinstance(x, np.ndarray)):
            return make(x)
        a = POOL.take(x.shape, x.dtype)
        if a is None:
            a = make(x)
        else:
            refill(a)
        self._owned.append(weakref.ref(a))
        return a

    def _register_root(self, x: Any) -> bool:
        """Give the array owning view ``x``'s memory a zero shadow, as a region; whether it did.

        A temporary view of an intermediate (``t.reshape(-1)``) must map into the same shadow as the next
        view of ``t``, not into a zero shadow of its own that is forgotten when the view is collected. Only
        when the owner is a plain C-contiguous float array of the same dtype that no registered region
        overlaps (its shadow would then disagree with theirs) and that is not marked constant.
        """
        base = arrays.root(x)
        if base is x or id(base) in self._const_ids or not _is_float_array(base) or base.dtype != x.dtype:
            return False
        if not arrays.c_contiguous(base) or id(base) in self._shadow_by_id:
            return False
        owner = arrays.owner(base)
        for ref, _, held in list(self._regions.values()):
            other = ref()
            if other is not None and _may_own(owner, held) and arrays.may_share_memory(base, other):
                return False
        self._remember(base, self._zero_shadow(base), region=True)
        return True

    def _remember(self, x: Any, dx: Any, region: bool) -> None:
        """Map ``x`` to ``dx`` (and views into ``x`` to views into ``dx`` if ``region``) while ``x`` lives."""
        key = id(x)

        def forget(ref: Any) -> None:
            # The garbage collector calls this in whatever thread drops the last reference, a snapshot
            # copier's say, while another thread may hold the lock and wait for that copier: never block.
            self._dying.append((key, ref))
            if self._lock.acquire(blocking=False):
                try:
                    self._bury()
                finally:
                    self._lock.release()

        try:
            ref: Callable[[], Any] = weakref.ref(x, forget)
        except TypeError:  # an array type without weak references: held for the context's lifetime

            def ref() -> Any:
                return x

        self._shadow_by_id[key] = (ref, dx)
        self._serials[key] = self._registered
        self._registered += 1
        if region:
            self._regions[key] = (ref, dx, arrays.owner(x))

    def _bury(self) -> None:
        """Forget the arrays that died (under the lock)."""
        while self._dying:
            key, ref = self._dying.pop()
            for table in (self._shadow_by_id, self._regions):
                if table.get(key, (None,))[0] is ref:
                    del table[key]
            if key not in self._shadow_by_id:
                self._serials.pop(key, None)

    def registered(self) -> list[tuple[int, Any, Any]]:
        """``(serial, array, shadow)`` of every array registered as a region (a root whose views share its
        shadow) and still alive, in the order of registration: a program that makes the same pad operations
        registers the same arrays under the same serials (``pad.checkpoint`` saves shadows by them)."""
        with self._lock:
            self._bury()
            entries = [(self._serials.get(k, -1), ref(), dx) for k, (ref, dx, _) in self._regions.items()]
        return sorted((e for e in entries if e[1] is not None), key=lambda e: e[0])

    @property
    def serial(self) -> int:
        """The serial the next registered array will get."""
        return self._registered

    def _view_of_registered(self, x: Any) -> Any | None:
        addr, nbytes, owner = arrays.address(x), x.nbytes, arrays.owner(x)
        # a copy: a region that dies leaves the dict in its weakref callback, which the garbage collector
        # may run in the middle of a loop over it
        for ref, dbase, held in list(self._regions.values()):
            base = ref() if _may_own(owner, held) else None
            if base is None:
                continue
            start = arrays.address(base)
            if base.dtype != x.dtype or not (start <= addr and addr + nbytes <= start + base.nbytes):
                continue
            if not (arrays.c_contiguous(base) and arrays.c_contiguous(dbase)):
                continue
            return arrays.view(dbase, x.shape, x.strides, addr - start)
        return None

    # -- arrays under differentiation: read-only between pad operations ---------------------------------
    def protect(self, x: Any, dx: Any, name: str) -> None:
        """Make host array ``x`` read-only (NumPy's flag) so that a NumPy write to it between pad operations
        fails instead of going undifferentiated; pad's own operations write through :meth:`writable`."""
        if type(x) is not np.ndarray or not x.flags.writeable or id(x) in self.protected:
            return
        alias = x.view()  # made while x is writable, it stays so; numba types it as it typed x
        x.flags.writeable = False
        self.protected[id(x)] = (x, alias, name)
        self._remember(alias, dx, region=False)

    def writable(self, a: Any) -> Any:
        """``a``, or a writable alias of it where ``a`` is (a view of) an array :meth:`protect` made read-only."""
        if type(a) is not np.ndarray or a.flags.writeable or not self.protected:
            return a
        hit = self.protected.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        span = arrays.extent(a)
        for x, alias, _ in self.protected.values():
            lo, hi = arrays.extent(x)[1:]
            if lo <= span[1] and span[2] <= hi and alias.flags.c_contiguous:
                return np.ndarray(a.shape, a.dtype, buffer=alias, offset=span[1] - lo, strides=a.strides)
        return a

    def release(self) -> None:
        """Make the protected arrays writable again."""
        for x, _, _ in self.protected.values():
            x.flags.writeable = True
        self.protected.clear()

    def refused_write(self, error: ValueError) -> ValueError | None:
        """The error for NumPy's refusal to write a protected array from the program, else None (a refusal
        from inside pad is pad's bug and stays as it is)."""
        if "read-only" not in str(error) or not self.protected:
            return None
        frames = [f for f, _ in traceback.walk_tb(error.__traceback__)]
        frame = next((f for f in reversed(frames) if not _in_package(f.f_code.co_filename, np)), None)
        if frame is None or _in_package(frame.f_code.co_filename, sys.modules["pad"]):
            return None
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
        source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
        named = [
            name
            for x, _, name in self.protected.values()
            if any(arrays.may_share_memory(v, x) for v in _arrays_named(source, frame))
        ]
        which = (
            " and ".join(named)
            if named
            else "an array given as pad.Dup ("
            + ", ".join(name for _, _, name in self.protected.values())
            + ")"
        )
        return ValueError(
            f"{where}: `{source}` writes {which} with NumPy between pad operations, where pad cannot "
            "differentiate it: arrays under differentiation are read-only there. Write it with pad's "
            "differentiable operations, pad.copy(dst, src) for dst[...] = src, pad.scale(x, a) for x *= a, "
            "pad.axpy(a, x, y) for y += a * x, pad.fill(x, value) for x[...] = value, or in a kernel; "
            "or write a copy (x.copy()), which is not differentiated"
        )

    def settle(self, written: Iterable[Any], by: str) -> None:
        """PAD_DEBUG: remember the values operation ``by`` left in ``written``, for :meth:`verify`."""
        for a in written:
            if hasattr(a, "shape") and self._lookup_shadow(a) is not None:
                self._settled[id(a)] = (weakref.ref(a), _digest(a), by)

    def verify(self, before: str) -> None:
        """PAD_DEBUG: refuse, before operation ``before``, an array changed since an operation left it by a
        write pad did not see (NumPy's, to an array it does not protect)."""
        for key, (ref, digest, by) in list(self._settled.items()):
            a = ref()
            if a is None:
                del self._settled[key]
            elif _digest(a) != digest:
                raise ValueError(
                    f"{before}: an array {by} wrote (shape {a.shape}, {a.dtype}) was changed since by a write "
                    "pad did not see (NumPy's, to an array pad does not protect: one the program allocates, a "
                    "pad.Const, a GPU array), so its derivative would be wrong. Write it with "
                    "pad.copy/scale/axpy/fill or in a kernel, or write a copy"
                )

    # -- recording (reverse mode) --------------------------------------------------------------------
    def record(self, rec: Record) -> None:
        """Append ``rec`` to the current recording (wrapped by ``guard`` with the shadows it touched).

        In a step ``pad.graph`` records, only records whose adjoints do all their device work through the
        record (``replayable``: launches) let it be replayed."""
        step = replay.recording()
        if step is not None and not getattr(rec, "replayable", False):
            step.refuse(
                f"it differentiates an operation whose adjoint a replay does not redo ({type(rec).__name__})"
            )
        if self.guard is not None:
            touched = _touched.get()
            if touched:
                rec = self.guard(rec, touched[:])
                touched.clear()
        _recording.get(self.records).append(rec)

    def keep(self, x: Any) -> Kept:
        """Hold ``x``'s current value for an adjoint; it is copied only if something later overwrites it."""
        if _discarding():
            return Kept(x)
        k = arrays.layout(x)
        with self._lock:
            kept = self._live.get(k)
            if kept is None:
                kept = self._live[k] = Kept(x)
                self._live_by_owner.setdefault(arrays.owner(x), {})[k] = kept
                self.live_version += 1
            kept.users += 1
            return kept

    def will_write(self, targets: Iterable[Any], access: Any = None) -> None:
        """Call before an operation overwrites ``targets``: kept values that alias them are copied first.

        ``access`` describes what the operation reads and how it writes, for the write observers (a
        launch passes ``pad.parallel.LaunchAccess``); ``None`` means it may read anything.
        """
        targets = list(targets)
        with self._lock:
            for a in targets:
                self._settled.pop(id(a), None)  # an operation writes it: its value may change
            for obs in _observers.get():
                obs(targets, access)
            for a in targets:
                if not self._live:
                    return
                span = arrays.extent(a)
                if self._unaliased[0] != self.live_version:
                    self._unaliased = (self.live_version, set())
                if span in self._unaliased[1]:
                    continue  # no kept value lies there, and none was kept since that was found
                owner = arrays.owner(a)
                groups = self._live_by_owner
                for group in (
                    list(groups.values()) if owner is None else (groups.get(owner), groups.get(None))
                ):
                    if not group:
                        continue
                    for k, kept in list(group.items()):
                        if arrays.overlap(kept.extent, span):
                            if kept.users > 0:  # one whose adjoints have all run is let go, not copied
                                kept.array = self._copy(kept.array)
                                kept.copied = True
                                self._count_kept(kept.array, kept.account)
                            del self._live[k], group[k]
                            self.live_version += 1
                if self._unaliased[0] != self.live_version:
                    self._unaliased = (self.live_version, set())
                self._unaliased[1].add(span)

    def live_kept(self) -> set[int]:
        """Identities of the kept values not yet copied that an adjoint still needs (a later write to their
        arrays copies them)."""
        with self._lock:
            return {id(k) for k in self._live.values() if k.users > 0}

    def keeps_within(self, extents: Iterable[tuple]) -> bool:
        """Whether a kept value not yet copied that an adjoint still needs shares memory with one of
        ``extents`` (``arrays.extent``)."""
        spans = list(extents)
        with self._lock:
            live = [k for k in self._live.values() if k.users > 0]
            return any(arrays.overlap(k.extent, span) for k in live for span in spans)

    def _count_kept(self, copy: Any, account: Account | None) -> None:
        """Add a kept value's private copy to ``kept_bytes`` (and its account's) until the copy is freed."""
        nbytes = int(copy.nbytes)
        with contextlib.suppress(TypeError):  # an array type without weak references: counted for good
            weakref.finalize(copy, self._uncount, nbytes, account)
        self.kept_bytes += nbytes
        if account is not None:
            account.charge(nbytes)

    def _uncount(self, nbytes: int, account: Account | None) -> None:
        self.kept_bytes -= nbytes
        if account is not None:
            account.charge(-nbytes)

    @contextlib.contextmanager
    def observe_writes(self) -> Iterator[list[Any]]:
        """Collect every array that operations announce they overwrite inside the block."""
        seen: list[Any] = []
        with self.before_writes(lambda targets, _: seen.extend(targets)):
            yield seen

    @contextlib.contextmanager
    def before_writes(self, callback: Callable[[list[Any], Any], None]) -> Iterator[None]:
        """Call ``callback(arrays, access)`` (under the context's lock) before operations in the block
        overwrite ``arrays`` (``access``: see ``will_write``).

        The observer follows the block's own flow of control, tasks it spawns included, not other threads.
        """
        token = _observers.set((*_observers.get(), callback))
        try:
            yield
        finally:
            _observers.reset(token)

    def at_top_level(self) -> bool:
        """Whether operations record onto this context's own tape (not a task's or a segment's)."""
        return self.guard is None and _recording.get(None) is self.records

    def flush(self) -> None:
        """Run the deferred primal launch, if any."""
        with self._lock:  # task threads ask for the context too: one runs the primal, the others wait
            pending, self.pending = self.pending, None
            if pending is not None:
                pending.run_primal()

    def add_active_adjoint(self, slot: int, value: float) -> None:
        with self._lock:
            self.active_adjoints[slot] += value


_context: ContextVar[Context | None] = ContextVar("pad_context", default=None)
_recording: ContextVar[list[Record]] = ContextVar("pad_recording")
_touched: ContextVar[list[Any] | None] = ContextVar("pad_touched", default=None)
_observers: ContextVar[tuple[Callable[[list[Any], Any], None], ...]] = ContextVar("pad_observers", default=())
_account: ContextVar[Account | None] = ContextVar("pad_account", default=None)


@contextlib.contextmanager
def accounting(account: Account) -> Iterator[None]:
    """Charge the copies of values kept inside the block to ``account`` (whenever they are made)."""
    token = _account.set(account)
    try:
        yield
    finally:
        _account.reset(token)


class _Discard(list):
    """The recording of an ``unrecorded()`` block: records are shown to ``watch`` (if any), then dropped."""

    def __init__(self, watch: Callable[[Any], None] | None = None) -> None:
        super().__init__()
        self._watch = watch

    def append(self, rec: Any) -> None:
        if self._watch is not None:
            self._watch(rec)


_DISCARD = _Discard()


def _discarding() -> bool:
    return isinstance(_recording.get(None), _Discard)


def current() -> Context | None:
    """The active ``autodiff``/``fwddiff`` context, or ``None`` outside them.

    Every pad operation starts by asking for it, so this is where a deferred launch (``fuse=True``) runs.
    """
    ctx = _context.get()
    if ctx is not None and ctx.pending is not None:
        ctx.flush()
    return ctx


@contextlib.contextmanager
def recording_into(records: list[Record]) -> Iterator[None]:
    """Append the records of the operations in this block to ``records`` instead of the main tape."""
    token = _recording.set(records)
    ttoken = _touched.set([])
    try:
        yield
    finally:
        _touched.reset(ttoken)
        _recording.reset(token)


@contextlib.contextmanager
def unrecorded(watch: Callable[[Record], None] | None = None) -> Iterator[None]:
    """Run the block's operations in reverse mode without recording or keeping anything.

    Unlike ``suspended()``, operations still announce what they overwrite, so values kept for earlier
    records and write observers (checkpoint snapshots) stay right. ``watch`` is shown each record before
    it is dropped (from whichever thread made it: tasks the block spawns report here too).
    """
    with recording_into(_DISCARD if watch is None else _Discard(watch)):
        yield


def is_recording() -> bool:
    """Whether operations run now are recorded for a reverse pass."""
    ctx = _context.get()
    return ctx is not None and ctx.reverse_mode and not _discarding()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Run the block as plain primal code: operations inside neither record nor propagate tangents."""
    token = _context.set(None)
    try:
        yield
    finally:
        _context.reset(token)


@contextlib.contextmanager
def entered(ctx: Context | None) -> Iterator[None]:
    """Make ``ctx`` the current context in this thread (used to carry it into task threads)."""
    token = _context.set(ctx)
    try:
        yield
    finally:
        _context.reset(token)


def reverse_records(records: list[Record]) -> None:
    """Run the adjoints of ``records`` in reverse order, releasing each record as it is done."""
    while records:
        records.pop().reverse()


def _in_package(filename: str, package: Any) -> bool:
    return filename.startswith(os.path.dirname(package.__file__) + os.sep)


def _arrays_named(source: str, frame: Any) -> list[Any]:
    """The arrays a line of source writes, as far as its form says (the targets of ``=`` and ``+=``, the
    object of a method call, the first argument and ``out=`` of a function call), in ``frame``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    stmt = tree.body[0] if tree.body else None
    written: list[ast.AST] = [tree]
    if isinstance(stmt, ast.Assign):
        written = list(stmt.targets)
    elif isinstance(stmt, ast.AugAssign):
        written = [stmt.target]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        method = [call.func.value] if isinstance(call.func, ast.Attribute) else []  # u.fill(0), or np.copyto
        written = [*method, *call.args[:1], *(k.value for k in call.keywords if k.arg == "out")]
    scope = {**frame.f_globals, **frame.f_locals}
    values = (scope.get(n.id) for w in written for n in ast.walk(w) if isinstance(n, ast.Name))
    return [v for v in values if isinstance(v, np.ndarray)]


# ---------------------------------------------------------------------------------------------- drivers
def _check_pair(x: Any, dx: Any, what: str) -> None:
    if not (hasattr(x, "shape") and hasattr(dx, "shape")):
        raise TypeError(f"{what}: Dup of an array needs an array shadow, got {type(dx).__name__}")
    if x.shape != dx.shape or x.dtype != dx.dtype:
        raise ValueError(
            f"{what}: shadow has shape {dx.shape} and dtype {dx.dtype}, "
            f"but the array has shape {x.shape} and dtype {x.dtype}; they must match"
        )
    if x.dtype.kind != "f":
        raise TypeError(f"{what}: only floating-point arrays can be Dup, this one has dtype {x.dtype}")
    writable = getattr(getattr(dx, "flags", None), "writeable", True)
    if not writable:
        raise ValueError(f"{what}: the shadow is not writable")
    if arrays.device_id(x) != arrays.device_id(dx):
        raise TypeError(
            f"{what}: the array is in {arrays.where(x)} but its shadow in {arrays.where(dx)}; "
            "they must share one memory"
        )


def _parameter_names(f: Callable[..., Any]) -> list[str]:
    """The names of ``f``'s positional parameters, for messages: from its code object where it is a plain
    Python function or a method bound to one (``inspect.signature``, which also sees through partials and
    wrappers, costs tens of microseconds a call)."""
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    if code is not None and not hasattr(f, "__wrapped__"):
        names = list(code.co_varnames[: code.co_argcount])
        return names[1:] if inspect.ismethod(f) else names
    try:
        return list(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        return []


def _check_memories(dups: list[tuple[str, Any, Any]]) -> None:
    """Refuse ``Dup`` arrays and shadows that share memory (one ``Dup`` given twice aside): a shadow that is
    another argument's array or shadow, or one array with two shadows, would give a silently wrong
    derivative. ``dups``: (what, array, shadow)."""
    spans: list[tuple[tuple[bool, int, int], str]] = []
    seen: set[tuple[int, int]] = set()
    for what, x, dx in dups:
        if (id(x), id(dx)) not in seen:
            seen.add((id(x), id(dx)))
            spans += [(arrays.extent(x), f"{what}'s array"), (arrays.extent(dx), f"{what}'s shadow")]
    spans.sort(key=lambda span: span[0])
    for (a, first), (b, second) in itertools.pairwise(spans):  # any overlap has an adjacent one
        if arrays.overlap(a, b):
            raise ValueError(
                f"{first} and {second} share memory: every differentiated array needs a shadow of its own, "
                "apart from every array and shadow (pass copies)"
            )


def _prepare(ctx: Context, args: tuple, reverse_mode: bool, f: Callable[..., Any]) -> list[Any]:
    """Turn annotated arguments into the values ``f`` receives, registering shadows with ``ctx``."""
    values: list[Any] = []
    names = _parameter_names(f)
    named = [
        f"argument {pos}" + (f" ({names[pos]!r})" if pos < len(names) else "") for pos in range(len(args))
    ]
    dups = [
        (named[pos], arg.value, arg.shadow)
        for pos, arg in enumerate(args)
        if isinstance(arg, Dup) and hasattr(arg.value, "shape")
    ]
    for what, x, dx in dups:
        _check_pair(x, dx, what)
    _check_memories(dups)
    for pos, arg in enumerate(args):
        what = f"argument {pos}"
        if isinstance(arg, Dup):
            if hasattr(arg.value, "shape"):
                if isinstance(arg, DupNoNeed):
                    ctx.unneeded.add(id(arg.value))
                ctx.bind(arg.value, arg.shadow)
                ctx.protect(arg.value, arg.shadow, named[pos])
                values.append(arg.value)
            elif reverse_mode:
                raise TypeError(f"{what}: Dup of a scalar is forward-mode only; use pad.Active in autodiff")
            else:
                values.append(_active_scalar(ctx, arg.value, float(arg.shadow), what))
        elif isinstance(arg, Active):
            if not reverse_mode:
                raise TypeError(f"{what}: pad.Active is for autodiff; use pad.Dup(value, tangent) in fwddiff")
            step = replay.recording()
            if step is not None:
                step.refuse(
                    f"autodiff returns the derivative of an Active scalar ({what}), which a replay cannot"
                )
            values.append(_active_scalar(ctx, arg.value, 0.0, what))
        elif isinstance(arg, Const):
            if hasattr(arg.value, "shape"):
                ctx.mark_const(arg.value)
            values.append(arg.value)
        else:
            if hasattr(arg, "shape"):
                ctx.mark_const(arg)
            values.append(arg)
    return values


def _active_scalar(ctx: Context, value: Any, tangent: float, what: str) -> ActiveScalar:
    if isinstance(value, bool) or not isinstance(value, (float, np.floating)):
        raise TypeError(f"{what}: an Active scalar must be a float, got {type(value).__name__} {value!r}")
    ctx.active_adjoints.append(0.0)
    return ActiveScalar(float(value), len(ctx.active_adjoints) - 1, tangent)


def autodiff(f: Callable[..., Any], *args: Any, fuse: bool = False) -> tuple[float, ...]:
    """Reverse mode: run ``f`` on the primal values, then its adjoint (see API.md for the shadow semantics).

    Returns one derivative per ``Active`` argument, in order.

    ``fuse=True`` saves about one primal launch: ``f``'s last launch, when its adjoint can make the outputs
    too (by redoing the sums of its order-free loops), is not run forward; its fused adjoint makes them. A
    pad operation after it in ``f`` runs it forward first, as usual. NumPy code in ``f`` that reads the
    last launch's outputs after it would see their old contents (pad cannot see such reads): fuse only an
    ``f`` that does not.
    """
    if current() is not None:
        raise RuntimeError("pad.autodiff/fwddiff cannot be nested inside another autodiff/fwddiff")
    ctx = Context(reverse_mode=True)
    ctx.fuse = fuse
    token = _context.set(ctx)
    try:
        values = _prepare(ctx, args, reverse_mode=True, f=f)
        with recording_into(ctx.records):
            _run_program(ctx, f, values)
            _finish_forward(ctx)
            ctx.pending = None  # the last launch stays fused: its adjoint makes its outputs
            reverse_records(ctx.records)
            for check in ctx.after_reverse:
                check()
        if replay.recording() is None:  # a recorded step's replays use them
            for a in (ref() for ref in ctx._owned):
                if a is not None:
                    POOL.give(a)
    except BaseException:
        ctx.flush()  # a failed autodiff still leaves the primal results
        raise
    finally:
        ctx.release()
        _context.reset(token)
    return tuple(ctx.active_adjoints)


def _run_program(ctx: Context, f: Callable[..., Any], values: list[Any]) -> Any:
    """``f(*values)``, with NumPy's refusal to write an array under differentiation explained."""
    try:
        return f(*values)
    except ValueError as e:
        refused = ctx.refused_write(e)
        if refused is None:
            raise
        raise refused from e


def fwddiff(f: Callable[..., Any], *args: Any) -> Any:
    """Forward mode: ``Dup(x, tx)`` carries tangents in and the tangents of the final values out."""
    if current() is not None:
        raise RuntimeError("pad.autodiff/fwddiff cannot be nested inside another autodiff/fwddiff")
    ctx = Context(reverse_mode=False)
    token = _context.set(ctx)
    try:
        values = _prepare(ctx, args, reverse_mode=False, f=f)
        result = _run_program(ctx, f, values)
        _finish_forward(ctx)
    finally:
        ctx.release()
        _context.reset(token)
    return result


_forward_finishers: list[Callable[[Context], None]] = []


def on_forward_end(check: Callable[[Context], None]) -> Callable[[Context], None]:
    """Register a check run when ``f`` returns (e.g. requests or tasks never waited for)."""
    _forward_finishers.append(check)
    return check


def _finish_forward(ctx: Context) -> None:
    for check in _forward_finishers:
        check(ctx)
