"""Results with 1 and 2 threads agree (privatized reductions make `+=` race-free)."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import pad
from tests.unit.corpus import k_hex_forces, k_pairwise, k_scatter_add


def run(threads: int, program, arrays):
    numba.set_num_threads(threads)
    try:
        copies = [a.copy() for a in arrays]
        shadows = [np.linspace(0.5, 1.5, a.size).reshape(a.shape) for a in arrays]
        pad.autodiff(program, *[pad.Dup(a, s) for a, s in zip(copies, shadows, strict=True)])
        return copies, shadows
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
@pytest.mark.parametrize("which", ["scatter", "pairwise", "hex"])
def test_one_and_two_threads_agree(which):
    rng = np.random.default_rng(3)
    if which == "scatter":
        idx = rng.integers(0, 50, 20000)

        def program(x, y):
            pad.launch(k_scatter_add, idx.shape[0], idx, x, y)

        arrays = [rng.uniform(0.5, 1.5, 20000), np.zeros(50)]
    elif which == "pairwise":

        def program(pos, q, r, e):
            pad.launch(k_pairwise, pos.shape[0], pos, q, r, e)

        arrays = [
            rng.uniform(0, 6, (300, 2)),
            rng.uniform(-1, 1, 300),
            rng.uniform(0.3, 0.8, 300),
            np.zeros(300),
        ]
    else:
        nodes = np.array(
            [[e, e + 1, e + 5, e + 4, e + 8, e + 9, e + 13, e + 12] for e in range(3)] * 1000, np.int64
        )

        def program(x, y, z, p, fx, fy, fz):
            pad.launch(k_hex_forces, nodes.shape[0], nodes, x, y, z, p, fx, fy, fz)

        arrays = (
            [rng.uniform(0.5, 1.5, 16) for _ in range(3)]
            + [rng.uniform(0.5, 1, 3000)]
            + [np.zeros(16) for _ in range(3)]
        )
    one = run(1, program, arrays)
    two = run(2, program, arrays)
    for a, b in zip(one[0] + one[1], two[0] + two[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
