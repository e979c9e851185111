"""LULESH's loops as pad kernels: one ``@pad.kernel`` per loop of the time step, helpers as ``@pad.func``.

Each kernel keeps the original's arithmetic in the original's order (so results match the C++ code to
rounding), but loops the original runs one after another over the same elements are fused where nothing
between them needs the others' results (the stress and hourglass forces; acceleration, boundary conditions,
velocity and position; the EOS and the sound speed). Node forces are gathered over each node's corners, as
the OpenMP original does with more than one thread: every node sums its corners in a fixed order, so the
results do not depend on the thread count, and no two iterations write one element.

Scalars that a gradient may want (the time step, the model parameters) are read from small arrays,
``clock`` and ``params``, so they can be differentiated like any state array. Faults (a negative volume,
q above ``QSTOP``) are counted in ``fault[0]`` and flagged per element in ``flag``, one bit per check, for the
first cycle that has any (``count_fault``); the driver stops the run after that cycle.
"""

from __future__ import annotations

import math

import numpy as np

import pad

# clock: the time-stepping scalars
TIME, DT, DTCOURANT, DTHYDRO = 0, 1, 2, 3
# params: the model's parameters a sensitivity is taken with respect to
EINIT, HGCOEF, QQC, QLC_MONOQ, QQC_MONOQ, SS4O3, MONOQ_LIMITER_MULT = 0, 1, 2, 3, 4, 5, 6
# fault checks, one bit each in ``flag``, in the order the original makes them in a cycle
DETERM, VOLUME, VNEW, QSTOP_BIT, EOS_VOLUME = 1, 2, 4, 8, 16

E_CUT = 1.0e-7
P_CUT = 1.0e-7
Q_CUT = 1.0e-7
U_CUT = 1.0e-7
V_CUT = 1.0e-10
QSTOP = 1.0e12
MONOQ_MAX_SLOPE = 1.0
EOSVMAX = 1.0e9
EOSVMIN = 1.0e-9
PMIN = 0.0
EMIN = -1.0e15
DVOVMAX = 0.1
REFDENS = 1.0
PTINY = 1.0e-36
SSC_LOW = 0.1111111e-36
SSC_FLOOR = 0.3333333e-18
C1S = 2.0 / 3.0
GAMMA = np.array(
    [
        [1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0],
        [1.0, -1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0],
        [1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0],
        [-1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0],
    ]
)
"""The four hourglass base vectors: a constant table, its ones written into the kernels' code."""
FACES = np.array([[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 5, 4], [1, 2, 6, 5], [2, 3, 7, 6], [3, 0, 4, 7]])
"""The hexahedron's six faces by their corners, in the order the C++ original measures them."""
SIXTH = 1.0 / 6.0
TWELFTH = 1.0 / 12.0


# ------------------------------------------------------------------------------------------ geometry
@pad.func
def triple(x1, y1, z1, x2, y2, z2, x3, y3, z3):
    """The original's TRIPLE_PRODUCT macro, argument for argument."""
    return x1 * (y2 * z3 - z2 * y3) + x2 * (z1 * y3 - y1 * z3) + x3 * (y1 * z2 - z1 * y2)


@pad.func
def elem_volume(x, y, z):
    """The volume of a hexahedron from its 8 corners (CalcElemVolume)."""
    dx61 = x[6] - x[1]
    dy61 = y[6] - y[1]
    dz61 = z[6] - z[1]
    dx70 = x[7] - x[0]
    dy70 = y[7] - y[0]
    dz70 = z[7] - z[0]
    dx63 = x[6] - x[3]
    dy63 = y[6] - y[3]
    dz63 = z[6] - z[3]
    dx20 = x[2] - x[0]
    dy20 = y[2] - y[0]
    dz20 = z[2] - z[0]
    dx50 = x[5] - x[0]
    dy50 = y[5] - y[0]
    dz50 = z[5] - z[0]
    dx64 = x[6] - x[4]
    dy64 = y[6] - y[4]
    dz64 = z[6] - z[4]
    dx31 = x[3] - x[1]
    dy31 = y[3] - y[1]
    dz31 = z[3] - z[1]
    dx72 = x[7] - x[2]
    dy72 = y[7] - y[2]
    dz72 = z[7] - z[2]
    dx43 = x[4] - x[3]
    dy43 = y[4] - y[3]
    dz43 = z[4] - z[3]
    dx57 = x[5] - x[7]
    dy57 = y[5] - y[7]
    dz57 = z[5] - z[7]
    dx14 = x[1] - x[4]
    dy14 = y[1] - y[4]
    dz14 = z[1] - z[4]
    dx25 = x[2] - x[5]
    dy25 = y[2] - y[5]
    dz25 = z[2] - z[5]
    volume = (
        triple(dx31 + dx72, dx63, dx20, dy31 + dy72, dy63, dy20, dz31 + dz72, dz63, dz20)
        + triple(dx43 + dx57, dx64, dx70, dy43 + dy57, dy64, dy70, dz43 + dz57, dz64, dz70)
        + triple(dx14 + dx25, dx61, dx50, dy14 + dy25, dy61, dy50, dz14 + dz25, dz61, dz50)
    )
    return volume * TWELFTH


