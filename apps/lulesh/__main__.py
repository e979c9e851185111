"""``python -m apps.lulesh``: LULESH 2.0 (Sedov blast) on pad, with the original's flags and report.

Runs alone or under ``mpiexec -n N`` (N a cube: 1, 8, 27, ...; each rank an ``-s``-cube of elements).
Standard output ends with the original's report, so it can be compared with a C++ run's text. Bad input is
one line naming the flag, exit status 2; a physics abort prints what failed where and exits with the
original's code (VolumeError -1, QStopError -2, i.e. 255 and 254) on every rank.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import weakref
from typing import Any

import numpy as np

from apps import cli
from apps.cli import InputError
from apps.lulesh.hydro import PARAMETERS, STOPTIME

REFERENCE = {
    # (mesh edge, cycles asked or None to completion): (iterations, Final Origin Energy as printed)
    (3, None): (23, "4.001338e+03"),
    (5, None): (72, "7.853665e+03"),
    (10, 1): (1, "4.333329e+05"),
    (10, 10): (10, "2.596764e+05"),
    (10, None): (231, "2.720531e+04"),
    (30, 100): (100, "1.322672e+06"),
    (45, 100): (100, "4.464018e+06"),
}
"""The C++ original's results (serial runs; P ranks of ``-s n`` reproduce the serial run of P^(1/3) n)."""

UNTIL_COMPLETION = 9999999
MODES = ("primal", "grad", "sensitivity")
CHECK_CYCLE = 3
"""``--mode grad --check`` differentiates this cycle (the blast has reached the origin's neighbours)."""
MEMORY_SHARE = 0.5
"""Without ``--memory`` or ``--snapshots``, the whole-run gradient may hold this share of the memory free when
it starts (the node's, split among its ranks; a GPU's own)."""
EXIT_SAVE_FAILED = 74  # EX_IOERR: a stopped run's save, or a snapshot, could not be written
SYMMETRY_TOLERANCE = 1e-8
WARM_CYCLES = 2
"""Cycles of the warm-up run that compiles every kernel before the timed run: the second cycle is the first
recorded by ``pad.graph`` and the first to compute its time step from the previous one's constraints."""
PLOT_COMPONENTS = ("norm", "x", "y", "z")
PLOT_SCALES = ("symlog", "linear")
PLOT_OPTIONS = ("--plot-component", "--plot-scale", "--plot-slice", "--plot-contours")


