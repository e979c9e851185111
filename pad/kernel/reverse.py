"""Reverse mode of one kernel iteration: a forward sweep that saves what it must, then the adjoint sweep.

The scheme (Tapenade's, with recomputation of loop bodies):
- In a straight-line region, a statement that overwrites a variable the adjoint of an *earlier* statement
  still needs pushes the old value first; the reverse sweep pops it right after that statement's adjoint, so
  every adjoint statement sees the primal state of its own moment. The same holds for array elements that a
  recomputed loop body reloads (undo log).
- A loop whose body does not both load and store one array is *recomputed*: the forward sweep only pushes,
  per iteration, the few carried scalars the body's reverse needs (usually none), and the reverse sweep
  re-runs each iteration forward from them before its adjoint. Other loops *store*: their body saves its
  own overwritten values each iteration. ``while`` loops and loops left early push their trip count.
- A recomputed loop whose iterations commute (every scalar it carries a pure sum, no plain stores, nothing
  but the sums read after it) is reversed in forward order: its sums' adjoints stay as they are, and the
  adjoints of its temporaries start each iteration at zero, so iterations hand each other nothing but sums
  (GPU lanes may then share them).
- Branch decisions and loop bounds are ordinary variables, saved by the same rule when overwritten.
- An adjoint keeps a value saved outside every loop in a variable of its own, not on the tape; a
  CPU adjoint also keeps the values a recomputed loop's reverse reads (``keep_loops``), where that loop and
  the loops around it run a literal number of iterations, in small local arrays indexed by those iterations,
  where the cost rule of ``kept_values`` finds that cheaper than replaying the iteration for them.
Then the adjoint is tidied: additions of adjoints known to be zero go, what follows a branch and does
nothing where it is skipped (a zero adjoint's scatter past a cut-off) moves into it, and adjacent branches on
one condition merge. Dead code (forward values the reverse does not need) is removed last, stores into local
arrays included: element by element where indices are known at compile time (``optimize.dead_local_stores``),
which drops a recomputed loop's replay of values its reverse never reads.
"""

from __future__ import annotations

import collections
import copy
import functools
import itertools
import math
import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from pad.kernel.analysis import (
    FLOATS,
    NO_DEFINITIONS,
    Activity,
    Cover,
    Definitions,
    Extreme,
    carried_sums,
    exposed_under_guards,
    live_at_exits,
    liveness,
    only_sums_outlive,
    owned,
    running_extremes,
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
    Line,
    Lit,
    LocalArray,
    Name,
    Namer,
    Pop,
    Push,
    Return,
    Stmt,
    Store,
    While,
    arrays_in,
    assigned,
    blocks,
    call,
    elems_in,
    exprs_of,
    literal_range,
    loaded_arrays,
    map_blocks,
    names_in,
    scalar_type,
    stored_arrays,
    walk,
    without_stores,
)
from pad.kernel.names import ADJOINT, UNORDERED, adj, private
from pad.kernel.optimize import dead_local_stores
from pad.kernel.rules import COSTS, RULES

# A loop's values are kept (``Reverse.kept_values``) where it and the loops around it run at most this many
# iterations in all: each kept value's array then has as many slots, on the stack of a CPU launcher's chunk.
KEPT_SLOTS = 64


# A store's value and the statements serving it alone go under a branch on its seed (``seed_guards``) where
# they cost at least this many operations (``operations``): below it the branch costs what it saves.
SEED_GUARDED_OPERATIONS = 64


def seed_guards(body: list[Stmt], outputs: set[str], namer: Namer, types: dict[str, str]) -> list[Stmt]:
    """``body`` (a kernel iteration, for its adjoint) with each top-level store into an output, an active
    array the kernel stores once and never reads, moved under a branch on the output's seed being nonzero,
    together with the statements just before it whose values and local arrays only it reads.

    A zero seed adds nothing to any adjoint, so where it is zero the adjoint neither recomputes that slice
    nor runs its adjoint: LULESH's time-step constraints seed the strain rate and the characteristic length
    of one element each, and the kinematics' adjoint skips both for every other element. (Where the slice's
    partial derivatives are infinite, a zero seed so gives zero, not the NaN of ``0 * inf``.)"""
    writes = collections.Counter(x.array for x in walk(body) if isinstance(x, (Store, Fill)))
    local = {x.target for x in walk(body) if isinstance(x, LocalArray)}
    out = list(body)
    k = len(out)
    while k > 0:
        k -= 1
        s = out[k]
        if not (isinstance(s, Store) and not s.accumulate and s.array in outputs and writes[s.array] == 1):
            continue
        after = _reads(out[k + 1 :])
        start = k
        while start > 0 and _serves_only(out[start - 1], local, after):
            start -= 1
        sliced = out[start:k]
        if operations([*sliced, s]) < SEED_GUARDED_OPERATIONS or any(
            n in assigned(sliced) for e in s.index for n in names_in(e)
        ):
            continue
        out[start : k + 1] = _seeded(Elem(adj(s.array), s.index), [*sliced, s], namer, types, s.line)
        k = start
    return out


# An iteration goes under a branch on its outputs' seeds (``iteration_guard``) where it stores at most this
# many output elements (the branch loads each seed once more) and has a loop or costs at least
# SEED_GUARDED_OPERATIONS: a short adjoint without loops, which LLVM may vectorize, stays as it is.
SEED_GUARDED_ELEMENTS = 64


def iteration_guard(
    body: list[Stmt],
    covers: Mapping[str, Cover],
    outputs: set[str],
    stored: set[str],
    launch_index: str,
    namer: Namer,
    types: dict[str, str],
) -> list[Stmt]:
    """``body`` (a kernel iteration, for its adjoint) under a branch on any of its outputs' seeds being
    nonzero, where ``stored``, the active global arrays it stores into, are all ``outputs`` that it stores
    over a box of elements per launch index (``covers``): with all of an iteration's seeds zero, its adjoint
    adds nothing, and skips the iteration (LULESH's early Sedov cycles: the elements at rest, most of the
    mesh, have zero seeds, their velocities' adjoints cut below U_CUT). A NaN seed counts as nonzero."""
    if not stored or not stored <= outputs or any(a not in covers for a in stored):
        return body
    looped = any(isinstance(x, (For, While)) for x in walk(body))
    if not looped and operations(body) < SEED_GUARDED_OPERATIONS:
        return body
    parts: list[tuple[Cover, list[Expr]]] = []
    for a in sorted(stored):
        c = covers[a]
        at = Name(launch_index) if c.offset == 0 else call("add", Name(launch_index), Lit(c.offset))
        axes = [range(e) if d != c.axis else range(1) for d, e in enumerate(c.extents)]
        points = itertools.product(*axes)
        parts.append(
            (c, [Elem(adj(a), tuple(at if d == c.axis else Lit(k) for d, k in enumerate(p))) for p in points])
        )
    seeds = [e for _, elements in parts for e in elements]
    if len(seeds) > SEED_GUARDED_ELEMENTS:
        return body
    zero = Lit(0.0, typed=True)
    terms = []
    for c, elements in parts:  # one seed is nonzero as it is, several where the sum of their sizes is
        part = elements[0] if len(seeds) == 1 else _sum([call("abs", e) for e in elements])
        for name, value in c.given:  # stored only when a scalar parameter has this truth value
            part = call("select", Name(name), part, zero) if value else call("select", Name(name), zero, part)
        terms.append(part)
    return _seeded(_sum(terms), body, namer, types, None)


def _sum(terms: list[Expr]) -> Expr:
    return functools.reduce(lambda x, y: call("add", x, y), terms)