@pad.func
def shape_derivatives(x, y, z, bx, by, bz):
    """Shape function derivatives into ``bx, by, bz`` (8 each); returns the Jacobian determinant."""
    fjxxi = 0.125 * ((x[6] - x[0]) + (x[5] - x[3]) - (x[7] - x[1]) - (x[4] - x[2]))
    fjxet = 0.125 * ((x[6] - x[0]) - (x[5] - x[3]) + (x[7] - x[1]) - (x[4] - x[2]))
    fjxze = 0.125 * ((x[6] - x[0]) + (x[5] - x[3]) + (x[7] - x[1]) + (x[4] - x[2]))
    fjyxi = 0.125 * ((y[6] - y[0]) + (y[5] - y[3]) - (y[7] - y[1]) - (y[4] - y[2]))
    fjyet = 0.125 * ((y[6] - y[0]) - (y[5] - y[3]) + (y[7] - y[1]) - (y[4] - y[2]))
    fjyze = 0.125 * ((y[6] - y[0]) + (y[5] - y[3]) + (y[7] - y[1]) + (y[4] - y[2]))
    fjzxi = 0.125 * ((z[6] - z[0]) + (z[5] - z[3]) - (z[7] - z[1]) - (z[4] - z[2]))
    fjzet = 0.125 * ((z[6] - z[0]) - (z[5] - z[3]) + (z[7] - z[1]) - (z[4] - z[2]))
    fjzze = 0.125 * ((z[6] - z[0]) + (z[5] - z[3]) + (z[7] - z[1]) + (z[4] - z[2]))
    cjxxi = (fjyet * fjzze) - (fjzet * fjyze)
    cjxet = -(fjyxi * fjzze) + (fjzxi * fjyze)
    cjxze = (fjyxi * fjzet) - (fjzxi * fjyet)
    cjyxi = -(fjxet * fjzze) + (fjzet * fjxze)
    cjyet = (fjxxi * fjzze) - (fjzxi * fjxze)
    cjyze = -(fjxxi * fjzet) + (fjzxi * fjxet)
    cjzxi = (fjxet * fjyze) - (fjyet * fjxze)
    cjzet = -(fjxxi * fjyze) + (fjyxi * fjxze)
    cjzze = (fjxxi * fjyet) - (fjyxi * fjxet)
    bx[0] = -cjxxi - cjxet - cjxze
    bx[1] = cjxxi - cjxet - cjxze
    bx[2] = cjxxi + cjxet - cjxze
    bx[3] = -cjxxi + cjxet - cjxze
    bx[4] = -bx[2]
    bx[5] = -bx[3]
    bx[6] = -bx[0]
    bx[7] = -bx[1]
    by[0] = -cjyxi - cjyet - cjyze
    by[1] = cjyxi - cjyet - cjyze
    by[2] = cjyxi + cjyet - cjyze
    by[3] = -cjyxi + cjyet - cjyze
    by[4] = -by[2]
    by[5] = -by[3]
    by[6] = -by[0]
    by[7] = -by[1]
    bz[0] = -cjzxi - cjzet - cjzze
    bz[1] = cjzxi - cjzet - cjzze
    bz[2] = cjzxi + cjzet - cjzze
    bz[3] = -cjzxi + cjzet - cjzze
    bz[4] = -bz[2]
    bz[5] = -bz[3]
    bz[6] = -bz[0]
    bz[7] = -bz[1]
    return 8.0 * (fjxet * cjxet + fjyet * cjyet + fjzet * cjzet)


@pad.func
def face_normal(x, y, z, a, b, c, d, nx, ny, nz):
    """Add a quarter of face (a, b, c, d)'s area vector to its four corners' normals (SumElemFaceNormal)."""
    bisect_x0 = 0.5 * (x[d] + x[c] - x[b] - x[a])
    bisect_y0 = 0.5 * (y[d] + y[c] - y[b] - y[a])
    bisect_z0 = 0.5 * (z[d] + z[c] - z[b] - z[a])
    bisect_x1 = 0.5 * (x[c] + x[b] - x[d] - x[a])
    bisect_y1 = 0.5 * (y[c] + y[b] - y[d] - y[a])
    bisect_z1 = 0.5 * (z[c] + z[b] - z[d] - z[a])
    area_x = 0.25 * (bisect_y0 * bisect_z1 - bisect_z0 * bisect_y1)
    area_y = 0.25 * (bisect_z0 * bisect_x1 - bisect_x0 * bisect_z1)
    area_z = 0.25 * (bisect_x0 * bisect_y1 - bisect_y0 * bisect_x1)
    nx[a] += area_x
    nx[b] += area_x
    nx[c] += area_x
    nx[d] += area_x
    ny[a] += area_y
    ny[b] += area_y
    ny[c] += area_y
    ny[d] += area_y
    nz[a] += area_z
    nz[b] += area_z
    nz[c] += area_z
    nz[d] += area_z


@pad.func
def node_normals(x, y, z, nx, ny, nz):
    """The area-weighted normals of the element's 8 corners (CalcElemNodeNormals)."""
    for k in range(8):
        nx[k] = 0.0
        ny[k] = 0.0
        nz[k] = 0.0
    face_normal(x, y, z, 0, 1, 2, 3, nx, ny, nz)
    face_normal(x, y, z, 0, 4, 5, 1, nx, ny, nz)
    face_normal(x, y, z, 1, 5, 6, 2, nx, ny, nz)
    face_normal(x, y, z, 2, 6, 7, 3, nx, ny, nz)
    face_normal(x, y, z, 3, 7, 4, 0, nx, ny, nz)
    face_normal(x, y, z, 4, 7, 6, 5, nx, ny, nz)


