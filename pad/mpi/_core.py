"""What every differentiable MPI op shares: ``Comm``, ``Request``, the op table, checks and staging.

Each op family (``p2p``, ``nonblocking``, ``collectives``, ``reductions``, ``communicators``) registers
its ops here with :func:`register`, which installs them as ``Comm`` methods. A method is a plain mpi4py
call outside ``autodiff``/``fwddiff``; inside them it runs the op's implementation, which does the primal
transfer on the user's communicator, then its tangent (``fwddiff``: point-to-point messages carry it
along, collectives repeat on a private duplicate) or records its adjoint, which the reverse pass runs on
the private duplicate, so pad's own traffic can never match the user's messages.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import os
import threading
import weakref
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import from_numpy_dtype

from pad import arrays, replay, tape
from pad.mpi import _wire

IN_PLACE = MPI.IN_PLACE
SUM, PROD, MIN, MAX = MPI.SUM, MPI.PROD, MPI.MIN, MPI.MAX
ANY_SOURCE, ANY_TAG = MPI.ANY_SOURCE, MPI.ANY_TAG

OPS: dict[str, Callable[..., Any]] = {}
"""The op table: method name -> differentiable implementation ``impl(comm, ctx, *mpi4py_args)``."""

EMPTY = np.empty(0, np.uint8)
"""The adjoint of an integer message: integer buffers have no shadow, but their adjoint message is still
sent (empty), so a float/integer mismatch between two ranks is an error instead of a hang."""


class MismatchError(ValueError):
    """Ranks disagree on an op's buffers (shape, dtype), root or reduction op; raised on every rank."""


class Adjoint:
    """A tape record whose reverse runs a closure: an op's adjoint, written beside its forward (timed as the
    ``reverse`` phase of ``pad.mpi.stats()``). ``comm``: the mpi4py communicator the adjoint communicates
    on (``tape.Record``'s), None for an adjoint that stays on its rank; ``device``: the closure only enqueues
    CuPy work (a copy's adjoint), which a CUDA graph can capture.

    In a step ``pad.graph`` records, the reverse pass adds the closure to the record as it runs it, and a
    replay runs it again in its place: the same messages to the same ranks with the same tags, into
    buffers the record holds."""

    __slots__ = ("comm", "device", "run")
    replayable = True

    def __init__(self, run: Callable[[], None], comm: Any = None, device: bool = False) -> None:
        self.run, self.comm, self.device = run, comm, device

    def reverse(self) -> None:
        run = functools.partial(_timed, "reverse", self.run)
        record = replay.recording()
        if record is None:
            run()
            return
        record.add(run, cupy=self.device, quiet=True)  # adjoints write shadows and scratch only
        with record.covering():
            run()


# ---------------------------------------------------------------------------------------------- Comm
class Comm:
    """A communicator whose upper-case methods are differentiable (mpi4py's signatures, NumPy buffers).

    Wrapping is collective: it duplicates ``comm`` into a private communicator that carries pad's
    adjoint traffic, collective tangents and consistency checks.
    """

    def __init__(self, comm: Any) -> None:
        if isinstance(comm, Comm):
            comm = comm.mpi
        self.mpi: Any = comm
        self.private: Any = comm.Dup()
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        self._reversed: Any = None
        self._check = np.empty(2, np.int64)  # agree()'s buffer
        self._born_in: Any = None  # weak reference to the autodiff context that created it, if any
        self._free_pending = False
        self._staging: dict[tuple, np.ndarray] = {}  # host buffers of blocking ops' device arguments

    def wire(self, stage: str, op: str, adj: str = "", private: bool = True, tag: int | None = None) -> Wire:
        """This communicator's private one (``private=False``: the user's), accounting for its calls as
        made by op ``op`` in ``stage`` (``Wire``); ``tag``: an adjoint message's, its primal's tag."""
        return Wire(self, self.private if private else self.mpi, stage, op, adj, tag=tag)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return self._size

    def reversed(self) -> Any:
        """The private communicator with ranks reversed (for reverse scans); collective on first use."""
        if self._reversed is None:
            self._reversed = self.private.Split(0, self._size - 1 - self._rank)
        return self._reversed

    def release(self) -> None:
        """Free the user's and pad's communicators."""
        for c in (self._reversed, self.private, self.mpi):
            if c is not None and c != MPI.COMM_WORLD and c != MPI.COMM_NULL:
                c.Free()
        self._reversed = None

    def __repr__(self) -> str:
        return f"pad.mpi.Comm(rank {self._rank} of {self._size})"

    if TYPE_CHECKING:  # the methods are installed by register()

        def __getattr__(self, name: str) -> Any: ...


