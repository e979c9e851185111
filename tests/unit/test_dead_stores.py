"""Stores into local arrays that nothing reads again leave the adjoint (``optimize.dead_local_stores``);
the corpus cases ``k_local_dead_stores`` and ``k_dead_replay`` check that what stays gives the gradient."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.unit.corpus import k_dead_replay, k_local_dead_stores


def _stores(source: str, array: str) -> list[str]:
    """The statements of a generated kernel that store into ``array`` (not the CUDA kernel's zero fill)."""
    return re.findall(rf"^\s*{re.escape(array)}\[(?!_f)[^\]]*\] \+?= .*$", source, re.MULTILINE)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_replay_that_rebuilds_an_array_no_one_reads_again_is_dropped(target):
    x, y = np.linspace(0.5, 1.5, 5), np.zeros(5)
    adjoint = k_dead_replay.variant((x, y), "adjoint", (True, True), target=target).source
    primal = k_dead_replay.variant((x, y), "primal", (True, True), target=target).source
    # the forward sweep builds g as the primal does; the reverse sweep's replay of its loop does not
    assert len(_stores(adjoint, "g")) == len(_stores(primal, "g")) == 1
    assert len(_stores(adjoint, "h")) == len(_stores(primal, "h")) == 2


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_store_into_an_element_no_one_reads_is_dropped(target):
    x, y = np.linspace(0.5, 1.5, 6), np.zeros(6)
    args, active = (5, x, y), (False, True, True)
    adjoint = k_local_dead_stores.variant(args, "adjoint", active, target=target).source
    primal = k_local_dead_stores.variant(args, "primal", active, target=target).source
    assert [line.split("=")[0].strip() for line in _stores(primal, "c")] == ["c[0]", "c[1]", "c[2]"]
    assert [line.split("=")[0].strip() for line in _stores(adjoint, "c")] == ["c[0]", "c[1]"]
    assert len(_stores(adjoint, "w")) == len(_stores(primal, "w"))  # each is read on some path
