"""Seed guards: an adjoint skips the statements that serve one output alone, and their adjoint, where that
output's seed is zero (``reverse.seed_guards``: LULESH's time-step constraints seed one element's strain
rate and characteristic length), and a whole iteration where all its outputs' seeds are
(``reverse.iteration_guard``: LULESH's elements at rest). The gradients stay those of the whole kernel, for
every seed."""

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


@pad.kernel
def k_scatter(i, x, cells, y):
    """An add into a shared element: its seed is not the iteration's own, so no iteration guard."""
    y[cells[i]] += waves(x[i])


@pad.kernel
def k_cheap(i, x, y):
    """A short adjoint without loops (which LLVM may vectorize): no guard."""
    y[i] = 3.0 * x[i] * x[i]


def test_the_costly_output_is_guarded_and_the_cheap_one_not():
    source = _show(k_two_outputs)
    assert "if _b_costly[i] != 0.0:" in source
    assert "if _b_cheap[i] != 0.0:" not in source
    assert "if abs(_b_cheap[i]) + abs(_b_costly[i]) != 0.0:" in source  # the whole iteration's
    shared = _show(k_shared)
    assert "if _b_costly[i] != 0.0:" not in shared
    assert "if abs(_b_costly[i]) + abs(_b_twice[i]) != 0.0:" in shared


def test_no_iteration_guard_where_a_seed_is_shared_or_the_adjoint_is_short():
    x = x_values()
    cells = np.arange(N) % 5
    scatter = pad.show(k_scatter, "adjoint", pad.Dup(x, x.copy()), cells, pad.Dup(x.copy(), x.copy()))
    assert "!= 0.0:" not in scatter
    assert "!= 0.0:" not in pad.show(k_cheap, "adjoint", pad.Dup(x, x.copy()), pad.Dup(x.copy(), x.copy()))


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


@pytest.mark.parametrize("cheap_seed", ["dense", "sparse"])
@pytest.mark.parametrize("costly_seed", ["dense", "sparse", "zero"])
def test_gradients_equal_the_analytic_ones_for_every_seed(costly_seed: str, cheap_seed: str):
    """Sparse cheap seeds leave iterations with no nonzero seed at all: the iteration guard skips those."""
    dcheap = np.linspace(0.5, 1.5, N) if cheap_seed == "dense" else _sparse(-2.0)[::-1].copy()
    x, dcostly = x_values(), costly_seeds()[costly_seed]
    w, slope = waves_and_slope(x)
    dx, costly = two_outputs_gradient(x, dcheap, dcostly)
    np.testing.assert_allclose(costly, w, rtol=1e-13)
    np.testing.assert_allclose(dx, 3.0 * dcheap + slope * dcostly, rtol=1e-12, atol=1e-14)


def test_a_nan_seed_is_not_skipped():
    x, dcheap, dcostly = x_values(), np.zeros(N), np.zeros(N)
    dcostly[4] = np.nan
    dx, _ = two_outputs_gradient(x, dcheap, dcostly)
    assert np.isnan(dx[4]) and (dx[np.arange(N) != 4] == 0.0).all()


def test_a_scatter_s_gradient_is_the_analytic_one():
    x, cells = x_values(), np.arange(N) % 5
    seed = np.zeros(5)
    seed[[1, 3]] = [2.0, -1.0]
    dx = np.zeros(N)
    pad.autodiff(
        lambda x, y: pad.launch(k_scatter, N, x, cells, y),
        pad.Dup(x.copy(), dx),
        pad.Dup(np.zeros(5), seed.copy()),
    )
    np.testing.assert_allclose(dx, waves_and_slope(x)[1] * seed[cells], rtol=1e-12, atol=1e-14)


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
    """check_grad's seeds are dense: every guard is taken."""
    x = x_values()
    pad.testing.check_grad(
        lambda x, a, b: pad.launch(kernel, N, x, a, b),
        pad.Dup(x, np.zeros(N)),
        pad.Dup(np.zeros(N), np.zeros(N)),
        pad.Dup(np.zeros(N), np.zeros(N)),
    )
