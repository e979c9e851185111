"""A floating-point operation a block repeats on the same values is made once (``optimize.common_subexpressions``):
the primal's values stay the same bits and the adjoint passes the uses' adjoints on once. The corpus case
"repeated operations on the same values" (``k_shared_sums``) checks the gradient."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pad
from tests.unit.corpus import k_shared_sums


def _sums(source: str, left: str) -> int:
    """How many times a generated kernel adds ``left`` and ``b`` (its comments, the source lines, aside)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    return len(re.findall(rf"\b{left} \+ b\b", code))


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["primal", "tangent", "adjoint"])
def test_a_sum_of_the_same_values_is_made_once_and_a_changed_operand_makes_another(mode, target):
    x, y = np.linspace(0.5, 1.5, 4), np.linspace(0.6, 1.6, 4)
    source = k_shared_sums.variant((x, y), mode, (True, True), target=target).source
    assert _sums(source, "a") == 1  # three reads of a + b before a changes
    assert _sums(source, r"a__\d+") == 1  # the sum of the changed a


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