@pad.func
def volume_derivative(x, y, z, a0, a1, a2, a3, a4, a5, dvdx, dvdy, dvdz, k):
    """d(volume)/d(corner k) from the six corners a0..a5 around it (VoluDer)."""
    x0 = x[a0]
    x1 = x[a1]
    x2 = x[a2]
    x3 = x[a3]
    x4 = x[a4]
    x5 = x[a5]
    y0 = y[a0]
    y1 = y[a1]
    y2 = y[a2]
    y3 = y[a3]
    y4 = y[a4]
    y5 = y[a5]
    z0 = z[a0]
    z1 = z[a1]
    z2 = z[a2]
    z3 = z[a3]
    z4 = z[a4]
    z5 = z[a5]
    dx = (
        (y1 + y2) * (z0 + z1)
        - (y0 + y1) * (z1 + z2)
        + (y0 + y4) * (z3 + z4)
        - (y3 + y4) * (z0 + z4)
        - (y2 + y5) * (z3 + z5)
        + (y3 + y5) * (z2 + z5)
    )
    dy = (
        -(x1 + x2) * (z0 + z1)
        + (x0 + x1) * (z1 + z2)
        - (x0 + x4) * (z3 + z4)
        + (x3 + x4) * (z0 + z4)
        + (x2 + x5) * (z3 + z5)
        - (x3 + x5) * (z2 + z5)
    )
    dz = (
        -(y1 + y2) * (x0 + x1)
        + (y0 + y1) * (x1 + x2)
        - (y0 + y4) * (x3 + x4)
        + (y3 + y4) * (x0 + x4)
        + (y2 + y5) * (x3 + x5)
        - (y3 + y5) * (x2 + x5)
    )
    dvdx[k] = dx * TWELFTH
    dvdy[k] = dy * TWELFTH
    dvdz[k] = dz * TWELFTH


@pad.func
def volume_derivatives(x, y, z, dvdx, dvdy, dvdz):
    """d(volume)/d(each corner) (CalcElemVolumeDerivative)."""
    volume_derivative(x, y, z, 1, 2, 3, 4, 5, 7, dvdx, dvdy, dvdz, 0)
    volume_derivative(x, y, z, 0, 1, 2, 7, 4, 6, dvdx, dvdy, dvdz, 3)
    volume_derivative(x, y, z, 3, 0, 1, 6, 7, 5, dvdx, dvdy, dvdz, 2)
    volume_derivative(x, y, z, 2, 3, 0, 5, 6, 4, dvdx, dvdy, dvdz, 1)
    volume_derivative(x, y, z, 7, 6, 5, 0, 3, 1, dvdx, dvdy, dvdz, 4)
    volume_derivative(x, y, z, 4, 7, 6, 1, 0, 2, dvdx, dvdy, dvdz, 5)
    volume_derivative(x, y, z, 5, 4, 7, 2, 1, 3, dvdx, dvdy, dvdz, 6)
    volume_derivative(x, y, z, 6, 5, 4, 3, 2, 0, dvdx, dvdy, dvdz, 7)


@pad.func
def area_face(x, y, z, a, b, c, d):
    """The squared-area measure of face (a, b, c, d) (AreaFace)."""
    fx = (x[c] - x[a]) - (x[d] - x[b])
    fy = (y[c] - y[a]) - (y[d] - y[b])
    fz = (z[c] - z[a]) - (z[d] - z[b])
    gx = (x[c] - x[a]) + (x[d] - x[b])
    gy = (y[c] - y[a]) + (y[d] - y[b])
    gz = (z[c] - z[a]) + (z[d] - z[b])
    return (fx * fx + fy * fy + fz * fz) * (gx * gx + gy * gy + gz * gz) - (fx * gx + fy * gy + fz * gz) * (
        fx * gx + fy * gy + fz * gz
    )


@pad.func
def characteristic_length_unrolled(x, y, z, volume):
    """:func:`characteristic_length` with the faces written out, as the C++ original does: GPUs' adjoints,
    where one face replayed by its run-time number would put the corners in local memory, use it."""
    length = 0.0
    length = max(area_face(x, y, z, 0, 1, 2, 3), length)
    length = max(area_face(x, y, z, 4, 5, 6, 7), length)
    length = max(area_face(x, y, z, 0, 1, 5, 4), length)
    length = max(area_face(x, y, z, 1, 2, 6, 5), length)
    length = max(area_face(x, y, z, 2, 3, 7, 6), length)
    length = max(area_face(x, y, z, 3, 0, 4, 7), length)
    return 4.0 * volume / math.sqrt(length)


@pad.func(cuda=characteristic_length_unrolled)
def characteristic_length(x, y, z, volume):
    """4 volume / sqrt(largest face measure) (CalcElemCharacteristicLength), a running maximum over the
    faces: the adjoint replays the largest face's measure alone, not all six."""
    length = 0.0
    for f in range(6):
        length = max(area_face(x, y, z, FACES[f, 0], FACES[f, 1], FACES[f, 2], FACES[f, 3]), length)
    return 4.0 * volume / math.sqrt(length)


@pad.func
def gather(nodelist, i, field, row, x, y, z):
    """Rows ``row``, ``row + 1`` and ``row + 2`` of ``field`` (coordinates or velocities) at the element's 8
    corners into ``x``, ``y`` and ``z``."""
    for k in range(8):
        x[k] = field[row, nodelist[k, i]]
    for k in range(8):
        y[k] = field[row + 1, nodelist[k, i]]
    for k in range(8):
        z[k] = field[row + 2, nodelist[k, i]]


@pad.func
def count_fault(fault, earlier, flag, i, bit):
    """Count a fault in ``fault[0]``, and flag element ``i`` with ``bit`` unless an earlier cycle had a fault
    (``earlier[0]``, which the time increment sets): the flags stay those of the first faulty cycle, also
    when the host learns of it only after issuing later cycles."""
    fault[0] += 1
    if earlier[0] == 0:
        flag[i] += bit


# ------------------------------------------------------------------------------------ set-up
@pad.kernel
def k_initial_volume(i, nodelist, xv, volo, elem_mass):
    """The reference volume and mass of each element (density 1)."""
    x = pad.local_array(8)
    y = pad.local_array(8)
    z = pad.local_array(8)
    gather(nodelist, i, xv, 0, x, y, z)
    volume = elem_volume(x, y, z)
    volo[i] = volume
    elem_mass[i] = volume


