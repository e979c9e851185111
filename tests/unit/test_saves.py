"""What the reverse sweep saves: nothing for local arrays filled or summed into before the loops that read
them; the old values where a loop around both (or a loop before the store) may read them again."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad


@pad.kernel
def k_fill_then_read(i, x, y):
    a = pad.local_array(4)
    for k in range(4):
        a[k] = 0.0
    for k in range(4):
        a[k] += math.sin(x[i] * (k + 1))  # summed into after its fill: no reader yet
    total = 0.0
    for k in range(4):
        total += a[k] * a[k]
    y[i] = total


@pad.kernel
def k_overwrite_in_outer_loop(i, x, y):
    a = pad.local_array(2)
    a[0] = x[i]
    a[1] = 2.0 * x[i]
    total = 0.0
    for m in range(5):  # more iterations than a CUDA adjoint unrolls (optimize.UNROLLED_TRIPS)
        for k in range(2):
            total += math.sin(a[k])  # read, then overwritten in the next iteration
        a[m % 2] = a[m % 2] * a[(m + 1) % 2]
    y[i] = total


def _args(n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    return np.linspace(0.2, 1.1, n), np.zeros(n)


def test_filling_and_summing_before_the_readers_saves_nothing():
    x, y = _args()
    cpu = k_fill_then_read.variant((x, y), "adjoint", (True, True)).source
    assert "_sf = np.empty" not in cpu and "_si = np.empty" not in cpu  # no stack at all
    assert k_fill_then_read.variant((x, y), "adjoint", (True, True), target="cuda").tape_slots == 0


@pytest.mark.parametrize("kernel", [k_fill_then_read, k_overwrite_in_outer_loop])
def test_gradients_with_and_without_saves(kernel):
    x, y = _args()

    def program(x, y):
        pad.launch(kernel, x.shape[0], x, y)

    pad.check_grad(program, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.ones_like(y)))


def test_a_store_a_later_iteration_reads_again_still_saves():
    x, y = _args()
    variant = k_overwrite_in_outer_loop.variant((x, y), "adjoint", (True, True), target="cuda")
    assert variant.tape_slots > 0
