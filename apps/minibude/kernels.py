"""The fasten docking energy as pad kernels, in float32 as the reference computes it.

Two launches make one evaluation:

1. :func:`pair_coefficients` (one launch index per (ligand atom type, protein atom)) turns the forcefield into
   six coefficients of the pair energy. Every term of the reference's pair energy is piecewise linear in the
   surface distance ``distbb = d - radij`` (``d = |lpos - ppos|``) and vanishes continuously at its cut-off.
   With ``db = max(distbb, 0)`` the reference's ``0.5 * (steric + charge + desolvation)`` is

   ``steric * min(distbb, 0) + chrg * min(db - elcdst, 0) + dslv * min(db - distdslv, 0)``

   with ``steric = -HARDNESS / radij``, ``chrg = -0.5 * CNSTNT * l.elsc * p.elsc * elcdst1`` (negated
   magnitude when either hbtype is 'E') and ``dslv = -0.5 * (p_hphb + l_hphb) / distdslv`` (zero when the
   reference's desolvation term is off). Since ``elcdst > 0`` and ``distdslv > 0`` wherever ``dslv != 0``,
   ``min(db - c, 0) = min(distbb - c, 0) - min(distbb, 0)``, so the ``max`` goes and the cut-offs move into
   the coefficients: the pair energy is

   ``a * min(d - radij, 0) + chrg * min(d - (radij + elcdst), 0) + dslv * min(d - (radij + distdslv), 0)``

   with ``a = steric - chrg - dslv``. Each ``min(x, 0)`` is a zone test of the reference (``zone1 = distbb <
   0``, ``distbb < elcdst``, ``distbb < distdslv``), so it is written as the reference writes those, a select:
   ``x if x < 0 else 0``. It compiles to the instruction ``min`` does (fast math), and its derivative is the
   compare already made; a ``min`` would also pay the tie rule (each argument gets half at ``x == 0``,
   two compares more per term), which is for real minima, not for zone tests.
2. :func:`fasten` (one launch index per block of ``ppwi`` consecutive poses, one pose at a time; used when
   ``ppwi`` < 4) and :func:`fasten_x4` (four poses at a time; the default on CPUs and GPUs) rotate and translate
   each ligand atom by a pose and sum the pair energies over the protein atoms in the innermost loop, which
   vectorizes over protein atoms (their coordinates and coefficients are stored contiguously for that).
   Four poses per pass load each protein atom once for four pair energies, keep four independent sums (the
   one-pose loop waits on its single sum), and in the adjoint accumulate each protein atom's gradient
   over the four poses before it is stored.

Gradients come from ``pad.autodiff`` over the launches: with respect to protein coordinates and poses through
the fasten kernels, with respect to the forcefield through :func:`pair_coefficients` as well. The driver fuses
the last launch (``autodiff(..., fuse=True)``): one launch computes each pair's distance and its reciprocal,
three compares and the slope times the direction, and, for the poses' gradient, the energies too (for the
others the energies are a ``pad.DupNoNeed``: ``score`` makes them; see ``Docking._differentiate``).
"""

from __future__ import annotations

import math

import numpy as np

import pad

__all__ = ["NCOEF", "POSES_PER_PASS", "fasten", "fasten_x4", "pair_coefficients", "rotation"]

NCOEF = 6  # per (ligand type, protein atom): radij, a, chrg, radij + elcdst, dslv, radij + distdslv
POSES_PER_PASS = 4  # fasten_x4: poses per pass over the protein

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
    charge = -0.5 * CNSTNT * elcdst1 * chrg
    coef[lt, 0, ip] = radij
    coef[lt, 1, ip] = -HARDNESS / radij - charge - dslv
    coef[lt, 2, ip] = charge
    coef[lt, 3, ip] = radij + elcdst
    coef[lt, 4, ip] = dslv
    coef[lt, 5, ip] = radij + distdslv  # -FLT_MAX stays -FLT_MAX: min(d + FLT_MAX, 0) = 0, and dslv = 0


@pad.func
def protein_atom(protein_xyz, coef, lt, ip):
    """Protein atom ``ip``'s coordinates and its six coefficients with a ligand atom of type ``lt``."""
    return (
        protein_xyz[0, ip],
        protein_xyz[1, ip],
        protein_xyz[2, ip],
        coef[lt, 0, ip],
        coef[lt, 1, ip],
        coef[lt, 2, ip],
        coef[lt, 3, ip],
        coef[lt, 4, ip],
        coef[lt, 5, ip],
    )


@pad.func
def pair_energy(lx, ly, lz, px, py, pz, k0, k1, k2, k3, k4, k5):
    """The energy of a ligand atom at (lx, ly, lz) and a protein atom at (px, py, pz); ``k*``: coefficients.

    Callers load the protein atom and its coefficients into locals once and pass them to every pose, so
    that the adjoint sums the protein atom's gradient over those poses before storing it.
    """
    x = lx - px
    y = ly - py
    z = lz - pz
    d = math.sqrt(x * x + y * y + z * z)
    zero = np.float32(0.0)
    steric = d - k0
    charge = d - k3
    desolvation = d - k5
    return (
        k1 * (steric if steric < zero else zero)
        + k2 * (charge if charge < zero else zero)
        + k4 * (desolvation if desolvation < zero else zero)
    )


