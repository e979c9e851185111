"""Adjoint fission: a large CUDA adjoint split into pieces along its outputs' backward slices.

A kernel that makes several outputs from one gather (LULESH's kinematics: the new volume, the characteristic
length, the monotonic Q's gradients, the strain rate) has one adjoint whose forward replay and adjoint values
are live all at once: past the registers a GPU thread may hold they spill to local memory, and the whole
adjoint runs at the speed of its spills. Split, each piece is the adjoint of one group of outputs alone
(``analysis.useful`` with the other outputs ignored): it replays only what its outputs need and adds its
part of every input's adjoint, and the pieces run one after the other on the launch's arguments. The inputs'
shared work (the gather, a volume several outputs need) is done once per piece.

Groups are found on the primal: each output's backward slice (the code left when the stores into the other
outputs go), its cost counted as ``reverse.operations`` counts. Outputs whose slices nearly nest (their
union costs little more than the larger, as ``delv`` and ``vnew`` need the same volume) form one group. The
split is taken only where it pays: the whole is large (``SPLIT_OPERATIONS``), no piece is most of it
(``LARGEST_PIECE``) and the pieces together replay little more than the whole (``REPLAYED``). The numbers
are from LULESH on an H100 (docs/benchmarks.md, "Adjoints split along their outputs"). CPU adjoints stay
whole: a CPU thread's spills stay in its L1 cache, and the kinematics split ran slower there.
"""

from __future__ import annotations

import functools
import itertools

from pad.kernel.analysis import Activity, is_local, liveness
from pad.kernel.ir import Kind, LocalArray, Stmt, Store, walk, without_stores
from pad.kernel.optimize import dead_local_stores
from pad.kernel.reverse import operations

# LULESH's adjoints of primals that cost under 200 fit the registers; the kinematics' (1557) spilled
SPLIT_OPERATIONS = 1000  # the least cost of a primal whose adjoint splits
MERGE = 0.25  # two groups merge where their union costs at most this much more than the larger one
LARGEST_PIECE = 0.6  # no piece may cost more than this share of the whole
REPLAYED = 1.5  # the pieces together may cost at most this many times the whole


def pieces(body: list[Stmt], act: Activity, kinds: dict[str, Kind], loaded: set[str]) -> list[frozenset[str]]:
    """The groups of active outputs whose adjoints run as pieces of their own, or [] to keep one adjoint.

    Only outputs the kernel never reads split (a piece's forward replay then needs no other piece's stores).
    """
    stored = frozenset(s.array for s in walk(body) if isinstance(s, Store) and not is_local(kinds, s.array))
    outputs = stored & act.arrays
    if len(outputs) < 2 or outputs & loaded:
        return []
    shapes = {s.target: s.shape for s in walk(body) if isinstance(s, LocalArray)}

    # a piece replays no store into another output, nor into an array the kernel never reads back
    unread = stored - loaded

    @functools.cache
    def cost(group: frozenset[str]) -> int:
        return operations(backward_slice(body, unread - group, shapes))

    whole = cost(outputs)
    if whole < SPLIT_OPERATIONS:
        return []
    groups = [frozenset([o]) for o in sorted(outputs)]
    while len(groups) > 1:
        extra, a, b = min(
            ((cost(a | b) - max(cost(a), cost(b)), a, b) for a, b in itertools.combinations(groups, 2)),
            key=lambda found: (found[0], sorted(found[1]), sorted(found[2])),
        )
        if extra > MERGE * max(cost(a), cost(b)):
            break
        groups = [g for g in groups if g not in (a, b)] + [a | b]
    costs = [cost(g) for g in groups]
    if len(groups) < 2 or max(costs) > LARGEST_PIECE * whole or sum(costs) > REPLAYED * whole:
        return []
    return sorted(groups, key=sorted)


def backward_slice(
    body: list[Stmt], dropped: frozenset[str], shapes: dict[str, tuple[int, ...]]
) -> list[Stmt]:
    """``body`` without its stores into ``dropped`` and all the code that only they needed."""
    code = without_stores(body, set(dropped))
    while True:
        smaller = dead_local_stores(liveness(code, set(), prune=True)[0], shapes)
        if operations(smaller) == operations(code):
            return smaller
        code = smaller