def _seeded(
    seed: Expr, stmts: list[Stmt], namer: Namer, types: dict[str, str], line: Line | None
) -> list[Stmt]:
    """``stmts`` under a branch on ``seed`` (a seed, or a sum of seeds' sizes) being nonzero."""
    seeded = namer.fresh("seeded")
    types[seeded] = "b"
    return [
        Assign(seeded, call("ne", seed, Lit(0.0, typed=True)), line=line),
        If(Name(seeded), stmts, [], line=line),
    ]


def _reads(stmts: list[Stmt]) -> set[str]:
    """The variables and arrays ``stmts`` read."""
    return {n for x in walk(stmts) for n in _names(x)} | loaded_arrays(stmts)


def _serves_only(s: Stmt, local: set[str], after: set[str]) -> bool:
    """Whether ``s`` writes (or declares) nothing but variables and local arrays that ``after`` does not read."""
    inner = list(walk([s]))
    if any(isinstance(x, (Push, Pop, Break, Continue, Return)) for x in inner):
        return False
    made = stored_arrays([s]) | {x.target for x in inner if isinstance(x, LocalArray)}
    return made <= local and not ((assigned([s]) | made) & after)


@dataclass
class Reverse:
    """Builds the adjoint sweep of a kernel body (statements of one launch index)."""

    body: list[Stmt]
    kinds: dict[str, Kind]
    types: dict[str, str]
    act: Activity
    launch_index: str
    namer: Namer
    privatized: set[str]  # global arrays whose adjoint accumulates at shared indices
    defs: Definitions = NO_DEFINITIONS  # what index ownership may look through
    recompute: set[int] = field(default_factory=set)  # id() of loops reversed by recomputation
    undo: set[str] = field(default_factory=set)  # arrays whose overwritten elements are saved
    saving: set[int] = field(default_factory=set)  # id() of the stores into them that save the old value
    forward: list[Stmt] = field(default_factory=list)  # the forward sweep, as built by ``sweep``
    # Fused (primal + adjoint in one launch): output stores that follow a loop accumulating their values
    # are made again after the loop's reverse, which rebuilds the sums; ``moved`` holds their id()s.
    fused: bool = False
    # Arrays each iteration stores once at its own element, never read (``overwritten_arrays``): the CPU
    # launcher clears their seeds after its loop (clearing each in the loop, between the adjoint's loads and
    # stores to arrays of the same size, stalls on 4 KiB aliasing: docs/benchmarks.md, "In the code").
    cleared: frozenset[str] = frozenset()
    droppable: set[str] = field(default_factory=set)
    moved: set[int] = field(default_factory=set)
    remade: set[int] = field(default_factory=set)  # id()s of their copies in the reverse sweep
    rebuilding: frozenset[str] = frozenset()  # sums an enclosing loop's reverse is rebuilding
    # Pure accumulators of enclosing order-free loops: ``v = v + w`` leaves v's adjoint as it was, so their
    # updates' adjoints neither clear nor add to it (it then stays the same value through the reverse loop).
    steady: frozenset[str] = frozenset()
    tails: dict[int, list[Stmt]] = field(default_factory=dict)
    # id() of a recomputed loop's forward copy -> (scalars pushed per iteration, the body's own forward sweep)
    replays: dict[int, tuple[int, list[Stmt]]] = field(default_factory=dict)
    # Saves outside loops go to variables (``save``), but in a replayed loop body (``kept_values``); CPU
    # adjoints keep a recomputed loop's values in small local arrays, where CUDA ones would spend local memory.
    keep: bool = True
    keep_loops: bool = False
    enclosing: list[For | While] = field(default_factory=list)  # the loops being transformed, outermost first
    kept_arrays: dict[str, LocalArray] = field(default_factory=dict)  # the local arrays of kept values
    keep_stores: set[int] = field(default_factory=set)  # id() of the forward sweep's stores into them
    # id() is unique only among live objects: a statement this pass makes and drops would hand its id to the
    # next one made. Every object whose id() the tables above hold stays here while the pass lives.
    _keyed: list[object] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._choose_loop_modes()
        self.unobserved = _unobserved_stores(self.body)
        self._fresh: dict[tuple[int, str], str] = {}
        self._exits = live_at_exits(self.body)

    def fresh(self, s: Stmt, role: str, ty: str) -> str:
        """A generated variable for ``role`` at statement ``s``: the same name every time ``s`` is revisited."""
        key = (self.key(s), role)
        if key not in self._fresh:
            self._fresh[key] = self.namer.fresh(role)
            self.types[self._fresh[key]] = ty
        return self._fresh[key]

    def key(self, x: object) -> int:
        """``id(x)``, with ``x`` kept alive as long as this pass so that no other object takes its id."""
        self._keyed.append(x)
        return id(x)

    # -- loop modes ------------------------------------------------------------------------------------
    def _choose_loop_modes(self) -> None:
        """Recompute every loop whose body does not load what it stores and makes no store that must save
        its old value (one a recomputed loop may read again: ``_stores_to_save``)."""
        loops = [s for s in walk(self.body) if isinstance(s, (For, While))]
        candidates = {id(s) for s in loops if not (loaded_arrays(_loop_code(s)) & stored_arrays(s.body))}
        while True:
            undo = set().union(*(loaded_arrays(_loop_code(s)) for s in loops if id(s) in candidates))
            saving = _stores_to_save(self.body, candidates, undo)
            demoted = {
                id(s) for s in loops if id(s) in candidates and any(id(x) in saving for x in walk(s.body))
            }
            if not demoted:
                break
            candidates -= demoted
        self.recompute, self.undo, self.saving = candidates, undo, saving

    # -- entry point -----------------------------------------------------------------------------------
    def sweep(self, live_out: set[str], droppable: set[str]) -> list[Stmt]:
        """Forward sweep followed by the adjoint sweep, with dead code removed.

        Stores to ``droppable`` arrays (those the kernel never reads) are left out: the primal launch
        already made them, and the reverse sweep needs none of their values.
        """
        self.droppable = droppable
        fwd, rev = self.region(self.body, set())
        self.forward = fwd
        if self.fused:  # the forward sweep still makes the outputs that no reverse loop makes again
            code = _drop_ids(fwd, self.moved) + without_stores(rev, droppable, keep=self.remade)
        else:
            code = without_stores(fwd + rev, droppable)
        # Every adjoint scalar starts a launch index at zero.
        zeros = {n for x in walk(code) for n in _names(x) | assigned([x]) if n.startswith(ADJOINT)}
        shapes = {x.target: x.shape for x in walk(self.body) if isinstance(x, LocalArray)}
        shadows = {adj(a): shape for a, shape in shapes.items() if a in self.act.arrays}
        zeros |= {_element_name(a, at) for a, shape in shadows.items() for at in np.ndindex(*shape)}
        code, _ = liveness(
            _merge_ifs(_fold_zero_adds(code, zeros, frozenset(shadows))[0]), live_out, prune=True
        )
        # Stores into local arrays that nothing reads again go, then what only they read, until none is left.
        shapes = self.local_shapes()
        while True:
            smaller, _ = liveness(dead_local_stores(code, shapes), live_out, prune=True)
            if _count(smaller) == _count(code):
                break
            code = smaller
        return _adds_over_zeros(_drop_idle_saves(code))

    # -- regions ---------------------------------------------------------------------------------------
    def region(self, stmts: list[Stmt], need_in: set[str]) -> tuple[list[Stmt], list[Stmt]]:
        """(forward code with pushes, reverse code with pops) of a statement list.

        ``need_in`` holds the variables whose current values the reverse of code *before* this region
        needs; a statement that overwrites one of them saves it first.
        """
        need = set(need_in)
        fwd: list[Stmt] = []
        revs: list[list[Stmt]] = []
        if self.fused:
            self._find_tails(stmts)
        for s in stmts:
            f, r = self.stmt(s, need)
            saved = sorted(assigned(f) & need) if not isinstance(s, If) else []
            save, restore = self.save(s, saved)
            fwd += save + f
            revs.append(r + restore)
            need |= liveness(r, set(), prune=False)[1]
        rev = [x for r in reversed(revs) for x in r]
        return fwd, rev

    def _find_tails(self, stmts: list[Stmt]) -> None:
        """Output stores (plain, of a scalar, to an array the kernel never reads; alone or in ``if``s) that
        follow an order-free loop in ``stmts``, with nothing in between changing their names: ``tails``."""
        for k, loop in enumerate(stmts):
            if not (isinstance(loop, For) and id(loop) in self.recompute):
                continue
            tail: list[Stmt] = []
            changed: set[str] = set()
            for s in stmts[k + 1 :]:
                stores = [x for x in walk([s]) if isinstance(x, Store)]
                only_outputs = all(
                    not x.accumulate and x.array in self.droppable and isinstance(x.value, Name)
                    for x in stores
                )
                if stores and only_outputs and all(not isinstance(x, (For, While)) for x in walk([s])):
                    used = {n for x in stores for e in (*x.index, x.value) for n in names_in(e)}
                    if not (used & changed) and not assigned([s]):
                        tail.append(s)
                        continue
                changed |= assigned([s])
            if tail:
                self.tails[id(loop)] = tail

    def stack_kind(self, name: str) -> str:
        return "f" if self.types[name] in FLOATS else "i"

    def save(self, s: Stmt, names: list[str]) -> tuple[list[Stmt], list[Stmt]]:
        """(forward, reverse) code that saves ``names`` before statement ``s`` and restores them after its
        adjoint. Inside a loop the values go on the tape (an iteration's save is restored by the same
        iteration's reverse, in last-in first-out order); outside every loop each save runs at most once per
        launch index, and the adjoint keeps it in a variable of its own, which the compiler keeps in a
        register, where a tape slot is memory it must store and load again."""
        if self.enclosing or not self.keep:
            push: list[Stmt] = [Push(Name(v), self.stack_kind(v), line=s.line) for v in names]
            return push, [Pop(v, self.stack_kind(v), self.types[v], line=s.line) for v in reversed(names)]
        kept = {v: self.fresh(s, _kept_stem(v), self.types[v]) for v in names}
        return (
            [Assign(kept[v], Name(v), line=s.line) for v in names],
            [Assign(v, Name(kept[v]), line=s.line) for v in reversed(names)],
        )

    # -- statements ------------------------------------------------------------------------------------
    def stmt(self, s: Stmt, need: set[str]) -> tuple[list[Stmt], list[Stmt]]:
        if isinstance(s, Assign):
            return [s], self.assign_adjoint(s)
        if isinstance(s, Store):
            return self.store(s)
        if isinstance(s, If):
            fb, rb = self.region(s.body, need)
            fo, ro = self.region(s.orelse, need)
            return [If(s.cond, fb, fo, line=s.line)], ([If(s.cond, rb, ro, line=s.line)] if rb or ro else [])
        if isinstance(s, LocalArray):
            rev: list[Stmt] = (
                [Fill(adj(s.target), Lit(0.0, typed=True))] if s.target in self.act.arrays else []
            )
            return [s], rev
        if isinstance(s, (For, While)):
            return self.loop(s, need)
        raise AssertionError(f"unexpected statement {s}")

    def assign_adjoint(self, s: Assign) -> list[Stmt]:
        t = s.target
        if t not in self.act.scalars:
            return []
        # An update of a pure accumulator leaves its adjoint as it was: neither clear it nor add to it.
        zero: list[Stmt] = [] if t in self.steady else [Assign(adj(t), Lit(0.0, typed=True), line=s.line)]
        value = s.value
        if isinstance(value, Elem):
            if value.array not in self.act.arrays:
                return zero
            shadow = self.shadow(value.array, value.index)
            return [Store(shadow, value.index, Name(adj(t)), accumulate=True, line=s.line), *zero]
        if not isinstance(value, Call) or RULES[value.op].partials is None:
            return zero
        # Read the result's adjoint once, and clear it, before accumulating into the arguments' adjoints
        # (an argument may be the target itself).
        g = self.fresh(s, "g", self.types[t])
        out: list[Stmt] = [Assign(g, Name(adj(t)), line=s.line), *zero]
        partials = RULES[value.op].partials(Name(t), *value.args)  # type: ignore[misc]
        for arg, partial in zip(value.args, partials, strict=True):
            if partial is not None and self.act.expr(arg):
                assert isinstance(arg, Name)
                if arg.id in self.steady:
                    continue
                contribution = call("mul", Name(g), partial)
                out.append(Assign(adj(arg.id), call("add", Name(adj(arg.id)), contribution), line=s.line))
        return out

    def shadow(self, array: str, index: tuple[Expr, ...]) -> str:
        """The shadow array an adjoint accumulates into: the thread's private buffer where indices are shared."""
        if array in self.privatized and not owned(index, self.launch_index, self.defs):
            return private(adj(array))
        return adj(array)

    def store(self, s: Store) -> tuple[list[Stmt], list[Stmt]]:
        fwd: list[Stmt] = []
        rev: list[Stmt] = []
        # A store nothing reads again (``unobserved``) the primal launch made: a non-fused adjoint leaves it
        # out with its save and restore (the array keeps the value a replayed earlier loop reads). A fused
        # adjoint makes the primal's outputs, so it stores.
        made = not self.fused and id(s) in self.unobserved
        if s.array in self.act.arrays:
            if self.act.expr(s.value):
                assert isinstance(s.value, Name)
                rev.append(
                    Assign(
                        adj(s.value.id),
                        call("add", Name(adj(s.value.id)), Elem(adj(s.array), s.index)),
                        line=s.line,
                    )
                )
            if not s.accumulate and s.array not in self.cleared:
                rev.append(Store(adj(s.array), s.index, Lit(0.0, typed=True), line=s.line))
        if made:
            return fwd, rev
        if id(s) in self.saving:
            kind = self.kinds[s.array]
            assert isinstance(kind, ArrayKind)
            old = self.fresh(s, "old", scalar_type(kind.dtype))
            stack = "f" if self.types[old] in FLOATS else "i"
            if self.enclosing or not self.keep:  # as ``save`` does
                fwd.append(Push(Elem(s.array, s.index), stack, line=s.line))
                rev.append(Pop(old, stack, self.types[old]))
            else:
                fwd.append(Assign(old, Elem(s.array, s.index), line=s.line))
            rev.append(Store(s.array, s.index, Name(old), line=s.line))
        fwd.append(s)
        return fwd, rev

    # -- loops -----------------------------------------------------------------------------------------
    def loop(self, s: For | While, need: set[str]) -> tuple[list[Stmt], list[Stmt]]:
        self.enclosing.append(s)
        try:
            return self._loop(s, need)
        finally:
            self.enclosing.pop()

    def _loop(self, s: For | While, need: set[str]) -> tuple[list[Stmt], list[Stmt]]:
        extremes = running_extremes(s) if isinstance(s, For) else None
        if isinstance(s, For) and extremes and any(x.m in self.act.scalars for x in extremes):
            code = self.extreme(s, extremes)
            if code is not None:
                return code
        k = self.fresh(s, "k", "i")
        if isinstance(s, For):
            trip = self.fresh(s, "trip", "i")
            count: list[Stmt] = [Assign(trip, Call("tripcount", (s.start, s.stop, s.step)), line=s.line)]
            set_var: list[Stmt] = [
                Assign(s.var, call("add", s.start, call("mul", Name(k), s.step)), line=s.line)
            ]
        else:
            trip = self.fresh(s, "n", "i")
            count, set_var = [], []
        replay: list[Stmt] = []
        rebuilt: list[str] = []
        sums: set[str] | None = None
        if id(s) in self.recompute:
            fwd_body, rev_body, replay = self.recomputed(s)
            sums = self.order_free(s, rev_body) if isinstance(s, For) else None
            if isinstance(s, For) and sums is not None:
                rebuilt = self._rebuildable(s, sums)
                outer = self.rebuilding, self.steady
                # Loops inside rebuild the same sums (else the replay would run them forward too).
                self.rebuilding, self.steady = self.rebuilding | set(rebuilt), self.steady | sums
                try:
                    fwd_body, rev_body, replay = self.recomputed(s, rebuilt)
                finally:
                    self.rebuilding, self.steady = outer
                rev_body = self.cleared_adjoints(s, sums, rev_body) + rev_body
        else:
            fwd_body, rev_body = self.stored(s, need)
        backwards = For(k, call("sub", Name(trip), Lit(1)), Lit(-1), Lit(-1), set_var + rev_body, line=s.line)
        if isinstance(s, For) and sums is not None:
            # Iterations' adjoints commute here: run them in forward order, which numba can vectorize
            # (and a GPU may start each warp at a different iteration: the UNORDERED name says so).
            free = self.fresh(s, UNORDERED[1:], "i")  # the namer adds the leading underscore
            set_var = [Assign(s.var, call("add", s.start, call("mul", Name(free), s.step)), line=s.line)]
            backwards = For(free, Lit(0), Name(trip), Lit(1), set_var + rev_body, line=s.line)
        if isinstance(s, For):
            forward: For | While = For(s.var, s.start, s.stop, s.step, fwd_body, line=s.line)
            before: list[Stmt] = []
        else:
            bump = Assign(trip, call("add", Name(trip), Lit(1)), line=s.line)
            forward = While(s.test, s.cond, [*fwd_body, bump], line=s.line)
            before = [Assign(trip, Lit(0), line=s.line)]
        if id(s) in self.recompute:
            self.replays[self.key(forward)] = (sum(isinstance(x, Push) for x in fwd_body), replay)
        rev: list[Stmt] = [*count, backwards] if isinstance(s, For) else [backwards]
        if rebuilt:
            # The reverse loop runs the iterations in forward order and redoes the sums from their values
            # before the loop (saved once): then the output stores that follow the loop are made again.
            save = [Push(Name(v), self.stack_kind(v), line=s.line) for v in rebuilt]
            restore = [Pop(v, self.stack_kind(v), self.types[v], line=s.line) for v in reversed(rebuilt)]
            if not set(rebuilt) <= self.rebuilding:
                tail = self.tails[id(s)]
                self.moved |= {id(x) for x in walk(tail) if isinstance(x, Store)}
            else:
                tail = []
            remade = copy.deepcopy(tail)
            self.remade |= {self.key(x) for x in walk(remade) if isinstance(x, Store)}
            return [*before, *save, forward], [*restore, *rev, *remade]
        return [*before, forward], rev

    def extreme(self, s: For, extremes: list[Extreme]) -> tuple[list[Stmt], list[Stmt]] | None:
        """Running maxima/minima ``m = max(m, e)`` (:func:`running_extremes`) push nothing per iteration.

        The forward records, where each ``m`` is updated, the iteration that set it last (``win``; -1: its
        value before the loop) and how many values tie with the result (``ties``, that one included). The
        reverse replays, for each ``m``, iteration ``win`` alone, with ``e``'s adjoint seeded where the update
        was; at a tie it replays every iteration and shares ``m``'s adjoint evenly among the tied values, as
        JAX's max does (for two values this is the 0.5 each of ``max``'s own partial). The replayed body has
        each update replaced by ``u = e; hit = True``, so that the seed reaches ``e`` through the branches
        the update sits in. Where ``m``'s adjoint is zero neither replay runs. None where the replay would
        push (the general reversal then applies).
        """
        active = [x for x in extremes if x.m in self.act.scalars]
        u = {x.m: self.fresh(s, f"u{x.m}", self.types[x.m]) for x in active}
        hit = {x.m: self.fresh(s, f"hit{x.m}", "b") for x in active}
        win = {x.m: self.fresh(s, f"win{x.m}", "i") for x in active}
        ties = {x.m: self.fresh(s, f"ties{x.m}", "i") for x in active}
        self.act.scalars.update(u.values())
        updates = {x.update: x for x in active}

        def track(x: Extreme) -> Stmt:
            better = call("gt" if x.op == "max" else "lt", Name(x.e), Name(x.m))
            tie = If(
                call("eq", Name(x.e), Name(x.m)),
                [Assign(ties[x.m], call("add", Name(ties[x.m]), Lit(1)))],
                [],
            )
            return If(better, [Assign(win[x.m], Name(s.var)), Assign(ties[x.m], Lit(1))], [tie], line=s.line)

        def rebuilt(stmts: list[Stmt], replay: bool) -> list[Stmt]:
            """``stmts`` with each update tracked (forward) or replaced by ``u = e; hit = True`` (replay)."""
            out: list[Stmt] = []
            skip = False
            for x in stmts:
                if skip:
                    skip = False
                elif id(x) in updates:
                    e = updates[id(x)]
                    if replay:
                        out += [Assign(u[e.m], call("copy", Name(e.e))), Assign(hit[e.m], Lit(True))]
                        skip = True  # the copy ``m = t`` goes too
                    else:
                        out += [track(e), x]
                elif isinstance(x, If):
                    out.append(If(x.cond, rebuilt(x.body, replay), rebuilt(x.orelse, replay), line=x.line))
                else:
                    out.append(x)
            return out

        replay = [*(Assign(h, Lit(False)) for h in hit.values()), *rebuilt(s.body, True)]
        # The forward below runs the body as written, storing no kept value: no loop inside keeps any.
        kept, self.keep, self.keep_loops = (self.keep, self.keep_loops), False, False
        try:
            f_rep, r_rep = self.region(replay, set())
        finally:
            self.keep, self.keep_loops = kept
        if any(isinstance(x, (Push, Pop)) for x in walk(f_rep + r_rep)):
            return None
        forward: list[Stmt] = [
            *(Assign(win[x.m], Lit(-1), line=s.line) for x in active),
            *(Assign(ties[x.m], Lit(1), line=s.line) for x in active),
            For(s.var, s.start, s.stop, s.step, rebuilt(s.body, False), line=s.line),
        ]
        zero = Lit(0.0, typed=True)
        reverse: list[Stmt] = []
        for x in active:
            bar_m, ty = Name(adj(x.m)), self.types[x.m]
            share = self.fresh(s, f"share{x.m}", ty)
            others = [Assign(adj(u[y.m]), zero) for y in active if y is not x]
            alone = [
                Assign(s.var, Name(win[x.m]), line=s.line),
                *f_rep,
                *others,
                Assign(adj(u[x.m]), bar_m, line=s.line),
                Assign(adj(x.m), zero, line=s.line),
                *r_rep,
            ]
            tied_here = call("and", Name(hit[x.m]), call("eq", Name(u[x.m]), Name(x.m)))
            shared = [
                Assign(share, call("div", bar_m, Call("f4" if ty == "f4" else "f8", (Name(ties[x.m]),)))),
                Assign(adj(x.m), call("select", call("lt", Name(win[x.m]), Lit(0)), Name(share), zero)),
                For(
                    s.var,
                    s.start,
                    s.stop,
                    s.step,
                    [
                        *f_rep,
                        *others,
                        Assign(adj(u[x.m]), call("select", tied_here, Name(share), zero)),
                        *r_rep,
                    ],
                    line=s.line,
                ),
            ]
            one = call("eq", Name(ties[x.m]), Lit(1))
            back = If(one, [If(call("ge", Name(win[x.m]), Lit(0)), alone, [])], shared, line=s.line)
            # A zero adjoint (a reduction's losing chunk) has nothing to pass on: no replay, and at a tie no
            # second pass over the loop (its adjoint stays zero, as passing it on would leave it).
            reverse.append(If(call("ne", bar_m, zero), [back], [], line=s.line))
        return forward, reverse

    def order_free(self, s: For, rev_body: list[Stmt]) -> set[str] | None:
        """Can the reverse iterations of a recomputed loop run in any order? Then the carried sums, else None.

        Yes when an iteration's reverse pops nothing (nothing carried), the body writes no array element
        plainly (only ``+=``, whose adjoint reads a shadow it does not change), every scalar carried from
        one iteration to the next is a pure accumulator (:func:`carried_sums`), and no other value the body
        assigns is read after the loop (its adjoint belongs to the last iteration alone): then the adjoint
        of each carried scalar is the same in every iteration, and the iterations' contributions to the
        other adjoints are sums, which commute.
        """
        if any(isinstance(x, Pop) for x in rev_body):
            return None
        if any(isinstance(x, Store) and not x.accumulate for x in walk(s.body)):
            return None
        sums = carried_sums(s)
        after = self._exits.get(id(s))  # None: a loop this pass made, not the kernel's (never order-free)
        if sums is None or after is None or not only_sums_outlive(s, sums, after):
            return None
        return sums

    def cleared_adjoints(self, s: For, sums: set[str], rev_body: list[Stmt]) -> list[Stmt]:
        """Zero, at the start of each reverse iteration of order-free loop ``s``, the adjoints of the values
        the body makes (but its sums). They are zero there anyway (each iteration's reverse clears them at
        the values' definitions, and :meth:`order_free` rules out reads after the loop); saying so shows
        that no iteration passes them to the next, so GPU lanes can share the iterations."""
        used = {n for x in walk(rev_body) for n in _names(x) | assigned([x])}
        made = assigned(s.body) - sums - {s.var}
        zero = Lit(0.0, typed=True)
        return [Assign(adj(v), zero, line=s.line) for v in sorted(made & self.act.scalars) if adj(v) in used]

    def _rebuildable(self, s: For, sums: set[str]) -> list[str]:
        """The sums an order-free loop's reverse can rebuild for the output stores that follow it (fused)."""
        if not self.fused:
            return []
        if sums & self.rebuilding:
            return sorted(sums & self.rebuilding)
        if id(s) not in self.tails:
            return []
        stored = {
            x.value.id for x in walk(self.tails[id(s)]) if isinstance(x, Store) and isinstance(x.value, Name)
        }
        return sorted(stored) if stored <= sums else []

    def depth(self, result: str, launch_index: str) -> list[Stmt]:
        """Code computing an upper bound of this iteration's stack depth into ``result[launch_index]``.

        The forward sweep runs with each push replaced by a count. In the reverse sweep a recomputed loop
        re-runs one iteration's forward sweep at a time, on top of what the forward sweep left: so its
        deepest replay is added to the count. The code runs before the adjoint kernel on GPUs, whose tape
        is preallocated (``Push`` statements are not allowed to grow it).
        """
        count, deepest = self.namer.fresh("depth"), self.namer.fresh("deepest")
        for v in (count, deepest):
            self.types[v] = "i"
        code = [
            Assign(count, Lit(0)),
            Assign(deepest, Lit(0)),
            *self._counted(self.forward, count, deepest),
            Store(result, (Name(launch_index),), call("add", Name(count), Name(deepest))),
        ]
        arrays = {p for p, k in self.kinds.items() if isinstance(k, ArrayKind) and not k.local}
        return liveness(without_stores(code, arrays), set(), prune=True)[0]

    def static_depth(self) -> int | None:
        """``depth``'s bound when it is the same for every launch index: every loop that pushes (or replays
        pushes) runs a literal number of times. ``None`` otherwise. CPU launchers then allocate each
        chunk's stack once at this size and push without checking for room."""
        try:
            count, deepest = self._static(self.forward)
        except _Dynamic:
            return None
        return count + deepest

    def _static(self, stmts: list[Stmt]) -> tuple[int, int]:
        """``_counted`` evaluated at compile time: (pushes, deepest replay on top of them)."""
        count = deepest = 0
        for s in stmts:
            if isinstance(s, Push):
                count += 1
            elif isinstance(s, If):
                (a, da), (b, db) = self._static(s.body), self._static(s.orelse)
                count, deepest = count + max(a, b), max(deepest, da, db)
            elif isinstance(s, (For, While)):
                if not any(isinstance(x, Push) for x in walk(s.body)) and id(s) not in self.replays:
                    continue
                trips = _trips(s)
                if id(s) in self.replays:
                    carried, replay = self.replays[id(s)]
                    inner = sum(self._static(replay))
                    count, deepest = count + trips * carried, max(deepest, inner if trips else 0)
                else:
                    inner, inner_deepest = self._static(s.body)
                    count, deepest = count + trips * inner, max(deepest, inner_deepest)
        return count, deepest

    def _counted(self, stmts: list[Stmt], count: str, deepest: str) -> list[Stmt]:
        out: list[Stmt] = []
        for s in stmts:
            if isinstance(s, Push):
                out.append(Assign(count, call("add", Name(count), Lit(1))))
            elif isinstance(s, (For, While)) and id(s) in self.replays:
                carried, replay = self.replays[id(s)]
                inner, inner_deepest = self.namer.fresh("depth"), self.namer.fresh("deepest")
                self.types[inner] = self.types[inner_deepest] = "i"
                body = [
                    Assign(count, call("add", Name(count), Lit(carried))),
                    Assign(inner, Lit(0)),
                    Assign(inner_deepest, Lit(0)),
                    *self._counted(replay, inner, inner_deepest),
                    Assign(
                        deepest, call("max", Name(deepest), call("add", Name(inner), Name(inner_deepest)))
                    ),
                ]
                if isinstance(s, For):
                    out.append(For(s.var, s.start, s.stop, s.step, body, line=s.line))
                else:  # keep the trip-count bump that ends the forward body
                    out.append(While(s.test, s.cond, [*body, s.body[-1]], line=s.line))
            else:
                out.append(map_blocks(s, lambda b: self._counted(b, count, deepest)))
        return out

    def recomputed(
        self, s: For | While, rebuilt: list[str] | None = None
    ) -> tuple[list[Stmt], list[Stmt], list[Stmt]]:
        """Forward: push the carried scalars the iteration's reverse needs. Reverse: pop, re-run, adjoint.

        ``rebuilt``: sums the reverse redoes (fused launches); they flow through the reverse iterations like
        adjoints instead of being carried. Also returns the iteration's forward sweep that the reverse
        re-runs (for ``depth``).
        """
        f, r = self.region(s.body, set())
        # Adjoints flow from one reverse iteration to the next and out of the loop: they stay live. Primal
        # values do not: the next iteration pops, recomputes or reloads its own.
        adjoints = {n for x in walk(r) for n in _names(x) | assigned([x]) if n.startswith(ADJOINT)}
        sums = set(rebuilt or ())
        written = assigned(s.body) - ({s.var} if isinstance(s, For) else set()) - sums
        # The replay makes no stores: the body loads no array it stores (else it would not be recomputed), and
        # the reverse of earlier code loads none of them either (a later store into an array that an earlier
        # recomputed loop loads saves the old value, which makes the loop around it a stored one).
        replay = _drop_all_stores(f)
        kept = self.kept_values(s, replay, r, adjoints | sums, written)
        loads = {v: Elem(array, self.iteration()) for v, array in kept.items()}
        again, live = liveness(_loading(replay, loads) + r, adjoints | sums, prune=True)
        carried = sorted(live & written & exposed_under_guards(again))
        push = [Push(Name(v), self.stack_kind(v), line=s.line) for v in carried]
        pop = [Pop(v, self.stack_kind(v), self.types[v], line=s.line) for v in reversed(carried)]
        stores = [Store(array, self.iteration(), Name(v), line=s.line) for v, array in kept.items()]
        self.keep_stores |= {self.key(x) for x in stores}
        if stores or any(id(x) in self.keep_stores for x in walk(f)):
            # The forward sweep runs the iteration as the replay does, storing what this loop and the loops
            # inside keep (the pushes are the replay's: it pops them again).
            return push + _drop_pushes(f) + stores, pop + again, f
        return push + s.body, pop + again, f

    # -- values kept instead of recomputed ------------------------------------------------------------------
    def kept_values(
        self, s: For | While, replay: list[Stmt], reverse: list[Stmt], live_out: set[str], written: set[str]
    ) -> dict[str, str]:
        """The values an iteration's reverse reads that a CPU adjoint keeps, each in a small local array
        (returned by value: its array) indexed by the iterations of ``s`` and the loops around it, instead of
        recomputing them from the replayed iteration.

        Only where every one of those loops is a ``for`` with literal bounds (``KEPT_SLOTS`` iterations at
        most in all) that leaves its variable alone, so that each iteration has its own slot and the forward
        sweep stores it once. The cost rule: a set of kept values costs, per iteration, a store each in the
        forward sweep and a load each in the reverse; it saves the replay's operations (arithmetic, loads,
        stores, tape pops; ``operations``) that nothing needs once the values are loaded. Starting from every candidate
        (floating-point values the reverse reads, assigned in the body), a value is dropped while dropping
        it costs nothing more, so what is kept saves more than it costs.
        """
        if not self.keep_loops or not self.enclosing or self.enclosing[-1] is not s:
            return {}
        slots = self.slots()
        if not slots or math.prod(slots) > KEPT_SLOTS:
            return {}
        reads = liveness(reverse, set(), prune=False)[1]
        candidates = sorted(v for v in reads & written if self.types.get(v) in FLOATS)
        if not candidates:
            return {}

        def cost(kept: list[str]) -> int:
            loads = {v: Elem(v, ()) for v in kept}  # a load each (the array's name does not matter)
            code = _loading(replay, loads) + reverse
            return operations(liveness(code, live_out, prune=True)[0]) + len(kept)

        kept = list(candidates)
        best = cost(kept)
        for v in candidates:
            fewer = [u for u in kept if u != v]
            if cost(fewer) <= best:
                kept, best = fewer, cost(fewer)
        if best >= cost([]):
            return {}
        out = {}
        for v in kept:
            key = (self.key(s), f"kept array of {v}")
            if key not in self._fresh:
                self._fresh[key] = self.namer.fresh(_kept_stem(v))
            array = self._fresh[key]
            dtype = np.dtype(np.float32 if self.types[v] == "f4" else np.float64)
            self.kinds[array] = ArrayKind(dtype, len(slots), local=True)
            self.kept_arrays[array] = LocalArray(array, slots, dtype, line=s.line)
            out[v] = array
        return out

    def slots(self) -> tuple[int, ...]:
        """The trip counts of the loops around (and of) the loop being transformed; () where one has no
        literal bounds or assigns its own variable."""
        trips = []
        for loop in self.enclosing:
            if not isinstance(loop, For) or loop.var in assigned(loop.body):
                return ()
            try:
                trips.append(_trips(loop))
            except _Dynamic:
                return ()
        return tuple(trips)

    def iteration(self) -> tuple[Expr, ...]:
        """The index of the current iteration of each loop around (and of) the loop being transformed, from
        its variable: the same in the forward sweep and in the reverse, which sets the variable again."""
        out: list[Expr] = []
        for loop in self.enclosing:
            assert isinstance(loop, For)
            start, step = loop.start, loop.step
            offset = Name(loop.var) if start == Lit(0) else call("sub", Name(loop.var), start)
            out.append(offset if step == Lit(1) else call("floordiv", offset, step))
        return tuple(out)

    def local_shapes(self) -> dict[str, tuple[int, ...]]:
        """The local arrays whose elements ``dead_local_stores`` follows: the kernel's, their shadows, and
        the arrays of kept values."""
        shapes = {x.target: x.shape for x in walk(self.body) if isinstance(x, LocalArray)}
        shapes |= {adj(a): shape for a, shape in shapes.items() if a in self.act.arrays}
        return shapes | {a: x.shape for a, x in self.kept_arrays.items()}

    def stored(self, s: For | While, need: set[str]) -> tuple[list[Stmt], list[Stmt]]:
        """The body saves its own overwritten values; ``need`` grows with what any iteration's reverse reads
        before assigning it (a loop inside that the reverse recomputes makes its own values again)."""
        inner = set(need)
        while True:
            f, r = self.region(s.body, inner)
            used = liveness(r, set(), prune=False)[1]
            if used <= inner:
                return f, r
            inner |= used


