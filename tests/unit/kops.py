"""The same operations as ``npops``, as pad kernel launches (for tests that run real kernels)."""

from __future__ import annotations

import math

import numpy as np

import pad


@pad.kernel
def _sin(i, x, y):
    y[i] = math.sin(x[i])


@pad.kernel
def _axpy(i, a, x, y):
    y[i] += a * x[i]


def sin_to(x: np.ndarray, y: np.ndarray) -> None:
    """``y[:] = sin(x)`` by a kernel launch."""
    pad.launch(_sin, x.shape[0], x, y)


def axpy(a: float, x: np.ndarray, y: np.ndarray) -> None:
    """``y += a x`` by a kernel launch."""
    pad.launch(_axpy, x.shape[0], a, x, y)


def three_field_step(t: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> None:
    """Every step reads u, v, w and writes all three (as a time step of a simulation does)."""
    sin_to(u, w)
    axpy(0.3, w, v)
    sin_to(v, u)
    axpy(0.1 * (t % 3), u, w)
