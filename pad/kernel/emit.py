"""Print IR as Python source: one numba launcher per kernel variant (primal, tangent, adjoint).

A launcher runs the launch indices in ``nchunks`` contiguous chunks, one per thread (``prange``). Everything
a thread needs privately is set up once per chunk, outside the hot loop: local arrays and their shadows,
the stacks of the reverse sweep, views of private accumulation buffers, and accumulators of active scalars.
"""

from __future__ import annotations

import functools
import linecache
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from numba import config

from pad.kernel.analysis import split_loops, uniform_add_names
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Call,
    Elem,
    Expr,
    Fill,
    For,
    If,
    Kind,
    Line,
    Lit,
    LocalArray,
    Name,
    Pop,
    Push,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    blocks,
    element_type,
    exprs_of,
    loaded_arrays,
    names_in,
    walk,
)
from pad.kernel.names import ACTIVE_SCALARS, PRIVATE, TAPE, UNORDERED, base_name, head, private, unbuffer
from pad.kernel.rules import RULES
from pad.kernel.runtime import STACK_BYTES

SHARED_ADJOINT_REGISTERS = 64  # per thread, for CUDA adjoints whose lanes share loops (cuda_kernel_source)


_ZERO = {"f4": "np.float32(0.0)", "f8": "0.0", "i": "0", "b": "False"}
_CAST = {"f4": "np.float32({})", "f8": "{}", "i": "{}", "b": "({} != 0)"}


def _float(value: float | np.floating) -> str:
    """A float as Python source: ``math.inf`` and ``math.nan`` where ``repr`` would print a bare name."""
    v = float(value)
    if math.isfinite(v):
        return repr(v)
    return "math.nan" if math.isnan(v) else ("math.inf" if v > 0 else "(-math.inf)")


ATOM = 99  # the precedence of a name: an operator printed where one is expected is parenthesized
_INFIX = {"add": ("+", 1), "sub": ("-", 1), "mul": ("*", 2), "div": ("/", 2), "floordiv": ("//", 2)}
_INFIX |= {"mod": ("%", 2), "neg": ("-", 3)}
# Comparisons chain in Python (``a < b < c``): their operands are parenthesized even at their own level.
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_INFIX |= {op: (symbol, 0) for op, symbol in _COMPARE.items()}


@functools.cache
def _bounds(template: str) -> tuple[int, ...]:
    """Per argument of ``template``: 0 where each of its places is a whole argument of a call, else ``ATOM``."""
    whole: dict[int, bool] = {}
    for m in re.finditer(r"\{(\d)\}", template):
        before, after = template[: m.start()], template[m.end() :]
        alone = before.endswith(("(", ", ")) and after.startswith((")", ","))
        k = int(m.group(1))
        whole[k] = whole.get(k, True) and alone
    return tuple(0 if whole.get(k) else ATOM for k in range(max(whole, default=-1) + 1))


