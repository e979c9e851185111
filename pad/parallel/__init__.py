"""``pad.launch``: run a kernel over an index space, and record it for differentiation.

Outside ``autodiff``/``fwddiff`` a launch runs the primal launcher. In forward mode it runs the tangent
launcher (primal and tangents together). In reverse mode it runs the primal launcher, keeps the values the
adjoint will read (copied only if later overwritten) and records a ``LaunchRecord`` whose ``reverse()``
runs the adjoint launcher on the kept values and the shadows.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from pad import arrays, replay, tape
from pad.kernel import Kernel, KernelSyntaxError, Variant, checks
from pad.parallel import cpu, plans
from pad.parallel import driver as driver  # adds its pass over replays' host entries (replay.HOST_PASSES)

__all__ = ["LaunchAccess", "LaunchRecord", "launch", "launch_stats"]


def _check(k: Any, n: Any) -> int:
    if not isinstance(k, Kernel):
        raise TypeError(f"pad.launch needs a @pad.kernel, got {k!r}")
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"pad.launch: the launch size must be an integer, got {type(n).__name__} {n!r}")
    n = int(n)
    if n < 0:
        raise ValueError(f"pad.launch: the launch size must not be negative, got {n}")
    return n


_DEVICE_TYPES: set[type] = set()  # array types known to be GPU arrays (the check itself is slow)


def _target(k: Kernel, args: tuple) -> str:
    """``"cuda"`` if the launch's arrays are GPU arrays, ``"cpu"`` if host arrays; mixing them is an error."""
    host = device = foreign = False
    for a in args:
        if getattr(a, "ndim", 0):
            if isinstance(a, np.ndarray):
                host = True
            elif type(a) in _DEVICE_TYPES:
                device = True
            elif arrays.is_device(a):
                _DEVICE_TYPES.add(type(a))
                device = True
            else:
                foreign = True
    if (host and device) or foreign:
        places = {pos: arrays.where(a) for pos, a in enumerate(args) if getattr(a, "ndim", 0) > 0}
        listing = ", ".join(f"argument {pos + 1} in {place}" for pos, place in places.items())
        raise TypeError(
            f"pad.launch({k.fn.__name__}): all arrays of a launch must live in one memory, but {listing}; "
            "move them with cupy.asarray(...) / .get() first"
        )
    return "cuda" if device else "cpu"


def _run(variant: Variant, n: int, args: tuple, extras: Any = (), shadows: Any = None) -> Any:
    """Run a launcher (primal, tangent or adjoint), and add it to the record a ``pad.graph`` step is making."""
    if variant.race and n > 1:
        raise KernelSyntaxError(variant.race)
    if variant.target == "cpu":  # a CPU launch tells the plans which arrays it stored into: quiet
        return _perform(variant, cpu.Launch(variant, n, args, extras, shadows), False, True)
    from pad.parallel import gpu

    cupy = replay.recording() is not None and all(
        arrays.is_cupy(a) for a in (*args, *extras) if getattr(a, "ndim", 0)
    )
    return _perform(variant, functools.partial(gpu.run, variant, n, args, extras), cupy, False)


def _perform(variant: Variant, run: Any, cupy: bool, quiet: bool) -> Any:
    """``run()``, a launch bound to its arguments, added first to the record a ``pad.graph`` step is making
    (``cupy`` and ``quiet``: see ``Recording.add``), whose replays call this again."""
    record = replay.recording()
    if record is not None:
        record.add(functools.partial(_perform, variant, run, cupy, quiet), cupy=cupy, quiet=quiet)
    try:
        return run()
    except IndexError as e:  # PAD_DEBUG: a checked access out of range
        if variant.sites is None:
            raise
        message = checks.out_of_range(e, variant.kernel, variant.mode, variant.sites)
        if message is None:
            raise
        raise IndexError(message) from None


