"""pad: differentiate parallel HPC programs written in Python.

Kernels are differentiated by source transformation into numba-compiled adjoint and tangent kernels;
communication (MPI, task graphs) by transposing it; long time loops by binomial checkpointing.
"""

import importlib
from typing import Any

from pad import checkpoint, tasks
from pad.annotations import Active, Const, Dup, DupNoNeed
from pad.kernel import KernelSyntaxError, debug, func, kernel, local_array, show
from pad.parallel import launch, launch_stats
from pad.parallel.ahead import precompile
from pad.parallel.arrayops import axpy, copy, fill, scale
from pad.parallel.graph import graph
from pad.tape import autodiff, fwddiff
from pad.testing import check_grad

__all__ = [
    "Active",
    "Const",
    "Dup",
    "DupNoNeed",
    "KernelSyntaxError",
    "autodiff",
    "axpy",
    "check_grad",
    "checkpoint",
    "copy",
    "debug",
    "fill",
    "func",
    "fwddiff",
    "graph",
    "kernel",
    "launch",
    "launch_stats",
    "local_array",
    "mpi",
    "precompile",
    "scale",
    "show",
    "tasks",
]


def __getattr__(name: str) -> Any:
    """Import ``pad.mpi`` on first use: importing it starts MPI, which plain kernel users do not need."""
    if name == "mpi":
        return importlib.import_module("pad.mpi")
    raise AttributeError(f"module 'pad' has no attribute {name!r}")
