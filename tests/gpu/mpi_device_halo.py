"""Run under ``mpiexec -n 4`` on numba's CUDA simulator (see test_mpi_device.py): halo exchanges of device
arrays on a 2 x 2 grid of ranks give the host exchange's values and pass check_grad; rank 0 prints, as one
JSON line, pad.mpi's transport and every rank's messages per exchange and stats of one exchange, plain,
differentiated (autodiff) and in forward mode (fwddiff)."""

import json

import numpy as np
from numba import cuda

import pad
import pad.mpi

comm = pad.mpi.COMM_WORLD
rng = np.random.default_rng(comm.rank)
HALOS = {
    "shared": pad.mpi.Halo.structured(comm, (2, 2), (4, 3)),  # corners: a point of four ranks
    "ghost": pad.mpi.Halo.structured(comm, (2, 2), (5, 4), ghost=1, periodic=True),
}
CASES = [("shared", "sum"), ("shared", "copy"), ("ghost", "copy")]


def exchange(name, op):
    return lambda a: HALOS[name].exchange(a, op)


# three fields in front of the block: one message per neighbour carries all three
for name, op in CASES:
    shape = (3, 4, 3) if name == "shared" else (3, 5, 4)
    a = rng.normal(size=shape)
    on_device = cuda.to_device(a)
    exchange(name, op)(a)
    exchange(name, op)(on_device)
    assert np.array_equal(on_device.copy_to_host(), a), (name, op)
    x = cuda.to_device(rng.normal(size=shape))
    pad.check_grad(exchange(name, op), pad.Dup(x, cuda.to_device(np.zeros(shape))))


def counts(run):
    """pad.mpi.stats() of ``run()`` alone."""
    pad.mpi.reset_stats()
    run()
    return pad.mpi.stats()


shared = exchange("shared", "sum")
a, da = cuda.to_device(rng.normal(size=(3, 4, 3))), cuda.to_device(rng.normal(size=(3, 4, 3)))
mine = {
    "messages": 2 * len(HALOS["shared"].links),
    "bytes": 3 * sum(a[0][link[1]].size for link in HALOS["shared"].links) * 8,  # each way
    "plain": counts(lambda: shared(a)),
    "autodiff": counts(lambda: pad.autodiff(shared, pad.Dup(a, da))),
    "fwddiff": counts(lambda: pad.fwddiff(shared, pad.Dup(a, da))),
}
every = comm.mpi.gather(mine)
if comm.rank == 0:
    print(json.dumps({"transport": pad.mpi.transport(), "ranks": every}))