def parse_args(argv: list[str] | None) -> Any:
    p = cli.Parser(
        prog="python -m apps.lulesh", description=__doc__.split("\n")[0].replace("``", ""), add_help=False
    )
    p.add_argument("-h", "--help", action="help", help="show this message and exit")
    p.add_argument("-q", action="store_true", help="quiet mode: suppress all standard output")
    p.add_argument(
        "-i", type=cli.integer(0), default=UNTIL_COMPLETION, metavar="ITERATIONS",
        help="at most this many cycles (default: until the stop time)",
    )  # fmt: skip
    p.add_argument("-s", type=cli.integer(1), default=30, metavar="SIZE", help="elements per side per rank")
    p.add_argument("-r", type=cli.integer(1), default=11, metavar="REGIONS", help="distinct regions")
    p.add_argument(
        "-b", type=cli.integer(0), default=1, metavar="BALANCE", help="load balance between regions"
    )
    p.add_argument("-c", type=cli.integer(0), default=1, metavar="COST", help="extra cost of costly regions")
    p.add_argument("-p", action="store_true", help="print each cycle's time and time step")
    p.add_argument("-f", metavar="FILES", help="(refused: pad writes no VisIt files)")
    p.add_argument("-v", action="store_true", help="(refused: pad writes no VisIt files)")
    p.add_argument(
        "--threads",
        type=cli.integer(1),
        help="CPU threads per rank (default: the cores shared by the node's ranks)",
    )
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="CPU threads, or one GPU per rank")
    p.add_argument("--json", metavar="PATH", help="write the machine-readable results here")
    p.add_argument(
        "--mode",
        choices=MODES,
        default="primal",
        help="primal run, per-cycle gradient, or the gradient of the whole run's Final Origin Energy",
    )
    p.add_argument("--check", action="store_true", help="grad, sensitivity: check against finite differences")
    p.add_argument(
        "--snapshots", type=cli.integer(1), metavar="K",
        help="sensitivity: state copies kept by the checkpointed loop (instead of --memory)",
    )  # fmt: skip
    p.add_argument(
        "--memory", type=_memory_size, metavar="SIZE",
        help="sensitivity: memory per rank for the checkpointed loop (512MB, 4GB; every cycle kept when the "
        f"run fits; default: {MEMORY_SHARE:.0%}% of the free memory)",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint-dir", metavar="DIR",
        help="sensitivity: where snapshots spill and a stopped run saves itself",
    )  # fmt: skip
    p.add_argument(
        "--time-limit", type=_seconds, metavar="SECONDS",
        help="sensitivity: after this long (or on SIGTERM) save to the checkpoint directory and exit 75",
    )  # fmt: skip
    p.add_argument("--resume", metavar="DIR", help="sensitivity: finish the run saved in DIR")
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", type=_assignment,
        help="override a model parameter (repeatable): " + ", ".join(PARAMETERS),
    )  # fmt: skip
    p.add_argument("--grad-output", metavar="PATH", help="sensitivity: dJ/d(initial coordinates) as .npy")
    p.add_argument(
        "--plot", metavar="PATH", help="sensitivity: dJ/d(initial coordinates) on a plane of nodes, .png"
    )
    p.add_argument(
        "--plot-component", choices=PLOT_COMPONENTS,
        help="--plot: the vectors' length, or one component, signed (default: norm)",
    )  # fmt: skip
    p.add_argument(
        "--plot-scale", choices=PLOT_SCALES,
        help="--plot: colours logarithmic in the size, linear near zero, or linear (default: symlog)",
    )  # fmt: skip
    p.add_argument(
        "--plot-slice", type=cli.integer(0), metavar="K",
        help="--plot: the plane of nodes z = K h, h the mesh spacing (default: 0, where the blast starts)",
    )  # fmt: skip
    p.add_argument(
        "--plot-contours",
        type=cli.integer(0),
        metavar="N",
        help="--plot: N contour lines over it (default: 0)",
    )
    args = p.parse_args(argv)
    if args.f is not None or args.v:
        raise InputError(f"{'-f' if args.f is not None else '-v'}: visualization output is not supported")
    for flag in (
        "--grad-output", "--plot", "--snapshots", "--memory", "--checkpoint-dir", "--time-limit", "--resume"
    ):  # fmt: skip
        if _given(args, flag):
            cli.only_with(flag, args.mode, ("sensitivity",))
    if args.snapshots is not None and args.memory is not None:
        raise InputError("--snapshots: give --snapshots or --memory, not both")
    if args.resume is not None and args.checkpoint_dir is not None:
        raise InputError("--checkpoint-dir: --resume DIR goes on saving in DIR; leave --checkpoint-dir out")
    if args.time_limit is not None and args.checkpoint_dir is None and args.resume is None:
        raise InputError("--time-limit: needs --checkpoint-dir DIR (or --resume DIR) to save the run in")
    if args.resume is not None and not os.path.isdir(args.resume):
        raise InputError(f"--resume: {args.resume} is not a directory")
    if args.check:
        cli.only_with("--check", args.mode, ("grad", "sensitivity"))
    for flag in PLOT_OPTIONS:
        if _given(args, flag) and args.plot is None:
            raise InputError(f"{flag}: only with --plot")
    edge = args.s * round(_size() ** (1 / 3))
    if args.plot_slice is not None and args.plot_slice > edge:
        raise InputError(f"--plot-slice: {args.plot_slice} is past the last plane of nodes ({edge})")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("--plot: needs matplotlib (pip install -e '.[bench]')") from None
    for flag, path in (("--json", args.json), ("--grad-output", args.grad_output), ("--plot", args.plot)):
        cli.check_writable(flag, path)
    args.set = dict(args.set)
    return args


def _given(args: Any, flag: str) -> bool:
    return getattr(args, flag[2:].replace("-", "_")) is not None


def _memory_size(text: str) -> int:
    """``--memory SIZE``: bytes of ``512MB``, ``4GB``, ``2GiB`` ..."""
    from pad.checkpoint import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def _assignment(text: str) -> tuple[str, float]:
    """``--set NAME=VALUE``: a model parameter and its value."""
    name, sep, value = text.partition("=")
    if not sep or name not in PARAMETERS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME=VALUE with NAME one of {', '.join(PARAMETERS)}"
        )
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None


def _banner(args: Any, ranks: int, threads: int) -> str:
    return (
        f"Running problem size {args.s}^3 per domain until completion\n"
        f"Num processors: {ranks}\n"
        f"Num threads: {threads}\n"
        f"Total number of elements: {ranks * args.s**3} \n\n"
        "To run other sizes, use -s <integer>.\n"
        "To run a fixed number of iterations, use -i <integer>.\n"
        "To run a more or less balanced region set, use -b <integer>.\n"
        "To change the relative costs of regions, use -c <integer>.\n"
        "To print out progress, use -p\n"
        "See help (-h) for more options\n"
    )


