"""Inspectors: which elements of its shared-index arrays each launch index touches, from the kernel's IR.

A launch whose iterations accumulate into an array at indices they may share (``a[idx[i]] += v``, and the
adjoint of every read ``x[idx[i]]``) is race-free only if no two iterations running at once touch one element.
When those indices come from integer data alone (index arrays, integer scalars, the launch index, shapes),
an inspector, generated beside the launcher from the same IR, runs the slice of the kernel that computes them
and records each launch index's elements: whether any element is touched by two launch indices (if not, the
accumulations can go to the array itself), and a colouring of the launch indices in which no two of one
colour touch one element. What the launcher does with that (pad/parallel) is not decided here.

The slice keeps exactly the statements that compute the touched indices. A branch whose condition depends
on floating-point data runs both arms (the touches of both are recorded: a superset, which only adds
conflicts); a loop whose bounds do, its body once. An index that depends on floating-point data cannot be
inspected: that array keeps per-thread buffers. So does an array touched at an index that does not vary
with the launch index (every iteration touches it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pad.kernel.analysis import varying
from pad.kernel.emit import Printer
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Elem,
    Expr,
    Fill,
    For,
    If,
    Kind,
    LocalArray,
    Name,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    exprs_of,
    names_in,
    stored_arrays,
    walk,
)

MAX_DIMS = 8  # array ranks an error report holds (numba arrays have at most 32; kernels here far fewer)
_SOURCE = 2 + MAX_DIMS  # where, in an error report, the index array's position starts


HEADER = """\
import math

import numpy as np
from numba import njit

from pad.kernel.runtime import Straight, colour, grown