@dataclass
class Printer:
    """Prints statements; typed literals take the precision of the value they are assigned to."""

    types: dict[str, str]
    kinds: dict[str, Kind]
    lines: list[str] = field(default_factory=list)
    sized_stacks: bool = False  # the stacks hold the deepest an iteration goes: push without checking
    # Scalars assigned again get a fresh name each time (``x__2``) where no merge is needed (``_renamable``):
    # numba rebuilds SSA form for every variable with several definitions by walking the whole function, which
    # for an adjoint of thousands of such variables took most of its compile time.
    renamable: set[str] = field(default_factory=set)
    versions: dict[str, str] = field(default_factory=dict)
    defined: set[str] = field(default_factory=set)
    # PAD_DEBUG (pad.kernel.checks): every access checked; site k of ``sites`` is (source line, array)
    sites: list[tuple[Line | None, str]] | None = None
    line: Line | None = None  # the source line of the statement being printed
    launch_index: str = "0"
    # Each block of statements from one source line is printed under that line, as a comment
    # (``# k.py:5  y[i] = ...``; an inlined helper's lines name its own file)
    quotes: bool = False
    shown: Line | None = None  # the line of the last such comment

    def define(self, name: str) -> str:
        """The name to print for a new definition of scalar ``name``."""
        if name not in self.renamable:
            return name
        if name not in self.defined:
            self.defined.add(name)
            return name
        count = 2
        while f"{name}__{count}" in self.defined:
            count += 1
        version = f"{name}__{count}"
        self.defined.add(version)
        self.versions[name] = version
        return version

    def current(self, name: str) -> str:
        """The name under which scalar ``name``'s current value is printed."""
        return self.versions.get(name, name)

    def type_of(self, name: str) -> str:
        base = base_name(name)
        kind = self.kinds.get(base)
        if isinstance(kind, ArrayKind):
            return element_type(kind)
        return self.types.get(name) or self.types.get(base, "f8")

    def expr(self, e: Expr, ty: str, bound: int = ATOM) -> str:
        """``e`` printed in a context of type ``ty`` where an operator binding less tightly than ``bound``
        needs parentheses (statements' values: 0; operands inside templates: ``ATOM``, always)."""
        if isinstance(e, Name):
            return self.current(e.id)
        if isinstance(e, Lit):
            if isinstance(e.value, np.float32) or (e.typed and ty == "f4" and not isinstance(e.value, bool)):
                return f"np.float32({_float(e.value)})"
            if e.typed and not isinstance(e.value, bool):
                return _float(e.value)
            if isinstance(e.value, float) and not math.isfinite(e.value):
                return _float(e.value)  # np.float64(inf) would print as a bare name too
            return repr(e.value)
        if isinstance(e, Elem):
            return f"{e.array}[{self.at(e.array, e.index)}]"
        assert isinstance(e, Call)
        if e.op == "indicator" and ty == "f4":  # a float32 0 or 1: np.float64() would compute in float64
            return f"np.float32({self.expr(e.args[0], 'b', 0)})"
        template = self.template(e.op)
        if template == "{0}":
            return self.expr(e.args[0], ty, bound)
        wide = ty == "f4" and self.wide(e.op)
        if e.op in _INFIX and template == RULES[e.op].template and not wide:
            # Python's own precedence, left-associative: the tree printed is the tree evaluated.
            symbol, level = _INFIX[e.op]
            if e.op == "neg":
                text = f"-{self.expr(e.args[0], ty, level)}"
            else:
                shift = (1, 1) if e.op in _COMPARE else (0, 1)
                left, right = (self.expr(a, ty, level + k) for a, k in zip(e.args, shift, strict=True))
                text = f"{left} {symbol} {right}"
            return text if level >= bound else f"({text})"
        text = template.format(
            *(self.expr(a, ty, b) for a, b in zip(e.args, _bounds(template), strict=False))
        )
        if e.op == "tindex" and self.sites is not None:  # a tuple of e.args[1] items, indexed at run time
            size = self.expr(e.args[1], "i")
            return self.checked("", f"({size},)", [text]) + "[0]"
        return f"np.float32({text})" if wide else text

    def template(self, op: str) -> str:
        return RULES[op].template

    def at(self, array: str, index: tuple[Expr, ...]) -> str:
        """The index of an access to ``array``: checked against its shape under PAD_DEBUG."""
        items = [self.expr(x, "i", 0) for x in index]
        if self.sites is None:
            return ", ".join(items)
        return self.checked(array, f"{self.memory(array)}.shape", items)

    def checked(self, array: str, shape: str, items: list[str]) -> str:
        """``runtime.check_index`` of ``items`` as a new site (a tuple of int64, which every array takes)."""
        assert self.sites is not None
        self.sites.append((self.line, array))
        index = "".join(f"np.int64({x}), " for x in items)
        return f"checked({len(self.sites) - 1}, {shape}, ({index}), {self.launch_index})"

    def memory(self, array: str) -> str:
        """The variable holding ``array``'s elements where it is accessed."""
        return array

    def wide(self, op: str) -> bool:
        """Whether ``op``'s template computes in float64 whatever its arguments (cast back to float32)."""
        return RULES[op].wide

    def emit(self, stmts: list[Stmt], indent: int) -> None:
        pad = "    " * indent
        for s in stmts:
            self.line = s.line
            if self.quotes and s.line and s.line != self.shown and not isinstance(s, LocalArray):
                file, number = s.line.file, s.line.number
                text = linecache.getline(file, number).strip()
                self.lines.append(f"{pad}# {os.path.basename(file)}:{number}  {text}".rstrip())
                self.shown = s.line
            if isinstance(s, Assign):
                value = self.expr(s.value, self.type_of(s.target), 0)
                self.lines.append(f"{pad}{self.define(s.target)} = {value}")
            elif isinstance(s, Store):
                self.lines += [pad + line for line in self.store(s)]
            elif isinstance(s, If):
                self.lines.append(f"{pad}if {self.expr(s.cond, 'b', 0)}:")
                self.emit(s.body or [], indent + 1)
                if not s.body:
                    self.lines.append(f"{pad}    pass")
                if s.orelse:
                    self.lines.append(f"{pad}else:")
                    self.emit(s.orelse, indent + 1)
            elif isinstance(s, For):
                self.lines += [pad + line for line in self.loop_header(s)]
                self.emit(s.body, indent + 1)
                if not s.body:
                    self.lines.append(f"{pad}    pass")
                self.lines += [pad + line for line in self.loop_footer(s)]
            elif isinstance(s, While):
                self.lines.append(f"{pad}while True:")
                self.emit(s.test, indent + 1)
                self.lines.append(f"{pad}    if not {self.expr(s.cond, 'b')}:")
                self.lines.append(f"{pad}        break")
                self.emit(s.body, indent + 1)
            elif isinstance(s, Push):
                self.lines += [pad + line for line in self.push(s)]
            elif isinstance(s, Pop):
                self.lines += [pad + line for line in self.pop(s)]
            elif isinstance(s, Fill):
                self.lines += [pad + line for line in self.fill(s)]
            elif isinstance(s, LocalArray):
                continue  # allocated once per chunk
            else:
                raise AssertionError(f"cannot print {s}")

    # Statements whose code depends on the target (CPU threads here; CUDA in ``CudaPrinter``).
    def loop_header(self, s: For) -> list[str]:
        bounds = ", ".join(self.expr(x, "i") for x in (s.start, s.stop, s.step))
        return [f"for {s.var} in range({bounds}):"]

    def loop_footer(self, s: For) -> list[str]:
        return []

    def index(self, s: Store) -> str:
        return self.at(s.array, s.index)

    def store(self, s: Store) -> list[str]:
        op = "+=" if s.accumulate else "="
        return [f"{s.array}[{self.index(s)}] {op} {self.expr(s.value, self.type_of(s.array), 0)}"]

    def push(self, s: Push) -> list[str]:
        # Inline: a call would pass (and reference-count) the stack array each time.
        stack, top = f"_s{s.kind}", f"_n{s.kind}"
        room = (
            [] if self.sized_stacks else [f"if {top} == {stack}.shape[0]:", f"    {stack} = grown({stack})"]
        )
        return [*room, f"{stack}[{top}] = {self.expr(s.value, 'f8', 0)}", f"{top} += 1"]

    def pop(self, s: Pop) -> list[str]:
        return [
            f"_n{s.kind} -= 1",
            f"{self.define(s.target)} = {_CAST[s.ty].format(f'_s{s.kind}[_n{s.kind}]')}",
        ]

    def fill(self, s: Fill) -> list[str]:
        return [f"{s.array}[...] = {self.expr(s.value, self.type_of(s.array))}"]


