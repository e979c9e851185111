"""A replayed step's CPU work run by one compiled function, without the Python between its launches.

A ``pad.graph`` replay redoes its record's entries in order (pad/replay.py). Consecutive quiet entries that
are CPU launches, copies of host arrays and fills of them become one ``Program``: a table of operations
that ``_drive``, compiled once for every program, runs in order. A launch's operation is its chunks'
function and a copy of the record of arguments its launcher packs (``cpu.Launch.capture``); its private
buffers' sums, the copies and the fills are operations on memory by address. Each run of a program first
asks each launch for its plan (validated against its index arrays, each array once in a replay:
pad/parallel/plans.py) and the thread count, capturing again a launch bound anew, then drives the table,
then tells the plans which index arrays the launches stored into. A launch that stores into an index array
a later launch's plan was made from ends a program, so that the later one is planned after it ran. The table
runs in one parallel region, its threads passing from one operation to the next by counting what is done,
as a planned launch's threads pass from one colour to the next (pad/kernel/emit.py).

The Python a replay spends per entry, a few microseconds warm and more once the launches have flushed the
caches, it spends per program (docs/benchmarks.md, "One compiled driver per replay").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import njit, prange

from pad import arrays, replay
from pad.kernel import checks, runtime
from pad.parallel import cpu, plans

__all__ = ["Program", "grouped"]

LAUNCH, SUM, COPY, FILL, NOTHING = range(5)
"""The operations of a program's table, a row of ``WIDTH`` int64 each:

- LAUNCH: chunks' function, record, chunks, claim counters' address and count (zeroed first);
- SUM: array's address and size, private buffer's address, rows, row length, dtype (``SUMMED``);
- COPY: destination, source, bytes, whether in parallel;
- FILL (with zeros): destination, bytes, whether in parallel;
- NOTHING: a launch's row for a private buffer it does not have as bound now."""
WIDTH = 8
ENABLED = True  # False: replays redo each entry from Python (to compare the two)
BLOCK_BYTES = 1 << 16  # what one thread copies or fills at a time

# runtime's intrinsics, typed as numba calls them (numba's typing context first: mypy would want it here)
_array_at: Any = runtime.array_at
_address_of: Any = runtime.address_of
_call_chunk: Any = runtime.call_chunk
_nonnegative: Any = runtime.nonnegative
_claim: Any = runtime.claim
_finish: Any = runtime.finish
_wait_for: Any = runtime.wait_for
_ticks: Any = runtime.ticks


@njit(cache=True)
def _copy(dst: np.ndarray, src: np.ndarray, lo: int, hi: int) -> None:
    """``dst[lo:hi] = src[lo:hi]`` (a loop LLVM makes a ``memcpy``). A function of its own: in ``_drive``,
    numba takes arrays made from addresses for arrays of its own, and drops a slice store nothing reads."""
    for j in range(lo, hi):
        j = _nonnegative(j)  # no wrap-around of negative indices: LLVM then copies it whole
        dst[j] = src[j]


@njit(cache=True)
def _zero(dst: np.ndarray, lo: int, hi: int) -> None:
    """``dst[lo:hi] = 0`` (a ``memset``), as ``_copy``."""
    for j in range(lo, hi):
        dst[_nonnegative(j)] = 0


