"""Shared helpers for the miniBUDE tests: deck locations, a small deck, the reference formula in NumPy."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from apps.minibude.deck import HBTYPE_E, HBTYPE_F, SHIPPED, Deck, read_deck, synthetic_deck

OUTSIDE = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "minibude")
)


def real_deck(name: str = "bm1") -> Deck:
    """A deck shipped with pad (bm1), else one from ../shared/data/minibude (bm2), or skip the test."""
    for path in (os.path.join(SHIPPED, name), os.path.join(OUTSIDE, name)):
        if os.path.isfile(os.path.join(path, "poses.in")):
            return read_deck(path)
    pytest.skip(
        f"miniBUDE deck {name} is neither shipped nor at {OUTSIDE} (the shared data directory is absent)"
    )


def small_deck(nposes: int = 37, smooth: bool = False) -> Deck:
    """A small synthetic deck (pose count not a multiple of common ppwi values).

    ``smooth`` replaces zero hydrophobicities (where the energy jumps as hphb leaves zero) and zero charges
    (a kink of -|chrg| for 'E' atoms) by nonzero values, for finite differences in the forcefield.
    """
    deck = synthetic_deck(nposes=nposes, natpro=60, natlig=7, ntypes=12, seed=3)
    return smoothed(deck) if smooth else deck


def smoothed(deck: Deck) -> Deck:
    """``deck`` with zero hydrophobicities and charges made nonzero (see :func:`small_deck`)."""
    params = deck.ff_params.copy()
    for column, value in ((1, 0.3), (2, 0.2)):
        params[params[:, column] == 0.0, column] = value
    return dataclasses.replace(deck, ff_params=params)


def reference_energies(deck: Deck) -> np.ndarray:
    """The reference's fasten formula, term by term as the reference writes it, in float64 NumPy."""
    rx, ry, rz, tx, ty, tz = deck.poses.astype(np.float64)
    sx, cx, sy, cy, sz, cz = np.sin(rx), np.cos(rx), np.sin(ry), np.cos(ry), np.sin(rz), np.cos(rz)
    rows = [
        [cy * cz, sx * sy * cz - cx * sz, cx * sy * cz + sx * sz, tx],
        [cy * sz, sx * sy * sz + cx * cz, cx * sy * sz - sx * cz, ty],
        [-sy, sx * cy, cx * cy, tz],
    ]
    lig = deck.ligand_xyz.astype(np.float64)
    lpos = np.stack(
        [
            r[3][:, None] + r[0][:, None] * lig[:, 0] + r[1][:, None] * lig[:, 1] + r[2][:, None] * lig[:, 2]
            for r in rows
        ],
        axis=-1,
    )  # (nposes, natlig, 3)
    ff = deck.ff_params.astype(np.float64)
    lp = ff[deck.ligand_type][None, :, None, :]  # (1, natlig, 1, 3)
    pp = ff[deck.protein_type][None, None, :, :]  # (1, 1, natpro, 3)
    lhb = deck.ff_hbtype[deck.ligand_type][None, :, None]
    phb = deck.ff_hbtype[deck.protein_type][None, None, :]
    d = np.linalg.norm(lpos[:, :, None, :] - deck.protein_xyz.astype(np.float64)[None, None], axis=-1)
    radij = pp[..., 0] + lp[..., 0]
    distbb = d - radij
    zone1 = distbb < 0
    both_f = (phb == HBTYPE_F) & (lhb == HBTYPE_F)
    elcdst, elcdst1 = np.where(both_f, 4.0, 2.0), np.where(both_f, 0.25, 0.5)
    type_e = (phb == HBTYPE_E) | (lhb == HBTYPE_E)
    ph, lh = pp[..., 1], lp[..., 1]
    p_hphb = np.where((ph < 0) & (lh > 0), -ph, ph)
    l_hphb = np.where((ph > 0) & (lh < 0), -lh, lh)
    distdslv = np.where(ph < 0, np.where(lh < 0, 5.5, 1.0), np.where(lh < 0, 1.0, -np.finfo(np.float32).max))
    steric = (1 - d / radij) * np.where(zone1, 2 * 38.0, 0.0)
    chrg = lp[..., 2] * pp[..., 2] * np.where(zone1, 1.0, 1 - distbb * elcdst1) * (distbb < elcdst)
    chrg = np.where(type_e, -np.abs(chrg), chrg)
    dslv = (p_hphb + l_hphb) * ((distbb < distdslv) & (ph != 0)) * np.where(zone1, 1.0, 1 - distbb / distdslv)
    return 0.5 * (steric + 45.0 * chrg + dslv).sum(axis=(1, 2))
