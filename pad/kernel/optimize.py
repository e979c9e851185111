"""Passes over transformed kernel bodies that make them cheaper or shorter without changing a result.

``tidy`` runs last, on every variant: the code it leaves is both what numba compiles and what ``pad.show``
prints, so a reader follows the adjoint of a source line in a few lines of the same shape.
"""

from __future__ import annotations

import copy
import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from pad.kernel.analysis import (
    FLOATS,
    NO_DEFINITIONS,
    Definitions,
    definitions,
    is_local,
    owned,
    resolve,
    targets,
    uniform_add_names,
)
from pad.kernel.ir import (
    ArrayKind,
    Assign,
    Break,
    Call,
    Continue,
    Elem,
    Expr,
    Fill,
    For,
    If,
    Kind,
    Lit,
    LocalArray,
    Name,
    Pop,
    Return,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    blocks,
    call,
    element_type,
    elems_in,
    exprs_of,
    literal_range,
    loaded_arrays,
    map_blocks,
    names_in,
    rewrite,
    stored_arrays,
    substitute,
    walk,
)
from pad.kernel.names import ADJOINT, PRIVATE, base_name, first_read, private


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
        defs.update(targets(s))
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


COMMUTATIVE = frozenset(("add", "mul"))
"""Operations whose operands may swap: IEEE sums and products are the same bits either way."""


def common_subexpressions(body: list[Stmt], types: dict[str, str], kinds: dict[str, Kind]) -> list[Stmt]:
    """``body`` with each floating-point value that a block computes again from the same values made once:
    a temporary assigned once whose operation or array load an earlier variable of the block (assigned once
    too) holds already, with nothing in between assigning its operands or storing into the array, goes
    away and is read as that variable (kernels are in three-address form here: operands and indices are
    names and literals; a name assigned an integer literal once counts as the literal).

    The values, hence the primal's results, are the same bits; adjoints gain. The reverse sweep adds the
    uses' adjoints into the one variable's before passing them on once, where it passed each copy's on
    alone: LULESH's ``volume_derivatives`` sums 48 pairs of corner coordinates per axis, which are its hex's
    12 edges, each loaded and summed by four of its eight ``volume_derivative`` calls. A store into a local
    array ends what was loaded from it; a store into any other array, what was loaded from every other array
    (arguments may share memory). Integer arithmetic stays as it is (index arithmetic, which the analyses of
    indices follow through its single definitions anyway).
    """
    defs: Counter[str] = Counter(n for s in walk(body) for n in targets(s))
    constants = {
        s.target: literal
        for s in walk(body)
        if isinstance(s, Assign) and defs[s.target] == 1 and (literal := _int_literal(s.value)) is not None
    }
    renamed: dict[str, Expr] = {}

    def atom(e: Expr) -> tuple[str, Any] | None:
        if isinstance(e, Name) and e.id in constants:
            e = constants[e.id]
        if isinstance(e, Lit):  # a literal of another Python type is another value (1 is not 1.0)
            return ("lit", (type(e.value).__name__, e.value, e.typed))
        return ("name", e.id) if isinstance(e, Name) else None

    def key_of(s: Stmt) -> tuple | None:
        if not (isinstance(s, Assign) and defs[s.target] == 1 and types.get(s.target) in FLOATS):
            return None
        v = s.value
        operands = v.args if isinstance(v, Call) else v.index if isinstance(v, Elem) else ()
        atoms = [a for a in map(atom, operands) if a is not None]
        if not operands or len(atoms) < len(operands):
            return None
        if isinstance(v, Call):
            return ("op", v.op, tuple(sorted(atoms) if v.op in COMMUTATIVE else atoms))
        assert isinstance(v, Elem)
        return ("load", v.array, tuple(atoms))

    def block(stmts: list[Stmt]) -> list[Stmt]:
        held: dict[tuple, str] = {}  # a value -> the variable that holds it
        reading: dict[str, set[tuple]] = {}  # a name -> the values that end when it is assigned
        loading: dict[str, set[tuple]] = {}  # an array -> the values loaded from it

        def end(values: Iterable[tuple]) -> None:
            for k in values:
                held.pop(k, None)

        out: list[Stmt] = []
        for s in stmts:
            if renamed:
                s = rewrite([s], lambda e: substitute(e, renamed), lambda n: n)[0]
            s = map_blocks(s, block)
            key = key_of(s)
            if key is not None:
                assert isinstance(s, Assign)
                if key in held and s.target.startswith("_"):
                    renamed[s.target] = Name(held[key])
                    continue
            for n in assigned([s]):
                end(reading.pop(n, ()))
            for a in stored_arrays([s]) | {x.target for x in walk([s]) if isinstance(x, LocalArray)}:
                for b in [a] if is_local(kinds, a) else [b for b in loading if not is_local(kinds, b)]:
                    end(loading.pop(b, ()))
            if key is not None and key not in held:
                assert isinstance(s, Assign)
                held[key] = s.target
                kind, what, atoms = key
                for n in [s.target, *(v for k, v in atoms if k == "name")]:
                    reading.setdefault(n, set()).add(key)
                if kind == "load":
                    loading.setdefault(what, set()).add(key)
            out.append(s)
        return out

    return block(body)


