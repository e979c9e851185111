"""Running kernels as CUDA threads on GPU arrays (CuPy arrays or numba device arrays).

One thread per launch index, in blocks of the variant's ``block`` threads (``emit.PRIMAL_BLOCK`` for primal
and tangent kernels, ``emit.BLOCK`` for adjoints); or, for a launch of few indices whose kernel sums
in inner loops, a group of threads per index that shares those loops. Shared elements are updated with (warp-aggregated)
atomics inside the kernel, so nothing is reduced afterwards. The adjoint's stack is one preallocated
``(slots, n)`` float64 tape per launch: ``slots`` is known at compile time for kernels whose pushes are
outside loops, otherwise a first kernel computes each index's bound. Tape memory is reported in ``stats``
and bounded by ``PAD_GPU_TAPE_LIMIT`` bytes (default: half the device's free memory).

Launches go through numba's dispatcher once, to compile for the arguments' types; later launches with the
same types call the compiled kernel through CuPy's driver interface, which costs a few microseconds
instead of numba's argument handling (tens of microseconds).
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from pad import arrays, replay, tape
from pad.kernel import Variant, compiler
from pad.kernel.cuda_runtime import cuda
from pad.kernel.emit import BLOCK
from pad.kernel.names import TAPE, head, ordered

__all__ = ["run", "stats"]

stats: dict[str, Any] = {"tape_bytes": 0, "peak_tape_bytes": 0}
_NO_OUTPUTS = np.zeros(0)


class CudaCompileError(RuntimeError):
    """numba's CUDA target rejected a generated kernel (a construct it does not support on the device)."""


class TapeOverflow(RuntimeError):
    """The adjoint pushed more values than its tape holds (a bug in pad's depth bound)."""


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]


_free_at_start: dict[int, int] = {}  # device -> free bytes when pad first needed a tape on it


def _tape_limit(like: Any) -> int:
    limit = os.environ.get("PAD_GPU_TAPE_LIMIT")
    if limit is not None:
        return int(limit)
    if _simulated():
        return 1 << 30
    device = arrays.device_id(like) or 0
    if device not in _free_at_start:
        if arrays.is_cupy(like):
            import cupy

            _free_at_start[device] = int(cupy.cuda.runtime.memGetInfo()[0])
        else:
            _free_at_start[device] = int(cuda.current_context().get_memory_info()[0])
    return _free_at_start[device] // 2


_multiprocessors: list[int] = []


def lanes_per_index(n: int) -> int:
    """Lanes per launch index for a kernel whose groups share loops: enough to give the GPU about 1024
    threads per multiprocessor (a power of two, at most 16). One on numba's simulator, which has no shuffles."""
    if _simulated():
        return 1
    if not _multiprocessors:
        _multiprocessors.append(int(cuda.get_current_device().MULTIPROCESSOR_COUNT))
    lanes = 1
    while lanes < 16 and 2 * lanes * n <= 1024 * _multiprocessors[0]:
        lanes *= 2
    return lanes


DEPTHS = 16  # bounds a variant keeps (per launch size, shapes and scalars)


def _shapes(a: Any) -> Any:
    """What of argument ``a`` a depth the shapes decide depends on: an array's shape, a scalar's value."""
    if hasattr(a, "shape"):
        return a.shape
    return tuple(_shapes(x) for x in a) if isinstance(a, tuple) else a


def _slots(variant: Variant, n: int, args: Sequence[Any], like: Any) -> int:
    """Tape slots per launch index the adjoint needs (compile-time, or bounded by the depth kernel).

    The depth kernel and the host's read of its largest value cost a pass over the launch and a wait for
    the device. Where the bound follows from the launch size, the scalars and the arrays' shapes
    (``Variant.depth_from_shapes``: the kernel reads no array element) it is found once for those."""
    if variant.depth_launcher is None:
        return variant.tape_slots
    key = None
    if variant.depth_from_shapes:
        key = (n, *(_shapes(a) for a in args))
        known = variant.depths.get(key)
        if known is not None:
            return known
    record = replay.recording()
    if record is not None:  # the depth is read on the host, which a replay skips
        record.refuse(f"the adjoint of {variant.kernel} sizes its tape on the host")
    depth = arrays.zeros(like, (n,), np.int64)  # zeros: a launch compiled ahead does not run
    _launch(variant.depth_launcher, n, BLOCK, [*ordered(head("cuda"), _n=n), *args, depth])
    bound = int(depth.max()) if arrays.is_cupy(depth) else int(depth.copy_to_host().max())
    if key is not None and not compiler.noting():
        if len(variant.depths) >= DEPTHS:
            variant.depths.pop(next(iter(variant.depths)))
        variant.depths[key] = bound
    return bound


