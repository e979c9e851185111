"""``python -m apps.lulesh``: LULESH 2.0 (Sedov blast) on pad, with the original's flags and report.

Runs alone or under ``mpiexec -n N`` (N a cube: 1, 8, 27, ...; each rank an ``-s``-cube of elements).
Standard output ends with the original's report, so it can be compared with a C++ run's text. Bad input is
one line naming the flag, exit status 2; a physics abort prints what failed where and exits with the
original's code (VolumeError -1, QStopError -2, i.e. 255 and 254) on every rank.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from apps import cli
from apps.cli import InputError

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
        "--mode", default="primal", help="primal (the gradients, grad and sensitivity, are being built)"
    )
    args = p.parse_args(argv)
    if args.mode != "primal":
        known = args.mode in ("grad", "sensitivity")
        raise InputError(
            f"--mode {args.mode}: "
            + ("not built yet; LULESH runs --mode primal" if known else "unknown mode")
        )
    if args.f is not None or args.v:
        raise InputError(f"{'-f' if args.f is not None else '-v'}: visualization output is not supported")
    cli.check_writable("--json", args.json)
    return args


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
    """Run LULESH; rank 0 returns the results, the other ranks an empty dict."""
    import pad.mpi
    from apps.lulesh import mesh
    from apps.lulesh.hydro import Hydro

    comm = pad.mpi.COMM_WORLD
    threads = cli.set_threads(args.threads, comm.mpi) if args.device == "cpu" else 1
    memory = cli.Memory(args.device, comm.mpi)
    root = comm.rank == 0
    if root and not args.q:
        print(_banner(args, comm.size, threads), flush=True)
    hydro = Hydro(mesh.build(args.s, comm.size, comm.rank, args.r, args.b, args.c), comm, memory)

    # Compile every kernel on a throwaway cycle, so the timed loop measures the program, not numba.
    warm = hydro.initial_state()
    hydro.setup(warm)
    hydro.advance(warm, 1)

    state = hydro.initial_state()
    hydro.setup(state)
    comm.Barrier()
    bar = cli.progress(100.0, root and not args.q, f"lulesh -s {args.s}", unit="%")
    done = [0.0]

    def on_cycle(cycle: int) -> None:
        t, dt = memory.get(state.clock)[:2]
        if args.p and root and not args.q:
            print(f"cycle = {cycle}, time = {t:e}, dt={dt:e}", flush=True)
        fraction = 100.0 * max(t / 1.0e-2, cycle / args.i)
        bar.update(fraction - done[0])
        done[0] = fraction

    start = time.perf_counter()
    try:
        cycles = hydro.advance(state, args.i, on_cycle)
        memory.sync()
    finally:
        bar.close()
    elapsed = np.array([time.perf_counter() - start])
    slowest = np.zeros(1)
    comm.Reduce(elapsed, slowest, pad.mpi.MAX, 0)
    if not root:
        return {}
    e = memory.get(state.e)
    max_abs, total_abs, max_rel = symmetry(e, args.s)
    grind = slowest[0] * 1e6 / max(cycles, 1) / args.s**3
    energy = float(e[0])
    checks: dict[str, Any] = {"symmetry": {"max_rel_diff": max_rel, "tolerance": SYMMETRY_TOLERANCE}}
    valid = bool(np.isfinite(e).all()) and max_rel <= SYMMETRY_TOLERANCE
    edge = round(comm.size ** (1 / 3)) * args.s
    known = REFERENCE.get((edge, None if args.i == UNTIL_COMPLETION else args.i))
    if known is not None:
        iterations, printed = known
        checks["reference"] = {"iterations": iterations, "final_origin_energy": printed}
        valid = valid and cycles == iterations and f"{energy:12.6e}".strip() == printed
    return {
        "app": "lulesh",
        "mode": args.mode,
        "ranks": comm.size,
        "threads": threads,
        "device": args.device,
        "problem": {
            "size": args.s,
            "regions": args.r,
            "balance": args.b,
            "cost": args.c,
            "elements": comm.size * args.s**3,
        },
        "iterations": cycles,
        "time_primal_s": slowest[0] / max(cycles, 1),
        "time_grad_s": None,
        "overhead": None,
        "valid": valid,
        "checks": checks,
        "final_origin_energy": energy,
        "max_abs_diff": max_abs,
        "total_abs_diff": total_abs,
        "max_rel_diff": max_rel,
        "elapsed_s": float(slowest[0]),
        "grind_us": grind,
        "fom": 1000.0 / (grind / comm.size),
    }


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
    sys.exit(main())
