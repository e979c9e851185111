"""Build and cache the compiled variants of a kernel: primal, tangent and adjoint launchers.

A variant is specific to the kernel's argument kinds (arrays' dtypes and ranks, scalar types) and, for
derivatives, to which arguments are active. Its source is written to a cache directory and imported, so
numba's on-disk cache (``cache=True``) makes the next process start fast.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pad.kernel import fission, inspector, runtime
from pad.kernel.analysis import (
    Activity,
    Cover,
    Definitions,
    activity,
    check_types,
    covered_arrays,
    definitions,
    infer_types,
    needs_exact_arithmetic,
    overwritten_arrays,
    owned,
    reduced_arrays,
    useful,
    varying,
)
from pad.kernel.emit import (
    BLOCK,
    CUDA_MODULE_HEADER,
    MODULE_HEADER,
    PRIMAL_BLOCK,
    Launcher,
    Printer,
    cuda_kernel_source,
    launch_offsets,
    launcher_source,
    tables_source,
)
from pad.kernel.frontend import Lowered, Tables, lower_kernel
from pad.kernel.inspector import Inspector
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Elem,
    For,
    Kind,
    Line,
    LocalArray,
    Name,
    Pop,
    Push,
    Stmt,
    Store,
    While,
    assigned,
    exprs_of,
    loaded_arrays,
    names_in,
    rewrite,
    stored_arrays,
    substitute,
    walk,
)
from pad.kernel.names import (
    ACTIVE_SCALARS,
    ADJOINT,
    adj,
    buffer,
    private,
    readable,
    rename,
    tan,
    unbuffer,
)
from pad.kernel.optimize import (
    common_subexpressions,
    converge,
    defer_scales,
    owned_loads_first,
    owned_store_loops,
    privatize,
    promote,
    read_first,
    sink,
    small_loops,
    tidy,
    unroll,
)
from pad.kernel.races import racing_store
from pad.kernel.reverse import Reverse, iteration_guard, seed_guards
from pad.kernel.tangent import Tangent

MODES = ("primal", "tangent", "adjoint", "fused")  # fused: the adjoint that also makes the primal outputs


@dataclass
class Variant:
    """One compiled launcher and what its caller must pass and keep."""

    mode: str
    source: str
    launcher: Any  # a numba dispatcher: njit launcher (CPU) or cuda.jit kernel (CUDA)
    active_arrays: list[int]  # argument positions of arrays with shadows (passed in this order)
    active_scalars: list[int]  # argument positions of active scalars
    loaded: set[int]  # arrays whose values the kernel reads
    stored: set[int]  # arrays the kernel writes
    # An adjoint's: the arguments its own code stores into (not an in-place update's target, whose new value
    # nothing in the kernel reads). It runs on scratch copies of their kept values, reads the others' as kept.
    rewritten: set[int] = field(default_factory=set)
    privates: list[tuple[str, int]] = field(default_factory=list)  # ("primal"|"shadow", position) per buffer
    overwrites: dict[int, int] = field(default_factory=dict)  # 1-D arrays never read, a[i + offset] stored
    # Adjoints: the active arrays never read that every launch index stores into over a box of elements
    # (``analysis.covered_arrays``; parameters named by position), whose seeds the adjoint clears there:
    # where the box is the whole array (``left_zero``), its shadow is zero after the adjoint
    covers: dict[int, Cover] = field(default_factory=dict)
    target: str = "cpu"  # "cpu" (numba threads) or "cuda"
    block: int = BLOCK  # CUDA: threads per block, which the kernel's per-block sums assume
    kernel: str = ""  # the kernel's name, for messages
    fuses: bool = False  # mode "fused": this variant makes the primal outputs too (see pad.autodiff(fuse=))
    # CUDA adjoints: tape slots per launch index when known at compile time, else a kernel that bounds them
    tape_slots: int = 0
    shares_loops: bool = False  # CUDA: lanes of a group share the sum loops; the kernel takes ``_G``
    depth_launcher: Any = None
    # the depth kernel reads no array element: its bound follows from the launch size, the scalar arguments
    # and the arrays' shapes, so a bound found once serves every launch alike (pad/parallel/gpu.py)
    depth_from_shapes: bool = False
    depths: dict[tuple, int] = field(default_factory=dict)  # those bounds, by launch size, shapes and scalars
    # CUDA adjoints: positions of the active arrays stored once per index at ``i + offset`` and never read ->
    # offset. Their seeds, read once each, are zeroed by the runner after the kernel, not in it (a kernel
    # that reads a seed and zeroes it is slower than both apart: docs/benchmarks.md, "In the code"). CPU
    # launchers zero them themselves, a block of indices at a time (``Launcher.clears``).
    clears: dict[int, int] = field(default_factory=dict)
    # CPU: every private accumulation is at launch index + c, |c| <= halo: blocks of at least 2 * halo indices
    # run in two colours (even, then odd blocks) and add into the arrays themselves
    halo: int = 0
    # CPU, with private buffers: the inspector of the indices they are touched at, where integer data decides
    # them (pad/kernel/inspector.py); the launcher then runs by a plan built from what it finds
    inspector: Inspector | None = None
    # adjoints: the arrays of ``loaded`` whose elements the adjoint reads or writes, which the launch keeps
    # for it; the others' it never touches (a linear gather's adjoint reads no corner force), so a recorded
    # launch keeps no copy of them. Other modes (the fused adjoint, which makes the outputs): ``loaded``.
    kept: set[int] = field(default_factory=set)
    # A plain store two launch indices may make to one element (races.racing_store): the message refusing a
    # launch of more than one index, or ''
    race: str = ""
    # PAD_DEBUG: the checked accesses, (source line, array) per site of ``checks.out_of_range``; else None
    sites: list[tuple[Line | None, str]] | None = None
    # CUDA adjoints split along their outputs (``fission``): the adjoints of groups of outputs, run in turn
    # on the launch's arguments in place of this variant's own launcher
    pieces: list[Variant] = field(default_factory=list)

    def left_zero(self, n: int, args: tuple) -> list[int]:
        """The positions of the arrays whose whole shadow this adjoint, launched over ``range(n)`` on
        ``args``, leaves zero (``covers``)."""
        return [p for p, c in sorted(self.covers.items()) if c.whole(args[p].shape, n, args)]


def cache_dir() -> Path:
    path = Path(os.environ.get("PAD_CACHE_DIR", Path.home() / ".cache" / "pad"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Analysed:
    """A kernel lowered for one signature and analysed: what every mode and target builds on."""

    low: Lowered
    kernel: str  # the kernel's name
    types: dict[str, str]
    act: Activity
    defs: Definitions  # what index ownership may look through
    reduced: set[str]  # arrays accumulated into at shared indices
    race: str  # racing_store's message, or ''
    loaded: set[str]  # arrays read
    stored: set[str]  # arrays written
    overwrites: dict[str, int]  # overwritten_arrays
    covers: dict[str, Cover]  # covered_arrays
    active_arrays: list[int]  # argument positions
    active_scalars: list[int]

    @property
    def launch_index(self) -> str:
        return self.low.params[0]

    @property
    def params(self) -> list[str]:
        return self.low.params[1:]

    def positions(self, names: set[str]) -> set[int]:
        return {k for k, p in enumerate(self.params) if p in names}


@dataclass
class Transformed:
    """One mode's body for one launch index, and what its launcher takes besides the kernel's arguments."""

    body: list[Stmt]
    launcher: Launcher
    privates: list[tuple[str, int]]  # ("primal"|"shadow", position) per private buffer
    rev: Reverse | None = None
    init: list[str] = field(default_factory=list)  # scalars starting each launch index at zero


def build(
    fn: Callable[..., Any],
    kinds: list[Kind],
    active: tuple[bool, ...],
    mode: str,
    fastmath: bool,
    target: str = "cpu",
    checked: bool = False,
    tables: Tables | None = None,
) -> Variant:
    """Lower and analyse, transform for ``mode``, optimize, print for ``target``, compile (lazily, on first
    call) one variant of kernel ``fn``; ``checked``: every array access bounds-checked (``pad.kernel.checks``);
    ``tables``: the constant tables the kernel's variants compiled before have taken.

    A large CUDA adjoint may run as pieces, each the adjoint of some of the outputs (``fission``)."""
    k = analyse(fn, kinds, active, tables, target)
    name = f"{fn.__name__}_{mode}" + ("_cuda" if target == "cuda" else "")
    # PAD_DEBUG reports an access out of range by its site in one variant's code: checked adjoints run whole
    split = (target, mode) == ("cuda", "adjoint") and not checked
    groups = fission.pieces(k.low.body, k.act, k.low.kinds, k.loaded) if split else []
    if not groups:
        return _made(fn, k, mode, fastmath, target, checked, name)
    outputs = frozenset().union(*groups)
    parts = []
    for j, group in enumerate(groups):
        piece = replace(k, act=useful(k.low.body, k.act, k.low.kinds, outputs - group))
        parts.append(_made(fn, piece, mode, fastmath, target, checked, f"{name}_{j}"))
    # a piece that stores into an argument replays on a scratch copy of it, which the pieces would share
    if any(p.rewritten for p in parts):
        return _made(fn, k, mode, fastmath, target, checked, name)
    return replace(
        parts[0],
        source="\n\n".join(
            f"# piece {j + 1} of {len(parts)}: the adjoint of {', '.join(sorted(group))}\n{part.source}"
            for j, (group, part) in enumerate(zip(groups, parts, strict=True))
        ),
        launcher=_no_launcher,
        kept=set().union(*(p.kept for p in parts)),
        clears={},
        tape_slots=0,
        shares_loops=False,
        depth_launcher=None,
        depth_from_shapes=False,
        depths={},
        pieces=parts,
    )


def _made(
    fn: Callable[..., Any], k: Analysed, mode: str, fastmath: bool, target: str, checked: bool, name: str
) -> Variant:
    """``build``'s variant from ``k``, its launcher named ``name``."""
    launcher = Launcher(name, list(k.params), quotes=True)
    launcher.locals = [s for s in walk(k.low.body) if isinstance(s, LocalArray)]
    # The arrays a CPU launcher privatizes: reduced into (primal, tangent), or read at shared indices (adjoint).
    touched = k.reduced if mode in ("primal", "tangent") else _shared_reads(k) - k.stored
    inspecting = (
        inspector.build(k.low.body, k.launch_index, k.params, k.low.kinds, k.types, touched)
        if target == "cpu" and touched
        else None
    )
    transform = {"primal": _primal, "tangent": _tangent, "adjoint": _adjoint, "fused": _adjoint}[mode]
    t = transform(k, launcher, touched, mode == "fused", target)
    t.body = promote(t.body, k.low.namer, k.types, k.low.kinds)
    variant = _variant(k, t, mode, target, checked)
    origin = f"{k.low.filename}:{fn.__name__} ({mode}, {target}{', PAD_DEBUG' if checked else ''})"
    if target == "cpu":
        _cpu(k, t, variant, origin, fastmath, checked)
    else:
        _cuda(k, t, variant, origin, fastmath, checked)
    module = _load(name, variant.source)
    variant.launcher = getattr(module, name)
    if inspecting is not None and variant.privates:
        variant.inspector, source = inspecting  # one file for the kernels whose inspectors are alike
        variant.inspector.function = getattr(_load(inspector.NAME, source), inspector.NAME)
    return variant


