"""Stores into local arrays that nothing reads again leave the adjoint (``optimize.dead_local_stores``);
the corpus cases ``k_local_dead_stores`` and ``k_dead_replay`` check that what stays gives the gradient."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pad
from tests.unit.corpus import k_axes_in_place, k_dead_replay, k_local_dead_stores


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


@pad.kernel
def k_row_read_back(n, f, xv):
    """A store whose element a later load reads again under another expression (``1 + 0`` and ``1``)."""
    row = 1 + 0
    xv[row, n] = f[0, n] * xv[0, n]
    xv[2, n] = xv[1, n] * xv[1, n] + xv[0, n]


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_an_adjoint_leaves_out_stores_into_rows_no_later_load_reads(target):
    """The unrolled loop's stores into ``xv`` hit rows that no later iteration loads: the primal launch made
    them, the adjoint leaves them out and so needs no private copy of ``xv`` to write into."""
    f, xv = np.ones((3, 4)), np.ones((6, 4))
    variant = k_axes_in_place.variant((f, xv), "adjoint", (True, True), target=target)
    assert not _stores(variant.source, "xv")
    assert not variant.rewritten
    kept = k_row_read_back.variant((f, xv), "adjoint", (True, True), target=target)
    assert [s.split("=")[0].strip() for s in _stores(kept.source, "xv")][:1] == ["xv[row, n]"]


def test_the_gradient_of_a_row_read_back_after_its_store():
    """The store the adjoint keeps is the one its reverse needs (``k_axes_in_place``'s gradient, whose stores
    it leaves out, is checked in test_saves.py)."""
    rng = np.random.default_rng(2)
    n = 9
    f, xv = rng.uniform(-1, 1, (3, n)), rng.uniform(-1, 1, (6, n))

    def program(f, xv):
        pad.launch(k_row_read_back, n, f, xv)

    pad.check_grad(program, pad.Dup(f, np.zeros_like(f)), pad.Dup(xv, rng.uniform(size=xv.shape)))