def operations(stmts: list[Stmt]) -> int:
    """What ``stmts`` cost to run, in additions: arithmetic (``rules.COSTS``), loads, stores and tape traffic
    one each, a loop's body once per trip (once where its bounds are known only when the kernel runs)."""
    n = 0
    for s in stmts:
        if isinstance(s, For):
            try:
                trips = _trips(s)
            except _Dynamic:
                trips = 1
            n += trips * operations(s.body)
        elif isinstance(s, (If, While)):
            n += sum(operations(b) for b in blocks(s)) + _size(s.cond)
        else:
            n += sum(_size(e) for e in exprs_of(s)) + (not isinstance(s, Assign))
    return n


def _size(e: Expr) -> int:
    """The cost of an expression's operations (``rules.COSTS``) and loads."""
    if isinstance(e, Call):
        return (e.op != "copy") * COSTS.get(e.op, 1) + sum(_size(a) for a in e.args)
    if isinstance(e, Elem):
        return 1 + sum(_size(a) for a in e.index)
    return 0


def _loading(replay: list[Stmt], loads: Mapping[str, Expr]) -> list[Stmt]:
    """An iteration's replay with each kept value loaded (``loads``: value -> its load) in place of the
    replay's one assignment of it, where it has one outside branches and loops (what it alone reads, and the
    copies of it, then need no recomputing); else after the replay."""
    once = {v for v in loads if sum(v in assigned([x]) for x in walk(replay)) == 1}
    top = {x.target for x in replay if isinstance(x, Assign)}
    out = [
        Assign(x.target, loads[x.target], line=x.line)
        if isinstance(x, Assign) and x.target in once & top
        else x
        for x in replay
    ]
    return out + [Assign(v, e) for v, e in loads.items() if v not in once & top]


