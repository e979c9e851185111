"""LULESH's gradients with pad: the per-cycle gradient Enzyme measured, and the gradient of a whole run.

Per cycle (``--mode grad``): the time increment runs forward, then one ``pad.autodiff`` of the Lagrange
leap-frog step with respect to the whole state (every array of ``State``; the clock, which holds the
cycle's time step, is constant), seeded with deterministic non-zero values. Its reverse pass runs the
adjoint kernels and the transposed halo exchanges.

Whole run (``--mode sensitivity``): J = the Final Origin Energy (rank 0's ``e[0]`` at the end), or another
``Objective`` of the final state (``LeastSquares``: a misfit to an observed field), and its gradient with
respect to the initial node coordinates and the model's parameters (``params``: ``einit``, ``hgcoef``, ...),
through the set-up, the variable time step (Courant and hydro constraints, the minimum over elements and
over ranks, the growth limits, the cut to the stop time) and every cycle. The time loop runs under
``pad.checkpoint.while_loop``, so at most ``snapshots`` copies of the state are kept.

Seeds, directions and gathered results are functions of the global node and element numbers, and a node
that several ranks hold is seeded on its owner only, so a run on P ranks of ``-s n`` computes the same
numbers as the serial run of ``-s P^(1/3) n``. A gradient with respect to a value that several ranks hold
(a shared node, the parameters) is the sum of the derivatives with respect to each rank's copy.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

import pad
import pad.checkpoint
import pad.mpi
from apps.lulesh import kernels as K
from apps.lulesh.hydro import PARAMETERS, STOPTIME, Hydro, State

FIELDS = [f.name for f in dataclasses.fields(State)]
DIFFERENTIATED = [name for name in FIELDS if name != "clock"]
"""The per-cycle gradient's arrays: the whole state but the clock (dt is constant within the cycle)."""

NODE_FIELDS = ("xv", "nodal_mass")

FD_STEP = 1.0e-6
"""Central differences of one cycle: each entry moved by this fraction of its size (see ``check_step``)."""

JITTER = 1.0e-3
"""The relative move of the coordinates that breaks the Sedov state's symmetry in ``check_step``."""

RUN_FD_STEP = 1.0e-5
"""Central differences of whole runs: parameters moved by this fraction of their values, coordinates by
this fraction of the mesh spacing (along a fixed direction of unit size per node)."""

STEP_TOLERANCES = {"entries": 1e-4, "dot_product": 1e-10, "direction": 1e-5}
"""``check_step``'s relative errors below which each part passes."""

RUN_TOLERANCE = 1e-5
"""``check_sensitivity``'s relative error below which each derivative passes."""


def pattern(ids: np.ndarray, salt: int) -> np.ndarray:
    """Deterministic values in +-[0.5, 1.5), a function of global numbers: the same for any rank count."""
    return np.sin(1.7 * ids + salt) * 0.5 + np.where(np.cos(0.3 * ids + salt) < 0.0, -1.0, 1.0)


