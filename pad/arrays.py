"""The array libraries pad works with, and the few operations it needs from each.

Host arrays are NumPy arrays. Device arrays are CuPy arrays or numba CUDA device arrays (real, or the CUDA
simulator's). Everything here dispatches on the array's own type, so ``import pad`` never imports CuPy or
numba's CUDA support: they are imported the first time a device array is met.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

import numpy as np
from numba import njit, prange

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still calls np.row_stack, which NumPy 2.5 removed
    np.row_stack = np.vstack  # type: ignore[attr-defined]


def is_device(a: Any) -> bool:
    """Whether ``a`` is a GPU array (it exposes ``__cuda_array_interface__``, or is the CUDA simulator's)."""
    return not isinstance(a, np.ndarray) and (
        hasattr(a, "__cuda_array_interface__") or type(a).__name__ == "FakeCUDAArray"
    )


def is_cupy(a: Any) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


def library(a: Any) -> str:
    """``"numpy"``, ``"cupy"`` or ``"numba"`` (numba device arrays); names the kind of memory in errors."""
    if isinstance(a, np.ndarray):
        return "numpy"
    return "cupy" if is_cupy(a) else "numba"


_byte_bounds = getattr(np.lib, "array_utils", np).byte_bounds  # NumPy 2 moved it


class Place:
    """Where an array's memory lies and who owns it, worked out once per array object (``place``): a launch
    asks this of each of its arrays, and the array libraries answer through ``__array_interface__`` and
    ``__cuda_array_interface__``, a new dict each time."""

    __slots__ = ("address", "extent", "layout", "owner", "ref", "shape", "strides")

    def __init__(self, a: Any, ref: Any) -> None:
        self.ref, self.shape, self.strides = ref, a.shape, a.strides
        if isinstance(a, np.ndarray):
            self.address = int(a.__array_interface__["data"][0])
            lo, hi = _byte_bounds(a)
            self.extent = (False, lo, hi)
            base = root(a)
            self.owner = id(base) if base.flags.owndata else None
        else:
            if type(a).__name__ == "FakeCUDAArray":  # the CUDA simulator's device array wraps a host array
                self.address = int(a._ary.__array_interface__["data"][0])
            else:
                self.address = int(a.__cuda_array_interface__["data"][0])
            self.extent = (True, self.address, self.address + a.nbytes)
            self.owner = None
        self.layout = (self.address, a.shape, a.strides, a.dtype.str)


_PLACES: dict[int, Place] = {}  # id of a live array -> its Place


def place(a: Any) -> Place:
    """``a``'s ``Place``, from the cache while ``a`` keeps its shape and strides (which ``ndarray.resize`` and
    an assignment to ``strides`` change, with its memory)."""
    key = id(a)
    hit = _PLACES.get(key)
    if hit is not None and hit.ref() is a and hit.shape == a.shape and hit.strides == a.strides:
        return hit

    def forget(ref: Any) -> None:
        if getattr(_PLACES.get(key), "ref", None) is ref:
            del _PLACES[key]

    try:
        ref = weakref.ref(a, forget)
    except TypeError:  # an array type without weak references: worked out every time
        return Place(a, None)
    made = _PLACES[key] = Place(a, ref)
    return made


def address(a: Any) -> int:
    """Address of an array's first element (host or device)."""
    return place(a).address


def extent(a: Any) -> tuple[bool, int, int]:
    """Where an array's memory lies: (on a device, its first byte, one past its last byte)."""
    return place(a).extent


def layout(a: Any) -> tuple:
    """An array's place, shape, strides and dtype: arrays with equal layouts hold the same values."""
    return place(a).layout


def overlap(x: tuple[bool, int, int], y: tuple[bool, int, int]) -> bool:
    """Whether two extents overlap. A host and a device array never do: a staged copy of a device array
    (``pad.mpi``) is distinct memory even when the tape keeps both."""
    return x[0] == y[0] and x[1] < y[2] and y[1] < x[2]


def may_share_memory(a: Any, b: Any) -> bool:
    """Whether two arrays may overlap (a conservative bounds test, as ``np.may_share_memory``)."""
    return overlap(extent(a), extent(b))


def device_id(a: Any) -> int | None:
    """The CUDA device an array lives on (``None`` on the host)."""
    if isinstance(a, np.ndarray):
        return None
    if is_cupy(a):
        return int(a.device.id)
    return current_device_id()


def current_device_id() -> int:
    """numba's current CUDA device (0 on numba's CUDA simulator)."""
    from numba import config, cuda

    if cuda.is_available() and not config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
        return int(cuda.get_current_device().id)
    return 0


def where(a: Any) -> str:
    """Where an array lives, for error messages: "host memory (numpy)", "GPU 0 memory (cupy)"."""
    device = device_id(a)
    return f"{'host' if device is None else f'GPU {device}'} memory ({library(a)})"


def synchronize(a: Any) -> None:
    """Wait for the device work queued so far, so that a library outside its stream (MPI) may read or write
    ``a``; nothing for host arrays and numba's simulated ones."""
    if isinstance(a, np.ndarray) or type(a).__name__ == "FakeCUDAArray":
        return
    if is_cupy(a):
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    else:
        from numba import cuda

        cuda.synchronize()


def c_contiguous(a: Any) -> bool:
    flags = a.flags
    return bool(flags["C_CONTIGUOUS"] if isinstance(flags, dict) else flags.c_contiguous)


def frozen(a: np.ndarray) -> np.ndarray:
    """A copy of host array ``a`` that nothing can write: read-only, over the memory of an immutable ``bytes``
    object, which NumPy refuses to make writeable again (as do numba's kernels). Pass index arrays that never
    change so (a mesh's connectivity): the plans made from one keep the array itself, not a copy, and never
    compare it with one again (pad/parallel/plans.py)."""
    a = np.ascontiguousarray(a)
    return np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)