@dataclass
class Launcher:
    """What a launcher needs besides the kernel's own parameters."""

    name: str
    params: list[str]  # kernel parameters (IR names), after the launch index
    extras: list[str] = field(default_factory=list)  # shadows, tangents, private buffers, outputs
    privates: list[str] = field(default_factory=list)  # buffer names (``_priv<x>``) of privatized arrays
    accumulators: list[str] = field(default_factory=list)  # adjoints of active scalars, summed per chunk
    locals: list[LocalArray] = field(
        default_factory=list
    )  # per-thread arrays: local arrays and their shadows
    # The launch runs by a plan (pad/parallel/plans.py): ``_order`` (launch indices, or empty for the
    # identity), ``_segs`` (ranges of ``_order``), ``_colours`` (colour c's segments are ``_colours[c]`` to
    # ``_colours[c + 1] - 1``; the colours run one after the other). A colour's segments form at most
    # ``_slots`` groups of consecutive segments, shared out among the chunks; a chunk claims its own share's
    # groups one by one, then those left in the other chunks' shares (``_claimed``: per colour, as
    # ``runtime.counter_words`` lays out a run of parts, a count of its groups done and a count of each
    # chunk's share handed out, each on a cache line of its own). A chunk starts colour w + 1 once all of
    # colour w's groups are done (``runtime.wait_for``): the colours run in one parallel region, apart by a
    # count, not by a parallel region each (whose start and end cost 8 us on 16 threads). Waiting cannot
    # hang: a chunk that waits has claimed every group left, so the groups not done are being run. Each
    # thread thus runs its own share while no other is late, keeping from one colour to the next the nodes
    # its blocks share with the next colour's in its caches.
    # Group ``g`` accumulates into slot ``g`` of each private buffer, or into the array itself where the
    # buffer has no slots: the sums do not depend on which thread ran a group.
    planned: bool = False
    # Every private accumulation adds into the array itself (a stencil's, whose plan runs blocks in two
    # colours): ``privates`` then name no buffers.
    direct: bool = False
    # Reverse mode: the stack depth of every launch index, when known at compile time (else they grow).
    stack: int | None = None
    # Reverse mode: shadows whose seeds the chunk sets to zero after a block of launch indices, at
    # ``index + offset`` (``Reverse.cleared``).
    clears: list[tuple[str, int]] = field(default_factory=list)
    quotes: bool = False  # print each block of code under the source line it comes from
    # A plain CPU adjoint, whose values are only derivatives, which may round differently from the primal's:
    # compiled with the fast-math flags that keep NaN, infinities and the primal's exact arithmetic elsewhere
    # (``DERIVATIVE_FLAGS``, docs/kernels.md).
    derivatives_only: bool = False


def _names(stmts: list[Stmt]) -> Counter[str]:
    """How often each scalar occurs (read or written) in ``stmts``, nested statements included."""
    count: Counter[str] = Counter()
    for s in walk(stmts):
        for e in exprs_of(s):
            count.update(names_in(e))
        if isinstance(s, (Assign, Pop)):
            count[s.target] += 1
        elif isinstance(s, For):
            count[s.var] += 1
    return count


def _renamable(body: list[Stmt], launch_index: str) -> set[str]:
    """The scalars that ``Printer`` may give a fresh name at each definition, since each is assigned only at the
    top level of one statement list: in the launch body, those no nested block assigns; in a nested list (a
    branch, a loop body), those that occur nowhere else and whose first occurrence there is a definition, so
    no value flows into the list (from before it or an earlier iteration) or out of it."""
    total = _names(body)
    out: set[str] = set()

    def visit(block: list[Stmt], top: bool) -> None:
        inside = _names(block)
        nested = assigned([s for s in block if blocks(s)])
        decided: set[str] = set()
        for s in block:
            if isinstance(s, (Assign, Pop)) and s.target not in nested:
                reads = set(names_in(s.value)) if isinstance(s, Assign) else set()
                if top or (s.target not in decided | reads and inside[s.target] == total[s.target]):
                    out.add(s.target)
            decided |= set(_names([s]))
            for sub in blocks(s):
                visit(sub, False)

    visit(body, True)
    return out - {launch_index}


DERIVATIVE_FLAGS = "{'arcp', 'contract', 'nsz', 'reassoc'}"
"""LLVM's fast-math flags of a plain CPU adjoint: multiplies and adds fused, sums reassociated, divisions by
one value made one reciprocal, and zeros' signs ignored (``0.0 + d`` is ``d``: every adjoint starts its sums at
zero). Not ``nnan``/``ninf``: a NaN or infinity still reaches the gradient. LULESH's kinematics' adjoint took
25% less time, the element forces' 15% (docs/benchmarks.md, "Fast-math flags for plain adjoints"). Kernels
that make integers from floats keep exact arithmetic (``analysis.needs_exact_arithmetic``)."""

# A fast-math CPU launcher's chunks (without a plan) are runs of whole blocks of this many launch indices
# where LLVM may vectorize its loop over them (``_vectorizable``). LLVM runs a vectorized loop's last indices in
# scalar code, whose rounding under fast-math flags may differ from the vector code's: bounds that depend on
# the chunk count only in multiples of a whole vector loop's step put every index on the same path for any
# thread count, so results are identical on 1 to 16 threads. Elsewhere (no fast-math flags: both paths round
# alike; loops within: the launch index's is not vectorized) chunks split the indices evenly, so that a kernel
# of a few costly indices (miniBUDE's blocks of poses) still spreads over the threads.
CHUNK_ALIGN = 64
CLEAR_BLOCK = 2048  # launch indices per block whose seeds a CPU adjoint clears together


def _vectorizable(body: list[Stmt]) -> bool:
    """Whether LLVM may vectorize a chunk's loop over launch indices: it vectorizes innermost loops, and the
    launch index's is one unless ``body`` has a loop LLVM cannot unroll whole (one of a literal trip count,
    such as LULESH's eight corners, it may)."""
    return not any(
        isinstance(s, While)
        or (isinstance(s, For) and not all(isinstance(e, Lit) for e in (s.start, s.stop)))
        for s in walk(body)
    )


