"""pad.launch semantics: every index runs once, empty kernels and empty launches, views as arguments."""

from __future__ import annotations

import numpy as np

import pad


@pad.kernel
def k_empty(i, x):
    pass


@pad.kernel
def k_mark(i, counts, offset):
    counts[i] += 1 + offset


def test_empty_kernel_and_empty_launch():
    x = np.zeros(3)
    pad.launch(k_empty, 3, x)
    pad.launch(k_mark, 0, np.zeros(0, np.int64), 0)
    assert not x.any()


def test_every_index_runs_exactly_once():
    counts = np.zeros(10007, np.int64)
    pad.launch(k_mark, counts.shape[0], counts, 0)
    pad.launch(k_mark, counts.shape[0], counts, 1)
    assert (counts == 3).all()


def test_strided_view_argument():
    base = np.zeros((4, 6), np.int64)
    pad.launch(k_mark, 3, base[1, ::2], 4)
    assert base[1, ::2].tolist() == [5, 5, 5] and base.sum() == 15


def test_import_pad_loads_neither_cupy_nor_numba_cuda():
    import subprocess
    import sys

    code = "import sys, pad, pad.mpi; print(sorted(m for m in ('cupy', 'numba.cuda') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