def _int_literal(e: Expr) -> Lit | None:
    """``e`` if an integer literal, or the literal a ``copy`` of one copies (how a helper's literal argument
    is bound to its parameter)."""
    if isinstance(e, Call) and e.op == "copy":
        e = e.args[0]
    return e if isinstance(e, Lit) and type(e.value) is int else None


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


# Loops with literal bounds that run at most this many times are followed iteration by iteration when
# local arrays' dead stores are looked for (their indices are then known); longer ones are summarized.
UNROLL_TRIPS = 64
# Local arrays of at most this many elements are followed element by element; stores into larger ones stay.
TRACKED_ELEMENTS = 1024

Element = tuple[str, tuple[int, ...]]


def dead_local_stores(body: list[Stmt], shapes: dict[str, tuple[int, ...]]) -> list[Stmt]:
    """``body`` without its stores and fills into local arrays whose elements nothing reads afterwards.

    Liveness of array elements: ``shapes`` names the local arrays followed (a kernel's local arrays and their
    shadows), element by element wherever an index is known when the kernel is compiled (literals, loop
    variables of loops with literal bounds, names assigned such values), as the whole array otherwise. A
    store is dead where the element it writes is stored again, or filled, before any statement, later loop
    iteration or reverse block reads it; a fill where no element is read before the next fill. The body
    runs once per launch index on arrays the launcher allocates once per chunk, so what the body reads of
    them before writing (a shadow's zeros) is live at its end. Typical: the replay of a recomputed loop
    that rebuilds a local array the reverse sweep does not read again, and forward stores into elements
    only a replaced value read. Only the stores go; ``analysis.liveness`` then drops what they alone read.
    """
    shapes = {a: shape for a, shape in shapes.items() if math.prod(shape) <= TRACKED_ELEMENTS}
    code = _copies(body)  # one statement object per occurrence: the forward sweep's and the replay's
    whole = {a: frozenset((a, i) for i in np.ndindex(*shape)) for a, shape in shapes.items()}
    needed: set[int] = set()

    def evaluate(e: Expr, env: dict[str, int]) -> int | None:
        if isinstance(e, Lit):
            return (
                int(e.value)
                if isinstance(e.value, (int, np.integer)) and not isinstance(e.value, bool)
                else None
            )
        if isinstance(e, Name):
            return env.get(e.id)
        if isinstance(e, Call) and e.op in _INDEX_OPS:
            args = [evaluate(a, env) for a in e.args]
            return None if None in args else _INDEX_OPS[e.op](*args)  # type: ignore[arg-type]
        return None

    def elements(array: str, index: tuple[Expr, ...], env: dict[str, int]) -> frozenset[Element]:
        """The elements ``array[index]`` may be: one where the index is known and in bounds, else all."""
        shape = shapes[array]
        at: list[int] = []
        for e, n in zip(index, shape, strict=False):
            v = evaluate(e, env)
            if v is None or not -n <= v < n:
                return whole[array]
            at.append(v + n if v < 0 else v)
        return frozenset({(array, tuple(at))}) if len(index) == len(shape) else whole[array]

    def reads(s: Stmt, env: dict[str, int]) -> set[Element]:
        out: set[Element] = set()
        for e in exprs_of(s):
            for x in elems_in(e):
                if x.array in shapes:
                    out |= elements(x.array, x.index, env)
        return out

    def envs(stmts: list[Stmt], env: dict[str, int]) -> list[dict[str, int]]:
        """The known integer values before each statement of ``stmts``."""
        out = []
        env = dict(env)
        for s in stmts:
            out.append(env)
            env = dict(env)
            if isinstance(s, Assign):
                value = evaluate(s.value, env)
                if value is None:
                    env.pop(s.target, None)
                else:
                    env[s.target] = value
            else:
                for n in assigned([s]):
                    env.pop(n, None)
        return out

    def block(stmts: list[Stmt], live: set[Element], env: dict[str, int]) -> set[Element]:
        live = set(live)
        for s, before in zip(reversed(stmts), reversed(envs(stmts, env)), strict=True):
            live = stmt(s, live, before)
        return live

    def stmt(s: Stmt, live: set[Element], env: dict[str, int]) -> set[Element]:
        if isinstance(s, Store) and s.array in shapes:
            written = elements(s.array, s.index, env)
            if not written & live:
                return live
            needed.add(id(s))
            if len(written) == 1 and not s.accumulate:
                live = live - written
            return live | reads(s, env)
        if isinstance(s, Fill) and s.array in shapes:
            if not whole[s.array] & live:
                return live
            needed.add(id(s))
            return (live - whole[s.array]) | reads(s, env)
        if isinstance(s, If):
            return block(s.body, live, env) | block(s.orelse, live, env) | reads(s, env)
        if isinstance(s, For):
            inner = {n: v for n, v in env.items() if n not in assigned(s.body)}
            start, stop, step = (evaluate(e, env) for e in (s.start, s.stop, s.step))
            trips = range(start, stop, step) if start is not None and stop is not None and step else None
            if trips is not None and len(trips) <= UNROLL_TRIPS:
                for value in reversed(trips):
                    live = block(s.body, live, {**inner, s.var: value})
                return live | reads(s, env)
            return _summarized(lambda after: block(s.body, after, inner), live) | reads(s, env)
        if isinstance(s, While):
            inner = {n: v for n, v in env.items() if n not in assigned(s.test + s.body)}
            head = set(live)  # live where the test runs: before the loop and after each iteration
            while True:
                grown = head | block(s.test, live | reads(s, inner) | block(s.body, head, inner), inner)
                if grown == head:
                    return head
                head = grown
        return live | reads(s, env)

    # The body repeats for every launch index of a chunk: what it reads first is live at its end.
    live_end: set[Element] = set()
    while True:
        needed.clear()
        entry = block(code, live_end, {})
        if entry <= live_end:
            break
        live_end |= entry

    def sweep(stmts: list[Stmt]) -> list[Stmt]:
        return [
            map_blocks(s, sweep)
            for s in stmts
            if not (isinstance(s, (Store, Fill)) and s.array in shapes and id(s) not in needed)
        ]

    return sweep(code)