def analyse(
    fn: Callable[..., Any],
    kinds: list[Kind],
    active: tuple[bool, ...],
    tables: Tables | None = None,
    target: str = "cpu",
) -> Analysed:
    """Lower ``fn`` for argument ``kinds``, type it, and find what is active (``active``: per argument),
    reduced into, loaded and stored.

    For CPU threads, values a block computes again are computed once first (``common_subexpressions``), so
    that the adjoint passes their adjoints on once. Not for CUDA, where the longer-lived values made LULESH's
    element forces adjoint spill more registers (docs/benchmarks.md, "Values computed once")."""
    low = lower_kernel(fn, kinds, tables, target)
    launch_index, params = low.params[0], low.params[1:]
    low.body, types = infer_types(low.body, low.kinds)
    check_types(low.body, types, low.kinds)
    if target == "cpu":
        low.body = common_subexpressions(low.body, types, low.kinds)
    active_inputs = {p for p, a in zip(params, active, strict=True) if a}
    act = useful(low.body, activity(low.body, types, active_inputs, low.kinds), low.kinds)
    defs = definitions(low.body, launch_index, low.kinds)
    arrays = [k for k, p in enumerate(params) if isinstance(low.kinds[p], ArrayKind)]
    return Analysed(
        low=low,
        kernel=fn.__name__,
        types=types,
        act=act,
        defs=defs,
        reduced=reduced_arrays(low.body, launch_index, low.kinds, defs),
        race=racing_store(low.body, launch_index, low.kinds, defs, fn.__name__),
        loaded=loaded_arrays(low.body),
        stored=stored_arrays(low.body),
        overwrites=overwritten_arrays(low.body, launch_index, low.kinds),
        covers=covered_arrays(low.body, launch_index, low.kinds, defs),
        active_arrays=[k for k in arrays if active[k]],
        active_scalars=[k for k, p in enumerate(params) if active[k] and k not in arrays],
    )


