"""Running launchers on CPU threads, with race-free accumulation by privatization.

A launch runs in one contiguous chunk of indices per thread. Arrays that iterations reduce into at shared
indices (``a[j] += v``, and adjoints of reads at shared indices) get one private buffer per chunk, summed into
the array after the parallel loop; with one chunk the array itself is the buffer. numba has no CPU atomics,
so this is how ``+=`` stays exact and deterministic for a given thread count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from pad.kernel import Variant


@njit(parallel=True, cache=True)
def _sum_rows_into(out: np.ndarray, rows: np.ndarray) -> None:
    for j in prange(out.shape[0]):
        total = out[j]
        for r in range(rows.shape[0]):
            total += rows[r, j]
        out[j] = total


def _reduce(base: np.ndarray, buffer: np.ndarray) -> None:
    if base.flags.c_contiguous and buffer.flags.c_contiguous:
        _sum_rows_into(base.reshape(-1), buffer.reshape(buffer.shape[0], -1))
    else:
        base += buffer.sum(axis=0)


def run(
    variant: Variant,
    n: int,
    args: Sequence[Any],
    extras: Sequence[Any] = (),
    shadows: Sequence[Any] | None = None,
) -> np.ndarray:
    """Run ``variant`` for indices ``range(n)``; returns the adjoints of active scalars (adjoint mode)."""
    nchunks = max(1, min(numba.get_num_threads(), n))
    bases = [args[p] if kind == "primal" else shadows[p] for kind, p in variant.privates]  # type: ignore[index]
    buffers = [np.zeros((nchunks, *b.shape), b.dtype) if nchunks > 1 else b[np.newaxis] for b in bases]
    call = [n, nchunks, *args, *extras, *buffers]
    outputs = np.zeros((nchunks, len(variant.active_scalars)))
    if variant.mode == "adjoint" and variant.active_scalars:
        call.append(outputs)
    variant.launcher(*call)
    if nchunks > 1:
        for base, buffer in zip(bases, buffers, strict=True):
            _reduce(base, buffer)
    return outputs.sum(axis=0)