def _kept_stem(name: str) -> str:
    """The stem of the name of a kept value of variable ``name``: ``kept_ax_`` (``_kept_ax_12``), ``kept`` for
    a temporary (``_kept13``)."""
    return "kept" if name.startswith("_") else f"kept_{name}_"


def _drop_all_stores(stmts: list[Stmt]) -> list[Stmt]:
    return [map_blocks(s, _drop_all_stores) for s in stmts if not isinstance(s, Store)]


def _drop_pushes(stmts: list[Stmt]) -> list[Stmt]:
    """``stmts`` without their pushes onto the tape."""
    return [map_blocks(s, _drop_pushes) for s in stmts if not isinstance(s, Push)]


def _adds_over_zeros(stmts: list[Stmt]) -> list[Stmt]:
    """``a[i] = 0.0 ... a[i] += v`` in one block, nothing in between touching ``a`` or what ``i`` reads, as
    ``... a[i] = v``. The adjoint of a store reads its seed and clears it; the adjoint of an earlier load of the
    same element adds to it again (an in-place update, LULESH's EOS): on a GPU that add's load waited for the
    clearing store to reach the cache, and its store made a second one."""
    out: list[Stmt | None] = [map_blocks(s, _adds_over_zeros) for s in stmts]
    for p, s in enumerate(out):
        if not (
            isinstance(s, Store) and not s.accumulate and isinstance(s.value, Lit) and s.value.value == 0
        ):
            continue
        touched = {s.array} | {a for e in s.index for a in arrays_in(e)}
        names = {n for e in s.index for n in names_in(e)}
        for q in range(p + 1, len(out)):
            x = out[q]
            if isinstance(x, Store) and x.accumulate and x.array == s.array and x.index == s.index:
                out[p], out[q] = None, Store(x.array, x.index, x.value, line=x.line)
                break
            if x is None:
                continue
            if touched & (loaded_arrays([x]) | stored_arrays([x])) or names & assigned([x]):
                break
    return [s for s in out if s is not None]


