"""``python -m apps.minibude``: score docking poses with the fasten energy, and differentiate it.

Runs alone or under ``mpiexec -n N`` (poses split over ranks). With no arguments it scores a built-in
synthetic deck; ``--deck DIR`` reads a real one (and verifies against its ``ref_energies.out``), ``--deck bm1``
the one shipped in ``apps/minibude/data``.
Bad input prints one line naming the file or flag and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from apps import cli
from apps.cli import InputError
from apps.minibude.deck import Deck, find_deck, read_deck, synthetic_deck
from apps.minibude.driver import TOLERANCE, WRT, Docking, verify
from apps.minibude.optimize import METHODS, optimize

FD_TOLERANCE = 2e-2
"""``--check``: the largest relative error of the gradient entries against float32 central differences."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = cli.Parser(prog="python -m apps.minibude", description=__doc__.split("\n")[0].replace("``", ""))
    p.add_argument(
        "--deck", metavar="DIR", help="deck directory, or bm1 (shipped; default: built-in synthetic deck)"
    )
    p.add_argument("--poses", type=cli.integer(1), metavar="N", help="use the first N poses of the deck")
    p.add_argument(
        "--iterations", type=cli.integer(1), default=8, help="timed iterations, after a warm-up one"
    )
    p.add_argument("--ppwi", type=cli.integer(1), help="poses per work item (default: 64 on cpu, 4 on gpu)")
    p.add_argument(
        "--threads",
        type=cli.integer(1),
        help="CPU threads per rank (default: the cores shared by the node's ranks)",
    )
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="where the arrays live")
    p.add_argument(
        "--mode", choices=("primal", "grad"), default="primal", help="energies, or their gradient too"
    )
    p.add_argument(
        "--wrt", choices=WRT, help="grad: what to differentiate with respect to (default: protein)"
    )
    p.add_argument("--json", metavar="PATH", help="write the machine-readable results here")
    p.add_argument("--output", metavar="PATH", help="write the pose energies here, one per line")
    p.add_argument("--grad-output", metavar="PATH", help="write the gradient here (.npy)")
    p.add_argument(
        "--check", action="store_true", help="grad: compare gradient entries with central differences"
    )
    p.add_argument(
        "--optimize",
        type=cli.integer(0, "must not be negative"),
        default=0,
        metavar="K",
        help="K steps of local optimization of every pose (--optimizer)",
    )
    p.add_argument(
        "--optimizer",
        choices=tuple(METHODS),
        help="--optimize: L-BFGS per pose (lbfgs, the default), gradient descent or random search",
    )
    args = p.parse_args(argv)
    if args.optimizer and not args.optimize:
        raise InputError("--optimizer: only with --optimize K")
    args.optimizer = args.optimizer or "lbfgs"
    for flag in ("json", "output", "grad_output"):
        cli.check_writable("--" + flag.replace("_", "-"), getattr(args, flag))
    for flag, given in (("--wrt", args.wrt), ("--grad-output", args.grad_output), ("--check", args.check)):
        if given:
            cli.only_with(flag, args.mode, ("grad",))
    args.wrt = args.wrt or "protein"
    return args


def _comm() -> Any:
    """COMM_WORLD when started by mpiexec/srun with more than one rank, else ``None``."""
    launched = cli.launched_size()
    if launched is None or launched[1] == 1:
        return None
    from mpi4py import MPI

    cli.check_launched(MPI)
    return MPI.COMM_WORLD if MPI.COMM_WORLD.Get_size() > 1 else None


