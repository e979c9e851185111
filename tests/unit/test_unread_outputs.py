"""Outputs no later operation reads: a launch's adjoint leaves out the outputs it only stored, into shadows it
made zero, that nothing asked a shadow of after it (their adjoints would add nothing), and keeps every
output something read, whole or through a view, by a launch, a NumPy-level pad operation or a checkpointed
step."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad
import pad.parallel as P

N = 32


@pad.kernel
def k_square_and_sine(i, x, y, side):
    y[i] = x[i] * x[i]
    side[i] = math.sin(x[i])


@pad.kernel
def k_add_scaled(i, a, b):
    b[i] += 3.0 * a[i]


@pytest.fixture
def adjoints(monkeypatch):
    """The positions of the active arrays of every adjoint launched of ``k_square_and_sine``."""
    seen: list[list[int]] = []
    run = P._run

    def noting(variant, n, args, extras=(), shadows=None):
        if variant.mode == "adjoint" and variant.kernel == "k_square_and_sine":
            seen.append(list(variant.active_arrays))
        return run(variant, n, args, extras, shadows)

    monkeypatch.setattr(P, "_run", noting)
    return seen


def _x() -> np.ndarray:
    return np.random.default_rng(2).uniform(-1.0, 1.0, N)


def _gradient(f, x: np.ndarray, y_seed: np.ndarray) -> np.ndarray:
    dx = np.zeros(N)
    pad.autodiff(f, pad.Dup(x.copy(), dx), pad.Dup(np.zeros(N), y_seed.copy()))
    return dx


def test_an_output_nothing_reads_is_left_out_of_the_adjoint(adjoints):
    def f(x, y):
        side = np.zeros(N)  # an intermediate: its shadow is the tape's, zero, and nothing reads it
        pad.launch(k_square_and_sine, N, x, y, side)

    x, seed = _x(), np.linspace(0.5, 1.5, N)
    np.testing.assert_allclose(_gradient(f, x, seed), 2.0 * x * seed, rtol=1e-14)
    assert adjoints == [[0, 1]]  # x and y: not side
    pad.check_grad(f, pad.Dup(x, np.zeros(N)), pad.Dup(np.zeros(N), np.zeros(N)))


@pytest.mark.parametrize("read", ["whole", "view"])
def test_an_output_a_later_launch_reads_keeps_its_adjoint(adjoints, read):
    def f(x, y):
        side = np.zeros(N)
        pad.launch(k_square_and_sine, N, x, y, side)
        if read == "whole":
            pad.launch(k_add_scaled, N, side, y)
        else:
            pad.launch(k_add_scaled, N - 4, side[4:], y[4:])

    x, seed = _x(), np.linspace(0.5, 1.5, N)
    reads = np.arange(N) >= (0 if read == "whole" else 4)
    expected = 2.0 * x * seed + 3.0 * np.cos(x) * seed * reads
    np.testing.assert_allclose(_gradient(f, x, seed), expected, rtol=1e-13)
    assert adjoints == [[0, 1, 2]]
    pad.check_grad(f, pad.Dup(x, np.zeros(N)), pad.Dup(np.zeros(N), np.zeros(N)))


def test_an_output_a_pad_operation_reads_keeps_its_adjoint(adjoints):
    def f(x, y):
        side = np.zeros(N)
        pad.launch(k_square_and_sine, N, x, y, side)
        pad.axpy(2.0, side, y)  # y += 2 side

    x, seed = _x(), np.linspace(0.5, 1.5, N)
    np.testing.assert_allclose(_gradient(f, x, seed), (2.0 * x + 2.0 * np.cos(x)) * seed, rtol=1e-13)
    assert adjoints == [[0, 1, 2]]


def test_only_the_last_writer_of_an_output_leaves_it_out(adjoints):
    """A second launch writing the same output asks for its shadow: the first keeps its adjoint (the second
    one's clears the seeds, so the first's adds nothing either way), the second leaves it out."""

    def f(x, y):
        side, squares = np.zeros(N), np.zeros(N)
        pad.launch(k_square_and_sine, N, x, squares, side)
        pad.launch(k_square_and_sine, N, squares, y, side)  # y = x ** 4

    x, seed = _x(), np.linspace(0.5, 1.5, N)
    np.testing.assert_allclose(_gradient(f, x, seed), 4.0 * x**3 * seed, rtol=1e-13)
    assert adjoints == [[0, 1], [0, 1, 2]]  # reversed: the second launch's adjoint runs first


def test_a_given_shadow_is_never_left_out(adjoints):
    """A Dup the caller gives may carry a seed: its adjoint stays."""
    x, seed, side_seed = _x(), np.linspace(0.5, 1.5, N), np.full(N, 0.25)
    dx = np.zeros(N)
    pad.autodiff(
        lambda x_, y_, s_: pad.launch(k_square_and_sine, N, x_, y_, s_),
        pad.Dup(x.copy(), dx),
        pad.Dup(np.zeros(N), seed.copy()),
        pad.Dup(np.zeros(N), side_seed.copy()),
    )
    np.testing.assert_allclose(dx, 2.0 * x * seed + np.cos(x) * side_seed, rtol=1e-14)
    assert adjoints == [[0, 1, 2]]


def test_a_checkpointed_loop_reading_an_output_keeps_its_adjoint():
    """Steps that read the output are recorded again during the reverse pass: they ask for its shadow."""

    def f(x, y):
        side = np.zeros(N)
        pad.launch(k_square_and_sine, N, x, y, side)

        def step(t, y_):
            pad.launch(k_add_scaled, N, side, y_)

        pad.checkpoint.loop(step, 3, y, snapshots=1)

    x, seed = _x(), np.linspace(0.5, 1.5, N)
    np.testing.assert_allclose(_gradient(f, x, seed), (2.0 * x + 9.0 * np.cos(x)) * seed, rtol=1e-13)


@pytest.mark.parametrize("snapshots", [None, 1])
def test_an_output_the_next_checkpointed_step_reads_keeps_its_adjoint(snapshots):
    """Each step writes ``carry`` (its only store there) and the next reads it. A checkpointed loop records a
    step again in the reverse pass, after the next step's adjoint added into ``carry``'s shadow: a step's
    own records never leave an output out."""

    def f(x, y):
        carry, squares = np.zeros(N), np.zeros(N)

        def step(t, x_, y_):
            pad.launch(k_add_scaled, N, carry, y_)  # y += 3 carry
            pad.launch(k_square_and_sine, N, x_, squares, carry)  # carry = sin(x)

        pad.checkpoint.loop(step, 4, x, y, snapshots=snapshots)

    x, seed = _x(), np.linspace(0.5, 1.5, N)
    np.testing.assert_allclose(_gradient(f, x, seed), 9.0 * np.cos(x) * seed, rtol=1e-13)
