"""``python -m apps.lulesh``: LULESH 2.0 (Sedov blast) on pad, with the original's flags and report.

Runs alone or under ``mpiexec -n N`` (N a cube: 1, 8, 27, ...; each rank an ``-s``-cube of elements).
Standard output ends with the original's report, so it can be compared with a C++ run's text. Bad input is
one line naming the flag, exit status 2; a physics abort prints what failed where and exits with the
original's code (VolumeError -1, QStopError -2, i.e. 255 and 254) on every rank.
"""

from __future__ import annotations

import argparse
import sys
import time
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
DEFAULT_SNAPSHOTS = 32
"""Snapshots of the whole-run gradient: with the one step recorded for its reverse pass, the memory of the
state copies stays below 64 copies of the state."""
SYMMETRY_TOLERANCE = 1e-8


def parse_args(argv: list[str] | None) -> Any:
    p = cli.Parser(prog="python -m apps.lulesh", description=__doc__.split("\n")[0], add_help=False)
    p.add_argument("-h", action="help", help="show this message and exit")
    p.add_argument("-q", action="store_true", help="quiet mode: suppress all standard output")
    p.add_argument(
        "-i", type=cli.integer(0), default=UNTIL_COMPLETION, metavar="ITERATIONS", help="cycles to run"
    )
    p.add_argument("-s", type=cli.integer(1), default=30, metavar="SIZE", help="mesh edge per rank (30)")
    p.add_argument("-r", type=cli.integer(1), default=11, metavar="REGIONS", help="distinct regions (11)")
    p.add_argument(
        "-b", type=cli.integer(0), default=1, metavar="BALANCE", help="load balance between regions (1)"
    )
    p.add_argument(
        "-c", type=cli.integer(0), default=1, metavar="COST", help="extra cost of costly regions (1)"
    )
    p.add_argument("-p", action="store_true", help="print each cycle's time and time step")
    p.add_argument("-f", metavar="FILES", help="(refused: pad writes no VisIt files)")
    p.add_argument("-v", action="store_true", help="(refused: pad writes no VisIt files)")
    p.add_argument("--threads", type=cli.integer(1), help="CPU threads per rank (default: the cores)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--json", metavar="PATH", help="write the machine-readable results here")
    p.add_argument(
        "--mode",
        choices=MODES,
        default="primal",
        help="primal run, per-cycle gradient, or the gradient of the whole run's Final Origin Energy",
    )
    p.add_argument("--check", action="store_true", help="grad, sensitivity: check against finite differences")
    p.add_argument(
        "--snapshots", type=cli.integer(1), default=DEFAULT_SNAPSHOTS, metavar="K",
        help=f"sensitivity: state copies kept by the checkpointed loop ({DEFAULT_SNAPSHOTS})",
    )  # fmt: skip
    p.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", type=_assignment,
        help="override a model parameter: " + ", ".join(PARAMETERS),
    )  # fmt: skip
    p.add_argument("--grad-output", metavar="PATH", help="sensitivity: dJ/d(initial coordinates) as .npy")
    p.add_argument("--plot", metavar="PATH", help="sensitivity: |dJ/dx| on the z = 0 plane as .png")
    args = p.parse_args(argv)
    if args.f is not None or args.v:
        raise InputError(f"{'-f' if args.f is not None else '-v'}: visualization output is not supported")
    for flag, value in (("--grad-output", args.grad_output), ("--plot", args.plot)):
        if value is not None and args.mode != "sensitivity":
            raise InputError(f"{flag}: only with --mode sensitivity")
    if args.check and args.mode == "primal":
        raise InputError("--check: only with --mode grad or --mode sensitivity")
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError("--plot: needs matplotlib (pip install -e '.[bench]')") from None
    for flag, path in (("--json", args.json), ("--grad-output", args.grad_output), ("--plot", args.plot)):
        cli.check_writable(flag, path)
    args.set = dict(args.set)
    return args


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
    import pad.mpi
    from apps.lulesh import mesh
    from apps.lulesh.hydro import Hydro, default_parameters, device_bytes

    comm = pad.mpi.COMM_WORLD
    threads = cli.set_threads(args.threads, comm.mpi) if args.device == "cpu" else 1
    snapshots = min(args.snapshots, args.i)
    need = cli.DeviceNeed(
        device_bytes(args.s, args.mode, snapshots), f"LULESH -s {args.s} --mode {args.mode}"
    )
    memory = cli.Memory(args.device, comm.mpi, needs=need)
    root = comm.rank == 0
    if root and not args.q:
        print(_banner(args, comm.size, threads), flush=True)
    hydro = Hydro(mesh.build(args.s, comm.size, comm.rank, args.r, args.b, args.c), comm, memory)
    parameters = default_parameters(args.s, hydro.mesh.tp) | args.set
    # Compile every kernel on a throwaway cycle, so the timed loop measures the program, not numba.
    _timed(hydro, parameters, 1)
    if args.device == "gpu":
        cli.warm_up(lambda cycles: _timed(hydro, parameters, cycles)[2])

    bar = cli.progress(100.0, root and not args.q, f"lulesh -s {args.s}", unit="%")
    pad.mpi.reset_stats()
    try:
        state, cycles, seconds = _timed(hydro, parameters, args.i, _on_cycle(args, hydro, bar))
    finally:
        bar.close()
    record = _record(args, hydro, state, cycles, seconds, threads)
    record["mpi"] = {**pad.mpi.transport(), "primal": _mpi_per_cycle(hydro, cycles)}
    if args.mode == "grad":
        record.update(_grad(args, hydro, parameters, record))
    elif args.mode == "sensitivity":
        record.update(_sensitivity(args, hydro, parameters, record))
    if args.device == "gpu":
        record["gpu_memory"] = {"estimate_bytes": need.nbytes, "held_bytes": memory.held_bytes()}
    return record if root else {}