def _primal(k: Analysed, launcher: Launcher, touched: set[str], fused: bool, target: str) -> Transformed:
    """The kernel itself; its accumulations at shared indices into private buffers."""
    body = privatize(k.low.body, k.reduced, k.launch_index, k.defs)
    return Transformed(body, launcher, [("primal", k.params.index(a)) for a in sorted(k.reduced)])


def _tangent(k: Analysed, launcher: Launcher, touched: set[str], fused: bool, target: str) -> Transformed:
    """Each statement followed by its tangent (``tangent.py``); tangents take the arrays' privates too."""
    tangent = Tangent(k.act, k.launch_index, k.reduced, k.defs).block(k.low.body)
    launcher.extras += [tan(k.params[p]) for p in k.active_arrays + k.active_scalars]
    active_locals = [s for s in launcher.locals if s.target in k.act.arrays]
    launcher.locals += [LocalArray(tan(s.target), s.shape, s.dtype) for s in active_locals]
    privates = [("primal", k.params.index(a)) for a in sorted(k.reduced)]
    privates += [("shadow", k.params.index(a)) for a in sorted(k.reduced) if a in k.act.arrays]
    return Transformed(privatize(tangent, k.reduced, k.launch_index, k.defs), launcher, privates)


def _adjoint(k: Analysed, launcher: Launcher, touched: set[str], fused: bool, target: str) -> Transformed:
    """The forward sweep and the adjoint sweep (``reverse.py``); adjoints of arrays read at shared indices
    accumulate into private buffers, those of active scalars into per-chunk sums. ``fused``: the primal's
    outputs are made too."""
    body, defs = k.low.body, k.defs
    rev = Reverse(body, k.low.kinds, k.types, k.act, k.launch_index, k.low.namer, touched, defs)
    # A taped loop's saves go to memory (global memory on a GPU, a stack on the CPU), an unrolled one's to
    # registers; on a GPU an output loop's seeds are read first (``owned_loads_first``) once it is unrolled.
    taped = {id(s) for s in walk(body) if isinstance(s, For)} - rev.recompute
    small = small_loops(body, taped)
    if target == "cuda":
        small |= owned_store_loops(body, k.launch_index, k.low.kinds)
    if small:
        body = unroll(body, small)
    droppable = set(k.params) - k.loaded
    outputs = droppable & k.act.arrays  # active arrays the kernel stores and never reads: their seeds
    if not fused:  # a fused adjoint makes every output, whatever its seed
        body = seed_guards(body, outputs, k.low.namer, k.types)
    if body is not k.low.body:
        defs = definitions(body, k.launch_index, k.low.kinds)
        rev = Reverse(body, k.low.kinds, k.types, k.act, k.launch_index, k.low.namer, touched, defs)
    rev.fused = fused
    rev.keep_loops = target == "cpu"
    rev.cleared = frozenset(a for a in k.overwrites if a in k.act.arrays)
    launcher.clears = [(adj(a), k.overwrites[a]) for a in sorted(rev.cleared)]
    live_out = {adj(k.params[p]) for p in k.active_scalars}
    body = rev.sweep(live_out, droppable=droppable)
    if target == "cuda":
        body = owned_loads_first(body, k.launch_index, k.low.kinds, k.types, k.low.namer)
    if not fused:
        stored = (k.stored & k.act.arrays) - {s.target for s in launcher.locals}
        body = iteration_guard(body, k.covers, outputs, stored, k.launch_index, k.low.namer, k.types)
    launcher.extras += [adj(k.params[p]) for p in k.active_arrays]
    launcher.accumulators = [adj(k.params[p]) for p in k.active_scalars]
    # A fused adjoint makes the primal's outputs, rounded as the primal; an adjoint of a kernel that makes
    # integers from floats recomputes them exactly, as the primal made them.
    launcher.derivatives_only = not fused and not needs_exact_arithmetic(k.low.body, k.types, k.low.kinds)
    active_locals = [s for s in launcher.locals if s.target in k.act.arrays]
    launcher.locals += [LocalArray(adj(s.target), s.shape, s.dtype) for s in active_locals]
    launcher.locals += list(rev.kept_arrays.values())
    init = sorted((_scalars_in(body) | set(launcher.accumulators)) - set(k.low.params))
    launcher.stack = rev.static_depth()
    privates = [("shadow", k.params.index(a)) for a in sorted(touched)]
    return Transformed(body, launcher, privates, rev, init)