_INDEX_OPS: dict[str, Callable[..., int | None]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "neg": lambda a: -a,
    "copy": lambda a: a,
    "floordiv": lambda a, b: a // b if b else None,
    "mod": lambda a, b: a % b if b else None,
    "tripcount": lambda a, b, c: len(range(a, b, c)) if c else None,
}


def _summarized(once: Callable[[set[Element]], set[Element]], after: set[Element]) -> set[Element]:
    """What is live before a loop run any number of times (``once``: live before one iteration, from what is
    live after it): the fixed point, which holds ``after`` too (the loop may not run)."""
    live = set(after)
    while True:
        grown = live | once(live)
        if grown == live:
            return live
        live = grown


def _copies(stmts: list[Stmt]) -> list[Stmt]:
    """A copy of every statement, one per place it occurs (``copy.deepcopy`` keeps shared ones shared)."""
    return [map_blocks(s, _copies) if blocks(s) else copy.copy(s) for s in stmts]


UNROLLED_TRIPS = 4  # ``unroll``: loops of at most this many iterations
UNROLLED_STATEMENTS = 96  # and at most this many statements in all copies of the body (a nested loop's once)
UNROLLED_OUTPUT_TRIPS = 8  # ``owned_store_loops``: loops of at most this many iterations
UNROLLED_OUTPUT_STATEMENTS = 384  # and statements in all copies of the body