def launcher_source(
    launcher: Launcher,
    launch_index: str,
    body: list[Stmt],
    types: dict[str, str],
    kinds: dict[str, Kind],
    init: list[str],
    fastmath: bool,
    sites: list[tuple[Line | None, str]] | None = None,
) -> str:
    """The Python source of a launcher running ``body`` for every launch index.

    With ``sites`` (PAD_DEBUG), every access is checked (one site per access is appended to ``sites``)."""
    p = Printer(types, kinds, sized_stacks=launcher.stack is not None, sites=sites, launch_index=launch_index)
    p.quotes = launcher.quotes
    p.renamable = _renamable(body, launch_index)
    args = ", ".join([*head("cpu", launcher.planned), *launcher.params, *launcher.extras])
    # A launcher is one plain njit function, its chunks' code. Called from Python with ``_run``, the address
    # of the runner of chunks (pad/parallel/cpu.py: one parallel loop compiled once for every kernel, or a
    # serial one for PAD_DEBUG), it has the runner call it again for each chunk ``_c`` with ``_run`` 0
    # (``runtime.run_chunks``). A launcher with a parallel loop of its own would have numba lower
    # and compile that loop once per kernel (docs/benchmarks.md, "First runs: compiling"). The launch index
    # is never negative: ``nonnegative`` tells LLVM so, which drops numba's wrap-around from indices made of it.
    flags = DERIVATIVE_FLAGS if launcher.derivatives_only and not fastmath else fastmath
    options = f"nogil=True, cache=True, fastmath={flags}, error_model='numpy'"
    p.lines += [f"@njit({options}, pipeline_class=Straight)", f"def {launcher.name}(_run, _c, {args}):"]
    p.lines.append("    if _run != 0:")
    if launcher.planned:
        p.lines.append("        _claimed[:] = 0")
    p.lines.append(f"        return run_chunks(_nchunks, _run, _c, {args})")
    if not launcher.planned and flags and _vectorizable(body):  # whole blocks (CHUNK_ALIGN)
        blocks = f"(_n + {CHUNK_ALIGN - 1}) // {CHUNK_ALIGN}"
        p.lines += [
            f"    _lo = min(_n, {blocks} * _c // _nchunks * {CHUNK_ALIGN})  # one rounding for any chunk count",
            f"    _hi = min(_n, {blocks} * (_c + 1) // _nchunks * {CHUNK_ALIGN})",
        ]
    elif not launcher.planned:
        p.lines += ["    _lo = _n * _c // _nchunks", "    _hi = _n * (_c + 1) // _nchunks"]
    for local in launcher.locals:
        stack = int(np.prod(local.shape)) * local.dtype.itemsize <= STACK_BYTES
        p.lines.append(
            f"    {local.target} = {'stack_zeros' if stack else 'np.zeros'}({local.shape}, np.{local.dtype.name})"
        )
    kinds_used = sorted({s.kind for s in walk(body) if isinstance(s, (Push, Pop))})
    for k in kinds_used:
        room = 64 if launcher.stack is None else max(launcher.stack, 1)
        p.lines.append(f"    _s{k} = np.empty({room}, np.{'float64' if k == 'f' else 'int64'})")
    depth, lo, hi, slot = 1, "_lo", "_hi", "_c"  # depth: the indentation of the next line, in levels

    def line(text: str) -> None:
        p.lines.append("    " * depth + text)

    if launcher.planned:  # chunk _c runs its share of the groups of segments of colour _w, then helps others
        line("_ident = _order.shape[0] == 0")
        line("_waves = _colours.shape[0] - 1")
        line("for _w in range(_waves):")
        line("    _first = _colours[_w]")
        line("    _count = _colours[_w + 1] - _first")
        line("    _groups = min(_slots, _count)")
        line("    _done = done_counter(_w, _nchunks)")
        line("    if _w > 0:  # once every group of the colour before is done")
        line(
            "        wait_for(_claimed, done_counter(_w - 1, _nchunks), min(_slots, _first - _colours[_w - 1]))"
        )
        line("    _ran = 0")
        line("    for _v in range(_nchunks):")
        line("        _o = _c + _v if _c + _v < _nchunks else _c + _v - _nchunks")
        line("        _share = _groups * _o // _nchunks")
        line("        _stop = _groups * (_o + 1) // _nchunks")
        line("        _handed = claim_counter(_w, _nchunks, _o)")
        line("        while _claimed[_handed] < _stop - _share:  # others' shares: mostly taken")
        line("            _g = _share + claim(_claimed, _handed)")
        line("            if _g >= _stop:")
        line("                break")
        line("            _ran += 1")
        depth, slot = depth + 3, "_g"
    outer = depth  # where per-slot set-up and sums go
    for buf in launcher.privates:
        base = unbuffer(buf)
        if launcher.direct:
            line(f"{private(base)} = {base}")
        elif launcher.planned:
            line(f"{private(base)} = {base} if {buf}.shape[0] == 0 else {buf}[_g]")
        else:
            line(f"{private(base)} = {buf}[_c]")
    for acc in launcher.accumulators:
        line(f"_acc{acc} = {_ZERO[p.type_of(acc)]}")
    if launcher.planned:
        line("for _s in range(_first + _count * _g // _groups, _first + _count * (_g + 1) // _groups):")
        depth, lo, hi = depth + 1, "_segs[_s, 0]", "_segs[_s, 1]"
    # Seeds that the adjoint reads once per launch index are cleared a block at a time, after the block.
    if launcher.clears:
        line(f"for _blk in range({lo}, {hi}, {CLEAR_BLOCK}):")
        depth += 1
        line(f"_end = min(_blk + {CLEAR_BLOCK}, {hi})")
        lo, hi = "_blk", "_end"
    blocks_at = depth
    if launcher.planned:
        line(f"for _k in range({lo}, {hi}):")
        depth += 1
        line(f"{launch_index} = nonnegative(_k if _ident else _order[_k])")
    else:
        line(f"for {launch_index} in range({lo}, {hi}):")
        depth += 1
        line(f"{launch_index} = nonnegative({launch_index})")
    for k in kinds_used:
        line(f"_n{k} = 0")
    for name in init:
        line(f"{p.define(name)} = {_ZERO.get(p.type_of(name), '0.0')}")
    before = len(p.lines)
    p.emit(body, depth)
    if len(p.lines) == before and not init and not launcher.accumulators:
        line("pass")
    for acc in launcher.accumulators:
        line(f"_acc{acc} += {p.current(acc)}")
    depth = blocks_at
    for shadow, offset in launcher.clears:
        if launcher.planned:
            line("if _ident:")
            line(f"    {shadow}[_blk + {offset} : _end + {offset}] = 0")
            line("else:")
            line("    for _k in range(_blk, _end):")
            line(f"        {shadow}[_order[_k] + {offset}] = 0")
        else:
            line(f"{shadow}[_blk + {offset} : _end + {offset}] = 0")
    depth = outer
    for column, acc in enumerate(launcher.accumulators):
        line(f"{ACTIVE_SCALARS}[{slot}, {column}] += _acc{acc}")
    if launcher.planned:
        depth = outer - 2
        line("if _ran:")
        line("    finish(_claimed, _done, _ran)")
    return "\n".join(p.lines) + "\n"


MODULE_HEADER = """\
# Generated by pad from {origin}. Do not edit: regenerated when the kernel changes.
import math

import numpy as np
from numba import njit

from pad.kernel.runtime import {imports}

"""


