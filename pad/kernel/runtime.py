"""Small compiled helpers that generated kernels call: the growable per-thread stacks of reverse mode."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def grown(stack: np.ndarray) -> np.ndarray:
    """A copy of a full stack with twice its room.

    Reverse mode keeps two growable stacks per thread: float64 (float32 values are saved exactly) and int64
    (integers and booleans); the generated code pushes inline and calls this only when a stack is full.
    """
    out = np.empty(2 * stack.shape[0], stack.dtype)
    out[: stack.shape[0]] = stack
    return out