@pad.func
def place(poses, ix, r00, r01, r02, r10, r11, r12, r20, r21, r22, ax, ay, az):
    """The ligand atom at (ax, ay, az) rotated by the rows ``r..`` and translated by pose ``ix``."""
    return (
        poses[3, ix] + ax * r00 + ay * r01 + az * r02,
        poses[4, ix] + ax * r10 + ay * r11 + az * r12,
        poses[5, ix] + ax * r20 + ay * r21 + az * r22,
    )


@pad.kernel(fastmath=True)
def fasten(g, ppwi, protein_xyz, ligand_xyz, ligand_type, coef, poses, energies):
    """Energies of poses ``g*ppwi .. g*ppwi + ppwi - 1`` (fewer in the last block), one pose at a time.

    ``protein_xyz`` is (3, natpro), ``coef`` (ntypes, NCOEF, natpro) from :func:`pair_coefficients`,
    ``poses`` (6, nposes).
    """
    start = g * ppwi
    stop = min(start + ppwi, poses.shape[1])
    for ix in range(start, stop):
        r00, r01, r02, r10, r11, r12, r20, r21, r22 = rotation(poses[0, ix], poses[1, ix], poses[2, ix])
        etot = np.float32(0.0)
        for il in range(ligand_xyz.shape[0]):
            lt = ligand_type[il]
            ax = ligand_xyz[il, 0]
            ay = ligand_xyz[il, 1]
            az = ligand_xyz[il, 2]
            lx, ly, lz = place(poses, ix, r00, r01, r02, r10, r11, r12, r20, r21, r22, ax, ay, az)
            for ip in range(protein_xyz.shape[1]):
                px, py, pz, k0, k1, k2, k3, k4, k5 = protein_atom(protein_xyz, coef, lt, ip)
                etot += pair_energy(lx, ly, lz, px, py, pz, k0, k1, k2, k3, k4, k5)
        energies[ix] = etot


@pad.kernel(fastmath=True)
def fasten_x4(g, ppwi, protein_xyz, ligand_xyz, ligand_type, coef, poses, energies):
    """:func:`fasten` taking the block's poses four at a time (POSES_PER_PASS): the default on CPUs and GPUs.

    A block whose length is not a multiple of four repeats its last pose in the spare slots and does not
    store their energies (so nothing flows back through them); ``ppwi`` should be a multiple of four.
    """
    start = g * ppwi
    stop = min(start + ppwi, poses.shape[1])
    last = stop - 1
    zero = np.float32(0.0)
    for i0 in range(start, stop, 4):
        i1 = min(i0 + 1, last)
        i2 = min(i0 + 2, last)
        i3 = min(i0 + 3, last)
        a00, a01, a02, a10, a11, a12, a20, a21, a22 = rotation(poses[0, i0], poses[1, i0], poses[2, i0])
        b00, b01, b02, b10, b11, b12, b20, b21, b22 = rotation(poses[0, i1], poses[1, i1], poses[2, i1])
        c00, c01, c02, c10, c11, c12, c20, c21, c22 = rotation(poses[0, i2], poses[1, i2], poses[2, i2])
        d00, d01, d02, d10, d11, d12, d20, d21, d22 = rotation(poses[0, i3], poses[1, i3], poses[2, i3])
        e0 = zero
        e1 = zero
        e2 = zero
        e3 = zero
        for il in range(ligand_xyz.shape[0]):
            lt = ligand_type[il]
            ax = ligand_xyz[il, 0]
            ay = ligand_xyz[il, 1]
            az = ligand_xyz[il, 2]
            x0, y0, z0 = place(poses, i0, a00, a01, a02, a10, a11, a12, a20, a21, a22, ax, ay, az)
            x1, y1, z1 = place(poses, i1, b00, b01, b02, b10, b11, b12, b20, b21, b22, ax, ay, az)
            x2, y2, z2 = place(poses, i2, c00, c01, c02, c10, c11, c12, c20, c21, c22, ax, ay, az)
            x3, y3, z3 = place(poses, i3, d00, d01, d02, d10, d11, d12, d20, d21, d22, ax, ay, az)
            for ip in range(protein_xyz.shape[1]):
                px, py, pz, k0, k1, k2, k3, k4, k5 = protein_atom(protein_xyz, coef, lt, ip)
                e0 += pair_energy(x0, y0, z0, px, py, pz, k0, k1, k2, k3, k4, k5)
                e1 += pair_energy(x1, y1, z1, px, py, pz, k0, k1, k2, k3, k4, k5)
                e2 += pair_energy(x2, y2, z2, px, py, pz, k0, k1, k2, k3, k4, k5)
                e3 += pair_energy(x3, y3, z3, px, py, pz, k0, k1, k2, k3, k4, k5)
        energies[i0] = e0
        if i0 + 1 <= last:
            energies[i1] = e1
        if i0 + 2 <= last:
            energies[i2] = e2
        if i0 + 3 <= last:
            energies[i3] = e3