def small_loops(body: list[Stmt], among: set[int]) -> set[int]:
    """id() of the loops of ``among`` that ``unroll`` takes: ``for`` loops with literal bounds, a few
    iterations of a short body that assigns its variable nowhere and declares no local array."""
    out: set[int] = set()
    for s in walk(body):
        values = literal_range(s) if id(s) in among else None
        if values is None:
            continue
        assert isinstance(s, For)
        inner = list(walk(s.body))
        if (
            len(values) <= UNROLLED_TRIPS
            and len(values) * len(inner) <= UNROLLED_STATEMENTS
            and s.var not in assigned(s.body)
            and not any(isinstance(x, (LocalArray, While)) for x in inner)
        ):
            out.add(id(s))
    return out


def owned_store_loops(body: list[Stmt], launch_index: str, kinds: dict[str, Kind]) -> set[int]:
    """id() of the ``for`` loops that ``unroll`` takes so that ``owned_loads_first`` reaches their elements:
    literal bounds, at most ``UNROLLED_OUTPUT_TRIPS`` iterations, storing into an array at an index of
    literals, the launch index and the loop's variable (``fs[0, k, i] = ...``: an adjoint reads those
    elements' seeds)."""
    out: set[int] = set()
    for s in walk(body):
        values = literal_range(s)
        if values is None or len(values) > UNROLLED_OUTPUT_TRIPS:
            continue
        assert isinstance(s, For)
        inner = list(walk(s.body))
        if (
            s.var in assigned(s.body)
            or len(values) * len(inner) > UNROLLED_OUTPUT_STATEMENTS
            or any(isinstance(x, (LocalArray, While, For)) for x in inner)
        ):
            continue
        if any(
            isinstance(x, Store)
            and not is_local(kinds, x.array)
            and Name(launch_index) in x.index
            and Name(s.var) in x.index
            and all(isinstance(e, Lit) or e in (Name(launch_index), Name(s.var)) for e in x.index)
            for x in inner
        ):
            out.add(id(s))
    return out


def unroll(body: list[Stmt], loops: set[int]) -> list[Stmt]:
    """``body`` with each loop whose id() is in ``loops`` replaced by a copy of its body per iteration, the
    loop variable replaced by the iteration's value (and left at the last one, as Python leaves it). An
    adjoint saves an unrolled iteration's values in variables where a loop's go to the tape."""
    out: list[Stmt] = []
    for s in body:
        values = literal_range(s) if id(s) in loops else None
        if values is None:
            out.append(map_blocks(s, lambda b: unroll(b, loops)) if blocks(s) else s)
            continue
        assert isinstance(s, For)
        inner = unroll(s.body, loops)
        for v in values:
            at = {s.var: Lit(v)}
            out += rewrite(inner, functools.partial(substitute, values=at), lambda n: n)
        if len(values):
            out.append(Assign(s.var, Lit(values[-1]), line=s.line))
    return out


