"""Run under ``mpiexec`` on numba's CUDA simulator (see test_mpi_device.py): the steps of
tests/mpi/test_graph_mpi.py on device arrays, replayed by ``pad.graph`` and run live side by side, and a
checkpointed loop of such steps with and without ``replay``; rank 0 prints, as one JSON line, pad.mpi's
transport and every rank's verdicts (why, and whether every call's arrays, messages and counts of
pad.mpi.stats() were the live call's; the loop's replays, and whether its gradient was the one without)."""

import json

import numpy as np
from numba import cuda

import pad
import pad.mpi
from pad import checkpoint
from tests.mpi.test_graph_mpi import N, Steps, counts, start
from tests.unit.test_graph import k_grow, k_wave

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


def ring_step(t, steps, u, total):
    """Launches, both halos, a Sendrecv and an Allreduce MIN of device arrays: blocking ops, whose host
    buffers the communicator keeps, so that the step makes no new arrays once it has run."""
    r, p = comm.rank, comm.size
    pad.launch(k_wave, N, u, steps.t)
    steps.shared.exchange(steps.t, "sum")
    pad.launch(k_grow, N, steps.t, u)
    steps.ghost.exchange(u, "copy")
    comm.Sendrecv(u[3:5], (r + 1) % p, 4, steps.back, (r - 1) % p, 4)
    pad.launch(k_grow, 2, steps.back, u[2:])
    comm.Allreduce(u, total, pad.mpi.MIN)
    pad.launch(k_wave, N, total, steps.t)
    pad.launch(k_grow, N, steps.t, u)


def looped(replay):
    """The gradient of a checkpointed loop of ``ring_step`` (8 steps, 3 snapshots), and its replays."""
    steps, stats = Steps(comm, cuda.to_device), checkpoint.Stats()
    u, total = cuda.to_device(u0), cuda.to_device(np.zeros(N))
    du, dtotal = cuda.to_device(seed), cuda.to_device(np.ones(N))
    pad.autodiff(
        lambda u, total: checkpoint.loop(
            lambda t, u, total: ring_step(t, steps, u, total),
            8,
            u,
            total,
            snapshots=3,
            replay=replay,
            stats=stats,
        ),
        pad.Dup(u, du),
        pad.Dup(total, dtotal),
    )
    return du.copy_to_host(), stats.replayed + stats.replayed_forward


u0, seed = start(comm)
device_seed = cuda.to_device(seed)
replayed, launched = Steps(comm, cuda.to_device), Steps(comm, cuda.to_device)
ours, theirs = ([cuda.to_device(u0), cuda.to_device(np.zeros(N))] for _ in range(2))
plain = compare(replayed.plain, ours, launched.plain, theirs)
ours, theirs = ([cuda.to_device(a) for a in (u0, *np.zeros((3, N)))] for _ in range(2))
gradient = compare(
    lambda *a: replayed.gradient(*a, device_seed), ours, lambda *a: launched.gradient(*a, device_seed), theirs
)
(got, replays), (want, _) = looped(lambda t: t % 2), looped(None)
loop = {"replayed": replays, "same": bool(np.array_equal(got, want))}
mine = {"plain": plain, "gradient": gradient, "calls": [replayed.calls, launched.calls], "loop": loop}
every = comm.mpi.gather(mine)
if comm.rank == 0:
    print(json.dumps({"transport": pad.mpi.transport(), "ranks": every}))
