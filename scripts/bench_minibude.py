"""miniBUDE's gradient against its energies, alternating in one process; writes JSON.

For each thread count: rounds of one call of the energies (``Docking.score``) and one of the gradient
(``Docking.gradient``), after a warm-up call of each, and the best and the median of each. The app's own
``--mode grad`` times its energies' iterations and then its gradient's; on a shared host the load moves
between the two by more than the code does, while neighbouring calls see the same load.

    python scripts/bench_minibude.py --threads 1 16 --rounds 7 --wrt protein --json results/bench_minibude.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from apps import cli
from apps.minibude.deck import find_deck, read_deck
from apps.minibude.driver import Docking

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def alternate(dock: Docking, wrt: str, rounds: int) -> dict[str, Any]:
    """Seconds per call of the energies and of the gradient, alternating; the best and the median of each."""
    calls = {"energies": dock.score, "gradient": lambda: dock.gradient(wrt)}
    laps: dict[str, list[float]] = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    for _ in range(rounds):
        for name, fn in calls.items():
            begin = time.perf_counter()
            fn()
            dock.sync()
            laps[name].append(time.perf_counter() - begin)
    best = {name: min(v) for name, v in laps.items()}
    median = {name: float(np.median(v)) for name, v in laps.items()}
    return {
        "energies_s": best["energies"],
        "gradient_s": best["gradient"],
        "ratio": best["gradient"] / best["energies"],
        "energies_median_s": median["energies"],
        "gradient_median_s": median["gradient"],
        "median_ratio": median["gradient"] / median["energies"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--deck", default="bm1", help="a deck's name or folder (default: the shipped bm1)")
    p.add_argument("--threads", nargs="+", type=int, default=[1])
    p.add_argument("--wrt", choices=("protein", "poses", "forcefield"), default="protein")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--json", default=os.path.join(ROOT, "results", "bench_minibude.json"), help="where the JSON goes"
    )
    args = p.parse_args()
    import numba

    deck = read_deck(find_deck(args.deck))
    rows = []
    for threads in args.threads:
        numba.set_num_threads(threads)
        dock = Docking(deck, ppwi=64, device="cpu", comm=None, wrt=args.wrt)
        row = {"deck": args.deck, "wrt": args.wrt, "threads": threads, "rounds": args.rounds}
        row |= alternate(dock, args.wrt, args.rounds)
        rows.append(row)
        print(json.dumps(row), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as fh:
        json.dump({"machine": cli.machine(), "rows": rows}, fh, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
