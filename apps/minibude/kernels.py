"""The fasten docking energy as pad kernels, in float32 as the reference computes it.

Two launches make one evaluation:

1. :func:`pair_table` (one launch index per (ligand type, protein type) pair) turns the forcefield into the
   coefficients of the pair energy. Every term of the reference's pair energy is piecewise linear in
   ``distbb = |lpos - ppos| - radij``:

   - inside the contact zone (``distbb < 0``): ``zone_a + zone_b * distbb`` (steric
     ``-2*HARDNESS*distbb/radij`` plus the full charge and desolvation terms);
   - outside: ``chrg + chrg_d * distbb`` while ``distbb < elcdst``, plus ``dslv + dslv_f * distbb`` while
     ``distbb < distdslv``.

   Hoisting this per type pair out of the atom loops is what lets the pose loop below run at the reference's
   speed; the energies agree with the reference's formula to float32 rounding.
2. :func:`fasten` (one launch index per block of ``ppwi`` consecutive poses, as the reference blocks them)
   transforms each ligand atom by the block's poses and accumulates the pair energies over all protein atoms
   in an inner loop over the poses, which vectorizes. :func:`fasten_single` scores one pose per launch
   index with everything in registers, the shape GPUs prefer (``ppwi`` 1).

Gradients come from ``pad.autodiff`` over both launches: with respect to protein coordinates and poses through
:func:`fasten`, with respect to the forcefield through :func:`pair_table` as well.
"""

from __future__ import annotations

import math

import numpy as np

import pad

__all__ = ["NCOEF", "PPWI_MAX", "fasten", "fasten_single", "pair_table", "rotation"]

PPWI_MAX = 128  # largest pose block (the reference allows 1..128)
NCOEF = 9  # coefficients per type pair: radij, elcdst, distdslv, zone_a, zone_b, chrg, chrg_d, dslv, dslv_f

HBTYPE_F = 70  # ord("F")
HBTYPE_E = 69  # ord("E")
# The reference's constants. Kernels compute in float32 because their inputs are float32; a kernel writes
# np.float32(0.0) where a float32 zero starts an accumulation, so no literal widens its arithmetic.
HARDNESS = 38.0
NPNPDIST = 5.5
NPPDIST = 1.0
CNSTNT = 45.0
FLOAT_MAX = 3.4028235e38  # FLT_MAX


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
def pair_table(k, ff_hbtype, ff_params, table):
    """Coefficients of the energy of a ligand atom of type ``k // ntypes`` and a protein atom of type
    ``k % ntypes`` as a function of their surface distance (see the module docstring)."""
    ntypes = ff_params.shape[0]
    lt = k // ntypes
    pt = k % ntypes
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
    chrg = chrg * CNSTNT
    # Desolvation: nonpolar-polar repulsion; the polar partner's hydrophobicity flips sign.
    if p_hphb < 0.0:
        distdslv = NPNPDIST if l_hphb < 0.0 else NPPDIST
    else:
        distdslv = NPPDIST if l_hphb < 0.0 else -FLOAT_MAX
    p_term = -p_hphb if (p_hphb < 0.0 and l_hphb > 0.0) else p_hphb
    l_term = -l_hphb if (p_hphb > 0.0 and l_hphb < 0.0) else l_hphb
    dslv = np.float32(0.0)
    if p_hphb != 0.0 and distdslv > 0.0:
        dslv = p_term + l_term
    table[lt, pt, 0] = radij
    table[lt, pt, 1] = elcdst
    table[lt, pt, 2] = distdslv
    table[lt, pt, 3] = chrg + dslv
    table[lt, pt, 4] = -2.0 * HARDNESS / radij
    table[lt, pt, 5] = chrg
    table[lt, pt, 6] = -chrg * elcdst1
    table[lt, pt, 7] = dslv
    table[lt, pt, 8] = -dslv / distdslv


