"""Benchmark pad.checkpoint: memory and time of a checkpointed 1-D advection-diffusion gradient.

A nonlinear (Burgers-type) explicit step on ``--cells`` cells, ``--steps`` steps, ping-ponging two arrays.
For snapshots = all (keep every step), 100, 30 and 10 it measures the traced peak memory of the gradient
(tracemalloc, above what the arrays already take) and gradient time / primal time, in separate runs so that
tracing does not slow the timed ones. Writes one JSON object (``--json``) and prints a table.
Targets (issue 4): with 30 snapshots, peak memory <= 1/25 of keep-everything and gradient/primal <= 3x the
keep-everything ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc

import numpy as np

import pad
from pad import checkpoint


@pad.kernel
def burgers(i, c, a, u, unew):
    j = i + 1
    unew[j] = u[j] + c * (u[j - 1] - 2.0 * u[j] + u[j + 1]) - a * u[j] * (u[j] - u[j - 1])


def step(t, u, v):
    src, dst = (u, v) if t % 2 == 0 else (v, u)
    pad.launch(burgers, src.shape[0] - 2, 0.2, 0.3, src, dst)


def _initial(cells):
    x = np.linspace(0.0, 1.0, cells)
    u = 0.5 + 0.4 * np.sin(2 * np.pi * x)
    return u, u.copy()


def primal_time(cells, steps):
    u, v = _initial(cells)
    t0 = time.perf_counter()
    checkpoint.loop(step, steps, u, v)
    return time.perf_counter() - t0


def gradient(cells, steps, snapshots, trace):
    """One gradient; returns (seconds, traced peak bytes or None, the loop's Stats)."""
    u, v = _initial(cells)
    du, dv = np.zeros(cells), np.zeros(cells)
    (dv if steps % 2 else du)[:] = 1.0 / cells  # objective: mean of the final state
    stats = checkpoint.Stats()
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    pad.autodiff(
        lambda u, v: checkpoint.loop(step, steps, u, v, snapshots=snapshots, stats=stats),
        pad.Dup(u, du),
        pad.Dup(v, dv),
    )
    seconds = time.perf_counter() - t0
    peak = None
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return seconds, peak, stats, du


def _available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=2**20)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--snapshots", type=int, nargs="*", default=[100, 30, 10])
    ap.add_argument(
        "--all-steps", type=int, default=None, help="steps for keep-everything (default: --steps)"
    )
    ap.add_argument("--json", default="results/bench_checkpoint.json")
    args = ap.parse_args()

    cells, steps = args.cells, args.steps
    all_steps = args.all_steps or steps
    state = 2 * cells * 8
    gradient(1024, 8, 3, trace=False)  # compile the kernels
    gradient(1024, 8, None, trace=False)
    primal = min(primal_time(cells, steps) for _ in range(3))
    primal_all = primal if all_steps == steps else min(primal_time(cells, all_steps) for _ in range(3))

    rows = []
    reference = None
    for snapshots in [None, *args.snapshots]:
        n = all_steps if snapshots is None else steps
        seconds, _, stats, du = gradient(cells, n, snapshots, trace=False)
        _, peak, _, _ = gradient(cells, n, snapshots, trace=True)
        if snapshots is None:
            reference = du
        elif all_steps == steps:
            assert np.allclose(du, reference, rtol=1e-10, atol=1e-14), "checkpointed gradient differs"
        ratio = seconds / (primal_all if snapshots is None else primal)
        rows.append(
            {
                "snapshots": "all" if snapshots is None else snapshots,
                "steps": n,
                "time_grad_s": seconds,
                "grad_over_primal": ratio,
                "peak_traced_bytes": peak,
                "peak_traced_bytes_per_1000_steps": peak * 1000 / n if snapshots is None else peak,
                "snapshot_bytes": stats.peak_bytes,
                "step_calls": stats.steps,
                "recomputed": stats.recomputed,
            }
        )
        print(
            f"snapshots={rows[-1]['snapshots']!s:>4} steps={n} grad={seconds:7.2f}s grad/primal={ratio:6.2f} "
            f"peak={peak / 2**20:9.1f} MiB snapshots={stats.peak_bytes / 2**20:8.1f} MiB "
            f"step calls={stats.steps}"
        )

    keep = rows[0]
    by = {r["snapshots"]: r for r in rows}
    result = {
        "benchmark": "checkpoint",
        "cells": cells,
        "steps": steps,
        "state_bytes": state,
        "cpus": os.cpu_count(),
        "numba_threads": __import__("numba").get_num_threads(),
        "memory_available_bytes": _available_bytes(),
        "time_primal_s": primal,
        "rows": rows,
    }
    if 30 in by:
        mem = by[30]["peak_traced_bytes"] / keep["peak_traced_bytes_per_1000_steps"] * (1000 / steps)
        slow = by[30]["grad_over_primal"] / keep["grad_over_primal"]
        result["targets"] = {
            "memory_30_over_all": mem,
            "memory_30_over_every_state": by[30]["snapshot_bytes"] / (steps * state),
            "memory_target": 1 / 25,
            "ratio_30_over_all": slow,
            "ratio_target": 3.0,
            "met": mem <= 1 / 25 and slow <= 3.0,
        }
        print(f"30 snapshots: memory {mem:.4f} of keep-everything (<= 0.04), time ratio {slow:.2f}x (<= 3)")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
