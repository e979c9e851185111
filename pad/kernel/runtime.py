"""Small compiled helpers that generated kernels call: the growable per-thread stacks of reverse mode, the
digamma function (the derivative of ``math.lgamma``), which numba lacks, and the bounds check of
``PAD_DEBUG`` kernels."""

from __future__ import annotations

import math

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


def psi(x: float) -> float:
    """psi(x) = d lgamma(x) / dx, to about 1e-15: reflection below 1/2, the recurrence psi(x) = psi(x + 1) - 1/x
    up to 10, then the asymptotic series. NaN at the poles (0, -1, -2, ...)."""
    shift = 0.0
    if x < 0.5:
        if x == math.floor(x):
            return math.nan
        shift = -math.pi / math.tan(math.pi * x)  # psi(x) = psi(1 - x) - pi / tan(pi x)
        x = 1.0 - x
    while x < 10.0:
        shift -= 1.0 / x
        x += 1.0
    r = 1.0 / (x * x)
    series = r * (
        1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r * (1 / 132 - r * (691 / 32760 - r / 12)))))
    )
    return shift + math.log(x) - 0.5 / x - series


digamma = njit(cache=True)(psi)


def check_index(site: int, shape: tuple, index: tuple, at: int) -> tuple:
    """``index`` if it lies in ``shape`` (no negative indices), else IndexError(site, index, shape, at): the
    access ``site`` of a ``PAD_DEBUG`` kernel (``pad.kernel.checks``) at launch index ``at``."""
    for d in range(len(index)):
        if not 0 <= index[d] < shape[d]:
            raise IndexError(site, index, shape, at)
    return index


checked = njit(cache=True)(check_index)