def run(variant: Variant, n: int, args: Sequence[Any], extras: Sequence[Any] = ()) -> np.ndarray:
    """Run ``variant`` for indices ``range(n)`` on the GPU; returns the adjoints of active scalars."""
    if variant.pieces:  # an adjoint split along its outputs: each piece adds its part
        return sum(
            (run(piece, n, args, extras) for piece in variant.pieces), np.zeros(len(variant.active_scalars))
        )
    lanes = lanes_per_index(n) if variant.shares_loops else 1
    first = ordered(head("cuda", shares_loops=variant.shares_loops), _n=n, _G=lanes)
    if variant.mode != "adjoint" or not (variant.active_scalars or variant.tape_slots):
        if n:
            _launch(variant.launcher, n * lanes, variant.block, [*first, *args, *extras])
            _clear_seeds(variant, n, extras)
        return _NO_OUTPUTS
    outputs = np.zeros(len(variant.active_scalars))
    if n == 0:
        return outputs
    like = next(a for a in (*args, *extras) if arrays.is_device(a))
    call = [*first, *args, *extras]
    act = None
    if variant.active_scalars:
        act = arrays.zeros(like, (1, len(variant.active_scalars)), np.float64)
        call.append(act)
    overflow = None
    if variant.tape_slots:
        slots = max(_slots(variant, n, args, like), 1)
        columns = n * lanes  # one per thread: the lanes of a group push alike, but not in step
        nbytes = slots * columns * 8
        limit = _tape_limit(like)
        if nbytes > limit:
            raise MemoryError(
                f"pad.launch({variant.kernel}, {n}, ...): the adjoint needs a tape of {nbytes / 2**30:.2f} GiB "
                f"({slots} values per launch index), over the limit of {limit / 2**30:.2f} GiB "
                "(PAD_GPU_TAPE_LIMIT bytes, default half the free device memory); "
                "launch fewer indices at a time or shorten the kernel's loops"
            )
        stats["tape_bytes"] = nbytes
        stats["peak_tape_bytes"] = max(stats["peak_tape_bytes"], nbytes)
        # Only a tape whose depth a kernel bounded from the arrays' contents can overflow. One sized at compile
        # time needs no check (and so no wait for the device at the end of the reverse pass), nor one whose
        # bound the shapes decide: that bound holds for any data, as a compile-time one does (and a replay,
        # captured as a CUDA graph, could not read a flag back).
        checked = variant.depth_launcher is not None and not variant.depth_from_shapes
        overflow = _overflow_flag(variant.kernel, like) if checked else None
        flag = _never_set(like) if overflow is None else overflow
        call += ordered(TAPE, _tape=arrays.empty(like, (slots, columns), np.float64), _overflow=flag)
    _launch(variant.launcher, n * lanes, variant.block, call)
    _clear_seeds(variant, n, extras)
    if overflow is not None and tape.current() is None:
        _check_tape(overflow, [variant.kernel])
    if act is not None:
        outputs += arrays.to_host(act).sum(axis=0)
    return outputs


_flags: weakref.WeakKeyDictionary[tape.Context, dict[int, tuple[Any, list[str]]]] = (
    weakref.WeakKeyDictionary()
)


def _overflow_flag(kernel: str, like: Any) -> Any:
    """The flag an adjoint launch with a tape sets if it overflows (a guard against a wrong depth bound).

    Inside ``autodiff`` every such launch on a device shares one flag, read once when the reverse pass ends:
    reading it waits for the device, and a wait per launch kept the adjoints from queueing up. Outside, the
    caller reads a launch's own flag at once."""
    ctx = tape.current()
    if ctx is None:
        return arrays.zeros(like, (1,), np.int32)
    per_device = _flags.setdefault(ctx, {})
    names: list[str]
    device = arrays.device_id(like) or 0
    if device not in per_device:
        flag, names = arrays.zeros(like, (1,), np.int32), []
        per_device[device] = (flag, names)
        ctx.after_reverse.append(lambda: _check_tape(flag, names))
    flag, kernels = per_device[device]
    if kernel not in kernels:
        kernels.append(kernel)
    return flag


_unused_flags: dict[tuple[type, int], Any] = {}


def _never_set(like: Any) -> Any:
    """The overflow flag of the launches whose tape cannot overflow (its size known at compile time, or
    from the shapes): one per array type and device, never read."""
    key = (type(like), arrays.device_id(like) or 0)
    flag = _unused_flags.get(key)
    if flag is None:
        flag = _unused_flags[key] = arrays.zeros(like, (1,), np.int32)
    return flag


def _check_tape(overflow: Any, kernels: list[str]) -> None:
    if int(arrays.to_host(overflow)[0]):
        raise TapeOverflow(
            f"the adjoint of {' or '.join(kernels)} overflowed its tape on the GPU; please report the kernel"
        )


def _clear_seeds(variant: Variant, n: int, shadows: Sequence[Any]) -> None:
    """Zero the seeds an adjoint launch read once each and left (``Variant.clears``); shadows: the active
    arrays' in order."""
    for position, offset in variant.clears.items():
        shadows[variant.active_arrays.index(position)][offset : offset + n] = 0  # CuPy or numba, views too