def symmetry(e: np.ndarray, nx: int) -> tuple[float, float, float]:
    """The original's check of rank 0's z = 0 plane: e[j, k] against e[k, j]; (max, total, max relative)."""
    plane = e[: nx * nx].reshape(nx, nx)
    upper = np.triu_indices(nx, 1)
    diff = np.abs(plane[upper] - plane.T[upper])
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / plane.T[upper]
    return (
        float(diff.max(initial=0.0)),
        float(diff.sum()),
        float(np.max(rel, initial=0.0, where=~np.isnan(rel))),
    )


def report(r: dict[str, Any]) -> str:
    """The original's end-of-run report, field for field and format for format."""
    return (
        "Run completed:\n"
        f"   Problem size        =  {r['problem']['size']}\n"
        f"   MPI tasks           =  {r['ranks']}\n"
        f"   Iteration count     =  {r['iterations']}\n"
        f"   Final Origin Energy =  {r['final_origin_energy']:12.6e}\n"
        "   Testing Plane 0 of Energy Array on rank 0:\n"
        f"        MaxAbsDiff   = {r['max_abs_diff']:12.6e}\n"
        f"        TotalAbsDiff = {r['total_abs_diff']:12.6e}\n"
        f"        MaxRelDiff   = {r['max_rel_diff']:12.6e}\n\n"
        f"Elapsed time         = {r['elapsed_s']:10.2g} (s)\n"
        f"Grind time (us/z/c)  = {r['grind_us']:10.8g} (per dom)  ({r['elapsed_s']:10.8g} overall)\n"
        f"FOM                  = {r['fom']:10.8g} (z/s)\n"
    )


def run(args: Any) -> dict[str, Any]:
    """Run LULESH in ``args.mode``; rank 0 returns the results, the other ranks an empty dict."""
    import pad
    import pad.mpi
    from apps.lulesh.hydro import device_bytes

    comm = pad.mpi.COMM_WORLD
    threads = cli.set_threads(args.threads, comm.mpi, args.device)
    held = device_bytes(args.s, args.mode, min(args.snapshots or 0, args.i)) + (args.memory or 0)
    need = cli.DeviceNeed(held, f"LULESH -s {args.s} --mode {args.mode}")
    memory = cli.Memory(args.device, comm.mpi, needs=need)
    args.resumable = _resumable(args, comm, threads)
    try:
        return _run(args, comm, threads, memory, need)
    finally:
        if args.resumable is not None:
            args.resumable.close()


def _run(args: Any, comm: Any, threads: int, memory: Any, need: Any) -> dict[str, Any]:
    import pad
    import pad.mpi
    from apps.lulesh import mesh
    from apps.lulesh.hydro import Hydro, default_parameters

    root = comm.rank == 0
    if root and not args.q:
        print(_banner(args, comm.size, threads), flush=True)
    hydro = Hydro(mesh.build(args.s, comm.size, comm.rank, args.r, args.b, args.c), comm, memory)
    parameters = default_parameters(args.s, hydro.mesh.tp) | args.set
    # Compile every kernel the mode needs, in parallel processes, then load them on a throwaway run: the timed
    # loop measures the program, not numba.
    ahead, compiled = _warm(hydro, lambda: pad.precompile(_rehearsal, hydro, parameters, args, comm=comm))
    warm = _warm(hydro, lambda: _timed(hydro, parameters, WARM_CYCLES))[0]
    if args.device == "gpu":
        cli.warm_up(lambda cycles: _timed(hydro, parameters, cycles)[2])

    bar = cli.progress(100.0, root and not args.q, f"lulesh -s {args.s}", unit="%")
    pad.mpi.reset_stats()
    try:
        state, cycles, seconds = _timed(hydro, parameters, args.i, _on_cycle(args, hydro, bar))
    finally:
        bar.close()
    record = _record(args, hydro, state, cycles, seconds, threads)
    record["compile_s"] = ahead + _compile_seconds(warm, seconds / max(cycles, 1))
    record["precompile"] = compiled
    record["mpi"] = {**pad.mpi.transport(), "primal": _mpi_per_cycle(hydro, cycles)}
    if args.mode == "grad":
        record.update(_grad(args, hydro, parameters, record))
    elif args.mode == "sensitivity":
        record.update(_sensitivity(args, hydro, parameters, record))
    if args.device == "gpu":
        record["gpu_memory"] = {"estimate_bytes": need.nbytes, "held_bytes": memory.held_bytes()}
    return record if root else {}


