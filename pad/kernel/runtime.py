"""Small compiled helpers that generated kernels call: local arrays on the stack, the growable per-thread
stacks of reverse mode, the greedy colouring step of inspectors, the digamma function (the derivative of
``math.lgamma``), which numba lacks, and the bounds check of ``PAD_DEBUG`` kernels; the numba pipeline
that compiles generated launchers and inspectors, the calls between a launcher and the runner of its
chunks, the atomic counts by which a launch's chunks share a colour's groups and keep its colours apart, and
the time-stamp counter that profiles a replay's driver."""

from __future__ import annotations

import math
import types as types_module
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.extending import intrinsic, register_jitable
from numba.np.arrayobj import make_array, populate_array


def serial_and_parallel(fn: Any) -> tuple[Any, Any]:
    """``fn`` compiled by numba (``cache=True``) to run its ``prange`` loops one iteration after another, and
    in parallel. numba's on-disk cache keys a function by its module, name, code and closure, not its
    options: the two would share one entry, each loading whichever compiled first. The parallel one is
    compiled from a copy of ``fn`` named ``<name>.parallel``."""
    twin = types_module.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    twin.__qualname__ = f"{fn.__qualname__}.parallel"
    twin.__doc__, twin.__module__ = fn.__doc__, fn.__module__
    return njit(cache=True)(fn), njit(parallel=True, cache=True)(twin)


class Straight(CompilerBase):  # type: ignore[misc]
    """numba's nopython pipeline without its SSA reconstruction, for generated launchers and inspectors.

    numba rebuilds SSA form for each variable assigned more than once by walking every block of the function,
    and then types and lowers every version it made: for a kernel's adjoint of thousands of statements, a
    large share of the compile time. Without it, numba types each variable once, over all its assignments;
    in generated code every name has one type (pad's IR is typed by name), and LLVM rebuilds SSA form from
    the variables' stack slots either way (docs/benchmarks.md, "First runs: compiling").
    """

    def define_pipelines(self) -> list[Any]:
        self.state.flags.enable_ssa = False
        return [DefaultPassBuilder.define_nopython_pipeline(self.state)]


def _call(context: Any, builder: Any, callee: Any, argtypes: tuple, values: list) -> None:
    """Call ``callee``, a function returning nothing in numba's calling convention, on ``values`` (of numba
    types ``argtypes``); if it raises, return its error from the calling function.

    That return is marked as numba marks a raise: numba's reference-count pruning then drops the caller's
    increments and decrements of the arrays around the call, two atomic operations an array a launch, as it
    does where the callee's code is inlined. The call is never inlined: a chunk compiles once."""
    conv = context.call_conv
    status, _ = conv.call_function(builder, callee, types.none, argtypes, values, attrs=("noinline",))
    with cgutils.if_unlikely(builder, status.is_error):  # conv.return_status_propagate, marked
        store = builder.store(status.excinfoptr, conv._get_excinfo_argument(builder.function))
        store.set_metadata("numba_exception_output", builder.module.add_metadata([ir.IntType(1)(1)]))
        builder.ret(status.code)


