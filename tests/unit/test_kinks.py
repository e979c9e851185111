"""The partials at kinks: ``abs`` at +0.0 and -0.0, ties of ``min``/``max``, against central differences.

Rule (pad/kernel/rules.py): the minimal-norm subgradient, which central differences agree with: ``abs`` has
``sign(x)`` (0 at either zero), a tie of ``min``/``max`` gives each argument 0.5. Neither depends on the sign
of a zero nor on the order of the arguments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad


@pad.kernel
def k_abs(i, x, y, out):
    out[i] = abs(x[i]) + 2.0 * math.fabs(y[i]) + 3.0 * np.abs(x[i] - y[i])


@pad.kernel
def k_copysign(i, x, y, out):
    out[i] = math.copysign(x[i], 1.0) + math.copysign(y[i], -1.0)


@pad.kernel
def k_min_max(i, x, y, out):
    out[i] = (
        min(x[i], y[i]) + 2.0 * max(y[i], x[i]) + 4.0 * np.minimum(y[i], x[i]) + 8.0 * np.maximum(x[i], y[i])
    )


@pad.kernel
def k_relu(i, x, y, out):
    out[i] = max(x[i], 0.0) + 2.0 * min(0.0, y[i])


# Zeros of both signs, ties (of both signs of zero too) and points away from any kink.
X = [0.0, -0.0, 0.0, -0.0, 1.5, -2.0, 1.5, 3.0]
Y = [0.0, 0.0, -0.0, -0.0, 1.5, -2.0, -1.0, 0.25]


def _gradient(kernel, x, y):
    dx, dy = np.zeros_like(x), np.zeros_like(y)
    out = np.zeros_like(x)
    pad.autodiff(
        lambda a, b, c: pad.launch(kernel, a.shape[0], a, b, c),
        pad.Dup(x, dx),
        pad.Dup(y, dy),
        pad.Dup(out, np.ones_like(out)),
    )
    return dx, dy


def _tangent(kernel, x, y, tx, ty):
    out, tout = np.zeros_like(x), np.zeros_like(x)
    pad.fwddiff(
        lambda a, b, c: pad.launch(kernel, a.shape[0], a, b, c),
        pad.Dup(x, tx),
        pad.Dup(y, ty),
        pad.Dup(out, tout),
    )
    return tout


def _central(kernel, x, y, which, h):
    """Central differences of each out[i] in x[i] (which 0) or y[i] (which 1); elementwise kernels."""
    values = []
    for step in (h, -h):
        args = [x.copy(), y.copy()]
        args[which] = args[which] + np.asarray(step, x.dtype)
        out = np.zeros_like(x)
        pad.launch(kernel, x.shape[0], *args, out)
        values.append(out.astype(np.float64))
    return (values[0] - values[1]) / (2 * h)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kernel", [k_abs, k_copysign, k_min_max, k_relu], ids=lambda k: k.__name__)
def test_partials_at_kinks_agree_with_central_differences(kernel, dtype):
    x, y = np.array(X, dtype), np.array(Y, dtype)
    assert np.signbit(x[1]) and not np.signbit(x[0])
    h = 2.0**-10  # exact in float32 at these points
    dx, dy = _gradient(kernel, x, y)
    np.testing.assert_allclose(dx, _central(kernel, x, y, 0, h), atol=1e-6)
    np.testing.assert_allclose(dy, _central(kernel, x, y, 1, h), atol=1e-6)
    ones, zeros = np.ones_like(x), np.zeros_like(x)
    np.testing.assert_allclose(_tangent(kernel, x, y, ones, zeros), dx, atol=1e-6)
    np.testing.assert_allclose(_tangent(kernel, x, y, zeros, ones), dy, atol=1e-6)


def test_abs_partial_is_zero_at_both_zeros_and_ties_split_evenly():
    x, y = np.array([0.0, -0.0, 2.0]), np.array([-0.0, 0.0, 2.0])
    dx, dy = _gradient(k_abs, x, y)
    np.testing.assert_array_equal(dx[:2], [0.0, 0.0])
    np.testing.assert_array_equal(dy[:2], [0.0, 0.0])
    dx, dy = _gradient(k_min_max, x, y)
    np.testing.assert_array_equal(dx, [7.5, 7.5, 7.5])  # each of 1 + 2 + 4 + 8 split in half
    np.testing.assert_array_equal(dy, [7.5, 7.5, 7.5])