def _timed(hydro: Any, parameters: dict[str, float], cycles: int, on_cycle: Any = None, leapfrog: Any = None):
    """A run from the initial state: (its final state, cycles run, seconds of the slowest rank's loop)."""
    import pad.mpi

    state = hydro.initial_state(parameters)
    hydro.setup(state)
    hydro.comm.Barrier()
    start = time.perf_counter()
    cycles = hydro.advance(state, cycles, on_cycle, leapfrog)
    hydro.memory.sync()
    seconds = hydro.comm.mpi.allreduce(time.perf_counter() - start, op=pad.mpi.MAX)
    return state, cycles, seconds


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
    checks: dict[str, Any] = {"symmetry": {"max_rel_diff": max_rel, "tolerance": SYMMETRY_TOLERANCE}}
    valid = bool(np.isfinite(e).all()) and max_rel <= SYMMETRY_TOLERANCE
    edge = round(size ** (1 / 3)) * args.s
    known = None if args.set else REFERENCE.get((edge, None if args.i == UNTIL_COMPLETION else args.i))
    if known is not None:
        iterations, printed = known
        checks["reference"] = {"iterations": iterations, "final_origin_energy": printed}
        valid = valid and cycles == iterations and f"{energy:12.6e}".strip() == printed
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
    _timed(hydro, parameters, 1, leapfrog=step)  # compiles the adjoints
    bar = cli.progress(100.0, hydro.rank == 0 and not args.q, f"lulesh -s {args.s} gradient", unit="%")
    pad.mpi.reset_stats()
    try:
        state, cycles, seconds = _timed(hydro, parameters, args.i, _on_cycle(args, hydro, bar), step)
    finally:
        bar.close()
    mpi = primal["mpi"] | {"grad": _mpi_per_cycle(hydro, cycles)}
    energy = float(hydro.memory.get(state.e)[0])
    same = cycles == primal["iterations"] and energy == primal["final_origin_energy"]
    checks = {"gradient_run_equals_primal": same}
    if args.check:
        checks["gradient"] = check_step(hydro, _state_at(hydro, parameters, CHECK_CYCLE))
    out = {
        "time_grad_s": seconds / max(cycles, 1),
        "overhead": seconds / primal["elapsed_s"] if primal["elapsed_s"] else None,
        "gradient_norm": _norm(hydro, step.shadows),
        "mpi": mpi,
    }
    return _merge_checks(primal, checks, out)


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
    passed = all(c if isinstance(c, bool) else c["passed"] for c in checks.values())
    return out | {"checks": primal["checks"] | checks, "valid": primal["valid"] and passed}


