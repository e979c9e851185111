"""Running launchers on CPU threads.

A launch without shared-index accumulations runs in one contiguous chunk of indices per thread. One with them
(``a[j] += v`` at shared ``j``, and adjoints of reads at shared indices; numba has no CPU atomics) runs by a
plan (pad/parallel/plans.py): colour by colour, each colour's segments spread over the threads, adding in
place where the plan says no two running iterations touch one element, else into per-segment private
buffers, summed into the array after the launch. Summing a buffer zeroes it, and it is kept: a small one by
its launch, for its next call; others for the next launch of that shape (in ``SPARE``, up to 1 GiB): no fresh
allocation, whose pages the OS would zero again on first touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
from numba import prange, types

from pad import arrays
from pad.kernel import Variant, compiler, runtime
from pad.kernel.inspector import INDEX_KINDS
from pad.kernel.names import head, ordered
from pad.parallel import plans

SPARE = arrays.Pool(1 << 30)  # zeroed private buffers; a launch may take several of one shape (x, y, z)

PRIVATE_BYTES = 1 << 28
"""The private buffers of a launch hold at most this many bytes, unless one copy per thread needs more: a
plan's slots (up to ``plans.SLOTS`` copies) are cut to fit. Only then does a sum depend on the thread count."""

CACHED_PRIVATE_BYTES = 1 << 21
CACHED_SLOTS = 16
"""Private copies together larger than ``CACHED_PRIVATE_BYTES`` are cut to as many as fit, but to no fewer
than ``CACHED_SLOTS``: copies that leave the caches are each brought back from memory by their segment and
by the sum, which cost more than their slots spread (64 copies of 4096 atoms' positions and charges: a pair
potential's gradient 2.7x its energy, against 2.3x with 16; docs/benchmarks.md, "Private copies summed by
blocks"). The cut depends on the arrays' sizes alone, so results still do not depend on the thread count."""


KEPT_BUFFER_BYTES = 1 << 16
"""A launch keeps private buffers of at most this many bytes (the copies of a flag, a clock, a few sums) from
one call to the next, zeroed by each sum, where larger ones go back to ``SPARE``: a replayed launch then takes
and gives back none (a pool's look-ups cost more than such a sum)."""


PARTS = 8
"""A launch without a plan runs in this many chunks a thread (on more than one): a replay's driver shares
them out, each thread claiming its own (the elements it touched in the launch before) and then what is
left of the others', so that a thread the machine slows (a core shared, a slower way to memory) hands its
last chunks to the others instead of holding the launch's end back (docs/benchmarks.md, "Chunks that
threads pass on"). Run from Python, a thread gets its own consecutive chunks, as one."""


ROW_BLOCK = 512
"""Elements of the sum of private copies that one pass takes: the copies are read one after another over
such a block (which stays in the L1 cache), where reading all of them at once element by element kept 64
streams of memory open at a time, ten times slower (docs/benchmarks.md, "Private copies summed by blocks")."""


