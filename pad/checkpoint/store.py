"""Snapshots of a loop's state: which arrays, which parts of them, copied while the step computes.

The state is found, not declared: it is every array the steps announce they overwrite (``will_write``) but
the buffers operations make for themselves (``tape.Context.scratch``: a halo exchange's messages). A
snapshot taken before step ``n`` starts a copy of each state array in the background (a thread on the host;
on a GPU a second stream, so the copy overlaps the step's kernels) and the write observer holds back the
first write to an array until its copy is done (on a GPU the compute stream waits for the copy's event; the
host does not). An array first overwritten after snapshots were taken is added to them, before the write,
with the value it still holds.

A whole snapshot that must be safe at once (``take_whole``: the steps after it are replayed, without the
observer) is one batch instead: one buffer and one copy of every state array into it (``_Gather``; on a GPU
one kernel launch in the compute stream's order), and one copy back to restore it.

A snapshot holds only what step ``n`` reads. When the first thing step ``n`` does to a state array is a
launch that overwrites a range of it without reading it (``y[i + c] = ...``, the kernel never reading
``y``: ``Variant.overwrites``), that range is left out. Whether it is, is known only when the launch comes;
the copy starts earlier, so it leaves out the range that the array's first touch left unread last time and,
when the launch comes, the observer copies what it does read after all, before the write. Anything but a
launch of this thread (an MPI operation, a task) may read every array it has not seen overwritten. Restoring
fills a left-out range with NaN, so a read pad did not see (plain NumPy code in the step reading a state array
before a launch overwrites it) shows as NaN in the gradient rather than as a wrong number.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pad import arrays, tape
from pad.parallel import LaunchAccess, LaunchRecord
from pad.tasks import unguarded

Hole = tuple[int, int]


def _root(a: Any) -> Any:
    """The array that owns ``a``'s memory (``a`` itself unless it is a view)."""
    while getattr(a, "base", None) is not None and hasattr(a.base, "shape"):
        a = a.base
    return a


def span(a: Any, offset: int | None, n: int) -> Hole | None:
    """The flat elements of ``a``'s root that ``a[offset : offset + n]`` covers, or None if not a plain range."""
    if offset is None or n < 1 or not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in "fc":
        return None
    if offset < 0 or offset + n > a.shape[0] or not a.flags.c_contiguous:
        return None
    root = _root(a)
    if not isinstance(root, np.ndarray) or root.dtype != a.dtype or not root.flags.c_contiguous:
        return None
    start, rem = divmod(arrays.address(a) - arrays.address(root), a.itemsize)
    if rem or start < 0 or start + a.shape[0] > root.size:
        return None
    return start + offset, start + offset + n


def _covers(outer: Hole | None, inner: Hole | None) -> bool:
    return inner is None or (outer is not None and outer[0] <= inner[0] and inner[1] <= outer[1])


class SaveError(OSError):
    """Writing to disk failed (a full disk, say). A resumable run's save: every rank raises it (``agreed``)
    and the directory still holds the previous save, if any. A snapshot of a disk or two-level schedule:
    the rank that wrote it raises it, and the loop removes its snapshot files."""

    def __init__(self, code: int, message: str, agreed: bool = False) -> None:
        super().__init__(code, message)
        self.agreed = agreed


# ---------------------------------------------------------------------------------------------- copies
class _Block:
    """A GPU copy in part of one allocation that a snapshot's copies share: no array object is made for it
    (a few microseconds of the host each, tens a snapshot) until its values are asked for."""

    __slots__ = ("dtype", "memory", "nbytes", "offset", "shape")

    def __init__(self, memory: Any, offset: int, shape: tuple, dtype: Any, nbytes: int) -> None:
        self.memory, self.offset, self.shape, self.dtype, self.nbytes = memory, offset, shape, dtype, nbytes

    @property
    def ptr(self) -> int:
        return int(self.memory.ptr) + self.offset

    def array(self) -> Any:
        import cupy

        return cupy.ndarray(self.shape, self.dtype, memptr=self.memory + self.offset)


class _Copy:
    """A copy of an array (less a hole) being made: ``before_write`` makes later writes to the source safe,
    ``result`` gives the copy once made."""

    def __init__(self, buffer: Any, future: concurrent.futures.Future | None = None, event: Any = None):
        self.buffer, self._future, self._event = buffer, future, event

    def before_write(self) -> None:
        if self._future is not None:
            self._future.result()
        elif self._event is not None:  # a GPU copy: the compute stream waits for it, the host does not
            import cupy

            cupy.cuda.get_current_stream().wait_event(self._event)

    def result(self) -> Any:
        if self._future is not None:
            self._future.result()
        elif self._event is not None:
            self._event.synchronize()
        return self.buffer


