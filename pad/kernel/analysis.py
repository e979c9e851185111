"""Analyses on the IR: scalar types, activity, index ownership, and liveness (with dead-code removal)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Break,
    Call,
    Elem,
    Expr,
    Fill,
    For,
    If,
    KernelSyntaxError,
    Kind,
    Lit,
    LocalArray,
    Name,
    Pop,
    Push,
    Return,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    exprs_of,
    loaded_arrays,
    map_blocks,
    names_in,
    scalar_type,
    stored_arrays,
    walk,
)
from pad.kernel.names import PRIVATE
from pad.kernel.rules import BITWISE, RULES

FLOATS = ("f4", "f8")


# ---------------------------------------------------------------------------------------------- types
WEAK = "w"  # a Python float (a literal, or computed from literals only): weak, as NumPy 2 treats it


def promote(*types: str) -> str:
    """NumPy/numba promotion of scalar types: any f8 -> f8; f4 with ints -> f8; ints and bools -> int.

    A Python float is weak (NumPy 2): it takes the other floats' type, so ``max(x, 0.0)`` on float32 ``x``
    stays float32; with ints only it is f8, and with nothing else it stays weak.
    """
    strong = [t for t in types if t != WEAK]
    if len(strong) < len(types):
        if not strong:
            return WEAK
        ty = promote(*strong)
        return ty if ty in FLOATS else "f8"
    if "f8" in types:
        return "f8"
    if "f4" in types:
        return "f4" if all(t == "f4" for t in types) else "f8"
    return "i" if any(t == "i" for t in types) or len(types) > 1 else types[0]


def join(a: str | None, b: str) -> str:
    if a is None or a == b:
        return b
    return promote(a, b)


def infer_types(body: list[Stmt], kinds: dict[str, Kind]) -> tuple[list[Stmt], dict[str, str]]:
    """Scalar type ("b", "i", "f4", "f8") of every variable, iterated to a fixed point over loops; and the
    body with its weak floats (:data:`WEAK`) cast to float32 where they meet float32 values (numba would
    compute in float64 there). Variables that stay weak are f8."""
    types: dict[str, str] = {n: k for n, k in kinds.items() if isinstance(k, str)}
    changed = True
    while changed:
        changed = False
        for s in walk(body):
            target, ty = None, None
            if isinstance(s, Assign):
                target, ty = s.target, expr_type(s.value, types, kinds)
            elif isinstance(s, For):
                target, ty = s.var, "i"
            if target is not None and ty is not None:
                new = join(types.get(target), ty)
                if new != types.get(target):
                    types[target] = new
                    changed = True
    body = _cast_weak(body, types, kinds)
    return body, {n: "f8" if t == WEAK else t for n, t in types.items()}


def _cast_weak(stmts: list[Stmt], types: dict[str, str], kinds: dict[str, Kind]) -> list[Stmt]:
    """Weak operands cast to float32 where the other operands are float32 (comparisons too), or where all
    operands are weak and the result goes to a float32 variable."""

    def cast(e: Expr) -> Expr:
        if expr_type(e, types, kinds) != WEAK:
            return e
        return Lit(np.float32(e.value)) if isinstance(e, Lit) else Call("f4", (e,))

    def value(e: Expr, target: str) -> Expr:
        if not isinstance(e, Call):
            return cast(e) if types.get(target) == "f4" else e
        first = 1 if e.op == "select" else 0  # the condition is no operand
        operands = [expr_type(a, types, kinds) for a in e.args[first:]]
        strong = [t for t in operands if t != WEAK]
        if len(strong) == len(operands) or None in strong:
            return e
        if strong:
            to_f4 = promote(*strong) == "f4"  # type: ignore[arg-type]
        else:
            to_f4 = types.get(target) == "f4" and RULES[e.op].result in ("promote", "float", "same")
        return Call(e.op, e.args[:first] + tuple(cast(a) for a in e.args[first:])) if to_f4 else e

    return [
        Assign(s.target, value(s.value, s.target), line=s.line)
        if isinstance(s, Assign)
        else map_blocks(s, lambda b: _cast_weak(b, types, kinds))
        for s in stmts
    ]


def expr_type(e: Expr, types: dict[str, str], kinds: dict[str, Kind]) -> str | None:
    if isinstance(e, Lit):
        if isinstance(e.value, np.float32):
            return "f4"
        if isinstance(e.value, np.float64):
            return "f8"
        return "b" if isinstance(e.value, bool) else ("i" if isinstance(e.value, int) else WEAK)
    if isinstance(e, Name):
        return types.get(e.id)
    if isinstance(e, Elem):
        kind = kinds[e.array]
        assert isinstance(kind, ArrayKind)
        return scalar_type(kind.dtype)
    assert isinstance(e, Call)
    rule = RULES[e.op]
    if rule.result in ("bool", "int", "f4", "f8"):
        return {"bool": "b", "int": "i"}.get(rule.result, rule.result)
    args = e.args[1:] if e.op == "select" else e.args
    arg_types = [expr_type(a, types, kinds) for a in args]
    if any(t is None for t in arg_types):
        return None
    known = [t for t in arg_types if t is not None]
    if rule.result == "same":
        return "i" if known[0] == "b" and e.op != "copy" else known[0]
    ty = promote(*known)
    if rule.result == "float" and ty not in (*FLOATS, WEAK):
        return "f8"
    return ty


def check_types(body: list[Stmt], types: dict[str, str], kinds: dict[str, Kind]) -> None:
    """Refuse, naming the line, what numba would reject with a typing error: float indices and range bounds,
    bitwise operators on floats."""

    def fail(s: Stmt, what: str, instead: str) -> KernelSyntaxError:
        return KernelSyntaxError(f"{s.line}: {what}; {instead}")

    def integral(e: Expr) -> bool:
        return expr_type(e, types, kinds) in ("i", "b", None)

    for s in walk(body):
        for e in exprs_of(s):
            for x in _subexprs(e):
                if isinstance(x, Elem) and not all(integral(j) for j in x.index):
                    raise fail(s, f"an index of {x.array!r} is a float", "convert it with int(...)")
                if isinstance(x, Call) and x.op in BITWISE and not all(integral(a) for a in x.args):
                    raise fail(
                        s, "a bitwise operator (& | ^ << >> ~) is applied to a float", "use it on integers"
                    )
        if isinstance(s, Store) and not all(integral(j) for j in s.index):
            raise fail(s, f"an index of {s.array!r} is a float", "convert it with int(...)")
        if isinstance(s, For) and not all(integral(b) for b in (s.start, s.stop, s.step)):
            raise fail(s, "a range() bound is a float", "convert it with int(...)")


def _subexprs(e: Expr) -> list[Expr]:
    out = [e]
    for a in e.args if isinstance(e, Call) else e.index if isinstance(e, Elem) else ():
        out += _subexprs(a)
    return out


# Operations whose result a rounding difference in a floating-point argument can change by a whole step: an
# integer made from a float, and what reads the sign of a float (which may be a zero).
EXACT_ARGUMENT_OPS = frozenset(
    {"ifloor", "iceil", "itrunc", "round", "int", "i8", "i4", "signbit", "copysign", "atan2"}
)


def needs_exact_arithmetic(body: list[Stmt], types: dict[str, str], kinds: dict[str, Kind]) -> bool:
    """Whether the kernel makes an integer from a float, or reads a float's sign: an adjoint recomputing its
    values under fast-math flags could then index or choose otherwise than the primal did (``emit``'s
    ``DERIVATIVE_FLAGS``)."""
    calls = (c for s in walk(body) for e in exprs_of(s) for c in _subexprs(e) if isinstance(c, Call))
    return any(
        c.op in EXACT_ARGUMENT_OPS and any(expr_type(a, types, kinds) in (*FLOATS, WEAK) for a in c.args)
        for c in calls
    )


# ---------------------------------------------------------------------------------------------- activity
@dataclass
class Activity:
    """Which scalars and arrays carry derivatives (depend on an active input and are floating point)."""

    scalars: set[str]
    arrays: set[str]

    def expr(self, e: Expr) -> bool:
        if isinstance(e, Name):
            return e.id in self.scalars
        if isinstance(e, Elem):
            return e.array in self.arrays
        if isinstance(e, Call):
            rule = RULES[e.op]
            return rule.partials is not None and any(self.expr(a) for a in e.args)
        return False


def activity(
    body: list[Stmt], types: dict[str, str], active_inputs: set[str], kinds: dict[str, Kind]
) -> Activity:
    """Forward (varied) activity from the active parameters and arrays, to a fixed point."""
    act = Activity(
        {n for n in active_inputs if isinstance(kinds.get(n), str)},
        {n for n in active_inputs if isinstance(kinds.get(n), ArrayKind)},
    )
    changed = True
    while changed:
        changed = False
        for s in walk(body):
            if isinstance(s, Assign) and s.target not in act.scalars and types.get(s.target) in FLOATS:
                if act.expr(s.value):
                    act.scalars.add(s.target)
                    changed = True
            elif isinstance(s, Store) and s.array not in act.arrays:
                kind = kinds[s.array]
                if (
                    isinstance(kind, ArrayKind)
                    and kind.local
                    and kind.dtype.kind == "f"
                    and act.expr(s.value)
                ):
                    act.arrays.add(s.array)
                    changed = True
    return act


def is_local(kinds: dict[str, Kind], array: str) -> bool:
    """Whether ``array`` is a kernel's own local array (``pad.local_array``): memory nothing else shares."""
    kind = kinds.get(array)
    return isinstance(kind, ArrayKind) and kind.local