@pad.kernel(fastmath=True)
def fasten(g, ppwi, protein_xyz, protein_type, ligand_xyz, ligand_type, table, poses, energies):
    """Energies of poses ``g*ppwi .. g*ppwi + ppwi - 1`` (fewer in the last block)."""
    nposes = poses.shape[1]
    start = g * ppwi
    nb = min(ppwi, nposes - start)
    zero = np.float32(0.0)
    tr = pad.local_array((12, PPWI_MAX), np.float32)
    etot = pad.local_array(PPWI_MAX, np.float32)
    lpx = pad.local_array(PPWI_MAX, np.float32)
    lpy = pad.local_array(PPWI_MAX, np.float32)
    lpz = pad.local_array(PPWI_MAX, np.float32)
    for j in range(nb):
        ix = start + j
        r00, r01, r02, r10, r11, r12, r20, r21, r22 = rotation(poses[0, ix], poses[1, ix], poses[2, ix])
        tr[0, j] = r00
        tr[1, j] = r01
        tr[2, j] = r02
        tr[3, j] = poses[3, ix]
        tr[4, j] = r10
        tr[5, j] = r11
        tr[6, j] = r12
        tr[7, j] = poses[4, ix]
        tr[8, j] = r20
        tr[9, j] = r21
        tr[10, j] = r22
        tr[11, j] = poses[5, ix]
        etot[j] = zero
    for il in range(ligand_xyz.shape[0]):
        lt = ligand_type[il]
        ax = ligand_xyz[il, 0]
        ay = ligand_xyz[il, 1]
        az = ligand_xyz[il, 2]
        for j in range(nb):
            lpx[j] = tr[3, j] + ax * tr[0, j] + ay * tr[1, j] + az * tr[2, j]
            lpy[j] = tr[7, j] + ax * tr[4, j] + ay * tr[5, j] + az * tr[6, j]
            lpz[j] = tr[11, j] + ax * tr[8, j] + ay * tr[9, j] + az * tr[10, j]
        for ip in range(protein_xyz.shape[0]):
            pt = protein_type[ip]
            px = protein_xyz[ip, 0]
            py = protein_xyz[ip, 1]
            pz = protein_xyz[ip, 2]
            radij = table[lt, pt, 0]
            elcdst = table[lt, pt, 1]
            distdslv = table[lt, pt, 2]
            zone_a = table[lt, pt, 3]
            zone_b = table[lt, pt, 4]
            chrg = table[lt, pt, 5]
            chrg_d = table[lt, pt, 6]
            dslv = table[lt, pt, 7]
            dslv_f = table[lt, pt, 8]
            for j in range(nb):
                x = lpx[j] - px
                y = lpy[j] - py
                z = lpz[j] - pz
                distbb = math.sqrt(x * x + y * y + z * z) - radij
                e_chrg = chrg + chrg_d * distbb if distbb < elcdst else zero
                e_dslv = dslv + dslv_f * distbb if distbb < distdslv else zero
                etot[j] += zone_a + zone_b * distbb if distbb < zero else e_chrg + e_dslv
    for j in range(nb):
        energies[start + j] = etot[j] * np.float32(0.5)


@pad.kernel(fastmath=True)
def fasten_single(i, protein_xyz, protein_type, ligand_xyz, ligand_type, table, poses, energies):
    """Energy of pose ``i`` alone: one pose per launch index, for GPUs (no local arrays, all in registers)."""
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = rotation(poses[0, i], poses[1, i], poses[2, i])
    etot = np.float32(0.0)
    for il in range(ligand_xyz.shape[0]):
        lt = ligand_type[il]
        ax = ligand_xyz[il, 0]
        ay = ligand_xyz[il, 1]
        az = ligand_xyz[il, 2]
        lpx = poses[3, i] + ax * r00 + ay * r01 + az * r02
        lpy = poses[4, i] + ax * r10 + ay * r11 + az * r12
        lpz = poses[5, i] + ax * r20 + ay * r21 + az * r22
        for ip in range(protein_xyz.shape[0]):
            pt = protein_type[ip]
            x = lpx - protein_xyz[ip, 0]
            y = lpy - protein_xyz[ip, 1]
            z = lpz - protein_xyz[ip, 2]
            distbb = math.sqrt(x * x + y * y + z * z) - table[lt, pt, 0]
            if distbb < 0.0:
                etot += table[lt, pt, 3] + table[lt, pt, 4] * distbb
            else:
                if distbb < table[lt, pt, 1]:
                    etot += table[lt, pt, 5] + table[lt, pt, 6] * distbb
                if distbb < table[lt, pt, 2]:
                    etot += table[lt, pt, 7] + table[lt, pt, 8] * distbb
    energies[i] = etot * np.float32(0.5)