def _pack_into(out: Any, flat: Any, hole: Hole | None) -> None:
    """``out``: ``flat`` less ``hole``. Host copies run on the snapshot thread beside the step: NumPy's own
    copy, on one core, where a parallel one would start a second team of threads against the step's."""
    if hole is None:
        out[...] = flat
        return
    lo, hi = hole
    out[:lo] = flat[:lo]
    out[lo:] = flat[hi:]


ALIGNMENT = 256
"""Bytes to which copies sharing one allocation are aligned (CUDA's own allocations are)."""


def _aligned(a: Any, hole: Hole | None) -> int:
    """Bytes a copy of ``a`` less ``hole`` takes in an allocation shared with others."""
    size = a.size - (0 if hole is None else hole[1] - hole[0])
    return -(-size * a.itemsize // ALIGNMENT) * ALIGNMENT


class Copier:
    """Starts copies of state arrays that run beside the step: NumPy arrays on a thread (NumPy and pad's
    kernels release the GIL), CuPy arrays on a second stream after an event of the compute stream; other
    device arrays (numba's) are copied at once."""

    def __init__(self, spares: bool = True) -> None:
        self._keep_spares = spares
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._stream: Any = None
        self._spare: dict[tuple, list[Any]] = {}  # host buffers of dropped snapshots, reused
        self._lock = threading.Lock()
        self._depth, self._round = 0, None  # ``starting`` blocks open; their GPU copies' shared event
        self._arena: Any = None  # device memory reserved for the block's copies, and the bytes used
        self._used = 0

    @contextlib.contextmanager
    def starting(self, reserve: int = 0) -> Iterator[None]:
        """GPU copies started in the block (a snapshot's) wait for the compute stream once, share the event
        that marks them done and, given ``reserve`` bytes for them, one allocation: a snapshot of many small
        arrays costs one wait and one allocation, not one per array."""
        self._depth += 1
        if self._depth == 1 and reserve:
            import cupy

            self._arena, self._used = cupy.cuda.alloc(reserve), 0
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._arena = None
                if self._round is not None:
                    self._round.record(self._stream)
                    self._round = None

    def _reserved(self, shape: tuple, dtype: Any, nbytes: int) -> _Block | None:
        """Room for a copy of ``nbytes`` in the block's reserved memory (None: none is left)."""
        if self._arena is None or self._used + nbytes > self._arena.mem.size:
            return None
        block = _Block(self._arena, self._used, shape, dtype, nbytes)
        self._used += -(-nbytes // ALIGNMENT) * ALIGNMENT  # as ``_aligned`` counts it
        return block

    def _device_round(self) -> Any:
        """The event of this round's GPU copies (recorded when the round ends), the copy stream made to
        wait for the compute stream's work so far."""
        if self._round is None:
            import cupy

            if self._stream is None:
                self._stream = cupy.cuda.Stream(non_blocking=True)
            self._stream.wait_event(cupy.cuda.get_current_stream().record())
            self._round = cupy.cuda.Event(disable_timing=True)
        return self._round

    def start(self, a: Any, hole: Hole | None) -> _Copy:
        """Start copying ``a`` (a root array) less the flat range ``hole``."""
        size = a.size - (0 if hole is None else hole[1] - hole[0])
        if isinstance(a, np.ndarray):
            shape = a.shape if hole is None else (size,)
            out = self.buffer(shape, a.dtype)
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pad-snapshot")
            flat = a if hole is None else a.reshape(-1)
            return _Copy(out, future=self._pool.submit(_pack_into, out, flat, hole))
        if arrays.is_cupy(a):
            import cupy

            with self.starting():
                done = self._device_round()
                shape = a.shape if hole is None else (size,)
                nbytes = size * a.itemsize
                block = self._reserved(shape, a.dtype, nbytes) if arrays.c_contiguous(a) else None
                if block is None:
                    with self._stream:
                        out = cupy.empty(shape, a.dtype)
                        _pack_into(out, a if hole is None else a.reshape(-1), hole)
                    return _Copy(out, event=done)
                lo, hi = (0, 0) if hole is None else hole
                src, item = int(a.data.ptr), a.itemsize
                if lo:
                    arrays.device_copy(block.ptr, src, lo * item, self._stream)
                arrays.device_copy(block.ptr + lo * item, src + hi * item, (a.size - hi) * item, self._stream)
            return _Copy(block, event=done)
        return _Copy(arrays.copy(a))  # numba device arrays: no views for holes (``span`` gives none)

    def buffer(self, shape: tuple, dtype: Any) -> np.ndarray:
        """A host buffer: a dropped snapshot's of this shape (``recycle``), or a new one."""
        with self._lock:
            spare = self._spare.get((shape, np.dtype(dtype).str))
            if spare:
                return spare.pop()
        return np.empty(shape, dtype)

    def recycle(self, buffer: Any) -> None:
        """Keep a dropped snapshot's host buffer (one per shape) for the next copy of that shape."""
        if self._keep_spares and isinstance(buffer, np.ndarray) and buffer.base is None:
            with self._lock:
                kept = self._spare.setdefault((buffer.shape, buffer.dtype.str), [])
                if not kept:
                    kept.append(buffer)

    def spare_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for kept in self._spare.values() for b in kept)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            self._spare.clear()


class Saved:
    """One saved copy of a root array (less ``hole``), in memory or in a file; shared by every snapshot that
    holds that array's value."""

    __slots__ = ("copy", "dtype", "hole", "nbytes", "path", "shape")

    def __init__(self, copy: _Copy | None, shape: tuple, dtype: Any, hole: Hole | None, nbytes: int) -> None:
        self.copy, self.shape, self.dtype, self.hole, self.nbytes = copy, tuple(shape), dtype, hole, nbytes
        self.path: str | None = None

    def data(self) -> Any:
        """The saved values (waits for the copy); from the file if on disk."""
        if self.path is not None:
            return np.load(self.path, mmap_mode="r")
        assert self.copy is not None
        data = self.copy.result()
        return data.array() if isinstance(data, _Block) else data

    def restore_into(self, r: Any) -> None:
        block = self.copy.buffer if self.copy is not None and self.path is None else None
        if isinstance(block, _Block) and self.hole is None and arrays.c_contiguous(r):
            self.copy.before_write()  # type: ignore[union-attr]  # the current stream waits for the copy
            arrays.device_copy(int(r.data.ptr), block.ptr, block.nbytes)
            return
        data = self.data()
        if self.hole is None:
            arrays.assign(r, data)
            return
        lo, hi = self.hole
        flat = r.reshape(-1)  # a view: only C-contiguous roots get holes
        flat[:lo] = data[:lo]
        flat[hi:] = data[lo:]
        flat[lo:hi] = np.nan  # the next step overwrites it unread; a read pad did not see shows as NaN


# ---------------------------------------------------------------------------------------------- the store
class _Tally:
    """Bytes of the distinct copies the snapshots hold (one may be shared by several snapshots), counted as
    snapshots change rather than summed over them at every step: a loop holding a snapshot of every step
    would spend time quadratic in its steps on the sums."""

    def __init__(self) -> None:
        self._holders: dict[int, list] = {}  # id(saved) -> [saved, snapshots holding it, steps' among them]
        self.memory = self.disk = self.steps = 0  # distinct copies in memory, on disk, held by steps
        self.step_total = 0  # the sum of the steps' snapshots' sizes (a shared copy counted in each)
        self.largest = 0  # the largest snapshot of a step held so far

    def holds(self, saved: Saved) -> bool:
        return id(saved) in self._holders

    def add(self, saved: Saved, step: bool) -> None:
        entry = self._holders.setdefault(id(saved), [saved, 0, 0])
        if entry[1] == 0:
            if saved.path is None:
                self.memory += saved.nbytes
            else:
                self.disk += saved.nbytes
        if step and entry[2] == 0:
            self.steps += saved.nbytes
        entry[1] += 1
        entry[2] += step
        self.step_total += saved.nbytes if step else 0

    def remove(self, saved: Saved, step: bool) -> None:
        entry = self._holders[id(saved)]
        entry[1] -= 1
        entry[2] -= step
        self.step_total -= saved.nbytes if step else 0
        if step and entry[2] == 0:
            self.steps -= saved.nbytes
        if entry[1] == 0:
            del self._holders[id(saved)]
            if saved.path is None:
                self.memory -= saved.nbytes
            else:
                self.disk -= saved.nbytes


class _Batch(Saved):
    """A whole snapshot of every state array in one buffer, made by one operation (``_Gather.take``): held
    by its ``Snapshot`` as one copy until a copy of one array is asked for (``split``)."""

    __slots__ = ("address", "gather", "stream")

    def __init__(self, gather: _Gather, buffer: Any, stream: Any) -> None:
        super().__init__(_Copy(buffer), (gather.reserve,), np.uint8, None, gather.nbytes)
        self.gather, self.stream = gather, stream
        self.address = int(buffer.ptr) if stream is not None else buffer.__array_interface__["data"][0]

    def ordered(self) -> None:
        """Make work queued from now on in CuPy's current stream follow the copy (queued in the stream that
        was current when it was made; nothing to do if that is the current one, or on the host)."""
        if self.stream is None:
            return
        import cupy

        now = cupy.cuda.get_current_stream()
        if now.ptr != self.stream.ptr:
            now.wait_event(self.stream.record())

    def split(self) -> list[tuple[int, Saved]]:
        """A copy of each state array, each a part of this buffer."""
        g, buffer = self.gather, self.copy.buffer  # type: ignore[union-attr]
        event = None if self.stream is None else self.stream.record()  # the copy is done by then
        out = []
        for k, shape, dtype, offset, size in zip(g.keys, g.shapes, g.dtypes, g.offsets, g.sizes, strict=True):
            if event is None:
                part = _Copy(buffer[offset : offset + size].view(dtype).reshape(shape))
            else:
                part = _Copy(_Block(buffer, offset, shape, dtype, size), event=event)
            out.append((k, Saved(part, shape, dtype, None, size)))
        return out


class _Gather:
    """How a whole snapshot of the store's state arrays (all NumPy or all CuPy arrays, C-contiguous) is made
    and put back, each way one operation (``arrays.Segments``): their places in one buffer, worked out once
    for a set of state arrays (the store's ``version``). numba's device arrays (the CUDA simulator's) have
    none: their copies are made one by one (``Copier.start``)."""

    def __init__(self, version: int, keys: list[int], refs: list[weakref.ref], roots: list[Any]) -> None:
        self.version, self.keys, self.refs = version, keys, refs
        self.keyset = frozenset(keys)
        self.shapes = [tuple(r.shape) for r in roots]
        self.dtypes = [r.dtype for r in roots]
        self.sizes = [int(r.nbytes) for r in roots]
        self.offsets, self.reserve = [], 0
        for r in roots:
            self.offsets.append(self.reserve)
            self.reserve += _aligned(r, None)
        self.nbytes = sum(self.sizes)
        self.device = bool(roots) and arrays.is_cupy(roots[0])
        addresses = [arrays.address(r) for r in roots]
        self.segments = arrays.Segments(addresses, self.offsets, self.sizes, self.device)

    @staticmethod
    def fits(roots: list[Any]) -> bool:
        """Whether ``roots`` can be copied as one batch: C-contiguous NumPy arrays, or C-contiguous CuPy
        arrays of the current GPU (the kernel's)."""
        if not roots or len(roots) > arrays.MAX_SEGMENTS:
            return False
        if isinstance(roots[0], np.ndarray):
            return all(isinstance(r, np.ndarray) and r.flags.c_contiguous for r in roots)
        if not arrays.is_cupy(roots[0]):
            return False  # numba's device arrays
        import cupy

        here = cupy.cuda.runtime.getDevice()
        return all(arrays.is_cupy(r) and r.flags.c_contiguous and r.device.id == here for r in roots)

    def take(self, copier: Copier) -> _Batch:
        """Copy every state array into a new buffer (on a GPU, in the current stream's order)."""
        if self.device:
            import cupy

            batch = _Batch(self, cupy.cuda.alloc(self.reserve), cupy.cuda.get_current_stream())
        else:
            batch = _Batch(self, copier.buffer((self.reserve,), np.uint8), None)
        self.segments.gather(batch.address)
        return batch

    def roots(self) -> list[Any] | None:
        """The state arrays, or None if one has died or changed its shape since (the store has not purged it
        yet): the table is stale."""
        roots = [ref() for ref in self.refs]
        if any(r is None for r in roots) or [r.shape for r in roots] != self.shapes:  # type: ignore[union-attr]
            return None
        return roots


class Snapshot:
    """The copies of one snapshot by root (``Store.held[n]``), counted in the store's tally as they change:
    a copy per root, or one ``_Batch`` of the state arrays there were when it was taken and a copy per root
    of those found since. A batch is split into copies per root when one of its own is asked for or
    changed."""

    def __init__(self, tally: _Tally, step: bool) -> None:
        self._tally, self._step = tally, step
        self._saved: dict[int, Saved] = {}
        self.batch: _Batch | None = None
        self.nbytes = 0

    def hold(self, batch: _Batch) -> None:
        """Hold ``batch`` (the snapshot is empty)."""
        self.batch = batch
        self._count(batch)

    def _split(self, k: int) -> None:
        """Split the batch into copies per root if it holds root ``k``'s."""
        batch = self.batch
        if batch is None or k not in batch.gather.keyset:
            return
        self.batch = None
        self._forget(batch)
        for key, saved in batch.split():
            self._saved[key] = saved
            self._count(saved)

    def __contains__(self, k: int) -> bool:
        return k in self._saved or (self.batch is not None and k in self.batch.gather.keyset)

    def __getitem__(self, k: int) -> Saved:
        self._split(k)
        return self._saved[k]

    def get(self, k: int) -> Saved | None:
        self._split(k)
        return self._saved.get(k)

    def __setitem__(self, k: int, saved: Saved) -> None:
        self._split(k)
        old = self._saved.get(k)
        self._saved[k] = saved
        self._count(saved)
        if old is not None:
            self._forget(old)

    def pop(self, k: int) -> Saved:
        self._split(k)
        saved = self._saved.pop(k)
        self._forget(saved)
        return saved

    def _count(self, saved: Saved) -> None:
        self._tally.add(saved, self._step)
        self.nbytes += saved.nbytes
        if self._step:
            self._tally.largest = max(self._tally.largest, self.nbytes)

    def _forget(self, saved: Saved) -> None:
        self._tally.remove(saved, self._step)
        self.nbytes -= saved.nbytes

    def release(self) -> list[Saved]:
        """Let every copy go from the tally (the snapshot is dropped); returns them."""
        copies = list(self._saved.values()) + ([] if self.batch is None else [self.batch])
        for saved in copies:
            self._forget(saved)
        self._saved.clear()
        self.batch = None
        return copies


class Store:
    """The snapshots of one loop: the state arrays found so far and, per step, a copy of each.

    Snapshots live in memory or (``disk``) in files under ``folder``. ``spares``: keep the buffers of
    dropped snapshots for the next ones (not under a memory budget, which they would eat into).
    ``Store.take`` starts the copies;
    ``begin_step``/``end_step`` bracket the step run after it, during which the write observer (``capture``)
    settles what the snapshot leaves out.
    """

    def __init__(
        self, ctx: tape.Context, folder: Callable[[], str] | None = None, spares: bool = True
    ) -> None:
        self._ctx = ctx
        self._folder = folder  # gives the folder for snapshots on disk (made on first use)
        self._roots: dict[int, weakref.ref] = {}
        self.held: dict[int, Snapshot] = {}
        self._tally = _Tally()
        self.on_disk: set[int] = set()
        self._dead: list[int] = []  # roots that died since the last purge
        self._copier = Copier(spares)
        self._files = 0
        self._inflight: dict[int, list[_Copy]] = {}  # root -> copies still reading it
        self._predicted: dict[int, Hole | None] = {}  # root -> the range its last first touch left unread
        # the snapshot whose step is running and the roots whose copies left out a guessed range
        self._owed: int | None = None
        self._unsettled: set[int] = set()
        self._trims: dict[int, Hole] = {}  # roots the step overwrote unread whose copies were made whole
        self._read: set[int] = set()
        self._touched: set[int] = set()
        self._blind = False
        self._thread = threading.get_ident()
        self._lock = threading.RLock()
        self.joined = 0  # state arrays found so far (a step that finds one does more than its replays would)
        # changes when the state arrays or the ranges their first touches leave unread do; what is worked
        # out from them is kept for it: their bytes and a snapshot's now, and how to copy them in one batch
        self._version = 0
        self._measured = (-1, 0, 0)
        self._gather: tuple[int, _Gather | None] = (-1, None)
        self._restoring = False  # ``restore`` is announcing its writes: the observer has nothing to do

    # -- roots ---------------------------------------------------------------------------------------
    def _forget(self, key: int) -> Callable[[Any], None]:
        """A temporary array the step wrote has died: its copies go at the next purge. Not at once: the
        callback runs whenever the garbage collector does, also inside this store's loops over its dicts,
        which must not change size under them (an 8-rank LULESH gradient failed so)."""

        def gone(_: Any) -> None:
            self._dead.append(key)

        return gone

    def _purge(self) -> None:
        while self._dead:
            key = self._dead.pop()
            self._roots.pop(key, None)
            self._predicted.pop(key, None)
            self._version += 1
            self._unsettled.discard(key)
            for copies in self._inflight.pop(key, []):
                copies.result()
            for snap in self.held.values():
                if key in snap:
                    self._discard([snap.pop(key)])

    def _known(self, r: Any) -> bool:
        ref = self._roots.get(id(r))
        return ref is not None and ref() is r

    def roots(self) -> list[Any]:
        self._purge()
        return [r for ref in list(self._roots.values()) if (r := ref()) is not None]

    def _sizes(self) -> tuple[int, int]:
        """The state arrays' bytes, and those a snapshot of them taken now holds (less what their first
        touches left unread last time), worked out once for each version of them."""
        with self._lock:
            self._purge()
            if self._measured[0] != self._version:
                total = now = 0
                for k, ref in list(self._roots.items()):
                    r, hole = ref(), self._predicted.get(k)
                    if r is not None:
                        total += r.nbytes
                        now += r.nbytes - (0 if hole is None else (hole[1] - hole[0]) * r.itemsize)
                self._measured = (self._version, total, now)
            return self._measured[1], self._measured[2]

    def state_bytes(self) -> int:
        return self._sizes()[0]

    def _gathered(self) -> _Gather | None:
        """How to copy the state arrays in one batch, worked out once for each version of them (None: they
        do not allow it)."""
        version, gather = self._gather
        if version != self._version:
            live = [(k, ref, r) for k, ref in list(self._roots.items()) if (r := ref()) is not None]
            roots = [r for _, _, r in live]
            keys, refs = [k for k, _, _ in live], [ref for _, ref, _ in live]
            gather = _Gather(self._version, keys, refs, roots) if _Gather.fits(roots) else None
            self._gather = (self._version, gather)
        return gather

    # -- copies --------------------------------------------------------------------------------------
    def _start(self, r: Any, hole: Hole | None, disk: bool) -> Saved:
        nbytes = (r.size - (0 if hole is None else hole[1] - hole[0])) * r.itemsize
        saved = Saved(self._copier.start(r, hole), r.shape, r.dtype, hole, nbytes)
        self._inflight.setdefault(id(r), []).append(saved.copy)  # type: ignore[arg-type]
        if disk:
            self._to_disk(saved, r)
        return saved

    def _to_disk(self, saved: Saved, r: Any | None) -> None:
        """Write ``saved``'s copy to a file and let the memory go (waits for the copy)."""
        assert self._folder is not None
        folder = self._folder()
        self._files += 1
        path = os.path.join(folder, f"{self._files}.npy")
        data = arrays.to_host(saved.data())
        try:
            np.save(path, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(path)
            message = f"pad.checkpoint: writing a snapshot to {folder} failed: {exc.strerror}"
            raise SaveError(exc.errno or errno.EIO, message) from None
        if r is not None:
            copies = self._inflight.get(id(r), [])
            if saved.copy in copies:
                copies.remove(saved.copy)
        self._copier.recycle(saved.copy.buffer if saved.copy is not None else None)
        saved.copy, saved.path = None, path

    def _before_write(self, r: Any) -> None:
        """Make a write to ``r`` safe: every copy still reading it has read it."""
        for copy in self._inflight.pop(id(r), []):
            copy.before_write()

    # -- taking, restoring ---------------------------------------------------------------------------
    def _snapshot(self, n: int) -> Snapshot:
        """A new, empty snapshot ``n`` (the final state's copy: -1), held."""
        snap = self.held[n] = Snapshot(self._tally, step=n >= 0)
        return snap

    def take_whole(self, n: int, disk: bool = False) -> None:
        """Snapshot ``n`` of every state array, whole and made safe for any write at once, so that the steps
        after it may run without the write observer (replays). In memory, where the state arrays allow it
        (``_Gather``), one operation makes it: on a GPU one kernel launch, in the current stream's order."""
        with self._lock:
            self._purge()
            gather = None if disk else self._gathered()
            if gather is None:
                self.take(n, disk=disk, step_follows=False)
            else:
                self._snapshot(n).hold(gather.take(self._copier))
            self.settle()

    def take(self, n: int, disk: bool = False, step_follows: bool = True) -> None:
        """Start snapshot ``n`` of every state array. ``step_follows``: step ``n`` runs next, inside
        ``begin_step``/``end_step``, and the copies may leave out what it overwrites unread."""
        with self._lock:
            self._purge()
            roots = [(k, r) for k, ref in list(self._roots.items()) if (r := ref()) is not None]
            holes = {k: self._predicted.get(k) if step_follows else None for k, _ in roots}
            # copies to disk are waited for one by one (``_to_disk``): only those in memory share a round
            reserve = 0 if disk else sum(_aligned(r, holes[k]) for k, r in roots if arrays.is_cupy(r))
            snap = self._snapshot(n)
            with contextlib.nullcontext() if disk else self._copier.starting(reserve):
                for k, r in roots:
                    snap[k] = self._start(r, holes[k], disk)
                    if holes[k] is not None:
                        self._unsettled.add(k)
            if disk:
                self.on_disk.add(n)
            if step_follows:
                self._owed = n

    def settle(self) -> None:
        """Make every copy started so far safe for any write from now on (on a GPU the compute stream waits
        for the copies; the host does not), so that steps may run without the write observer (replays)."""
        with self._lock:
            for copies in self._inflight.values():
                for copy in copies:
                    copy.before_write()
            self._inflight.clear()

    def quiet(self) -> bool:
        """Whether the next step's writes need nothing of the write observer: no snapshot waits for the step
        to settle what it leaves out, and no copy is still reading a state array."""
        with self._lock:
            return self._owed is None and not any(self._inflight.values())

    def begin_step(self) -> None:
        self._read, self._touched, self._blind = set(), set(), False
        self._thread = threading.get_ident()

    def end_step(self) -> None:
        """The step after a snapshot has run: what it never wrote is copied whole."""
        with self._lock:
            self._purge()
            n, self._owed = self._owed, None
            if n is not None and n in self.held:
                for k in list(self._unsettled):
                    ref = self._roots.get(k)
                    r = ref() if ref is not None else None
                    if r is not None:
                        self._replace(n, k, r, None)
                        self._predicted[k] = None
                        self._version += 1
                for k, hole in self._trims.items():
                    self._trim(n, k, hole)
            self._unsettled.clear()
            self._trims.clear()

    def _trim(self, n: int, k: int, hole: Hole) -> None:
        """Leave ``hole`` out of snapshot ``n``'s whole copy of root ``k`` (made before the step knew it)."""
        saved = self.held[n].get(k)
        if saved is None or saved.hole is not None or len(saved.shape) == 0:
            return
        whole = saved.data()
        if not isinstance(whole, np.ndarray):
            return
        flat = np.asarray(whole).reshape(-1)
        if not 0 <= hole[0] < hole[1] <= flat.size:
            return
        part = Saved(
            _Copy(np.concatenate((flat[: hole[0]], flat[hole[1] :]))), saved.shape, saved.dtype, hole, 0
        )
        part.nbytes = part.copy.buffer.nbytes  # type: ignore[union-attr]
        if n in self.on_disk:
            self._to_disk(part, None)
        self.held[n][k] = part
        self._discard([saved])

    def _replace(self, n: int, k: int, r: Any, hole: Hole | None) -> None:
        """Snapshot ``n``'s copy of root ``k`` becomes one of ``r`` less ``hole`` (``r`` still unchanged)."""
        old = self.held[n].get(k)
        disk = n in self.on_disk
        self.held[n][k] = self._start(r, hole, disk)
        if old is not None:
            self._discard([old])

    def watch(self, rec: Any) -> None:
        """Shown each record of the running step: anything but a launch of this thread may read anything."""
        if threading.get_ident() != self._thread:
            self._blind = True
        rec = unguarded(rec)
        if not isinstance(rec, LaunchRecord):
            self._blind = True

    def capture(self, targets: list[Any], access: Any) -> None:
        """Observer of writes: before ``targets`` change, copies reading them are done, new state arrays
        join every held snapshot, and the running step's snapshot gets what this first write reads."""
        if self._restoring:  # its own roots, outside any step: ``restore`` waits for the copies reading them
            return
        with self._lock:
            self._purge()
            if not isinstance(access, LaunchAccess) or threading.get_ident() != self._thread:
                self._blind = True
                holes: dict[int, Hole] = {}
            else:
                holes = self._launch_holes(access)
            for a in targets:
                r = _root(a)
                k = id(r)
                if self._ctx.is_scratch(r):  # an operation's own buffer (a message's): no state
                    continue
                if not self._known(r):
                    self._join(r, holes.get(k))
                elif self._owed is not None and k not in self._touched:
                    self._first_write(k, r, holes.get(k))
                self._touched.add(k)
                self._before_write(r)

    def _first_write(self, k: int, r: Any, actual: Hole | None) -> None:
        """The running step's first write to state array ``r``, which leaves ``actual`` unread: its snapshot
        must hold the rest. A copy that guessed a larger hole is made again now, before the write."""
        saved = self.held[self._owed][k]  # type: ignore[index]
        if k in self._unsettled:
            self._unsettled.discard(k)
            if not _covers(actual, saved.hole):
                self._replace(self._owed, k, r, actual)  # type: ignore[arg-type]
        elif actual is not None and saved.hole is None:
            self._trims[k] = actual
        if self._predicted.get(k) != actual:
            self._predicted[k] = actual
            self._version += 1

    def _launch_holes(self, access: LaunchAccess) -> dict[int, Hole]:
        """The ranges of state arrays that this launch, their first touch in the step, overwrites unread."""
        variant, args = access.variant, access.args
        for p in variant.loaded:  # reads first: a launch may read and overwrite views of one array
            self._read.add(id(_root(args[p])))
        if self._blind:
            return {}
        holes: dict[int, Hole] = {}
        for p in sorted(variant.stored - variant.loaded):
            k = id(_root(args[p]))
            if k in self._read or k in holes:
                continue
            where = span(args[p], variant.overwrites.get(p), access.n)
            if where is None:
                self._read.add(k)  # written in a way pad cannot bound (a[j] += v counts as a read)
            else:
                holes[k] = where
        for k in holes:
            self._read.add(k)  # later writes in the step are not first touches
        return holes

    def _join(self, r: Any, hole: Hole | None) -> None:
        """``r`` is first overwritten now: every held snapshot gets its current value."""
        self.joined += 1
        k = id(r)
        try:
            self._roots[k] = weakref.ref(r, self._forget(k))
        except TypeError:  # an array type without weak references: not state (as before)
            return
        self._predicted[k] = hole if self._owed is not None else None
        self._version += 1
        self._touched.add(k)
        shared: dict[bool, Saved] = {}
        for n, snap in self.held.items():
            if n == self._owed:
                snap[k] = self._start(r, hole, n in self.on_disk)
                continue
            disk = n in self.on_disk
            if disk not in shared:
                shared[disk] = self._start(r, None, disk)
            snap[k] = shared[disk]

    def adopt(self, r: Any) -> None:
        """Make ``r`` a state array (a resumed run's, before its steps announce it)."""
        if not self._known(r):
            self._roots[id(r)] = weakref.ref(r, self._forget(id(r)))
            self._version += 1

    def put(self, n: int, r: Any, data: np.ndarray, hole: Hole | None) -> None:
        """Give snapshot ``n`` the saved ``data`` of state array ``r`` (a resumed run's)."""
        value = data if isinstance(r, np.ndarray) else arrays.like(r, data)
        snap = self.held[n] if n in self.held else self._snapshot(n)
        snap[id(r)] = Saved(_Copy(value), r.shape, r.dtype, hole, int(value.nbytes))

    def holds(self, n: int) -> bool:
        return n in self.held

    def positions(self) -> list[int]:
        return sorted(k for k in self.held if k >= 0)

    def restore(self, n: int, drop: bool) -> None:
        """Put the state back as it was at step ``n`` (and forget that snapshot if ``drop``): a batch in one
        operation (while its state arrays live and keep their shapes), other copies array by array."""
        with self._lock:
            self._purge()
            snap = self.held[n]
            batch = snap.batch
            roots = [] if batch is None else batch.gather.roots()
            if roots is None:  # one of the batch's arrays died or changed: array by array, all of them
                batch, roots = None, []
            pairs: list[tuple[Any, Saved]] = []
            if batch is None or batch.gather.version != self._version:  # state arrays found since
                skip = frozenset() if batch is None else batch.gather.keyset
                for k, ref in list(self._roots.items()):
                    r = ref()
                    if r is not None and k not in skip and k in snap:
                        pairs.append((r, snap[k]))
        for r, saved in pairs:
            if tuple(r.shape) != saved.shape:
                raise ValueError(
                    f"pad.checkpoint: an array of the loop state changed shape from {saved.shape} to "
                    f"{r.shape}; a checkpointed step must keep the shapes of its arrays"
                )
        targets = roots + [r for r, _ in pairs]
        self._restoring = True
        try:
            self._ctx.will_write(targets)
        finally:
            self._restoring = False
        if self._inflight:
            for r in targets:
                self._before_write(r)
        if batch is not None:
            batch.ordered()
            batch.gather.segments.scatter(batch.address)
        for r, saved in pairs:
            saved.restore_into(self._ctx.writable(r))  # arrays under differentiation are read-only
        if drop:
            self.drop(n)

    def drop(self, n: int) -> None:
        with self._lock:
            if n == self._owed:  # taken for a step that will not run from it (a schedule given up)
                self._owed = None
                self._unsettled.clear()
            self.on_disk.discard(n)
            self._discard(self.held.pop(n).release())

    def _discard(self, saved: list[Saved]) -> None:
        """Free copies no held snapshot shares any more (their files too)."""
        for s in saved:
            if self._tally.holds(s):
                continue
            if s.path is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(s.path)
            elif s.copy is not None:
                buffer = s.copy.result()
                for copies in self._inflight.values():
                    if s.copy in copies:
                        copies.remove(s.copy)
                self._copier.recycle(buffer)

    @contextlib.contextmanager
    def preserved(self) -> Iterator[None]:
        """Put the state back as it is now when the block ends (the reverse pass leaves primals as found)."""
        final = -1
        self.take(final, step_follows=False)
        yield
        self.restore(final, drop=True)

    # -- accounting ----------------------------------------------------------------------------------
    def spare_bytes(self) -> int:
        return self._copier.spare_bytes()

    def memory_bytes(self) -> int:
        """Bytes the snapshots (the final state's copy included) hold in memory, and spare buffers."""
        return self._tally.memory + self._copier.spare_bytes()

    def snapshot_bytes(self) -> int:
        """Bytes of the snapshots of steps (the final state's copy left out), in memory and on disk."""
        return self._tally.steps

    def steps_total(self) -> int:
        """The sizes of the snapshots of steps added up (a copy two of them share counted twice)."""
        return self._tally.step_total

    def snapshot_count(self) -> int:
        return len(self.held) - (-1 in self.held)

    def largest_snapshot(self) -> int:
        """Bytes of the largest snapshot of a step held so far, or of one taken now (what the state arrays
        known so far less what their first touches left unread last time), if larger."""
        return max(self._tally.largest, self._sizes()[1])

    def disk_bytes(self) -> int:
        return self._tally.disk

    def close(self) -> None:
        """Wait for the copies in flight and let every snapshot go."""
        with self._lock:
            for copies in self._inflight.values():
                for c in copies:
                    with contextlib.suppress(Exception):
                        c.result()
            self._inflight.clear()
            for n in list(self.held):
                self.drop(n)
        self._copier.close()