def useful(
    body: list[Stmt], act: Activity, kinds: dict[str, Kind], ignore: frozenset[str] = frozenset()
) -> Activity:
    """``act`` without the values whose derivatives reach no active global array (backward activity).

    A value that is varied but only feeds stores into inactive arrays (scratch a program passes as
    ``pad.Const``), branch conditions or nothing at all needs no tangent and no adjoint: a loop of such
    work (LULESH's repeated EOS evaluations) then has none in the derivative kernels either. ``ignore``:
    outputs whose derivatives are not wanted, as if inactive (another piece of a split adjoint makes
    theirs: ``fission``).
    """

    scalars: set[str] = set()
    arrays: set[str] = {a for a in act.arrays if not is_local(kinds, a)} - ignore
    changed = True
    while changed:
        changed = False
        for s in walk(body):
            sink = (isinstance(s, (Store, Fill)) and s.array in arrays) or (
                isinstance(s, Assign) and s.target in scalars
            )
            if not sink:
                continue
            value: Expr = s.value  # type: ignore[attr-defined]
            found = (set(names_in(value)) & act.scalars) - scalars
            read = {a for a in arrays_in(value) if a in act.arrays} - arrays
            if found or read:
                scalars |= found
                arrays |= read
                changed = True
    return Activity(act.scalars & scalars, arrays)


