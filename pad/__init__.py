"""pad: differentiate parallel HPC programs written in Python.

Kernels are differentiated by source transformation into numba-compiled adjoint and tangent kernels;
communication (MPI, task graphs) by transposing it; long time loops by binomial checkpointing.
"""

from pad import checkpoint, tasks
from pad.kernel import KernelSyntaxError, func, kernel, local_array, show
from pad.parallel import launch
from pad.tape import Active, Const, Dup, autodiff, fwddiff
from pad.testing import check_grad

__all__ = [
    "Active",
    "Const",
    "Dup",
    "KernelSyntaxError",
    "autodiff",
    "check_grad",
    "checkpoint",
    "func",
    "fwddiff",
    "kernel",
    "launch",
    "local_array",
    "show",
    "tasks",
]
