"""Backward activity: varied values that reach no active array get no derivative code at all."""

from __future__ import annotations

import math

import numpy as np

import pad


@pad.kernel
def k_with_repeats(i, reps, x, y, scratch):
    for _ in range(reps[i]):
        t = math.exp(x[i]) * y[i]  # varied, but only written to scratch
        scratch[i] = t
    y[i] = math.sin(x[i]) * y[i]


@pad.kernel
def k_without(i, reps, x, y, scratch):
    y[i] = math.sin(x[i]) * y[i]


def _args(n: int = 6) -> tuple:
    return np.arange(n) % 3, np.linspace(0.1, 0.9, n), np.linspace(1.0, 2.0, n), np.zeros(n)


def test_work_feeding_only_an_inactive_array_has_no_adjoint():
    args = _args()
    active = (False, True, True, False)
    with_repeats = k_with_repeats.variant(args, "adjoint", active).source
    without = k_without.variant(args, "adjoint", active).source
    assert with_repeats.count("for ") == without.count("for ")  # the repetitions' loop is gone
    assert "math.exp(" not in with_repeats


def test_its_gradient_is_still_right():
    reps, x, y, scratch = _args()

    def program(x, y):
        pad.launch(k_with_repeats, x.shape[0], reps, x, y, scratch)

    pad.check_grad(program, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.zeros_like(y)))
    assert (scratch != 0).sum() == (reps > 0).sum()  # the repetitions ran