def _variant(k: Analysed, t: Transformed, mode: str, target: str, checked: bool) -> Variant:
    """What the runner of ``t``'s launcher passes and keeps; the launcher's buffers and sums."""
    launcher, rev = t.launcher, t.rev
    privates = [] if target == "cuda" else t.privates  # a CUDA thread adds to shared elements atomically
    buffers = [_buffer(kind, k.params[pos], mode) for kind, pos in privates]
    halo = _halo(t.body, k.launch_index, buffers) if target == "cpu" else 0
    if halo:
        privates, launcher.direct = [], True
    else:
        launcher.extras += buffers
    # Sums over the launch indices (into private buffers, or active scalars' adjoints) run by a plan
    launcher.planned = bool(buffers or launcher.accumulators) and target == "cpu"
    launcher.privates = buffers
    if launcher.accumulators:
        launcher.extras.append(ACTIVE_SCALARS)
    overwrites = {p: k.overwrites[a] for p, a in enumerate(k.params) if a in k.overwrites}
    return Variant(
        mode="adjoint" if mode == "fused" else mode,
        source="",
        launcher=_no_launcher,
        active_arrays=k.active_arrays,
        active_scalars=k.active_scalars,
        loaded=k.positions(k.loaded),
        stored=k.positions(k.stored),
        rewritten=k.positions(k.stored & stored_arrays(t.body)) if rev else set(),
        kept=k.positions(k.loaded if rev is None or mode == "fused" else k.loaded & _touched_arrays(t.body)),
        privates=privates,
        overwrites=overwrites,
        target=target,
        kernel=k.kernel,
        # A fused launch makes every output: its outputs are not read, and no output is reduced into.
        fuses=bool(rev and rev.moved) and not (k.stored & k.loaded) and not k.reduced,
        halo=halo,
        clears={p: c for p, c in overwrites.items() if rev and k.params[p] in rev.cleared}
        if target == "cuda"
        else {},
        covers={
            k.params.index(a): replace(c, given=tuple((k.params.index(q), v) for q, v in c.given))
            for a, c in k.covers.items()
            if rev and a in k.act.arrays
        },
        race=k.race,
        sites=[] if checked else None,
    )


