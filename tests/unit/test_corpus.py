"""Every corpus kernel through check_grad: finite differences and the forward/reverse dot-product test."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import pad
from tests.unit.corpus import CASES

TOLERANCES = {np.float64: (1e-6, 1e-9), np.float32: (3e-3, 1e-4)}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient(case):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    args = case.make_args(rng, case.dtype)
    rtol, atol = TOLERANCES[case.dtype]
    pad.check_grad(case.program, *args, rtol=rtol, atol=atol, directions=2)


def test_corpus_size():
    assert len({c.name for c in CASES}) >= 40