# ---------------------------------------------------------------------------------------------- ownership
@dataclass(frozen=True)
class Definitions:
    """What ``owned`` may look through: the values of names assigned exactly once, at the top level of the
    kernel body (outside loops and branches), the scalar parameters the body never assigns, and the loop
    variables whose ranges partition by launch index (``range(g(i), g(i + 1))``, ``g(x) = x * a // b``)."""

    values: dict[str, Expr]
    invariant: frozenset[str]
    partitions: frozenset[str] = frozenset()


NO_DEFINITIONS = Definitions({}, frozenset())


def definitions(body: list[Stmt], launch_index: str, kinds: dict[str, Kind]) -> Definitions:
    counts: dict[str, int] = {}
    for s in walk(body):
        for target in targets(s):
            counts[target] = counts.get(target, 0) + 1
    if launch_index in counts:
        return NO_DEFINITIONS
    values = {s.target: s.value for s in body if isinstance(s, Assign) and counts[s.target] == 1}
    # a copy of a name, assigned once anywhere (an inlined helper's parameter): where it is read, it holds
    # the value of that name, which the copy's single definition cannot have seen change before
    values |= {
        s.target: s.value
        for s in walk(body)
        if isinstance(s, Assign)
        and counts[s.target] == 1
        and isinstance(resolve(s.value, NO_DEFINITIONS), Name)
    }
    invariant = frozenset(n for n, k in kinds.items() if isinstance(k, str) and n not in counts)
    defs = Definitions(values, invariant)
    partitions = frozenset(
        s.var
        for s in walk(body)
        if isinstance(s, For) and counts[s.var] == 1 and _partitions(s, launch_index, defs)
    )
    return Definitions(values, invariant, partitions)


def _partitions(loop: For, launch_index: str, defs: Definitions) -> bool:
    """Whether ``loop`` runs over ``range(g(i), g(i + 1), step)`` with ``g(x) = x * a // b`` (or ``x * a``)
    for loop-invariant ``a`` and ``b`` and a positive step: ``g`` is monotone, so the ranges of different
    launch indices are disjoint (or empty, where ``g`` decreases). LULESH's chunked reductions loop so."""
    step = resolve(loop.step, defs)
    if not (isinstance(step, Lit) and type(step.value) is int and step.value > 0):
        return False
    start = _scaled(loop.start, defs, launch_index)
    stop = _scaled(loop.stop, defs, launch_index)
    if start is None or stop is None or start[1:] != stop[1:]:
        return False
    return start[0] == Name(launch_index) and resolve(stop[0], defs) in (
        Call("add", (Name(launch_index), Lit(1))),
        Call("add", (Lit(1), Name(launch_index))),
    )


def _scaled(e: Expr, defs: Definitions, launch_index: str) -> tuple[Expr, Expr, Expr | None] | None:
    """``e`` as ``x * a // b`` (``b`` None for ``x * a``): (x, a, b), with ``a`` and ``b`` invariant (neither
    the launch index)."""

    def invariant(e: Expr) -> Expr | None:
        inv = _invariant(e, defs)
        return None if inv == Name(launch_index) else inv

    e = resolve(e, defs)
    b: Expr | None = None
    if isinstance(e, Call) and e.op == "floordiv" and len(e.args) == 2:
        b = invariant(e.args[1])
        if b is None:
            return None
        e = resolve(e.args[0], defs)
    if not (isinstance(e, Call) and e.op == "mul" and len(e.args) == 2):
        return None
    for x, a in (e.args, e.args[::-1]):
        inv = invariant(a)
        if inv is not None:
            return resolve(x, defs), inv, b
    return None


def targets(s: Stmt) -> list[str]:
    """The scalars a statement itself assigns (a loop its variable)."""
    if isinstance(s, (Assign, Pop)):
        return [s.target]
    if isinstance(s, For):
        return [s.var]
    return []


def owned(index: tuple[Expr, ...], launch_index: str, defs: Definitions = NO_DEFINITIONS) -> bool:
    """Whether an element at ``index`` belongs to one iteration: the index contains the launch index itself,
    or both ``i // m`` and ``i % m`` for one loop-invariant ``m`` (``i = (i // m) * m + i % m``)."""
    resolved = [resolve(x, defs) for x in index]
    if any(isinstance(x, Name) and (x.id == launch_index or x.id in defs.partitions) for x in resolved):
        return True
    quotients: set[Expr] = set()
    remainders: set[Expr] = set()
    for x in index:
        e = resolve(x, defs)
        if isinstance(e, Call) and e.op in ("floordiv", "mod") and len(e.args) == 2:
            a, m = resolve(e.args[0], defs), _invariant(e.args[1], defs)
            if isinstance(a, Name) and a.id == launch_index and m is not None:
                (quotients if e.op == "floordiv" else remainders).add(m)
    return bool(quotients & remainders)