@intrinsic
def call_chunk(typingctx: Any, address: Any, *args: Any) -> Any:
    """Call the function compiled at ``address`` (an int64), returning nothing, on ``args``: a CPU launch's
    chunks runner its chunks (pad/parallel/cpu.py), a launcher its chunks runner (``run_chunks``).

    An address is of one process: it reaches compiled code only as an argument, so that code cached on disk
    holds none. The function is in numba's calling convention, so that an exception it raises (PAD_DEBUG's
    IndexError) reaches the caller's caller."""
    if not isinstance(address, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        fnty = context.call_conv.get_function_type(types.none, args)
        callee = builder.inttoptr(llargs[0], fnty.as_pointer())
        _call(context, builder, callee, args, cgutils.unpack_tuple(builder, llargs[1]))
        return context.get_dummy_value()

    return types.none(address, types.StarArgTuple.from_types(args)), codegen


@intrinsic
def array_at(typingctx: Any, address: Any, count: Any, dtype: Any) -> Any:
    """The ``count`` elements of ``dtype`` (a NumPy scalar type) at ``address`` (an int64), as a C-ordered
    array that owns nothing."""
    if not isinstance(address, types.Integer) or not isinstance(count, types.Integer):
        return None
    array_type = types.Array(dtype.dtype, 1, "C")

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        array = make_array(array_type)(context, builder)
        data_type = context.get_data_type(dtype.dtype)
        item = context.get_constant(types.intp, context.get_abi_sizeof(data_type))
        data = builder.inttoptr(llargs[0], data_type.as_pointer())
        size = context.cast(builder, llargs[1], count, types.intp)
        populate_array(array, data=data, shape=[size], strides=[item], itemsize=item, meminfo=None)
        return array._getvalue()

    return array_type(address, count, dtype), codegen


@intrinsic
def address_of(typingctx: Any, array: Any) -> Any:
    """The address of ``array``'s data, an int64."""
    if not isinstance(array, types.Array):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        data = make_array(array)(context, builder, value=llargs[0]).data
        return builder.ptrtoint(data, ir.IntType(64))

    return types.int64(array), codegen


def _counters(counters: Any, *integers: Any) -> bool:
    """Whether the arguments of ``claim``, ``finish`` or ``wait_for`` are typed as they take them: an int64
    array of counters, then integers (the counter's index, an amount)."""
    return (
        isinstance(counters, types.Array)
        and counters.dtype == types.int64
        and all(isinstance(t, types.Integer) for t in integers)
    )


def _counter(context: Any, builder: Any, counters: Any, k: Any, llargs: Any) -> Any:
    """A pointer to ``counters[k]``, the first two of ``llargs``."""
    data = make_array(counters)(context, builder, value=llargs[0]).data
    return builder.gep(data, [context.cast(builder, llargs[1], k, types.intp)])


@intrinsic
def claim(typingctx: Any, counters: Any, k: Any) -> Any:
    """Add one to ``counters[k]`` (an int64 array) atomically; the count before. A launch by a plan hands out
    a colour's groups of segments this way (``emit``): each thread claims its own share's, then what is left
    of the others', so that a thread descheduled by other work, or given the groups that hold most of the
    work, no longer holds the others back."""
    if not _counters(counters, k):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        one = context.get_constant(types.int64, 1)
        return builder.atomic_rmw("add", _counter(context, builder, counters, k, llargs), one, "monotonic")

    return types.int64(counters, k), codegen


@intrinsic
def finish(typingctx: Any, counters: Any, k: Any, count: Any) -> Any:
    """Add ``count`` to ``counters[k]`` (an int64 array) atomically, after this thread's stores: a thread
    counts the groups of a colour it ran, so that ``wait_for`` sees them done (release ordering)."""
    if not _counters(counters, k, count):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        amount = context.cast(builder, llargs[2], count, types.int64)
        builder.atomic_rmw("add", _counter(context, builder, counters, k, llargs), amount, "release")
        return context.get_dummy_value()

    return types.none(counters, k, count), codegen


SPINS = 1 << 16  # loads of a counter ``wait_for`` spins through before it yields its core between loads

LINE_BYTES = 64  # a cache line
LINE_WORDS = LINE_BYTES // 8
"""int64 counters a cache line apart. Runs of parts handed out by counting (a replay's rows, a planned
launch's colours) each take a count of parts done and a claim counter per worker's share, each on a line of
its own: counters side by side made every claim move the line between the cores claiming beside it
(docs/benchmarks.md, "Claim counters on lines of their own")."""


@register_jitable
def done_counter(run: int, workers: int) -> int:
    """The index of run ``run``'s count of parts done, among counters laid out as ``counter_words`` says."""
    return run * LINE_WORDS * (1 + workers)


@register_jitable
def claim_counter(run: int, workers: int, share: int) -> int:
    """The index of the claim counter of worker ``share``'s share of run ``run``'s parts."""
    return done_counter(run, workers) + LINE_WORDS * (1 + share)


def counter_words(runs: int, workers: int) -> int:
    """The int64 counters that ``runs`` runs of parts shared among ``workers`` take: per run, a count of its
    parts done (``done_counter``) and a claim counter per worker's share (``claim_counter``), each on a cache
    line of its own."""
    return done_counter(runs, workers)


@intrinsic
def wait_for(typingctx: Any, counters: Any, k: Any, target: Any) -> Any:
    """Wait until ``counters[k]`` (an int64 array) reaches ``target``; the stores counted there by ``finish``
    are then seen (acquire ordering). The colours of a launch by a plan are apart by this, within one
    parallel region: each colour's groups counted done before the next colour's are claimed (``emit``).
    After ``SPINS`` loads it yields its core at each (``sched_yield``), to a thread it may be waiting for."""
    if not _counters(counters, k, target):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        slot = _counter(context, builder, counters, k, llargs)
        goal = context.cast(builder, llargs[2], target, types.int64)
        i64 = ir.IntType(64)
        yield_ = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield"
        )
        entry = builder.block
        check = builder.append_basic_block("wait.check")
        spin = builder.append_basic_block("wait.spin")
        done = builder.append_basic_block("wait.done")
        builder.branch(check)
        builder.position_at_end(check)
        spins = builder.phi(i64)
        spins.add_incoming(i64(0), entry)
        value = builder.load_atomic(slot, "acquire", 8)
        builder.cbranch(builder.icmp_signed(">=", value, goal), done, spin)
        builder.position_at_end(spin)
        with builder.if_then(builder.icmp_signed(">=", spins, i64(SPINS)), likely=False):
            builder.call(yield_, [])
        spins.add_incoming(builder.add(spins, i64(1)), builder.block)
        builder.branch(check)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return types.none(counters, k, target), codegen


