"""Run under ``mpiexec`` on numba's CUDA simulator (see test_mpi_device.py): the steps of
tests/mpi/test_graph_mpi.py on device arrays, replayed by ``pad.graph`` and run live side by side; rank 0
prints, as one JSON line, pad.mpi's transport and every rank's verdicts (why, and whether every call's
arrays, messages and counts of pad.mpi.stats() were the live call's)."""

import json

import numpy as np
from numba import cuda

import pad
import pad.mpi
from tests.mpi.test_graph_mpi import N, Steps, counts, start

comm = pad.mpi.COMM_WORLD


def compare(step, args, live, theirs):
    """Three calls of ``pad.graph(step)`` on ``args`` against ``live`` on ``theirs``: all equal?"""
    g, same = pad.graph(step), []
    for _ in range(3):
        pad.mpi.reset_stats()
        with pad.mpi.trace() as ours:
            g(*args)
        mine = counts(pad.mpi.stats())
        pad.mpi.reset_stats()
        with pad.mpi.trace() as events:
            live(*theirs)
        arrays_equal = all(
            np.array_equal(a.copy_to_host(), b.copy_to_host()) for a, b in zip(args, theirs, strict=True)
        )
        same.append(arrays_equal and ours == events and mine == counts(pad.mpi.stats()))
    return {
        "why": g.why,
        "same": all(same),
        "staged": mine["plain"]["staged_bytes"] + mine["forward"]["staged_bytes"],
    }


u0, seed = start(comm)
device_seed = cuda.to_device(seed)
replayed, launched = Steps(comm, cuda.to_device), Steps(comm, cuda.to_device)
ours, theirs = ([cuda.to_device(u0), cuda.to_device(np.zeros(N))] for _ in range(2))
plain = compare(replayed.plain, ours, launched.plain, theirs)
ours, theirs = ([cuda.to_device(a) for a in (u0, *np.zeros((3, N)))] for _ in range(2))
gradient = compare(
    lambda *a: replayed.gradient(*a, device_seed), ours, lambda *a: launched.gradient(*a, device_seed), theirs
)
mine = {"plain": plain, "gradient": gradient, "calls": [replayed.calls, launched.calls]}
every = comm.mpi.gather(mine)
if comm.rank == 0:
    print(json.dumps({"transport": pad.mpi.transport(), "ranks": every}))
