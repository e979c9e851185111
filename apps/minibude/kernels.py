"""The fasten docking energy as pad kernels, in float32 as the reference computes it.

Two launches make one evaluation:

1. :func:`pair_coefficients` (one launch index per (ligand atom type, protein atom)) turns the forcefield into
   six coefficients of the pair energy. Every term of the reference's pair energy is piecewise linear in the
   surface distance ``distbb = |lpos - ppos| - radij`` and vanishes continuously at its cut-off, so with
   ``db = max(distbb, 0)`` the reference's ``0.5 * (steric + charge + desolvation)`` is exactly

   ``steric * min(distbb, 0) + chrg * min(db - elcdst, 0) + dslv * min(db - distdslv, 0)``

   with ``steric = -HARDNESS / radij``, ``chrg = -0.5 * CNSTNT * l.elsc * p.elsc * elcdst1`` (negated
   magnitude when either hbtype is 'E') and ``dslv = -0.5 * (p_hphb + l_hphb) / distdslv`` (zero when the
   reference's desolvation term is off). Branch-free, it vectorizes and differentiates without stored state.
2. :func:`fasten` (one launch index per block of ``ppwi`` consecutive poses) rotates and translates each
   ligand atom by a pose and sums the pair energies over the protein atoms in the innermost loop, which
   vectorizes over protein atoms (their coordinates and coefficients are stored contiguously for that). The
   same kernel runs on GPUs with ``ppwi`` 1: one pose per thread, everything in registers.

Gradients come from ``pad.autodiff`` over the launches: with respect to protein coordinates and poses through
:func:`fasten`, with respect to the forcefield through :func:`pair_coefficients` as well.
"""

from __future__ import annotations

import math

import numpy as np

import pad

__all__ = ["NCOEF", "fasten", "pair_coefficients", "rotation"]

NCOEF = 6  # per (ligand type, protein atom): radij, steric, chrg, elcdst, dslv, distdslv

# The reference's constants.
HARDNESS = 38.0
NPNPDIST = 5.5
NPPDIST = 1.0
CNSTNT = 45.0
FLOAT_MAX = 3.4028235e38  # FLT_MAX: the reference's "no desolvation" distance is -FLT_MAX
HBTYPE_F = 70  # ord("F")
HBTYPE_E = 69  # ord("E")


@pad.func
def rotation(rx, ry, rz):
    """The pose's rotation matrix, row by row, from its three angles (the reference's convention)."""
    sx = math.sin(rx)
    cx = math.cos(rx)
    sy = math.sin(ry)
    cy = math.cos(ry)
    sz = math.sin(rz)
    cz = math.cos(rz)
    return (
        cy * cz,
        sx * sy * cz - cx * sz,
        cx * sy * cz + sx * sz,
        cy * sz,
        sx * sy * sz + cx * cz,
        cx * sy * sz - sx * cz,
        -sy,
        sx * cy,
        cx * cy,
    )


@pad.kernel(fastmath=True)
def pair_coefficients(k, ff_hbtype, ff_params, protein_type, coef):
    """Coefficients for a ligand atom of type ``k // natpro`` and protein atom ``k % natpro``."""
    natpro = protein_type.shape[0]
    lt = k // natpro
    ip = k % natpro
    pt = protein_type[ip]
    l_hb = ff_hbtype[lt]
    p_hb = ff_hbtype[pt]
    l_hphb = ff_params[lt, 1]
    p_hphb = ff_params[pt, 1]
    radij = ff_params[pt, 0] + ff_params[lt, 0]
    both_f = p_hb == HBTYPE_F and l_hb == HBTYPE_F
    elcdst = 4.0 if both_f else 2.0
    elcdst1 = 0.25 if both_f else 0.5
    # Charge: l.elsc * p.elsc, always attractive when either atom is of hbtype 'E'.
    chrg = ff_params[lt, 2] * ff_params[pt, 2]
    if p_hb == HBTYPE_E or l_hb == HBTYPE_E:
        chrg = -abs(chrg)
    # Desolvation: nonpolar-polar repulsion; the polar partner's hydrophobicity flips sign.
    if p_hphb < 0.0:
        distdslv = NPNPDIST if l_hphb < 0.0 else NPPDIST
    else:
        distdslv = NPPDIST if l_hphb < 0.0 else -FLOAT_MAX
    p_term = -p_hphb if (p_hphb < 0.0 and l_hphb > 0.0) else p_hphb
    l_term = -l_hphb if (p_hphb > 0.0 and l_hphb < 0.0) else l_hphb
    dslv = 0.0
    if p_hphb != 0.0 and distdslv > 0.0:
        dslv = -0.5 * (p_term + l_term) / distdslv
    coef[lt, 0, ip] = radij
    coef[lt, 1, ip] = -HARDNESS / radij
    coef[lt, 2, ip] = -0.5 * CNSTNT * elcdst1 * chrg
    coef[lt, 3, ip] = elcdst
    coef[lt, 4, ip] = dslv
    coef[lt, 5, ip] = distdslv


@pad.kernel(fastmath=True)
def fasten(g, ppwi, protein_xyz, ligand_xyz, ligand_type, coef, poses, energies):
    """Energies of poses ``g*ppwi .. g*ppwi + ppwi - 1`` (fewer in the last block).

    ``protein_xyz`` is (3, natpro), ``coef`` (ntypes, NCOEF, natpro) from :func:`pair_coefficients`,
    ``poses`` (6, nposes).
    """
    start = g * ppwi
    stop = min(start + ppwi, poses.shape[1])
    zero = np.float32(0.0)
    for ix in range(start, stop):
        r00, r01, r02, r10, r11, r12, r20, r21, r22 = rotation(poses[0, ix], poses[1, ix], poses[2, ix])
        etot = zero
        for il in range(ligand_xyz.shape[0]):
            lt = ligand_type[il]
            ax = ligand_xyz[il, 0]
            ay = ligand_xyz[il, 1]
            az = ligand_xyz[il, 2]
            lpx = poses[3, ix] + ax * r00 + ay * r01 + az * r02
            lpy = poses[4, ix] + ax * r10 + ay * r11 + az * r12
            lpz = poses[5, ix] + ax * r20 + ay * r21 + az * r22
            for ip in range(protein_xyz.shape[1]):
                x = lpx - protein_xyz[0, ip]
                y = lpy - protein_xyz[1, ip]
                z = lpz - protein_xyz[2, ip]
                distbb = math.sqrt(x * x + y * y + z * z) - coef[lt, 0, ip]
                db = max(distbb, zero)
                etot += (
                    coef[lt, 1, ip] * min(distbb, zero)
                    + coef[lt, 2, ip] * min(db - coef[lt, 3, ip], zero)
                    + coef[lt, 4, ip] * min(db - coef[lt, 5, ip], zero)
                )
        energies[ix] = etot