# ---------------------------------------------------------------------------------------------- launching
_compiled: dict[tuple, Any] = {}


def _type_key(a: Any) -> tuple:
    if hasattr(a, "shape") and hasattr(a, "dtype"):
        return (a.dtype.char, a.ndim, arrays.c_contiguous(a))
    return (type(a),)


def _launch(dispatcher: Any, threads: int, block: int, call: list[Any]) -> None:
    """Launch ``dispatcher`` (a ``cuda.jit`` kernel) on ``call`` for ``threads`` threads in blocks of ``block``
    (the one its source was generated for): directly through CuPy once compiled."""
    blocks = (threads + block - 1) // block
    key = (id(dispatcher), *map(_type_key, call))
    direct = _compiled.get(key)
    if direct is not None:
        direct(blocks, call)
        return
    if compiler.note(dispatcher, call):  # compiled ahead (pad.precompile), not run
        return
    with warnings.catch_warnings():  # numba warns about small grids; a launch's size is the user's choice
        warnings.filterwarnings("ignore", message=".*Grid size")
        try:
            dispatcher[blocks, block](*call)
        except Exception as e:
            if not type(e).__module__.startswith("numba"):
                raise
            source = dispatcher.py_func.__code__.co_filename
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CudaCompileError(
                f"the CUDA target could not compile {dispatcher.py_func.__name__} (generated source: {source}; "
                f"its header names the kernel's file): {first}"
            ) from e
    if all(arrays.is_cupy(a) for a in call if hasattr(a, "shape")) and not _simulated():
        overload = dispatcher.overloads[tuple(dispatcher.typeof_pyval(a) for a in call)]
        try:
            _compiled[key] = _DirectLaunch(overload, call, block)
        except Exception as e:  # an unknown numba-cuda/CuPy version: numba's dispatch keeps working
            stats["direct_launch_error"] = f"{type(e).__name__}: {e}"
            _compiled[key] = lambda blocks, call: dispatcher[blocks, block](*call)


_STRUCT_CODES = {
    "?": "?",
    "b": "b",
    "h": "h",
    "i": "i",
    "l": "q",
    "q": "q",
    "f": "f",
    "d": "d",
}  # dtype -> struct


class _DirectLaunch:
    """A kernel numba compiled, launched by one driver call with its parameters packed as numba lays them out.

    numba passes an array as (meminfo, parent, size, itemsize, data, shape..., strides...) and a tuple as
    its elements. Packing them with one ``struct`` into a buffer handed to ``cuLaunchKernel`` (its
    ``extra`` argument) costs a few microseconds, where numba's dispatch costs tens.
    """

    def __init__(self, overload: Any, call: list[Any], block: int) -> None:
        import cupy

        self.cupy, self.block = cupy, block
        self.module = cupy.cuda.function.Module()
        cubin = overload.library.get_cubin()
        self.module.load(bytes(getattr(cubin, "code", cubin)))  # numba-cuda >= 0.2x wraps it in ObjectCode
        self.function = self.module.get_function(overload.entry_name)
        fmt, size = "<", 0
        for code in self._codes(call):
            align = struct.calcsize(code)
            fmt += "x" * (-size % align) + code
            size += -size % align + align
        self.struct = struct.Struct(fmt)
        self.buffer = bytearray(max(size, 8))
        address = ctypes.addressof((ctypes.c_char * len(self.buffer)).from_buffer(self.buffer))
        self.size = np.array([self.struct.size], np.uint64)
        # CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END
        self.extra = np.array([1, address, 2, self.size.ctypes.data, 0], np.uint64)
        self.lock = threading.Lock()  # tasks may launch from several threads; the buffer is shared

    @classmethod
    def _codes(cls, call: list[Any]) -> list[str]:
        codes: list[str] = []
        for a in call:
            if hasattr(a, "strides"):
                codes += ["Q", "Q", "q", "q", "Q"] + ["q"] * (2 * a.ndim)
            else:
                for x in a if isinstance(a, tuple) else (a,):
                    if isinstance(x, np.generic):
                        codes.append(_STRUCT_CODES[x.dtype.char])
                    else:
                        codes.append("?" if isinstance(x, bool) else "q" if isinstance(x, int) else "d")
        return codes

    def __call__(self, blocks: int, call: list[Any]) -> None:
        values: list[Any] = []
        for a in call:
            if hasattr(a, "strides"):
                values += (0, 0, a.size, a.itemsize, a.data.ptr, *a.shape, *a.strides)
            elif isinstance(a, tuple):
                values += a
            else:
                values.append(a)
        stream = self.cupy.cuda.get_current_stream().ptr
        with self.lock:  # the driver copies the parameters before the launch call returns
            self.struct.pack_into(self.buffer, 0, *values)
            self.cupy.cuda.driver.launchKernel(
                self.function.ptr, blocks, 1, 1, self.block, 1, 1, 0, stream, 0, int(self.extra.ctypes.data)
            )