def resolve(e: Expr, defs: Definitions) -> Expr:
    """``e`` with names of single top-level assignments and copies looked through."""
    for _ in range(len(defs.values) + 1):
        if isinstance(e, Name) and e.id in defs.values:
            e = defs.values[e.id]
        elif isinstance(e, Call) and e.op == "copy" and len(e.args) == 1:
            e = e.args[0]
        else:
            break
    return e


def _invariant(e: Expr, defs: Definitions) -> Expr | None:
    """A canonical form of ``e`` if it is the same in every iteration (an int literal, an unassigned scalar
    parameter, an array's shape), else None."""
    e = resolve(e, defs)
    if isinstance(e, Lit) and type(e.value) is int and e.value != 0:
        return e
    if isinstance(e, Name) and e.id in defs.invariant:
        return e
    if isinstance(e, Call) and e.op == "shape" and isinstance(e.args[0], Name) and isinstance(e.args[1], Lit):
        return e
    return None


def _launch_offsets(body: list[Stmt], launch_index: str) -> Callable[[Expr, int], int | None] | None:
    """How to read an index as ``launch_index + c``: a function of the expression and the top-level statement
    before which it is evaluated, giving ``c`` or None; None where the body assigns the launch index."""
    assigns: dict[str, list[Stmt]] = {}
    for s in walk(body):
        if isinstance(s, (Assign, Pop)):
            assigns.setdefault(s.target, []).append(s)
        elif isinstance(s, For):
            assigns.setdefault(s.var, []).append(s)
    if launch_index in assigns:
        return None
    top = {id(s): k for k, s in enumerate(body)}

    def offset(e: Expr, before: int) -> int | None:
        if isinstance(e, Name):
            if e.id == launch_index:
                return 0
            defs = assigns.get(e.id, [])
            if len(defs) != 1 or not isinstance(defs[0], Assign) or top.get(id(defs[0]), before) >= before:
                return None
            return offset(defs[0].value, top[id(defs[0])])
        if isinstance(e, Call) and e.op == "copy" and len(e.args) == 1:
            return offset(e.args[0], before)
        if isinstance(e, Call) and e.op in ("add", "sub") and len(e.args) == 2:
            a, b = e.args
            if isinstance(b, Lit) and type(b.value) is int:
                base = offset(a, before)
                return None if base is None else base + (b.value if e.op == "add" else -b.value)
            if e.op == "add" and isinstance(a, Lit) and type(a.value) is int:
                base = offset(b, before)
                return None if base is None else base + a.value
        return None

    return offset


def _unread_globals(body: list[Stmt], kinds: dict[str, Kind]) -> set[str]:
    """The global arrays the kernel stores into and never reads (``a[j] += v`` reads ``a``)."""
    read = loaded_arrays(body) | {s.array for s in walk(body) if isinstance(s, Store) and s.accumulate}
    return {
        a
        for a in stored_arrays(body) - read
        if isinstance(kinds.get(a), ArrayKind) and not kinds[a].local  # type: ignore[union-attr]
    }


def overwritten_arrays(body: list[Stmt], launch_index: str, kinds: dict[str, Kind]) -> dict[str, int]:
    """1-D global arrays the kernel never reads and that every iteration ``i`` stores to exactly once, at
    ``i + c``, whichever way its branches go.

    Maps each to its constant offset ``c``: a launch over ``range(n)`` overwrites ``a[c : c + n]`` whatever
    the array held (``a[j] += v`` reads ``a``). Each element then has one store, so its adjoint reads the
    element's seed once: a CPU adjoint clears the seeds after its loop instead of one by one.
    """
    offset = _launch_offsets(body, launch_index)
    if offset is None:
        return {}
    top = {id(s): k for k, s in enumerate(body)}

    # Along each path (``return`` is a flag by now: control flow is normalized): the arrays stored once so
    # far, with their offsets; ``spoiled``: those stored twice, in a loop, at an index not ``i + c``, or on
    # some paths only.
    spoiled: set[str] = set()

    def follow(block: list[Stmt], once: dict[str, int], at: int | None) -> dict[str, int]:
        for s in block:
            k = top[id(s)] if at is None else at
            if isinstance(s, Store) and not s.accumulate and len(s.index) == 1:
                c = offset(s.index[0], k)
                if s.array in once or c is None:
                    spoiled.add(s.array)
                once = {**once, s.array: c} if c is not None else once
            elif isinstance(s, If):
                a, b = follow(s.body, once, k), follow(s.orelse, once, k)
                spoiled.update(a.keys() ^ b.keys(), (x for x in a.keys() & b.keys() if a[x] != b[x]))
                once = {x: c for x, c in a.items() if b.get(x) == c}
            else:
                spoiled.update(x.array for x in walk([s]) if isinstance(x, (Store, Fill)))
        return once

    stored = follow(body, {}, None)
    unread = _unread_globals(body, kinds)
    return {
        a: c
        for a, c in stored.items()
        if a in unread and a not in spoiled and kinds[a].ndim == 1  # type: ignore[union-attr]
    }