def _drop_idle_saves(stmts: list[Stmt]) -> list[Stmt]:
    """Remove ``push v ... pop v`` pairs of one block between which nothing pushes, pops or assigns ``v``.

    Dead-code removal leaves them where the overwrite that the push saved ``v`` from was dead, typically in
    a recomputed loop's reverse, which re-runs an iteration's forward sweep only for the values its adjoint
    reads: ``pop m; push m; <adjoint reading m>; pop m`` becomes ``pop m; <adjoint reading m>``.
    """
    out = [map_blocks(s, _drop_idle_saves) for s in stmts]
    changed = True
    while changed:
        changed = False
        for p, s in enumerate(out):
            if not (isinstance(s, Push) and isinstance(s.value, Name)):
                continue
            v = s.value.id
            for q in range(p + 1, len(out)):
                x = out[q]
                if isinstance(x, Pop) and x.target == v:
                    del out[q], out[p]
                    changed = True
                    break
                if any(isinstance(y, (Push, Pop)) for y in walk([x])) or v in assigned([x]):
                    break
            if changed:
                break
    return out


def _fold_zero_adds(
    stmts: list[Stmt], zeros: set[str], local: frozenset[str] = frozenset()
) -> tuple[list[Stmt], set[str]]:
    """``stmts`` without the additions of adjoints known to be zero (``_b_x = 0; _b_x = _b_x + g * p`` becomes
    ``_b_x = g * p``; ``shadow[i] += _b_x`` goes while ``_b_x`` is zero), and the names zero after them.

    The compilers keep ``0.0 + v``: it differs from ``v`` when ``v`` is -0.0, which no adjoint minds, and
    numba's CUDA target passes no fast-math flag that would let them drop it (a large share of an adjoint's
    instructions: docs/benchmarks.md, "In the code"). Only zeros that the reverse sweep assigns (typed
    literals, copies and negations of them, or an adjoint's zero at the start of a launch index) are
    followed, never the primal's. So are the elements, at literal indices, of the ``local`` shadows (local
    arrays' adjoints, zero where a launch index starts): a read of a zero one is a zero, and an addition
    into one a store.
    """
    known = set(zeros)
    out: list[Stmt] = []
    rest = list(stmts)
    while rest:
        s = rest.pop(0)
        if isinstance(s, Assign):
            value = _without_zero(_zero_elements(s.value, known), known)
            known.discard(s.target)
            if _is_zero(value, set()) or _copies_zero(value, known):
                known.add(s.target)
            s = Assign(s.target, value, line=s.line)
        elif isinstance(s, Store):
            value = _zero_elements(s.value, known)
            if s.accumulate and _copies_zero(value, known):
                continue
            adds = s.accumulate
            if s.array in local:
                element = _element(Elem(s.array, s.index))
                if element is None:  # an index known when the kernel runs: any element may change
                    known -= {e for e in known if e.startswith(s.array + "[")}
                else:
                    adds = adds and element not in known  # an addition into a zero is a store
                    known.discard(element)
                    if not adds and _is_zero(value, set()):
                        known.add(element)
            s = Store(s.array, s.index, value, adds, line=s.line)
        elif isinstance(s, If):
            orelse, after_orelse = _fold_zero_adds(s.orelse, known, local)
            tail, zeroed = _idle_tail(rest, after_orelse)
            if tail:  # what follows does nothing where the branch is skipped: it moves into the branch
                del rest[: len(tail)]
                skipped = s.orelse + [Assign(t, Lit(0.0, typed=True), line=s.line) for t in zeroed]
                orelse, after_orelse = _fold_zero_adds(skipped, known, local)
            body, after_body = _fold_zero_adds(s.body + tail, known, local)
            s, known = If(s.cond, body, orelse, line=s.line), after_body & after_orelse
        else:  # in a loop, what an iteration assigns is not zero when the next one starts
            known -= assigned([s])
            stored = stored_arrays([s]) & local
            known -= {e for e in known if e.split("[")[0] in stored}
            s = map_blocks(s, functools.partial(_fold_zero_adds_in, zeros=frozenset(known), local=local))
        out.append(s)
    return out, known


