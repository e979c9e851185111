"""Running launchers on CPU threads.

A launch without shared-index accumulations runs in one contiguous chunk of indices per thread. One with them
(``a[j] += v`` at shared ``j``, and adjoints of reads at shared indices; numba has no CPU atomics) runs by a
plan (pad/parallel/plans.py): colour by colour, each colour's segments spread over the threads, adding in
place where the plan says no two running iterations touch one element, else into per-segment private
buffers, summed into the array after the launch. Summing a buffer zeroes it, and it is kept for the next
launch of that shape (in ``SPARE``, up to 1 GiB): no fresh allocation, whose pages the OS would zero again on
first touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import njit, prange, types

from pad import arrays
from pad.kernel import Variant, compiler, runtime
from pad.kernel.names import head, ordered
from pad.parallel import plans

SPARE = arrays.Pool(1 << 30)  # zeroed private buffers; a launch may take several of one shape (x, y, z)

PRIVATE_BYTES = 1 << 28
"""The private buffers of a launch hold at most this many bytes, unless one copy per thread needs more: a
plan's slots (up to ``plans.SLOTS`` copies) are cut to fit. Only then does a sum depend on the thread count."""


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


_NO_BUFFERS: dict[tuple[str, int], np.ndarray] = {}
_NO_OUTPUTS = np.zeros((1, 0))  # a launch without active scalars: their adjoints, none
_NO_SUMS = np.zeros(0)  # and their sums over the slots


def _no_buffer(base: np.ndarray) -> np.ndarray:
    """A buffer without slots: the launcher then adds into ``base`` itself."""
    key = (base.dtype.str, base.ndim)
    hit = _NO_BUFFERS.get(key)
    if hit is None:
        hit = _NO_BUFFERS[key] = np.zeros((0,) * (base.ndim + 1), base.dtype)
    return hit


def _reduce(base: np.ndarray, buffer: np.ndarray) -> None:
    """Add the chunks' buffer into ``base`` and keep the buffer, zeroed, for the next launch."""
    if base.flags.c_contiguous:
        _sum_rows_into(base.reshape(-1), buffer.reshape(buffer.shape[0], -1))
    else:
        base += buffer.sum(axis=0)
        buffer[...] = 0
    SPARE.give(buffer)


def _chunk_address(chunk: Any, call: Sequence[Any]) -> tuple[int, int]:
    """The address of ``chunk`` compiled for the types of ``call`` (or loaded from numba's cache: the key of
    ``pad.precompile``'s item), and the ``runtime.chunk_key`` of those types, for its launcher to check. An
    address is of this process only: it lives in its variant (``Variant.chunk_address``), never on disk."""
    argtypes = tuple(chunk.typeof_pyval(a) for a in call)
    chunk.compile(argtypes)
    compiled = chunk.overloads[argtypes]
    if compiled.signature.return_type != types.none:  # call_chunk calls it as returning nothing
        raise TypeError(f"{chunk.py_func.__name__} returns {compiled.signature.return_type}, not None")
    address = compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name)
    return address, runtime.chunk_key(argtypes)


def run(
    variant: Variant,
    n: int,
    args: Sequence[Any],
    extras: Sequence[Any] = (),
    shadows: Sequence[Any] | None = None,
) -> np.ndarray:
    """Run ``variant`` for indices ``range(n)``; returns the adjoints of active scalars (adjoint mode)."""
    threads = numba.get_num_threads()
    nact = len(variant.active_scalars) if variant.mode == "adjoint" else 0
    bases: list[np.ndarray] = []
    buffers: list[np.ndarray] = []
    outputs = _NO_OUTPUTS
    if not (variant.privates or variant.halo or nact):
        chunks = max(1, min(threads, n))
        call = [*ordered(head("cpu"), _n=n, _nchunks=chunks), *args, *extras]
        # The chunk's own first arguments: its index (and, by a plan, the first and last colours it runs)
        lead: tuple[int, ...] = (0,)
    else:
        plan = plans.plan(variant, n, tuple(args))
        bases = [args[p] if kind == "primal" else shadows[p] for kind, p in variant.privates]  # type: ignore[index]
        private = [p in plan.private for _, p in variant.privates]
        slots = plan.slots
        copy = sum(b.nbytes for b, own in zip(bases, private, strict=True) if own)
        if copy * slots > PRIVATE_BYTES:  # fewer copies, but never fewer than today's one per thread
            slots = max(1, min(slots, max(threads, PRIVATE_BYTES // copy)))
        buffers = [_zeroed(slots, b) if own else _no_buffer(b) for b, own in zip(bases, private, strict=True)]
        outputs = np.zeros((slots, nact))
        chunks = max(1, min(threads, slots))
        values = {"_slots": slots, "_order": plan.order, "_segs": plan.segs, "_colours": plan.colours}
        call = [*ordered(head("cpu", planned=True), _n=n, _nchunks=chunks, **values), *args, *extras]
        call += [*buffers, *([outputs] if nact else [])]
        lead = (0, 0, 0)
    if compiler.noting():  # compiled ahead (pad.precompile), not run: the launcher, and its chunk apart
        compiler.note(variant.launcher, [*variant.chunk_address, *call])
        compiler.note(variant.chunk, [*lead, *call])
        return outputs.sum(axis=0) if nact else _NO_SUMS
    try:
        variant.launcher(*variant.chunk_address, *call)
    except runtime.ChunkMismatch:  # the first launch, or one with other argument types than the last
        variant.chunk_address = _chunk_address(variant.chunk, [*lead, *call])
        variant.launcher(*variant.chunk_address, *call)
    for base, buffer in zip(bases, buffers, strict=True):
        if buffer.shape[0]:
            _reduce(base, buffer)
    for p in variant.stored:
        plans.forget(args[p])
    return outputs.sum(axis=0) if nact else _NO_SUMS