@intrinsic
def ticks(typingctx: Any) -> Any:
    """The processor's time-stamp counter (``llvm.readcyclecounter``): a replay's driver stamps its rows with
    it when profiled (pad/parallel/driver.py, ``PROFILE``), a load no call or clock setting slows."""

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        counter = builder.module.declare_intrinsic(
            "llvm.readcyclecounter", fnty=ir.FunctionType(ir.IntType(64), [])
        )
        return builder.call(counter, [])

    return types.int64(), codegen


@intrinsic
def nonnegative(typingctx: Any, x: Any) -> Any:
    """``x``, an integer that LLVM may take to be at least zero (a launch index: from a range of the launch or
    a plan's order), so that numba's wrap-around of negative indices leaves its uses as indices."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        value = llargs[0]
        assume = builder.module.declare_intrinsic(
            "llvm.assume", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(1)])
        )
        builder.call(assume, [builder.icmp_signed(">=", value, ir.Constant(value.type, 0))])
        return value

    return x(x), codegen


@intrinsic
def run_chunks(typingctx: Any, nchunks: Any, *params: Any) -> Any:
    """Run the calling launcher's chunks ``0 .. nchunks - 1``, calling it again for each as
    ``launcher(0, chunk, *rest)``, by the chunks runner at ``params[0]``.

    ``params`` are the launcher's own parameters in order: ``_run`` (the runner's address, an int64; 0 in a
    chunk's call), ``_c`` (the chunk) and the rest. A launcher is one function of one signature per argument
    types, its chunks' code: this packs its arguments into a record on its stack and passes the runner
    (compiled once for every kernel, parallel or serial: pad/parallel/cpu.py) the record and the address of
    a small function, defined here beside the launcher, that unpacks the record and calls the launcher for
    one chunk. Each kernel then compiles one function and no parallel loop of its own (docs/benchmarks.md,
    "First runs: compiling"), and every launch, on any number of threads, runs the one compiled chunk
    code."""
    lead = (nchunks, *params[:2])
    if len(params) < 2 or not all(isinstance(t, types.Integer) for t in lead):
        return None

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        values = cgutils.unpack_tuple(builder, llargs[1])
        words: list = []
        for value, param in zip(values, params, strict=True):
            words += _record_words(context, builder, param, value)
        record_type = _guarded([w.type for w in words])
        with builder.goto_entry_block():  # not zeroed: cgutils.alloca_once's would run in every chunk's call
            record = builder.alloca(record_type)
        # the record's size, in the guard's first word: a replay's driver copies the record (``RECORD_SIZE``)
        size = ir.Constant(ir.IntType(64), context.get_abi_sizeof(record_type))
        builder.store(size, builder.bitcast(record, ir.IntType(64).as_pointer()))
        for k, word in enumerate(words, 1):
            builder.store(word, cgutils.gep_inbounds(builder, record, 0, k))
        unpack = _chunk_call(context, builder.module, builder.function, params, record_type)
        chunks = context.cast(builder, llargs[0], nchunks, types.int64)
        addresses = [builder.ptrtoint(x, ir.IntType(64)) for x in (unpack, record)]
        runner = context.call_conv.get_function_type(types.none, (types.int64,) * 3)
        callee = builder.inttoptr(values[0], runner.as_pointer())
        _call(context, builder, callee, (types.int64,) * 3, [*addresses, chunks])
        return context.get_dummy_value()

    return types.none(nchunks, types.StarArgTuple.from_types(params)), codegen


def _record_words(context: Any, builder: Any, param: Any, value: Any) -> list:
    """What the record of ``run_chunks`` holds of a launcher's argument ``value`` of type ``param``: an array's
    data pointer, shape and strides (``_chunk_call`` makes the array again), anything else whole."""
    if not isinstance(param, types.Array):
        return [value]
    array = make_array(param)(context, builder, value=value)
    shape = cgutils.unpack_tuple(builder, array.shape, param.ndim)
    strides = cgutils.unpack_tuple(builder, array.strides, param.ndim)
    return [array.data, *shape, *strides]


RECORD_SIZE = 0  # the word of a ``run_chunks`` record that holds its size in bytes
RECORD_CHUNK = LINE_WORDS + 1  # and the word of the launcher's ``_c``, after the guard and ``_run``


def _guarded(fields: list) -> Any:
    """The record's type: ``fields`` between two cache lines' worth of bytes that nothing writes while its
    chunks run (the first word holds the record's size, written with the fields), so that no line of the
    record holds anything else of the launcher's stack (or of the calls below it)."""
    guard = ir.ArrayType(ir.IntType(8), LINE_BYTES)
    return ir.LiteralStructType([guard, *fields, guard])


def _chunk_call(context: Any, module: Any, launcher: Any, params: tuple, record_type: Any) -> Any:
    """The function ``(record, chunk)`` calling ``launcher`` as ``launcher(0, chunk, *rest)``, the
    rest of its arguments read from the record (``run_chunks``), in numba's calling convention.

    Every thread reads the record, once per chunk it runs, after the launch's own thread wrote it: it holds
    of an array only what a chunk reads, its data, shape and strides (fewer than half the words of numba's
    array), on cache lines of its own (between guards: aligned to a line, it made the launcher, the kernel's
    whole code, keep a frame pointer in a register). A chunk's arrays have no owner, as numba's own parallel
    loops pass arrays to their threads: the launcher's call from Python holds them while its chunks run.
    With owners, a chunk's call would increment and decrement each one's reference count where numba's
    pruning leaves them (as in a launcher by a plan): atomic operations on memory every thread shares, which
    each chunk waits for longer the more threads run."""
    conv = context.call_conv
    fn = ir.Function(module, conv.get_function_type(types.none, (types.int64,) * 2), f"{launcher.name}.chunk")
    fn.linkage = "internal"
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    address, chunk = conv.get_arguments(fn)
    record = builder.inttoptr(address, record_type.as_pointer())
    fields = iter(range(1, len(record_type.elements) - 1))

    def word() -> Any:
        return builder.load(cgutils.gep_inbounds(builder, record, 0, next(fields)))

    values = []
    for param in params:
        if not isinstance(param, types.Array):
            values.append(word())
            continue
        data = word()
        shape = [word() for _ in range(param.ndim)]
        strides = [word() for _ in range(param.ndim)]
        item = context.get_abi_sizeof(context.get_data_type(param.dtype))
        array = make_array(param)(context, builder)
        itemsize = context.get_constant(types.intp, item)
        populate_array(array, data=data, shape=shape, strides=strides, itemsize=itemsize, meminfo=None)
        values.append(array._getvalue())
    values[:2] = [context.get_constant(params[0], 0), context.cast(builder, chunk, types.int64, params[1])]
    _call(context, builder, launcher, params, values)
    conv.return_native_none(builder)
    return fn


STACK_BYTES = 4096
"""A CPU launcher's local arrays (``pad.local_array`` and their shadows) of at most this many bytes each live
on the stack of the chunk's function (``stack_zeros``), larger ones on the heap (``np.zeros``)."""


@intrinsic
def stack_zeros(typingctx: Any, shape: Any, dtype: Any) -> Any:
    """A zeroed C-ordered array of constant ``shape`` (a literal int or tuple of them) and ``dtype`` on the
    calling function's stack.

    numba's ``np.zeros`` allocates on the heap, and LLVM must then assume that every store into the array
    may change any other array the kernel reads: each ``x[k]`` stays a load and each ``b_x[k] += v`` a load
    and a store. Memory of the function's own frame that no call sees aliases nothing, so LLVM keeps the
    elements in registers where the indices are known (docs/benchmarks.md, "Local arrays and the Python per
    launch")."""
    items = [shape] if isinstance(shape, types.IntegerLiteral) else list(getattr(shape, "types", [None]))
    if not all(isinstance(t, types.IntegerLiteral) for t in items):
        return None
    dims = tuple(t.literal_value for t in items)
    element = dtype.dtype
    array_type = types.Array(element, len(dims), "C")

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        data_type = context.get_data_type(element)
        itemsize = context.get_abi_sizeof(data_type)
        count = int(np.prod(dims))
        data = cgutils.alloca_once(builder, data_type, size=context.get_constant(types.intp, count))
        cgutils.memset(builder, data, context.get_constant(types.intp, count * itemsize), 0)
        strides = [itemsize * int(np.prod(dims[d + 1 :])) for d in range(len(dims))]
        array = make_array(array_type)(context, builder)
        populate_array(
            array,
            data=data,
            shape=[context.get_constant(types.intp, d) for d in dims],
            strides=[context.get_constant(types.intp, s) for s in strides],
            itemsize=context.get_constant(types.intp, itemsize),
            meminfo=None,
        )
        return array._getvalue()

    return array_type(shape, dtype), codegen


@njit(cache=True)
def grown(stack: np.ndarray) -> np.ndarray:
    """A copy of a full stack with twice its room.

    Reverse mode keeps two growable stacks per thread: float64 (float32 values are saved exactly) and int64
    (integers and booleans); the generated code pushes inline and calls this only when a stack is full. The
    copy is a loop (LLVM makes it a memcpy): numba compiles a slice assignment's shape check, and its error
    message, into a chain of functions that took seconds to compile in every process.
    """
    out = np.empty(2 * stack.shape[0], stack.dtype)
    for k in range(stack.shape[0]):
        out[k] = stack[k]
    return out


@njit(cache=True)
def colour(keys: np.ndarray, nk: int, mask: np.ndarray) -> int:
    """The smallest colour (0 to 63) that no element ``keys[:nk]`` bears yet, now set on all of them; 64 if
    all are taken (the elements are left as they were). A block's colour in an inspector's greedy colouring
    (pad/kernel/inspector.py)."""
    used = np.uint64(0)
    for j in range(nk):
        used |= mask[keys[j]]
    c = 0
    while c < 64 and (used >> np.uint64(c)) & np.uint64(1):
        c += 1
    if c < 64:
        bit = np.uint64(1) << np.uint64(c)
        for j in range(nk):
            mask[keys[j]] |= bit
    return c


def psi(x: float) -> float:
    """psi(x) = d lgamma(x) / dx, to about 1e-15: reflection below 1/2, the recurrence psi(x) = psi(x + 1) - 1/x
    up to 10, then the asymptotic series. NaN at the poles (0, -1, -2, ...)."""
    shift = 0.0
    if x < 0.5:
        if x == math.floor(x):
            return math.nan
        shift = -math.pi / math.tan(math.pi * x)  # psi(x) = psi(1 - x) - pi / tan(pi x)
        x = 1.0 - x
    while x < 10.0:
        shift -= 1.0 / x
        x += 1.0
    r = 1.0 / (x * x)
    series = r * (
        1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r * (1 / 132 - r * (691 / 32760 - r / 12)))))
    )
    return shift + math.log(x) - 0.5 / x - series


digamma = njit(cache=True)(psi)


def check_index(site: int, shape: tuple, index: tuple, at: int) -> tuple:
    """``index`` if it lies in ``shape`` (no negative indices), else IndexError(site, index, shape, at): the
    access ``site`` of a ``PAD_DEBUG`` kernel (``pad.kernel.checks``) at launch index ``at``."""
    for d in range(len(index)):
        if not 0 <= index[d] < shape[d]:
            raise IndexError(site, index, shape, at)
    return index


checked = njit(cache=True)(check_index)