def _element(e: Elem) -> str | None:
    """``array[i, j]``'s name among ``_fold_zero_adds``' zeros where the indices are literals, else None."""
    index = [x.value for x in e.index if isinstance(x, Lit) and type(x.value) is int and x.value >= 0]
    return _element_name(e.array, tuple(index)) if len(index) == len(e.index) else None


def _element_name(array: str, at: tuple[int, ...]) -> str:
    return f"{array}{list(at)}"


def _zero_elements(e: Expr, zeros: set[str]) -> Expr:
    """``e`` with its reads of elements in ``zeros`` replaced by zeros."""
    if isinstance(e, Elem):
        return Lit(0.0, typed=True) if _element(e) in zeros else e
    if isinstance(e, Call):
        return Call(e.op, tuple(_zero_elements(a, zeros) for a in e.args))
    return e


def _copies_zero(e: Expr, zeros: set[str]) -> bool:
    """Whether ``e`` is a name in ``zeros``, a typed zero literal, or a negation of one."""
    if isinstance(e, Call) and e.op == "neg":
        return _copies_zero(e.args[0], zeros)
    return (isinstance(e, Name) and e.id in zeros) or _is_zero(e, set())


def _idle_tail(stmts: list[Stmt], zeros: set[str]) -> tuple[list[Stmt], list[str]]:
    """The leading ``stmts`` that do nothing while ``zeros`` are zero but add zeros and set names to zero
    (a zero adjoint's products and copies), and the names they set.

    After ``if r2 < cut: _b_r2 = ...`` the adjoint's scatter of ``_b_r2`` into the coordinates does nothing
    where the branch was skipped, which in a cut-off loop is nearly every trip: moved into the branch, those
    trips skip it, as the primal's do. A product of a zero adjoint counts as zero even by a value that is
    not finite: a skipped branch contributes nothing.
    """
    known = set(zeros)
    names: list[str] = []
    for k, s in enumerate(stmts):
        if isinstance(s, Store) and s.accumulate and _is_zero(s.value, known):
            continue
        if isinstance(s, Assign) and _without_zero(s.value, known) == Name(s.target):
            continue
        if not (isinstance(s, Assign) and _is_zero(s.value, known)):
            return stmts[:k], names
        known.add(s.target)
        names.append(s.target)
    return list(stmts), names