def _resumable(args: Any, comm: Any, threads: int) -> Any:
    """The whole-run gradient's ``pad.checkpoint.Resumable`` (None without --checkpoint-dir/--resume),
    made before any work so that a bad --resume is refused at once; every rank agrees."""
    from pad.checkpoint import Resumable, ResumeError

    directory = args.resume or args.checkpoint_dir
    if directory is None:
        return None
    identity = {
        "app": "lulesh",
        "size": args.s,
        "iterations": args.i,
        "regions": args.r,
        "balance": args.b,
        "cost": args.c,
        "parameters": args.set,
        "device": args.device,
        "threads": threads,
    }
    limit = None if args.time_limit is None else args.time_limit - (time.monotonic() - args.started)
    try:  # a refusal on any rank is one on every rank (Resumable agrees it)
        return Resumable(
            directory, time_limit=limit, identity=identity, comm=comm, resume=args.resume is not None
        )
    except ResumeError as exc:
        raise InputError(f"{'--resume' if args.resume else '--checkpoint-dir'}: {exc}") from None


_RUN_STATES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # hydro -> its runs' State


def _timed(hydro: Any, parameters: dict[str, float], cycles: int, on_cycle: Any = None, leapfrog: Any = None):
    """A run from the initial state: (its final state, cycles run, seconds of the slowest rank's loop).

    Every run of ``hydro`` starts in the same arrays, so that the timed run replays the ``pad.graph`` records
    of its cycles (and gradients) that the warm-up made, as it uses the kernels the warm-up compiled: it
    measures the steady cycle, and ``compile_s`` the warm-up's extra time."""
    import pad.mpi

    state = _RUN_STATES[hydro] = hydro.initial_state(parameters, into=_RUN_STATES.get(hydro))
    hydro.setup(state)
    hydro.comm.Barrier()
    start = time.perf_counter()
    cycles = hydro.advance(state, cycles, on_cycle, leapfrog)
    hydro.memory.sync()
    seconds = hydro.comm.mpi.allreduce(time.perf_counter() - start, op=pad.mpi.MAX)
    return state, cycles, seconds


def _rehearsal(hydro: Any, parameters: dict[str, float], args: Any) -> None:
    """The warm-up runs of ``args.mode``, for ``pad.precompile`` to note their launches."""
    from apps.lulesh.adjoint import StepGradient, sensitivity

    _timed(hydro, parameters, WARM_CYCLES)
    if args.mode == "grad":
        _timed(hydro, parameters, WARM_CYCLES, leapfrog=StepGradient(hydro))
    if args.mode == "sensitivity":
        sensitivity(hydro, WARM_CYCLES, parameters, args.snapshots)


def _warm(hydro: Any, work: Any) -> tuple[float, Any]:
    """Seconds of the slowest rank's ``work()`` (a warm-up run, which compiles the kernels it launches: see
    ``_compile_seconds``), and what it returned."""
    import pad.mpi

    hydro.comm.Barrier()
    start = time.perf_counter()
    out = work()
    hydro.memory.sync()
    return float(hydro.comm.mpi.allreduce(time.perf_counter() - start, op=pad.mpi.MAX)), out


def _compile_seconds(warm: float, per_cycle: float) -> float:
    """``compile_s``: a warm-up run's seconds beyond what its ``WARM_CYCLES`` cycles take when timed, i.e.
    compiling its kernels (or loading them from the cache) and recording its ``pad.graph`` replays."""
    return max(0.0, warm - WARM_CYCLES * per_cycle)


def _on_cycle(args: Any, hydro: Any, bar: Any) -> Any:
    """The progress bar's and ``-p``'s view of each cycle."""
    done = [0.0]
    printing = args.p and hydro.rank == 0 and not args.q

    def on_cycle(cycle: int, t: float, dt: float) -> None:
        if printing:
            print(f"cycle = {cycle}, time = {t:e}, dt={dt:e}", flush=True)
        fraction = 100.0 * max(t / STOPTIME, cycle / args.i)
        bar.update(fraction - done[0])
        done[0] = fraction

    return on_cycle


