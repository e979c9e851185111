"""An inverse problem: recover LULESH's blast energy and hourglass coefficient from an observed energy field.

The "observation" is the energy of every element at the end of a run (LULESH runs to its stop time) made with
hidden values of the unknowns (by default ``einit`` x 1.25 and ``hgcoef`` x 0.7 of the original's). Starting
from the original's values, two optimizers look for the values that reproduce it, minimizing the misfit

    J(p) = 1/2 sum over elements (e_final(p) - e_observed)^2 / sum e_observed^2

- L-BFGS-B (scipy.optimize) with J's gradient from pad: one forward and one adjoint solve of the whole run
  per evaluation (``apps.lulesh.adjoint.sensitivity`` with a ``LeastSquares`` objective);
- Nelder-Mead (scipy.optimize), derivative-free: one forward run per evaluation.

The unknowns are scaled by their starting values (the optimizers see x = 1 at the start) and bounded to
[0.5, 2]. Prints, per method, the solves it ran, its time (wall-clock; the JSON has the CPU time too) and
how close it came to the hidden values.

    python docs/examples/lulesh_inverse.py                            # -s 3: 27 elements
    python docs/examples/lulesh_inverse.py -s 4 --unknowns einit,hgcoef,qqc_monoq --hidden 1.1,0.8,1.2

Needs scipy (in pad's ``test`` extra, or ``pip install scipy``); run it from the repository root, or anywhere
with pad installed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import scipy.optimize

import pad.mpi
from apps.lulesh import adjoint, mesh
from apps.lulesh.hydro import PARAMETERS, Hydro, default_parameters

BOUNDS = (0.5, 2.0)
"""Each unknown's range, as a factor of its starting value."""

OPTIONS = {
    "L-BFGS-B": {"gtol": 1e-10, "ftol": 1e-15, "maxiter": 100},
    "Nelder-Mead": {"xatol": 1e-5, "fatol": 1e-15, "maxfev": 1000},
}
"""Each method's stopping rule (scipy.optimize.minimize's options): tight, so that each runs until it has
found the hidden values as closely as it can."""


class Misfit:
    """J of the unknowns scaled by their starting values, counting the forward and adjoint solves it runs."""

    def __init__(self, size: int, unknowns: list[str], hidden: np.ndarray) -> None:
        self.hydro = Hydro(mesh.build(size, 1, 0, 11, 1, 1), pad.mpi.COMM_WORLD)
        self.unknowns = unknowns
        self.defaults = default_parameters(size, 1)
        self.start = np.array([self.defaults[name] for name in unknowns])
        self.hidden = hidden
        observed = self.final_energies(hidden)
        self.objective = adjoint.LeastSquares(self.hydro, "e", observed, weights=1.0 / np.sum(observed**2))
        self.forward = self.adjoint = 0

    def parameters(self, values: np.ndarray) -> dict[str, float]:
        return self.defaults | dict(zip(self.unknowns, map(float, values), strict=True))

    def final_energies(self, values: np.ndarray) -> np.ndarray:
        """The element energies at the end of a run with the unknowns at ``values``."""
        s = self.hydro.initial_state(self.parameters(values))
        self.hydro.setup(s)
        self.hydro.advance(s, sys.maxsize)
        return self.hydro.memory.get(s.e).copy()

    def value(self, x: np.ndarray) -> float:
        """J at ``start * x``: a forward run."""
        self.forward += 1
        return adjoint.final_value(
            self.hydro, sys.maxsize, self.parameters(self.start * x), None, self.objective
        )

    def value_and_gradient(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """J and dJ/dx at ``start * x``: a forward and an adjoint solve of the whole run."""
        self.forward += 1
        self.adjoint += 1
        r = adjoint.sensitivity(
            self.hydro, sys.maxsize, self.parameters(self.start * x), objective=self.objective
        )
        return r.value, np.array([r.parameters[name] for name in self.unknowns]) * self.start


def solve(misfit: Misfit, method: str) -> dict[str, Any]:
    """Minimize J from the starting values with ``method``; what it found, and at what cost."""
    misfit.forward = misfit.adjoint = 0
    x0 = np.ones(len(misfit.unknowns))
    begin, cpu = time.perf_counter(), time.process_time()
    bounds, options = [BOUNDS] * len(x0), OPTIONS[method]
    if method == "L-BFGS-B":
        found = scipy.optimize.minimize(
            misfit.value_and_gradient, x0, jac=True, method=method, bounds=bounds, options=options
        )
    else:
        found = scipy.optimize.minimize(misfit.value, x0, method=method, bounds=bounds, options=options)
    seconds, cpu = time.perf_counter() - begin, time.process_time() - cpu
    values = misfit.start * found.x
    errors = np.abs(values / misfit.hidden - 1.0)
    return {
        "forward_solves": misfit.forward,
        "adjoint_solves": misfit.adjoint,
        "seconds": seconds,
        "cpu_s": cpu,
        "misfit": float(found.fun),
        "found": dict(zip(misfit.unknowns, map(float, values), strict=True)),
        "rel_errors": dict(zip(misfit.unknowns, map(float, errors), strict=True)),
        "max_rel_error": float(errors.max()),
        "message": str(found.message),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-s", type=int, default=3, help="elements per side (3)")
    p.add_argument("--unknowns", default="einit,hgcoef", help="the parameters to recover (einit,hgcoef)")
    p.add_argument("--hidden", default="1.25,0.7", help="their hidden values, as factors of the original's")
    p.add_argument("--methods", default="L-BFGS-B,Nelder-Mead", help="the optimizers to compare")
    p.add_argument("--json", metavar="PATH", help="write the results here")
    args = p.parse_args(argv)
    unknowns, factors = args.unknowns.split(","), [float(v) for v in args.hidden.split(",")]
    methods = args.methods.split(",")
    if args.s < 2 or not set(unknowns) <= set(PARAMETERS) or len(factors) != len(unknowns):
        p.error(f"-s at least 2, --unknowns from {', '.join(PARAMETERS)}, one --hidden factor for each")
    if not all(BOUNDS[0] < f < BOUNDS[1] for f in factors) or not set(methods) <= set(OPTIONS):
        p.error(f"--hidden factors between {BOUNDS[0]} and {BOUNDS[1]}, --methods from {', '.join(OPTIONS)}")
    defaults = default_parameters(args.s, 1)
    misfit = Misfit(
        args.s, unknowns, np.array([defaults[n] * f for n, f in zip(unknowns, factors, strict=True)])
    )
    begin = time.perf_counter()
    misfit.value_and_gradient(np.ones(len(unknowns)))  # compiles the kernels, outside the timings
    misfit.value(np.ones(len(unknowns)))
    result = {
        "size": args.s,
        "unknowns": unknowns,
        "start": dict(zip(unknowns, map(float, misfit.start), strict=True)),
        "hidden": dict(zip(unknowns, map(float, misfit.hidden), strict=True)),
        "warm_up_s": time.perf_counter() - begin,
        "methods": {method: solve(misfit, method) for method in methods},
    }
    print(f"LULESH -s {args.s}: recover {', '.join(unknowns)} from the final energy field")
    print(f"{'method':12} {'forward':>8} {'adjoint':>8} {'time':>8}  {'largest relative error':>22}  misfit")
    for method, r in result["methods"].items():
        print(
            f"{method:12} {r['forward_solves']:8d} {r['adjoint_solves']:8d} {r['seconds']:7.1f}s  "
            f"{r['max_rel_error']:22.2e}  {r['misfit']:.2e}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
