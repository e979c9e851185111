"""Benchmark miniBUDE's local optimizers at equal time: L-BFGS per pose against gradient descent and random
perturbation search (``apps/minibude/optimize.py``).

For each time budget, each method starts from the deck's poses and runs until the budget is spent (it stops
at the first step boundary after it). Time is this process's CPU time (all its threads): on a shared machine
what other work takes does not count against a method, nor does a collection of the whole heap (the garbage
collector is off while a method runs, as in ``timeit``). Reports per budget and method the steps run, the
seconds, the poses whose energy fell, the mean and median energy reached, and the poses each method left lowest
of the three (ties count for each). Writes one JSON object (``--json``) and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from typing import Any

import numpy as np

from apps import cli
from apps.minibude.deck import find_deck, read_deck
from apps.minibude.driver import Docking
from apps.minibude.optimize import METHODS, optimize


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deck", default="bm1", help="deck directory, or bm1 (shipped; the default)")
    p.add_argument("--poses", type=int, default=4096, help="the first N poses of the deck (4096)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (1)")
    p.add_argument("--budgets", type=float, nargs="+", default=[2.0, 6.0, 20.0], help="CPU seconds per run")
    p.add_argument("--json", metavar="PATH", help="write the results here")
    args = p.parse_args(argv)
    threads = cli.set_threads(args.threads, None)
    deck = read_deck(find_deck(args.deck)).first(args.poses)
    dock = Docking(deck, ppwi=64)
    start = dock.score().astype(np.float64)
    for method in METHODS:  # compile every kernel and warm the caches, outside the budgets
        optimize(dock, method, steps=2)
        dock.poses[:] = deck.poses
    cases: list[dict[str, Any]] = []
    for budget in args.budgets:
        reached = {}
        for method in METHODS:
            dock.poses[:] = deck.poses
            gc.collect()  # as timeit does: a collection of the whole heap is no method's cost
            gc.disable()
            try:
                wall = time.perf_counter()
                r = optimize(dock, method, seconds=budget, clock=time.process_time)
                wall = time.perf_counter() - wall
            finally:
                gc.enable()
            reached[method] = energies = dock.score().astype(np.float64)
            r["budget_cpu_s"], r["cpu_s"], r["wall_s"] = budget, r.pop("seconds"), wall
            r["mean_energy"], r["median_energy"] = float(energies.mean()), float(np.median(energies))
            cases.append(r)
        lowest = np.min(np.stack(list(reached.values())), axis=0)
        for case in cases[-len(METHODS) :]:
            case["poses_lowest"] = int((reached[case["method"]] == lowest).sum())
    result = {
        "deck": deck.name,
        "poses": deck.nposes,
        "threads": threads,
        "start_mean_energy": float(start.mean()),
        "start_median_energy": float(np.median(start)),
        "cases": cases,
    }
    print(f"{deck.name}, {deck.nposes} poses, {threads} thread(s); start: mean energy {start.mean():.2f}")
    print(f"{'CPU budget':>10} {'method':>8} {'steps':>6} {'CPU s':>7} {'mean E':>9} {'median E':>9} lowest")
    for c in cases:
        print(
            f"{c['budget_cpu_s']:10.3g} {c['method']:>8} {c['steps']:6d} {c['cpu_s']:7.2f} "
            f"{c['mean_energy']:9.2f} {c['median_energy']:9.2f} {c['poses_lowest']:6d}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