def _record(args: Any, hydro: Any, state: Any, cycles: int, seconds: float, threads: int) -> dict[str, Any]:
    """The primal run's results: the original's report fields and the checks against its numbers."""
    size = hydro.comm.size
    e = hydro.memory.get(state.e)
    max_abs, total_abs, max_rel = symmetry(e, args.s)
    grind = seconds * 1e6 / max(cycles, 1) / args.s**3
    energy = float(e[0])
    what = "symmetry of rank 0's energies on the z = 0 plane (MaxRelDiff)"
    checks: dict[str, Any] = {
        "symmetry": {"max_rel_diff": max_rel}
        | cli.verdict(what, max_rel <= SYMMETRY_TOLERANCE, max_rel, SYMMETRY_TOLERANCE)
    }
    edge = round(size ** (1 / 3)) * args.s
    known = None if args.set else REFERENCE.get((edge, None if args.i == UNTIL_COMPLETION else args.i))
    if known is not None:
        iterations, printed = known
        what = f"iteration count and Final Origin Energy equal the C++ original's ({iterations}, {printed})"
        same = cycles == iterations and f"{energy:12.6e}".strip() == printed
        checks["reference"] = {"iterations": iterations, "final_origin_energy": printed} | cli.verdict(
            what, same
        )
    valid = bool(np.isfinite(e).all()) and all(c["passed"] for c in checks.values())
    return {
        "app": "lulesh",
        "mode": args.mode,
        "ranks": size,
        "threads": threads,
        "device": args.device,
        "problem": {
            "size": args.s,
            "regions": args.r,
            "balance": args.b,
            "cost": args.c,
            "elements": size * args.s**3,
        },
        "parameters": dict(args.set),
        "iterations": cycles,
        "time_primal_s": seconds / max(cycles, 1),
        "time_grad_s": None,
        "overhead": None,
        "valid": valid,
        "checks": checks,
        "final_origin_energy": energy,
        "max_abs_diff": max_abs,
        "total_abs_diff": total_abs,
        "max_rel_diff": max_rel,
        "elapsed_s": float(seconds),
        "grind_us": grind,
        "fom": 1000.0 / (grind / size),
    }


def _grad(args: Any, hydro: Any, parameters: dict[str, float], primal: dict[str, Any]) -> dict[str, Any]:
    """``--mode grad``: the same run with each leap-frog step differentiated (Enzyme's measurement)."""
    import pad.mpi
    from apps.lulesh.adjoint import StepGradient, check_step

    step = StepGradient(hydro)
    # compiles the adjoints, and inspects their index arrays
    warm = _warm(hydro, lambda: _timed(hydro, parameters, WARM_CYCLES, leapfrog=step))[0]
    bar = cli.progress(100.0, hydro.rank == 0 and not args.q, f"lulesh -s {args.s} gradient", unit="%")
    pad.mpi.reset_stats()
    before = pad.launch_stats()
    try:
        state, cycles, seconds = _timed(hydro, parameters, args.i, _on_cycle(args, hydro, bar), step)
    finally:
        bar.close()
    after = pad.launch_stats()
    mpi = primal["mpi"] | {"grad": _mpi_per_cycle(hydro, cycles)}
    energy = float(hydro.memory.get(state.e)[0])
    checks = {"gradient_run_equals_primal": _same_run(cycles, energy, primal)}
    if args.check:
        checks["gradient"] = _step_verdicts(check_step(hydro, _state_at(hydro, parameters, CHECK_CYCLE)))
    out = {
        "time_grad_s": seconds / max(cycles, 1),
        "overhead": seconds / primal["elapsed_s"] if primal["elapsed_s"] else None,
        "gradient_norm": _norm(hydro, step.shadows),
        "compile_s": primal["compile_s"] + _compile_seconds(warm, seconds / max(cycles, 1)),
        "mpi": mpi,
        # the scatter adjoints' plans: inspections (made in the warm-up) and validations per timed cycle
        "plans": {
            "inspections": after["inspections"],
            "inspect_s": after["inspect_s"],
            "validations_per_cycle": (after["validations"] - before["validations"]) / max(cycles, 1),
            "validate_s_per_cycle": (after["validate_s"] - before["validate_s"]) / max(cycles, 1),
            "strategies": {name: k["strategy"] for name, k in after["kernels"].items()},
        },
    }
    return _merge_checks(primal, checks, out)


def _same_run(cycles: int, energy: float, primal: dict[str, Any]) -> dict[str, Any]:
    same = cycles == primal["iterations"] and energy == primal["final_origin_energy"]
    return cli.verdict("the gradient run's cycles and Final Origin Energy equal the primal run's", same)


def _step_verdicts(check: dict[str, Any]) -> dict[str, Any]:
    """``check_step``'s result with a verdict per part."""
    from apps.lulesh.adjoint import STEP_TOLERANCES as tol

    entries, dot, along = check["entries_rel_error"], check["dot_product"], check["direction"]
    parts = [
        cli.verdict(
            f"{len(check['entries'])} entries of cycle {CHECK_CYCLE}'s gradient against central differences",
            entries < tol["entries"], entries, tol["entries"],
        ),
        cli.verdict(
            "forward mode against reverse mode (dot-product test)",
            dot["rel_error"] < tol["dot_product"], dot["rel_error"], tol["dot_product"],
        ),
        cli.verdict(
            "forward mode against central differences along a direction",
            along["rel_error"] < tol["direction"], along["rel_error"], tol["direction"],
        ),
    ]  # fmt: skip
    return check | {"parts": parts}


