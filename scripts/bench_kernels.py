"""Kernel AD benchmark: primal vs gradient time of four kernel shapes, compile time, launch overhead.

Writes one JSON object (default ``results/bench_kernels.json``). Gradient time is one ``pad.autodiff`` of a
program that makes the launch (primal launch, saving, adjoint launch); ratios are measured in one run, every
timed run starting from the same inputs and seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

import pad


@pad.kernel(fastmath=True)
def pairwise(i, pos, q, energy):
    e = 0.0
    xi = pos[i, 0]
    yi = pos[i, 1]
    zi = pos[i, 2]
    for j in range(pos.shape[0]):
        dx = xi - pos[j, 0]
        dy = yi - pos[j, 1]
        dz = zi - pos[j, 2]
        r2 = dx * dx + dy * dy + dz * dz + 0.01
        if r2 < 4.0:
            e += q[i] * q[j] * (1.0 / math.sqrt(r2) - 0.5)
    energy[i] = e


@pad.kernel
def stencil(i, x, y):
    n = x.shape[0]
    if i == 0 or i == n - 1:
        y[i] = x[i]
    else:
        y[i] = 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1]


@pad.kernel
def gather_scatter(i, idx, w, x, y):
    y[idx[i]] += w[i] * x[i]


@pad.kernel
def inplace(i, a, y):
    y[i] = a * math.sin(y[i]) + y[i] * y[i]


@pad.kernel
def empty(i, x):
    pass


def best(fn: Callable[[], object], repeat: int, setup: Callable[[], object] = lambda: None) -> float:
    times = []
    for _ in range(repeat):
        setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(
    name: str, launch: Callable[..., None], arrays: list[np.ndarray], scalars: tuple, repeat: int
) -> dict:
    def primal() -> None:
        launch(*scalars, *arrays)

    seeds = [np.ones_like(a) for a in arrays]

    def gradient(fuse: bool = False) -> None:
        dups = [pad.Dup(a, s) for a, s in zip(arrays, seeds, strict=True)]
        pad.autodiff(lambda *a: launch(*scalars, *a), *dups, fuse=fuse)

    # Every run starts from the same values and seeds (set outside the timings, as bench_gpu.py makes its
    # seeds): the in-place update, applied again and again, would take y to huge values (slow sines) and on
    # to inf and NaN.
    start_values = [a.copy() for a in arrays]

    def reset() -> None:
        for a, v, s in zip(arrays, start_values, seeds, strict=True):
            np.copyto(a, v)
            s.fill(1.0)

    start = time.perf_counter()
    primal()
    reset()
    gradient()
    compile_s = time.perf_counter() - start
    t_primal, t_grad = best(primal, repeat, reset), best(gradient, repeat, reset)
    t_fused = best(lambda: gradient(fuse=True), repeat, reset)
    return {
        "name": name,
        "primal_s": t_primal,
        "gradient_s": t_grad,
        "ratio": t_grad / t_primal,
        "gradient_fused_s": t_fused,  # pad.autodiff(..., fuse=True): the launch's adjoint makes its outputs
        "ratio_fused": t_fused / t_primal,
        "first_call_s": compile_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default="results/bench_kernels.json")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink problem sizes for a quick run")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    sizes = {
        k: max(64, int(v * args.scale))
        for k, v in {"pairwise": 4096, "stencil": 2**24, "gather": 2**22, "inplace": 2**24}.items()
    }
    cases: list[tuple[str, Callable[..., None], list[np.ndarray], tuple]] = []
    pos = rng.uniform(0, 16, (sizes["pairwise"], 3))
    q = rng.uniform(-1, 1, sizes["pairwise"])
    cases.append(
        (
            "pairwise energy",
            lambda p, qq, e: pad.launch(pairwise, p.shape[0], p, qq, e),
            [pos, q, np.zeros(len(q))],
            (),
        )
    )
    x = rng.uniform(0, 1, sizes["stencil"])
    cases.append(
        ("1-D stencil", lambda a, b: pad.launch(stencil, a.shape[0], a, b), [x, np.zeros_like(x)], ())
    )
    n = sizes["gather"]
    idx = rng.integers(0, n, n)
    cases.append(
        (
            "gather/scatter",
            lambda ii, w, a, b: pad.launch(gather_scatter, ii.shape[0], ii, w, a, b),
            [rng.uniform(0, 1, n), rng.uniform(0, 1, n), np.zeros(n)],
            (idx,),
        )
    )
    y = rng.uniform(0, 1, sizes["inplace"])
    cases.append(
        ("in-place nonlinear update", lambda a, b: pad.launch(inplace, b.shape[0], a, b), [y], (0.7,))
    )

    threads = numba.get_num_threads()
    results = [measure(name, launch, arrays, scalars, args.repeat) for name, launch, arrays, scalars in cases]

    numba.set_num_threads(1)
    one = measure("pairwise energy (1 thread)", cases[0][1], cases[0][2], (), args.repeat)
    numba.set_num_threads(threads)
    scaling = {
        "threads": threads,
        "gradient_1_thread_s": one["gradient_s"],
        "gradient_all_threads_s": results[0]["gradient_s"],
        "speedup": one["gradient_s"] / results[0]["gradient_s"],
    }

    e = np.zeros(1)
    pad.launch(empty, 1, e)
    reps = 20000
    start = time.perf_counter()
    for _ in range(reps):
        pad.launch(empty, 1, e)
    overhead_us = (time.perf_counter() - start) / reps * 1e6

    report = {
        "benchmark": "kernels",
        "machine": f"{platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "threads": threads,
        "sizes": sizes,
        "cases": results,
        "thread_scaling_pairwise": scaling,
        "empty_launch_us": overhead_us,
        "targets": {
            "pairwise energy": 3.0,
            "1-D stencil": 4.0,
            "gather/scatter": 5.0,
            "in-place nonlinear update": 4.0,
            "empty_launch_us": 20.0,
            "speedup_2_threads": 1.6,
        },
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    for r in results:
        print(
            f"{r['name']:28s} primal {r['primal_s'] * 1e3:9.2f} ms  gradient {r['gradient_s'] * 1e3:9.2f} ms  ratio {r['ratio']:5.2f}  fused {r['ratio_fused']:5.2f}"
        )
    print(
        f"pairwise gradient speedup {threads} threads vs 1: {scaling['speedup']:.2f}x; empty launch {overhead_us:.1f} us"
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