def _add_rows(out: np.ndarray, rows: np.ndarray) -> None:
    """``out += rows[:, :len(out)].sum(0)``, leaving those zero; each element is summed in the rows' order.
    (Rows may be longer than ``out``: ``_slots_shape``.)"""
    n = out.shape[0]
    for b in prange((n + ROW_BLOCK - 1) // ROW_BLOCK):
        lo = b * ROW_BLOCK
        hi = min(lo + ROW_BLOCK, n)
        for r in range(rows.shape[0]):
            for j in range(lo, hi):
                out[j] += rows[r, j]
                rows[r, j] = 0


_sum_rows_into, _sum_rows_into_parallel = runtime.serial_and_parallel(_add_rows)


def _slots_shape(slots: int, base: np.ndarray, padded: bool) -> tuple[int, ...]:
    """The shape of a private buffer of ``slots`` copies of ``base``. With ``padded``, copies of a
    one-dimensional array are padded to whole cache lines (and the buffer starts on one, ``_zeros``): threads
    adding into neighbouring slots would otherwise write one line, which then moves between their cores at
    every add (LULESH's clock, four numbers, had two slots a line: docs/benchmarks.md, "Blocks claimed as
    threads come free"). Copies of larger arrays are rows whose lines only their ends share. A checked launch
    (PAD_DEBUG) gets copies of the array's own shape, which its checks compare indices with."""
    if base.ndim != 1 or not padded:
        return (slots, *base.shape)
    per_line = runtime.LINE_BYTES // base.itemsize
    return (slots, -(-base.shape[0] // per_line) * per_line)


def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)`` starting on a cache line."""
    size, item = int(np.prod(shape)), dtype.itemsize
    raw = np.zeros(size + runtime.LINE_BYTES // item, dtype)
    skip = (-raw.ctypes.data % runtime.LINE_BYTES) // item
    return raw[skip : skip + size].reshape(shape)


def _zeroed(slots: int, base: np.ndarray, padded: bool = True) -> np.ndarray:
    """A zeroed buffer of ``slots`` copies of ``base`` (``_slots_shape``): a spare one if a launch left one."""
    shape = _slots_shape(slots, base, padded)
    buffer = SPARE.take(shape, base.dtype)
    return buffer if buffer is not None else _zeros(shape, base.dtype)


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
    """Add the chunks' buffer into ``base``, which leaves the buffer zeroed."""
    if base.flags.c_contiguous:  # a small buffer is summed in the calling thread (the same sums, in order)
        add = _sum_rows_into_parallel if buffer.nbytes >= arrays.PARALLEL_BYTES else _sum_rows_into
        add(base.reshape(-1), buffer.reshape(buffer.shape[0], -1))
    else:
        base += buffer.reshape(buffer.shape[0], -1)[:, : base.size].sum(axis=0).reshape(base.shape)
        buffer[...] = 0


def _run_chunks(chunk: int, record: int, nchunks: int) -> None:
    """Call ``chunk(record, c)`` (``runtime.run_chunks``: a launcher's chunk ``c``) for the chunks
    ``0 .. nchunks - 1`` in parallel (``RUNNERS``)."""
    # numba's parallel loop hands its threads an array by its data pointer, a number by a pointer to it:
    # as an array, the record is one dependent load nearer to the threads that read it.
    words: np.ndarray = runtime.array_at(record, 1, np.int64)  # type: ignore[call-arg]  # typingctx first
    for c in prange(nchunks):  # np.int64: numba makes a prange index uint64 in the loop it lowers it to
        runtime.call_chunk(chunk, runtime.address_of(words), np.int64(c))


MAILBOX_WORDS = 8
"""A captured launch's mailbox (``_capture``): its capacity in bytes, then the chunks' function, the record's
address in the mailbox, the chunks and the record's size; the record's copy after these words."""


def _capture(chunk: int, record: int, nchunks: int) -> None:
    """A chunks runner that runs none: it copies the launcher's record (``runtime.run_chunks``) and what the
    launcher passed with it into the mailbox (``MAILBOX_WORDS``) at the address the launcher was given as
    its ``_c``. How a replay's driver (pad/parallel/driver.py) gets a launch's chunks and arguments."""
    words: np.ndarray = runtime.array_at(record, runtime.RECORD_CHUNK + 1, np.int64)  # type: ignore[call-arg]
    size, mailbox = words[runtime.RECORD_SIZE], words[runtime.RECORD_CHUNK]
    box: np.ndarray = runtime.array_at(mailbox, MAILBOX_WORDS, np.int64)  # type: ignore[call-arg]
    copy = mailbox + 8 * MAILBOX_WORDS
    box[1], box[2], box[3], box[4] = chunk, copy, nchunks, size
    if size <= box[0]:
        runtime.array_at(copy, size, np.uint8)[:] = runtime.array_at(record, size, np.uint8)  # type: ignore[call-arg]


# Every CPU launch runs its chunks by one of these, compiled once: numba lowers a parallel loop slowly, once
# per function. PAD_DEBUG launches run their chunks one after another: an exception raised in a parallel
# loop would be lost.
_serial_runner, _parallel_runner = runtime.serial_and_parallel(_run_chunks)
RUNNERS = {
    "parallel": _parallel_runner,
    "serial": _serial_runner,
    "capture": numba.njit(cache=True)(_capture),
}
_RUNNER_ADDRESSES: dict[str, int] = {}


def runner_address(name: str) -> int:
    """The address of the chunks runner ``RUNNERS[name]`` in this process (a launcher's ``_run``), compiled or
    loaded from numba's cache on first use. An address is of this process only: never on disk."""
    address = _RUNNER_ADDRESSES.get(name)
    if address is None:
        runner, signature = RUNNERS[name], (types.int64,) * 3
        runner.compile(signature)
        compiled = runner.overloads[signature]
        address = compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name)
        _RUNNER_ADDRESSES[name] = address
    return address


class Launch:
    """One launch of a CPU launcher on its arguments, callable again: a ``pad.graph`` record keeps it and
    replays it by calling it, without working out its launcher's arguments anew. Each call asks for the
    plan (pad/parallel/plans.py validates a cached one against its index arrays) and the thread count, and
    binds the launcher's arguments again only where either changed. A plan that cannot change, one without
    index arrays or made from frozen ones (``pad.arrays.frozen``), is not asked for again while the thread
    count stays: a replay's Python per launch is then a comparison."""

    __slots__ = (
        "args",
        "bases",
        "buffers",
        "call",
        "captured",
        "claimed",
        "extras",
        "n",
        "nact",
        "plan",
        "planned",
        "private",
        "settled",
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
        for p in variant.stored:
            if not args[p].flags.writeable:
                raise ValueError(
                    f"pad.launch({variant.kernel}): the kernel stores into argument {p + 1}, which is read-only"
                    " (a frozen array, pad.arrays.frozen, never changes)"
                )
        self.nact = len(variant.active_scalars) if variant.mode == "adjoint" else 0
        self.bases: list[np.ndarray] = [
            args[p] if kind == "primal" else shadows[p]  # type: ignore[index]
            for kind, p in variant.privates
        ]
        # the arrays it stores into whose contents a plan may depend on: index arrays
        self.stored = [args[p] for p in variant.stored if args[p].dtype.kind in INDEX_KINDS]
        self.planned = bool(variant.privates or variant.halo or self.nact)
        self.settled = False  # whether the bound plan is one that cannot change (``_bind``)
        self.threads = 0  # the thread count ``call`` was bound for (none yet)
        self.plan: plans.Plan | None = None
        # the launcher's arguments (the chunks runner's address first), but for the private buffers and the
        # active scalars' sums
        self.call: list[Any] = []
        self.private: list[bool] = []  # per base, whether the plan accumulates it into private buffers
        # per base, the buffer the launcher takes: none (``_no_buffer``) or a kept one; None: one from SPARE
        self.buffers: list[np.ndarray | None] = []
        self.captured: np.ndarray | None = None  # the mailbox of ``capture``, until bound anew
        self.claimed: np.ndarray | None = None  # a launch by a plan: its claim counters (``runtime.claim``)
        self.slots = 0  # the private buffers' copies of their base

    def __call__(self) -> np.ndarray:
        """Run the launch; returns the adjoints of active scalars (adjoint mode)."""
        variant = self.variant
        self.prepare(numba.get_num_threads())
        call = self.call
        buffers: list[np.ndarray] = []
        outputs = np.zeros((self.slots, self.nact)) if self.nact else _NO_OUTPUTS
        if self.planned:
            buffers = [
                _zeroed(self.slots, base, variant.sites is None) if buffer is None else buffer
                for base, buffer in zip(self.bases, self.buffers, strict=True)
            ]
            call = [*call, *buffers, *([outputs] if self.nact else [])]
        if compiler.note(variant.launcher, call):  # compiled ahead (pad.precompile), not run
            return outputs.sum(axis=0) if self.nact else _NO_SUMS
        try:
            variant.launcher(*call)
        except BaseException:
            self.threads = 0  # bound anew at the next call: the kept buffers may hold part of a sum
            raise
        for base, buffer, kept in zip(self.bases, buffers, self.buffers, strict=True):
            if buffer.shape[0]:
                _reduce(base, buffer)
                if kept is None:
                    SPARE.give(buffer)
        if self.stored:
            plans.forget(self.stored)
        return outputs.sum(axis=0) if self.nact else _NO_SUMS

    def prepare(self, threads: int) -> None:
        """Bind the launcher's arguments for ``threads`` threads and the launch's plan (a cached one validated
        against its index arrays), unless they are bound already."""
        if self.settled and threads == self.threads:
            return
        plan = plans.plan(self.variant, self.n, self.args) if self.planned else None
        if threads != self.threads or plan is not self.plan:
            self._bind(threads, plan)

    @property
    def drivable(self) -> bool:
        """Whether a replay's driver may run this launch (pad/parallel/driver.py): not a checked one
        (PAD_DEBUG, whose chunks run one after another), nor one that returns active scalars' sums."""
        return self.variant.sites is None and not self.nact

    def capture(self) -> np.ndarray | None:
        """The bound launch as a replay's driver runs it (``MAILBOX_WORDS``): the launcher called with
        ``_capture`` for its chunks runner, its buffers kept. None where the driver cannot run it: one not
        ``drivable``, or bound with buffers from ``SPARE``."""
        if self.captured is not None:
            return self.captured
        if not self.drivable or any(b is None for b in self.buffers):
            return None
        call = [*self.call[2:], *(self.buffers if self.planned else ())]
        # a word per number, three per array's dimension: room enough unless tuples are passed, then again
        capacity = 8 * (2 * MAILBOX_WORDS + sum(1 + 2 * getattr(a, "ndim", 0) for a in call))
        while True:
            box = np.zeros(MAILBOX_WORDS + -(-capacity // 8), np.int64)
            box[0] = capacity
            self.variant.launcher(runner_address("capture"), box.ctypes.data, *call)
            if box[4] <= capacity:
                self.captured = box
                return box
            capacity = int(box[4])

    def sums(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The bound launch's kept private buffers with the arrays they are summed into, after it runs."""
        return [
            (base, b)
            for base, b, own in zip(self.bases, self.buffers, self.private, strict=True)
            if own and b is not None
        ]

    def _bind(self, threads: int, plan: plans.Plan | None) -> None:
        """Work out the launcher's arguments for ``threads`` threads and ``plan``."""
        n, args, extras = self.n, self.args, self.extras
        self.threads, self.plan, self.captured = threads, plan, None
        # a plan made while launches are only noted (``pad.precompile``) stands in for the real one
        ins = self.variant.inspector
        lasting = not self.planned or ins is None or all(arrays.is_frozen(args[p]) for p in ins.reads)
        self.settled = lasting and not compiler.noting()
        run = (runner_address("serial" if self.variant.sites is not None else "parallel"), 0)
        if plan is None:
            chunks = max(1, min(threads * PARTS if threads > 1 else 1, n))
            self.call = [*run, *ordered(head("cpu"), _n=n, _nchunks=chunks), *args, *extras]
            return
        self.private = [p in plan.private for _, p in self.variant.privates]
        slots = plan.slots
        copy = sum(b.nbytes for b, own in zip(self.bases, self.private, strict=True) if own)
        if copy * slots > CACHED_PRIVATE_BYTES:
            slots = min(slots, max(CACHED_SLOTS, CACHED_PRIVATE_BYTES // copy))
        if copy * slots > PRIVATE_BYTES:  # fewer copies, but never fewer than today's one per thread
            slots = max(1, min(slots, max(threads, PRIVATE_BYTES // copy)))
        self.slots = slots
        padded = self.variant.sites is None
        self.buffers = [
            (_zeroed(slots, base, padded) if slots * base.nbytes <= KEPT_BUFFER_BYTES else None)
            if own
            else _no_buffer(base)
            for base, own in zip(self.bases, self.private, strict=True)
        ]
        chunks = max(1, min(threads, slots))
        values = {"_slots": slots, "_order": plan.order, "_segs": plan.segs, "_colours": plan.colours}
        # per colour, a count of groups done and a claim counter per chunk; zeroed by the launcher
        claims = runtime.counter_words(len(plan.colours) - 1, chunks)
        values["_claimed"] = self.claimed = np.zeros(claims, np.int64)
        self.call = [
            *run,
            *ordered(head("cpu", planned=True), _n=n, _nchunks=chunks, **values),
            *args,
            *extras,
        ]
