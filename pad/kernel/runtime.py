"""Small compiled helpers that generated kernels call: the growable per-thread stacks of reverse mode."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def push_f(stack: np.ndarray, top: int, value: float) -> tuple[np.ndarray, int]:
    """Push a float (saved as float64, exact for float32) and return the possibly grown stack."""
    if top == stack.shape[0]:
        grown = np.empty(2 * stack.shape[0], np.float64)
        grown[:top] = stack
        stack = grown
    stack[top] = value
    return stack, top + 1


@njit(cache=True, inline="always")
def push_i(stack: np.ndarray, top: int, value: int) -> tuple[np.ndarray, int]:
    """Push an integer or boolean and return the possibly grown stack."""
    if top == stack.shape[0]:
        grown = np.empty(2 * stack.shape[0], np.int64)
        grown[:top] = stack
        stack = grown
    stack[top] = value
    return stack, top + 1
