"""The small IR that kernels are lowered to, transformed in, and printed from.

Expressions are trees (``Name``, ``Lit``, ``Call``, ``Elem``); the frontend emits them in three-address form
(every ``Call`` target a fresh temporary), while generated derivative code may nest them. Statements are
structured: straight-line assignments and stores, ``If``, ``For`` over a range, ``While``, plus the stack
operations ``Push``/``Pop`` that reverse mode inserts. ``Break``/``Continue``/``Return`` exist only between
lowering and control-flow normalization.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np


# ---------------------------------------------------------------------------------------------- kinds
class KernelSyntaxError(SyntaxError):
    """A kernel or helper uses a construct pad cannot compile or differentiate."""


@dataclass(frozen=True)
class ArrayKind:
    dtype: np.dtype
    ndim: int
    local: bool = False


@dataclass(frozen=True)
class TupleKind:
    items: tuple[str, ...]


Kind = ArrayKind | TupleKind | str  # str: scalar type "b", "i", "f4" or "f8"


def scalar_type(dtype: np.dtype) -> str:
    if dtype.kind == "f":
        return "f4" if dtype.itemsize == 4 else "f8"
    if dtype.kind == "b":
        return "b"
    if dtype.kind in "iu":
        return "i"
    raise TypeError(f"unsupported dtype {dtype} (kernels take float, int and bool arrays)")


def element_type(kind: Kind | None) -> str:
    """The scalar type code values stored into an array are printed and summed in ("f4" or "f8")."""
    return "f4" if isinstance(kind, ArrayKind) and kind.dtype == np.float32 else "f8"


# ---------------------------------------------------------------------------------------------- expressions
class Expr:
    """Base of expression trees; arithmetic operators build ``Call`` nodes (used by the rule table)."""

    def __add__(self, other: Expr | float) -> Expr:
        return call("add", self, lit(other))

    def __radd__(self, other: float) -> Expr:
        return call("add", lit(other), self)

    def __sub__(self, other: Expr | float) -> Expr:
        return call("sub", self, lit(other))

    def __rsub__(self, other: float) -> Expr:
        return call("sub", lit(other), self)

    def __mul__(self, other: Expr | float) -> Expr:
        return call("mul", self, lit(other))

    def __rmul__(self, other: float) -> Expr:
        return call("mul", lit(other), self)

    def __truediv__(self, other: Expr | float) -> Expr:
        return call("div", self, lit(other))

    def __rtruediv__(self, other: float) -> Expr:
        return call("div", lit(other), self)

    def __neg__(self) -> Expr:
        return call("neg", self)


@dataclass(frozen=True, eq=True)
class Name(Expr):
    id: str


@dataclass(frozen=True, eq=True)
class Lit(Expr):
    """A literal. ``typed`` literals come from derivative rules and take the precision of their context."""

    value: bool | int | float | np.float32 | np.float64
    typed: bool = False


@dataclass(frozen=True, eq=True)
class Call(Expr):
    op: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, eq=True)
class Elem(Expr):
    """An array element ``array[index]``."""

    array: str
    index: tuple[Expr, ...]


def lit(value: Expr | float) -> Expr:
    return value if isinstance(value, Expr) else Lit(value, typed=True)


def call(op: str, *args: Expr | float) -> Expr:
    """Build ``op(*args)``, folding multiplications by one and additions of zero."""
    a = tuple(lit(x) for x in args)
    if op == "mul":
        if _is(a[0], 1):
            return a[1]
        if _is(a[1], 1):
            return a[0]
        if _is(a[0], -1):
            return call("neg", a[1])
        if _is(a[1], -1):
            return call("neg", a[0])
    if op == "neg" and isinstance(a[0], Call) and a[0].op == "neg":
        return a[0].args[0]
    return Call(op, a)


def _is(e: Expr, value: float) -> bool:
    return isinstance(e, Lit) and not isinstance(e.value, bool) and e.value == value


def names_in(e: Expr) -> Iterator[str]:
    """Every variable name an expression reads (array names excluded; index names included)."""
    if isinstance(e, Name):
        yield e.id
    elif isinstance(e, Call):
        for a in e.args:
            yield from names_in(a)
    elif isinstance(e, Elem):
        for a in e.index:
            yield from names_in(a)


def substitute(e: Expr, values: Mapping[str, Expr]) -> Expr:
    """``e`` with each name in ``values`` replaced by its value (the operations themselves unchanged)."""
    if isinstance(e, Name):
        return values.get(e.id, e)
    if isinstance(e, Call):
        return Call(e.op, tuple(substitute(a, values) for a in e.args))
    if isinstance(e, Elem):
        return Elem(e.array, tuple(substitute(a, values) for a in e.index))
    return e


def literal_range(s: Stmt) -> range | None:
    """The values a ``for`` loop's variable takes when its bounds are integer literals, else None."""
    if not isinstance(s, For):
        return None
    bounds = (s.start, s.stop, s.step)
    if not all(isinstance(b, Lit) and isinstance(b.value, int) for b in bounds):
        return None
    return range(*(int(b.value) for b in bounds))  # type: ignore[attr-defined]