def _cpu(k: Analysed, t: Transformed, variant: Variant, origin: str, fastmath: bool, checked: bool) -> None:
    """Print ``t`` as a CPU launcher (numba threads) into ``variant.source``."""
    body, types, init = _readable(t.body, k.low, k.types, t.init, set(t.launcher.accumulators), fastmath)
    imports = (
        f"Straight, {'checked, ' if checked else ''}claim, claim_counter, digamma, done_counter, finish, grown, "
        "nonnegative, run_chunks, stack_zeros, wait_for"
    )
    variant.source = MODULE_HEADER.format(origin=origin, imports=imports) + tables_source(k.low.tables)
    variant.source += launcher_source(
        t.launcher, k.launch_index, body, types, k.low.kinds, init, fastmath, variant.sites
    )


def _cuda(k: Analysed, t: Transformed, variant: Variant, origin: str, fastmath: bool, checked: bool) -> None:
    """Print ``t`` as a CUDA kernel into ``variant.source``: accumulations at indices uniform over a warp
    gathered where the warp converges; the tape's size, or the kernel that bounds it."""
    written = k.stored & set(k.params)
    uniform_adds = varying(t.body, k.launch_index, written)
    body = converge(t.body, uniform_adds, k.low.namer, k.types, k.low.kinds)
    body = sink(body, uniform_adds, k.low.namer, k.types, k.low.kinds)
    body, types, init = _readable(body, k.low, k.types, t.init, set(t.launcher.accumulators), fastmath)
    variant.block = BLOCK if t.rev is not None else PRIMAL_BLOCK
    source, variant.shares_loops = cuda_kernel_source(
        t.launcher,
        k.launch_index,
        body,
        types,
        k.low.kinds,
        init,
        fastmath,
        varying(body, k.launch_index, written),
        adjoint=t.rev is not None,
        sites=variant.sites,
        block=variant.block,
    )
    imports = "\n    checked," if checked else ""
    tables = tables_source(k.low.tables)
    variant.source = CUDA_MODULE_HEADER.format(origin=origin, imports=imports) + tables + source
    pushes = [s for s in walk(body) if isinstance(s, Push)]
    stack = t.launcher.stack
    variant.tape_slots = len(pushes) if stack is None else stack
    if t.rev is not None and pushes and stack is None and _pushes_in_loops(body):
        variant.depth_launcher, variant.depth_from_shapes = _depth_kernel(
            t.rev, k.kernel, t.launcher, k.launch_index, origin, fastmath, tables
        )