def _is_zero(e: Expr, zeros: set[str]) -> bool:
    """Whether ``e`` is zero while the names in ``zeros`` are."""
    if isinstance(e, Name):
        return e.id in zeros
    if isinstance(e, Lit):
        return e.typed and not isinstance(e.value, bool) and e.value == 0
    if not isinstance(e, Call):
        return False
    if e.op in ("neg", "div"):
        return _is_zero(e.args[0], zeros)
    if e.op == "mul":
        return any(_is_zero(a, zeros) for a in e.args)
    if e.op in ("add", "sub"):
        return all(_is_zero(a, zeros) for a in e.args)
    return False


def _merge_ifs(stmts: list[Stmt]) -> list[Stmt]:
    """``if c: A`` directly followed by ``if c: B`` (``A`` leaving ``c`` as it was) made one ``if c: A; B``.

    A recomputed loop's body is its forward sweep then its reverse, each with the branch: merged, what the
    forward branch sets and the reverse one reads is no longer live around the loop on the path that skips
    both, so the loop can stay one whose iterations commute (GPU lanes then share it), with one branch less.
    """
    out: list[Stmt] = []
    for s in (map_blocks(x, _merge_ifs) for x in stmts):
        last = out[-1] if out else None
        if (
            isinstance(s, If)
            and isinstance(last, If)
            and s.cond == last.cond
            and not set(names_in(s.cond)) & assigned([last])
        ):
            out[-1] = If(s.cond, last.body + s.body, last.orelse + s.orelse, line=last.line)
        else:
            out.append(s)
    return out


