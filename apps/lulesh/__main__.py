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
EXIT_SAVE_FAILED = 74  # EX_IOERR: a stopped run could not be saved
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
        "--snapshots", type=cli.integer(1), metavar="K",
        help="sensitivity: state copies kept by the checkpointed loop (instead of --memory)",
    )  # fmt: skip
    p.add_argument(
        "--memory", type=_memory_size, metavar="SIZE",
        help="sensitivity: memory per rank for the checkpointed loop (512MB, 4GB; every cycle kept when the "
        f"run fits; default: {MEMORY_SHARE:.0%} of the free memory)",
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
        help="override a model parameter: " + ", ".join(PARAMETERS),
    )  # fmt: skip
    p.add_argument("--grad-output", metavar="PATH", help="sensitivity: dJ/d(initial coordinates) as .npy")
    p.add_argument("--plot", metavar="PATH", help="sensitivity: |dJ/dx| on the z = 0 plane as .png")
    args = p.parse_args(argv)
    if args.f is not None or args.v:
        raise InputError(f"{'-f' if args.f is not None else '-v'}: visualization output is not supported")
    for flag, value in (
        ("--grad-output", args.grad_output), ("--plot", args.plot), ("--snapshots", args.snapshots),
        ("--memory", args.memory), ("--checkpoint-dir", args.checkpoint_dir),
        ("--time-limit", args.time_limit), ("--resume", args.resume),
    ):  # fmt: skip
        if value is not None and args.mode != "sensitivity":
            raise InputError(f"{flag}: only with --mode sensitivity")
    if args.snapshots is not None and args.memory is not None:
        raise InputError("--snapshots: give --snapshots or --memory, not both")
    if args.resume is not None and args.checkpoint_dir is not None:
        raise InputError("--checkpoint-dir: --resume DIR goes on saving in DIR; leave --checkpoint-dir out")
    if args.time_limit is not None and args.checkpoint_dir is None and args.resume is None:
        raise InputError("--time-limit: needs --checkpoint-dir DIR (or --resume DIR) to save the run in")
    if args.resume is not None and not os.path.isdir(args.resume):
        raise InputError(f"--resume: {args.resume} is not a directory")
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
    import pad.mpi

    comm = pad.mpi.COMM_WORLD
    threads = cli.set_threads(args.threads, comm.mpi) if args.device == "cpu" else 1
    memory = cli.Memory(args.device, comm.mpi)
    args.resumable = _resumable(args, comm, threads)
    try:
        return _run(args, comm, threads, memory)
    finally:
        if args.resumable is not None:
            args.resumable.close()


def _run(args: Any, comm: Any, threads: int, memory: Any) -> dict[str, Any]:
    from apps.lulesh import mesh
    from apps.lulesh.hydro import Hydro, default_parameters

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
    try:
        state, cycles, seconds = _timed(hydro, parameters, args.i, _on_cycle(args, hydro, bar))
    finally:
        bar.close()
    record = _record(args, hydro, state, cycles, seconds, threads)
    if args.mode == "grad":
        record.update(_grad(args, hydro, parameters, record))
    elif args.mode == "sensitivity":
        record.update(_sensitivity(args, hydro, parameters, record))
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
    made, error = None, None
    try:
        made = Resumable(
            directory, time_limit=limit, identity=identity, comm=comm, resume=args.resume is not None
        )
    except ResumeError as exc:
        error = str(exc)
    errors = comm.mpi.allgather(error) if comm.size > 1 else [error]
    failed = next((e for e in errors if e is not None), None)
    if failed is not None:
        if made is not None:
            made.close()
        raise InputError(f"{'--resume' if args.resume else '--checkpoint-dir'}: {failed}")
    return made


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
    from apps.lulesh.adjoint import StepGradient, check_step

    step = StepGradient(hydro)
    _timed(hydro, parameters, 1, leapfrog=step)  # compiles the adjoints
    bar = cli.progress(100.0, hydro.rank == 0 and not args.q, f"lulesh -s {args.s} gradient", unit="%")
    try:
        state, cycles, seconds = _timed(hydro, parameters, args.i, _on_cycle(args, hydro, bar), step)
    finally:
        bar.close()
    energy = float(hydro.memory.get(state.e)[0])
    same = cycles == primal["iterations"] and energy == primal["final_origin_energy"]
    checks = {"gradient_run_equals_primal": same}
    if args.check:
        checks["gradient"] = check_step(hydro, _state_at(hydro, parameters, CHECK_CYCLE))
    out = {
        "time_grad_s": seconds / max(cycles, 1),
        "overhead": seconds / primal["elapsed_s"] if primal["elapsed_s"] else None,
        "gradient_norm": _norm(hydro, step.shadows),
    }
    return _merge_checks(primal, checks, out)


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
    from apps.lulesh.adjoint import check_sensitivity, gather, sensitivity

    # compiles the adjoints and measures a snapshot and a cycle's records
    probe = sensitivity(hydro, 2, parameters, memory=1 << 62).stats
    budget = None if args.snapshots is not None else _budget(args, hydro, probe)
    if args.resumable is not None and hydro.rank == 0:
        print(
            f"lulesh: whole-run gradient started; SIGTERM or the time limit saves it in "
            f"{args.resumable.directory}", file=sys.stderr, flush=True,
        )  # fmt: skip
    result = sensitivity(
        hydro, args.i, parameters, args.snapshots, memory=budget, resumable=args.resumable,
        expected_cycles=primal["iterations"],
    )  # fmt: skip
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
    if budget is None:
        best = ("revolve", pad.checkpoint.optimal_recomputations(stats.nsteps, args.snapshots))
    else:
        best = pad.checkpoint.best_offline(stats.nsteps, budget, stats)
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
        "optimal_recomputed_steps": best[1],
        "optimal_schedule": best[0],
        "peak_state_bytes": stats.peak_memory,
        "peak_snapshot_bytes": stats.peak_bytes,
        "state_bytes": stats.state_bytes,
        "snapshot_bytes": stats.snapshot_bytes,
        "record_bytes": stats.record_bytes,
        "sessions": stats.sessions,
    }
    return _merge_checks(primal, checks, out)


