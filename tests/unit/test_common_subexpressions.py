"""A floating-point value a block computes again from the same values (an operation, or a load with no store
in between) is made once in CPU kernels (``optimize.common_subexpressions``): the primal's values stay the
same bits and the adjoint passes the uses' adjoints on once. The corpus cases "repeated operations on the
same values" (``k_shared_sums``) and "repeated loads of a local array through a helper"
(``k_shared_loads``) check the gradients."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pad
from tests.unit.corpus import k_shared_loads, k_shared_sums


def _code(source: str) -> str:
    """A generated kernel without its comments (the source lines)."""
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))


def _sums(source: str, left: str) -> int:
    """How many times a generated kernel adds ``left`` and ``b``."""
    return len(re.findall(rf"\b{left} \+ b\b", _code(source)))


@pytest.mark.parametrize("mode", ["primal", "tangent", "adjoint"])
def test_a_sum_of_the_same_values_is_made_once_and_a_changed_operand_makes_another(mode):
    x, y = np.linspace(0.5, 1.5, 4), np.linspace(0.6, 1.6, 4)
    source = k_shared_sums.variant((x, y), mode, (True, True), target="cpu").source
    assert _sums(source, "a") == 1  # three reads of a + b before a changes
    assert _sums(source, r"a__\d+") == 1  # the sum of the changed a


def test_cuda_kernels_keep_their_repeated_values():
    """On GPUs the values would live longer in registers than recomputing them costs (compiler.analyse)."""
    x, y = np.linspace(0.5, 1.5, 4), np.linspace(0.6, 1.6, 4)
    source = k_shared_sums.variant((x, y), "adjoint", (True, True), target="cuda").source
    assert _sums(source, "a") == 3


def test_the_primal_is_the_same_bits():
    x, y = np.linspace(0.5, 1.5, 9), np.linspace(0.6, 1.6, 9)
    expected = y.copy()
    for i in range(9):
        a, b = x[i], y[i]
        p = (a + b) * (a - b) + (a + b) * a
        q = (a + b) * b + (a - b) * b
        a = 2.0 * a
        expected[i] = p + q + (a + b) * p
    pad.launch(k_shared_sums, 9, x, y)
    assert np.array_equal(y, expected)


def test_loads_are_made_once_until_a_store_may_change_them():
    x, y = np.linspace(0.5, 1.5, 12), np.linspace(0.5, 1.5, 4)
    code = _code(k_shared_loads.variant((x, y), "primal", (True, True), target="cpu").source)
    # v[0], v[1] and v[2] once each before the store into v[1] (three helper calls read them six times),
    # v[0] and v[1] again after it; the indices are the helper's parameters, bound to literals
    assert len(re.findall(r"\bv\[_pair_sum\w+\]", code)) == 5
    # x[i]: once before the store into y (read twice there), once after (y might be x)
    assert len(re.findall(r"\bx\[i\]", code)) == 2


def test_the_primal_with_loads_is_the_same_bits():
    x, y = np.linspace(0.5, 1.5, 12), np.linspace(0.6, 1.6, 4)
    expected = y.copy()
    for i in range(4):
        v = x[3 * i : 3 * i + 3].copy()
        s = (v[0] + v[1]) * (v[1] + v[0])
        t = v[1] + v[2]
        v[1] = s * t
        w = x[i] * t
        expected[i] = (v[0] + v[1]) * expected[i] + x[i] * w
        expected[i] += x[i] * t
    pad.launch(k_shared_loads, 4, x, y)
    assert np.array_equal(y, expected)