@dataclass(frozen=True)
class Cover:
    """What every launch over ``range(n)`` stores into an array, whichever way its data-dependent branches
    go: the box of elements whose index along ``axis`` is ``offset + i`` for each launch index ``i`` and
    along every other axis ``d`` runs over ``range(extents[d])`` (``extents[axis]`` is unused), when every
    scalar parameter named in ``given`` has the truth value given (LULESH's ``combined``)."""

    axis: int
    offset: int
    extents: tuple[int, ...]
    given: tuple[tuple[Any, bool], ...] = ()  # (a parameter's name, or its position in a Variant's, value)

    def whole(self, shape: tuple[int, ...], n: int, scalars: Any) -> bool:
        """Whether the box is all of an array of ``shape`` in a launch of ``n`` whose scalars are
        ``scalars[p]`` for each ``p`` of ``given``."""
        return (
            self.offset == 0
            and len(shape) == len(self.extents)
            and shape[self.axis] == n
            and all(shape[d] == e for d, e in enumerate(self.extents) if d != self.axis)
            and all(bool(scalars[p]) is v for p, v in self.given)
        )


COVER_POINTS = 4096  # elements per launch index beyond which ``covered_arrays`` gives up on an array


def covered_arrays(
    body: list[Stmt], launch_index: str, kinds: dict[str, Kind], defs: Definitions
) -> dict[str, Cover]:
    """The global arrays the kernel never reads (``a[j] += v`` reads ``a``) and stores into over a whole box
    of elements on every path (``Cover``): ``fs[d, k, i]`` for ``d`` in 0, 1, 2 and ``k`` in ``range(8)``.

    Such an array's adjoint clears the seed of every element of the box and adds to none: where the box is
    the whole array, its shadow is zero once the adjoint has run. Stores count where they run on every path:
    in literal ``range`` loops (a loop that may end early is a ``while`` by now), in both arms of a branch, or
    in one arm of a branch on a scalar parameter the body never assigns (``given``); their indices are
    literals, such loops' variables and ``launch_index + c``.
    """
    offset = _launch_offsets(body, launch_index)
    if offset is None:
        return {}
    top = {id(s): k for k, s in enumerate(body)}
    Stored = dict[str, dict[tuple[tuple[int | None, ...], int], frozenset[tuple[str, bool]]]]

    def point(s: Store, ranges: dict[str, range], at: int) -> list[tuple[tuple[int | None, ...], int]] | None:
        """Each element ``s`` stores into per launch index (the launch axis as None), with its offset."""
        axes = [k for k, e in enumerate(s.index) if offset(e, at) is not None]
        c = offset(s.index[axes[0]], at) if len(axes) == 1 else None
        if c is None:
            return None
        names = sorted({e.id for e in s.index if isinstance(e, Name) and e.id in ranges})
        out = []
        for values in itertools.product(*(ranges[v] for v in names)):
            bound = dict(zip(names, values, strict=True))
            index: list[int | None] = []
            for k, e in enumerate(s.index):
                if k == axes[0]:
                    index.append(None)
                elif isinstance(e, Lit) and type(e.value) is int and e.value >= 0:
                    index.append(e.value)
                elif isinstance(e, Name) and e.id in bound:
                    index.append(bound[e.id])
                else:
                    return None
            out.append((tuple(index), c))
        return out

    def join(a: Stored, b: Stored, arm_a: frozenset, arm_b: frozenset) -> Stored:
        """What is stored after a branch whose arms stored ``a`` and ``b``; ``arm_a``/``arm_b``: what makes
        each arm run (a parameter's truth value), or empty where the data decide."""
        out: Stored = {}
        for array in a.keys() | b.keys():
            pa, pb = a.get(array, {}), b.get(array, {})
            merged = {x: pa[x] | pb[x] for x in pa.keys() & pb.keys()}
            if arm_a:
                merged |= {x: g | arm_a for x, g in pa.items() if x not in pb}
                merged |= {x: g | arm_b for x, g in pb.items() if x not in pa}
            if merged:
                out[array] = merged
        return out

    def follow(block: list[Stmt], stored: Stored, ranges: dict[str, range], at: int | None) -> Stored:
        for s in block:
            k = top[id(s)] if at is None else at
            if isinstance(s, Store) and not s.accumulate:
                points = point(s, ranges, k)
                if points is not None and len(points) <= COVER_POINTS:
                    stored = {
                        **stored,
                        s.array: {**stored.get(s.array, {}), **dict.fromkeys(points, frozenset())},
                    }
            elif isinstance(s, If):
                arm: frozenset[tuple[str, bool]] = frozenset()
                if isinstance(s.cond, Name) and s.cond.id in defs.invariant:
                    arm = frozenset({(s.cond.id, True)})
                other = frozenset((p, not v) for p, v in arm)
                inner = join(follow(s.body, {}, ranges, k), follow(s.orelse, {}, ranges, k), arm, other)
                stored = {**stored, **{a: {**known, **stored.get(a, {})} for a, known in inner.items()}}
            elif isinstance(s, For):
                bounds = [
                    e.value for e in (s.start, s.stop, s.step) if isinstance(e, Lit) and type(e.value) is int
                ]
                trips = range(*bounds) if len(bounds) == 3 else range(0)
                if len(trips) and s.var not in assigned(s.body):
                    stored = follow(s.body, stored, {**ranges, s.var: trips}, k)
        return stored

    unread = _unread_globals(body, kinds)
    out: dict[str, Cover] = {}
    for array, known in sorted(follow(body, {}, {}, None).items()):
        if array not in unread:
            continue
        given = frozenset().union(*known.values())
        offsets = {c for _, c in known}
        axes = {index.index(None) for index, _ in known}
        if len(offsets) != 1 or len(axes) != 1 or len({p for p, _ in given}) != len(given):
            continue
        axis = axes.pop()
        indices = {index for index, _ in known}
        extents = tuple(
            0 if d == axis else 1 + max(index[d] or 0 for index in indices)
            for d in range(len(next(iter(indices))))
        )
        box = itertools.product(*(range(e) if d != axis else (None,) for d, e in enumerate(extents)))
        if indices == set(box):
            out[array] = Cover(axis, offsets.pop(), extents, tuple(sorted(given)))
    return out