def _budget(args: Any, hydro: Any, probe: Any) -> int:
    """The loop's memory per rank: ``--memory`` or a share of the free memory, checked against the least
    a schedule needs (one snapshot, one cycle's records, the final state's copy: measured by ``probe``)."""
    from pad.checkpoint import format_size

    mpi = hydro.comm.mpi
    need = probe.snapshot_bytes + probe.record_bytes + probe.state_bytes
    need = mpi.allreduce(need, op=_max()) if hydro.comm.size > 1 else need
    if args.memory is None:
        return max(int(_free_memory(hydro) * MEMORY_SHARE), need)
    if args.memory < need:
        raise InputError(
            f"--memory: {format_size(args.memory)} is too small for -s {args.s}: the whole-run gradient needs "
            f"at least {format_size(need)} per rank (a snapshot of {format_size(probe.snapshot_bytes)}, one "
            f"cycle's records of {format_size(probe.record_bytes)} and the final state's copy)"
        )
    return int(args.memory)


def _max() -> Any:
    import pad.mpi

    return pad.mpi.MAX


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
    from pad.checkpoint import format_size

    budget = "" if r["memory"] is None else f" in {format_size(r['memory'])}"
    return (
        "Sensitivity of the Final Origin Energy J:\n" + "\n".join(lines) + "\n"
        f"Gradient of the run  = {r['time_grad_s']:10.4g} (s), primal {r['time_primal_s']:10.4g} (s): "
        f"overhead {r['overhead']:.2f}x\n"
        f"Checkpointing        = {r['schedule']}{budget}: {r['snapshots_peak']} snapshots at most, "
        f"{r['recomputed_steps']} steps recomputed (best offline schedule for this memory: "
        f"{r['optimal_schedule']}, {r['optimal_recomputed_steps']}), peak {format_size(r['peak_state_bytes'])} "
        f"measured" + (f", {r['sessions']} sessions" if r["sessions"] > 1 else "") + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    from apps.lulesh.hydro import Abort
    from apps.lulesh.mesh import decompose
    from pad.checkpoint import SaveError, Stopped

    rank = _rank()
    started = time.monotonic()  # --time-limit counts from here
    try:
        args = parse_args(argv)
        args.started = started
        decompose(_size(), rank)
        result = run(args)
    except InputError as exc:
        if rank == 0:
            print(f"lulesh: error: {exc}", file=sys.stderr)
        return cli.EXIT_BAD_INPUT
    except Abort as exc:
        print(f"lulesh: {exc}", file=sys.stderr, flush=True)
        return exc.code & 0xFF
    except Stopped as exc:
        if rank == 0:
            print(f"lulesh: {exc}; finish it with --resume {exc.directory}", file=sys.stderr, flush=True)
        return exc.exit_status
    except SaveError as exc:
        if rank == 0:
            print(f"lulesh: {exc.strerror}", file=sys.stderr, flush=True)
        return EXIT_SAVE_FAILED
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