def tables_source(tables: dict[str, np.ndarray]) -> str:
    """The constant tables a kernel reads, as module-level arrays: numba (CPU and CUDA) freezes a global
    array into the compiled code as a constant, so an element at indices known after unrolling becomes a
    number in the arithmetic instead of a load."""
    lines = [
        f"{name} = np.array({_literal(v.tolist())}, dtype={v.dtype.name!r})" for name, v in tables.items()
    ]
    return "".join(line + "\n" for line in lines) + ("\n\n" if lines else "")


def _literal(x: object) -> str:
    """``x`` (nested lists of numbers) as Python source that reads back exactly."""
    if isinstance(x, list):
        return "[" + ", ".join(map(_literal, x)) + "]"
    if isinstance(x, float) and not math.isfinite(x):
        return "math.nan" if math.isnan(x) else ("math.inf" if x > 0 else "-math.inf")
    return repr(x)


# ---------------------------------------------------------------------------------------------- CUDA
BLOCK = 128  # threads per block of a generated CUDA adjoint (and of the kernel bounding its tape)
PRIMAL_BLOCK = 64  # of a primal or tangent kernel: more, smaller blocks (docs/benchmarks.md)
_CUDA_CAST = {"f4": "np.float32({})", "f8": "{}", "i": "int({})", "b": "({} != 0)"}


@dataclass
class CudaPrinter(Printer):
    """Prints statements for a CUDA thread: one launch index per thread, atomics where indices are shared.

    An accumulation into a private buffer (``_pv<x>[j] += v``; on CPU, the thread's own copy) becomes an
    atomic add to ``x`` itself, warp-aggregated when ``j`` is uniform across threads.
    The reverse sweep's stack is a column of the launch's preallocated ``_tape`` (slot-major, so
    neighbouring threads touch neighbouring words), with ``_tape.shape[0]`` slots per thread.
    """

    varying: set[str] = field(default_factory=set)
    ranks: dict[str, int] = field(default_factory=dict)  # local arrays' ranks (for Fill)
    atomic: set[str] = field(default_factory=set)  # arrays some thread accumulates into at a shared index
    tiles: dict[str, int] = field(default_factory=dict)  # arrays staged in shared memory -> halo width
    offsets: dict[str, int] = field(default_factory=dict)  # names holding launch index + constant
    # Loops the ``_G`` lanes of a group share (analysis.split_loops): id() -> the sums the group adds up.
    # In such a kernel every lane of a group runs the rest alike, and only its first lane stores.
    split: dict[int, set[str]] = field(default_factory=dict)
    fenced: bool = False  # such a kernel reads arrays it stores into: the group meets around stores
    sharing: bool = False  # printing a shared loop's body: each lane adds its own iterations' terms

    def template(self, op: str) -> str:
        return RULES[op].cuda or RULES[op].template

    def memory(self, array: str) -> str:
        return array.removeprefix(PRIVATE)  # a CUDA thread adds into the array itself

    def wide(self, op: str) -> bool:
        """CUDA templates (helpers, ``math.pow``) may compute in float64."""
        rule = RULES[op]
        return rule.wide or (rule.cuda is not None and rule.result in ("float", "same", "promote"))

    groups: int = 0
    # Accumulations at constant indices into arrays the kernel never reads (``_b_clock[1] += v``): element ->
    # the thread's sum of them, summed per block after the body and added once per block
    block_sums: dict[tuple[str, tuple], str] = field(default_factory=dict)

    def emit(self, stmts: list[Stmt], indent: int) -> None:
        """As ``Printer.emit``; adjacent accumulations at uniform indices share one warp aggregation."""
        run: list[Store] = []
        for s in [*stmts, None]:
            element = _element(s) if isinstance(s, Store) and self.block_sums else None
            summed = self.block_sums.get(element) if element is not None else None
            if isinstance(s, Store) and summed is not None:
                add = [f"{summed} += {self.expr(s.value, 'f8', 0)}"]
                self.lines += [
                    "    " * indent + line for line in (add if self.sharing else self.first_lane(add))
                ]
                continue
            key = uniform_add_names(s, self.varying)
            if run and key != uniform_add_names(run[0], self.varying):
                self.lines += ["    " * indent + line for line in self.aggregated(run)]
                run = []
            if key is not None:
                run.append(s)  # type: ignore[arg-type]
            elif s is not None:
                super().emit([s], indent)

    def aggregated(self, run: list[Store]) -> list[str]:
        """Where the whole warp is here with the same index, it sums each value with shuffles and one lane
        adds atomically (32x fewer atomics on one address); elsewhere every lane adds atomically. Either
        way nothing is summed or added where every value is zero.

        In a shared loop the lanes of a group are at different iterations, and the lanes at the same place
        in their groups at the same one: those are summed, and the first group's lanes add.
        """
        self.groups += 1
        g = "_G" if self.sharing else "1"
        names = sorted(uniform_add_names(run[0], self.varying) or ()) or ["0"]
        check = " and ".join(f"uniform({self.current(n)}, {g})" for n in names)
        sums = [f"_w{self.groups}_{k}" for k in range(len(run))]
        values = [self.expr(s.value, self.type_of(s.array)) for s in run]
        # Adds of zero are skipped: an adjoint past a cut-off (a pair potential's) is zero almost everywhere.
        lines = [
            f"if WARP_SHUFFLES and {check}:",
            f"    if warp_any({' | '.join(f'({v} != 0)' for v in values)}):",
        ]
        lines += [f"        {w} = warp_sum({v}, {g})" for w, v in zip(sums, values, strict=True)]
        lines.append(f"        if cuda.laneid < {g}:")
        lines += [f"            {self.atomic_add(s, w)}" for w, s in zip(sums, run, strict=True)]
        lines.append("else:")
        for s, v in zip(run, values, strict=True):
            lines += [f"    if {v} != 0:", f"        {self.atomic_add(s, v)}"]
        return lines if self.sharing else self.first_lane(lines)

    def first_lane(self, lines: list[str]) -> list[str]:
        """``lines`` run by one lane of each group in a kernel whose groups share loops (else by all).

        Where the kernel also reads what it stores, the group's lanes meet before and after the store: none
        reads the element after the store before its own earlier read, and all read it after the store.
        """
        if not self.split:
            return lines
        fence = ["group_sync(_G)"] if self.fenced else []
        return [*fence, "if _lane == 0:", *("    " + line for line in lines), *fence]

    def atomic_add(self, s: Store, value: str) -> str:
        index = self.index(s) if len(s.index) == 1 else f"({self.index(s)})"
        return f"cuda.atomic.add({s.array.removeprefix(PRIVATE)}, {index}, {value})"

    def store(self, s: Store) -> list[str]:
        array = s.array.removeprefix(PRIVATE)
        if array in self.tiles:
            _, slot = _tile_slot(s, self.offsets, self.tiles)
            return [f"_tc{array}_{slot} += {self.expr(s.value, self.type_of(s.array))}"]
        if array in self.ranks:  # a local array: every lane keeps its own copy
            return super().store(s)
        if self.sharing:  # the group's lanes add their own iterations' terms (split_loops: only adds here)
            return [self.atomic_add(s, self.expr(s.value, self.type_of(s.array)))]
        if not s.accumulate or array not in self.atomic:
            return self.first_lane(super().store(s))
        # Also ``x[i] += v`` at the thread's own index: another thread may be adding to x[i] atomically.
        return self.first_lane([self.atomic_add(s, self.expr(s.value, self.type_of(s.array)))])

    def loop_header(self, s: For) -> list[str]:
        """Iterations whose order does not matter (``UNORDERED`` loop variables) start at a different
        iteration in each warp: warps that accumulate into ``x[k]`` then hit different addresses at a time
        instead of all queueing on the same one."""
        shared = id(s) in self.split
        head: list[str] = []
        if shared:  # each lane sums its share from zero; the footer adds the shares
            sums = sorted(self.split[id(s)])
            head = [*(f"_before{v} = {v}" for v in sums), *(f"{v} = {_ZERO[self.type_of(v)]}" for v in sums)]
            self.sharing = True
        if not s.var.startswith(UNORDERED):
            if not shared:
                return super().loop_header(s)
            start, stop, step = (self.expr(x, "i") for x in (s.start, s.stop, s.step))
            return [*head, f"for {s.var} in range({start} + ({step}) * _lane, {stop}, ({step}) * _G):"]
        assert s.start == Lit(0) and s.step == Lit(1)
        stop = self.expr(s.stop, "i")
        turns = f"_lane, {stop}, _G" if shared else stop
        return [
            *head,
            f"_o{s.var} = (_tid // 32 * 8) % {stop} if {stop} > 0 else 0",
            f"for _r{s.var} in range({turns}):",
            f"    {s.var} = _r{s.var} + _o{s.var}",
            f"    if {s.var} >= {stop}:",
            f"        {s.var} -= {stop}",
        ]

    def loop_footer(self, s: For) -> list[str]:
        """After a shared loop, every lane of the group adds the lanes' shares to the sums' values before it."""
        if id(s) not in self.split:
            return []
        self.sharing = False
        return [f"{v} = _before{v} + group_sum({v}, _G)" for v in sorted(self.split[id(s)])]

    def push(self, s: Push) -> list[str]:
        store = f"_tape[_nt, {self.column}] = {self.expr(s.value, 'f8')}"
        if self.sized_stacks:  # no branch per push: numba's analyses of a branchy kernel take minutes
            return [store, "_nt += 1"]
        return ["if _nt < _tape.shape[0]:", f"    {store}", "else:", "    _overflow[0] = 1", "_nt += 1"]

    def pop(self, s: Pop) -> list[str]:
        return [
            "_nt -= 1",
            f"{self.define(s.target)} = {_CUDA_CAST[s.ty].format(f'_tape[min(_nt, _tape.shape[0] - 1), {self.column}]')}",
        ]

    @property
    def column(self) -> str:
        """This thread's column of the tape: its launch index, or its own where lanes share an index (the
        lanes of a group push and pop alike, but not in step)."""
        return "_col" if self.split else "_tid"

    def fill(self, s: Fill) -> list[str]:
        value = self.expr(s.value, self.type_of(s.array))
        rank = self.ranks[s.array]
        loops = [f"{'    ' * d}for _f{d} in range({s.array}.shape[{d}]):" for d in range(rank)]
        index = ", ".join(f"_f{d}" for d in range(rank))
        return [*loops, f"{'    ' * rank}{s.array}[{index}] = {value}"]


