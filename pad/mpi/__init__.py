"""Differentiable MPI: mpi4py's buffer API whose communication is transposed in reverse mode.

``COMM_WORLD`` and ``Comm(mpi4py_comm)`` have mpi4py's upper-case methods (Send, Recv, Sendrecv, Isend,
Irecv, Bcast, Reduce, Allreduce, Gather, Scatter, Allgather, Alltoall, Reduce_scatter_block, Scan, Exscan,
Barrier, Split, Dup, Free). Outside ``pad.autodiff``/``pad.fwddiff`` they are plain mpi4py calls; inside,
each op is differentiated (see each family's module for its adjoint). Convention: the objective is the
sum over ranks of each rank's seeded outputs. ``Halo`` exchanges shared or ghost points of structured
meshes. ``PAD_MPI_DEBUG=1`` logs every transfer pad makes; ``stats()`` and ``trace()`` count and record them;
``transport()`` says whether device buffers go to MPI directly (a CUDA-aware MPI) or through host memory.
"""

from pad.mpi import collectives, communicators, nonblocking, p2p, reductions
from pad.mpi._core import (
    ANY_SOURCE,
    ANY_TAG,
    COMM_WORLD,
    IN_PLACE,
    MAX,
    MIN,
    OPS,
    PROD,
    SUM,
    Comm,
    MismatchError,
    Request,
    transport,
)
from pad.mpi._wire import Event, reset_stats, set_debug, stats, trace
from pad.mpi.halo import Halo

__all__ = [
    "ANY_SOURCE",
    "ANY_TAG",
    "COMM_WORLD",
    "IN_PLACE",
    "MAX",
    "MIN",
    "OPS",
    "PROD",
    "SUM",
    "Comm",
    "Event",
    "Halo",
    "MismatchError",
    "Request",
    "collectives",
    "communicators",
    "nonblocking",
    "p2p",
    "reductions",
    "reset_stats",
    "set_debug",
    "stats",
    "trace",
    "transport",
]