def _mpi_per_cycle(hydro: Any, cycles: int) -> dict[str, dict[str, float]]:
    """pad.mpi's counters since they were reset, per cycle, for each phase that made calls: bytes received,
    calls and bytes staged between device and host summed over the ranks, the slowest rank's seconds."""
    import pad.mpi

    mine = pad.mpi.stats()
    every = hydro.comm.mpi.allgather(mine) if hydro.comm.size > 1 else [mine]
    per = max(cycles, 1)
    out = {}
    for phase in mine:
        total = {name: sum(counts[phase][name] for counts in every) / per for name in mine[phase]}
        if total["calls"]:
            out[phase] = total | {"seconds": max(counts[phase]["seconds"] for counts in every) / per}
    return out


def _state_at(hydro: Any, parameters: dict[str, float], cycle: int) -> Any:
    """The state of a run at ``cycle``, its time increment taken (where ``--check`` differentiates)."""
    state = hydro.initial_state(parameters)
    hydro.setup(state)
    hydro.advance(state, cycle - 1)
    hydro.time_increment(state, first=cycle == 1)
    return state


def _norm(hydro: Any, arrays: dict[str, Any]) -> float:
    """The 2-norm of the gradient, every rank's arrays together."""
    from apps.lulesh.adjoint import allsum

    local = sum(float(np.vdot(a, a)) for a in map(hydro.memory.get, arrays.values()))
    return float(np.sqrt(allsum(hydro, local)))