def reduced_arrays(
    body: list[Stmt],
    launch_index: str,
    kinds: dict[str, Kind],
    defs: Definitions = NO_DEFINITIONS,
) -> set[str]:
    """Global arrays updated by ``a[j] += v`` at indices iterations may share; these get privatized.

    Such an array may not also be read or plainly written in the same kernel: the result would depend on
    the order of iterations.
    """
    shared: dict[str, Store] = {}
    for s in walk(body):
        if isinstance(s, Store) and s.accumulate and not owned(s.index, launch_index, defs):
            kind = kinds[s.array]
            if isinstance(kind, ArrayKind) and not kind.local:
                shared.setdefault(s.array, s)
    for s in walk(body):
        conflict = None
        if isinstance(s, Store) and not s.accumulate and s.array in shared:
            conflict = "written"
        elif any(isinstance(e, Elem) and e.array in shared for e in exprs_of(s)):
            conflict = "read"
        if conflict:
            name = next(iter(a for a in shared if a in _arrays_touched(s)))
            raise KernelSyntaxError(
                f"{shared[name].line}: {name!r} is reduced into with `{name}[j] += ...` at an index other "
                f"iterations may share, and also {conflict} at {s.line}; iterations run in any order, so "
                "this is a race. Reduce into a separate array, or index the other accesses by the launch index."
            )
    return set(shared)


def _arrays_touched(s: Stmt) -> set[str]:
    out = {e.array for e in exprs_of(s) if isinstance(e, Elem)}
    if isinstance(s, Store):
        out.add(s.array)
    return out


def varying(body: list[Stmt], launch_index: str, written: set[str]) -> set[str]:
    """Variables whose values may differ between the threads of one launch (the rest are uniform).

    A value varies if it depends on the launch index, on a popped value, or on an element of an array the
    kernel writes (``written``); a loop variable varies if the loop's bounds do. Dependence through control
    flow is ignored on purpose: GPU code uses this to *try* warp-aggregated atomics for accumulations at
    uniform indices, and checks at run time that the warp agrees on the index.
    """
    var = {launch_index}

    def varies(e: Expr) -> bool:
        return any(n in var for n in names_in(e)) or any(a in written for a in arrays_in(e))

    size = -1
    while size != len(var):
        size = len(var)
        for s in walk(body):
            if isinstance(s, Pop) or (isinstance(s, Assign) and varies(s.value)):
                var.add(s.target)
            elif isinstance(s, For) and any(varies(e) for e in (s.start, s.stop, s.step)):
                var.add(s.var)
    return var


# ---------------------------------------------------------------------------------------------- liveness
def liveness(
    stmts: list[Stmt], live_out: set[str], prune: bool, exits: dict[int, set[str]] | None = None
) -> tuple[list[Stmt], set[str]]:
    """Backward liveness over structured code. Returns (statements, variables live on entry).

    With ``prune``, assignments to dead variables and statements left empty are removed (stores, pushes,
    pops and fills have effects and stay). Without it, nothing is removed and the result is the set of
    upward-exposed uses. ``exits``, if given, receives the variables live where each ``for`` loop ends.
    """
    live = set(live_out)
    out: list[Stmt] = []
    for s in reversed(stmts):
        if isinstance(s, Assign):
            if prune and s.target not in live:
                continue
            live.discard(s.target)
            live.update(names_in(s.value))
            out.append(s)
        elif isinstance(s, Pop):
            live.discard(s.target)
            out.append(s)
        elif isinstance(s, (Store, Push, Fill)):
            for e in exprs_of(s):
                live.update(names_in(e))
            out.append(s)
        elif isinstance(s, LocalArray):
            out.append(s)
        elif isinstance(s, If):
            body, lb = liveness(s.body, live, prune, exits)
            orelse, lo = liveness(s.orelse, live, prune, exits)
            if prune and not body and not orelse:
                continue
            live = lb | lo | set(names_in(s.cond))
            out.append(If(s.cond, body, orelse, line=s.line))
        elif isinstance(s, For):
            if exits is not None:
                exits[id(s)] = set(live)
            loop_live = set(live)
            exposed = exposed_under_guards(s.body)
            while True:
                body, lb = liveness(s.body, loop_live, prune, exits)
                # Path-insensitive liveness thinks a value set under ``if c:`` and read under a later
                # ``if c:`` of the same iteration flows in from before the loop; it does not.
                lb &= exposed | loop_live
                new = loop_live | (lb - {s.var})
                if new == loop_live:
                    break
                loop_live = new
            if prune and not body:
                continue
            live = loop_live | (lb - {s.var})
            for e in (s.start, s.stop, s.step):
                live.update(names_in(e))
            out.append(For(s.var, s.start, s.stop, s.step, body, line=s.line))
        elif isinstance(s, While):
            loop_live = set(live)
            while True:
                body, lb = liveness(s.body, loop_live, prune, exits)
                test, lt = liveness(s.test, loop_live | lb | set(names_in(s.cond)), prune, exits)
                new = loop_live | lt
                if new == loop_live:
                    break
                loop_live = new
            if prune and not body and not (_assigned_in(test) & live):
                continue
            live = loop_live | lt
            out.append(While(test, s.cond, body, line=s.line))
        else:
            raise AssertionError(f"unexpected statement {s}")
    out.reverse()
    return out, live


