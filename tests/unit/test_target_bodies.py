"""A helper with a CUDA body of its own (``@pad.func(cuda=other)``): CUDA kernels inline ``other``, CPU
kernels and Python calls the helper's own body. Its CUDA gradients are checked in tests/gpu/test_cuda.py."""

from __future__ import annotations

import numpy as np
import pytest

import pad


@pad.func
def weighted_tabled(x, i, w):
    """``weighted`` through a table of the scaled values, as a CUDA body."""
    table = pad.local_array(3)
    for k in range(3):
        table[k] = x[i] * (k + 1.0)
    return table[0] * w[0] + table[1] * w[1] + table[2] * w[2]


@pad.func(cuda=weighted_tabled)
def weighted(x, i, w):
    """``x[i] * (w[0] + 2 w[1] + 3 w[2])``, each product written out."""
    return x[i] * 1.0 * w[0] + x[i] * 2.0 * w[1] + x[i] * 3.0 * w[2]


@pad.kernel
def k_weighted(i, x, w, y):
    y[i] = weighted(x, i, w) ** 2


def arguments() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return rng.uniform(-1.0, 1.0, 16), np.array([0.5, -0.25, 2.0]), np.zeros(16)


@pytest.mark.parametrize("mode", ["primal", "adjoint"])
def test_cuda_kernels_inline_the_cuda_body_and_cpu_kernels_the_helper_s_own(mode):
    args = arguments()
    active = (True, True, True)
    cpu = k_weighted.variant(args, mode, active, target="cpu").source
    cuda = k_weighted.variant(args, mode, active, target="cuda").source
    assert "weighted_tabled" in cuda and "table" in cuda
    assert "weighted_tabled" not in cpu and "table" not in cpu


def test_a_helper_with_a_cuda_body_runs_its_own_from_python_and_cpu_kernels():
    x, w, y = arguments()
    assert weighted(x, 3, w) == pytest.approx(x[3] * (w[0] + 2 * w[1] + 3 * w[2]), rel=1e-15)
    pad.launch(k_weighted, 16, x, w, y)
    np.testing.assert_allclose(y, (x * (w[0] + 2 * w[1] + 3 * w[2])) ** 2, rtol=1e-14)
    pad.check_grad(
        lambda *a: pad.launch(k_weighted, 16, *a),
        pad.Dup(x, np.zeros(16)),
        pad.Dup(w, np.zeros(3)),
        pad.Dup(y, np.zeros(16)),
    )


def test_a_cuda_body_must_take_the_helper_s_parameters():
    def scaled_other(x, j, w):
        return x[j] * w[0]

    with pytest.raises(
        TypeError, match=r"helper scaled\(x, i, w\): its CUDA body scaled_other\(x, j, w\) must"
    ):

        @pad.func(cuda=scaled_other)
        def scaled(x, i, w):
            return x[i] * w[0]