def _merge_checks(primal: dict[str, Any], checks: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with the primal's checks and these, ``valid`` only if all passed."""
    passed = all(c["passed"] for c in checks.values())
    return out | {"checks": primal["checks"] | checks, "valid": primal["valid"] and passed}


def _sensitivity(
    args: Any, hydro: Any, parameters: dict[str, float], primal: dict[str, Any]
) -> dict[str, Any]:
    """``--mode sensitivity``: the gradient of the whole run's Final Origin Energy."""
    import pad.checkpoint
    import pad.mpi
    from apps.lulesh.adjoint import check_sensitivity, gather, sensitivity

    # the warm-up measures a snapshot and a cycle's records too, for the budget
    warm, probe = _warm(hydro, lambda: sensitivity(hydro, WARM_CYCLES, parameters, memory=1 << 62))
    budget = None if args.snapshots is not None else _budget(args, hydro, probe.stats)
    if args.resumable is not None and hydro.rank == 0:
        print(
            f"lulesh: whole-run gradient started; SIGTERM or the time limit saves it in "
            f"{args.resumable.directory}", file=sys.stderr, flush=True,
        )  # fmt: skip
    pad.mpi.reset_stats()
    result = sensitivity(
        hydro, args.i, parameters, args.snapshots, memory=budget, resumable=args.resumable,
        expected_cycles=primal["iterations"],
    )  # fmt: skip
    mpi = primal["mpi"] | {"sensitivity": _mpi_per_cycle(hydro, result.cycles)}
    coords = gather(hydro, "xv", result.coords)
    checks = {"gradient_run_equals_primal": _same_run(result.cycles, result.energy, primal)}
    if args.check:
        checks["gradient"] = _run_verdicts(check_sensitivity(hydro, result, parameters))
    if coords is None:
        return {}
    if args.grad_output:
        np.save(args.grad_output, coords.T)
    if args.plot:
        _plot(args, coords, hydro.mesh.tp, result.cycles)
    stats = result.stats
    best: tuple[str, int] | tuple[None, None]
    if budget is None:
        best = ("revolve", pad.checkpoint.optimal_recomputations(stats.nsteps, args.snapshots))
    else:
        best = pad.checkpoint.best_offline(stats.nsteps, budget, stats) or (None, None)
    out = {
        "time_grad_s": result.seconds,
        "time_primal_s": primal["elapsed_s"],
        "overhead": result.seconds / primal["elapsed_s"] if primal["elapsed_s"] else None,
        "gradient": result.parameters | {"coords_norm": float(np.linalg.norm(coords))},
        "schedule": stats.schedule,
        "memory": budget,
        "snapshots": args.snapshots if args.snapshots is not None else stats.snapshots_peak,
        "snapshots_peak": stats.snapshots_peak,
        "recomputed_steps": stats.recomputed,
        "replayed_steps": stats.replayed + stats.replayed_forward,
        "optimal_recomputed_steps": best[1],
        "optimal_schedule": best[0],
        "peak_state_bytes": stats.peak_memory,
        "peak_snapshot_bytes": stats.peak_bytes,
        "state_bytes": stats.state_bytes,
        "snapshot_bytes": stats.snapshot_bytes,
        "record_bytes": stats.record_bytes,
        "sessions": stats.sessions,
        "compile_s": primal["compile_s"] + _compile_seconds(warm, result.seconds / max(result.cycles, 1)),
        "mpi": mpi,
    }
    return _merge_checks(primal, checks, out)


def _budget(args: Any, hydro: Any, probe: Any) -> int:
    """The loop's memory per rank: ``--memory`` or a share of the free memory, checked against the least
    a schedule needs (one snapshot, one cycle's records, the final state's copy: measured by ``probe``)."""
    import pad.mpi
    from pad.checkpoint import format_size

    need = probe.snapshot_bytes + probe.record_bytes + probe.state_bytes
    need = hydro.comm.mpi.allreduce(need, op=pad.mpi.MAX) if hydro.comm.size > 1 else need
    if args.memory is None:
        return max(int(_free_memory(hydro) * MEMORY_SHARE), need)
    if args.memory < need:
        raise InputError(
            f"--memory: {format_size(args.memory)} is too small for -s {args.s}: the whole-run gradient needs "
            f"at least {format_size(need)} per rank (a snapshot of {format_size(probe.snapshot_bytes)}, one "
            f"cycle's records of {format_size(probe.record_bytes)} and the final state's copy)"
        )
    return int(args.memory)


def _free_memory(hydro: Any) -> int:
    """Memory free now for this rank: the GPU's, or the node's shared among its ranks."""
    if hydro.memory.device == "gpu" and hydro.memory.module is not None:
        return int(hydro.memory.module.cuda.runtime.memGetInfo()[0])
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    comm = hydro.comm.mpi
    if hydro.comm.size > 1:
        from mpi4py import MPI

        free //= comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
    return int(free)


def _run_verdicts(check: dict[str, Any]) -> dict[str, Any]:
    """``check_sensitivity``'s result with a verdict per entry."""
    from apps.lulesh.adjoint import RUN_TOLERANCE

    parts = [
        cli.verdict(
            f"dJ/d({e['what']}) against central differences of whole runs",
            e["rel_error"] < RUN_TOLERANCE, e["rel_error"], RUN_TOLERANCE,
        )
        for e in check["entries"]
    ]  # fmt: skip
    return check | {"parts": parts}


def _plot(args: Any, coords: np.ndarray, tp: int, cycles: int) -> None:
    """``--plot``: ``sensitivity_figure`` saved as a PNG."""
    fig = sensitivity_figure(args, coords, tp, cycles)
    import matplotlib.pyplot as plt

    fig.savefig(args.plot, dpi=120, bbox_inches="tight")
    plt.close(fig)


def sensitivity_figure(args: Any, coords: np.ndarray, tp: int, cycles: int) -> Any:
    """dJ/d(initial coordinates) on the plane of nodes ``z = K h`` (``--plot-slice K``), the vectors'
    length or one signed component, each node's value drawn on a cell centred on the node. Colours are
    symmetric-logarithmic by default: logarithmic in the size from the smallest non-zero size up, linear
    below it, so that the exact zeros (nodes the blast has not reached) show as zeros. ``coords``: (3,
    nodes) in global order; ``tp`` ranks per side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize, SymLogNorm

    edge, k = args.s * tp, args.plot_slice or 0
    component, scale = args.plot_component or "norm", args.plot_scale or "symlog"
    n = edge + 1
    plane = coords[:, k * n * n : (k + 1) * n * n]
    values = np.linalg.norm(plane, axis=0) if component == "norm" else plane["xyz".index(component)]
    values = values.reshape(n, n)  # rows y, columns x
    sizes = np.abs(values)
    largest = float(sizes.max()) or 1.0
    smallest = float(sizes[sizes > 0].min(initial=largest))
    low = 0.0 if component == "norm" else -largest
    contours = args.plot_contours or 0
    if scale == "symlog":
        norm: Normalize = SymLogNorm(linthresh=max(smallest, 1e-12 * largest), vmin=low, vmax=largest)
        decades = largest * 10.0 ** -np.arange(contours)[::-1]  # a decade apart, from the largest down
        levels = decades if component == "norm" else np.concatenate([-decades[::-1], decades])
    else:
        norm = Normalize(vmin=low, vmax=largest)
        levels = np.linspace(low, largest, contours + 2)[1:-1]
    spacing = 1.125 / edge
    grid = np.arange(n) * spacing
    fig, ax = plt.subplots(figsize=(6.4, 5.4))
    cmap = "viridis" if component == "norm" else "RdBu_r"
    image = ax.pcolormesh(grid, grid, values, shading="nearest", cmap=cmap, norm=norm)
    if len(levels):
        ax.contour(grid, grid, values, levels=levels, colors="k", linewidths=0.6)
    what = "|dJ/dx|" if component == "norm" else f"dJ/d{component}"
    fig.colorbar(image, ax=ax, label=f"{what} at the node (J: Final Origin Energy)")
    ranks = f"{tp**3} ranks of -s {args.s}" if tp > 1 else f"1 rank, -s {args.s}"
    ax.set_aspect("equal")
    ax.set(
        xlabel="x",
        ylabel="y",
        title=f"LULESH, {edge}x{edge}x{edge} elements ({ranks}), {cycles} cycles:\n"
        f"sensitivity of J to the initial node positions at z = {k * spacing:.4g} (node plane {k} of 0-{edge})",
    )
    return fig


def _gradient_lines(r: dict[str, Any]) -> str:
    """What the gradient modes add before the original's report."""
    if r["mode"] == "grad":
        return (
            f"Gradient per cycle   = {r['time_grad_s']:10.4g} (s), primal {r['time_primal_s']:10.4g} (s): "
            f"overhead {r['overhead']:.2f}x\n"
        )
    lines = [
        f"   {'|dJ/d(coordinates)|' if name == 'coords_norm' else 'dJ/d' + name:<22} = {value: .12e}"
        for name, value in r["gradient"].items()
    ]
    from pad.checkpoint import format_size

    budget = "" if r["memory"] is None else f" in {format_size(r['memory'])}"
    return (
        "Sensitivity of the Final Origin Energy J:\n" + "\n".join(lines) + "\n"
        f"Gradient of the run  = {r['time_grad_s']:10.4g} (s), primal {r['time_primal_s']:10.4g} (s): "
        f"overhead {r['overhead']:.2f}x\n"
        f"Checkpointing        = {r['schedule']}{budget}: {r['snapshots_peak']} snapshots at most, "
        f"{r['recomputed_steps']} steps recomputed ({_best_offline(r)}), {r['replayed_steps']} replayed, peak "
        f"{format_size(r['peak_state_bytes'])} measured"
        + (f", {r['sessions']} sessions" if r["sessions"] > 1 else "")
        + "\n"
    )


def _best_offline(r: dict[str, Any]) -> str:
    if r["optimal_schedule"] is None:
        return "no offline schedule fits this memory at the sizes measured"
    return f"best offline schedule for this memory: {r['optimal_schedule']}, {r['optimal_recomputed_steps']}"


def _check_lines(r: dict[str, Any]) -> str:
    """The checks' verdicts and the warm-up's time, before the original's report."""
    lines = cli.check_lines(r["checks"])
    lines.append(f"Warm-up (compiles)   = {r['compile_s']:10.4g} (s), excluded from the times below")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI

    from apps.lulesh.hydro import Abort
    from apps.lulesh.mesh import decompose
    from pad.checkpoint import SaveError, Stopped

    started = time.monotonic()  # --time-limit counts from here
    try:
        cli.check_launched(MPI)
        args = parse_args(argv)
        args.started = started
        decompose(_size(), MPI.COMM_WORLD.Get_rank())
        result = run(args)
    except InputError as exc:
        if cli.first_rank():
            print(f"lulesh: error: {exc}", file=sys.stderr)
        return cli.EXIT_BAD_INPUT
    except Abort as exc:
        print(f"lulesh: {exc}", file=sys.stderr, flush=True)
        return exc.code & 0xFF
    except Stopped as exc:
        if cli.first_rank():
            print(f"lulesh: {exc}; finish it with --resume {exc.directory}", file=sys.stderr, flush=True)
        return exc.exit_status
    except SaveError as exc:  # a save's: every rank's; a snapshot's: this rank's alone
        if not exc.agreed or cli.first_rank():
            rank = f"rank {MPI.COMM_WORLD.Get_rank()}: " if not exc.agreed and _size() > 1 else ""
            print(f"lulesh: {rank}{exc.strerror}", file=sys.stderr, flush=True)
        return EXIT_SAVE_FAILED
    if result:
        if not args.q:
            if args.mode != "primal":
                print(_gradient_lines(result), flush=True)
            print(_check_lines(result), flush=True)
            print(report(result), flush=True)
        if args.json:
            cli.write_json(args.json, result)
        return 0 if result["valid"] else 1
    return 0


def _size() -> int:
    from mpi4py import MPI

    return int(MPI.COMM_WORLD.Get_size())


if __name__ == "__main__":
    sys.exit(cli.exit_status(main))