def elems_in(e: Expr) -> Iterator[Elem]:
    """Every array element an expression reads, those in indices included."""
    if isinstance(e, Elem):
        yield e
        for a in e.index:
            yield from elems_in(a)
    elif isinstance(e, Call):
        for a in e.args:
            yield from elems_in(a)


def arrays_in(e: Expr) -> Iterator[str]:
    """Every array an expression reads an element of."""
    if isinstance(e, Elem):
        yield e.array
        for a in e.index:
            yield from arrays_in(a)
    elif isinstance(e, Call):
        for a in e.args:
            yield from arrays_in(a)


# ---------------------------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class Line:
    """Where a statement comes from: a line of a source file (an inlined helper's are in its own file)."""

    file: str
    number: int

    def __str__(self) -> str:
        return f"{self.file}:{self.number}"


@dataclass
class Stmt:
    line: Line | None = field(default=None, kw_only=True)


@dataclass
class Assign(Stmt):
    target: str
    value: Expr


@dataclass
class Store(Stmt):
    """``array[index] = value``, or ``array[index] += value`` when ``accumulate``."""

    array: str
    index: tuple[Expr, ...]
    value: Expr
    accumulate: bool = False


@dataclass
class If(Stmt):
    cond: Expr
    body: list[Stmt]
    orelse: list[Stmt]


@dataclass
class For(Stmt):
    """``for var in range(start, stop, step)``: bounds are evaluated once, before the loop."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt]


@dataclass
class While(Stmt):
    """``while cond``: ``test`` (side-effect free) computes ``cond`` before every iteration."""

    test: list[Stmt]
    cond: Expr
    body: list[Stmt]


@dataclass
class LocalArray(Stmt):
    target: str
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass
class Fill(Stmt):
    """Set every element of an array to ``value`` (zeroing a local shadow)."""

    array: str
    value: Expr


@dataclass
class Push(Stmt):
    """Save a value on the per-thread stack of its kind (``"f"`` floats, ``"i"`` ints and booleans)."""

    value: Expr
    kind: str


@dataclass
class Pop(Stmt):
    """Restore ``target`` from the per-thread stack; ``ty`` is the target's scalar type."""

    target: str
    kind: str
    ty: str


@dataclass
class Break(Stmt):
    pass


@dataclass
class Continue(Stmt):
    pass


@dataclass
class Return(Stmt):
    values: list[Expr]


def map_blocks(s: Stmt, f: Callable[[list[Stmt]], list[Stmt]]) -> Stmt:
    """A copy of compound statement ``s`` with ``f`` applied to each nested block (others returned as is)."""
    if isinstance(s, If):
        return If(s.cond, f(s.body), f(s.orelse), line=s.line)
    if isinstance(s, For):
        return For(s.var, s.start, s.stop, s.step, f(s.body), line=s.line)
    if isinstance(s, While):
        return While(f(s.test), s.cond, f(s.body), line=s.line)
    return s


