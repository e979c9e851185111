"""scripts/bench_minibude_hand.py: the hand-written CUDA peer computes miniBUDE's energies and gradient.

On numba's CUDA simulator (one lane per work item, atomics instead of warp sums) or a GPU; the benchmark
itself checks its lanes-sharing form against pad's on the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import pad
from apps.minibude.deck import synthetic_deck
from apps.minibude.driver import Docking
from apps.minibude.kernels import NCOEF, pair_coefficients
from scripts.bench_minibude_hand import KINKS, launch, make_kernel
from tests.gpu.test_corpus_cuda import _gpu_available, device

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _gpu_available(), reason="no GPU and NUMBA_ENABLE_CUDASIM is not 1"),
]


@pytest.mark.parametrize("kink", KINKS)
def test_hand_written_gradient_matches_pads(kink):
    # 10 poses: the last work item has two spare slots, whose seeds must not flow back
    deck = synthetic_deck(nposes=10, natpro=19, natlig=5, seed=3)
    dock = Docking(deck)
    want_e = dock.score().copy()
    want_g = dock.gradient("protein")
    coef = np.zeros((deck.ntypes, NCOEF, deck.natpro), np.float32)
    pad.launch(
        pair_coefficients, deck.ntypes * deck.natpro, deck.ff_hbtype, deck.ff_params, deck.protein_type, coef
    )
    energies, grad = device(np.zeros(deck.nposes, np.float32)), device(np.zeros((3, deck.natpro), np.float32))
    args = (
        deck.protein_xyz.T.copy(),
        deck.ligand_xyz,
        deck.ligand_type,
        coef,
        deck.poses,
        np.ones(10, np.float32),
    )
    launch(make_kernel(kink), 1, *(device(np.ascontiguousarray(a)) for a in args), energies, grad)
    got_e, got_g = (a.get() if hasattr(a, "get") else a.copy_to_host() for a in (energies, grad))
    np.testing.assert_allclose(got_e, want_e, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-4, atol=1e-4 * np.abs(want_g).max())
    assert np.abs(want_g).max() > 0


def test_unknown_kink_rule_is_refused():
    with pytest.raises(ValueError, match="kink: 'up'"):
        make_kernel("up")
