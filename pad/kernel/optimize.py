"""Passes over transformed kernel bodies that make them cheaper or shorter without changing a result.

``tidy`` runs last, on every variant: the code it leaves is both what numba compiles and what ``pad.show``
prints, so a reader follows the adjoint of a source line in a few lines of the same shape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from pad.kernel.ir import (
    Assign,
    Expr,
    Fill,
    For,
    If,
    LocalArray,
    Name,
    Pop,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    exprs_of,
    map_blocks,
    names_in,
    rewrite,
    substitute,
    walk,
)


def tidy(body: list[Stmt], keep: set[str], type_of: Callable[[str], str]) -> list[Stmt]:
    """Copy propagation and inlining of single-use temporaries, block by block.

    A generated scalar (its name starts with ``_``) assigned once, and read only after that in the same
    block, goes away: a copy ``g = x`` where ``x`` keeps its value up to ``g``'s last read (``x`` is read
    instead), and a value read once, on the same source line, in the value of an assignment or store or an
    ``if`` condition, by a statement of the same type, with nothing in between assigning what it reads (or
    storing into any array, if it loads from one): it is printed at the read. Each operation keeps its
    operands, so the results are the same bits. ``keep``: scalars read after the body.
    """
    defs: Counter[str] = Counter()
    uses: Counter[str] = Counter()
    for s in walk(body):
        if isinstance(s, (Assign, Pop)):
            defs[s.target] += 1
        elif isinstance(s, For):
            defs[s.var] += 1
        for e in exprs_of(s):
            uses.update(names_in(e))

    def removable(t: str) -> bool:
        return t.startswith("_") and t not in keep and defs[t] == 1 and uses[t] > 0

    def block(stmts: list[Stmt]) -> list[Stmt]:
        reads = [Counter(n for x in walk([s]) for e in exprs_of(x) for n in names_in(e)) for s in stmts]
        sets = [assigned([s]) for s in stmts]
        writes = [any(isinstance(x, (Store, Fill, LocalArray)) for x in walk([s])) for s in stmts]
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        count: Counter[str] = Counter()
        for k, r in enumerate(reads):
            for n in r:
                first.setdefault(n, k)
                last[n] = k
            count.update(r)
        values: dict[str, Expr] = {}
        out: list[Stmt] = []
        for p, s in enumerate(stmts):
            if values and reads[p].keys() & values.keys():
                s = rewrite([s], lambda e: substitute(e, values), lambda n: n)[0]
            s = map_blocks(s, block)
            if isinstance(s, Assign) and removable(s.target):
                t, v = s.target, s.value
                own = count[t] == uses[t] and first.get(t, -1) > p  # every read of t is later in this block
                if own and isinstance(v, Name):
                    if not any(v.id in sets[k] for k in range(p + 1, last[t] + 1)):
                        values[t] = v
                        continue
                elif own and uses[t] == 1 and _inlinable(stmts, p, last[t], s, sets, writes, type_of):
                    values[t] = v
                    continue
            out.append(s)
        return out

    return block(body)


def _inlinable(
    stmts: list[Stmt],
    p: int,
    q: int,
    s: Assign,
    sets: list[set[str]],
    writes: list[bool],
    type_of: Callable[[str], str],
) -> bool:
    """Whether ``s = stmts[p]`` may be printed at its one read, in ``stmts[q]``."""
    use = stmts[q]
    if use.line != s.line:
        return False
    if isinstance(use, Assign) and s.target in names_in(use.value):
        context = type_of(use.target)
    elif isinstance(use, Store) and s.target in names_in(use.value):
        context = type_of(use.array)
    elif isinstance(use, If) and s.target in names_in(use.cond):
        context = "b"
    else:
        return False
    if type_of(s.target) != context:  # typed literals and float32 casts print in the context's type
        return False
    between = range(p + 1, q)
    read = set(names_in(s.value))
    if any(read & sets[k] for k in between):
        return False
    return not (any(True for _ in arrays_in(s.value)) and any(writes[k] for k in between))


def read_first(body: list[Stmt], live_out: set[str]) -> set[str]:
    """The scalars some read of which, or of ``live_out`` after ``body``, may come before ``body`` assigns
    them: those that must start with a value (a loop's body may read what its previous iteration left)."""
    exposed: set[str] = set()

    def visit(stmts: list[Stmt], defined: set[str]) -> set[str]:
        defined = set(defined)
        for s in stmts:
            exposed.update(n for e in exprs_of(s) for n in names_in(e) if n not in defined)
            if isinstance(s, (Assign, Pop)):
                defined.add(s.target)
            elif isinstance(s, For):
                visit(s.body, defined | {s.var})
            elif isinstance(s, While):
                visit(s.test + s.body, defined)
            elif isinstance(s, If):
                visit(s.body, defined)
                visit(s.orelse, defined)
        return defined

    exposed |= live_out - visit(body, set())
    return exposed