def _fold_zero_adds_in(block: list[Stmt], zeros: frozenset[str], local: frozenset[str]) -> list[Stmt]:
    return _fold_zero_adds(block, set(zeros), local)[0]


def _without_zero(e: Expr, zeros: set[str]) -> Expr:
    """``e`` without a top-level addition or subtraction of a name in ``zeros``."""
    if not (isinstance(e, Call) and e.op in ("add", "sub")):
        return e
    a, b = e.args
    if isinstance(b, Name) and b.id in zeros:
        return a
    if isinstance(a, Name) and a.id in zeros:
        return b if e.op == "add" else call("neg", b)
    return e


def _drop_ids(stmts: list[Stmt], ids: set[int]) -> list[Stmt]:
    return [map_blocks(s, lambda b: _drop_ids(b, ids)) for s in stmts if id(s) not in ids]


def _unobserved_stores(body: list[Stmt]) -> set[int]:
    """id() of the plain stores outside every loop whose element no later statement loads: nothing the
    kernel computes after them reads what they store (``A[i] = f(A[i], ...)``, LULESH's EOS; an unrolled
    loop over axes, ``xv[3 + axis, n] = ...``, whose later iterations load other rows)."""
    order = list(_in_order(body, False))
    known = _known_integers(body)
    loads = [(k, x, known[id(s)]) for k, (s, _) in enumerate(order) for e in exprs_of(s) for x in elems_in(e)]
    return {
        id(s)
        for k, (s, inside) in enumerate(order)
        if isinstance(s, Store)
        and not s.accumulate
        and not inside
        and not any(
            j > k and x.array == s.array and _may_meet(s.index, known[id(s)], x.index, at)
            for j, x, at in loads
        )
    }


def _known_integers(body: list[Stmt]) -> dict[int, dict[str, int]]:
    """Per statement (id()), the integers that names surely hold there: names assigned integer arithmetic of
    literals at the top level of ``body`` and not assigned again since, nor in a block around the statement."""
    known: dict[int, dict[str, int]] = {}
    values: dict[str, int] = {}
    for s in body:
        inner = {n: v for n, v in values.items() if n not in assigned([s])}
        for x in walk([s]):
            known[id(x)] = values if x is s else inner
        values = inner
        if isinstance(s, Assign) and (value := _integer(s.value, known[id(s)])) is not None:
            values = {**inner, s.target: value}
    return known


def _integer(e: Expr, values: Mapping[str, int]) -> int | None:
    """The integer ``e`` evaluates to, from literals and ``values``; None if not known."""
    if isinstance(e, Lit):
        return e.value if type(e.value) is int else None
    if isinstance(e, Name):
        return values.get(e.id)
    if isinstance(e, Call) and e.op in _INTEGER_OPS:
        args = [_integer(a, values) for a in e.args]
        return None if None in args else int(_INTEGER_OPS[e.op](*args))
    return None


_INTEGER_OPS: dict[str, Callable[..., int]] = {
    "copy": operator.pos,
    "neg": operator.neg,
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
}


def _may_meet(
    a: tuple[Expr, ...], at_a: Mapping[str, int], b: tuple[Expr, ...], at_b: Mapping[str, int]
) -> bool:
    """Whether two indices of one array may name the same element: not where some position holds two
    different known integers."""
    return not any(
        x is not None and y is not None and x != y
        for x, y in zip((_integer(e, at_a) for e in a), (_integer(e, at_b) for e in b), strict=True)
    )


def _in_order(stmts: list[Stmt], inside: bool) -> Iterator[tuple[Stmt, bool]]:
    """Every statement in program order, and whether a loop encloses it."""
    for s in stmts:
        yield s, inside
        for block in blocks(s):
            yield from _in_order(block, inside or isinstance(s, (For, While)))


def _stores_to_save(body: list[Stmt], recompute: set[int], undo: set[str]) -> set[int]:
    """id() of the stores into ``undo`` arrays whose old value a recomputed loop may read again.

    The reverse sweep re-runs a recomputed loop on the array values of its own moment, so a store it may see
    overwritten must save the old value: one after the loop, or one in a loop around both (a later
    iteration's store precedes the next run of the loop). A store that every such loop follows, with no
    loop around both, needs none: filling a local array, or summing into it, before the loops that read it.
    """
    order: dict[int, int] = {}
    around: dict[int, tuple[int, ...]] = {}

    def visit(stmts: list[Stmt], loops: tuple[int, ...]) -> None:
        for s in stmts:
            order[id(s)] = len(order)
            around[id(s)] = loops
            inner = (*loops, id(s)) if isinstance(s, (For, While)) else loops
            for block in blocks(s):
                visit(block, inner)

    visit(body, ())
    readers = [
        (s, loaded_arrays(_loop_code(s)))
        for s in walk(body)
        if isinstance(s, (For, While)) and id(s) in recompute
    ]
    return {
        id(s)
        for s in walk(body)
        if isinstance(s, Store)
        and s.array in undo
        and any(
            s.array in reads
            and (order[id(loop)] < order[id(s)] or set(around[id(loop)]) & set(around[id(s)]))
            for loop, reads in readers
        )
    }


def _loop_code(s: For | While) -> list[Stmt]:
    return [*s.body, *(s.test if isinstance(s, While) else [])]


def _count(stmts: list[Stmt]) -> int:
    return sum(1 for _ in walk(stmts))


def _names(s: Stmt) -> set[str]:
    return {n for e in exprs_of(s) for n in names_in(e)}


class _Dynamic(Exception):
    """A loop's trip count is known only when the kernel runs."""


def _trips(s: For | While) -> int:
    """How many times loop ``s`` runs, when its bounds are literals."""
    values = literal_range(s)
    if values is None:
        raise _Dynamic
    return len(values)
