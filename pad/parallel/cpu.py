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
from numba import prange, types

from pad import arrays
from pad.kernel import Variant, compiler, runtime
from pad.kernel.names import head, ordered
from pad.parallel import plans

SPARE = arrays.Pool(1 << 30)  # zeroed private buffers; a launch may take several of one shape (x, y, z)

PRIVATE_BYTES = 1 << 28
"""The private buffers of a launch hold at most this many bytes, unless one copy per thread needs more: a
plan's slots (up to ``plans.SLOTS`` copies) are cut to fit. Only then does a sum depend on the thread count."""


def _add_rows(out: np.ndarray, rows: np.ndarray) -> None:
    """``out += rows.sum(0)``, leaving ``rows`` zero."""
    for j in prange(out.shape[0]):
        total = out[j]
        for r in range(rows.shape[0]):
            total += rows[r, j]
            rows[r, j] = 0
        out[j] = total


_sum_rows_into, _sum_rows_into_parallel = runtime.serial_and_parallel(_add_rows)


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
    if base.flags.c_contiguous:  # a small buffer is summed in the calling thread (the same sums, in order)
        add = _sum_rows_into_parallel if buffer.nbytes >= arrays.PARALLEL_BYTES else _sum_rows_into
        add(base.reshape(-1), buffer.reshape(buffer.shape[0], -1))
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


class Launch:
    """One launch of a CPU launcher on its arguments, callable again: a ``pad.graph`` record keeps it and
    replays it by calling it, without working out its launcher's arguments anew. Each call asks for the
    plan (pad/parallel/plans.py validates a cached one against its index arrays) and the thread count, and
    binds the launcher's arguments again only where either changed."""

    __slots__ = (
        "args",
        "bases",
        "call",
        "extras",
        "lead",
        "n",
        "nact",
        "plan",
        "planned",
        "private",
        "slots",
        "stored",
        "threads",
        "variant",
    )

    def __init__(
        self,
        variant: Variant,
        n: int,
        args: Sequence[Any],
        extras: Sequence[Any] = (),
        shadows: Sequence[Any] | None = None,
    ) -> None:
        self.variant, self.n, self.args, self.extras = variant, n, tuple(args), tuple(extras)
        self.nact = len(variant.active_scalars) if variant.mode == "adjoint" else 0
        self.bases: list[np.ndarray] = [
            args[p] if kind == "primal" else shadows[p]  # type: ignore[index]
            for kind, p in variant.privates
        ]
        self.stored = [args[p] for p in variant.stored]
        self.planned = bool(variant.privates or variant.halo or self.nact)
        self.threads = 0  # the thread count ``call`` was bound for (none yet)
        self.plan: plans.Plan | None = None
        # the launcher's arguments, but for the private buffers and the active scalars' sums
        self.call: list[Any] = []
        self.private: list[bool] = []  # per base, whether the plan accumulates it into private buffers
        self.slots = 0  # the private buffers' copies of their base
        # the chunk's own first arguments: its index (and, by a plan, the first and last colours it runs)
        self.lead: tuple[int, ...] = (0,)

    def __call__(self) -> np.ndarray:
        """Run the launch; returns the adjoints of active scalars (adjoint mode)."""
        variant, n = self.variant, self.n
        threads = numba.get_num_threads()
        plan = plans.plan(variant, n, self.args) if self.planned else None
        if threads != self.threads or plan is not self.plan:
            self._bind(threads, plan)
        call = self.call
        buffers: list[np.ndarray] = []
        outputs = np.zeros((self.slots, self.nact)) if self.nact else _NO_OUTPUTS
        if self.planned:
            buffers = [
                _zeroed(self.slots, base) if own else _no_buffer(base)
                for base, own in zip(self.bases, self.private, strict=True)
            ]
            call = [*call, *buffers, *([outputs] if self.nact else [])]
        if compiler.noting():  # compiled ahead (pad.precompile), not run: the launcher, and its chunk apart
            compiler.note(variant.launcher, [*variant.chunk_address, *call])
            compiler.note(variant.chunk, [*self.lead, *call])
            return outputs.sum(axis=0) if self.nact else _NO_SUMS
        try:
            variant.launcher(*variant.chunk_address, *call)
        except runtime.ChunkMismatch:  # the first launch, or one with other argument types than the last
            variant.chunk_address = _chunk_address(variant.chunk, [*self.lead, *call])
            variant.launcher(*variant.chunk_address, *call)
        for base, buffer in zip(self.bases, buffers, strict=True):
            if buffer.shape[0]:
                _reduce(base, buffer)
        plans.forget(self.stored)
        return outputs.sum(axis=0) if self.nact else _NO_SUMS

    def _bind(self, threads: int, plan: plans.Plan | None) -> None:
        """Work out the launcher's arguments for ``threads`` threads and ``plan``."""
        n, args, extras = self.n, self.args, self.extras
        self.threads, self.plan = threads, plan
        if plan is None:
            chunks = max(1, min(threads, n))
            self.call = [*ordered(head("cpu"), _n=n, _nchunks=chunks), *args, *extras]
            self.lead = (0,)
            return
        self.private = [p in plan.private for _, p in self.variant.privates]
        slots = plan.slots
        copy = sum(b.nbytes for b, own in zip(self.bases, self.private, strict=True) if own)
        if copy * slots > PRIVATE_BYTES:  # fewer copies, but never fewer than today's one per thread
            slots = max(1, min(slots, max(threads, PRIVATE_BYTES // copy)))
        self.slots = slots
        chunks = max(1, min(threads, slots))
        values = {"_slots": slots, "_order": plan.order, "_segs": plan.segs, "_colours": plan.colours}
        self.call = [*ordered(head("cpu", planned=True), _n=n, _nchunks=chunks, **values), *args, *extras]
        self.lead = (0, 0, 0)
