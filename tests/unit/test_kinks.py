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


@pad.kernel
def k_running(i, a, top, bottom):
    m = a[i, 0]
    lo = a[i, 0]
    for c in range(1, a.shape[1]):
        m = max(m, a[i, c])
    for c in range(1, a.shape[1]):
        lo = min(a[i, c] * 2.0, lo)
    top[i] = m
    bottom[i] = lo


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_running_max_and_min_record_the_winner_and_share_ties_evenly(dtype):
    """``m = max(m, a[k])`` in a loop pushes nothing per iteration; a value tied by k others gets 1/k of the
    adjoint (JAX's max), whatever the order; two tied values get 0.5 each, as max's own partial says."""
    a = np.array(
        [
            [1.0, 3.0, -2.0, 0.5],  # one winner each
            [3.0, 1.0, 2.0, 0.0],  # the value before the loop wins the max
            [-0.0, 0.0, 2.0, 2.0],  # a tie of two, and one of the two zeros for the min
            [4.0, 4.0, 4.0, -1.0],  # a tie of three including the value before the loop
            [0.0, -1.0, -1.0, -1.0],  # the min's tie of three: a[0] is not among them (2 * a[c] < a[0] fails)
        ],
        dtype,
    )
    source = k_running.variant((a, a[:, 0], a[:, 0]), "adjoint", (True, True, True)).source
    assert "push(" not in source, source
    da_top, da_bottom = np.zeros_like(a), np.zeros_like(a)
    for da, seeds in ((da_top, (1.0, 0.0)), (da_bottom, (0.0, 1.0))):
        top, bottom = np.zeros(len(a), dtype), np.zeros(len(a), dtype)
        pad.autodiff(
            lambda x, t, b: pad.launch(k_running, x.shape[0], x, t, b),
            pad.Dup(a, da),
            pad.Dup(top, np.full_like(top, seeds[0])),
            pad.Dup(bottom, np.full_like(bottom, seeds[1])),
        )
    third = 1 / 3
    np.testing.assert_allclose(
        da_top,
        [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0.5, 0.5], [third, third, third, 0], [1, 0, 0, 0]],
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        da_bottom,
        [[0, 0, 2, 0], [0, 0, 0, 2], [0.5, 1, 0, 0], [0, 0, 0, 2], [0, 2 * third, 2 * third, 2 * third]],
        rtol=1e-6,
    )
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (6, 9)).astype(dtype)
    pad.check_grad(
        lambda x, t, b: pad.launch(k_running, x.shape[0], x, t, b),
        pad.Dup(x, np.zeros_like(x)),
        pad.Dup(np.zeros(6, dtype), np.zeros(6, dtype)),
        pad.Dup(np.zeros(6, dtype), np.zeros(6, dtype)),
        rtol=3e-3 if dtype == np.float32 else 1e-6,
        atol=1e-4 if dtype == np.float32 else 1e-9,
    )


@pad.kernel
def k_guarded(c, a, w, out):
    lo = 1.0e20
    hi = -1.0e20
    for k in range(a.shape[1]):
        if w[c, k] != 0.0:
            v = a[c, k] * a[c, k]
            if w[c, k] < 0.0:
                v = v + w[c, k]
            lo = min(lo, v)
            hi = max(hi, a[c, k] / (abs(w[c, k]) + 1.0))
    out[c, 0] = lo
    out[c, 1] = hi


def test_running_extremes_under_a_branch_record_their_winners():
    """Two running extremes updated only where a guard holds (LULESH's time constraints): each records its
    own winner and ties, nothing is pushed per iteration, and skipped iterations get nothing."""
    a = np.array([[1.0, 0.5, 2.0, 3.0], [1.0, -1.0, 1.0, 5.0]])
    w = np.array([[1.0, 0.0, 1.0, -1.0], [1.0, 1.0, 1.0, 0.0]])  # w == 0: skipped (row 0 would win the min)
    out = np.zeros((2, 2))
    source = k_guarded.variant((a, w, out), "adjoint", (True, True, True)).source
    assert "push(" not in source, source
    da, dw = np.zeros_like(a), np.zeros_like(w)
    pad.autodiff(
        lambda x, y, o: pad.launch(k_guarded, 2, x, y, o),
        pad.Dup(a.copy(), da),
        pad.Dup(w.copy(), dw),
        pad.Dup(out, np.ones_like(out)),
    )
    # Row 0: min a[0]^2 at k = 0; max 3 / 2 at k = 3 (w < 0: d/dw = 3 / 4). Row 1: min 1 tied three ways,
    # max 1 / 2 tied at k = 0 and 2.
    np.testing.assert_allclose(da, [[2, 0, 0, 0.5], [2 / 3 + 0.25, -2 / 3, 2 / 3 + 0.25, 0]], rtol=1e-12)
    np.testing.assert_allclose(dw, [[0, 0, 0, 0.75], [-0.125, 0, -0.125, 0]], rtol=1e-12)
    rng = np.random.default_rng(5)
    x, y = rng.uniform(-1, 1, (5, 7)), rng.uniform(-1, 1, (5, 7))
    y[:, 3] = 0.0  # some iterations skipped, the same with and without the small steps of the differences
    pad.check_grad(
        lambda x, y, o: pad.launch(k_guarded, 5, x, y, o),
        pad.Dup(x, np.zeros_like(x)),
        pad.Const(y),
        pad.Dup(np.zeros((5, 2)), np.zeros((5, 2))),
    )
    pad.check_grad(
        lambda x, y, o: pad.launch(k_guarded, 5, x, y, o),
        pad.Const(x),
        pad.Dup(rng.uniform(0.1, 1, (5, 7)) * rng.choice([-1, 1], (5, 7)), np.zeros((5, 7))),
        pad.Dup(np.zeros((5, 2)), np.zeros((5, 2))),
    )


@pad.kernel
def k_root_max(i, a, out):
    m = -1.0
    for c in range(a.shape[1]):
        m = max(m, math.sqrt(a[i, c]))
    out[i] = m


def test_a_zero_adjoint_of_a_running_extreme_passes_nothing_on():
    """A running extreme whose adjoint is zero (a reduction's losing chunk) replays none of its loop: its
    values get exactly zero, even where the winners' partials are infinite (three square roots of 0 tied)."""
    a = np.array([[0.0, 0.0, 0.0], [1.0, 4.0, 4.0], [0.0, 0.0, 9.0]])
    da = np.zeros_like(a)
    pad.autodiff(
        lambda x, o: pad.launch(k_root_max, 3, x, o),
        pad.Dup(a, da),
        pad.Dup(np.zeros(3), np.array([0.0, 1.0, 0.0])),
    )
    np.testing.assert_array_equal(
        da, [[0, 0, 0], [0, 0.125, 0.125], [0, 0, 0]]
    )  # two tied: 0.5 / (2 sqrt(4))