def without_stores(
    stmts: list[Stmt], arrays: set[str], keep: frozenset[int] | set[int] = frozenset()
) -> list[Stmt]:
    """``stmts`` without their stores to ``arrays`` (except the statements whose id() is in ``keep``)."""
    return [
        map_blocks(s, lambda b: without_stores(b, arrays, keep))
        for s in stmts
        if not (isinstance(s, Store) and s.array in arrays and id(s) not in keep)
    ]


def rewrite(stmts: list[Stmt], expr: Callable[[Expr], Expr], name: Callable[[str], str]) -> list[Stmt]:
    """Copies of ``stmts`` with ``expr`` applied to every expression they evaluate and ``name`` to every
    scalar they assign, nested statements included."""
    out: list[Stmt] = []
    for s in stmts:
        line = s.line
        if isinstance(s, Assign):
            s = Assign(name(s.target), expr(s.value), line=line)
        elif isinstance(s, Store):
            s = Store(s.array, tuple(map(expr, s.index)), expr(s.value), s.accumulate, line=line)
        elif isinstance(s, If):
            s = If(expr(s.cond), rewrite(s.body, expr, name), rewrite(s.orelse, expr, name), line=line)
        elif isinstance(s, For):
            body = rewrite(s.body, expr, name)
            s = For(name(s.var), expr(s.start), expr(s.stop), expr(s.step), body, line=line)
        elif isinstance(s, While):
            s = While(rewrite(s.test, expr, name), expr(s.cond), rewrite(s.body, expr, name), line=line)
        elif isinstance(s, Fill):
            s = Fill(s.array, expr(s.value), line=line)
        elif isinstance(s, Push):
            s = Push(expr(s.value), s.kind, line=line)
        elif isinstance(s, Pop):
            s = Pop(name(s.target), s.kind, s.ty, line=line)
        elif isinstance(s, Return):
            s = Return([expr(v) for v in s.values], line=line)
        out.append(s)
    return out


def blocks(s: Stmt) -> list[list[Stmt]]:
    """The statement lists nested directly in ``s``, in program order (none for a simple statement)."""
    if isinstance(s, If):
        return [s.body, s.orelse]
    if isinstance(s, For):
        return [s.body]
    if isinstance(s, While):
        return [s.test, s.body]
    return []


def walk(stmts: list[Stmt]) -> Iterator[Stmt]:
    """Every statement, nested ones included, in program order."""
    for s in stmts:
        yield s
        for block in blocks(s):
            yield from walk(block)


def assigned(stmts: list[Stmt]) -> set[str]:
    """Scalar variables written anywhere in ``stmts`` (loop variables included)."""
    out: set[str] = set()
    for s in walk(stmts):
        if isinstance(s, (Assign, Pop)):
            out.add(s.target)
        elif isinstance(s, For):
            out.add(s.var)
    return out


def stored_arrays(stmts: list[Stmt]) -> set[str]:
    return {s.array for s in walk(stmts) if isinstance(s, (Store, Fill))}


def loaded_arrays(stmts: list[Stmt]) -> set[str]:
    out: set[str] = set()
    for s in walk(stmts):
        for e in exprs_of(s):
            out.update(arrays_in(e))
    return out


def exprs_of(s: Stmt) -> list[Expr]:
    """The expressions a statement evaluates itself (not those of nested statements)."""
    if isinstance(s, Assign):
        return [s.value]
    if isinstance(s, Store):
        return [*s.index, s.value]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, For):
        return [s.start, s.stop, s.step]
    if isinstance(s, While):
        return [s.cond]
    if isinstance(s, (Fill, Push)):
        return [s.value]
    if isinstance(s, Return):
        return list(s.values)
    return []


class Namer:
    """Fresh names for temporaries, flags and inlined helpers' variables."""

    def __init__(self) -> None:
        self.count = 0

    def fresh(self, stem: str = "t") -> str:
        self.count += 1
        return f"_{stem}{self.count}"
