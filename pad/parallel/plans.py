"""How a CPU launch with shared-index accumulations runs without races: the plan, chosen here and only here.

A launch whose iterations accumulate into an array at indices they may share (``a[j] += v``; the adjoint of
every read ``x[idx[i]]``) runs by a ``Plan``: its launch indices, in groups of one *colour* run one after the
other, each colour split into at most ``SLOTS`` segments that threads run at once. Per array, one of:

- *in place*: no two launch indices touch one element (a permutation, a partition such as LULESH's corner
  list): the accumulations go to the array itself, in launch order;
- *coloured*: they do, but rarely: the launch indices are coloured so that no two of one colour touch one
  element (how OP2 and PyOP2 run indirect increments), and each colour runs in parallel, adding in place;
- *private*: many launch indices touch one element (every one, for an index that does not vary with the
  launch index): segment ``s`` accumulates into slot ``s`` of a buffer of ``SLOTS`` copies of the array,
  summed into it in slot order after the launch (consecutive segments share a slot where so many copies
  would not stay in the caches: ``cpu.CACHED_PRIVATE_BYTES``).

The kernel's inspector (pad/kernel/inspector.py) finds which, where integer data decides the indices; it
runs once per index array, and its plan is cached. A plan depends on the contents of the index arrays the
inspector read: each use compares them with copies the plan keeps (in parallel: a read of both), and a kernel
that stores into one drops the plans made from it, so a plan is never stale. Plans made from the same contents
of an array share one copy, and a ``pad.graph`` replay compares an array with it once while nothing but
launches changed integer arrays (``replay.quiet_span``): three adjoints planned from one node list compare
it once a replay, not three times. A frozen index array (``arrays.frozen``: read-only over immutable
memory, a mesh's connectivity) can never change: its plans keep the array itself and never compare it
(LULESH's node lists and neighbours: docs/kernels.md). Where the inspector cannot tell (indices computed
from floating-point data), the arrays are private; a stencil's adjoint (``Variant.halo``) runs blocks of at
least ``2 * halo`` indices in two colours, even blocks then odd ones, in place.

Segments and colours do not depend on the thread count, so neither does the order of any floating-point sum:
results are the same on any number of threads (unless ``SLOTS`` private copies of an array would exceed
``cpu.PRIVATE_BYTES``: then there are fewer, but no fewer than one per thread).
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
from numba import prange

from pad import arrays, replay
from pad.kernel import Variant, compiler, runtime
from pad.kernel.inspector import MAX_DIMS

__all__ = ["SLOTS", "Plan", "forget", "plan", "prepare", "stats"]

SLOTS = 64
"""Segments per colour, at most: the parallelism a colour offers, and the copies a private buffer holds."""

MAX_DEGREE = 16
"""An array that more launch indices than this touch at one element is private (a colouring would need at
least as many colours, each a pass over the launch with a barrier); where fewer do, it is coloured."""

KEPT_PLANS = 4  # per variant: plans for that many index arrays (and launch sizes) are kept

NO_ORDER = np.empty(0, np.int64)  # the identity order


@dataclass
class Plan:
    """How to run one launch: launch indices by colour, segments, and the arrays with private buffers."""

    order: np.ndarray  # launch indices, colour by colour (NO_ORDER: 0, 1, ..., n - 1)
    segs: np.ndarray  # (segments, 2): ranges of ``order``, each run in order by one thread
    colours: np.ndarray  # colour c's segments are ``colours[c]`` to ``colours[c + 1] - 1``
    private: frozenset[int]  # positions of the arrays accumulated into per-slot buffers
    # A colour's segments form min(slots, its segments) groups of consecutive ones; group g runs on one
    # thread, into slot g of the private buffers and of the active scalars' sums.
    slots: int
    strategy: str
    # what an inspected plan was made from (besides the integer scalars in its key): copies of the index
    # arrays read, and the shapes of the arrays whose shapes the inspector used
    copies: list[np.ndarray] = field(default_factory=list)
    shapes: tuple = ()


STATS: dict[str, Any] = {
    "inspections": 0,
    "inspect_s": 0.0,
    "validations": 0,
    "validate_s": 0.0,
    "kernels": {},
}


def stats() -> dict[str, Any]:
    """Inspections run (and their seconds), plan validations (and theirs), and per kernel variant its
    strategy and its segments per colour (the units its threads share): ``{"kernels": {"k_element_forces
    (adjoint)": {"strategy": "coloured (2)", "segments": [16, 16], "inspect_s": ...}, ...}}``."""
    return {**STATS, "kernels": {k: dict(v) for k, v in STATS["kernels"].items()}}


def _segments(bounds: list[int]) -> tuple[np.ndarray, np.ndarray, int]:
    """Segments (at most ``SLOTS`` per colour, of near-equal length) of colours ``bounds[c]:bounds[c + 1]``."""
    segs: list[tuple[int, int]] = []
    colours = [0]
    for lo, hi in itertools.pairwise(bounds):
        k = min(SLOTS, hi - lo)
        segs += [(lo + (hi - lo) * j // k, lo + (hi - lo) * (j + 1) // k) for j in range(k)]
        colours.append(len(segs))
    counts = np.diff(colours)
    return np.array(segs, np.int64).reshape(-1, 2), np.array(colours, np.int64), int(counts.max(initial=1))


def _stencil(n: int, halo: int) -> Plan:
    """Blocks of at least ``2 * halo`` indices, even ones then odd ones: no two blocks of one colour are
    within ``halo`` of each other."""
    block = max(2 * halo, -(-n // (2 * SLOTS)), 1)
    starts = list(range(0, n, block))
    blocks = [(lo, min(lo + block, n)) for lo in starts]
    even, odd = blocks[0::2], blocks[1::2]
    segs = np.array(even + odd, np.int64).reshape(-1, 2)
    colours = np.array([0, len(even), len(even) + len(odd)] if odd else [0, len(even)], np.int64)
    return Plan(NO_ORDER, segs, colours, frozenset(), max(len(even), 1), "stencil")


def _static(variant: Variant, n: int) -> Plan:
    segs, colours, slots = _segments([0, n])
    return Plan(NO_ORDER, segs, colours, frozenset(p for _, p in variant.privates), slots, "private")


_STATIC: dict[tuple[int, int], Plan] = {}  # (id of variant, n) -> plan of a variant without an inspector
_INSPECTED: dict[int, dict[tuple, Plan]] = {}  # id of variant -> (n, index arrays' ids, scalars) -> plan
_BY_ARRAY: dict[int, dict[tuple, dict[tuple, Plan]]] = {}  # id of an index array -> plans made from it
_COPIES: dict[int, Any] = {}  # id of an index array -> weak reference to the copy its plans keep
# a replay's quiet span, and the index arrays (by id) found in it to hold a copy's contents, with that copy
_checked: tuple[object, dict[int, np.ndarray]] = (None, {})
_LOCK = threading.Lock()  # launches may come from several threads (pad.tasks)


def plan(variant: Variant, n: int, args: tuple) -> Plan:
    """The plan of launching ``variant`` over ``range(n)`` on ``args``: cached, validated, or made now. While
    launches are noted to compile ahead (``pad.precompile``), not run, the index arrays may hold no indices
    yet: a plan without inspection stands in (its arrays have the same types)."""
    ins = variant.inspector
    if ins is not None and compiler.noting():  # compiled ahead with the launcher
        compiler.note(ins.function, _counting(ins, n, args)[1])
    if ins is None or compiler.noting():
        key = (id(variant), n)
        hit = _STATIC.get(key)
        if hit is None:
            if len(_STATIC) >= 4096:  # launch sizes that come and go: start again rather than grow
                _STATIC.clear()
            hit = _STATIC[key] = _stencil(n, variant.halo) if variant.halo else _static(variant, n)
        return hit
    plans = _INSPECTED.setdefault(id(variant), {})
    key = (n, *(id(args[p]) for p in ins.reads), *(args[p] for p in ins.scalars))
    hit = plans.get(key)
    if hit is not None and _valid(hit, ins, args):
        return hit
    return _remember(variant, plans, key, n, args)


def prepare(variant: Variant, n: int, args: tuple) -> None:
    """Inspect now if no plan for these index arrays is cached: before a primal launch reads them, so that a
    bad entry is reported, not read out of bounds. (A cached plan is validated where it is used.)"""
    ins = variant.inspector
    if ins is not None and not compiler.noting():
        plans = _INSPECTED.setdefault(id(variant), {})
        key = (n, *(id(args[p]) for p in ins.reads), *(args[p] for p in ins.scalars))
        if key not in plans:
            _remember(variant, plans, key, n, args)


def _remember(variant: Variant, plans: dict[tuple, Plan], key: tuple, n: int, args: tuple) -> Plan:
    ins = variant.inspector
    assert ins is not None
    try:
        made = _inspect(variant, n, args)
    except IndexError:
        if variant.sites is None:
            raise
        return _static(variant, n)  # PAD_DEBUG: the kernel's checks report the index, with its source line
    with _LOCK:
        while len(plans) >= KEPT_PLANS:
            del plans[next(iter(plans))]
        plans[key] = made
        for p in ins.reads:
            refs = _BY_ARRAY.setdefault(id(args[p]), {})
            refs[(id(plans), key)] = plans
            if len(refs) > 4 * KEPT_PLANS:  # drop references to plans already evicted
                _BY_ARRAY[id(args[p])] = {k: v for k, v in refs.items() if k[1] in v}
    return made


def forget(written: Iterable[Any]) -> None:
    """Drop the plans made from the contents of the arrays ``written`` (a kernel has just stored into them)."""
    checked = _checked[1]
    for array in written:
        ident = id(array)
        checked.pop(ident, None)
        if ident in _BY_ARRAY:
            with _LOCK:
                for (_, key), plans in _BY_ARRAY.pop(ident, {}).items():
                    plans.pop(key, None)


def _count_differences(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements of two 1-D arrays differ."""
    count = 0
    for j in prange(a.shape[0]):
        if a[j] != b[j]:
            count += 1
    return count


_differences, _differences_parallel = runtime.serial_and_parallel(_count_differences)


def _same(a: np.ndarray, copy: np.ndarray) -> bool:
    if a.shape != copy.shape or a.dtype != copy.dtype:
        return False
    if not a.flags.c_contiguous:
        return bool(np.array_equal(a, copy))
    count = _differences_parallel if a.nbytes >= arrays.PARALLEL_BYTES else _differences
    return count(a.reshape(-1), copy.reshape(-1)) == 0


def _unchanged(a: np.ndarray, copy: np.ndarray) -> bool:
    """Whether index array ``a`` holds ``copy``'s contents: compared, unless it was found to in this quiet span
    of a replay (``replay.quiet_span``: no integer array changed since but by kernels, which ``forget``)."""
    global _checked
    if copy is a:  # a frozen array, which the plans keep as it is: it never changes
        return True
    span = replay.quiet_span()
    if span is None:
        return _same(a, copy)
    checked = _checked  # the span and its dict together (a replay in another thread may start another)
    if checked[0] is not span:
        checked = _checked = (span, {})  # holding the span, whose id no later span then takes
    if checked[1].get(id(a)) is copy:
        return True
    if not _same(a, copy):
        return False
    checked[1][id(a)] = copy
    return True


def _copy_of(a: np.ndarray) -> np.ndarray:
    """A copy of index array ``a`` for a plan to keep: the one the plans made from ``a`` keep already, where it
    still holds ``a``'s contents (a replay then compares ``a`` with one copy, once, for all of them); ``a``
    itself where it is frozen (``arrays.frozen``), and so can never change."""
    if arrays.is_frozen(a):
        return a
    key = id(a)
    ref = _COPIES.get(key)
    kept = ref() if ref is not None else None
    if kept is None or not _same(a, kept):

        def gone(dead: Any) -> None:
            if _COPIES.get(key) is dead:
                del _COPIES[key]

        kept = np.array(a, copy=True, order="C")
        _COPIES[key] = weakref.ref(kept, gone)
    return kept


def _valid(p: Plan, ins: Any, args: tuple) -> bool:
    """Whether the index arrays, scalars and shapes are still those ``p`` was made from (exactly)."""
    begin = time.perf_counter()
    ok = p.shapes == tuple(args[q].shape for q in ins.shapes) and all(
        _unchanged(args[q], copy) for q, copy in zip(ins.reads, p.copies, strict=True)
    )
    STATS["validations"] += 1
    STATS["validate_s"] += time.perf_counter() - begin
    return ok


@dataclass
class _Scratch:
    """The inspector's work arrays for one launch (the arrays it inspects laid end to end, array ``a`` from
    ``base[a]``: per element, how many launch indices touch it and the last one that did)."""

    sizes: list[int]
    base: np.ndarray
    colourable: np.ndarray
    count: np.ndarray
    last: np.ndarray
    err: np.ndarray

    @staticmethod
    def of(ins: Any, args: tuple) -> _Scratch:
        sizes = [int(np.prod(args[p].shape)) for p in ins.touched]
        base = np.zeros(len(sizes) + 1, np.int64)
        base[1:] = np.cumsum(sizes)
        total = int(base[-1])
        colourable = np.zeros(len(sizes), np.bool_)
        count, last = np.zeros(total, np.int64), np.full(total, -1, np.int64)
        return _Scratch(sizes, base, colourable, count, last, np.zeros(2 + 2 * MAX_DIMS + 1, np.int64))

    def call(
        self,
        args: tuple,
        step: int,
        order: np.ndarray,
        bounds: np.ndarray,
        mask: np.ndarray,
        colour: np.ndarray,
    ) -> tuple:
        """The inspector's arguments, ``args`` those of the launch it takes (``Inspector.taken``): ``step`` 0
        counts, 1 colours (see pad/kernel/inspector.py)."""
        return (
            step,
            order,
            bounds,
            *args,
            self.base,
            self.colourable,
            self.count,
            self.last,
            mask,
            colour,
            self.err,
        )


NO_MASK, NO_COLOUR = np.empty(0, np.uint64), np.empty(0, np.int64)


def _counting(ins: Any, n: int, args: tuple) -> tuple[_Scratch, tuple]:
    """Work arrays for inspecting a launch of ``n`` on ``args``, and the inspector's first call (counting)."""
    scratch = _Scratch.of(ins, args)
    return scratch, scratch.call(ins.taken(args), 0, NO_ORDER, np.array([0, n], np.int64), NO_MASK, NO_COLOUR)


def _inspect(variant: Variant, n: int, args: tuple) -> Plan:
    """Run the inspector and choose, per array, in place, coloured or private (see the module's doc)."""
    ins = variant.inspector
    assert ins is not None
    scratch, call = _counting(ins, n, args)
    sizes, base, colourable, count = scratch.sizes, scratch.base, scratch.colourable, scratch.count
    total = int(base[-1])

    def run(step: int, order: np.ndarray, bounds: np.ndarray, mask: np.ndarray, colour: np.ndarray) -> int:
        return ins.function(*scratch.call(ins.taken(args), step, order, bounds, mask, colour))

    ins.function.compile(tuple(numba.typeof(a) for a in call))  # not timed: compiling
    begin = time.perf_counter()
    if ins.function(*call) == 1:
        raise IndexError(ins.message(variant.kernel, scratch.err, args))
    degrees = [int(count[base[a] : base[a + 1]].max(initial=0)) for a in range(len(sizes))]
    private = {p for _, p in variant.privates} - set(ins.touched)
    for a, p in enumerate(ins.touched):
        if degrees[a] > MAX_DEGREE and SLOTS * sizes[a] <= n:  # a small buffer: cheaper than waiting
            private.add(p)
        colourable[a] = degrees[a] > 1 and p not in private
    if colourable.any():
        hot = np.zeros(total, np.bool_)
        for c in np.flatnonzero(colourable):
            hot[base[c] : base[c + 1]] = count[base[c] : base[c + 1]] > MAX_DEGREE
        order, segs, colours, slots = _colour(run, n, hot)
        strategy = f"coloured ({len(colours) - 1})"
    else:
        (order, (segs, colours, slots)), strategy = (NO_ORDER, _segments([0, n])), "in place"
    if private:
        strategy = "private" if private >= set(ins.touched) else f"{strategy}, some private"
    made = Plan(
        order,
        segs,
        colours,
        frozenset(private),
        slots,
        strategy,
        [_copy_of(args[p]) for p in ins.reads],
        tuple(args[q].shape for q in ins.shapes),
    )
    seconds = time.perf_counter() - begin
    STATS["inspections"] += 1
    STATS["inspect_s"] += seconds
    entry = STATS["kernels"].setdefault(
        f"{variant.kernel} ({variant.mode})", {"inspections": 0, "inspect_s": 0.0}
    )
    entry["inspections"] += 1
    entry["inspect_s"] += seconds
    entry["strategy"] = strategy
    entry["segments"] = np.diff(colours).tolist()
    return made


BLOCKS_PER_COLOUR = 16
"""A colour's blocks are the units its threads share, so a colouring of blocks is taken where its colours
have this many blocks each, or a multiple (within ``BALANCE``): then 1, 2, 4, 8 or 16 threads share every
colour evenly (16 threads running a colour of 21 blocks would wait for the five that run two). Of such
colourings with ``CLAIMED_BLOCKS`` blocks a colour the one of the largest blocks is taken: large blocks keep
the adjoint near its time in launch order (the nodes a colour's blocks share with the others' are read again
when those run; docs/benchmarks.md, "In the code"). The block counts tried grow from ``CLAIMED_BLOCKS`` by
steps of ``BLOCKS_PER_COLOUR`` or an eighth, or to ``CLAIMED_BLOCKS`` for each colour the last try took (a
structured mesh's blocks take their colours in turn, so ``k`` colours of ``BLOCKS_PER_COLOUR * k`` blocks
come out even); where none is even, single launch indices are coloured."""

CLAIMED_BLOCKS = 64
"""The least blocks a colour has (on average over the colours): four for each of 16 threads, so that threads
that come free claim blocks of one whose blocks hold more of the work. An adjoint's work per launch index
depends on its seeds (``reverse.iteration_guard`` skips those that touch no seed: LULESH's elements away from
the blast), so its busy blocks can be a few of the mesh's, and sixteen blocks a colour left most threads of
16 idle (docs/benchmarks.md, "Blocks for guarded adjoints")."""

BALANCE = 0.9
"""The least share of a colouring's thread time spent running blocks, with ``BLOCKS_PER_COLOUR`` threads."""

SERIAL = 64  # the colour ``runtime.colour`` gives where none is left


def _balance(counts: np.ndarray) -> float:
    """The share of ``BLOCKS_PER_COLOUR`` threads' time that colours of ``counts`` blocks keep busy."""
    rounds = int((-(-counts // BLOCKS_PER_COLOUR)).sum())
    return float(counts.sum() / (BLOCKS_PER_COLOUR * rounds)) if rounds else 1.0


def _colour(run: Any, n: int, hot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(order, segments, colours, slots) of a colouring: of blocks of consecutive launch indices, each block
    run in launch order (what the launch's memory accesses favour), the largest that share out evenly
    (``BLOCKS_PER_COLOUR``) with at least ``CLAIMED_BLOCKS`` a colour; the launch indices that touch an
    element touched by more than ``MAX_DEGREE`` of them (``hot``) run last, one after the other, on one
    thread."""
    mask = np.where(hot, ~np.uint64(0), np.uint64(0))
    order, m = NO_ORDER, n
    if hot.any():
        probe = np.zeros(n, np.int64)
        run(1, NO_ORDER, np.arange(n + 1, dtype=np.int64), mask.copy(), probe)
        serial = probe == SERIAL
        order = np.concatenate([np.flatnonzero(~serial), np.flatnonzero(serial)]).astype(np.int64)
        m = n - int(serial.sum())
    blocks = CLAIMED_BLOCKS
    while True:
        block = max(1, -(-m // blocks))
        bounds = np.append(np.arange(0, m, block, dtype=np.int64), np.int64(m))
        colour = np.zeros(len(bounds) - 1, np.int64)
        run(1, order, bounds, mask.copy(), colour)
        used = int(colour[colour < SERIAL].max(initial=-1)) + 1
        even = (
            not (colour == SERIAL).any()
            and len(colour) >= CLAIMED_BLOCKS * used
            and _balance(np.bincount(colour, minlength=used)) >= BALANCE
        )
        if block == 1 or even:
            break
        step = BLOCKS_PER_COLOUR * max(1, blocks // (8 * BLOCKS_PER_COLOUR))
        blocks = max(blocks + step, CLAIMED_BLOCKS * used)
    by_colour = np.argsort(colour, kind="stable")
    if block == 1:  # single launch indices: put them in colour order, those left without one last
        ordered = (np.arange(m) if order is NO_ORDER else order[:m])[by_colour]
        order = np.concatenate([ordered, order[m:] if m < n else np.empty(0, np.int64)]).astype(np.int64)
        counts = np.bincount(colour[colour < SERIAL], minlength=used)
        bounds_c = [0, *np.cumsum(counts).tolist()]
        segs, colours, slots = _segments(bounds_c)
        m = bounds_c[-1]
    else:
        segs = np.stack([bounds[:-1][by_colour], bounds[1:][by_colour]], axis=1)
        colours = np.concatenate([[0], np.cumsum(np.bincount(colour, minlength=used))]).astype(np.int64)
        slots = min(SLOTS, int(np.diff(colours).max()))
    if m < n:  # the serial colour: one segment
        segs = np.concatenate([segs, [[m, n]]]).astype(np.int64)
        colours = np.append(colours, np.int64(len(segs)))
    return order, segs, colours, max(slots, 1)
