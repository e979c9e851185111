"""Device helpers that generated CUDA kernels call: accumulation into shared elements without serializing,
and the few scalar operations numba's CUDA target lacks (NumPy's float floor and ceil).

``add_uniform*`` is ``arr[index] += value`` for an index that is probably the same on every lane of a warp
(an adjoint accumulating into a parameter every thread reads). When the whole warp is converged there and
the index really is uniform (checked at run time), the warp sums its 32 values with shuffles and one lane
makes the atomic add: 32x fewer atomics on one address. Otherwise every lane adds atomically, so the result
is the same either way. numba's CUDA simulator has no warp shuffles: there every lane adds atomically.
"""

from __future__ import annotations

import numpy as np

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still calls np.row_stack, which NumPy 2.5 removed
    np.row_stack = np.vstack  # type: ignore[attr-defined]

import math

from numba import config, cuda  # after the shim

WARP_SHUFFLES = not config.ENABLE_CUDASIM  # type: ignore[attr-defined]
FULL = 0xFFFFFFFF


@cuda.jit(device=True)
def warp_sum(v):  # type: ignore[no-untyped-def]
    v += cuda.shfl_xor_sync(FULL, v, 16)
    v += cuda.shfl_xor_sync(FULL, v, 8)
    v += cuda.shfl_xor_sync(FULL, v, 4)
    v += cuda.shfl_xor_sync(FULL, v, 2)
    v += cuda.shfl_xor_sync(FULL, v, 1)
    return v


@cuda.jit(device=True)
def uniform(j):  # type: ignore[no-untyped-def]
    """True on every lane iff the whole warp is here, converged, with the same ``j``."""
    if cuda.activemask() != FULL:
        return False
    return cuda.all_sync(FULL, j == cuda.shfl_sync(FULL, j, 0))


@cuda.jit(device=True)
def add_uniform1(arr, j, value):  # type: ignore[no-untyped-def]
    if WARP_SHUFFLES and uniform(j):
        total = warp_sum(value)
        if cuda.laneid == 0:
            cuda.atomic.add(arr, j, total)
    else:
        cuda.atomic.add(arr, j, value)


@cuda.jit(device=True)
def add_uniform2(arr, j, k, value):  # type: ignore[no-untyped-def]
    if WARP_SHUFFLES and uniform(j * arr.shape[1] + k):
        total = warp_sum(value)
        if cuda.laneid == 0:
            cuda.atomic.add(arr, (j, k), total)
    else:
        cuda.atomic.add(arr, (j, k), value)


@cuda.jit(device=True)
def add_uniform3(arr, j, k, m, value):  # type: ignore[no-untyped-def]
    if WARP_SHUFFLES and uniform((j * arr.shape[1] + k) * arr.shape[2] + m):
        total = warp_sum(value)
        if cuda.laneid == 0:
            cuda.atomic.add(arr, (j, k, m), total)
    else:
        cuda.atomic.add(arr, (j, k, m), value)


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