def numbering(hydro: Hydro, name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    """Global numbers of a state array's entries, whether this rank owns each, and the global row length.

    Rows (``xv``'s six) are numbered one after the other; ``params`` is owned by rank 0.
    """
    m = hydro.mesh
    if name in NODE_FIELDS:
        ids, owned, total = m.global_nodes(), m.owned_nodes(), (m.tp * m.nx + 1) ** 3
    elif name == "params":
        ids, total = np.arange(len(PARAMETERS)), len(PARAMETERS)
        owned = np.full(total, hydro.rank == 0)
    else:
        ids, owned, total = m.global_elements(), np.ones(m.nelem, bool), (m.tp * m.nx) ** 3
    rows = shape[0] if len(shape) == 2 else 1
    full = (np.arange(rows)[:, None] * total + ids[None, :]).reshape(shape)
    return full, np.broadcast_to(owned, shape), total


def gather(hydro: Hydro, name: str, local: np.ndarray) -> np.ndarray | None:
    """``local`` (a host array shaped like state field ``name``) in global order on rank 0, the copies of
    shared entries summed; ``None`` on the other ranks."""
    ids, _, total = numbering(hydro, name, local.shape)
    parts = hydro.comm.mpi.gather((ids.ravel(), local.ravel()), root=0)
    if parts is None:
        return None
    rows = local.shape[0] if local.ndim == 2 else 1
    out = np.zeros(rows * total)
    for where, values in parts:
        np.add.at(out, where, values)
    return out.reshape((rows, total) if local.ndim == 2 else (total,))


def allsum(hydro: Hydro, value: float) -> float:
    return float(hydro.comm.mpi.allreduce(value)) if hydro.comm.size > 1 else float(value)


# ------------------------------------------------------------------------------------------ per cycle
@pad.kernel
def k_copy(i, src, dst):
    """``dst[i] = src[i]``: the seeds copied into the shadows before each cycle, on all threads."""
    dst[i] = src[i]


class StepGradient:
    """One cycle's gradient: ``pad.autodiff`` of the leap-frog step with respect to the whole state.

    Called in place of ``Hydro.leapfrog``: it advances the state by one step, and leaves in ``shadows``
    the gradient of ``J = sum over ranks <seeds, state after>`` with respect to the state before. The
    seeds' copy and the ``autodiff`` are one ``pad.graph`` step: recorded on a state's first cycle and
    replayed on the next ones (on a GPU as one CUDA graph), without the tape's Python per launch.
    """

    def __init__(self, hydro: Hydro) -> None:
        self.hydro = hydro
        probe = hydro.initial_state()
        shapes = {name: getattr(probe, name).shape for name in FIELDS}
        sizes = [int(np.prod(shapes[name])) for name in FIELDS]
        ends = np.cumsum(sizes).tolist()
        spans = {name: (end - size, end) for name, size, end in zip(FIELDS, sizes, ends, strict=True)}
        seeds = np.zeros(ends[-1])
        for salt, name in enumerate(DIFFERENTIATED):
            ids, owned, _ = numbering(hydro, name, shapes[name])
            lo, hi = spans[name]
            seeds[lo:hi] = (pattern(ids, salt) * owned).ravel()
        # Every array's seeds, and every shadow, lie end to end in one array (the clock's seeds are zeros):
        # one launch copies them all.
        self.all_seeds = hydro.memory.put(seeds)
        self.all_shadows = hydro.memory.put(np.zeros_like(seeds))
        self.seeds = {n: self.all_seeds[lo:hi].reshape(shapes[n]) for n, (lo, hi) in spans.items()}
        shadows = {n: self.all_shadows[lo:hi].reshape(shapes[n]) for n, (lo, hi) in spans.items()}
        self.clock_shadow = shadows.pop("clock")
        self.shadows: dict[str, Any] = shadows
        self.replayed = pad.graph(self.differentiate)

    def arguments(self, s: State) -> list[Any]:
        """``s``'s arrays annotated for ``autodiff``: ``Dup`` with the seeds copied in.

        The clock too, unseeded and its adjoint discarded: the gradient is the one with dt held constant
        (what the step reads from the clock only adds into the clock's adjoint), and every kernel's adjoint
        is then the variant ``sensitivity`` runs too (each pattern of active arrays compiles anew).
        """
        pad.launch(k_copy, self.all_shadows.size, self.all_seeds, self.all_shadows)
        shadows = self.shadows | {"clock": self.clock_shadow}
        return [pad.Dup(getattr(s, name), shadows[name]) for name in FIELDS]

    def __call__(self, s: State) -> dict[str, Any]:
        self.replayed(s)
        return self.shadows

    def differentiate(self, s: State) -> None:
        """The recorded step: the seeds copied into the shadows, then the leap-frog step's ``autodiff``."""
        pad.autodiff(self.step, *self.arguments(s), *constants(self.hydro))

    def step(self, *arrays: Any) -> None:
        self.hydro.leapfrog(State(*arrays[: len(FIELDS)]))

    def objective(self, s: State) -> float:
        """``J`` of the state as it is now."""
        get = self.hydro.memory.get
        local = sum(float(np.vdot(get(self.seeds[n]), get(getattr(s, n)))) for n in DIFFERENTIATED)
        return allsum(self.hydro, local)


def constants(hydro: Hydro) -> list[Any]:
    """The floating-point arrays of ``hydro`` that no derivative flows through, marked so that pad gives
    them no shadow: the EOS repetitions' scratch, which nothing reads (the kernels' adjoints would otherwise
    accumulate into, and from, shadows of them for nothing)."""
    return [pad.Const(a) for a in (hydro.e_new, hydro.p_new, hydro.q_new)]


def host_copy(hydro: Hydro, s: State) -> dict[str, np.ndarray]:
    return {name: hydro.memory.get(getattr(s, name)).copy() for name in FIELDS}


def restore(hydro: Hydro, s: State, saved: dict[str, np.ndarray]) -> None:
    for name in FIELDS:
        getattr(s, name)[...] = hydro.memory.put(saved[name])


def check_step(hydro: Hydro, s: State) -> dict[str, Any]:
    """Check one cycle's gradient at the state ``s`` (after its time increment; left as found).

    - Central differences of ``J`` at a few entries of every array near the origin (where the blast is),
      each moved by ``FD_STEP`` of its size (of its array's largest entry if it is zero).
    - Dot-product test: ``<seeds, J t>`` from ``pad.fwddiff`` against ``<J^T seeds, t>`` from
      ``pad.autodiff``, and central differences along ``t``, a direction relative to each entry's size.
      The Sedov problem is symmetric: mirror-image elements hold equal values, which meet in the step's
      min, max and comparisons, where the derivative depends on the direction; one that breaks the
      symmetry sees a one-sided derivative and the differences disagree (by 5e-4 at ``-s 4``). This part
      therefore runs from ``s`` with its coordinates moved by a relative ``JITTER`` (symmetry planes kept).
    Returns the relative errors and whether they are below the tolerances (agreed over ranks).
    """
    mem, rank = hydro.memory, hydro.rank
    grad = StepGradient(hydro)
    start = host_copy(hydro, s)
    seeds = {n: mem.get(grad.seeds[n]) for n in DIFFERENTIATED}

    def gradient_at(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        restore(hydro, s, state)
        return {n: mem.get(v).copy() for n, v in grad(s).items()}

    def difference(origin: dict[str, np.ndarray], moves: dict[str, np.ndarray]) -> float:
        """``J(origin + moves) - J(origin - moves)``, summed entry by entry so that untouched entries
        cancel exactly."""
        after = []
        for sign in (1.0, -1.0):
            restore(hydro, s, {n: origin[n] + sign * moves[n] if n in moves else origin[n] for n in FIELDS})
            hydro.leapfrog(s)
            after.append(host_copy(hydro, s))
        local = sum(float(np.vdot(seeds[n], after[0][n] - after[1][n])) for n in DIFFERENTIATED)
        return allsum(hydro, local)

    gradient = gradient_at(start)
    entries = []
    for name, index in _probe_entries(hydro):
        x = start[name]
        h = FD_STEP * (abs(x[index]) or float(np.abs(x).max(initial=0.0)) or 1.0)
        move = np.zeros_like(x)
        if rank == 0:
            move[index] = h
        fd = difference(start, {name: move}) / (2.0 * h)
        exact = float(gradient[name][index]) if rank == 0 else 0.0
        entries.append((f"{name}[{', '.join(map(str, index))}]", allsum(hydro, exact), fd))

    # Each entry moves in proportion to its size: entries at rest (zero velocity, energy, q) stay there, as
    # the program's kinks at rest (q switched off when not compressing, cut-offs at zero) would make a
    # direction that moves them see a one-sided derivative.
    jittered = dict(start)
    jittered["xv"] = start["xv"].copy()
    jittered["xv"][:3] *= 1.0 + JITTER * pattern(numbering(hydro, "xv", (3, hydro.mesh.nnode))[0], 11)
    rng = np.random.default_rng(17 + rank)
    direction = {n: rng.uniform(-1.0, 1.0, x.shape) * np.abs(x) for n, x in jittered.items() if n in seeds}
    gradient = gradient_at(jittered)
    restore(hydro, s, jittered)
    tangents = {n: mem.put(direction[n].copy()) for n in DIFFERENTIATED}  # fwddiff overwrites them
    pad.fwddiff(
        grad.step,
        *(pad.Dup(getattr(s, n), tangents[n]) if n in tangents else pad.Const(s.clock) for n in FIELDS),
        *constants(hydro),
    )
    forward = allsum(hydro, sum(float(np.vdot(seeds[n], mem.get(tangents[n]))) for n in DIFFERENTIATED))
    reverse = allsum(hydro, sum(float(np.vdot(gradient[n], direction[n])) for n in DIFFERENTIATED))
    along = difference(jittered, {n: FD_STEP * d for n, d in direction.items()}) / (2.0 * FD_STEP)
    restore(hydro, s, start)

    largest = max(abs(e) for _, e, _ in entries)
    worst_entry = max(abs(e - fd) / max(abs(e), 1e-6 * largest) for _, e, fd in entries)
    dot, along_error = rel(forward, reverse), rel(along, forward)
    return {
        "entries": [{"entry": n, "gradient": e, "fd": fd} for n, e, fd in entries],
        "entries_rel_error": worst_entry,
        "dot_product": {"forward": forward, "reverse": reverse, "rel_error": dot},
        "direction": {"fd": along, "forward": forward, "rel_error": along_error},
        "fd_step": FD_STEP,
        "jitter": JITTER,
        "passed": bool(
            dot < STEP_TOLERANCES["dot_product"]
            and along_error < STEP_TOLERANCES["direction"]
            and worst_entry < STEP_TOLERANCES["entries"]
        ),
    }


def rel(a: float, b: float) -> float:
    """|a - b| relative to the larger of the two."""
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def _probe_entries(hydro: Hydro) -> list[tuple[str, tuple[int, ...]]]:
    """Entries of rank 0's arrays at the origin's element and the node opposite the origin on it."""
    nn = hydro.mesh.nx + 1
    far = min(nn * nn + nn + 1, nn**3 - 1)
    out: list[tuple[str, tuple[int, ...]]] = [("xv", (c, far)) for c in range(6)]
    out += [("xv", (0, 1)), ("nodal_mass", (far,))]
    out += [(n, (0,)) for n in ("e", "p", "q", "v", "ss", "volo", "elem_mass")]
    out += [("params", (k,)) for k in (K.HGCOEF, K.QQC, K.QLC_MONOQ, K.QQC_MONOQ, K.SS4O3)]
    return out


# ------------------------------------------------------------------------------------------ whole run
class Objective:
    """J, a function of a run's final state, which ``sensitivity`` differentiates with the whole run.

    ``add(s, out)`` adds this rank's share of J into ``out[0]`` (a one-entry array where the state lives)
    with pad operations (launches, ``pad.mpi``), so that ``pad.autodiff`` differentiates it with the run; J
    is the sum of the ranks' shares. ``constants`` are the arrays ``add`` reads that no derivative flows
    to (observations, weights), passed to ``autodiff`` as ``pad.Const``: it would otherwise give them
    shadows and accumulate adjoints into them, and a resumable run could not save those.
    """

    constants: tuple[Any, ...] = ()

    def add(self, s: State, out: Any) -> None:
        raise NotImplementedError


@pad.kernel
def k_add_first(i, values, out):
    """``out[0] += values[0]``."""
    out[0] += values[0]


class FinalOriginEnergy(Objective):
    """The Final Origin Energy: rank 0's ``e[0]`` at the end (the original's report, the default J)."""

    def __init__(self, hydro: Hydro) -> None:
        self.rank = hydro.rank

    def add(self, s: State, out: Any) -> None:
        if self.rank == 0:
            pad.launch(k_add_first, 1, s.e, out)


@pad.kernel
def k_add_squared_misfit(i, values, observed, weights, out):
    """``out[0] += sum over i of weights[i] (values[i] - observed[i])^2 / 2``."""
    d = values[i] - observed[i]
    out[0] += 0.5 * weights[i] * d * d


class LeastSquares(Objective):
    """J = 1/2 sum of w (f - f_obs)^2 over the entries of the state's final field ``field`` (``e``, ``p``,
    ``xv``, ...): the misfit of a run to an observation, an inverse problem's objective.

    ``observed`` and ``weights`` (a number or an array) are shaped like this rank's ``field``, on the host.
    A node that several ranks hold counts once, on its owner (its weight elsewhere is zero), so J is the
    same for any rank count.
    """

    def __init__(self, hydro: Hydro, field: str, observed: np.ndarray, weights: Any = 1.0) -> None:
        fields = [n for n in DIFFERENTIATED if n != "params"]
        if field not in fields:
            raise ValueError(f"LeastSquares: field {field!r} is not one of the state's fields {fields}")
        shape = tuple(getattr(hydro.initial_state(), field).shape)
        observed = np.asarray(observed, dtype=np.float64)
        if observed.shape != shape:
            raise ValueError(f"LeastSquares: observed {field} has shape {observed.shape}, the field {shape}")
        weights = np.asarray(weights, dtype=np.float64)
        if weights.ndim and weights.shape != shape:
            raise ValueError(f"LeastSquares: weights of shape {weights.shape} do not fit the field's {shape}")
        weights = np.broadcast_to(weights, shape) * numbering(hydro, field, shape)[1]
        if not np.all(np.isfinite(weights) & (weights >= 0.0)) or not np.all(np.isfinite(observed)):
            raise ValueError("LeastSquares: weights must be finite and non-negative, observations finite")
        self.field = field
        put = hydro.memory.put
        self.observed, self.weights = put(observed.ravel()), put(np.ascontiguousarray(weights).ravel())
        self.constants = (self.observed, self.weights)

    def add(self, s: State, out: Any) -> None:
        values = getattr(s, self.field).reshape(-1)
        pad.launch(k_add_squared_misfit, values.size, values, self.observed, self.weights, out)


def objective_value(hydro: Hydro, s: State, objective: Objective) -> float:
    """J of the state ``s`` as it is now (on every rank)."""
    out = hydro.memory.put(np.zeros(1))
    objective.add(s, out)
    return allsum(hydro, float(hydro.memory.get(out)[0]))


@dataclasses.dataclass
class Sensitivity:
    """The gradient of a whole run's objective J (see ``sensitivity``)."""

    value: float  # J
    energy: float  # the Final Origin Energy, whatever J is
    cycles: int
    parameters: dict[str, float]  # dJ/d(each of PARAMETERS), summed over ranks
    coords: np.ndarray  # dJ/d(initial x, y, z) of this rank's nodes, (3, nnode)
    stats: pad.checkpoint.Stats
    seconds: float


def final_value(
    hydro: Hydro,
    cycles: int,
    parameters: dict[str, float],
    coords: Any = None,
    objective: Objective | None = None,
) -> float:
    """J (default: the Final Origin Energy) of a primal run from the given parameters and initial
    coordinates, on every rank."""
    s = hydro.initial_state(parameters, coords)
    hydro.setup(s)
    hydro.advance(s, cycles)
    return objective_value(hydro, s, objective or FinalOriginEnergy(hydro))


def origin_energy(hydro: Hydro, s: State) -> float:
    return objective_value(hydro, s, FinalOriginEnergy(hydro))


def sensitivity(
    hydro: Hydro,
    cycles: int,
    parameters: dict[str, float],
    snapshots: int | None = None,
    coords: Any = None,
    *,
    objective: Objective | None = None,
    memory: int | str | None = None,
    resumable: pad.checkpoint.Resumable | None = None,
    expected_cycles: int | None = None,
) -> Sensitivity:
    """Run LULESH for at most ``cycles`` cycles and differentiate J, ``objective`` of the final state (by
    default ``FinalOriginEnergy``: rank 0's final ``e[0]``).

    The set-up, the time loop and J run inside ``pad.autodiff``; the loop under
    ``pad.checkpoint.while_loop`` with ``snapshots`` snapshots or a ``memory`` budget (neither: every
    cycle's records kept). With ``resumable``, a run stopped by its time limit or a signal raises
    ``pad.checkpoint.Stopped``, and a ``Resumable(..., resume=True)`` finishes it. ``expected_cycles`` (a
    primal run's count) lets a memory budget's schedule place its snapshots as the best offline schedule
    would.
    """
    mem = hydro.memory
    objective = objective or FinalOriginEnergy(hydro)
    s = hydro.initial_state(parameters, coords)
    dxv, dparams = (mem.put(np.zeros(a.shape)) for a in (s.xv, s.params))
    value, seed = mem.put(np.zeros(1)), mem.put(np.ones(1))  # J's share, seeded on every rank: J is their sum
    stats = pad.checkpoint.Stats()
    count, asked = [0], [0]  # the loop's count; cycles this session's condition let run
    run_cycles = mem.put(np.zeros(1, np.int64))  # cycles run so far, recomputations too (state of the loop)
    status = mem.fetch(s.clock[: K.TIME + 1], run_cycles, hydro.fault)

    def more(st: State, ran: Any) -> bool:
        """Whether cycle k + 1 runs, k cycles run; first the faults of cycle k, checked as ``Hydro.advance``
        does, so that an abort names the cycle and element where it happened. One host read of the device.
        ``asked`` bounds a warm-up whose launches do not run (``pad.precompile``); otherwise k is larger."""
        status.start(0)
        (time,), (k,), (faults,) = status.wait(0)
        if k and (faults or hydro.comm.size > 1):
            hydro.check(int(k), int(faults))
        go = bool(time < STOPTIME and max(int(k), asked[0]) < cycles)
        asked[0] += go
        return go

    def cycle(t: int, st: State, ran: Any) -> None:
        hydro.time_increment(st, t == 0)
        hydro.leapfrog(st)
        pad.launch(K.k_count_cycle, 1, ran)

    def run(*_: Any) -> None:
        hydro.setup(s)
        count[0] = pad.checkpoint.while_loop(
            more, cycle, s, run_cycles, snapshots=snapshots, memory=memory, stats=stats, resumable=resumable,
            expected_steps=expected_cycles, replay=first_or_later,
        )  # fmt: skip
        objective.add(s, value)

    hydro.comm.Barrier()
    begin = time.perf_counter()
    pad.autodiff(
        run,
        pad.Dup(s.xv, dxv),
        pad.Dup(s.params, dparams),
        pad.Dup(value, seed),
        *constants(hydro),
        *map(pad.Const, objective.constants),
    )
    mem.sync()
    seconds = time.perf_counter() - begin
    totals = hydro.comm.mpi.allreduce(mem.get(dparams)) if hydro.comm.size > 1 else mem.get(dparams)
    return Sensitivity(
        value=allsum(hydro, float(mem.get(value)[0])),
        energy=origin_energy(hydro, s),
        cycles=count[0],
        parameters={name: float(totals[k]) for k, name in enumerate(PARAMETERS)},
        coords=mem.get(dxv)[:3].copy(),
        stats=stats,
        seconds=seconds,
    )


def first_or_later(t: int) -> bool:
    """The phase of cycle ``t + 1`` for ``pad.checkpoint``'s replays: the first cycle's time increment differs
    from the later ones'; otherwise a cycle's launches depend on the state's arrays alone (its count and
    fault check are the loop condition's, which runs before every cycle of the forward sweep)."""
    return t == 0


def coordinate_direction(hydro: Hydro) -> np.ndarray:
    """A fixed direction for moving the initial coordinates, of unit size per node and as symmetric as the
    Sedov problem: swapping two axes maps it to itself.

    Mirror-image elements of the Sedov mesh hold equal values, and where the program picks one of equal
    values (the time step's minimum over elements, say), ``J`` has a kink: along a direction that breaks
    the symmetry, central differences average two one-sided derivatives while the gradient is one of
    them. Along a symmetric direction both sides agree. A function of global node numbers, so every rank
    moves its copy of a shared node alike.
    """
    g = hydro.mesh.tp * hydro.mesh.nx + 1
    ids = hydro.mesh.global_nodes()
    i, j, k = ids % g, ids // g % g, ids // (g * g)
    # component c is a function of the node's c-th index and a symmetric one of the other two
    return np.stack(
        [pattern(7 * a + 3 * (b + c) + b * c, 5) for a, b, c in ((i, j, k), (j, k, i), (k, i, j))]
    )


def check_sensitivity(
    hydro: Hydro, result: Sensitivity, parameters: dict[str, float], objective: Objective | None = None
) -> dict[str, Any]:
    """Central differences of whole primal runs of ``objective`` (the one ``result`` differentiated):
    every parameter, and one direction of the coordinates.

    Parameters move by ``RUN_FD_STEP`` of their values; the coordinates by ``RUN_FD_STEP`` of the mesh
    spacing along ``coordinate_direction``. Passes when every relative error is below 1e-5.
    """

    def value(changed: dict[str, float], coords: Any = None) -> float:
        return final_value(hydro, result.cycles, parameters | changed, coords, objective)

    rows = []
    for name in PARAMETERS:
        h = RUN_FD_STEP * abs(parameters[name])
        plus, minus = value({name: parameters[name] + h}), value({name: parameters[name] - h})
        rows.append((name, result.parameters[name], (plus - minus) / (2.0 * h), h))
    m = hydro.mesh
    h = RUN_FD_STEP * 1.125 / (m.tp * m.nx)
    d = coordinate_direction(hydro)
    plus, minus = value({}, m.coords + h * d), value({}, m.coords - h * d)
    exact = allsum(hydro, float(np.vdot(result.coords, d)))
    rows.append(("coords . direction", exact, (plus - minus) / (2.0 * h), h))
    checks = [
        {"what": n, "gradient": g, "fd": fd, "step": h, "rel_error": rel(g, fd)} for n, g, fd, h in rows
    ]
    return {"entries": checks, "passed": all(rel(g, fd) < RUN_TOLERANCE for _, g, fd, _ in rows)}