"""


@dataclass
class Touch(Stmt):
    """Record that the launch index touches ``array[index]`` (an inspector-only statement)."""

    array: str
    index: tuple[Expr, ...]
    check: int  # its entry in ``Inspector.checks``


@dataclass
class Read(Stmt):
    """Check that ``array[index]`` (an index array's element that the slice reads next) is in range."""

    array: str
    index: tuple[Expr, ...]
    check: int


@dataclass(frozen=True)
class Check:
    """What an error report of one bounds check means: the array indexed, and for a touch, the index
    array entry its index came from (if one did)."""

    array: str
    touch: bool
    source: str | None = None  # the index array whose entry made the index
    source_index: tuple[Expr, ...] = ()
    source_value: Expr | None = None  # that entry (the variable holding it, or the read itself)


@dataclass
class Inspector:
    """A compiled inspector and how to call it.

    ``function(_pass, _order, _bounds, *args, _base, _colourable, _count, _last, _mask, _colour, _err)`` runs
    the slice for the launch indices ``_order[_bounds[b]:_bounds[b + 1]]`` of each block ``b`` (``_order``
    empty: the identity). The touched arrays are numbered and laid end to end from ``_base``. Pass 0
    counts, per element, the launch indices touching it (``_last`` holds the latest). Pass 1 colours each
    block greedily by the elements of the arrays flagged in ``_colourable``: ``_colour[b]`` is the smallest
    colour no element it touches bears in ``_mask`` (a bit per colour), or 64 if none is left. It returns 0,
    or 1 if a bounds check failed (described in ``_err``).
    """

    function: Any
    touched: list[int]  # positions of the arrays whose touches it records, in ``_base`` order
    reads: list[int]  # positions of the index arrays it reads (its result depends on their contents)
    scalars: list[int]  # positions of the integer scalars it reads
    shapes: list[int]  # positions of every array whose shape it uses (touched and read ones included)
    checks: list[Check]
    names: list[str]  # the kernel's parameter names, by position

    def message(self, kernel: str, err: np.ndarray, args: tuple) -> str:
        """The error a failed bounds check reports, from the inspector's ``_err``."""
        check = self.checks[int(err[0]) - 1]
        where = int(err[1])
        array = args[self.names.index(check.array)]
        index = tuple(int(v) for v in err[2 : 2 + array.ndim])
        shape = tuple(array.shape)
        if not check.touch:
            return (
                f"pad.launch({kernel}): launch index {where} reads index array {check.array!r} at {index}, "
                f"out of range for its shape {shape}"
            )
        text = f"index {index} of {check.array!r} (shape {shape}) at launch index {where} is out of range"
        if check.source is not None:
            ndim = len(check.source_index)
            position = tuple(int(v) for v in err[_SOURCE : _SOURCE + ndim])
            value = int(err[_SOURCE + MAX_DIMS])
            text = f"index array {check.source!r} holds {value} at position {position}: {text}"
        return f"pad.launch({kernel}): {text}"


@dataclass
class _Scan:
    """The forward pass: which values are computable from integer data at each statement."""

    touched: set[str]
    sources: set[str]  # index arrays the slice may read: global integer arrays the kernel does not write
    touches: list[tuple[Stmt, str, tuple[Expr, ...], bool]] = field(default_factory=list)
    ok: set[int] = field(default_factory=set)  # id() of assignments computable where they stand
    exact: set[int] = field(default_factory=set)  # id() of branches and loops whose conditions/bounds are
    partial: bool = False  # a while loop touches: nothing can be inspected

    def computable(self, e: Expr, env: set[str]) -> bool:
        return set(names_in(e)) <= env and all(a in self.sources for a in arrays_in(e))

    def block(self, stmts: list[Stmt], env: set[str], record: bool) -> set[str]:
        for s in stmts:
            env = self.stmt(s, env, record)
        return env

    def touch(self, s: Stmt, array: str, index: tuple[Expr, ...], env: set[str], record: bool) -> None:
        if record and array in self.touched:
            self.touches.append((s, array, index, all(self.computable(x, env) for x in index)))

    def stmt(self, s: Stmt, env: set[str], record: bool) -> set[str]:
        for e in exprs_of(s):
            for x in _elems(e):
                self.touch(s, x.array, x.index, env, record)
        if isinstance(s, Store):
            self.touch(s, s.array, s.index, env, record)
            return env
        if isinstance(s, Assign):
            if self.computable(s.value, env):
                if record:
                    self.ok.add(id(s))
                return env | {s.target}
            return env - {s.target}
        if isinstance(s, If):
            if self.computable(s.cond, env):
                if record:
                    self.exact.add(id(s))
                return self.block(s.body, set(env), record) & self.block(s.orelse, set(env), record)
            # both arms run, one after the other: the else arm must not see what the first one changed
            self.block(s.body, set(env), record)
            self.block(s.orelse, env - assigned(s.body), record)
            return env - assigned([s])
        if isinstance(s, For):
            changed = assigned(s.body)
            if (
                self.computable(s.start, env)
                and self.computable(s.stop, env)
                and self.computable(s.step, env)
            ):
                if record:
                    self.exact.add(id(s))
                start = env | {s.var}
            else:
                start = env - {s.var}
            while True:  # what the previous iteration leaves must be computable at the start of the next
                end = self.block(s.body, set(start), False)
                narrowed = start - (changed - end)
                if narrowed == start:
                    break
                start = narrowed
            end = self.block(s.body, set(start), record)
            return (env - changed - {s.var}) | (end & (changed | {s.var}))
        if isinstance(s, While):
            inner = env - assigned([s])
            before = len(self.touches)
            self.block(s.test, set(inner), record)
            self.block(s.body, set(inner), record)
            self.partial = self.partial or len(self.touches) > before
            return inner
        if isinstance(s, (LocalArray, Fill)):
            return env - {s.target if isinstance(s, LocalArray) else s.array}
        return env


def _elems(e: Expr) -> list[Elem]:
    """Every array element an expression reads, nested ones included."""
    if isinstance(e, Elem):
        return [e, *(x for i in e.index for x in _elems(i))]
    return [x for a in getattr(e, "args", ()) for x in _elems(a)]


def build(
    name: str,
    body: list[Stmt],
    launch_index: str,
    params: list[str],
    kinds: dict[str, Kind],
    types: dict[str, str],
    touched: set[str],
) -> tuple[Inspector, str] | None:
    """The inspector ``name`` of the indices at which ``body`` (a primal kernel body) touches arrays
    ``touched`` (those a launcher would privatize), for the arrays whose every touch varies with the launch
    index and is computable from integer data: the ``Inspector`` (its ``function`` still None) and its
    source. None if no array can be inspected.
    """
    written = stored_arrays(body)
    sources = {
        p
        for p in params
        if isinstance(kinds.get(p), ArrayKind)
        and kinds[p].dtype.kind in "iub"  # type: ignore[union-attr]
        and p not in written
        and p not in touched
    }
    scalars = {p for p in params if kinds.get(p) in ("i", "b")}
    arrays = {p for p in params if isinstance(kinds.get(p), ArrayKind)}
    scan = _Scan(touched, sources)
    scan.block(body, {launch_index} | scalars | arrays, True)
    if scan.partial:
        return None
    var = varying(body, launch_index, set())
    bad = {a for _, a, index, ok in scan.touches if not ok or not any(set(names_in(x)) & var for x in index)}
    inspected = touched - bad
    if not inspected:
        return None
    kept = [(s, a, index) for s, a, index, _ in scan.touches if a in inspected]
    needed = {n for _, _, index in kept for x in index for n in names_in(x)}
    while True:  # every computable definition of a needed name, and the bounds and conditions around them
        size = len(needed)
        for s in walk(body):
            if isinstance(s, Assign) and id(s) in scan.ok and s.target in needed:
                needed |= set(names_in(s.value))
            elif isinstance(s, (For, If)) and id(s) in scan.exact and _holds(s, needed, kept, scan):
                needed |= {n for e in exprs_of(s) for n in names_in(e)}
        if len(needed) == size:
            break
    checks: list[Check] = []
    defs = {s.target: s.value for s in walk(body) if isinstance(s, Assign) and id(s) in scan.ok}
    counts: dict[str, int] = {}
    for s in walk(body):
        if isinstance(s, (Assign, For)):
            target = s.target if isinstance(s, Assign) else s.var
            counts[target] = counts.get(target, 0) + 1
    unique = {n: v for n, v in defs.items() if counts.get(n) == 1}
    touches_at: dict[int, list[tuple[str, tuple[Expr, ...]]]] = {}
    for s, a, index in kept:
        touches_at.setdefault(id(s), []).append((a, index))

    def sliced(stmts: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, Assign) and id(s) in scan.ok and s.target in needed:
                for x in reversed(_elems(s.value)):  # inner reads first
                    checks.append(Check(x.array, False))
                    out.append(Read(x.array, x.index, len(checks), line=s.line))
                out.append(s)
            for array, index in touches_at.get(id(s), []):
                for x in reversed([e for i in index for e in _elems(i)]):  # index arrays read in the index
                    checks.append(Check(x.array, False))
                    out.append(Read(x.array, x.index, len(checks), line=s.line))
                checks.append(Check(array, True, *_origin(index, unique, sources)))
                out.append(Touch(array, index, len(checks), line=s.line))
            if isinstance(s, If) and _holds(s, needed, kept, scan):
                body_, orelse = sliced(s.body), sliced(s.orelse)
                out += [If(s.cond, body_, orelse, line=s.line)] if id(s) in scan.exact else body_ + orelse
            elif isinstance(s, For) and _holds(s, needed, kept, scan):
                inner = sliced(s.body)
                out += (
                    [For(s.var, s.start, s.stop, s.step, inner, line=s.line)]
                    if id(s) in scan.exact
                    else inner
                )
        return out

    stmts = sliced(body)
    order = [p for p in params if p in inspected]
    used = {n for s in walk(stmts) for e in [*exprs_of(s), *_touch_exprs(s)] for n in names_in(e)}
    reads = {s.array for s in walk(stmts) if isinstance(s, Read)}
    made = Inspector(
        None,
        [params.index(p) for p in order],
        [params.index(p) for p in params if p in reads],
        [params.index(p) for p in params if p in scalars and p in used],
        [params.index(p) for p in params if p in arrays and (p in used or p in reads or p in inspected)],
        checks,
        list(params),
    )
    return made, _source(name, launch_index, params, stmts, checks, order, types, kinds)


def _touch_exprs(s: Stmt) -> list[Expr]:
    return list(s.index) if isinstance(s, (Touch, Read)) else []


def _holds(s: Stmt, needed: set[str], kept: list[tuple[Stmt, str, tuple[Expr, ...]]], scan: _Scan) -> bool:
    """Whether compound statement ``s`` contains a touch kept or a computable definition of a needed name."""
    inside = {id(x) for x in walk([s])}
    if any(id(t) in inside for t, _, _ in kept):
        return True
    return any(
        (isinstance(x, Assign) and id(x) in scan.ok and x.target in needed)
        or (isinstance(x, For) and x.var in needed)
        for x in walk([s])
    )


def _origin(
    index: tuple[Expr, ...], defs: dict[str, Expr], sources: set[str]
) -> tuple[str | None, tuple[Expr, ...], Expr | None]:
    """The index array entry an index was computed from (through single assignments), if any: the array, the
    entry's index, and the expression holding its value."""
    todo: list[tuple[Expr, Expr]] = [(x, x) for x in index]
    seen: set[str] = set()
    while todo:
        e, holder = todo.pop(0)
        if isinstance(e, Elem) and e.array in sources:
            return e.array, e.index, holder
        if isinstance(e, Name) and e.id in defs and e.id not in seen:
            seen.add(e.id)
            todo.append((defs[e.id], e))
        else:
            todo += [(a, a) for a in getattr(e, "args", ())]
    return None, (), None


@dataclass
class InspectorPrinter(Printer):
    """Prints a slice: touches record elements, reads of index arrays are bounds-checked first."""

    base: dict[str, int] = field(default_factory=dict)  # touched array -> its number in ``_base``
    launch_index: str = "i"

    def emit(self, stmts: list[Stmt], indent: int) -> None:
        pad = "    " * indent
        for s in stmts:
            if isinstance(s, Touch):
                self.lines += [pad + line for line in self.touch(s)]
            elif isinstance(s, Read):
                self.lines += [pad + line for line in self.read(s)]
            else:
                super().emit([s], indent)

    def _positions(self, s: Touch | Read) -> tuple[list[str], str]:
        """Lines computing the index into ``_x0, _x1, ...`` (negatives wrapped, as numba does) and the test
        that it is in range."""
        lines, tests = [], []
        for d, x in enumerate(s.index):
            lines.append(f"_x{d} = {self.expr(x, 'i')}")
            lines.append(f"if _x{d} < 0:")
            lines.append(f"    _x{d} += {s.array}.shape[{d}]")
            tests.append(f"0 <= _x{d} < {s.array}.shape[{d}]")
        return lines, " and ".join(tests)

    def _report(self, s: Touch | Read, source: list[str]) -> list[str]:
        raw = [f"    _err[{2 + d}] = {self.expr(x, 'i')}" for d, x in enumerate(s.index)]
        return [
            f"    _err[0] = {s.check}",
            f"    _err[1] = {self.launch_index}",
            *raw,
            *source,
            "    return 1",
        ]

    def read(self, s: Read) -> list[str]:
        lines, test = self._positions(s)
        return [*lines, f"if not ({test}):", *self._report(s, [])]

    def touch(self, s: Touch) -> list[str]:
        check = self.checks[s.check - 1]
        source = []
        if check.source is not None:
            source = [
                f"    _err[{_SOURCE + d}] = {self.expr(x, 'i')}" for d, x in enumerate(check.source_index)
            ]
            assert check.source_value is not None
            source.append(f"    _err[{_SOURCE + MAX_DIMS}] = {self.expr(check.source_value, 'i')}")
        lines, test = self._positions(s)
        flat = "_x0"
        for d in range(1, len(s.index)):
            flat = f"({flat}) * {s.array}.shape[{d}] + _x{d}"
        a = self.base[s.array]
        return [
            *lines,
            f"if not ({test}):",
            *self._report(s, source),
            f"_key = _base[{a}] + {flat}",
            "if _pass == 0:",
            f"    if _last[_key] != {self.launch_index}:",
            f"        _last[_key] = {self.launch_index}",
            "        _count[_key] += 1",
            f"elif _colourable[{a}]:",
            "    if _nk == _keys.shape[0]:",
            "        _keys = grown(_keys)",
            "    _keys[_nk] = _key",
            "    _nk += 1",
        ]

    checks: list[Check] = field(default_factory=list)


def _source(
    name: str,
    launch_index: str,
    params: list[str],
    stmts: list[Stmt],
    checks: list[Check],
    inspected: list[str],
    types: dict[str, str],
    kinds: dict[str, Kind],
) -> str:
    """The Python source of the inspector ``name`` running ``stmts`` (a slice from ``build``)."""
    p = InspectorPrinter(
        types, kinds, base={a: k for k, a in enumerate(inspected)}, launch_index=launch_index
    )
    p.checks = checks
    args = ", ".join(
        [
            "_pass",
            "_order",
            "_bounds",
            *params,
            "_base",
            "_colourable",
            "_count",
            "_last",
            "_mask",
            "_colour",
            "_err",
        ]
    )
    p.lines += [
        HEADER,
        "@njit(nogil=True, cache=True, error_model='numpy', pipeline_class=Straight)",
        f"def {name}({args}):",
        "    _keys = np.empty(64, np.int64)",
        "    _ident = _order.shape[0] == 0",
        "    for _b in range(_bounds.shape[0] - 1):",
        "        _nk = 0",
        "        for _k in range(_bounds[_b], _bounds[_b + 1]):",
        f"            {launch_index} = _k if _ident else _order[_k]",
    ]
    p.emit(stmts, 3)
    p.lines += [
        "        if _pass == 1:",
        "            _colour[_b] = colour(_keys, _nk, _mask)",
        "    return 0",
    ]
    return "\n".join(p.lines) + "\n"