def _readable(
    body: list[Stmt], low: Lowered, types: dict[str, str], init: list[str], keep: set[str], fastmath: bool
) -> tuple[list[Stmt], dict[str, str], list[str]]:
    """``body`` tidied (``optimize.tidy``; with ``fastmath``, adjoint shares' common factors deferred by
    ``optimize.defer_scales``), its temporaries named after what they hold, with the types of the new names,
    and of ``init`` (the scalars that start a launch index at zero) those still read before they are
    assigned."""
    type_of = Printer(types, low.kinds).type_of
    body = tidy(body, keep, type_of)
    if fastmath:
        body = tidy(defer_scales(body), keep, type_of)
    taken = {n for s in walk(body) for e in exprs_of(s) for n in names_in(e)} | assigned(body)
    names = readable(low.body, taken | set(low.kinds) | set(types))
    renamed = {n: Name(rename(n, names)) for n in taken if rename(n, names) != n}
    body = rewrite(body, lambda e: substitute(e, renamed), lambda n: rename(n, names))
    types = {rename(n, names): ty for n, ty in types.items()}
    exposed = read_first(body, keep)
    return body, types, [rename(n, names) for n in init if rename(n, names) in exposed]


def _touched_arrays(body: list[Stmt]) -> set[str]:
    """The arrays whose elements ``body`` reads or writes."""
    return loaded_arrays(body) | stored_arrays(body)


def _no_launcher(*args: Any) -> None:
    raise AssertionError("launcher not built")


def _pushes_in_loops(body: list[Stmt]) -> bool:
    return any(isinstance(x, Push) for s in walk(body) if isinstance(s, (For, While)) for x in walk(s.body))


def _depth_kernel(
    rev: Reverse,
    kernel_name: str,
    launcher: Launcher,
    launch_index: str,
    origin: str,
    fastmath: bool,
    tables: str,
) -> tuple[Callable[..., Any], bool]:
    """A CUDA kernel writing, per launch index, a bound of the adjoint's stack depth into ``_depth``
    (``tables``: the adjoint's constant tables, printed), and whether it reads no element of an array
    argument (the bound then depends on nothing but the launch size, the scalars and the shapes)."""
    name = f"{kernel_name}_depth_cuda"
    body = rev.depth("_depth", launch_index)
    locals_ = [s for s in walk(rev.body) if isinstance(s, LocalArray)]
    counter = Launcher(name, launcher.params, ["_depth"], locals=locals_)
    source, _ = cuda_kernel_source(
        counter, launch_index, body, rev.types, rev.kinds, [], fastmath, set(), share_loops=False
    )
    header = CUDA_MODULE_HEADER.format(origin=origin + " stack depth", imports="")
    reads_data = bool(loaded_arrays(body) - {s.target for s in locals_})
    return getattr(_load(name, header + tables + source), name), not reads_data


def _halo(body: list[Stmt], launch_index: str, buffers: list[str]) -> int:
    """The largest ``|c|`` of the accumulations ``_pv<x>[i + c, ...] += v`` into private buffers when every
    one is at the launch index ``i`` plus a constant (a stencil's adjoint), else 0.

    Chunks of indices at least ``2 * |c|`` long, two apart, then never add to the same element: every other
    chunk can run at once, adding into the array itself, with no per-thread copy of it to zero and sum.
    """
    names = {private(unbuffer(b)) for b in buffers}
    offsets = launch_offsets(body, launch_index)
    halo = 0
    for s in walk(body):
        if isinstance(s, (Assign, Pop)) and s.target == launch_index:
            return 0
        if isinstance(s, Store) and s.array in names:
            first = s.index[0]
            if not (isinstance(first, Name) and first.id in offsets):
                return 0
            halo = max(halo, abs(offsets[first.id]))
    return halo