def _distinct(k: Kernel, variant: Variant, args: tuple, checked: bool) -> None:
    """Refuse a differentiated launch that writes an array sharing memory with another of its arguments: its
    derivative gives every argument a shadow of its own (and a CUDA adjoint reads a thread's own elements
    first), so an alias would give a silently wrong derivative. One array passed twice is looked for on every
    launch; views of one memory under two names, which cost more to find, with ``checked`` (``PAD_DEBUG``)."""
    held = {p: a for p, a in enumerate(args) if getattr(a, "ndim", 0)}
    if not checked and len(set(map(id, held.values()))) == len(held):
        return
    spans = {p: arrays.extent(a) for p, a in held.items()}
    for p in variant.stored:
        for q, span in spans.items():
            if q != p and arrays.overlap(spans[p], span):
                names = k.fn.__code__.co_varnames[1 : len(args) + 1]
                raise ValueError(
                    f"pad.launch({k.fn.__name__}): arguments {names[p]!r} and {names[q]!r} share memory, "
                    f"and the kernel writes {names[p]!r}: a differentiated launch needs a distinct array for "
                    "each (pass a copy)"
                )


def launch_stats() -> dict[str, Any]:
    """What the CPU launches' inspectors cost and chose (pad/parallel/plans.py): ``inspections`` and
    ``inspect_s`` (seconds, compiling excluded), ``validations`` and ``validate_s`` (cached plans checked
    against their index arrays), and per kernel variant its ``strategy`` ("in place", "coloured (4)",
    "private", ...)."""
    return plans.stats()


def launch(k: Kernel, n: int, *args: Any) -> None:
    """Run ``k(i, *args)`` for every ``i`` in ``range(n)``, in parallel."""
    n = _check(k, n)
    target = _target(k, args)
    ctx = tape.current()
    if ctx is None:
        _run(k.variant(args, "primal", target=target), n, args)
        return
    given = args
    if ctx.protected:  # arrays under differentiation, read-only to the program: kernels get writable aliases
        args = tuple(map(ctx.writable, args))
    checked = checks.enabled()
    if checked:  # an array a launch left, changed since by a write pad did not see
        ctx.verify(f"pad.launch({k.fn.__name__})")
    shadows, made = ctx.launch_shadows(args)
    active = tuple(
        s is not None or isinstance(a, tape.ActiveScalar) for a, s in zip(args, shadows, strict=True)
    )
    plain = tuple(float(a) if isinstance(a, tape.ActiveScalar) else a for a in args)
    if not ctx.reverse_mode:
        variant = k.variant(plain, "tangent", active, target)
        _distinct(k, variant, plain, checked)
        ctx.will_write((args[p] for p in variant.stored), LaunchAccess(variant, n, args))
        tangents = [shadows[p] for p in variant.active_arrays]
        tangents += [args[p].tangent for p in variant.active_scalars]
        _run(variant, n, plain, tangents, shadows)
        if checked:
            ctx.settle((args[p] for p in variant.stored), f"pad.launch({k.fn.__name__})")
        return
    signature = k.signature(plain)
    variant = k.variant(plain, "adjoint", active, target, signature)
    _distinct(k, variant, plain, checked)
    if made:
        ctx.left_zero([shadows[p] for p in variant.left_zero(n, plain)], made)
    if variant.inspector is not None:  # inspects the index arrays before the primal reads them
        plans.prepare(variant, n, plain)
    # fuse=True: the last launch's primal waits (ctx.pending) and, where no later pad operation runs it, its
    # adjoint runs alone: the fused one, making the outputs, or the plain one where no output is needed
    deferred = None
    if ctx.fuse and ctx.at_top_level() and not (variant.race and n > 1):  # a race: the primal refuses it
        if all(id(given[p]) in ctx.unneeded for p in variant.stored):  # pad.DupNoNeed
            deferred = variant
        else:
            fused = k.variant(plain, "fused", active, target, signature)
            deferred = fused if fused.fuses else None
    # the values the adjoint reads or writes (a fused one reads what the primal does, to make the outputs)
    kept = {
        p: ctx.keep(args[p])
        for p in (variant.loaded if deferred is not None and deferred.fuses else variant.kept)
    }
    ctx.will_write((args[p] for p in variant.stored), LaunchAccess(variant, n, args))
    primal = k.variant(plain, "primal", target=target, signature=signature)
    slots = [args[p].slot for p in variant.active_scalars]
    if deferred is not None:
        record = LaunchRecord(ctx, deferred, n, plain, kept, shadows, slots)
        record.deferred = (primal, variant)
        ctx.record(record)
        ctx.pending = record
        return
    _run(primal, n, plain)
    record = LaunchRecord(ctx, variant, n, plain, kept, shadows, slots)
    # Outputs this launch only stores, into shadows the tape made zero: their adjoints may be left out. Only
    # on the context's own tape, whose records reverse in the order they were made (a checkpointed loop
    # records its steps again in the reverse pass, after the adjoints of the later steps that read them).
    outputs = [p for p in sorted(variant.stored - variant.loaded) if ctx.made_zero(shadows[p])]
    if outputs and ctx.at_top_level():
        record.unread = (
            k,
            active,
            dict(zip(outputs, ctx.watch_unread([shadows[p] for p in outputs]), strict=True)),
        )
    ctx.record(record)
    if checked:
        ctx.settle((args[p] for p in variant.stored), f"pad.launch({k.fn.__name__})")


