"""Small compiled helpers that generated code calls: the growable per-thread stacks of reverse mode, and the
greedy colouring step of inspectors."""

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


@njit(cache=True)
def colour(keys: np.ndarray, nk: int, mask: np.ndarray) -> int:
    """The smallest colour (0 to 63) that no element ``keys[:nk]`` bears yet, now set on all of them; 64 if
    all are taken (the elements are left as they were). A block's colour in an inspector's greedy colouring
    (pad/kernel/inspector.py)."""
    used = np.uint64(0)
    for j in range(nk):
        used |= mask[keys[j]]
    c = 0
    while c < 64 and (used >> np.uint64(c)) & np.uint64(1):
        c += 1
    if c < 64:
        bit = np.uint64(1) << np.uint64(c)
        for j in range(nk):
            mask[keys[j]] |= bit
    return c