def _load(args: argparse.Namespace) -> Deck:
    deck = read_deck(find_deck(args.deck)) if args.deck else synthetic_deck(nposes=8192)
    return deck.first(args.poses) if args.poses else deck


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the requested work; rank 0 returns the results, other ranks an empty dict."""
    comm = _comm()
    deck = _load(args)
    threads = cli.set_threads(args.threads, comm, args.device)
    ppwi = args.ppwi or (64 if args.device == "cpu" else 4)
    wrt = args.wrt if args.mode == "grad" else None
    dock = Docking(deck, ppwi=ppwi, device=args.device, comm=comm, wrt=wrt)
    root = dock.rank == 0
    steps = args.iterations * (2 if args.mode == "grad" else 1)
    bar = cli.progress(steps, root, f"minibude {args.mode}")
    try:
        t_primal = dock.timed(dock.score, args.iterations, bar.update)
        energies = dock.gather_energies()
        t_grad = grad = None
        checks: dict[str, Any] = {}
        if args.mode == "grad":
            t_grad = dock.timed(lambda: dock.gradient(args.wrt), args.iterations, bar.update)
            local_grad = dock.gradient(args.wrt)
            grad = dock.reduced_gradient(args.wrt, local_grad)
            if args.check:
                fd = dock.finite_difference_check(args.wrt, local_grad)
                what = f"{fd['components']} gradient entries against central differences of the energies"
                checks["finite_differences"] = fd | cli.verdict(
                    what, fd["max_rel_error"] <= FD_TOLERANCE, fd["max_rel_error"], FD_TOLERANCE
                )
    finally:
        bar.close()
    optimized = optimize(dock, args.optimizer, steps=args.optimize) if args.optimize else None
    if not root:
        return {}
    assert energies is not None
    finite = bool(np.isfinite(energies).all())
    if deck.ref_energies is not None:
        ok, worst = verify(energies, deck.ref_energies)
        what = (
            f"{deck.nposes} pose energies against the deck's reference energies (largest relative difference)"
        )
        checks["reference"] = {"max_rel_diff": worst, "poses": deck.nposes} | cli.verdict(
            what, ok, worst, TOLERANCE
        )
    valid = finite and all(c["passed"] for c in checks.values())
    if args.output:
        np.savetxt(args.output, energies, fmt="%.9g")
    if args.grad_output and grad is not None:
        np.save(args.grad_output, grad)
    interactions = float(deck.nposes) * deck.natlig * deck.natpro
    result: dict[str, Any] = {
        "app": "minibude",
        "mode": args.mode,
        "ranks": dock.size,
        "threads": threads,
        "device": args.device,
        "problem": {**deck.sizes(), "ppwi": ppwi},
        "iterations": args.iterations,
        "time_primal_s": t_primal,
        "time_grad_s": t_grad,
        "compile_s": dock.compile_s,
        "overhead": None if t_grad is None else t_grad / t_primal,
        "valid": valid,
        "checks": checks,
        "finite": finite,
        "wrt": args.wrt if args.mode == "grad" else None,
        "ginteractions_per_s": interactions / t_primal / 1e9,
        "energy_sum": float(energies.astype(np.float64).sum()),
    }
    if optimized is not None:
        result["optimize"] = optimized
    return result


def _summary(r: dict[str, Any]) -> str:
    prob = r["problem"]
    lines = [
        f"miniBUDE on pad: deck {prob['deck']}, {prob['nposes']} poses, {prob['natlig']} ligand atoms, "
        f"{prob['natpro']} protein atoms, ppwi {prob['ppwi']}; "
        f"{r['ranks']} rank(s) x {r['threads']} thread(s) on {r['device']}",
        f"  energies: {r['time_primal_s'] * 1e3:.2f} ms per iteration, {r['ginteractions_per_s']:.3f} "
        f"G-interactions/s, sum {r['energy_sum']:.6g}",
    ]
    if r["time_grad_s"] is not None:
        lines.append(
            f"  gradient wrt {r['wrt']}: {r['time_grad_s'] * 1e3:.2f} ms per iteration, "
            f"{r['overhead']:.2f}x the energies"
        )
    lines.append(f"  warm-up (compiles): {r['compile_s']:.2f} s, excluded from the times above")
    lines += ["  " + line for line in cli.check_lines(r["checks"])]
    if "optimize" in r:
        o = r["optimize"]
        lines.append(
            f"  optimize: {o['steps']} {METHODS[o['method']].name} steps lowered the energy of "
            f"{o['poses_improved']} of {prob['nposes']} poses (total drop {o['total_energy_drop']:.6g}, "
            f"{o['seconds']:.3g} s)"
        )
    if not r["finite"]:
        lines.append("  valid: NO (energies that are not finite)")
    elif not r["checks"]:
        lines.append("  valid: not checked (no reference energies in the deck; --check checks a gradient)")
    else:
        lines.append("  valid: " + ("yes" if r["valid"] else "NO"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        result = run(args)
    except InputError as exc:
        if cli.first_rank():
            print(f"minibude: error: {exc}", file=sys.stderr)
        return cli.EXIT_BAD_INPUT
    except OSError as exc:
        if cli.first_rank():
            print(f"minibude: error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return cli.EXIT_BAD_INPUT
    if result:
        print(_summary(result))
        if args.json:
            cli.write_json(args.json, result)
        return 0 if result["valid"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(cli.exit_status(main))
