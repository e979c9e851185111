"""Small compiled helpers that generated kernels call: the growable per-thread stacks of reverse mode."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def push(stack: np.ndarray, top: int, value: float) -> tuple[np.ndarray, int]:
    """Push ``value`` and return the possibly grown stack.

    Reverse mode keeps two stacks per thread: float64 (float32 values are saved exactly) and int64 (integers
    and booleans); numba compiles this once for each.
    """
    if top == stack.shape[0]:
        grown = np.empty(2 * stack.shape[0], stack.dtype)
        grown[:top] = stack
        stack = grown
    stack[top] = value
    return stack, top + 1