@njit(cache=True)
def _sum(out: np.ndarray, rows: np.ndarray, stride: int) -> None:
    """Add the rows of ``stride`` elements (the first ``len(out)`` of each) into ``out``, zeroing them; each
    element summed in the rows' order, as ``cpu._add_rows`` sums it."""
    for r in range(rows.shape[0] // stride):
        for j in range(out.shape[0]):
            out[j] += rows[r * stride + j]
            rows[r * stride + j] = 0


SUMMED = (np.float64, np.float32, np.int64, np.int32)  # the dtypes of SUM's arrays, by the row's code


@njit(cache=True)
def _units(op: np.ndarray) -> int:
    """How many parts the operation ``op`` runs in: a launch's chunks, a parallel copy's or fill's blocks."""
    if op[0] == LAUNCH:
        return op[3]
    if op[0] == COPY and op[4]:
        return (op[3] + BLOCK_BYTES - 1) // BLOCK_BYTES
    if op[0] == FILL and op[3]:
        return (op[2] + BLOCK_BYTES - 1) // BLOCK_BYTES
    return 1


@njit(cache=True)
def _sum_row(op: np.ndarray) -> None:
    """A SUM row: the private buffer's rows added into its array."""
    size, words = op[2], op[4] * op[5]
    if op[6] == 0:
        _sum(_array_at(op[1], size, np.float64), _array_at(op[3], words, np.float64), op[5])
    elif op[6] == 1:
        _sum(_array_at(op[1], size, np.float32), _array_at(op[3], words, np.float32), op[5])
    elif op[6] == 2:
        _sum(_array_at(op[1], size, np.int64), _array_at(op[3], words, np.int64), op[5])
    else:
        _sum(_array_at(op[1], size, np.int32), _array_at(op[3], words, np.int32), op[5])


@njit(cache=True)
def _run_part(op: np.ndarray, u: int) -> None:
    """Part ``u`` of the operation ``op`` (``_units``)."""
    kind = op[0]
    if kind == LAUNCH:
        words = _array_at(op[2], 1, np.int64)  # as in cpu._run_chunks
        _call_chunk(op[1], _address_of(words), np.int64(u))
    elif kind == SUM:
        _sum_row(op)
    elif kind == COPY:
        dst, src = _array_at(op[1], op[3], np.uint8), _array_at(op[2], op[3], np.uint8)
        if op[4]:
            _copy(dst, src, u * BLOCK_BYTES, min(op[3], (u + 1) * BLOCK_BYTES))
        else:
            _copy(dst, src, 0, op[3])
    elif kind == FILL:
        dst = _array_at(op[1], op[2], np.uint8)
        if op[3]:
            _zero(dst, u * BLOCK_BYTES, min(op[2], (u + 1) * BLOCK_BYTES))
        else:
            _zero(dst, 0, op[2])


@njit(cache=True)
def _work(table: np.ndarray, counters: np.ndarray, w: int, workers: int, stamps: np.ndarray) -> None:
    """Worker ``w``'s run through the table. Each row's parts are shared out among the workers (share ``w`` of a
    launch's chunks is worker ``w``'s, whose elements it touched in the launch before) and claimed
    share by share through a counter: a worker claims its own share's, then what is left of the others'; it
    counts the parts it ran done, and waits until the row's are all done before the next row. A worker can
    thus run the whole table alone: one started late, or never, holds none back. With ``stamps`` (not empty:
    ``PROFILE``) it stamps each row as it enters it, leaves its parts and leaves its wait."""
    profiled = stamps.shape[0] > 0
    for k in range(table.shape[0]):
        op = table[k]
        if op[0] == NOTHING:
            continue
        if profiled:
            stamps[w, k, 0] = _ticks()
        units, done = _units(op), runtime.done_counter(k, workers)
        ran = 0
        for v in range(workers):
            s = (w + v) % workers
            first = s * units // workers
            size = (s + 1) * units // workers - first
            share = runtime.claim_counter(k, workers, s)
            while counters[share] < size:  # a load first: the others' shares are mostly taken
                j = _claim(counters, share)
                if j >= size:
                    break
                _run_part(op, first + j)
                ran += 1
        if ran:
            _finish(counters, done, ran)
        if profiled:
            stamps[w, k, 1] = _ticks()
        _wait_for(counters, done, units)
        if profiled:
            stamps[w, k, 2] = _ticks()


@njit(parallel=True, cache=True)
def _drive(table: np.ndarray, counters: np.ndarray, workers: int, stamps: np.ndarray) -> None:
    """Run a program's operations in order (``LAUNCH`` ...) in one parallel region of ``workers`` (numba's
    thread count: a thread each): they pass from row to row by counting (``_work``), where a region per row
    would cost its start on every thread. ``counters``: ``runtime.counter_words`` of them, a run of parts a
    row; ``stamps``: ``_work``'s."""
    for k in range(table.shape[0]):
        if table[k, 0] == LAUNCH:
            _zero(_array_at(table[k, 4], table[k, 5], np.int64), 0, table[k, 5])
    counters[:] = 0
    for w in prange(workers):
        _work(table, counters, w, workers, stamps)


PROFILE: list[tuple[Program, np.ndarray]] | None = None
"""Where a list, each program run appends itself and its rows' stamps (``runtime.ticks``), an int64 array
``(workers, rows, 3)``: as each worker entered the row, left its parts and left the row's wait (zeros for
the rows a launch leaves empty). ``scripts/bench_lulesh.py --rows`` sums them per row: where each row's
threads wait for the others."""
_NO_STAMPS = np.zeros((0, 0, 3), np.int64)


def _row(*words: int) -> np.ndarray:
    row = np.zeros(WIDTH, np.int64)
    row[: len(words)] = words
    return row


def _launch_of(entry: Any) -> cpu.Launch | None:
    """The CPU launch a record's entry redoes, if it is one (``pad.parallel._perform`` bound to it)."""
    if isinstance(entry, functools.partial) and len(entry.args) > 1 and isinstance(entry.args[1], cpu.Launch):
        return entry.args[1]
    return None


def _host(*a: Any) -> bool:
    return all(isinstance(x, np.ndarray) and x.flags.c_contiguous for x in a)


def _memory_op(entry: Any) -> np.ndarray | None:
    """The operation of a copy or fill of host arrays (``replay.done``), if the entry is one."""
    if not isinstance(entry, functools.partial):
        return None
    if entry.func is arrays.assign and len(entry.args) == 2 and _host(*entry.args):
        dst, src = entry.args
        if dst.dtype == src.dtype and dst.shape == src.shape:
            return _row(
                COPY, dst.ctypes.data, src.ctypes.data, dst.nbytes, dst.nbytes >= arrays.PARALLEL_BYTES
            )
    if entry.func is arrays.zero and len(entry.args) == 1 and _host(*entry.args):
        a = entry.args[0]
        return _row(FILL, a.ctypes.data, a.nbytes, a.nbytes >= arrays.PARALLEL_BYTES)
    return None


class Program:
    """Consecutive entries of a record run by ``_drive``: launches (each with a row for the launch and one
    per private buffer), copies and fills. ``entries``: the entries it stands for, which run as they are
    where a launch bound anew cannot be driven."""

    def __init__(self, entries: list[Callable[[], Any]]) -> None:
        self.entries = entries
        self.launches: list[tuple[int, cpu.Launch]] = []  # (first row, launch)
        rows: list[np.ndarray] = []
        for entry in entries:
            launch = _launch_of(entry)
            if launch is None:
                op = _memory_op(entry)
                assert op is not None
                rows.append(op)
                continue
            self.launches.append((len(rows), launch))
            rows += [_row(NOTHING)] * (1 + len(launch.bases))
        self.table = np.stack(rows)
        self.counters = np.zeros(0, np.int64)  # ``_drive``'s, for the thread count last run on
        self.written: list[np.ndarray | None] = [None] * len(self.launches)  # the captures the rows hold
        self.stored = [a for _, launch in self.launches for a in launch.stored]

    def __call__(self) -> None:
        threads = numba.get_num_threads()
        for k, (first, launch) in enumerate(self.launches):
            launch.prepare(threads)
            if launch.captured is None or launch.captured is not self.written[k]:
                self.written[k] = self._capture(first, launch)
                if self.written[k] is None:
                    for entry in self.entries:  # run as recorded
                        entry()
                    return
        words = runtime.counter_words(len(self.table), threads)
        if self.counters.size != words:
            self.counters = np.zeros(words, np.int64)
        stamps = _NO_STAMPS if PROFILE is None else np.zeros((threads, len(self.table), 3), np.int64)
        try:
            _drive(self.table, self.counters, threads, stamps)
        except BaseException:
            for _, launch in self.launches:
                launch.threads = 0  # bound anew at the next call: the kept buffers may hold part of a sum
            raise
        if PROFILE is not None:
            PROFILE.append((self, stamps))
        if self.stored:
            plans.forget(self.stored)

    def _capture(self, first: int, launch: cpu.Launch) -> np.ndarray | None:
        """Write ``launch``'s rows from its capture, returned (None where it cannot be driven as bound now)."""
        box = launch.capture()
        sums = launch.sums()
        if box is None or not all(b.dtype.type in SUMMED and _host(b, s) for b, s in sums):
            return None
        claimed = launch.claimed
        count = 0 if claimed is None else claimed.shape[0]
        self.table[first] = _row(LAUNCH, *box[1:4], 0 if claimed is None else claimed.ctypes.data, count)
        self.table[first + 1 : first + 1 + len(launch.bases)] = _row(NOTHING)
        for k, (base, buffer) in enumerate(sums, first + 1):
            rows = buffer.reshape(buffer.shape[0], -1)
            code = SUMMED.index(base.dtype.type)
            self.table[k] = _row(SUM, base.ctypes.data, base.size, rows.ctypes.data, *rows.shape, code)
        return box


def grouped(
    entries: list[Callable[[], Any]], quiet: list[bool]
) -> tuple[list[Callable[[], Any]], list[bool]]:
    """``entries`` (with their ``quiet`` flags) with each run of two or more consecutive quiet ones that a
    ``Program`` can drive made one; none under PAD_DEBUG, whose launches check their accesses one by one."""
    if checks.enabled() or not ENABLED:
        return entries, quiet
    out: list[Callable[[], Any]] = []
    out_quiet: list[bool] = []
    run: list[Callable[[], Any]] = []
    stored: set[int] = set()  # index arrays the run's launches store into

    def close() -> None:
        if len(run) >= 2:
            out.append(Program(list(run)))
            out_quiet.append(True)
        else:
            out.extend(run)
            out_quiet.extend([True] * len(run))
        run.clear()
        stored.clear()

    for entry, q in zip(entries, quiet, strict=True):
        launch = _launch_of(entry)
        drivable = launch.drivable if launch is not None else _memory_op(entry) is not None
        if not (q and drivable):
            close()
            out.append(entry)
            out_quiet.append(q)
            continue
        if launch is not None:
            ins = launch.variant.inspector
            if ins is not None and any(id(launch.args[p]) in stored for p in ins.reads):
                close()
            stored.update(id(a) for a in launch.stored)
        run.append(entry)
    close()
    return out, out_quiet


replay.HOST_PASSES.append(grouped)
