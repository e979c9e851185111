"""LULESH's gradients on however many ranks this runs on, in global order, for comparison with a serial run.

``python lulesh_gradients.py SIZE OUT.npz`` (under ``mpiexec -n P``, P a cube): rank 0 writes
- ``step_<field>``: one cycle's gradient (cycle 3) of every state field, copies of shared entries summed;
- ``run_params`` and ``run_coords``: the whole run's (-i 20) dJ/d(parameters) and dJ/d(initial coordinates);
- ``run_check``: the whole run's central-difference check, as relative errors;
- ``misfit``: J and dJ/d(parameters) of the whole run for a least-squares misfit of the final positions and
  velocities (every node counted once, however many ranks hold it) to those of a run with other parameters.
"""

from __future__ import annotations

import sys

import numpy as np

import pad.mpi
from apps.lulesh import adjoint, mesh
from apps.lulesh.hydro import PARAMETERS, Hydro, default_parameters

STEP_CYCLE = 3
RUN_CYCLES = 20


def main(size: int, path: str) -> None:
    comm = pad.mpi.COMM_WORLD
    hydro = Hydro(mesh.build(size, comm.size, comm.rank, 11, 1, 1), comm)
    parameters = default_parameters(size, hydro.mesh.tp)
    out: dict[str, np.ndarray] = {}

    state = hydro.initial_state(parameters)
    hydro.setup(state)
    hydro.advance(state, STEP_CYCLE - 1)
    hydro.time_increment(state, first=False)
    step = adjoint.StepGradient(hydro)
    for name, shadow in step(state).items():
        out[f"step_{name}"] = adjoint.gather(hydro, name, np.asarray(shadow))

    result = adjoint.sensitivity(hydro, RUN_CYCLES, parameters, snapshots=4)
    check = adjoint.check_sensitivity(hydro, result, parameters)
    out["run_params"] = np.array([result.parameters[n] for n in PARAMETERS])
    out["run_coords"] = adjoint.gather(hydro, "xv", result.coords)
    out["run_check"] = np.array([c["rel_error"] for c in check["entries"]])
    out["run_energy"] = np.array([result.energy, result.cycles])

    observed = hydro.initial_state(parameters | {"hgcoef": 2.5})
    hydro.setup(observed)
    hydro.advance(observed, RUN_CYCLES)
    misfit = adjoint.LeastSquares(hydro, "xv", hydro.memory.get(observed.xv))
    fitted = adjoint.sensitivity(hydro, RUN_CYCLES, parameters, snapshots=4, objective=misfit)
    out["misfit"] = np.array([fitted.value, *(fitted.parameters[n] for n in PARAMETERS)])
    if comm.rank == 0:
        np.savez(path, **out)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