def cuda_kernel_source(
    launcher: Launcher,
    launch_index: str,
    body: list[Stmt],
    types: dict[str, str],
    kinds: dict[str, Kind],
    init: list[str],
    fastmath: bool,
    varying: set[str],
    share_loops: bool = True,
    adjoint: bool = False,
    sites: list[tuple[Line | None, str]] | None = None,
    block: int = BLOCK,
) -> tuple[str, bool]:
    """The Python source of a ``@cuda.jit`` kernel running ``body`` for one launch index per thread, or per
    group of ``_G`` threads where its innermost sum loops can be shared (:func:`split_loops`): a launch of few
    indices then still fills the GPU.

    Active scalars' adjoints are summed per block (of ``block`` threads, which the launch must use) in shared
    memory, then added to ``_act`` atomically: one atomic per block, not per thread. ``sites``: as for
    ``launcher_source`` (numba's simulator only).
    """
    ranks = {local.target: len(local.shape) for local in launcher.locals}
    atomic = {
        s.array.removeprefix(PRIVATE)
        for s in walk(body)
        if isinstance(s, Store) and s.array.startswith(PRIVATE)
    }
    offsets = launch_offsets(body, launch_index)
    tiles = _tiled(body, atomic, offsets, kinds) if sites is None else {}  # PAD_DEBUG: each add checked
    p = CudaPrinter(types, kinds, varying=varying, ranks=ranks, atomic=atomic, tiles=tiles, offsets=offsets)
    p.sites, p.launch_index, p.quotes = sites, launch_index, launcher.quotes
    p.block_sums = _block_sums(body, atomic, kinds) if sites is None else {}  # PAD_DEBUG: each add checked
    p.sized_stacks = launcher.stack is not None
    p.renamable = _renamable(body, launch_index)
    uses_tape = any(isinstance(s, (Push, Pop)) for s in walk(body))
    # Not with shared-memory tiles (slots per thread).
    p.split = split_loops(body, set(ranks)) if share_loops and not tiles else {}
    stored = {s.array.removeprefix(PRIVATE) for s in walk(body) if isinstance(s, Store)}
    p.fenced = bool(stored & loaded_arrays(body))
    args = ", ".join(
        [
            *head("cuda", shares_loops=bool(p.split)),
            *launcher.params,
            *launcher.extras,
            *(TAPE if uses_tape else ()),
        ]
    )
    # Few launch indices, so few threads: an adjoint sharing loops hides its latency only with many threads
    # per multiprocessor, which its registers limit; primal kernels lose by a cap (docs/benchmarks.md).
    capped = p.split and adjoint and not config.ENABLE_CUDASIM  # type: ignore[attr-defined]
    cap = f", max_registers={SHARED_ADJOINT_REGISTERS}" if capped else ""  # (numba's simulator has no cap)
    p.lines += [f"@cuda.jit(fastmath={fastmath}, cache=True{cap})", f"def {launcher.name}({args}):"]
    p.lines.append("    _tid = cuda.grid(1)")
    if p.split:  # _G consecutive lanes (a power of two, at most 16) per launch index
        p.lines += ["    _col = _tid", "    _lane = _tid % _G", "    _tid //= _G"]
    for acc in [*(f"_acc{a}" for a in launcher.accumulators), *p.block_sums.values()]:
        p.lines.append(f"    {acc} = 0.0")
    staged = _staged_slots(body, offsets, tiles)
    p.lines += _tile_sums(tiles, staged, kinds)
    p.lines.append("    if _tid < _n:")
    p.lines.append(f"        {launch_index} = _tid")
    for local in launcher.locals:
        p.lines.append(f"        {local.target} = cuda.local.array({local.shape}, np.{local.dtype.name})")
        p.lines += ["        " + line for line in p.fill(Fill(local.target, Lit(0, typed=True)))]
    if uses_tape:
        p.lines.append("        _nt = 0")
    for name in init:
        p.lines.append(f"        {p.define(name)} = {_ZERO.get(p.type_of(name), '0.0')}")
    p.emit(body, 2)
    for acc in launcher.accumulators:
        p.lines += ["        " + line for line in p.first_lane([f"_acc{acc} += {p.current(acc)}"])]
    p.lines += _tile_epilogue(tiles, staged, kinds, block)
    # Per-block sums, each added by one atomic: active scalars' adjoints, and the block sums' elements.
    sums = [
        (f"_acc{acc}", f"{ACTIVE_SCALARS}, (0, {slot})") for slot, acc in enumerate(launcher.accumulators)
    ]
    for (array, index), name in p.block_sums.items():
        at = ", ".join(map(str, index))
        sums.append((name, f"{array.removeprefix(PRIVATE)}, {at if len(index) == 1 else f'({at})'}"))
    if sums:
        # One barrier asks whether any thread of the block has something to add: blocks with nothing (a fault
        # count where no element faulted) skip the tree's barriers.
        nonzero = " or ".join(f"{name} != 0.0" for name, _ in sums)
        p.lines += [
            f"    if cuda.syncthreads_or(1 if {nonzero} else 0):",
            f"        _sum = cuda.shared.array(({len(sums)}, {block}), np.float64)",
            "        _t = cuda.threadIdx.x",
        ]
        p.lines += [f"        _sum[{slot}, _t] = {name}" for slot, (name, _) in enumerate(sums)]
        p.lines += [
            "        cuda.syncthreads()",
            f"        _w = {block // 2}",
            "        while _w > 0:",
            "            if _t < _w:",
        ]
        p.lines += [f"                _sum[{slot}, _t] += _sum[{slot}, _t + _w]" for slot in range(len(sums))]
        p.lines += ["            cuda.syncthreads()", "            _w //= 2", "        if _t == 0:"]
        p.lines += [
            f"            cuda.atomic.add({target}, _sum[{slot}, 0])" for slot, (_, target) in enumerate(sums)
        ]
    return "\n".join(p.lines) + "\n", bool(p.split)