def is_frozen(a: Any) -> bool:
    """Whether ``a``'s contents can never change: a NumPy array that, like every array it views, is read-only,
    over a ``bytes`` object's memory (``frozen``)."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    return isinstance(a, bytes)


def reaches_all(view: Any, a: Any) -> bool:
    """Whether ``view`` has every element of the C-contiguous ``a`` once: ``a`` itself, or a view of all of it
    with its axes in another order (``a.T``; LULESH's corner forces seen as [axis, corner, element])."""
    if view is a:
        return True
    if view.size != a.size or view.dtype != a.dtype or extent(view) != extent(a):
        return False
    by_stride = sorted(range(view.ndim), key=lambda d: -abs(view.strides[d]))
    return c_contiguous(a) and c_contiguous(view.transpose(by_stride))


def zeros(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """A zero array in ``like``'s memory (host, CuPy or numba device)."""
    if isinstance(like, np.ndarray):
        return np.zeros(shape, dtype)
    if is_cupy(like):
        import cupy

        return cupy.zeros(shape, dtype)
    from numba import cuda

    return cuda.to_device(np.zeros(shape, dtype))


def empty(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialized array in ``like``'s memory."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype)
    if is_cupy(like):
        import cupy

        return cupy.empty(shape, dtype)
    from numba import cuda

    return cuda.device_array(shape, dtype)


def zeros_like(a: Any) -> Any:
    return zeros(a, a.shape, a.dtype)


PARALLEL_BYTES = 1 << 19
"""Host copies and fills of C-contiguous arrays this large or larger run on all of numba's threads: the tape's
copies of overwritten values are serial work between parallel launches otherwise. (Smaller ones are not worth
a parallel region: waking the threads costs microseconds, and on a machine shared with other work, where a
thread may wait for a core, milliseconds.)"""

FRESH_PARALLEL_BYTES = 1 << 16
"""New host copies (``copy``) this large or larger run on all threads: a copy's first touch of new memory
faults a page every 4 KiB, which costs more than the copy, and threads fault their pages side by side (the
tape's copies of the values a whole run's adjoints need: docs/benchmarks.md, "Checkpointing")."""


@njit(parallel=True, cache=True)
def _copy_flat(dst: np.ndarray, src: np.ndarray) -> None:
    for j in prange(src.shape[0]):
        dst[j] = src[j]


@njit(parallel=True, cache=True)
def _fill_flat(dst: np.ndarray, value: Any) -> None:
    for j in prange(dst.shape[0]):
        dst[j] = value


def _parallel(*arrays: np.ndarray, least: int = PARALLEL_BYTES) -> bool:
    return arrays[0].nbytes >= least and all(a.flags.c_contiguous for a in arrays)


def copyto(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for host arrays of one shape and dtype."""
    if _parallel(dst, src) and dst.shape == src.shape and dst.dtype == src.dtype:
        _copy_flat(dst.reshape(-1), src.reshape(-1))
    else:
        np.copyto(dst, src)


def fill(a: np.ndarray, value: float) -> None:
    """``a[...] = value`` for a host array."""
    if _parallel(a):
        _fill_flat(a.reshape(-1), a.dtype.type(value))
    else:
        a.fill(value)


def copy(a: Any) -> Any:
    """A new array with ``a``'s values, in ``a``'s memory."""
    if isinstance(a, np.ndarray):
        if not _parallel(a, least=FRESH_PARALLEL_BYTES):
            return a.copy()
        out = np.empty_like(a, order="C")
        _copy_flat(out.reshape(-1), a.reshape(-1))
        return out
    if is_cupy(a):
        return a.copy()
    from numba import cuda

    out = cuda.device_array(a.shape, a.dtype)
    out.copy_to_device(a)
    return out


def to_host(a: Any) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if is_cupy(a):
        return a.get()
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return np.asarray(a)


def like(template: Any, values: np.ndarray, dtype: Any = None) -> Any:
    """Host ``values`` as a new array of ``template``'s library, with ``template``'s dtype unless given."""
    out = np.array(values, dtype=template.dtype if dtype is None else dtype, order="C")  # always a new array
    if isinstance(template, np.ndarray):
        return out
    if is_cupy(template):
        import cupy

        return cupy.asarray(out)
    from numba import cuda

    return cuda.to_device(out)


def host_buffer(like: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialized host array that ``like``'s device copies to and from at full speed: page-locked
    memory for a GPU's arrays (plain host memory for host arrays and the CUDA simulator's)."""
    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype)
    if is_cupy(like):
        import cupyx

        return cupyx.empty_pinned(shape, dtype)
    from numba import cuda

    return cuda.pinned_array(shape, dtype)


def _one_copy(dst: Any, values: Any) -> bool:
    """Whether ``dst[...] = values`` is one whole copy between host and device memory."""
    return (
        isinstance(dst, np.ndarray) != isinstance(values, np.ndarray)
        and dst.shape == values.shape
        and dst.dtype == values.dtype
        and c_contiguous(dst)
        and c_contiguous(values)
    )


def device_copy(dst: int, src: int, nbytes: int, stream: Any = None) -> None:
    """Copy ``nbytes`` of GPU memory from address ``src`` to ``dst`` in ``stream``'s order (CuPy's; by
    default its current stream)."""
    import cupy

    runtime = cupy.cuda.runtime
    stream = cupy.cuda.get_current_stream() if stream is None else stream
    runtime.memcpyAsync(dst, src, nbytes, runtime.memcpyDeviceToDevice, stream.ptr)


_SEGMENTS_SOURCE = r"""
extern "C" __global__ void copy_segments(
    unsigned long long dst_base, const unsigned long long* dst_offsets,
    unsigned long long src_base, const unsigned long long* src_offsets, const unsigned long long* sizes)
{
    const unsigned long long dst = dst_base + dst_offsets[blockIdx.y];
    const unsigned long long src = src_base + src_offsets[blockIdx.y];
    const unsigned long long n = sizes[blockIdx.y];
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long done = 0;
    if (((dst | src) & 15) == 0) {  /* 16-byte words where both ends allow them, bytes for the rest */
        done = n & ~15ULL;
        uint4* d = (uint4*)dst;
        const uint4* s = (const uint4*)src;
        for (unsigned long long i = first; i < done / 16; i += stride) d[i] = s[i];
    }
    char* d = (char*)dst;
    const char* s = (const char*)src;
    for (unsigned long long i = done + first; i < n; i += stride) d[i] = s[i];
}
"""

SEGMENT_THREADS = 256
"""Threads per block of the segments' copy kernel."""

MAX_SEGMENTS = 65535
"""Ranges one ``Segments`` may copy on a GPU: a block row each (CUDA's limit on a grid's second dimension)."""

_segments_kernel: list[Any] = []  # the kernel, compiled (by CuPy's NVRTC) at its first use


class Segments:
    """Byte ranges of memory, of the host or of the current GPU (``device``), at ``addresses`` with
    ``sizes``, and their places (``offsets``) in one buffer. ``gather`` copies every range into a buffer,
    ``scatter`` copies a buffer back into them: on a GPU each is one kernel launch in CuPy's current
    stream, over a table of the ranges put in GPU memory once; on the host one ``memmove`` per range.
    A checkpointed loop's snapshot of many state arrays is then one operation each way, not one per array."""

    def __init__(self, addresses: list[int], offsets: list[int], sizes: list[int], device: bool) -> None:
        self.device = device
        self._ranges = list(zip(addresses, offsets, sizes, strict=True))
        if not device:
            return
        import cupy

        if len(sizes) > MAX_SEGMENTS:
            raise ValueError(f"pad.arrays.Segments: at most {MAX_SEGMENTS} ranges on a GPU, got {len(sizes)}")
        table = cupy.asarray(np.array([addresses, offsets, sizes], dtype=np.uint64).reshape(3, -1))
        self._addresses, self._offsets, self._sizes = table[0], table[1], table[2]
        # a thread a 16-byte word of the largest range, up to a limit of blocks a row
        words = max(sizes, default=0) // 16 + 1
        self._grid = (min(-(-words // SEGMENT_THREADS), 1024), len(sizes))

    def gather(self, buffer: int) -> None:
        """Copy every range to its place in the buffer at address ``buffer``."""
        if self.device:
            self._launch(buffer, self._offsets, 0, self._addresses)
            return
        for address, offset, size in self._ranges:
            ctypes.memmove(buffer + offset, address, size)

    def scatter(self, buffer: int) -> None:
        """Copy the buffer at address ``buffer`` back into every range."""
        if self.device:
            self._launch(0, self._addresses, buffer, self._offsets)
            return
        for address, offset, size in self._ranges:
            ctypes.memmove(address, buffer + offset, size)

    def _launch(self, dst: int, dst_offsets: Any, src: int, src_offsets: Any) -> None:
        if not self._ranges:
            return
        if not _segments_kernel:
            import cupy

            _segments_kernel.append(cupy.RawKernel(_SEGMENTS_SOURCE, "copy_segments"))
        args = (np.uint64(dst), dst_offsets, np.uint64(src), src_offsets, self._sizes)
        _segments_kernel[0](self._grid, (SEGMENT_THREADS,), args)


def _same_block(dst: Any, values: Any) -> bool:
    """Whether ``dst`` and ``values`` are blocks of memory of one size and layout (a byte-for-byte copy)."""
    return (
        dst.shape == values.shape
        and dst.dtype == values.dtype
        and c_contiguous(dst)
        and c_contiguous(values)
        and dst.device == values.device
    )


def assign(dst: Any, values: Any) -> None:
    """``dst[...] = values`` for any library (``values``: an array of ``dst``'s library or a host array).

    A whole contiguous array copied between host and device memory is one transfer, done when this returns
    (the host array may be reused at once)."""
    if is_cupy(dst) and is_cupy(values) and _same_block(dst, values):
        device_copy(int(dst.data.ptr), int(values.data.ptr), dst.nbytes)  # no elementwise kernel to launch
    elif is_cupy(dst) and _one_copy(dst, values):
        dst.set(values)
        synchronize(dst)
    elif isinstance(dst, np.ndarray) and is_device(values) and _one_copy(dst, values):
        if is_cupy(values):
            values.get(out=dst)  # blocking: waits for the stream's work, then the copy
        else:
            values.copy_to_host(dst)
    elif isinstance(dst, np.ndarray) and isinstance(values, np.ndarray):
        copyto(dst, values)
    elif isinstance(dst, np.ndarray) or is_cupy(dst):
        dst[...] = values if library(values) == library(dst) else like(dst, to_host(values))
    else:
        dst.copy_to_device(values if library(values) == "numba" else np.ascontiguousarray(values, dst.dtype))


def add(dst: Any, values: Any) -> None:
    """``dst += values`` for any library (numba device arrays, which have no arithmetic, via the host)."""
    if isinstance(dst, np.ndarray) or is_cupy(dst):
        dst[...] += values if library(values) == library(dst) else like(dst, to_host(values))
    else:
        assign(dst, to_host(dst) + to_host(values))


def zero(a: Any) -> None:
    """``a[...] = 0`` for any library, in ``a``'s memory (a device array's zeros are not sent from the host,
    except numba's device arrays on a GPU)."""
    if isinstance(a, np.ndarray):
        fill(a, 0)
    elif is_cupy(a) or type(a).__name__ == "FakeCUDAArray":
        a.fill(0)
    else:
        assign(a, np.zeros(a.shape, a.dtype))


def root(a: Any) -> Any:
    """The array that owns ``a``'s memory (``a`` itself if it is not a view of a NumPy or CuPy array)."""
    if isinstance(a, np.ndarray):
        while isinstance(a.base, np.ndarray):
            a = a.base
        return a
    if is_cupy(a):
        while getattr(a, "base", None) is not None:
            a = a.base
        return a
    return a


def owner(a: Any) -> int | None:
    """The id of the NumPy array that owns ``a``'s memory, or None where that is not known (device arrays,
    arrays over other objects' buffers). Arrays with different owners never share memory."""
    return place(a).owner if isinstance(a, np.ndarray) else None


def view(base: Any, shape: tuple, strides: tuple, offset: int) -> Any:
    """A view of ``base``'s memory, ``offset`` bytes in (used for shadows of views)."""
    if isinstance(base, np.ndarray):
        return np.ndarray(shape, base.dtype, buffer=base, offset=offset, strides=strides)
    if is_cupy(base):
        import cupy

        return cupy.ndarray(shape, base.dtype, memptr=base.data + offset, strides=strides)
    if type(base).__name__ == "FakeCUDAArray":
        return type(base)(view(base._ary, shape, strides, offset))
    raise TypeError(
        "a view of a numba device array cannot get the matching view of its shadow; "
        "use CuPy arrays, or pass the whole array to pad.Dup"
    )


class Pool:
    """Host arrays kept for reuse, by shape and dtype, up to ``max_bytes`` in all; a taker fills them. Memory
    reused is already mapped, where a fresh array's pages fault at their first touch."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._kept: dict[tuple, list[np.ndarray]] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        """A kept array of this shape and dtype (any contents), or None."""
        with self._lock:
            kept = self._kept.get((tuple(shape), np.dtype(dtype).str))
            if not kept:
                return None
            a = kept.pop()
            self._bytes -= a.nbytes
            return a

    def give(self, a: np.ndarray) -> None:
        """Keep ``a`` (no one else may use it any more) if there is room."""
        with self._lock:
            if self._bytes + a.nbytes <= self.max_bytes:
                self._kept.setdefault((a.shape, a.dtype.str), []).append(a)
                self._bytes += a.nbytes
