"""Passes over transformed kernel bodies that make them cheaper or shorter without changing a result.

``tidy`` runs last, on every variant: the code it leaves is both what numba compiles and what ``pad.show``
prints, so a reader follows the adjoint of a source line in a few lines of the same shape.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from pad.kernel.analysis import NO_DEFINITIONS, Definitions, owned, uniform_add_names
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Call,
    Expr,
    Fill,
    For,
    If,
    Kind,
    Lit,
    LocalArray,
    Name,
    Pop,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    call,
    element_type,
    exprs_of,
    loaded_arrays,
    map_blocks,
    names_in,
    rewrite,
    substitute,
    walk,
)
from pad.kernel.names import ADJOINT, PRIVATE, base_name, private


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


def defer_scales(body: list[Stmt]) -> list[Stmt]:
    """Adjoint shares of one factor summed in a loop body, multiplied by it once where the sum is used.

    The adjoint of ``k1 * (a if a < 0 else 0) + k2 * (b if b < 0 else 0)`` gives each term its share of the
    incoming adjoint ``g`` (``g * k1``, ``g * k2``), and the guards pass some of them on into one sum: ``g``
    is multiplied once per term. Where every value such a product reaches (through copies, guarded copies
    and sums) stays in the body of an innermost loop that does not assign ``g``, the products lose ``g``
    and each read of those values outside them takes ``g * v`` instead, if that is fewer multiplications.
    The sums then round differently: for fast-math kernels only, which numba may reassociate anyway.
    """
    defs: Counter[str] = Counter()
    uses: Counter[str] = Counter()
    for s in walk(body):
        if isinstance(s, (Assign, Pop)):
            defs[s.target] += 1
        for e in exprs_of(s):
            uses.update(names_in(e))

    def loop_body(stmts: list[Stmt]) -> list[Stmt]:
        if any(isinstance(x, (For, While)) for x in walk(stmts)):
            return stmts
        inner_defs: dict[str, list[Expr]] = {}
        inner_uses: Counter[str] = Counter()
        for x in walk(stmts):
            if isinstance(x, Assign):
                inner_defs.setdefault(x.target, []).append(x.value)
            for e in exprs_of(x):
                inner_uses.update(names_in(e))
        changing = assigned(stmts)
        exposed = read_first(stmts, set())

        def local(n: str) -> bool:
            """A generated adjoint defined and read only here, each iteration assigning it before reading it."""
            here = defs[n] == len(inner_defs.get(n, [])) and uses[n] == inner_uses[n]
            return n.startswith(ADJOINT) and here and n not in exposed

        def factor(e: Expr) -> str | None:
            """``g`` where ``e`` is an adjoint ``g`` that the loop body leaves unchanged (its share: 1)."""
            if isinstance(e, Name) and e.id.startswith(ADJOINT) and e.id not in changing:
                return e.id
            return None

        scale: dict[str, str] = {}  # value -> the factor it carries

        def carried(e: Expr, target: str) -> str | None:
            """The factor every nonzero value of ``e``, assigned to ``target``, carries, if one does (``""``:
            none needed; ``target``'s own earlier value carries what its other values do)."""
            if isinstance(e, Lit) and e.typed and e.value == 0:
                return ""
            if isinstance(e, Name):
                return "" if e.id == target else scale.get(e.id, factor(e))
            if (
                isinstance(e, Call)
                and e.op == "mul"
                and not any(n.startswith(ADJOINT) for n in names_in(e.args[1]))
            ):
                return factor(e.args[0])
            if isinstance(e, Call) and e.op == "neg":
                return carried(e.args[0], target)
            if isinstance(e, Call) and e.op in ("add", "sub"):
                factors = {carried(a, target) for a in e.args} - {""}
                if None in factors or len(factors) > 1:
                    return None
                return factors.pop() if factors else ""
            return None

        grown = True
        while grown:
            grown = False
            for n, values in inner_defs.items():
                if n not in scale and local(n):
                    factors = {carried(v, n) for v in values} - {""}
                    f = factors.pop() if len(factors) == 1 else None
                    if f is not None:
                        scale[n] = f
                        grown = True

        def unscaled(e: Expr) -> Expr:
            """A value of the family of ``scale`` without its factor."""
            if isinstance(e, Name) and e.id not in scale and factor(e):
                return Lit(1.0, typed=True)
            if isinstance(e, Call) and e.op == "mul" and factor(e.args[0]):
                return e.args[1]
            if isinstance(e, Call) and e.op in ("add", "sub", "neg"):
                return Call(e.op, tuple(unscaled(a) for a in e.args))
            return e

        # Per factor: the multiplications it saves (its products) against those it adds (reads of its family
        # by other statements).
        saved: Counter[str] = Counter()
        added: Counter[str] = Counter()
        for x in walk(stmts):
            if isinstance(x, Assign) and x.target in scale:
                saved[scale[x.target]] += sum(
                    isinstance(y, Call) and y.op == "mul" for y in _subexprs(x.value)
                )
                continue
            for e in exprs_of(x):
                added.update(scale[n] for n in names_in(e) if n in scale)
        chosen = {f for f in saved if added[f] < saved[f]}
        if not chosen:
            return stmts
        moved = {n: call("mul", Name(scale[n]), Name(n)) for n in scale if scale[n] in chosen}

        def expr(e: Expr) -> Expr:
            return substitute(e, moved)

        def visit(block: list[Stmt]) -> list[Stmt]:
            out: list[Stmt] = []
            for x in block:
                if isinstance(x, Assign) and x.target in moved:
                    out.append(Assign(x.target, unscaled(x.value), line=x.line))
                elif isinstance(x, If):
                    out.append(If(expr(x.cond), visit(x.body), visit(x.orelse), line=x.line))
                else:
                    out.append(rewrite([x], expr, lambda n: n)[0])
            return out

        return visit(stmts)

    def visit(stmts: list[Stmt]) -> list[Stmt]:
        out = []
        for s in stmts:
            s = map_blocks(s, visit)
            if isinstance(s, For):
                s = For(s.var, s.start, s.stop, s.step, loop_body(s.body), line=s.line)
            out.append(s)
        return out

    return visit(body)


def _subexprs(e: Expr) -> list[Expr]:
    """``e`` and the expressions in it, operands of additions, subtractions and negations followed."""
    if isinstance(e, Call) and e.op in ("add", "sub", "neg"):
        return [e, *(y for a in e.args for y in _subexprs(a))]
    return [e]


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


def promote(stmts: list[Stmt], namer: Any, types: dict[str, str], kinds: dict[str, Kind]) -> list[Stmt]:
    """Accumulate ``x[e] += v`` inside a loop in a scalar when ``e`` does not change in the loop and the loop
    never reads or overwrites ``x``; add the scalar to ``x[e]`` once after the loop.

    Typical in adjoints: ``dq[i] += ...`` for every partner ``j`` of ``i``. One memory update (on GPUs one
    atomic) per loop instead of one per iteration.
    """
    out: list[Stmt] = []
    for s in stmts:
        s = map_blocks(s, lambda b: promote(b, namer, types, kinds))
        if not isinstance(s, (For, While)):
            out.append(s)
            continue
        code = [*s.body, *(s.test if isinstance(s, While) else [])]
        changing = assigned(code) | ({s.var} if isinstance(s, For) else set())
        touched = loaded_arrays(code) | {
            x.array for x in walk(code) if isinstance(x, Store) and not x.accumulate
        }
        sums: dict[tuple, str] = {}
        body = _scalarize(s.body, changing, touched, sums, namer, types, kinds)
        loop = (
            For(s.var, s.start, s.stop, s.step, body, line=s.line)
            if isinstance(s, For)
            else While(s.test, s.cond, body, line=s.line)
        )
        out += [Assign(t, Lit(0.0, typed=True), line=s.line) for t in sums.values()]
        out.append(loop)
        out += [Store(array, index, Name(t), True, line=s.line) for (array, index), t in sums.items()]
    return out


def _scalarize(
    block: list[Stmt],
    changing: set[str],
    touched: set[str],
    sums: dict[tuple, str],
    namer: Any,
    types: dict[str, str],
    kinds: dict[str, Kind],
) -> list[Stmt]:
    """``promote``'s rewrite of one loop body: eligible accumulations go to the scalars in ``sums``."""
    out: list[Stmt] = []
    for x in block:
        if not isinstance(x, Store):
            out.append(map_blocks(x, lambda b: _scalarize(b, changing, touched, sums, namer, types, kinds)))
            continue
        names = {n for e in x.index for n in names_in(e)}
        base = x.array.removeprefix(PRIVATE)
        kind = kinds.get(base_name(base))
        if (
            x.accumulate
            and not (names & changing)
            and not ({x.array, base} & touched)
            and isinstance(kind, ArrayKind)
            and not kind.local
        ):
            key = (x.array, x.index)
            if key not in sums:
                sums[key] = namer.fresh("sum")
                types[sums[key]] = element_type(kind)
            out.append(Assign(sums[key], call("add", Name(sums[key]), x.value), line=x.line))
        else:
            out.append(x)
    return out


def converge(
    stmts: list[Stmt], var: set[str], namer: Any, types: dict[str, str], kinds: dict[str, Kind]
) -> list[Stmt]:
    """Move accumulations at uniform indices out of branches whose condition varies between threads.

    Inside ``if c:`` with a thread-dependent ``c`` the warp is split, and a warp-aggregated atomic falls
    back to one atomic per lane on the same address. So ``x[j] += v`` there becomes ``t = v`` (``t = 0``
    before the branch) and ``x[j] += t`` after it, where every lane of the warp arrives together.
    """
    out: list[Stmt] = []
    for s in stmts:
        if isinstance(s, If) and any(n in var for n in names_in(s.cond)):
            inside = assigned([s])
            moved: list[tuple[str, Store]] = []

            def strip(
                block: list[Stmt], inside: set[str] = inside, moved: list[tuple[str, Store]] = moved
            ) -> list[Stmt]:
                kept: list[Stmt] = []
                for x in block:
                    names = uniform_add_names(x, var)
                    if isinstance(x, Store) and names is not None and not (names & inside):
                        t = namer.fresh("acc")
                        types[t] = element_type(kinds[base_name(x.array)])
                        moved.append((t, x))
                        kept.append(Assign(t, x.value, line=x.line))
                    elif isinstance(x, If):
                        kept.append(If(x.cond, strip(x.body), strip(x.orelse), line=x.line))
                    else:
                        kept.append(map_blocks(x, lambda b: converge(b, var, namer, types, kinds)))
                return kept

            body, orelse = strip(s.body), strip(s.orelse)
            out += [Assign(t, Lit(0.0, typed=True), line=s.line) for t, _ in moved]
            out.append(If(s.cond, body, orelse, line=s.line))
            out += [Store(x.array, x.index, Name(t), True, line=x.line) for t, x in moved]
        else:
            out.append(map_blocks(s, lambda b: converge(b, var, namer, types, kinds)))
    return out


def sink(
    stmts: list[Stmt], var: set[str], namer: Any, types: dict[str, str], kinds: dict[str, Kind]
) -> list[Stmt]:
    """Move accumulations at uniform indices to the end of their block (through a temporary), so adjacent
    ones share one warp aggregation (``CudaPrinter.aggregated``). Accumulations commute; a store moves only
    if its index variables keep their values to the end of the block."""
    out: list[Stmt] = []
    moved: list[Store] = []
    for k, s in enumerate(stmts):
        s = map_blocks(s, lambda b: sink(b, var, namer, types, kinds))
        names = uniform_add_names(s, var)
        if isinstance(s, Store) and names is not None and not (names & assigned(stmts[k + 1 :])):
            t = namer.fresh("add")
            types[t] = element_type(kinds[base_name(s.array)])
            out.append(Assign(t, s.value, line=s.line))
            moved.append(Store(s.array, s.index, Name(t), True, line=s.line))
        else:
            out.append(s)
    return out + moved


def privatize(
    body: list[Stmt], reduced: set[str], launch_index: str, defs: Definitions = NO_DEFINITIONS
) -> list[Stmt]:
    """Send ``a[j] += v`` at shared indices of reduced arrays to the thread's private buffer."""
    out: list[Stmt] = []
    for s in body:
        if (
            isinstance(s, Store)
            and s.accumulate
            and s.array in reduced
            and not owned(s.index, launch_index, defs)
        ):
            s = Store(private(s.array), s.index, s.value, True, line=s.line)
        else:
            s = map_blocks(s, lambda b: privatize(b, reduced, launch_index, defs))
        out.append(s)
    return out