def exposed_under_guards(code: list[Stmt]) -> set[str]:
    """Variables some use of which may read a value from before ``code`` began.

    Plain liveness is path-insensitive: a temporary set in ``if c:`` of the forward sweep and read in the
    matching ``if c:`` of the reverse sweep looks live on entry. Here a definition made under conditions
    ``G`` covers a later use under conditions that include ``G`` (the condition variables unchanged in
    between); definitions inside a loop cover uses inside that loop only.
    """
    exposed: set[str] = set()

    Guard = frozenset[tuple[str, bool]]
    Facts = dict[str, set[Guard]]  # variable -> the guards under which it has been defined

    def covered(n: str, guard: Guard, defined: Facts) -> bool:
        return any(g <= guard for g in defined.get(n, ()))

    def copy(defined: Facts) -> Facts:
        return {v: set(gs) for v, gs in defined.items()}

    def visit(stmts: list[Stmt], guard: Guard, defined: Facts) -> None:
        for st in stmts:
            uses = (
                {n for e in exprs_of(st) for n in names_in(e)} if not isinstance(st, (If, While)) else set()
            )
            if isinstance(st, If):
                uses = set(names_in(st.cond))
            exposed.update(n for n in uses if not covered(n, guard, defined))
            if isinstance(st, (Assign, Pop)):
                # Facts guarded by the variable being reassigned no longer hold.
                if st.target in conditions:
                    for gs in defined.values():
                        gs -= {g for g in gs if any(c == st.target for c, _ in g)}
                defined.setdefault(st.target, set()).add(guard)
            elif isinstance(st, If):
                cond = st.cond.id if isinstance(st.cond, Name) else None
                for side, block in ((True, st.body), (False, st.orelse)):
                    visit(block, guard | {(cond, side)} if cond else guard, defined)
            elif isinstance(st, For):
                defined.setdefault(st.var, set()).add(guard)
                visit(st.body, guard, copy(defined))
            elif isinstance(st, While):
                facts = copy(defined)
                visit(st.test, guard, facts)
                exposed.update(n for n in names_in(st.cond) if not covered(n, guard, facts))
                visit(st.body, guard, facts)

    conditions = {s.cond.id for s in walk(code) if isinstance(s, If) and isinstance(s.cond, Name)}
    visit(code, frozenset(), {})
    return exposed


def _assigned_in(stmts: list[Stmt]) -> set[str]:
    return {s.target for s in walk(stmts) if isinstance(s, Assign)}


def carried_sums(loop: For) -> set[str] | None:
    """The scalars ``loop`` carries from one iteration to the next if all are pure accumulators, else None.

    A pure accumulator is assigned only by updates ``v = v + w`` or ``v = v - w`` (directly, as a copy of
    one, or through one temporary each: ``t = v + w; v = t``), as many as the body has, and read nowhere else in the body: its
    final value is the sum of the iterations' terms, in any order.
    """
    carried = liveness(loop.body, set(), prune=False)[1] & assigned(loop.body)
    defs: dict[str, list[Assign]] = {}
    for x in walk(loop.body):
        if isinstance(x, Assign):
            defs.setdefault(x.target, []).append(x)
    reads = Counter(n for x in walk(loop.body) for e in exprs_of(x) for n in names_in(e))
    for v in carried:
        for update in defs.get(v, []):
            value = update.value
            t: Expr | None = value.args[0] if isinstance(value, Call) and value.op == "copy" else value
            if isinstance(t, Name):  # through a temporary, assigned once and read only here
                temp = defs.get(t.id, [])
                t = temp[0].value if len(temp) == 1 and reads[t.id] == 1 else None
            if not (
                isinstance(t, Call)
                and t.op in ("add", "sub")
                and (t.args[0] == Name(v) or (t.op == "add" and t.args[1] == Name(v)))
            ):
                return None
        if not defs.get(v) or reads[v] != len(defs[v]):
            return None
    return carried