def _buffer(kind: str, param: str, mode: str) -> str:
    if kind == "primal":
        return buffer(param)
    return buffer(tan(param) if mode == "tangent" else adj(param))


def _shared_reads(k: Analysed) -> set[str]:
    """Active global arrays read at indices other iterations may share: their adjoints accumulate there."""
    return {
        s.value.array
        for s in walk(k.low.body)
        if isinstance(s, Assign)
        and isinstance(s.value, Elem)
        and s.value.array in k.act.arrays
        and not owned(s.value.index, k.launch_index, k.defs)
    }


def _scalars_in(body: list[Stmt]) -> set[str]:
    """Scalars the adjoint sweep assigns or whose adjoint it reads (each starts an iteration at zero)."""
    used = {n for s in walk(body) for e in exprs_of(s) for n in names_in(e) if n.startswith(ADJOINT)}
    return assigned(body) | {s.target for s in walk(body) if isinstance(s, Pop)} | used


# The helpers generated code calls, on CPUs and GPUs (the CUDA ones read, not imported: that needs numba.cuda).
_RUNTIME_DIGEST = hashlib.sha256(
    b"".join(Path(runtime.__file__).with_name(f).read_bytes() for f in ("runtime.py", "cuda_runtime.py"))
).hexdigest()


def _load(name: str, source: str) -> Any:
    """Write ``source`` to the cache directory (once per distinct source) and import it as a module.

    The file name hashes the source and the runtime helpers it calls: numba's on-disk cache does not track
    callees, so a changed runtime must mean a new file.
    """
    digest = hashlib.sha256((source + _RUNTIME_DIGEST).encode()).hexdigest()[:16]
    module_name = f"pad_generated_{name}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = cache_dir() / f"{module_name}.py"
    if not path.exists():
        # A temporary file of a name no other process (rank, node) takes, renamed into place: a reader sees
        # the whole file or none.
        tmp = path.with_name(f"{module_name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "x") as fh:
            fh.write(source)
        # One modification time for every writer: numba's cache keys on it, so a rank (or node) that writes
        # the file again after another compiled it would otherwise make that compilation stale.
        os.utime(tmp, (SOURCE_MTIME, SOURCE_MTIME))
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------- compiling ahead
SOURCE_MTIME = 1_000_000_000  # the generated files' modification time (see _load)

_noted: list[dict[tuple, tuple[Any, tuple]]] = []  # while noting: (launcher, argument types) -> the same


def noting() -> bool:
    """Whether launches are being noted for ``compile_ahead`` instead of run (see ``note``)."""
    return bool(_noted)


def note(launcher: Any, call: Sequence[Any]) -> bool:
    """While noting, record that ``launcher`` (a generated numba dispatcher) is called on ``call`` and return
    True: the runner then skips the call. Otherwise return False."""
    if not _noted:
        return False
    types = tuple(launcher.typeof_pyval(a) for a in call)
    _noted[-1].setdefault((id(launcher), types), (launcher, types))
    return True


class Noting:
    """``with Noting() as noted:``: launches inside are noted, not run; ``noted.items`` are the launchers and
    the argument types they were called with, for ``compile_ahead``."""

    def __enter__(self) -> Noting:
        _noted.append({})
        self.items: list[tuple[Any, tuple]] = []
        return self

    def __exit__(self, *exc: Any) -> None:
        self.items = list(_noted.pop().values())


@dataclass
class AheadItem:
    """A function of generated code to compile for some argument types: its file, its name, the types, and
    its cost as bytes of source, its file's (a launcher's or an inspector's)."""

    path: str
    module: str
    name: str
    types: tuple
    weight: int = 0

    @property
    def key(self) -> str:
        return f"{self.module}.{self.name}{self.types}"


FUNCTION_BYTES = 20_000  # numba's cost of compiling a function, as if that much more source


def ahead_items(noted: list[tuple[Any, tuple]]) -> list[AheadItem]:
    """The noted launches as compile jobs, in one order on every process that noted the same launches."""
    items = []
    for function, types in noted:
        module = sys.modules[function.py_func.__module__]
        path = str(module.__file__)
        items.append(
            AheadItem(path, module.__name__, function.py_func.__name__, types, os.path.getsize(path))
        )
    return sorted(items, key=lambda item: item.key)


def compile_ahead(items: list[AheadItem], workers: int = 0, share: tuple[int, int] = (0, 1)) -> int:
    """Compile this process's share of ``items`` into numba's on-disk cache, with ``workers`` more processes
    (numba holds the GIL while it compiles: threads would take turns). ``share = (k, n)``: of ``n``
    processes dividing the items (MPI ranks over a shared cache), this one takes the functions k, k + n, ...
    Items already compiled into the cache (a marker beside the generated file says so) are skipped. Returns
    how many items this process and its workers had compiled; a function whose compilation failed here
    compiles, and reports its error, where it is first called.

    The items of one function go to one process, one after the other: numba keeps a function's cache in one
    index file, and two processes saving two signatures of one function at once could leave the index
    naming the other's compiled code. The processes take the functions in turn, the costliest first, each
    the next one none has taken as soon as it is free (``_compile_claimed``): the first function's own
    process starts while the workers start, and the sizes of generated files foretell compile times only
    roughly."""
    index, count = share
    functions = sorted({(item.path, item.name) for item in items})[index::count]
    groups: dict[tuple[str, str], list[AheadItem]] = {}
    for item in items:
        if (item.path, item.name) in functions and not _marker(item).exists():
            groups.setdefault((item.path, item.name), []).append(item)
    if not groups:
        return 0
    order = sorted(groups.values(), key=lambda group: -sum(item.weight + FUNCTION_BYTES for item in group))
    claims = Path(tempfile.mkdtemp(prefix="claims-", dir=cache_dir()))
    try:
        children = [_start_worker(order, claims) for _ in range(min(workers, len(order) - 1))]
        _compile_claimed(order, claims)
        for child, tasks in children:
            child.wait()
            tasks.unlink(missing_ok=True)
    finally:
        shutil.rmtree(claims, ignore_errors=True)
    return sum(map(len, order))


def _compile_claimed(groups: list[list[AheadItem]], claims: Path) -> None:
    """Compile each group of ``groups`` that no other process has claimed yet, claiming it first: the claim
    of group k is the file ``k`` in ``claims``, which one process alone creates."""
    for k, group in enumerate(groups):
        try:
            (claims / str(k)).touch(exist_ok=False)
        except FileExistsError:
            continue
        _compile_items(group)


def _marker(item: AheadItem) -> Path:
    """The file whose presence says ``item`` is in numba's cache (for this numba version)."""
    import numba

    digest = hashlib.sha256(f"{item.key}{numba.__version__}".encode()).hexdigest()[:16]
    return Path(item.path).with_name("__pycache__") / f"{item.module}.{digest}.ahead"


def _start_worker(groups: list[list[AheadItem]], claims: Path) -> tuple[Any, Path]:
    """A process compiling the ``groups`` it claims (``python -c``, so that it imports neither the caller's
    ``__main__`` nor MPI: it must not join the caller's MPI job)."""
    import pickle
    import subprocess

    with tempfile.NamedTemporaryFile("wb", suffix=".ahead", dir=cache_dir(), delete=False) as fh:
        pickle.dump((groups, claims), fh)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_"))}
    code = "import sys; from pad.kernel.compiler import _worker; _worker(sys.argv[1])"
    return subprocess.Popen([sys.executable, "-c", code, fh.name], env=env), Path(fh.name)


def _worker(tasks: str) -> None:
    import pickle

    with open(tasks, "rb") as fh:
        _compile_claimed(*pickle.load(fh))


def _compile_items(items: list[AheadItem]) -> None:
    for item in items:
        module = sys.modules.get(item.module)
        if module is None:
            spec = importlib.util.spec_from_file_location(item.module, item.path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[item.module] = module
            spec.loader.exec_module(module)
        try:
            getattr(module, item.name).compile(item.types)
        except Exception:
            continue  # its first real call compiles it again, and reports the error
        marker = _marker(item)
        marker.parent.mkdir(exist_ok=True)
        marker.touch()


__all__ = [
    "MODES",
    "AheadItem",
    "Lowered",
    "Noting",
    "Variant",
    "ahead_items",
    "build",
    "cache_dir",
    "compile_ahead",
    "note",
    "noting",
]
