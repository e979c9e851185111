"""Device helpers that generated CUDA kernels call: warp sums for accumulations into shared elements, sums
over the lanes of a group that shares a loop (``group_sum``), and
the few scalar operations numba's CUDA target lacks (NumPy's float floor, ceil, trunc, rint, sign, sinc,
logaddexp; the digamma function).

For ``arr[j] += value`` with ``j`` probably the same on every lane of a warp (an adjoint accumulating into
a parameter every thread reads), generated code asks ``uniform(j, 1)``: when the whole warp is converged
there with one ``j`` (checked at run time), it sums the lanes' values with ``warp_sum`` and one lane adds
atomically, 32x fewer atomics on one address; otherwise every lane adds atomically (either way, only
where something is not zero: ``warp_any``). In a loop that groups of
``g`` lanes share, the lanes at the same place in their groups are at the same iteration: ``uniform(j, g)``
and ``warp_sum(v, g)`` take those lanes together, and the first group's lanes add. numba's CUDA simulator
has no warp shuffles (``WARP_SHUFFLES`` is False there): every lane adds atomically.
"""

from __future__ import annotations

import math

import numpy as np

import pad.arrays  # noqa: F401  (its NumPy shim, which numba.cuda needs)

# isort: split
from numba import config, cuda

from pad.kernel.runtime import check_index, psi

WARP_SHUFFLES = not config.ENABLE_CUDASIM  # type: ignore[attr-defined]
FULL = 0xFFFFFFFF


@cuda.jit(device=True)
def warp_sum(v, g):  # type: ignore[no-untyped-def]
    """The sum of ``v`` over the lanes at this lane's place in their groups of ``g`` (the whole warp for 1).

    Unrolled, each step under a test of ``g`` that is the same on every lane: a loop over a run-time ``g``
    made the adjoints that call it per iteration over twice as slow."""
    if g <= 16:
        v += cuda.shfl_xor_sync(FULL, v, 16)
    if g <= 8:
        v += cuda.shfl_xor_sync(FULL, v, 8)
    if g <= 4:
        v += cuda.shfl_xor_sync(FULL, v, 4)
    if g <= 2:
        v += cuda.shfl_xor_sync(FULL, v, 2)
    if g <= 1:
        v += cuda.shfl_xor_sync(FULL, v, 1)
    return v


@cuda.jit(device=True)
def warp_any(p):  # type: ignore[no-untyped-def]
    """True on every lane iff ``p`` holds on some lane of the warp (which must be converged, all here)."""
    return cuda.any_sync(FULL, p)


@cuda.jit(device=True)
def group_mask(g):  # type: ignore[no-untyped-def]
    """The warp mask of this lane's group of ``g`` consecutive lanes (a power of two, at most 32)."""
    return np.uint32(((1 << g) - 1) << (cuda.laneid - cuda.laneid % g))


@cuda.jit(device=True)
def group_sum(v, g):  # type: ignore[no-untyped-def]
    """The sum of ``v`` over this lane's group of ``g`` lanes, on every lane of the group; only the group's
    lanes need to be here."""
    if g == 1:
        return v
    mask = group_mask(g)
    o = g // 2
    while o > 0:
        v += cuda.shfl_xor_sync(mask, v, o)
        o //= 2
    return v


@cuda.jit(device=True)
def group_sync(g):  # type: ignore[no-untyped-def]
    """Wait until every lane of this lane's group of ``g`` lanes is here."""
    if g > 1:
        cuda.syncwarp(group_mask(g))


@cuda.jit(device=True)
def uniform(j, g):  # type: ignore[no-untyped-def]
    """True on every lane iff the whole warp is here, converged, and the lanes at the same place in their
    groups of ``g`` lanes have the same ``j`` (for 1: the whole warp has)."""
    if cuda.activemask() != FULL:
        return False
    return cuda.all_sync(FULL, j == cuda.shfl_sync(FULL, j, cuda.laneid & (g - 1)))  # g: a power of two


@cuda.jit(device=True)
def _floor(x):  # type: ignore[no-untyped-def]
    """``np.floor`` of a float, as a float (``math.floor`` returns an int). Beyond 2**52 floats are integral."""
    if not math.fabs(x) < 4503599627370496.0:
        return x
    return float(math.floor(x))


@cuda.jit(device=True)
def _ceil(x):  # type: ignore[no-untyped-def]
    if not math.fabs(x) < 4503599627370496.0:
        return x
    return float(math.ceil(x))


@cuda.jit(device=True)
def _tripcount(start, stop, step):  # type: ignore[no-untyped-def]
    """``len(range(start, stop, step))``."""
    if step > 0:
        return (stop - start + step - 1) // step if stop > start else 0
    return (start - stop - step - 1) // (-step) if start > stop else 0


@cuda.jit(device=True)
def _trunc(x):  # type: ignore[no-untyped-def]
    if not math.fabs(x) < 4503599627370496.0:
        return x
    return float(math.trunc(x))


@cuda.jit(device=True)
def _rint(x):  # type: ignore[no-untyped-def]
    """``np.rint``: the nearest integer, ties to even, as a float."""
    if not math.fabs(x) < 4503599627370496.0:
        return x
    r = math.floor(x + 0.5)
    if r - x == 0.5 and r % 2 != 0:
        r -= 1
    return float(r)


@cuda.jit(device=True)
def _sign(x):  # type: ignore[no-untyped-def]
    """``np.sign``: -1, 0 or 1 (NaN for NaN)."""
    if x != x:
        return x
    return int(x > 0) - int(x < 0)


@cuda.jit(device=True)
def _logaddexp(a, b):  # type: ignore[no-untyped-def]
    """``np.logaddexp``: log(exp(a) + exp(b)) without overflow."""
    if a == b:
        return a + math.log(2.0)
    m = a if a > b else b
    return m + math.log1p(math.exp(-math.fabs(a - b)))


@cuda.jit(device=True)
def _logaddexp2(a, b):  # type: ignore[no-untyped-def]
    """``np.logaddexp2``: log2(2**a + 2**b) without overflow."""
    if a == b:
        return a + 1.0
    m = a if a > b else b
    return m + math.log1p(math.pow(2.0, -math.fabs(a - b))) / math.log(2.0)


@cuda.jit(device=True)
def _sinc(x):  # type: ignore[no-untyped-def]
    """``np.sinc``: sin(pi x) / (pi x), 1 at 0."""
    if x == 0:
        return 1.0
    y = math.pi * x
    return math.sin(y) / y


_digamma = cuda.jit(device=True)(psi)  # lgamma's derivative, as on CPU threads
checked = cuda.jit(device=True)(check_index)  # PAD_DEBUG, on numba's CUDA simulator only (pad.kernel.checks)