def register(name: str, *, passthrough: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Put ``impl`` in the op table and install it as ``Comm.<name>``.

    With ``passthrough`` the method is mpi4py's own call outside autodiff/fwddiff (CuPy buffers are staged
    through host memory); otherwise ``impl`` always runs and receives ``ctx`` (possibly ``None``).
    """

    def deco(impl: Callable[..., Any]) -> Callable[..., Any]:
        OPS[name] = impl
        if passthrough:

            def method(self: Comm, *args: Any, **kwargs: Any) -> Any:
                ctx = tape.current()
                began = _wire.start()
                try:
                    return passed(self, ctx, args, kwargs)
                finally:
                    _wire.stop(current_phase(ctx), began)

            def passed(self: Comm, ctx: tape.Context | None, args: tuple, kwargs: dict) -> Any:
                device = _on_device(args, kwargs)
                if ctx is None:
                    _wire.plain_call()
                if self._size == 1 and name in ONE_RANK and device:
                    # a device copy, which adds itself to the record a pad.graph step is making
                    return ONE_RANK[name](ctx, *args, **kwargs)
                _refused(self, name, ctx, args, kwargs)
                if device and hands_over(self, ctx, name):
                    if ctx is None:
                        return plain(self, name, args, kwargs)
                    for a in (*args, *kwargs.values()):
                        arrays.synchronize(a)
                    return impl(self, ctx, *args, **kwargs)
                if ctx is None and not device:
                    return plain(self, name, args, kwargs)
                return _staged(self, ctx, name, impl, args, kwargs)

        else:

            def method(self: Comm, *args: Any, **kwargs: Any) -> Any:
                ctx = tape.current()
                _refused(self, name, ctx, args, kwargs)
                began = _wire.start()
                try:
                    return impl(self, ctx, *args, **kwargs)
                finally:
                    _wire.stop(current_phase(ctx), began)

        method.__name__ = method.__qualname__ = name
        method.__doc__ = impl.__doc__
        setattr(Comm, name, method)
        return impl

    return deco


# ---------------------------------------------------------------------------------------------- Request
class Request:
    """A pending ``Isend``/``Irecv`` made inside autodiff/fwddiff, or in a step ``pad.graph`` records
    (elsewhere pad returns mpi4py's own).

    ``Wait`` completes the transfer, then accounts for what arrived (``arrived``: steps a replay's wait
    runs too) and runs the op's completion steps (in fwddiff: unpack the tangent; in autodiff: record the
    Wait, whose adjoint starts the adjoint transfer). A replay starts the transfer again into the same
    request (``restart``), so that the step's recorded wait waits for it.
    """

    __slots__ = ("__weakref__", "_arrived", "_done", "_reqs", "_then")

    def __init__(
        self,
        reqs: list[Any],
        then: list[Callable[[list[Any]], None]] | None = None,
        arrived: list[Callable[[list[Any]], None]] | None = None,
    ) -> None:
        self._reqs = reqs
        self._then = then or []
        self._arrived = arrived or []
        self._done = False

    def restart(self, start: Callable[[], Any]) -> None:
        """Make the transfer anew: ``start()`` returns mpi4py's request."""
        self._reqs = [start()]
        self._done = False

    def Wait(self, status: Any = None) -> None:
        """Wait for the transfer to complete (``status`` receives its status)."""
        Request.Waitall([self], None if status is None else [status])

    @staticmethod
    def Waitall(requests: list[Any], statuses: list[Any] | None = None) -> None:
        """Wait for every request (pad's or mpi4py's) in one MPI Waitall, then run pad's completion
        steps in the order of ``requests``."""
        began = _wire.start()
        phase = current_phase(tape.current())
        try:
            record = replay.recording()
            if record is not None:
                _record_wait(record, phase, requests, statuses)
            Request._waitall(requests, statuses, True)
        finally:
            _wire.stop(phase, began)

    @staticmethod
    def _waitall(requests: list[Any], statuses: list[Any] | None, live: bool) -> None:
        """The wait; ``live``: the step's own, which runs the completion steps (a replay's runs ``arrived``
        only: the rest was recorded as the step ran, or belongs to the tape)."""
        inner: list[Any] = []
        sts: list[Any] = []
        for i, r in enumerate(requests):
            reqs = [r] if isinstance(r, MPI.Request) else [] if r._done else r._reqs
            for k, req in enumerate(reqs):
                inner.append(req)
                sts.append(statuses[i] if statuses is not None and k == 0 else MPI.Status())
        MPI.Request.Waitall(inner, sts)
        at = 0
        for r in requests:
            if isinstance(r, Request) and not r._done:
                mine, at = sts[at : at + len(r._reqs)], at + len(r._reqs)
                r._done = True
                for step in (*r._arrived, *r._then) if live else r._arrived:
                    step(mine)
            elif isinstance(r, MPI.Request):
                at += 1


def _record_wait(
    record: replay.Recording, phase: str, requests: list[Any], statuses: list[Any] | None
) -> None:
    """Add a wait to the record a ``pad.graph`` step is making: a replay waits for the same requests, which
    its entries started again; one the step did not start (before it, or mpi4py's own) it could not."""
    mine = _started.get(record, {})
    if any(mine.get(id(r)) is not r for r in requests):
        record.refuse("it waits for a request it did not start with pad.mpi, which a replay could not start")
        return
    wait = functools.partial(Request._waitall, list(requests), statuses, False)
    record.add(functools.partial(_timed, phase, wait), cupy=False, quiet=True)


_started: weakref.WeakKeyDictionary[replay.Recording, dict[int, Request]] = weakref.WeakKeyDictionary()
"""The requests each record's step started, by id."""


