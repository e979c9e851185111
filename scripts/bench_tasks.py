"""Benchmark pad.tasks: the reverse pass of a DAG of independent launch chains, on 1 and on 2 threads.

``--chains`` tasks each run ``--length`` launches of a nonlinear kernel on their own arrays of ``--cells``
cells; numba runs each launch on one thread, so parallelism comes from the tasks alone. The reverse pass is
timed between two marker records (the first and last records of the tape). "1 thread" runs every task and
adjoint inline as it is spawned (the sequential program); "2 threads" uses a pool of 2. For context it also
measures what two plain threads gain on the same launches outside autodiff (the machine's own ceiling).
Target (issue 4): the reverse pass on 2 threads reaches >= 1.6x the speed of the same reverse on 1 thread.
"""

from __future__ import annotations

import os

# numba's thread count is per calling thread: fix it for the pool threads too, before numba starts.
os.environ["NUMBA_NUM_THREADS"] = "1"

import argparse
import json
import math
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import numpy as np

import pad
from pad import tape, tasks


@pad.kernel
def relax(i, c, x, y):
    v = x[i]
    for _ in range(8):  # enough arithmetic per element that two threads are not bound by memory bandwidth
        v = v + c * math.sin(v)
    y[i] = v


class Inline(Executor):
    """Runs each submitted call at once, in the submitting thread: the sequential program."""

    def submit(self, fn, /, *args, **kwargs):
        fut = Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


class Stamp:
    """A record whose adjoint notes the time: brackets the reverse pass."""

    def __init__(self, times, key):
        self.times, self.key = times, key

    def reverse(self):
        self.times[self.key] = time.perf_counter()


def chain(length, a, b):
    for k in range(length):
        src, dst = (a, b) if k % 2 == 0 else (b, a)
        pad.launch(relax, a.shape[0], 0.1, src, dst)


def run(ex, chains, length, cells):
    """One gradient; returns (forward seconds, reverse seconds, the first chain's input gradient)."""
    arrays = [np.full(cells, 0.3 + 0.01 * k) for k in range(2 * chains)]
    shadows = [np.full(cells, 1.0) if k % 2 == length % 2 else np.zeros(cells) for k in range(2 * chains)]
    times = {}

    def f(*arrs):
        times["start"] = time.perf_counter()
        tape.current().record(Stamp(times, "reverse_end"))
        ts = [tasks.spawn(chain, length, arrs[2 * c], arrs[2 * c + 1]) for c in range(chains)]
        tasks.wait_all(ts)
        tape.current().record(Stamp(times, "reverse_start"))
        times["forward_end"] = time.perf_counter()

    with tasks.executor(ex):
        pad.autodiff(f, *(pad.Dup(a, s) for a, s in zip(arrays, shadows, strict=True)))
    return times["forward_end"] - times["start"], times["reverse_end"] - times["reverse_start"], shadows[0]


def ceiling(chains, length, cells, repeat):
    """Speed-up of plain threads running the same launches outside autodiff: what the machine allows."""
    arrays = [np.full(cells, 0.3) for _ in range(2 * chains)]

    def one(c):
        chain(length, arrays[2 * c], arrays[2 * c + 1])

    best_seq = best_par = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for c in range(chains):
            one(c)
        best_seq = min(best_seq, time.perf_counter() - t0)
        threads = [threading.Thread(target=one, args=(c,)) for c in range(chains)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        best_par = min(best_par, time.perf_counter() - t0)
    return best_seq / best_par


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--cells", type=int, default=2**17)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default="results/bench_tasks.json")
    args = ap.parse_args()

    results = {}
    grads = {}
    with ThreadPoolExecutor(2) as pool:
        for name, ex in (("1 thread", Inline()), ("2 threads", pool)):
            run(ex, args.chains, 4, 1024)  # compile and warm up
            runs = [run(ex, args.chains, args.length, args.cells) for _ in range(args.repeat)]
            results[name] = {
                "forward_s": min(r[0] for r in runs),
                "reverse_s": min(r[1] for r in runs),
                "reverse_s_all": [r[1] for r in runs],
            }
            grads[name] = runs[-1][2]
    assert np.allclose(grads["1 thread"], grads["2 threads"], rtol=1e-12), "gradients differ"
    allowed = ceiling(args.chains, args.length, args.cells, args.repeat)
    speedup = results["1 thread"]["reverse_s"] / results["2 threads"]["reverse_s"]
    fwd = results["1 thread"]["forward_s"] / results["2 threads"]["forward_s"]
    out = {
        "benchmark": "tasks",
        "chains": args.chains,
        "length": args.length,
        "cells": args.cells,
        "cpus": os.cpu_count(),
        "results": results,
        "reverse_speedup_2_threads": speedup,
        "forward_speedup_2_threads": fwd,
        "plain_threads_speedup": allowed,
        "target": 1.6,
        "met": speedup >= 1.6,
    }
    for name, r in results.items():
        print(f"{name:>9}: forward {r['forward_s']:.3f} s, reverse {r['reverse_s']:.3f} s")
    print(f"reverse speed-up on 2 threads: {speedup:.2f}x (target >= 1.6x); forward {fwd:.2f}x")
    print(f"plain threads running the same launches outside autodiff: {allowed:.2f}x")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