def _element(s: Store) -> tuple[str, tuple] | None:
    """The array and constant index of a store (``("_pvx", (1,))``), as ``CudaPrinter.block_sums`` keys
    them; None if its index is not constant."""
    if not all(isinstance(x, Lit) for x in s.index):
        return None
    return s.array, tuple(x.value for x in s.index)  # type: ignore[attr-defined]


def _block_sums(body: list[Stmt], atomic: set[str], kinds: dict[str, Kind]) -> dict[tuple[str, tuple], str]:
    """Accumulations at constant indices into float64 arrays the kernel never reads (the adjoint of a time
    step or a parameter every thread reads): each element -> the name of the thread's sum of its adds.

    Added at once they would queue on one address, one atomic per warp; summed per block first, there is
    one per block (what ``cuda_kernel_source`` does for active scalars' adjoints too)."""
    read = {a.removeprefix(PRIVATE) for s in walk(body) for x in exprs_of(s) for a in arrays_in(x)}
    sums: dict[tuple[str, tuple], str] = {}
    for s in walk(body):
        array = s.array.removeprefix(PRIVATE) if isinstance(s, Store) else ""
        if (
            isinstance(s, Store)
            and s.accumulate
            and array in atomic
            and array not in read
            and _element(s) is not None
            and element_type(kinds[base_name(array)]) == "f8"  # type: ignore[arg-type]
        ):
            sums.setdefault(_element(s), f"_bs{len(sums)}")  # type: ignore[arg-type]
    return sums


def launch_offsets(body: list[Stmt], launch_index: str) -> dict[str, int]:
    """Names assigned exactly once, to the launch index plus an integer constant (and the index itself)."""
    counts: dict[str, int] = {}
    for s in walk(body):
        if isinstance(s, (Assign, Pop)):
            counts[s.target] = counts.get(s.target, 0) + 1
        elif isinstance(s, For):
            counts[s.var] = counts.get(s.var, 0) + 2
    offsets = {launch_index: 0}
    for s in walk(body):
        if not (isinstance(s, Assign) and counts[s.target] == 1 and isinstance(s.value, Call)):
            continue
        op, args = s.value.op, s.value.args
        if op in ("add", "sub") and len(args) == 2:
            a, b = args
            if op == "add" and isinstance(a, Lit):
                a, b = b, a
            if a == Name(launch_index) and isinstance(b, Lit) and type(b.value) is int:
                offsets[s.target] = b.value if op == "add" else -b.value
    return offsets


def _tile_slot(s: Store, offsets: dict[str, int], tiles: dict[str, int]) -> tuple[str, int]:
    """(array, tile slot relative to the thread's) of ``x[i + c] += v`` into a tiled array."""
    array = s.array.removeprefix(PRIVATE)
    (index,) = s.index
    assert isinstance(index, Name)
    return array, offsets[index.id] + tiles[array]


