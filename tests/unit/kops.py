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
