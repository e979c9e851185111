"""Run under ``mpiexec`` on numba's CUDA simulator (see test_mpi_device.py): a ring of device buffers, plain
and differentiated; rank 0 prints pad.mpi's transport and every rank's stats as one JSON line."""

import json

import numpy as np
from numba import cuda

import pad
import pad.mpi

comm = pad.mpi.COMM_WORLD
rank, size = comm.rank, comm.size
right, left = (rank + 1) % size, (rank - 1) % size
n = 4

total = cuda.to_device(np.zeros(n))
comm.Allreduce(cuda.to_device(np.full(n, rank + 1.0)), total, pad.mpi.SUM)
assert np.all(total.copy_to_host() == size * (size + 1) / 2)


def ring(x, y):
    pad.mpi.Request.Waitall([comm.Irecv(y, left, 1), comm.Isend(x, right, 1)])


x, y = cuda.to_device(np.arange(n) + 10.0 * rank), cuda.to_device(np.zeros(n))
dx, dy = cuda.to_device(np.zeros(n)), cuda.to_device(np.full(n, rank + 1.0))
pad.autodiff(ring, pad.Dup(x, dx), pad.Dup(y, dy))
assert np.all(y.copy_to_host() == np.arange(n) + 10.0 * left)
assert np.all(dx.copy_to_host() == right + 1.0) and np.all(dy.copy_to_host() == 0.0)  # y's seed went back
stats = comm.mpi.gather(pad.mpi.stats())
if rank == 0:
    print(json.dumps({"transport": pad.mpi.transport(), "stats": stats}))