def _thread_plus(d: int) -> str:
    return "cuda.threadIdx.x" + (f" + {d}" if d > 0 else f" - {-d}" if d < 0 else "")


def _staged_slots(body: list[Stmt], offsets: dict[str, int], tiles: dict[str, int]) -> dict[str, list[int]]:
    """Each tiled array -> the tile slots its adds go to (``x[i + c] += v``: slot ``c + halo``), in order."""
    slots: dict[str, set[int]] = {array: set() for array in tiles}
    for x in walk(body):
        if isinstance(x, Store) and x.array.removeprefix(PRIVATE) in tiles:
            array, slot = _tile_slot(x, offsets, tiles)
            slots[array].add(slot)
    return {array: sorted(s) for array, s in slots.items()}


def _tile_sums(tiles: dict[str, int], staged: dict[str, list[int]], kinds: dict[str, Kind]) -> list[str]:
    """The thread's sums per tile slot (``_tc<array>_<slot>``), zero to start with."""
    return [
        f"    _tc{array}_{slot} = {_ZERO[element_type(kinds[base_name(array)])]}"
        for array in tiles
        for slot in staged[array]
    ]


def _tile_sum(array: str, slots: list[int], zero: str, shift: int) -> str:
    """The block's adds to position ``cuda.threadIdx.x + shift`` of ``array``'s span (``shift``: 0 or the
    block's size): row ``r`` of the tile holds slot ``slots[r]``, so the position's sum is over rows at
    ``position - slot``, where that is one of the block's threads."""
    terms = []
    for r, slot in enumerate(slots):
        row = f"_tile{array}[{r}, {_thread_plus(shift - slot)}]"
        if shift == 0:
            terms.append(row if slot == 0 else f"({row} if cuda.threadIdx.x >= {slot} else {zero})")
        elif slot > 0:
            terms.append(f"({row} if cuda.threadIdx.x < {slot} else {zero})")
    return " + ".join(terms)


def _tile_epilogue(
    tiles: dict[str, int], staged: dict[str, list[int]], kinds: dict[str, Kind], block: int
) -> list[str]:
    """The block's adds to each tiled array, summed in shared memory and added to global memory once.

    Each thread writes its sum per slot (a row of the tile per slot, no atomics, no clearing); after one
    barrier, position ``q`` of the block's span (``block + 2 * halo`` elements from ``halo`` before its first
    index) is the sum over slots of row ``slot`` at ``q - slot``. Positions ``[2 * halo, block)`` are this
    block's alone: plain adds. The rest overlap the neighbouring blocks' spans: atomic adds. (The fastest of
    three ways measured: docs/benchmarks.md, "In the code".)
    """
    if not tiles:
        return []
    lines = []
    for array, slots in staged.items():
        kind = kinds[base_name(array)]
        assert isinstance(kind, ArrayKind)
        lines.append(f"    _tile{array} = cuda.shared.array(({len(slots)}, {block}), np.{kind.dtype.name})")
        lines += [
            f"    _tile{array}[{r}, cuda.threadIdx.x] = _tc{array}_{slot}" for r, slot in enumerate(slots)
        ]
    lines.append("    cuda.syncthreads()")
    for array, halo in tiles.items():
        slots, zero = staged[array], _ZERO[element_type(kinds[base_name(array)])]
        v, g = f"_v{array}", f"_g{array}"
        lines += [
            f"    {g} = cuda.blockIdx.x * {block} - {halo} + cuda.threadIdx.x",
            f"    {v} = {_tile_sum(array, slots, zero, 0)}",
            f"    if {v} != 0 and {g} >= 0 and {g} < {array}.shape[0]:",
            f"        if cuda.threadIdx.x >= {2 * halo}:",
            f"            {array}[{g}] += {v}",
            "        else:",
            f"            cuda.atomic.add({array}, {g}, {v})",
        ]
        if max(slots) > 0:  # positions past the block's indices, which only slots above 0 reach
            lines += [
                f"    if cuda.threadIdx.x < {2 * halo}:",
                f"        {v} = {_tile_sum(array, slots, zero, block)}",
                f"        if {v} != 0 and {g} + {block} < {array}.shape[0]:",
                f"            cuda.atomic.add({array}, {g} + {block}, {v})",
            ]
    return lines


def _tiled(
    body: list[Stmt], atomic: set[str], offsets: dict[str, int], kinds: dict[str, Kind]
) -> dict[str, int]:
    """Arrays whose every update is ``x[i + c] += v`` (constant ``c``) and that the kernel never reads.

    A block of threads then sums them in a shared-memory tile (:func:`_tile_epilogue`) and adds the tile to
    global memory once: plain adds where only this block writes, atomics on the halo it shares
    with its neighbours. The adjoint of a stencil is the typical case (``dx[i-1] += ...; dx[i+1] += ...``).
    """
    halo: dict[str, int] = {}
    for s in walk(body):
        if isinstance(s, Store) and s.array.removeprefix(PRIVATE) in atomic:
            array = s.array.removeprefix(PRIVATE)
            index = s.index[0] if len(s.index) == 1 else None
            if not s.accumulate or not isinstance(index, Name) or index.id not in offsets:
                halo[array] = -1
            elif halo.get(array, 0) >= 0:
                halo[array] = max(halo.get(array, 0), abs(offsets[index.id]))
    read = {a.removeprefix(PRIVATE) for s in walk(body) for x in exprs_of(s) for a in arrays_in(x)}
    return {
        a: h
        for a, h in halo.items()
        if 0 <= h <= 16 and a not in read and isinstance(kinds.get(base_name(a)), ArrayKind)
    }


CUDA_MODULE_HEADER = """\
# Generated by pad from {origin}. Do not edit: regenerated when the kernel changes.
import math

import numpy as np

from pad.kernel.cuda_runtime import (  # first: the numpy shim
    WARP_SHUFFLES,
    _ceil,
    _digamma,
    _floor,
    _logaddexp,
    _logaddexp2,
    _rint,
    _sign,
    _sinc,
    _trunc,
    _tripcount,
    group_sum,
    group_sync,
    uniform,
    warp_any,
    warp_sum,{imports}
)
from numba import cuda

"""
