"""LULESH's whole-run gradient against issue 26's targets; writes JSON.

For each device (``cpu`` on ``--threads`` threads, ``gpu``) and memory budget (``--memory``: sizes, or
``auto`` for the default share of the free memory), runs ``python -m apps.lulesh -s SIZE --mode sensitivity``
to completion and records what its JSON says: the gradient's time over the run's (``overhead``; target at
most 6x on CPU threads, 8x on the GPU), the steps recomputed against the best offline schedule for the same
memory (target: within 5 %), and the peak memory measured against the budget.

    python scripts/bench_sensitivity.py --size 30 --threads 16 --device cpu gpu --memory auto 4GB 512MB

With ``--rounds N`` each case runs N times, the cases taking turns, and its record is the run of median
overhead, with every run's overhead beside it: one process's run time varies by tens of percent on a host
(its threads' placement, its first touch of memory), so a single run says little.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_OVERHEAD = {"cpu": 6.0, "gpu": 8.0}
TARGET_RECOMPUTED = 0.05  # steps recomputed at most this much above the best offline schedule's


def run_case(size: int, device: str, threads: int, memory: str, iterations: int | None) -> dict[str, Any]:
    """One whole-run gradient; its JSON record with the targets' verdicts."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "r.json")
        cmd = [sys.executable, "-m", "apps.lulesh", "-s", str(size), "--mode", "sensitivity", "-q"]
        cmd += ["--device", device, "--threads", str(threads), "--json", out]
        if iterations is not None:
            cmd += ["-i", str(iterations)]
        if memory != "auto":
            cmd += ["--memory", memory]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        }
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            return {"command": cmd, "status": proc.returncode, "stderr": proc.stderr[-2000:]}
        with open(out) as fh:
            r = json.load(fh)
    best = r["optimal_recomputed_steps"]
    budget = r["memory"]
    return {
        "command": cmd,
        "status": 0,
        "device": device,
        "threads": r["threads"],
        "memory": budget,
        "cycles": r["iterations"],
        "time_primal_s": r["time_primal_s"],
        "time_grad_s": r["time_grad_s"],
        "overhead": r["overhead"],
        "schedule": r["schedule"],
        "snapshots_peak": r["snapshots_peak"],
        "recomputed_steps": r["recomputed_steps"],
        "replayed_steps": r["replayed_steps"],
        "optimal_schedule": r["optimal_schedule"],
        "optimal_recomputed_steps": best,
        "peak_state_bytes": r["peak_state_bytes"],
        "valid": r["valid"],
        "targets": {
            "overhead": r["overhead"] <= TARGET_OVERHEAD[device],
            "recomputed_within_5_percent": best is not None
            and r["recomputed_steps"] <= best * (1 + TARGET_RECOMPUTED),
            "peak_within_budget": budget is None or r["peak_state_bytes"] <= budget,
        },
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A case's record over its runs: a failed run's if any failed, else the run of median overhead (the
    lower middle of an even count) with every run's overhead in ``overheads``."""
    failed = [r for r in runs if r["status"] != 0]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda r: r["overhead"])
    return ordered[(len(ordered) - 1) // 2] | {"overheads": [r["overhead"] for r in runs]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=30)
    p.add_argument("--iterations", type=int, help="at most this many cycles (default: to completion)")
    p.add_argument("--threads", type=int, default=16, help="CPU threads of the cpu runs")
    p.add_argument("--device", nargs="+", choices=("cpu", "gpu"), default=["cpu"])
    p.add_argument("--memory", nargs="+", default=["auto"], help="budgets: sizes (4GB) or auto")
    p.add_argument("--rounds", type=int, default=1, help="runs of each case, taking turns (median kept)")
    p.add_argument("--json", default=os.path.join("results", "lulesh-sensitivity.json"))
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds: {args.rounds} runs; give at least 1")
    order = [(device, memory) for device in args.device for memory in args.memory]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in order}
    for _ in range(args.rounds):
        for device, memory in order:
            case = run_case(
                args.size, device, args.threads if device == "cpu" else 1, memory, args.iterations
            )
            runs[device, memory].append(case)
            if case["status"] != 0:
                print(f"{device} {memory}: exit {case['status']}: {case['stderr'].strip()[-300:]}")
                continue
            print(
                f"{device} {memory}: overhead {case['overhead']:.2f}x, {case['schedule']}, "
                f"{case['recomputed_steps']} steps recomputed (best offline {case['optimal_recomputed_steps']}),"
                f" peak {case['peak_state_bytes']} B; targets {case['targets']}"
            )
    cases = [median_run(runs[key]) for key in order]
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump({"benchmark": "lulesh-sensitivity", "size": args.size, "cases": cases}, fh, indent=1)
    print(f"wrote {args.json}")
    return 0 if all(c["status"] == 0 for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
