"""Racing stores: a plain store that every launch index makes to the same element.

Launch indices run in any order and at the same time, so ``y[0] = x[i]`` leaves some ``x[i]`` in ``y[0]``,
and its derivative would be credited to whichever input the adjoint guesses. pad refuses a plain store whose
index is the same for every launch index (no part of it varies with the launch index: ``analysis.varying``)
unless it sits under a guard that lets one launch index through (``if i == 0:``, ``if i == n - 1:``, the
``else`` of ``if i != k:``, with ``k`` the same for every index and every loop iteration). A store whose
index varies is trusted: pad cannot prove that ``perm[i]`` or a block's ``range(g * m, g * m + m)`` never
repeats an element across indices, and such indices are the common, correct case.
"""

from __future__ import annotations

from collections import Counter

from pad.kernel.analysis import Definitions, varying
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Call,
    Expr,
    For,
    If,
    Kind,
    Lit,
    Name,
    Pop,
    Stmt,
    Store,
    While,
    arrays_in,
    names_in,
    walk,
)


def racing_store(
    body: list[Stmt], launch_index: str, kinds: dict[str, Kind], defs: Definitions, kernel: str
) -> str:
    """The message refusing the first unguarded plain store at an index every launch index shares, or ''."""
    written = {s.array for s in walk(body) if isinstance(s, Store)}
    var = varying(body, launch_index, written)
    counts = Counter(s.target for s in walk(body) if isinstance(s, (Assign, Pop)))
    single = {s.target: s.value for s in walk(body) if isinstance(s, Assign) and counts[s.target] == 1}

    def resolve(e: Expr) -> Expr:
        for _ in range(len(single) + 1):
            if not (isinstance(e, Name) and e.id in single):
                break
            e = single[e.id]
        return e

    def constant(e: Expr) -> bool:
        """The same value for every launch index and every iteration of every loop."""
        e = resolve(e)
        if isinstance(e, Lit):
            return True
        if isinstance(e, Name):
            return e.id in defs.invariant
        return isinstance(e, Call) and (e.op == "shape" or all(constant(a) for a in e.args))

    def one_writer(cond: Expr) -> bool | None:
        """True if ``cond`` holds for one launch index at most, False if its negation does, else None."""
        c = resolve(cond)
        if isinstance(c, Call) and c.op in ("eq", "ne") and len(c.args) == 2:
            a, b = (resolve(x) for x in c.args)
            if (a == Name(launch_index) and constant(b)) or (b == Name(launch_index) and constant(a)):
                return c.op == "eq"
        return None

    def varies(e: Expr) -> bool:
        return any(n in var for n in names_in(e)) or any(a in written for a in arrays_in(e))

    def visit(stmts: list[Stmt], guarded: bool) -> str:
        for s in stmts:
            found = ""
            if isinstance(s, Store) and not s.accumulate and not guarded:
                kind = kinds.get(s.array)
                if isinstance(kind, ArrayKind) and not kind.local and not any(varies(x) for x in s.index):
                    found = _message(s, kernel, launch_index)
            elif isinstance(s, If):
                writer = one_writer(s.cond)
                found = visit(s.body, guarded or writer is True) or visit(
                    s.orelse, guarded or writer is False
                )
            elif isinstance(s, (For, While)):
                found = visit(s.body, guarded)
            if found:
                return found
        return ""

    return visit(body, False)


def _message(s: Store, kernel: str, launch_index: str) -> str:
    return (
        f"{s.line}: in {kernel}: every launch index stores to the same element of {s.array!r} "
        f"(its index does not vary with {launch_index}), and they run in any order: the result and its "
        f"derivative would be a race. Write `{s.array}[...] += value` to sum the indices' values, or let one "
        f"index store: `if {launch_index} == 0:` (a launch of one index may store anywhere)"
    )


__all__ = ["racing_store"]