def started(request: Request) -> Request:
    """``request``, started in the step whose record is being made, if any: its waits may be recorded, and
    the record is refused if the step returns without waiting for it (a replay would start it again)."""
    record = replay.recording()
    if record is not None:
        mine = _started.get(record)
        if mine is None:
            mine = _started[record] = {}

            def all_waited() -> None:
                if any(not r._done for r in mine.values()):
                    record.refuse("it returns before waiting for a request it started")

            record.finish.append(all_waited)
        mine[id(request)] = request
    return request


def plain(comm: Comm, name: str, args: tuple, kwargs: dict) -> Any:
    """mpi4py's own call ``name`` on the user's communicator; in a step ``pad.graph`` records, added to the
    record (a non-blocking call's request then a pad ``Request``, which its replays start again; a receive's
    size checked at every replay, ``same_size``)."""
    if replay.recording() is None:
        return getattr(comm.mpi, name)(*args, **kwargs)
    given = list(_arguments(name, comm, None, args, kwargs).values())  # mpi4py's order, defaults filled in
    method = functools.partial(getattr(comm.mpi, name), *given)
    _, receives, at = MESSAGES.get(name, (None, None, None))
    check = same_size(name) if receives is not None else None
    if name not in NONBLOCKING:
        if check is None or at is None:
            return redone("plain", method, given, plain=True)
        if given[at] is None:
            given[at] = MPI.Status()
            method = functools.partial(getattr(comm.mpi, name), *given)

        def received() -> None:
            method()
            check(given[at])

        return redone("plain", received, given, plain=True)
    request = started(Request([], arrived=[] if check is None else [lambda statuses: check(statuses[0])]))
    redone("plain", functools.partial(request.restart, method), given, plain=True)
    return request


def same_size(call: str) -> Callable[[Any], None]:
    """A check of the receive ``call`` of a step ``pad.graph`` records, given its status at every arrival:
    that a replay's message has the size the record's had (its sender decides it as it runs, which a
    replay does not redo)."""
    count: list[int] = []

    def check(status: Any) -> None:
        nbytes = status.Get_count(MPI.BYTE)
        if not count:
            count.append(nbytes)
        elif nbytes != count[0]:
            raise RuntimeError(
                f"pad.graph: a replayed {call} from rank {status.Get_source()} received {nbytes} bytes where its "
                f"record received {count[0]}: the message's size is decided as the step runs, so the step "
                "cannot be replayed (call it outside pad.graph)"
            )

    return check


NONBLOCKING = frozenset(("Isend", "Irecv"))
"""The ops that return a request."""


def redone(
    phase: str, work: Callable[[], Any], buffers: Any = (), *, plain: bool = False, enqueues: bool = False
) -> Any:
    """``work()``, an op's host or MPI work on ``buffers``; in a step ``pad.graph`` records, added to the
    record first. A replay then waits for the device work queued on the device buffers among ``buffers``
    (MPI reads them outside the stream), does ``work`` timed in ``phase`` of ``pad.mpi.stats()`` (counted
    as a call there: ``plain``), and leaves the record's quiet span unless ``buffers`` are all floating
    point (``replay.quiet_span``). ``enqueues``: where ``buffers`` are all CuPy's, ``work`` only enqueues
    device work on them (a halo's packing): then it is recorded as such, for a CUDA graph to capture."""
    record = replay.recording()
    if record is not None:
        held = [a for a in buffers if hasattr(a, "dtype") and hasattr(a, "shape")]
        quiet = all(a.dtype.kind == "f" for a in held)
        if enqueues and held and all(map(arrays.is_cupy, held)):
            record.add(work, cupy=True, quiet=quiet)
        else:
            device = [a for a in held if arrays.is_device(a)]
            record.add(functools.partial(_replayed, phase, work, device, plain), cupy=False, quiet=quiet)
    return work()


def _replayed(phase: str, work: Callable[[], Any], device: list[Any], plain: bool) -> None:
    """A replay of ``redone``'s ``work``."""

    def redo() -> None:
        if plain:
            _wire.plain_call()
        for a in device:
            arrays.synchronize(a)
        work()

    _timed(phase, redo)


def _timed(phase: str, work: Callable[[], Any]) -> None:
    """``work()``, timed in ``phase`` of ``pad.mpi.stats()``."""
    began = _wire.start()
    try:
        work()
    finally:
        _wire.stop(phase, began)


_SIGNATURES: dict[str, inspect.Signature] = {}


