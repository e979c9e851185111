"""Constant tables: module-level NumPy arrays a kernel reads by indexing them, printed into its code.

Their gradients are checked with the corpus (case "constant tables", on CPU threads and the CUDA target).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import pad

WEIGHTS = np.array([[1.0, -1.0, 0.5], [2.0, 0.25, -3.0]])
ORDER = np.array([2, 0, 1], dtype=np.int64)
LIMITS = np.array([-np.inf, np.inf, 0.1 + 0.2])
WIDE = np.zeros(4096)
WORDS = np.array(["a", "b"])
SINGLE = np.array(2.0)


@pad.kernel
def k_weights(i, x, y):
    s = 0.0
    for m in range(WEIGHTS.shape[0]):
        for k in range(len(ORDER)):
            s += WEIGHTS[m, ORDER[k]] * x[i, k] * x[i, m]
    y[i] = min(max(s, LIMITS[0]), LIMITS[1]) + LIMITS[2]


def _reference(x: np.ndarray) -> np.ndarray:
    s = np.einsum("mk,ik,im->i", WEIGHTS[:, ORDER], x, x[:, :2])
    return s + (0.1 + 0.2)


def _args(n: int = 7) -> tuple[np.ndarray, np.ndarray]:
    return np.random.default_rng(5).uniform(-1.0, 1.0, (n, 3)), np.zeros(n)


def test_a_kernel_reads_the_tables_values():
    x, y = _args()
    pad.launch(k_weights, len(y), x, y)
    np.testing.assert_allclose(y, _reference(x), rtol=1e-14)


def test_tables_are_printed_into_the_code_and_get_no_shadow():
    x, y = _args()
    source = pad.show(k_weights, "adjoint", pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.ones_like(y)))
    assert "_k_WEIGHTS = np.array([[1.0, -1.0, 0.5], [2.0, 0.25, -3.0]], dtype='float64')" in source
    assert "_k_ORDER = np.array([2, 0, 1], dtype='int64')" in source
    assert f"_k_LIMITS = np.array([-math.inf, math.inf, {0.1 + 0.2!r}], dtype='float64')" in source
    assert "_b__k_" not in source
    cuda = pad.show(k_weights, "adjoint", pad.Dup(x, np.zeros_like(x)), pad.Dup(y, y), target="cuda")
    assert "_k_WEIGHTS = np.array([[1.0, -1.0, 0.5], [2.0, 0.25, -3.0]], dtype='float64')" in cuda
    dx = np.zeros_like(x)
    pad.autodiff(
        lambda x, y: pad.launch(k_weights, len(y), x, y), pad.Dup(x, dx), pad.Dup(y, np.ones_like(y))
    )
    w = WEIGHTS[:, ORDER]
    expected = np.einsum("mk,im->ik", w, x[:, :2]) + np.pad(np.einsum("mk,ik->im", w, x), ((0, 0), (0, 1)))
    np.testing.assert_allclose(dx, expected, rtol=1e-13)


def test_a_changed_table_is_refused_by_the_kernel_that_took_it_and_taken_anew_by_a_new_one(monkeypatch):
    @pad.kernel
    def k_scaled(i, x, y):
        y[i] = WEIGHTS[0, 2] * x[i, 0]

    x, y = _args()
    before = pad.show(k_scaled, "primal", x, y)
    monkeypatch.setattr(sys.modules[__name__], "WEIGHTS", 2.0 * WEIGHTS)
    with pytest.raises(pad.KernelSyntaxError, match=r"global array .*WEIGHTS has changed since this kernel"):
        pad.show(k_scaled, "adjoint", pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.ones_like(y)))
    after = pad.show(pad.kernel(k_scaled.fn), "primal", x, y)
    assert "[[1.0, -1.0, 0.5]" in before and "[[2.0, -2.0, 1.0]" in after  # another source: another module
    pad.launch(pad.kernel(k_scaled.fn), len(y), x, y)
    np.testing.assert_array_equal(y, 1.0 * x[:, 0])


@pad.kernel
def k_store_into_table(i, x):
    WEIGHTS[0, 0] = x[i]


@pad.kernel
def k_add_into_table(i, x):
    ORDER[0] += 1


@pad.kernel
def k_words(i, x):
    x[i] = WORDS[0]


@pad.kernel
def k_wide(i, x):
    x[i] = WIDE[i]


@pad.kernel
def k_single(i, x):
    x[i] = SINGLE[()]


@pad.kernel
def k_table_as_scalar(i, x):
    x[i] = LIMITS + 1.0


@pytest.mark.parametrize(
    "kernel, message",
    [
        (k_store_into_table, r"WEIGHTS\[0, 0\] writes into a module-level array.*pass the array as a kernel"),
        (k_add_into_table, r"ORDER\[0\] \+= 1 writes into a module-level array"),
        (k_words, r"the global 'WORDS' is a 1-d array of <U1, not a table of numbers"),
        (
            k_wide,
            r"'WIDE' holds 32768 bytes, more than a constant table's 16384; pass it as a kernel argument",
        ),
        (k_single, r"the global 'SINGLE' is a 0-d array of float64"),
        (k_table_as_scalar, r"the array 'LIMITS' is used as a scalar; index it"),
    ],
    ids=["store", "add", "strings", "huge", "0-d", "scalar"],
)
def test_what_a_table_cannot_be(kernel, message):
    with pytest.raises(pad.KernelSyntaxError, match=message):
        pad.launch(kernel, 2, np.zeros(2))