def owned_loads_first(
    body: list[Stmt], launch_index: str, kinds: dict[str, Kind], types: dict[str, str], namer: Any
) -> list[Stmt]:
    """A CUDA kernel body with the first read of each element its iteration alone touches (``A[i]``,
    ``A[0, i]``: literals and the launch index) moved to the body's start, where the first access to that
    element is a read outside loops (a load, or the read of ``A[i] += v``, which becomes ``A[i] = a + v``).

    Such an element holds at the start what it holds at its first access, since nothing else writes it; but
    the compiler cannot move the load there itself, above stores and atomic adds into arrays that for all it
    knows overlap it, and a GPU thread that loads after its stores waits for them (an adjoint reads its
    seeds and adds into its inputs' shadows after its reverse sweep's scatters: docs/benchmarks.md, "Loads
    before stores"). Arrays accessed anywhere at another index are left alone, and so is a read under a
    branch unless every way through the body accesses the same element (the hoisted load must be in bounds).
    Indices are compared with the names that hold a literal or the launch index looked through (an inlined
    helper's copy of ``i``).
    """
    defs = definitions(body, launch_index, kinds)

    def canonical(index: tuple[Expr, ...]) -> tuple[Expr, ...]:
        values = [resolve(x, defs) for x in index]
        return tuple(
            v if isinstance(v, Lit) or v == Name(launch_index) else x
            for x, v in zip(index, values, strict=True)
        )

    def plain(index: tuple[Expr, ...]) -> bool:
        return (
            all(isinstance(x, Lit) or x == Name(launch_index) for x in index) and Name(launch_index) in index
        )

    accesses: list[tuple[Stmt, str, tuple[Expr, ...], bool, bool]] = []  # stmt, array, index, read, guarded

    def visit(stmts: list[Stmt], guarded: bool, looped: bool) -> None:
        for s in stmts:
            once = not looped and not isinstance(s, While)  # a ``while`` evaluates its test again
            for e in exprs_of(s):
                for x in elems_in(e):
                    accesses.append((s, x.array, canonical(x.index), once, guarded))
            if isinstance(s, Store):
                accesses.append((s, s.array, canonical(s.index), s.accumulate and not looped, guarded))
            if isinstance(s, If):
                visit(s.body, True, looped)
                visit(s.orelse, True, looped)
            elif blocks(s):
                for block in blocks(s):
                    visit(block, guarded, True)
            guarded = guarded or _may_leave(s)

    visit(body, False, False)
    kind = {a: kinds.get(a, kinds.get(base_name(a))) for _, a, _, _, _ in accesses}
    floats = {a for a, k in kind.items() if isinstance(k, ArrayKind) and not k.local and k.dtype.kind == "f"}
    # A thread adds into elements others share through the array's private name (``names.private``).
    candidates = {
        a
        for a in floats
        if not a.startswith(PRIVATE)
        and all(plain(ix) for _, b, ix, _, _ in accesses if b.removeprefix(PRIVATE) == a)
    }
    unconditional = _certain_elements(body, canonical)
    first: dict[tuple[str, tuple[Expr, ...]], tuple[Stmt, bool, bool]] = {}
    for s, a, ix, read, guarded in accesses:
        if a in candidates and (a, ix) not in first:
            first[(a, ix)] = (s, read, guarded)
    hoisted: dict[int, dict[tuple[str, tuple[Expr, ...]], str]] = {}
    loads: list[Stmt] = []
    for (a, ix), (s, read, guarded) in first.items():
        if not read or (guarded and (a, ix) not in unconditional):
            continue
        name = first_read(namer, Elem(a, ix))
        types[name] = element_type(kind[a])
        hoisted.setdefault(id(s), {})[(a, ix)] = name
        loads.append(Assign(name, Elem(a, ix)))
    if not loads:
        return body

    def replaced(e: Expr, names: dict[tuple[str, tuple[Expr, ...]], str]) -> Expr:
        if isinstance(e, Elem):
            key = (e.array, canonical(e.index))
            return (
                Name(names[key])
                if key in names
                else Elem(e.array, tuple(replaced(x, names) for x in e.index))
            )
        if isinstance(e, Call):
            return Call(e.op, tuple(replaced(x, names) for x in e.args))
        return e

    def transform(stmts: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            names = hoisted.get(id(s))
            if names is None:
                out.append(map_blocks(s, transform) if blocks(s) else s)
                continue
            own = functools.partial(replaced, names=names)  # the statement's own expressions, not its blocks'
            if isinstance(s, If):
                out.append(If(own(s.cond), transform(s.body), transform(s.orelse), line=s.line))
            elif isinstance(s, For):
                out.append(For(s.var, own(s.start), own(s.stop), own(s.step), transform(s.body), line=s.line))
            elif isinstance(s, Store) and s.accumulate and (s.array, canonical(s.index)) in names:
                start = Name(names[(s.array, canonical(s.index))])
                out.append(Store(s.array, s.index, call("add", start, own(s.value)), line=s.line))
            else:
                [new] = rewrite([s], own, lambda n: n)
                out.append(new)
        return out

    return loads + transform(body)


def _certain_elements(
    stmts: list[Stmt], canonical: Callable[[tuple[Expr, ...]], tuple[Expr, ...]]
) -> set[tuple[str, tuple[Expr, ...]]]:
    """The (array, index) elements every way through ``stmts`` accesses outside loops: both arms of an ``if``
    count where each does, and nothing from the first statement that may leave the body on."""
    out: set[tuple[str, tuple[Expr, ...]]] = set()
    for s in stmts:
        if _may_leave(s):
            break
        out |= {(x.array, canonical(x.index)) for e in exprs_of(s) for x in elems_in(e)}
        if isinstance(s, Store):
            out.add((s.array, canonical(s.index)))
        elif isinstance(s, If):
            out |= _certain_elements(s.body, canonical) & _certain_elements(s.orelse, canonical)
    return out


def _may_leave(s: Stmt) -> bool:
    """Whether ``s`` may end its block early (a ``return``, ``break`` or ``continue`` in it)."""
    return any(isinstance(x, (Return, Break, Continue)) for x in walk([s]))