def _refused(comm: Comm, name: str, ctx: tape.Context | None, args: tuple, kwargs: dict) -> None:
    """Refuse the record a ``pad.graph`` step is making if a replay could not redo op ``name`` as it runs now:
    communicators made or freed, receives from any rank or of any tag (which message arrives decides what
    the step does), tangents of fwddiff."""
    record = replay.recording()
    if record is None:
        return
    if name in ("Split", "Dup", "Free"):
        record.refuse(f"it makes or frees a communicator ({name}), which a replay could not")
        return
    if record.ranks is not None and comm._size > record.ranks:
        record.refuse(
            f"it communicates ({name} on {comm._size} ranks) in a step that {record.ranks} rank(s) decide to "
            "replay or not"
        )
        return
    if ctx is not None and not ctx.reverse_mode:
        record.refuse(
            f"it differentiates {name} in forward mode (fwddiff), whose tangents a replay does not send"
        )
        return
    if name in ("Recv", "Irecv", "Sendrecv"):
        given = _arguments(name, comm, ctx, args, kwargs)
        source, tag = given["source"], given["recvtag" if name == "Sendrecv" else "tag"]
        if source == ANY_SOURCE or tag == ANY_TAG:
            record.refuse(
                f"it receives from any rank or with any tag ({name}): which message arrives is decided as the "
                "step runs, and a replay would not decide again"
            )


def _arguments(name: str, comm: Comm, ctx: tape.Context | None, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of a call of op ``name`` by name, in mpi4py's order (its implementation's, after ``comm``
    and ``ctx``), defaults filled in."""
    signature = _SIGNATURES.get(name)
    if signature is None:
        signature = _SIGNATURES[name] = inspect.signature(OPS[name])
    bound = signature.bind(comm, ctx, *args, **kwargs)
    bound.apply_defaults()
    return dict(list(bound.arguments.items())[2:])


# ---------------------------------------------------------------------------------------------- state
class _State:
    """What pad.mpi tracks per autodiff/fwddiff call: message counters and requests not yet waited."""

    def __init__(self) -> None:
        self.counts: dict[tuple, int] = {}
        self.pending: dict[int, str] = {}


_states: weakref.WeakKeyDictionary[tape.Context, _State] = weakref.WeakKeyDictionary()


def state(ctx: tape.Context) -> _State:
    st = _states.get(ctx)
    if st is None:
        st = _states[ctx] = _State()
    return st


def used(ctx: tape.Context) -> bool:
    """Whether any pad.mpi op ran inside this context."""
    return ctx in _states


_TAG_BITS = 11
_SEQ_MOD = max(1, (int(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767) + 1) >> _TAG_BITS)


def pair_tag(ctx: tape.Context, comm: Comm, direction: str, peer: int, tag: int) -> int:
    """The private tag of this message's adjoint: its user tag and its sequence number.

    The k-th message from rank a to rank b with tag t has the same k on both ranks (MPI does not let
    messages between a pair with one tag overtake each other), so adjoint messages match their primal
    whatever order the reverse pass starts them in (Waits may complete in different orders on the two
    ranks).
    """
    counts = state(ctx).counts
    key = (id(comm), direction, peer, tag)
    k = counts.get(key, 0)
    counts[key] = k + 1
    return (tag % (1 << _TAG_BITS)) + ((k % _SEQ_MOD) << _TAG_BITS)


# ---------------------------------------------------------------------------------------------- buffers
def as_array(buf: Any) -> Any:
    """The NumPy array of an mpi4py buffer argument (``arr``, ``[arr, type]``, ``[arr, count, type]``), or
    the device array handed to a CUDA-aware MPI (``DIRECT``).

    ``None`` and ``IN_PLACE`` pass through. Only whole-array buffers are differentiated.
    """
    if buf is None or buf is IN_PLACE or isinstance(buf, np.ndarray) or arrays.is_device(buf):
        return buf
    if isinstance(buf, (list, tuple)) and buf and isinstance(buf[0], np.ndarray):
        arr = buf[0]
        if all(r == arr.size or r == from_numpy_dtype(arr.dtype) for r in buf[1:]):
            return arr
    raise TypeError(
        f"pad.mpi differentiates whole NumPy arrays as buffers, got {type(buf).__name__}; "
        "pass a view (a[:n]) instead of a count or a derived datatype"
    )


def shadow(ctx: tape.Context, x: np.ndarray) -> np.ndarray | None:
    """``x``'s shadow for communication: ``None`` for integer data; zeros (discarded) where ``x`` is Const."""
    return None if x.dtype.kind != "f" else float_shadow(ctx, x)


def float_shadow(ctx: tape.Context, x: Any) -> Any:
    """The shadow of a floating-point buffer (zeros, discarded, where it is Const); ``IN_PLACE`` and
    ``None`` stand for themselves."""
    if x is None or x is IN_PLACE:
        return x
    dx = ctx.shadow(x)
    return dx if dx is not None else arrays.zeros_like(x)


