"""Running launchers on CPU threads, with race-free accumulation by privatization.

A launch runs in one contiguous chunk of indices per thread. Arrays that iterations reduce into at shared
indices (``a[j] += v``, and adjoints of reads at shared indices) get one private buffer per chunk, summed into
the array after the parallel loop; with one chunk the array itself is the buffer. numba has no CPU atomics,
so this is how ``+=`` stays exact and deterministic for a given thread count. Where every such add is at the
launch index plus a constant (a stencil's adjoint: ``Variant.halo``), no buffer is needed: two chunks per
thread, run in two waves (even chunks, then odd), never add to the same element. Summing a buffer zeroes it, and
it is kept for the next launch of that shape (in ``SPARE``, up to 1 GiB): no fresh allocation, whose pages
the OS would zero again on first touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from pad import arrays
from pad.kernel import Variant, compiler

SPARE = arrays.Pool(1 << 30)  # zeroed private buffers; a launch may take several of one shape (x, y, z)


@njit(parallel=True, cache=True)
def _sum_rows_into(out: np.ndarray, rows: np.ndarray) -> None:
    """``out += rows.sum(0)``, leaving ``rows`` zero."""
    for j in prange(out.shape[0]):
        total = out[j]
        for r in range(rows.shape[0]):
            total += rows[r, j]
            rows[r, j] = 0
        out[j] = total


def _zeroed(nchunks: int, base: np.ndarray) -> np.ndarray:
    """A zeroed buffer of one copy of ``base`` per chunk: a spare one if a launch left one."""
    buffer = SPARE.take((nchunks, *base.shape), base.dtype)
    return buffer if buffer is not None else np.zeros((nchunks, *base.shape), base.dtype)


def _reduce(base: np.ndarray, buffer: np.ndarray) -> None:
    """Add the chunks' buffer into ``base`` and keep the buffer, zeroed, for the next launch."""
    if base.flags.c_contiguous:
        _sum_rows_into(base.reshape(-1), buffer.reshape(buffer.shape[0], -1))
    else:
        base += buffer.sum(axis=0)
        buffer[...] = 0
    SPARE.give(buffer)


def run(
    variant: Variant,
    n: int,
    args: Sequence[Any],
    extras: Sequence[Any] = (),
    shadows: Sequence[Any] | None = None,
) -> np.ndarray:
    """Run ``variant`` for indices ``range(n)``; returns the adjoints of active scalars (adjoint mode)."""
    threads = numba.get_num_threads()
    if variant.halo:  # two waves of chunks at least 2 * halo long, or one chunk
        nchunks = max(1, min(2 * threads, n // (2 * variant.halo))) if threads > 1 else 1
        schedule = [nchunks, 2 if nchunks > 1 else 1]
    else:
        nchunks = max(1, min(threads, n))
        schedule = [nchunks]
    bases = [args[p] if kind == "primal" else shadows[p] for kind, p in variant.privates]  # type: ignore[index]
    buffers = [_zeroed(nchunks, b) if nchunks > 1 else b[np.newaxis] for b in bases]
    call = [n, *schedule, *args, *extras, *buffers]
    outputs = np.zeros((nchunks, len(variant.active_scalars)))
    if variant.mode == "adjoint" and variant.active_scalars:
        call.append(outputs)
    if compiler.note(variant.launcher, call):  # compiled ahead (pad.precompile), not run
        return outputs.sum(axis=0)
    variant.launcher(*call)
    if nchunks > 1:
        for base, buffer in zip(bases, buffers, strict=True):
            _reduce(base, buffer)
    return outputs.sum(axis=0)