def split_loops(body: list[Stmt], private_arrays: set[str]) -> dict[int, set[str]]:
    """Loops a group of GPU lanes can share, one iteration per lane in turn: id() -> the sums to combine.

    An innermost ``for`` whose trip count is not a literal qualifies when it only reads memory, sums
    (:func:`carried_sums`) and adds into arrays that are neither each lane's ``private_arrays`` nor read by
    the kernel: no plain stores, stack operations, ``break`` or ``return``, and nothing it assigns but its
    sums is read after it (an order-free adjoint loop, for one). Each lane then sums its share and adds its
    iterations' terms into the arrays, the group adds the lanes' sums, after which all lanes hold the
    loop's results. (Everything else the lanes of a group run alike, on the same values.)
    """
    found: dict[int, set[str]] = {}
    loops = [s for s in walk(body) if isinstance(s, For)]
    unshared = private_arrays | loaded_arrays(body)
    exits = live_at_exits(body)
    for loop in loops:
        if all(isinstance(b, Lit) for b in (loop.start, loop.stop, loop.step)):
            continue  # a loop of known, usually few, iterations (LULESH's corners): unrolled, not shared
        inner = list(walk(loop.body))
        if any(isinstance(x, (For, While, Fill, Push, Pop, Break, Return)) for x in inner):
            continue
        stores = [x for x in inner if isinstance(x, Store)]
        if any(not x.accumulate or x.array in unshared for x in stores):
            continue
        sums = carried_sums(loop)
        if sums is not None and only_sums_outlive(loop, sums, exits[id(loop)]):
            found[id(loop)] = sums
    return found


def only_sums_outlive(loop: For, sums: set[str], live_after: set[str]) -> bool:
    """Is nothing ``loop`` assigns but its ``sums`` live after it? (Else its last iteration is special.)"""
    return not (assigned(loop.body) | {loop.var}) - sums & live_after


def live_at_exits(body: list[Stmt]) -> dict[int, set[str]]:
    """id() of each ``for`` loop in ``body`` -> the variables live where it ends (read before set again)."""
    exits: dict[int, set[str]] = {}
    liveness(body, set(), prune=False, exits=exits)
    return exits


@dataclass(frozen=True)
class Extreme:
    """A running max/min in a loop: ``t = max(m, e); m = t`` (statement ``update``, then the copy)."""

    m: str
    e: str
    op: str  # "max" or "min"
    update: int  # id() of the ``t = max(m, e)`` statement


def running_extremes(loop: For) -> list[Extreme] | None:
    """The running maxima/minima of a loop that carries nothing else from one iteration to the next, else None.

    Each ``m`` is updated by ``t = max(m, e); m = t`` (or ``min``, either argument order, ``m = copy(t)``
    too), alone or under ``if``s, once in the body, and read nowhere else; ``e`` is a value the body
    computes. The body has no stores, loops or jumps: LULESH's time constraints (two minima over the
    elements whose volume changes) are the typical case.
    """
    body = loop.body
    if any(isinstance(x, (For, While, Store, Fill, Push, Pop, Break, Return)) for x in walk(body)):
        return None
    found: list[Extreme] = []
    pairs: set[int] = set()

    def scan(stmts: list[Stmt]) -> None:
        for update, copy in itertools.pairwise(stmts):
            if not (isinstance(update, Assign) and isinstance(copy, Assign)):
                continue
            value = (
                copy.value.args[0] if isinstance(copy.value, Call) and copy.value.op == "copy" else copy.value
            )
            if value != Name(update.target) or not isinstance(update.value, Call):
                continue
            if update.value.op not in ("max", "min"):
                continue
            others = [a for a in update.value.args if a != Name(copy.target)]
            if len(others) == 1 and isinstance(others[0], Name):
                found.append(Extreme(copy.target, others[0].id, update.value.op, id(update)))
                pairs.update((id(update), id(copy)))
        for x in stmts:
            if isinstance(x, If):
                scan(x.body)
                scan(x.orelse)

    scan(body)
    ms = [x.m for x in found]
    made = assigned(body)
    if not found or len(set(ms)) != len(ms) or liveness(body, set(), prune=False)[1] & made != set(ms):
        return None
    temps = {x.target for x in walk(body) if isinstance(x, Assign) and id(x) in pairs and x.target not in ms}
    times = Counter(x.target for x in walk(body) if isinstance(x, (Assign, Pop)))
    for x in walk(body):  # the running values and their temporaries are read only in their updates
        if id(x) not in pairs and {n for e in exprs_of(x) for n in names_in(e)} & (set(ms) | temps):
            return None
    if any(times[m] != 1 for m in ms) or any(times[t] != 1 for t in temps):
        return None
    if any(x.e not in made or x.e in ms for x in found):
        return None
    return found


def uniform_add_names(s: Stmt | None, varying: set[str]) -> frozenset[str] | None:
    """For ``_pv<x>[j] += v`` (a shared-index accumulation) with ``j`` uniform across threads: the variables
    in ``j``; else None. GPU code aggregates such adds over a warp."""
    if not (isinstance(s, Store) and s.accumulate and s.array.startswith(PRIVATE)):
        return None
    names = frozenset(n for x in s.index for n in names_in(x))
    return None if names & varying else names
