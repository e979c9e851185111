"""PAD_DEBUG: every kernel access bounds-checked in the primal, tangent and adjoint, with an error naming the
kernel, the source line, the array, the index, the shape and the launch index; nothing checked without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

import pad
from pad.kernel import checks
from pad.parallel import _run

HERE = Path(__file__).name


def line_of(text: str) -> int:
    return next(n for n, t in enumerate(Path(__file__).read_text().splitlines(), 1) if t.strip() == text)


@pad.kernel
def k_shift(i, x, y):
    y[i] = 2.0 * x[i + 1]


@pad.kernel
def k_gather(i, idx, x, y):
    y[i] = 3.0 * x[idx[i]]


@pad.kernel
def k_local(i, x, y, m):
    w = pad.local_array(3)
    for k in range(m):
        w[k] = x[i] * k
    y[i] = w[0]


@pad.kernel
def k_tuple(i, t, x, y):
    y[i] = t[i] * x[i]


@pad.kernel
def k_back(i, x, y):
    y[i] = x[i - 1]


def test_primal_error_names_kernel_line_array_index_shape():
    x, y = np.ones(4), np.zeros(4)
    with pad.debug(), pytest.raises(IndexError) as info:
        pad.launch(k_shift, 4, x, y)
    assert f"{HERE}:{line_of('y[i] = 2.0 * x[i + 1]')}: in k_shift (primal), launch index 3:" in str(
        info.value
    )
    assert "index (4,) is out of range for 'x' of shape (4,)" in str(info.value)


def test_tangent_error():
    x, y = np.ones(4), np.zeros(4)
    with pad.debug(), pytest.raises(IndexError, match=r"k_shift \(tangent\), launch index 3: index \(4,\)"):
        pad.fwddiff(
            lambda x, y: pad.launch(k_shift, 4, x, y), pad.Dup(x, np.ones(4)), pad.Dup(y, np.zeros(4))
        )


def test_adjoint_error():
    """The adjoint's own accesses are checked: its scatter to the adjoint of x would write past its end."""
    idx, x, y, dx, dy = np.array([0, 1, 7]), np.ones(3), np.zeros(3), np.zeros(3), np.ones(3)
    with pad.debug():
        adjoint = k_gather.variant((idx, x, y), "adjoint", (False, True, True))
    with pytest.raises(IndexError) as info:
        _run(adjoint, 3, (idx, x, y), [dx, dy], [None, dx, dy])
    assert f"{HERE}:{line_of('y[i] = 3.0 * x[idx[i]]')}: in k_gather (adjoint), launch index 2:" in str(
        info.value
    )
    assert "index (7,) is out of range for the adjoint of 'x' of shape (3,)" in str(info.value)


def test_local_arrays_tuples_and_negative_indices_are_checked():
    x, y = np.ones(3), np.zeros(3)
    with pad.debug():
        pad.launch(k_local, 3, x, y, 3)
        with pytest.raises(IndexError, match=r"index \(3,\) is out of range for 'w' of shape \(3,\)"):
            pad.launch(k_local, 3, x, y, 4)
        with pytest.raises(IndexError, match=r"index \(2,\) is out of range for a tuple of shape \(2,\)"):
            pad.launch(k_tuple, 3, (1.0, 2.0), x, y)
        with pytest.raises(IndexError, match=r"launch index 0: index \(-1,\) is out of range for 'x'"):
            pad.launch(k_back, 3, x, y)


def test_checked_gradients_equal_unchecked_ones():
    x = np.linspace(0.5, 1.5, 5)
    results = []
    for on in (False, True):
        with pad.debug(on):
            dx, y = np.zeros(5), np.zeros(4)
            pad.autodiff(lambda x, y: pad.launch(k_shift, 4, x, y), pad.Dup(x, dx), pad.Dup(y, np.ones(4)))
            results.append((y, dx))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_checked_variants_are_separate_and_unchecked_code_has_no_checks():
    x, y = np.ones(4), np.zeros(4)
    with open(os.devnull, "w") as quiet:
        plain = pad.show(k_shift, "adjoint", pad.Dup(x, x), pad.Dup(y, y), file=quiet)
        with pad.debug():
            checked = pad.show(k_shift, "adjoint", pad.Dup(x, x), pad.Dup(y, y), file=quiet)
    assert "checked(" not in plain and "checked(" in checked


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 numba threads")
def test_an_error_in_the_last_of_two_chunks_comes_back():
    """An error raised in a parallel loop would be lost: a checked launch runs its chunks one after another."""
    x, y = np.ones(4), np.zeros(4)
    numba.set_num_threads(2)
    try:
        with pad.debug(), pytest.raises(IndexError, match=r"launch index 3: index \(4,\)"):
            pad.launch(k_shift, 4, x, y)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


def test_switch_and_context_restore_the_setting():
    before = checks.enabled()
    try:
        pad.debug(True)
        assert checks.enabled()
        with pytest.raises(RuntimeError), pad.debug(False):
            assert not checks.enabled()
            raise RuntimeError
        assert checks.enabled()
    finally:
        pad.debug(before)


def test_environment_variable_turns_checks_on():
    code = (
        "import numpy as np, pad\n"
        "from tests.unit.test_debug import k_shift\n"
        "try:\n"
        "    pad.launch(k_shift, 4, np.ones(4), np.zeros(4))\n"
        "except IndexError as e:\n"
        "    print('refused:', str(e).split(': ', 1)[1])\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PAD_DEBUG": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, check=True
    )
    assert "refused: in k_shift (primal), launch index 3: index (4,)" in out.stdout
