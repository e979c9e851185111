"""Seed guards: an adjoint skips the statements that serve one output alone, and their adjoint, where that
output's seed is zero (``reverse.seed_guards``): LULESH's time-step constraints seed one element's strain
rate and characteristic length. The gradients stay those of the whole kernel, for every seed."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pad
from pad import arrays

N = 24
TERMS = 8


@pad.func
def waves(v):
    """sum_k sin(k v) exp(-k v) / (1 + k): enough work to be worth a branch."""
    total = 0.0
    for k in range(TERMS):
        total += math.sin(k * v) * math.exp(-k * v) / (1.0 + k)
    return total


def waves_and_slope(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(TERMS)[:, None]
    e = np.exp(-k * v)
    return (np.sin(k * v) * e / (1 + k)).sum(0), (k * (np.cos(k * v) - np.sin(k * v)) * e / (1 + k)).sum(0)


@pad.kernel
def k_two_outputs(i, x, cheap, costly):
    """``costly[i]``'s value and the loop making it serve it alone: guarded by its seed."""
    cheap[i] = 3.0 * x[i]
    w = waves(x[i])
    costly[i] = w


@pad.kernel
def k_shared(i, x, costly, twice):
    """The loop's value serves two outputs: no guard may skip it for ``costly``'s zero seed."""
    w = waves(x[i])
    costly[i] = w
    twice[i] = 2.0 * w


@pad.kernel
def k_steep(i, x, costly):
    """An infinite partial (the square root's at 0) under a zero seed."""
    costly[i] = math.sqrt(x[i]) * waves(x[i])


def x_values() -> np.ndarray:
    return np.random.default_rng(4).uniform(0.1, 1.5, N)


def _sparse(seed: float) -> np.ndarray:
    """A seed that is zero but at three elements (as the time step's winners seed LULESH's)."""
    s = np.zeros(N)
    s[[1, 7, 20]] = seed * np.array([1.0, -0.5, 2.0])
    return s


def _show(kernel) -> str:
    x = x_values()
    return pad.show(kernel, "adjoint", *(pad.Dup(x.copy(), x.copy()) for _ in range(3)))


def test_the_costly_output_is_guarded_and_the_cheap_one_not():
    source = _show(k_two_outputs)
    assert "_b_costly[i] != 0.0" in source
    assert "_b_cheap[i] != 0.0" not in source
    assert "!= 0.0" not in _show(k_shared)


def two_outputs_gradient(
    x: np.ndarray, dcheap: np.ndarray, dcostly: np.ndarray, on: Callable[[np.ndarray], Any] = np.copy
) -> tuple[np.ndarray, np.ndarray]:
    """``x``'s adjoint and the costly values from ``k_two_outputs``' adjoint, on arrays ``on`` moves (to a GPU)."""
    dx, costly = on(np.zeros(N)), on(np.zeros(N))
    pad.autodiff(
        lambda x, c, e: pad.launch(k_two_outputs, N, x, c, e),
        pad.Dup(on(x), dx),
        pad.Dup(on(np.zeros(N)), on(dcheap)),
        pad.Dup(costly, on(dcostly)),
    )
    return arrays.to_host(dx), arrays.to_host(costly)


def costly_seeds() -> dict[str, np.ndarray]:
    return {"dense": np.linspace(-1.0, 2.0, N), "sparse": _sparse(1.5), "zero": np.zeros(N)}


@pytest.mark.parametrize("costly_seed", ["dense", "sparse", "zero"])
def test_gradients_equal_the_analytic_ones_for_every_seed(costly_seed: str):
    x, dcheap, dcostly = x_values(), np.linspace(0.5, 1.5, N), costly_seeds()[costly_seed]
    w, slope = waves_and_slope(x)
    dx, costly = two_outputs_gradient(x, dcheap, dcostly)
    np.testing.assert_allclose(costly, w, rtol=1e-13)
    np.testing.assert_allclose(dx, 3.0 * dcheap + slope * dcostly, rtol=1e-12, atol=1e-14)


def test_a_value_two_outputs_share_keeps_its_adjoint_when_one_seed_is_zero():
    x = x_values()
    _, slope = waves_and_slope(x)
    dtwice = np.linspace(0.5, 1.5, N)
    dx = np.zeros(N)
    pad.autodiff(
        lambda x, c, t: pad.launch(k_shared, N, x, c, t),
        pad.Dup(x.copy(), dx),
        pad.Dup(np.zeros(N), np.zeros(N)),
        pad.Dup(np.zeros(N), dtwice.copy()),
    )
    np.testing.assert_allclose(dx, 2.0 * slope * dtwice, rtol=1e-12)


def test_a_zero_seed_adds_zero_where_a_partial_is_infinite():
    x = x_values()
    x[[0, 5]] = 0.0  # d sqrt(x) / dx is infinite there
    seed = _sparse(1.0)
    assert seed[0] == seed[5] == 0.0
    dx = np.zeros(N)
    pad.autodiff(lambda x, c: pad.launch(k_steep, N, x, c), pad.Dup(x.copy(), dx), pad.Dup(np.zeros(N), seed))
    assert np.isfinite(dx).all() and dx[0] == dx[5] == 0.0
    w, slope = waves_and_slope(x)
    at = seed != 0.0
    expected = (0.5 / np.sqrt(x[at]) * w[at] + np.sqrt(x[at]) * slope[at]) * seed[at]
    np.testing.assert_allclose(dx[at], expected, rtol=1e-12)


@pytest.mark.parametrize("kernel", [k_two_outputs, k_shared])
def test_check_grad_passes(kernel):
    x = x_values()
    pad.testing.check_grad(
        lambda x, a, b: pad.launch(kernel, N, x, a, b),
        pad.Dup(x, np.zeros(N)),
        pad.Dup(np.zeros(N), np.zeros(N)),
        pad.Dup(np.zeros(N), np.zeros(N)),
    )
