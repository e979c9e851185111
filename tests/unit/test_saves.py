"""What the reverse sweep saves: nothing for local arrays filled or summed into before the loops that read
them; the old values where a loop around both (or a loop before the store) may read them again."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pad
from tests.unit.corpus import k_axes_in_place


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


@pad.kernel
def k_repeat_then_update(i, reps, x, y, scratch):
    """LULESH's EOS in small: a loop that evaluates from ``y[i]`` (into scratch nothing reads), then ``y``
    updated in place."""
    for _ in range(reps[i]):
        scratch[i] = math.sin(y[i]) * x[i]
    y[i] = math.sin(y[i]) * x[i] + y[i]


@pad.kernel
def k_update_then_reread(i, x, y):
    y[i] = x[i] * y[i]
    total = 0.0
    for k in range(3):
        total += y[i] * (k + 1.0)  # reads the new value: that store stays
    y[i] = total


def _stores_of_y(source: str) -> int:
    return sum(line.strip().startswith("y[i] =") for line in source.splitlines())


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_store_nothing_reads_again_is_left_out_with_its_save(target):
    """An adjoint re-runs the forward sweep without the stores no later statement reads (the primal launch
    made them): the in-place update after a loop that reads the array is neither stored nor saved and
    restored for the loop's replay; a store that a later loop reads stays."""
    n = 5
    reps, x, y, scratch = (
        np.array([1, 3, 2, 1, 2]),
        np.linspace(0.2, 1.1, n),
        np.linspace(0.5, 0.9, n),
        np.zeros(n),
    )
    active = (False, True, True, False)
    assert (
        _stores_of_y(k_repeat_then_update.variant((reps, x, y, scratch), "adjoint", active, target).source)
        == 0
    )
    assert _stores_of_y(k_update_then_reread.variant((x, y), "adjoint", (True, True), target).source) == 1
    if target == "cpu":
        pad.check_grad(
            lambda x, y, s: pad.launch(k_repeat_then_update, n, reps, x, y, s),
            pad.Dup(x, np.zeros(n)),
            pad.Dup(y, np.zeros(n)),
            pad.Const(scratch),
        )
        pad.check_grad(
            lambda x, y: pad.launch(k_update_then_reread, n, x, y),
            pad.Dup(x, np.zeros(n)),
            pad.Dup(y, np.zeros(n)),
        )


def test_a_small_taped_loop_saves_in_variables_on_the_cpu_too():
    """A loop of at most ``optimize.UNROLLED_TRIPS`` literal iterations is unrolled in a CPU adjoint as in a
    CUDA one: its saves go to variables, not to the stack; the gradient still matches finite differences."""
    rng = np.random.default_rng(3)
    n = 40
    f, xv = rng.uniform(-1, 1, (3, n)), rng.uniform(-1, 1, (6, n))
    source = k_axes_in_place.variant((f, xv), "adjoint", (True, True)).source
    assert "_sf = np.empty" not in source and "for axis" not in source

    def program(f, xv):
        pad.launch(k_axes_in_place, n, f, xv)

    pad.check_grad(program, pad.Dup(f, np.zeros_like(f)), pad.Dup(xv, rng.uniform(size=xv.shape)))