def flat(x: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` elements of ``x`` (``x`` itself when that is all of it), as a view."""
    if count == x.size:
        return x
    if not arrays.c_contiguous(x):
        raise ValueError("pad.mpi: a partial receive needs a contiguous shadow")
    return x.reshape(-1)[:count]


def joined(x: np.ndarray, dx: np.ndarray | None, receiving: bool) -> np.ndarray:
    """The buffer of a point-to-point message in fwddiff: primal and tangent travel as one message
    (so the program's matching, and its freedom from deadlock, are the primal's); integer data alone."""
    if dx is None:
        return x
    if receiving:
        return np.empty(2 * x.size, x.dtype)
    return np.concatenate((x.reshape(-1), dx.reshape(-1)))


def split(both: np.ndarray, x: np.ndarray, dx: np.ndarray | None, status: Any) -> None:
    """Unpack a received fwddiff message into ``x`` and its tangent; ``status`` then counts ``x``'s part."""
    if dx is None:
        return
    count = status.Get_count(MPI.BYTE) // x.itemsize // 2
    for target, part in ((flat(x, count), both[:count]), (flat(dx, count), both[count : 2 * count])):
        target[...] = part.reshape(target.shape)
    status.Set_elements(MPI.BYTE, count * x.itemsize)


def outgoing(dx: np.ndarray | None) -> np.ndarray:
    """What a message's adjoint carries: the shadow, or nothing for integer data."""
    return EMPTY if dx is None else dx


def incoming(dx: np.ndarray | None) -> np.ndarray:
    """A buffer to receive the adjoint message for shadow ``dx`` into (empty for integer data)."""
    return EMPTY if dx is None else arrays.empty(dx, dx.shape, dx.dtype)


def checked(run: Callable[[Any], Any], expected: np.ndarray, what: str, peer: int) -> None:
    """Run a receive of an adjoint message (``run(status)``) and check that it filled ``expected``."""
    st = MPI.Status()
    try:
        run(st)
    except MPI.Exception as err:
        if err.Get_error_class() != MPI.ERR_TRUNCATE:
            raise
        expect(-1, expected, what, peer)
    expect(st.Get_count(MPI.BYTE), expected, what, peer)


def expect(nbytes: int, expected: np.ndarray, what: str, peer: int) -> None:
    """Raise :class:`MismatchError` unless an adjoint message of ``nbytes`` (-1: too many) fits."""
    if nbytes != expected.nbytes:
        got = "more" if nbytes < 0 else str(nbytes)
        raise MismatchError(
            f"pad.mpi: {what} with rank {peer}: this rank's buffer needs {expected.nbytes} bytes of shadow "
            f"but the other rank's has {got}; the two ranks' buffers differ in dtype or size"
        )


_OP_NAMES = {
    getattr(MPI, name).py2f(): name
    for name in ("SUM", "PROD", "MIN", "MAX", "LAND", "BAND", "LOR", "BOR", "LXOR", "BXOR")
}
_OP_NAMES.update({getattr(MPI, name).py2f(): name for name in ("MINLOC", "MAXLOC", "REPLACE", "NO_OP")})


def op_name(op: Any) -> str:
    return _OP_NAMES.get(op.py2f(), "user-defined op")


def agree(comm: Comm, *signature: Any) -> None:
    """Collective check that every rank calls the same op with matching buffers, root and reduction op.

    One small Allreduce on the private communicator; on a mismatch every rank raises
    :class:`MismatchError` listing each rank's call, so no rank is left waiting. A replay of a step
    ``pad.graph`` recorded checks again: the ranks that replay make the same calls as those that run it.
    """
    check = functools.partial(_agree, comm, zlib.crc32(repr(signature).encode()), signature)
    redone(current_phase(tape.current()), check)


def _agree(comm: Comm, h: int, signature: tuple) -> None:
    buf = comm._check
    buf[0], buf[1] = h, -h
    comm.private.Allreduce(IN_PLACE, buf, MAX)
    if buf[0] != h or buf[1] != -h:
        calls = comm.private.allgather(signature)
        lines = "\n  ".join(f"rank {r}: {sig}" for r, sig in enumerate(calls))
        raise MismatchError(f"pad.mpi: ranks disagree on a collective call:\n  {lines}")


def require(op: Any, allowed: tuple[str, ...], call: str) -> str:
    """The op's name if ``call`` can differentiate it, else a NotImplementedError (same on every rank)."""
    name = op_name(op)
    if name not in allowed:
        raise NotImplementedError(
            f"pad.mpi: {call} with {name} cannot be differentiated on floating-point data; "
            f"supported: {', '.join(allowed)} (integer buffers accept any op)"
        )
    return name


def phase(ctx: tape.Context) -> str:
    return "forward" if ctx.reverse_mode else "tangent"


def current_phase(ctx: tape.Context | None) -> str:
    """The phase of ``pad.mpi.stats()`` a call made now counts in (``plain`` outside autodiff/fwddiff)."""
    return "plain" if ctx is None else phase(ctx)


def _input(sendbuf: Any, recvbuf: Any) -> Any:
    """What a collective reduces or scans: ``recvbuf`` under IN_PLACE, else ``sendbuf``."""
    return recvbuf if sendbuf is IN_PLACE else sendbuf


def _nbytes(buf: Any) -> int:
    return 0 if buf is None or buf is IN_PLACE else int(buf.nbytes)


# Per collective MPI call: the position of its ``root`` argument (or None), and the bytes that rank ``me`` of
# ``p`` receives, from the call's arguments (mpi4py's order).
RECEIVES: dict[str, tuple[int | None, Callable[..., int]]] = {
    "Bcast": (1, lambda me, p, root, buf, *_: 0 if me == root else _nbytes(buf)),
    "Reduce": (3, lambda me, p, root, s, r, *_: (p - 1) * _nbytes(_input(s, r)) if me == root else 0),
    "Allreduce": (None, lambda me, p, root, s, r, *_: (p - 1) * _nbytes(_input(s, r))),
    "Gather": (2, lambda me, p, root, s, r, *_: (p - 1) * _nbytes(r) // p if me == root else 0),
    "Scatter": (2, lambda me, p, root, s, r, *_: 0 if me == root else _nbytes(r)),
    "Allgather": (None, lambda me, p, root, s, r: (p - 1) * _nbytes(r) // p),
    "Alltoall": (None, lambda me, p, root, s, r: (p - 1) * _nbytes(r) // p),
    "Reduce_scatter_block": (None, lambda me, p, root, s, r, *_: (p - 1) * _nbytes(_input(s, r)) // p),
    "Scan": (None, lambda me, p, root, s, r, *_: me * _nbytes(_input(s, r))),
    "Exscan": (None, lambda me, p, root, s, r, *_: me * _nbytes(_input(s, r))),
    "Barrier": (None, lambda me, p, root: 0),
}


# Per point-to-point MPI call: the positions of what it sends (buffer, destination, tag) and of what it
# receives (buffer, source, tag) among its arguments (mpi4py's order), and of its status.
MESSAGES: dict[str, tuple[tuple[int, int, int] | None, tuple[int, int, int] | None, int | None]] = {
    "Send": ((0, 1, 2), None, None),
    "Isend": ((0, 1, 2), None, None),
    "Recv": (None, (0, 1, 2), 3),
    "Irecv": (None, (0, 1, 2), None),
    "Sendrecv": ((0, 1, 2), (3, 4, 5), 6),
}


class Wire:
    """An mpi4py communicator of ``comm`` whose calls account for themselves (``pad.mpi.stats``,
    ``PAD_MPI_DEBUG``) as made by pad op ``op`` in ``stage`` (with adjoint ``adj``), from their arguments:
    a collective's root and the bytes this rank receives (``RECEIVES``); a message's peers and tag
    (``MESSAGES``; ``tag``, where given, instead: an adjoint message is logged under its primal's).

    A message on the user's communicator is logged when it arrives, from its status (a wildcard receive's
    source and tag, a partial one's size; a non-blocking receive returns a :class:`Request` that logs it
    when waited); pad's own messages, whose sizes ``checked`` enforces, when they are made. In fwddiff
    (``carry``: the context) each message carries its buffer's tangent too, received into a joined buffer
    and split after; the log counts the value's part.
    """

    def __init__(
        self,
        comm: Comm,
        mpi: Any,
        stage: str,
        op: str,
        adj: str = "",
        where: str | None = None,
        tag: int | None = None,
        carry: tape.Context | None = None,
    ) -> None:
        self.comm, self.mpi, self.stage, self.op, self.adj, self.where = comm, mpi, stage, op, adj, where
        self.tag, self.carry = tag, carry

    def __getattr__(self, call: str) -> Callable[..., Any]:
        if call in MESSAGES:
            return functools.partial(self._message, call)
        at, receives = RECEIVES[call]
        method = getattr(self.mpi, call)

        def logged(*args: Any) -> None:
            def transfer() -> None:
                method(*args)
                root = None if at is None else args[at]
                where = self.where if self.where is not None else "" if root is None else f"root {root}"
                nbytes = receives(self.mpi.Get_rank(), self.mpi.Get_size(), root, *args)
                _wire.note(self.comm.rank, self.stage, call, where, None, nbytes, self.op, self.adj)

            redone(self.stage, transfer, args)

        return logged

    def _message(self, call: str, *given: Any) -> Any:
        """Make point-to-point ``call`` with mpi4py's arguments ``given``, and log it (see the class); in a
        step ``pad.graph`` records, add it to the record (a non-blocking call returns a ``Request`` whose
        replays start the transfer again)."""
        sends, receives, at = MESSAGES[call]
        args = list(given) + [None] * (0 if at is None else at + 1 - len(given))
        if at is not None and args[at] is None:
            args[at] = MPI.Status()  # it says what arrived
        ours = self.mpi is not self.comm.mpi  # pad's own message: logged when made
        sent = list(args)
        into: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None
        if self.carry is not None:
            if sends is not None:
                x = args[sends[0]]
                sent[sends[0]] = joined(x, shadow(self.carry, x), False)
            if receives is not None:
                y = args[receives[0]]
                dy = shadow(self.carry, y)
                sent[receives[0]] = joined(y, dy, True)
                into = (sent[receives[0]], y, dy)
        method = functools.partial(getattr(self.mpi, call), *sent)
        buffers = [args[where[0]] for where in (sends, receives) if where is not None]
        check = same_size(call)

        def arrived(status: Any) -> None:
            if into is not None:
                split(*into, status)
            check(status)
            self._log(call, args, status)

        if call not in NONBLOCKING:
            status = None if at is None else args[at]

            def transfer() -> None:
                method()
                if receives is None or ours or status is None:
                    self._log(call, args, None)
                else:
                    arrived(status)

            redone(self.stage, transfer, buffers)
            return None
        if ours:  # the reverse pass's (recorded whole, as its adjoint): mpi4py's request
            result = method()
            self._log(call, args, None)
            return result
        logs = receives is None
        request = started(Request([], arrived=[] if logs else [lambda statuses: arrived(statuses[0])]))

        def start() -> Any:
            result = method()
            if logs:
                self._log(call, args, None)
            return result

        redone(self.stage, functools.partial(request.restart, start), buffers)
        return request

    def _log(self, call: str, args: list[Any], status: Any) -> None:
        """Account for a point-to-point call, from its status where given (what arrived), else from its
        arguments."""
        sends, receives, _ = MESSAGES[call]
        peers = [] if sends is None else [f"-> {args[sends[1]]}"]
        tag, nbytes = None if sends is None else args[sends[2]], 0
        if receives is not None:
            buf, source, tag_at = receives
            peers.append(f"<- {args[source] if status is None else status.Get_source()}")
            tag = tag if tag is not None else args[tag_at] if status is None else status.Get_tag()
            nbytes = _nbytes(args[buf]) if status is None else status.Get_count(MPI.BYTE)
        tag = self.tag if self.tag is not None else tag
        _wire.note(self.comm.rank, self.stage, call, " ".join(peers), tag, nbytes, self.op, self.adj)


def messages(comm: Comm, ctx: tape.Context, op: str, adj: str) -> Wire:
    """The user's communicator, for point-to-point op ``op`` (whose adjoint calls ``adj``): its calls log
    themselves; in fwddiff each message carries its buffer's tangent."""
    return Wire(comm, comm.mpi, phase(ctx), op, adj, carry=None if ctx.reverse_mode else ctx)


def _copy(ctx: tape.Context | None, sendbuf: Any, recvbuf: Any, *_: Any, **__: Any) -> None:
    """A collective of one rank whose result is its input (Allreduce, Allgather, ...): a device copy,
    differentiated as one (the reduction of one value is that value, whatever the op)."""
    if sendbuf is IN_PLACE:
        return
    dst = recvbuf.reshape(sendbuf.shape)
    if ctx is not None:
        state(ctx)
        ctx.will_write([dst])
    arrays.assign(dst, sendbuf)
    replay.done(arrays.assign, dst, sendbuf)
    if ctx is not None and sendbuf.dtype.kind == "f":
        _link_copy(ctx, src=sendbuf, dst=dst)


def _nothing(*_: Any, **__: Any) -> None:
    """A collective of one rank that moves nothing (Bcast, Barrier, Exscan)."""


ONE_RANK: dict[str, Callable[..., None]] = {
    **dict.fromkeys(
        ("Allreduce", "Reduce", "Allgather", "Gather", "Scatter", "Alltoall", "Reduce_scatter_block", "Scan"),
        _copy,
    ),
    **dict.fromkeys(("Bcast", "Barrier", "Exscan"), _nothing),
}
"""Collectives that a communicator of one rank runs on device buffers without staging them through the host:
no host round trip per call (a LULESH cycle's time step), and a ``pad.graph`` step can capture them."""


# ---------------------------------------------------------------------------------------------- device buffers
DIRECT = frozenset(("Isend", "Irecv"))
"""Ops that hand device buffers to a CUDA-aware MPI inside ``autodiff`` too (the messages of halo exchanges,
and their adjoints). Outside ``autodiff``/``fwddiff`` every op does; the others stage through host memory."""

_cuda_aware: list[tuple[bool, str]] = []


def transport() -> dict[str, str]:
    """How pad.mpi moves device buffers between ranks: ``{"device_buffers": "direct" | "staged", "why": ...}``.

    ``direct`` where the MPI library says it is CUDA-aware (``MPIX_Query_cuda_support()``, which Open MPI and
    MPICH provide, returns 1) or ``PAD_MPI_CUDA_AWARE=1`` says so: plain calls, and ``DIRECT`` ops inside
    ``autodiff``, hand mpi4py the device buffers once the device's queued work is done. Otherwise, or with
    ``PAD_MPI_CUDA_AWARE=0``, device buffers are copied through host memory (and the copies differentiated).
    """
    if not _cuda_aware:
        _cuda_aware.append(_query_cuda_support())
    aware, why = _cuda_aware[0]
    return {"device_buffers": "direct" if aware else "staged", "why": why}


def _query_cuda_support() -> tuple[bool, str]:
    setting = os.environ.get("PAD_MPI_CUDA_AWARE")
    if setting is not None:
        if setting not in ("0", "1"):
            raise ValueError(f"PAD_MPI_CUDA_AWARE must be 0 or 1, not {setting!r}")
        return setting == "1", f"PAD_MPI_CUDA_AWARE={setting}"
    try:  # mpi4py does not wrap it; the MPI library is a dependency of mpi4py's extension module
        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return False, "the MPI library has no MPIX_Query_cuda_support"
    query.restype = ctypes.c_int
    answer = int(query())
    return answer == 1, f"MPIX_Query_cuda_support() returned {answer}"


def direct(comm: Comm) -> bool:
    """Whether device buffers go to MPI as they are (logged once per process with ``PAD_MPI_DEBUG``)."""
    first = not _cuda_aware
    how = transport()
    if first:
        _wire.say(comm.rank, f"device buffers: {how['device_buffers']} ({how['why']})")
    return how["device_buffers"] == "direct"


def hands_over(comm: Comm, ctx: tape.Context | None, name: str) -> bool:
    """Whether op ``name`` hands device buffers to MPI as they are (else it stages them through host memory):
    where MPI is CUDA-aware, outside ``autodiff``/``fwddiff`` and, for the ``DIRECT`` ops, inside ``autodiff``."""
    return (ctx is None or (ctx.reverse_mode and name in DIRECT)) and direct(comm)


def _on_device(args: tuple, kwargs: dict) -> bool:
    return any(arrays.is_device(a) for a in (*args, *kwargs.values()))


def _staged(
    comm: Comm, ctx: tape.Context | None, name: str, impl: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    """Run an op whose buffers may be device arrays (CuPy or numba's): copy them to host, run, copy back
    (differentiably). A blocking op's host buffers are the communicator's, kept for this thread's next call
    of that op with arguments alike (done with when the call returns, adjoints included), so that a step
    that communicates makes no new arrays once it has run (a checkpointed loop replays such a step); a
    non-blocking op's are its own, since another may start before it completes."""
    if ctx is not None:
        state(ctx)  # marks the context as one that communicates
        if ctx.protected:  # arrays under differentiation, read-only to the program: receive into aliases
            args = tuple(_writable(ctx, a) for a in args)
            kwargs = {k: _writable(ctx, v) for k, v in kwargs.items()}
    if not _on_device(args, kwargs):
        return impl(comm, ctx, *args, **kwargs)
    direct(comm)  # logs the choice
    blocking = name not in NONBLOCKING
    copies: list[tuple[Any, np.ndarray]] = []

    def host(a: Any, where: int | str) -> Any:
        if not arrays.is_device(a):
            return a
        key = (name, where, threading.get_ident(), a.shape, a.dtype.str)
        h = comm._staging.get(key) if blocking else None
        if h is None:
            h = np.empty(a.shape, a.dtype)
            if blocking:
                comm._staging[key] = h
        if ctx is not None:
            ctx.scratch(h)
        copy_staged(ctx, a, h)  # a value kept of its last call is copied first
        copies.append((a, h))
        return h

    def back(_: Any = None) -> None:
        for d, h in copies:
            copy_staged(ctx, h, d)

    hargs = tuple(host(a, k) for k, a in enumerate(args))
    hkwargs = {k: host(v, k) for k, v in kwargs.items()}
    result = plain(comm, name, hargs, hkwargs) if ctx is None else impl(comm, ctx, *hargs, **hkwargs)
    if isinstance(result, MPI.Request):
        return Request([result], [back])
    if isinstance(result, Request):
        result._then.append(back)
        return result
    back()
    return result


def _writable(ctx: tape.Context, buf: Any) -> Any:
    """A buffer argument (``arr``, ``[arr, ...]``) with its array writable (``tape.Context.writable``)."""
    if isinstance(buf, (list, tuple)) and buf:
        return type(buf)([ctx.writable(buf[0]), *buf[1:]])
    return ctx.writable(buf)


def copy_staged(ctx: tape.Context | None, src: Any, dst: Any) -> None:
    """``dst[...] = src`` between device and host memory (one transfer of the whole array where both are
    contiguous): counted in ``pad.mpi.stats()``, added to the record a ``pad.graph`` step is making, and
    differentiated."""
    if ctx is not None:
        ctx.will_write([dst])
    phase = current_phase(ctx)
    redone(phase, functools.partial(_staged_copy, phase, src, dst), (dst,))
    if ctx is not None and dst.dtype.kind == "f":
        _link_copy(ctx, src=src, dst=dst)


def _staged_copy(phase: str, src: Any, dst: Any) -> None:
    arrays.assign(dst, src)
    _wire.staged(phase, dst.nbytes)


def _link_copy(ctx: tape.Context, src: Any, dst: Any) -> None:
    """Differentiate the copy ``dst[...] = src`` (forward: copy the tangent; reverse: ``dsrc += ddst;
    ddst = 0``); the shadows' copies between host and device count as staged in ``pad.mpi.stats()``."""
    dsrc, ddst = ctx.shadow(src), ctx.shadow(dst)
    if dsrc is None or ddst is None:
        return
    crosses = arrays.is_device(dsrc) != arrays.is_device(ddst)

    if not ctx.reverse_mode:
        arrays.assign(ddst, dsrc)
        replay.done(arrays.assign, ddst, dsrc)
        if crosses:
            _wire.staged("tangent", ddst.nbytes)
        return

    if crosses:

        def staged() -> None:
            _add_and_zero(dsrc, ddst)
            _wire.staged("reverse", ddst.nbytes)

        ctx.record(Adjoint(staged))
        return
    ctx.record(Adjoint(functools.partial(_add_and_zero, dsrc, ddst), device=arrays.is_cupy(ddst)))


def _add_and_zero(dsrc: Any, ddst: Any) -> None:
    arrays.add(dsrc, ddst)
    arrays.zero(ddst)


COMM_WORLD = Comm(MPI.COMM_WORLD)