@pad.kernel
def k_nodal_mass(n, corner_start, corner_list, stride, volo, nodal_mass):
    """Each node's mass: an eighth of each element around it, summed in element order (corner numbers
    ``stride`` apart from one element to the next: 1 corner-major, 8 element-major)."""
    mass = 0.0
    for c in range(corner_start[n], corner_start[n + 1]):
        mass += volo[corner_list[c] // stride % volo.shape[0]] / 8.0
    nodal_mass[n] = mass


@pad.kernel
def k_deposit_energy(i, at_origin, params, volo, e, clock):
    """Deposit ``einit`` in the element at the origin; the first time step from the analytic CFL estimate."""
    einit = params[EINIT]
    if at_origin:
        e[0] = einit
    clock[DT] = (0.5 * math.cbrt(volo[0])) / math.sqrt(2.0 * einit)


# ------------------------------------------------------------------------------------ time increment
@pad.func
def dt_candidate(clock):
    """This rank's proposal for the next time step from the Courant and hydro constraints."""
    candidate = 1.0e20
    if clock[DTCOURANT] < candidate:
        candidate = clock[DTCOURANT] / 2.0
    if clock[DTHYDRO] < candidate:
        candidate = clock[DTHYDRO] * 2.0 / 3.0
    return candidate


@pad.kernel
def k_dt_candidate(i, clock, gnewdt):
    """This rank's proposal, for the reduction over ranks."""
    gnewdt[0] = dt_candidate(clock)


@pad.kernel
def k_count_cycle(i, cycles):
    """One more cycle run (``cycles[0]``): a count that lives with the state, so that a cycle replayed from a
    record, whose Python does not run, counts too."""
    cycles[0] += 1


@pad.kernel
def k_time_increment(i, first, alone, newdt, clock, stoptime, dtmax, multlb, multub, fault, earlier):
    """The next time step (growth limited, cut to end at ``stoptime``) and the new time (TimeIncrement);
    notes the faults of the cycles before (see ``count_fault``). The proposal is ``newdt[0]``, reduced over
    ranks, or on one rank (``alone``) its own."""
    earlier[0] = fault[0]
    targetdt = stoptime - clock[TIME]
    if not first:
        olddt = clock[DT]
        dt = dt_candidate(clock) if alone else newdt[0]
        ratio = dt / olddt
        if ratio >= 1.0:
            if ratio < multlb:
                dt = olddt
            elif ratio > multub:
                dt = olddt * multub
        if dt > dtmax:
            dt = dtmax
        clock[DT] = dt
    if targetdt > clock[DT] and targetdt < 4.0 * clock[DT] / 3.0:
        targetdt = 2.0 * clock[DT] / 3.0
    if targetdt < clock[DT]:
        clock[DT] = targetdt
    clock[TIME] = clock[TIME] + clock[DT]


# ------------------------------------------------------------------------------------ nodal phase
@pad.kernel
def k_element_forces(
    i,
    nodelist,
    xv,
    p,
    q,
    volo,
    v,
    ss,
    elem_mass,
    params,
    combined,
    fs,
    fh,
    determ,
    fault,
    earlier,
    flag,
):
    """Per element and corner: the stress force (IntegrateStressForElems) and the Flanagan-Belytschko
    hourglass force (CalcFBHourglassForceForElems), each into its own corner array, or with ``combined``
    their sum into ``fs`` (as LLNL's CUDA port does: half the bytes, sums rounded otherwise)."""
    x = pad.local_array(8)
    y = pad.local_array(8)
    z = pad.local_array(8)
    gather(nodelist, i, xv, 0, x, y, z)
    sig = -p[i] - q[i]
    bx = pad.local_array(8)
    by = pad.local_array(8)
    bz = pad.local_array(8)
    jacobian = shape_derivatives(x, y, z, bx, by, bz)
    determ[i] = jacobian
    if jacobian <= 0.0:
        count_fault(fault, earlier, flag, i, DETERM)

    # hourglass control (before the stress's normals: fewer values live at once)
    dvdx = pad.local_array(8)
    dvdy = pad.local_array(8)
    dvdz = pad.local_array(8)
    volume_derivatives(x, y, z, dvdx, dvdy, dvdz)
    volume = volo[i] * v[i]
    if v[i] <= 0.0:
        count_fault(fault, earlier, flag, i, VOLUME)
    hx = pad.local_array(8)
    hy = pad.local_array(8)
    hz = pad.local_array(8)
    hgcoef = params[HGCOEF]
    if hgcoef > 0.0:
        scale = -hgcoef * 0.01 * ss[i] * elem_mass[i]
        hourglass_forces(nodelist, i, xv, x, y, z, dvdx, dvdy, dvdz, volume, scale, hx, hy, hz)
    else:
        for k in range(8):
            hx[k] = 0.0
            hy[k] = 0.0
            hz[k] = 0.0
    pfx = pad.local_array(8)
    pfy = pad.local_array(8)
    pfz = pad.local_array(8)
    node_normals(x, y, z, pfx, pfy, pfz)
    for k in range(8):
        if combined:
            fs[0, k, i] = -(sig * pfx[k]) + hx[k]
            fs[1, k, i] = -(sig * pfy[k]) + hy[k]
            fs[2, k, i] = -(sig * pfz[k]) + hz[k]
        else:
            fs[0, k, i] = -(sig * pfx[k])
            fs[1, k, i] = -(sig * pfy[k])
            fs[2, k, i] = -(sig * pfz[k])
            fh[0, k, i] = hx[k]
            fh[1, k, i] = hy[k]
            fh[2, k, i] = hz[k]


@pad.func
def hourglass_force(hourgam, coefficient, vel, force):
    """One component of the hourglass force on the element's corners (CalcElemFBHourglassForce)."""
    h0 = 0.0
    h1 = 0.0
    h2 = 0.0
    h3 = 0.0
    for k in range(8):
        h0 += hourgam[k, 0] * vel[k]
        h1 += hourgam[k, 1] * vel[k]
        h2 += hourgam[k, 2] * vel[k]
        h3 += hourgam[k, 3] * vel[k]
    for k in range(8):
        force[k] = coefficient * (
            hourgam[k, 0] * h0 + hourgam[k, 1] * h1 + hourgam[k, 2] * h2 + hourgam[k, 3] * h3
        )


@pad.func
def hourglass_forces_tabled(nodelist, i, xv, x, y, z, dvdx, dvdy, dvdz, volume, scale, fx, fy, fz):
    """:func:`hourglass_forces` with the modes' shape vectors computed once into a table (``hourgam``), as
    the C++ original does: GPUs' adjoints, whose registers a recomputed table's values would fill, use it
    (docs/benchmarks.md, "A helper's CUDA body")."""
    hourgam = pad.local_array((8, 4))
    volinv = 1.0 / volume
    for m in range(4):
        hourmodx = 0.0
        hourmody = 0.0
        hourmodz = 0.0
        for k in range(8):
            hourmodx += x[k] * GAMMA[m, k]
            hourmody += y[k] * GAMMA[m, k]
            hourmodz += z[k] * GAMMA[m, k]
        for k in range(8):
            hourgam[k, m] = GAMMA[m, k] - volinv * (
                dvdx[k] * hourmodx + dvdy[k] * hourmody + dvdz[k] * hourmodz
            )
    coefficient = scale / math.cbrt(volume)
    xd = pad.local_array(8)
    yd = pad.local_array(8)
    zd = pad.local_array(8)
    gather(nodelist, i, xv, 3, xd, yd, zd)
    hourglass_force(hourgam, coefficient, xd, fx)
    hourglass_force(hourgam, coefficient, yd, fy)
    hourglass_force(hourgam, coefficient, zd, fz)


@pad.func
def hourglass_mode(k, m, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz):
    """Mode ``m``'s shape vector at corner ``k`` (``hourgam[k, m]``), from the modes' coordinate sums."""
    return GAMMA[m, k] - volinv * (dvdx[k] * hmx[m] + dvdy[k] * hmy[m] + dvdz[k] * hmz[m])


@pad.func(cuda=hourglass_forces_tabled)
def hourglass_forces(nodelist, i, xv, x, y, z, dvdx, dvdy, dvdz, volume, scale, fx, fy, fz):
    """The Flanagan-Belytschko hourglass force on the element's corners (CalcFBHourglassForceForElems and
    CalcElemFBHourglassForce), the three components together, each mode's shape vector recomputed where
    used instead of kept in a table: the same values, and CPU adjoints then add the shape vectors'
    adjoints straight into the volume derivatives' and the mode sums' (no table of adjoints)."""
    volinv = 1.0 / volume
    hmx = pad.local_array(4)
    hmy = pad.local_array(4)
    hmz = pad.local_array(4)
    for m in range(4):
        sx = 0.0
        sy = 0.0
        sz = 0.0
        for k in range(8):
            sx += x[k] * GAMMA[m, k]
            sy += y[k] * GAMMA[m, k]
            sz += z[k] * GAMMA[m, k]
        hmx[m] = sx
        hmy[m] = sy
        hmz[m] = sz
    coefficient = scale / math.cbrt(volume)
    xd = pad.local_array(8)
    yd = pad.local_array(8)
    zd = pad.local_array(8)
    gather(nodelist, i, xv, 3, xd, yd, zd)
    x0 = 0.0
    x1 = 0.0
    x2 = 0.0
    x3 = 0.0
    y0 = 0.0
    y1 = 0.0
    y2 = 0.0
    y3 = 0.0
    z0 = 0.0
    z1 = 0.0
    z2 = 0.0
    z3 = 0.0
    for k in range(8):
        g0 = hourglass_mode(k, 0, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        g1 = hourglass_mode(k, 1, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        g2 = hourglass_mode(k, 2, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        g3 = hourglass_mode(k, 3, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        x0 += g0 * xd[k]
        x1 += g1 * xd[k]
        x2 += g2 * xd[k]
        x3 += g3 * xd[k]
        y0 += g0 * yd[k]
        y1 += g1 * yd[k]
        y2 += g2 * yd[k]
        y3 += g3 * yd[k]
        z0 += g0 * zd[k]
        z1 += g1 * zd[k]
        z2 += g2 * zd[k]
        z3 += g3 * zd[k]
    for k in range(8):
        g0 = hourglass_mode(k, 0, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        g1 = hourglass_mode(k, 1, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        g2 = hourglass_mode(k, 2, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        g3 = hourglass_mode(k, 3, volinv, dvdx, dvdy, dvdz, hmx, hmy, hmz)
        fx[k] = coefficient * (g0 * x0 + g1 * x1 + g2 * x2 + g3 * x3)
        fy[k] = coefficient * (g0 * y0 + g1 * y1 + g2 * y2 + g3 * y3)
        fz[k] = coefficient * (g0 * z0 + g1 * z1 + g2 * z2 + g3 * z3)


@pad.kernel
def k_gather_forces(n, corner_start, corner_list, fs, fh, combined, f):
    """Each node's force: its corners' stress forces, plus their hourglass forces (in element order), or
    with ``combined`` the sums of both that ``k_element_forces`` left in ``fs``.

    ``fs`` and ``fh`` are the corner forces flattened to ``(3, 8 * nelem)`` by corner number: ``k * nelem + e``
    corner-major (GPUs), ``e * 8 + k`` element-major (CPUs; ``Hydro.corner_stride``)."""
    sx = 0.0
    sy = 0.0
    sz = 0.0
    hx = 0.0
    hy = 0.0
    hz = 0.0
    for c in range(corner_start[n], corner_start[n + 1]):
        corner = corner_list[c]
        sx += fs[0, corner]
        sy += fs[1, corner]
        sz += fs[2, corner]
        if not combined:
            hx += fh[0, corner]
            hy += fh[1, corner]
            hz += fh[2, corner]
    f[0, n] = sx + hx
    f[1, n] = sy + hy
    f[2, n] = sz + hz


@pad.kernel
def k_advance_nodes(n, clock, f, nodal_mass, symmetry, xv):
    """Acceleration, symmetry-plane conditions, velocity (cut below U_CUT) and position of each node."""
    dt = clock[DT]
    for axis in range(3):
        accel = f[axis, n] / nodal_mass[n]
        if symmetry[axis, n] != 0:
            accel = 0.0
        vel = xv[3 + axis, n] + accel * dt
        if abs(vel) < U_CUT:
            vel = 0.0
        xv[3 + axis, n] = vel
        xv[axis, n] = xv[axis, n] + vel * dt


# ------------------------------------------------------------------------------------ element phase
@pad.func
def monoq_gradients(i, x, y, z, xd, yd, zd, vol, delx, delv_grad):
    """Velocity and position gradients along the element's three logical axes
    (CalcMonotonicQGradientsForElems)."""
    norm = 1.0 / (vol + PTINY)
    dxj = -0.25 * ((x[0] + x[1] + x[5] + x[4]) - (x[3] + x[2] + x[6] + x[7]))
    dyj = -0.25 * ((y[0] + y[1] + y[5] + y[4]) - (y[3] + y[2] + y[6] + y[7]))
    dzj = -0.25 * ((z[0] + z[1] + z[5] + z[4]) - (z[3] + z[2] + z[6] + z[7]))
    dxi = 0.25 * ((x[1] + x[2] + x[6] + x[5]) - (x[0] + x[3] + x[7] + x[4]))
    dyi = 0.25 * ((y[1] + y[2] + y[6] + y[5]) - (y[0] + y[3] + y[7] + y[4]))
    dzi = 0.25 * ((z[1] + z[2] + z[6] + z[5]) - (z[0] + z[3] + z[7] + z[4]))
    dxk = 0.25 * ((x[4] + x[5] + x[6] + x[7]) - (x[0] + x[1] + x[2] + x[3]))
    dyk = 0.25 * ((y[4] + y[5] + y[6] + y[7]) - (y[0] + y[1] + y[2] + y[3]))
    dzk = 0.25 * ((z[4] + z[5] + z[6] + z[7]) - (z[0] + z[1] + z[2] + z[3]))

    # zeta: i cross j
    ax = dyi * dzj - dzi * dyj
    ay = dzi * dxj - dxi * dzj
    az = dxi * dyj - dyi * dxj
    delx[2, i] = vol / math.sqrt(ax * ax + ay * ay + az * az + PTINY)
    ax = ax * norm
    ay = ay * norm
    az = az * norm
    dxv = 0.25 * ((xd[4] + xd[5] + xd[6] + xd[7]) - (xd[0] + xd[1] + xd[2] + xd[3]))
    dyv = 0.25 * ((yd[4] + yd[5] + yd[6] + yd[7]) - (yd[0] + yd[1] + yd[2] + yd[3]))
    dzv = 0.25 * ((zd[4] + zd[5] + zd[6] + zd[7]) - (zd[0] + zd[1] + zd[2] + zd[3]))
    delv_grad[2, i] = ax * dxv + ay * dyv + az * dzv

    # xi: j cross k
    ax = dyj * dzk - dzj * dyk
    ay = dzj * dxk - dxj * dzk
    az = dxj * dyk - dyj * dxk
    delx[0, i] = vol / math.sqrt(ax * ax + ay * ay + az * az + PTINY)
    ax = ax * norm
    ay = ay * norm
    az = az * norm
    dxv = 0.25 * ((xd[1] + xd[2] + xd[6] + xd[5]) - (xd[0] + xd[3] + xd[7] + xd[4]))
    dyv = 0.25 * ((yd[1] + yd[2] + yd[6] + yd[5]) - (yd[0] + yd[3] + yd[7] + yd[4]))
    dzv = 0.25 * ((zd[1] + zd[2] + zd[6] + zd[5]) - (zd[0] + zd[3] + zd[7] + zd[4]))
    delv_grad[0, i] = ax * dxv + ay * dyv + az * dzv

    # eta: k cross i
    ax = dyk * dzi - dzk * dyi
    ay = dzk * dxi - dxk * dzi
    az = dxk * dyi - dyk * dxi
    delx[1, i] = vol / math.sqrt(ax * ax + ay * ay + az * az + PTINY)
    ax = ax * norm
    ay = ay * norm
    az = az * norm
    dxv = -0.25 * ((xd[0] + xd[1] + xd[5] + xd[4]) - (xd[3] + xd[2] + xd[6] + xd[7]))
    dyv = -0.25 * ((yd[0] + yd[1] + yd[5] + yd[4]) - (yd[3] + yd[2] + yd[6] + yd[7]))
    dzv = -0.25 * ((zd[0] + zd[1] + zd[5] + zd[4]) - (zd[3] + zd[2] + zd[6] + zd[7]))
    delv_grad[1, i] = ax * dxv + ay * dyv + az * dzv


@pad.kernel
def k_kinematics(
    i, nodelist, xv, volo, v, clock, vnew, delv, arealg, vdov, delx, delv_grad, fault, earlier, flag
):
    """New relative volume, its change, the characteristic length, the volumetric strain rate
    (CalcKinematicsForElems and the rest of CalcLagrangeElements) and the monotonic Q's gradients, from one
    gather of the corners (as LLNL's CUDA port fuses them)."""
    x = pad.local_array(8)
    y = pad.local_array(8)
    z = pad.local_array(8)
    xd = pad.local_array(8)
    yd = pad.local_array(8)
    zd = pad.local_array(8)
    bx = pad.local_array(8)
    by = pad.local_array(8)
    bz = pad.local_array(8)
    gather(nodelist, i, xv, 0, x, y, z)
    volume = elem_volume(x, y, z)
    relative = volume / volo[i]
    vnew[i] = relative
    delv[i] = relative - v[i]
    arealg[i] = characteristic_length(x, y, z, volume)
    gather(nodelist, i, xv, 3, xd, yd, zd)
    monoq_gradients(i, x, y, z, xd, yd, zd, volo[i] * relative, delx, delv_grad)
    dt2 = 0.5 * clock[DT]
    xh = pad.local_array(8)  # the corners half a step back
    yh = pad.local_array(8)
    zh = pad.local_array(8)
    for k in range(8):
        xh[k] = x[k] - dt2 * xd[k]
        yh[k] = y[k] - dt2 * yd[k]
        zh[k] = z[k] - dt2 * zd[k]
    detj = shape_derivatives(xh, yh, zh, bx, by, bz)
    inv = 1.0 / detj
    dxx = inv * (
        bx[0] * (xd[0] - xd[6]) + bx[1] * (xd[1] - xd[7]) + bx[2] * (xd[2] - xd[4]) + bx[3] * (xd[3] - xd[5])
    )
    dyy = inv * (
        by[0] * (yd[0] - yd[6]) + by[1] * (yd[1] - yd[7]) + by[2] * (yd[2] - yd[4]) + by[3] * (yd[3] - yd[5])
    )
    dzz = inv * (
        bz[0] * (zd[0] - zd[6]) + bz[1] * (zd[1] - zd[7]) + bz[2] * (zd[2] - zd[4]) + bz[3] * (zd[3] - zd[5])
    )
    vdov[i] = dxx + dyy + dzz
    if relative <= 0.0:
        count_fault(fault, earlier, flag, i, VNEW)


@pad.func
def limiter(delv_grad, axis, neighbours, i, minus, plus, mult):
    """The monotonic limiter along one axis: phi from the neighbours' velocity gradients."""
    norm = 1.0 / (delv_grad[axis, i] + PTINY)
    delvm = delv_grad[axis, neighbours[minus, i]] * norm
    delvp = delv_grad[axis, neighbours[plus, i]] * norm
    phi = 0.5 * (delvm + delvp)
    delvm = delvm * mult
    delvp = delvp * mult
    if delvm < phi:
        phi = delvm
    if delvp < phi:
        phi = delvp
    if phi < 0.0:
        phi = 0.0
    if phi > MONOQ_MAX_SLOPE:
        phi = MONOQ_MAX_SLOPE
    return phi


@pad.kernel
def k_monoq(
    i, neighbours, delv_grad, delx, vdov, elem_mass, volo, vnew, params, q, qq, ql, fault, earlier, flag
):
    """The linear and quadratic monotonic artificial viscosity terms (CalcMonotonicQRegionForElems), and
    the check that q stays below QSTOP (CalcQForElems)."""
    mult = params[MONOQ_LIMITER_MULT]
    phixi = limiter(delv_grad, 0, neighbours, i, 0, 1, mult)
    phieta = limiter(delv_grad, 1, neighbours, i, 2, 3, mult)
    phizeta = limiter(delv_grad, 2, neighbours, i, 4, 5, mult)
    if vdov[i] > 0.0:
        qlin = 0.0
        qquad = 0.0
    else:
        delvxxi = delv_grad[0, i] * delx[0, i]
        delvxeta = delv_grad[1, i] * delx[1, i]
        delvxzeta = delv_grad[2, i] * delx[2, i]
        if delvxxi > 0.0:
            delvxxi = 0.0
        if delvxeta > 0.0:
            delvxeta = 0.0
        if delvxzeta > 0.0:
            delvxzeta = 0.0
        rho = elem_mass[i] / (volo[i] * vnew[i])
        qlin = (
            -params[QLC_MONOQ]
            * rho
            * (delvxxi * (1.0 - phixi) + delvxeta * (1.0 - phieta) + delvxzeta * (1.0 - phizeta))
        )
        qquad = (
            params[QQC_MONOQ]
            * rho
            * (
                delvxxi * delvxxi * (1.0 - phixi * phixi)
                + delvxeta * delvxeta * (1.0 - phieta * phieta)
                + delvxzeta * delvxzeta * (1.0 - phizeta * phizeta)
            )
        )
    qq[i] = qquad
    ql[i] = qlin
    if q[i] > QSTOP:
        count_fault(fault, earlier, flag, i, QSTOP_BIT)


@pad.func
def cut(x, threshold):
    """``x``, or 0 where its magnitude is below ``threshold`` (the original's e_cut, p_cut, q_cut, ...)."""
    return 0.0 if abs(x) < threshold else x


@pad.func
def pressure(e, compression, vnewc):
    """Pressure and bulk modulus ``bvc`` of the gamma-law EOS (CalcPressureForElems; ``pbvc`` is C1S)."""
    bvc = C1S * (compression + 1.0)
    p = cut(bvc * e, P_CUT)
    if vnewc >= EOSVMAX:
        p = 0.0
    return max(p, PMIN), bvc


@pad.func
def sound_speed_term(pbvc, e, vv, bvc, p):
    """sqrt((pbvc e + vv bvc p) / rho0), floored as the original floors it."""
    ssc = (pbvc * e + vv * bvc * p) / REFDENS
    if ssc <= SSC_LOW:  # noqa: SIM108 (a branch, so the square root only sees positive values)
        ssc = SSC_FLOOR
    else:
        ssc = math.sqrt(ssc)
    return ssc


@pad.func
def energy(vnewc, delvc, e_old, p_old, q_old, qq, ql):
    """One evaluation of the gamma-law EOS (CalcEnergyForElems): the new e, p, q and the bulk modulus.
    Each value has its own name (the energy's stages are e1 ... e4), so the adjoint need not save any."""
    compression = 1.0 / vnewc - 1.0
    comp_half_step = 1.0 / (vnewc - delvc * 0.5) - 1.0
    if vnewc <= EOSVMIN:
        comp_half_step = compression
    if vnewc >= EOSVMAX:
        p_old = 0.0
        compression = 0.0
        comp_half_step = 0.0
    work = 0.0

    e1 = max(e_old - 0.5 * delvc * (p_old + q_old) + 0.5 * work, EMIN)
    p_half, bvc_half = pressure(e1, comp_half_step, vnewc)
    vhalf = 1.0 / (1.0 + comp_half_step)
    q1 = 0.0
    if delvc <= 0.0:
        q1 = sound_speed_term(C1S, e1, vhalf * vhalf, bvc_half, p_half) * ql + qq
    e2 = e1 + 0.5 * delvc * (3.0 * (p_old + q_old) - 4.0 * (p_half + q1))

    e3 = max(cut(e2 + 0.5 * work, E_CUT), EMIN)
    p3, bvc3 = pressure(e3, compression, vnewc)
    q_tilde = 0.0
    if delvc <= 0.0:
        q_tilde = sound_speed_term(C1S, e3, vnewc * vnewc, bvc3, p3) * ql + qq
    e4 = max(
        cut(e3 - (7.0 * (p_old + q_old) - 8.0 * (p_half + q1) + (p3 + q_tilde)) * delvc * SIXTH, E_CUT),
        EMIN,
    )
    p4, bvc4 = pressure(e4, compression, vnewc)
    q4 = q1
    if delvc <= 0.0:
        q4 = cut(sound_speed_term(C1S, e4, vnewc * vnewc, bvc4, p4) * ql + qq, Q_CUT)
    return e4, p4, q4, bvc4


@pad.kernel
def k_eos(i, rep, stores, v, vnew, delv, qq, ql, e, p, q, ss, e_new, p_new, q_new, fault, earlier, flag):
    """The EOS of element ``i`` (EvalEOSForElems with CalcEnergyForElems and CalcSoundSpeedForElems):
    the new e, p, q and sound speed, then the relative volume for the next cycle, snapped to 1 within V_CUT
    (UpdateVolumesForElems, in the same launch as LLNL's CUDA port does). Costly regions evaluate the EOS
    ``rep[i]`` times, as the originals do (their load imbalance). Where ``stores`` is set (CPUs) the earlier
    evaluations write scratch (``e_new``, ...), which nothing reads, as the C++ original's arrays do; else
    (GPUs) they stay in registers, as the CUDA port's do."""
    vnewc = min(max(vnew[i], EOSVMIN), EOSVMAX)
    if min(max(v[i], EOSVMIN), EOSVMAX) <= 0.0:
        count_fault(fault, earlier, flag, i, EOS_VOLUME)
    for _ in range(rep[i] - 1):
        e_rep, p_rep, q_rep, _ = energy(vnewc, delv[i], e[i], p[i], q[i], qq[i], ql[i])
        if stores:
            p_new[i] = p_rep
            e_new[i] = e_rep
            q_new[i] = q_rep
    e4, p4, q4, bvc4 = energy(vnewc, delv[i], e[i], p[i], q[i], qq[i], ql[i])
    p[i] = p4
    e[i] = e4
    q[i] = q4
    ss[i] = sound_speed_term(C1S, e4, vnewc * vnewc, bvc4, p4)
    relative = vnew[i]
    if abs(relative - 1.0) < V_CUT:
        relative = 1.0
    v[i] = relative


@pad.kernel
def k_time_constraints(c, chunks, nelem, ss, vdov, arealg, params, partial):
    """The smallest Courant and hydro time steps over chunk ``c`` of the elements, over elements whose
    volume changes (CalcCourantConstraintForElems, CalcHydroConstraintForElems)."""
    qqc = params[QQC]
    qqc2 = 64.0 * qqc * qqc
    courant = 1.0e20
    hydro = 1.0e20
    for k in range(c * nelem // chunks, (c + 1) * nelem // chunks):
        if vdov[k] != 0.0:
            dtf = ss[k] * ss[k]
            if vdov[k] < 0.0:
                dtf = dtf + qqc2 * arealg[k] * arealg[k] * vdov[k] * vdov[k]
            courant = min(courant, arealg[k] / math.sqrt(dtf))
            hydro = min(hydro, DVOVMAX / (abs(vdov[k]) + 1.0e-20))
    partial[c, 0] = courant
    partial[c, 1] = hydro


@pad.kernel
def k_min_chunks(c, chunks, n, partial, fewer):
    """The smallest Courant and hydro time steps of chunk ``c`` of ``partial``'s ``n`` rows: one level of
    the tree a GPU reduces the elements' time steps by, each thread taking a few rows."""
    courant = 1.0e20
    hydro = 1.0e20
    for k in range(c * n // chunks, (c + 1) * n // chunks):
        courant = min(courant, partial[k, 0])
        hydro = min(hydro, partial[k, 1])
    fewer[c, 0] = courant
    fewer[c, 1] = hydro


@pad.kernel
def k_time_reduce(i, chunks, partial, clock):
    """The rank's Courant and hydro time steps: the smallest over the chunks."""
    courant = 1.0e20
    hydro = 1.0e20
    for c in range(chunks):
        courant = min(courant, partial[c, 0])
        hydro = min(hydro, partial[c, 1])
    clock[DTCOURANT] = courant
    clock[DTHYDRO] = hydro