def _sensitivity(
    args: Any, hydro: Any, parameters: dict[str, float], primal: dict[str, Any]
) -> dict[str, Any]:
    """``--mode sensitivity``: the gradient of the whole run's Final Origin Energy."""
    import pad.checkpoint
    import pad.mpi
    from apps.lulesh.adjoint import check_sensitivity, gather, sensitivity

    sensitivity(hydro, 1, parameters, args.snapshots)  # compiles the adjoints
    pad.mpi.reset_stats()
    result = sensitivity(hydro, args.i, parameters, args.snapshots)
    mpi = primal["mpi"] | {"sensitivity": _mpi_per_cycle(hydro, result.cycles)}
    coords = gather(hydro, "xv", result.coords)
    same = result.cycles == primal["iterations"] and result.energy == primal["final_origin_energy"]
    checks = {"gradient_run_equals_primal": same}
    if args.check:
        checks["gradient"] = check_sensitivity(hydro, result, parameters)
    if coords is None:
        return {}
    if args.grad_output:
        np.save(args.grad_output, coords.T)
    if args.plot:
        _plot(args.plot, coords, args.s * hydro.mesh.tp)
    stats = result.stats
    out = {
        "time_grad_s": result.seconds,
        "time_primal_s": primal["elapsed_s"],
        "overhead": result.seconds / primal["elapsed_s"] if primal["elapsed_s"] else None,
        "gradient": result.parameters | {"coords_norm": float(np.linalg.norm(coords))},
        "snapshots": args.snapshots,
        "snapshots_peak": stats.snapshots_peak,
        "recomputed_steps": stats.recomputed,
        "optimal_recomputed_steps": pad.checkpoint.optimal_recomputations(stats.nsteps, args.snapshots),
        "peak_state_bytes": stats.peak_bytes,
        "state_bytes": stats.state_bytes,
        "mpi": mpi,
    }
    return _merge_checks(primal, checks, out)


def _plot(path: str, coords: np.ndarray, edge: int) -> None:
    """|dJ/dx| at the nodes of the z = 0 plane (the first ``(edge + 1)^2`` nodes in global order)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = edge + 1
    plane = np.linalg.norm(coords[:, : n * n], axis=0).reshape(n, n)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    image = ax.imshow(plane, origin="lower", extent=(0.0, 1.125, 0.0, 1.125), cmap="viridis")
    fig.colorbar(image, ax=ax, label="|dJ/dx| (J: Final Origin Energy)")
    ax.set(xlabel="x", ylabel="y", title=f"LULESH -s {edge}: sensitivity to the initial mesh, z = 0")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


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
    return (
        "Sensitivity of the Final Origin Energy J:\n" + "\n".join(lines) + "\n"
        f"Gradient of the run  = {r['time_grad_s']:10.4g} (s), primal {r['time_primal_s']:10.4g} (s): "
        f"overhead {r['overhead']:.2f}x; {r['snapshots']} snapshots, {r['recomputed_steps']} steps "
        f"recomputed (offline optimum {r['optimal_recomputed_steps']})\n"
    )


def main(argv: list[str] | None = None) -> int:
    from apps.lulesh.hydro import Abort
    from apps.lulesh.mesh import decompose

    rank = _rank()
    try:
        args = parse_args(argv)
        decompose(_size(), rank)
        result = run(args)
    except InputError as exc:
        if rank == 0:
            print(f"lulesh: error: {exc}", file=sys.stderr)
        return cli.EXIT_BAD_INPUT
    except Abort as exc:
        print(f"lulesh: {exc}", file=sys.stderr, flush=True)
        return exc.code & 0xFF
    if result:
        if not args.q:
            if args.mode != "primal":
                print(_gradient_lines(result), flush=True)
            print(report(result), flush=True)
        if args.json:
            cli.write_json(args.json, result)
        return 0 if result["valid"] else 1
    return 0


def _rank() -> int:
    from mpi4py import MPI

    return int(MPI.COMM_WORLD.Get_rank())


def _size() -> int:
    from mpi4py import MPI

    return int(MPI.COMM_WORLD.Get_size())


if __name__ == "__main__":
    sys.exit(cli.exit_status(main))