class LaunchAccess:
    """What a launch about to run reads and how it writes, for the tape's write observers: the arguments it
    loads (``variant.loaded``), stores (``variant.stored``) and overwrites unread over ``args[p][o : o + n]``
    (``variant.overwrites``: ``p -> o``)."""

    __slots__ = ("args", "n", "variant")

    def __init__(self, variant: Variant, n: int, args: tuple) -> None:
        self.variant, self.n, self.args = variant, n, args


class LaunchRecord:
    """A recorded launch; its adjoint runs the adjoint launcher on kept values and shadows."""

    __slots__ = ("args", "ctx", "deferred", "kept", "n", "shadows", "slots", "unread", "variant")
    replayable = (
        True  # its device work goes through ``_run`` and the tape, which add it to a pad.graph record
    )

    def __init__(
        self,
        ctx: tape.Context,
        variant: Variant,
        n: int,
        args: tuple,
        kept: dict[int, tape.Kept],
        shadows: list[Any],
        slots: list[int],
    ) -> None:
        self.ctx, self.variant, self.n, self.args = ctx, variant, n, args
        self.kept, self.shadows, self.slots = kept, shadows, slots
        self.deferred: tuple[Variant, Variant] | None = None  # (primal, adjoint) while the primal waits
        # (kernel, activity, watched outputs): outputs it only stores, into shadows the tape made zero
        self.unread: tuple[Kernel, tuple[bool, ...], dict[int, tape.Unread]] | None = None

    def run_primal(self) -> None:
        """Run the deferred primal launch; the plain adjoint then replaces the fused one (if it was)."""
        assert self.deferred is not None
        primal, self.variant = self.deferred
        self.deferred = None
        _run(primal, self.n, self.args)

    def adjoint(self) -> Variant:
        """The adjoint to run: without the outputs no later operation asked a shadow of (still zero, so
        their adjoints would add nothing: LULESH's Jacobian determinants, kept for the fault check)."""
        if self.unread is None or self.deferred is not None:
            return self.variant
        k, active, watched = self.unread
        unread = {p for p, flag in watched.items() if flag.unread}
        if not unread:
            return self.variant
        less = tuple(a and p not in unread for p, a in enumerate(active))
        variant = k.variant(self.args, "adjoint", less, self.variant.target)
        return variant if variant.kept <= self.kept.keys() else self.variant

    def reverse(self) -> None:
        variant = self.adjoint()
        args = list(self.args)
        for p, kept in self.kept.items():
            if kept.changed():  # PAD_DEBUG: a write pad did not see
                raise ValueError(
                    f"pad.launch({self.variant.kernel}): argument {p + 1} was changed after the launch by a "
                    "write pad did not see (NumPy's, to an array pad does not protect: one the program "
                    "allocates, a pad.Const, a GPU array), and the launch's adjoint needs its old values. Write "
                    "it with pad.copy/scale/axpy/fill or in a kernel, or write a copy"
                )
            # Arrays the adjoint both reads and writes are replayed on a scratch copy of their old values.
            args[p] = kept.scratch() if p in variant.rewritten else kept.value
            if p not in variant.rewritten:
                kept.release()
        extras = [self.shadows[p] for p in variant.active_arrays]
        try:
            partial = _run(variant, self.n, tuple(args), extras, self.shadows)
        except BaseException:
            if self.deferred is not None:  # a fused adjoint failed: the outputs are still made
                self.run_primal()
            raise
        for slot, value in zip(self.slots, partial, strict=True):
            self.ctx.add_active_adjoint(slot, float(value))
