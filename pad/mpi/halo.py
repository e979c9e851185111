"""Halo exchange on structured meshes: the pattern LULESH uses, built from pad.mpi's Isend/Irecv.

A rank's block of a Cartesian grid of ranks exchanges regions with its up to ``3**d - 1`` neighbours
(faces, edges, corners). Two layouts:
- shared points (``ghost=0``): neighbouring blocks both hold the points on their common boundary
  (LULESH's nodes); ``exchange(a, "sum")`` adds the neighbours' values there, so every copy of a shared
  point ends up with the total; ``exchange(a, "copy")`` gives every copy the value held by the highest
  rank that shares the point (LULESH's synchronisation of positions);
- ghost layers (``ghost=w``): each block has ``w`` layers of ghost points on every side;
  ``exchange(a, "copy")`` fills them with the neighbours' edge values.
Other layouts (ghost elements stored apart from the block, faces only) are links built by hand: a region is
any NumPy index of the block's axes (a tuple of slices, or an integer index array into a flat axis), or
``None`` where nothing is sent or received. Leading axes of ``a`` beyond the block's are fields: a
``(3, *block)`` array moves its three fields in one message per neighbour.
An exchange packs every outgoing region into one contiguous buffer and receives into another, the messages
being views of them; the ``Halo`` keeps both for its next exchange of those sizes, so a step that exchanges
makes no new arrays once it has run (a checkpointed loop replays such a step: pad/checkpoint/engine.py).
Device arrays whose messages pad would stage through host memory (an MPI that is not CUDA-aware) cross to
a page-locked host buffer in one copy each way per exchange, not one per message.
Differentiation: packing is a gather (adjoint: add back), a staged copy's adjoint is the reverse copy (so the
reverse pass crosses once each way too), the messages are pad's Isend/Irecv, unpacking adds (adjoint: the
shadow is read back) or copies (adjoint: read back, then zeroed).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from pad import arrays, tape
from pad.mpi import _wire
from pad.mpi._core import (
    Adjoint,
    Comm,
    Request,
    copy_staged,
    current_phase,
    float_shadow,
    hands_over,
    redone,
)

Region = Any  # a tuple of slices, or an integer index array into a flat axis


class Halo:
    """The links of one rank: for each neighbour, its rank, the region sent and the region received."""

    def __init__(
        self,
        comm: Comm,
        links: list[tuple[int, Region | None, Region | None, int, int]],
        *,
        shared: bool = False,
    ) -> None:
        """``links``: ``(neighbour, send_region, recv_region, send_tag, recv_tag)`` per neighbour;
        ``shared``: the regions are points both ranks hold (see ``exchange``)."""
        self.comm = comm
        self.links = links
        self.shared = shared
        self._buffers: dict[tuple, Any] = {}  # ``_kept``

    @classmethod
    def structured(
        cls,
        comm: Comm,
        dims: tuple[int, ...],
        shape: tuple[int, ...],
        *,
        ghost: int = 0,
        periodic: bool = False,
    ) -> Halo:
        """Neighbours by rank offsets in a ``dims`` grid of ranks (C order); ``shape`` is the local block.

        ``ghost=0``: shared boundary points; ``ghost=w``: ``w`` ghost layers on every side.
        """
        if int(np.prod(dims)) != comm.size or len(dims) != len(shape):
            raise ValueError(
                f"pad.mpi.Halo: a {dims} grid of ranks needs {int(np.prod(dims))} ranks, got {comm.size}"
            )
        offsets = [o for o in itertools.product((-1, 0, 1), repeat=len(dims)) if any(o)]
        me = np.array(np.unravel_index(comm.rank, dims))
        links: list[tuple[int, Region, Region, int, int]] = []
        for k, off in enumerate(offsets):
            where = me + off
            if periodic:
                where %= dims
            elif np.any(where < 0) or np.any(where >= dims):
                continue
            rank = int(np.ravel_multi_index(tuple(where), dims))
            send = tuple(_side(o, n, ghost, outer=False) for o, n in zip(off, shape, strict=True))
            recv = tuple(_side(o, n, ghost, outer=True) for o, n in zip(off, shape, strict=True))
            links.append((rank, send, recv, k, offsets.index(tuple(-o for o in off))))
        return cls(comm, links, shared=ghost == 0)

    def exchange(self, a: Any, op: str = "sum") -> None:
        """Send each neighbour its region of ``a``; add (``"sum"``) or copy (``"copy"``) what comes back.

        Copying shared points sends only to lower ranks and receives only from higher ones, unpacking in
        increasing rank, so every copy of a point ends up with the highest sharer's value.
        """
        if op not in ("sum", "copy"):
            raise ValueError(f"pad.mpi.Halo.exchange: op must be 'sum' or 'copy', got {op!r}")
        ctx = tape.current()
        began = _wire.start()  # packing and unpacking count with the messages, as in the adjoint
        try:
            self._exchange(ctx, a, op)
        finally:
            _wire.stop(current_phase(ctx), began)

    def _exchange(self, ctx: tape.Context | None, a: Any, op: str) -> None:
        me, owner_wins = self.comm.rank, self.shared and op == "copy"
        sends = [
            (rank, tag, _at(send))
            for rank, send, _, tag, _ in self.links
            if send is not None and not (owner_wins and rank > me)
        ]
        recvs = [
            (rank, tag, _at(recv))
            for rank, _, recv, _, tag in self.links
            if recv is not None and not (owner_wins and rank < me)
        ]
        if not (
            sends or recvs
        ):  # a rank without neighbours (a run of one): nothing to pack, record or replay
            return
        if owner_wins:
            recvs.sort(key=lambda link: link[0])  # unpacked in increasing rank: the highest sharer's wins
        if ctx is not None:
            a = ctx.writable(a)  # an array under differentiation is read-only to the program
        send_regions, recv_regions = [r for _, _, r in sends], [r for _, _, r in recvs]
        send_shapes, recv_shapes = [a[r].shape for r in send_regions], [a[r].shape for r in recv_regions]
        out, into = self._buffer(ctx, a, "out", send_shapes), self._buffer(ctx, a, "in", recv_shapes)
        _pack(ctx, a, send_regions, out, send_shapes)
        # device buffers that the messages would stage one by one cross to the host and back once, whole
        staged = arrays.is_device(a) and not hands_over(self.comm, ctx, "Isend")
        wire_out, wire_in = (self._host("out", out), self._host("in", into)) if staged else (out, into)
        if staged and ctx is not None:
            ctx.scratch(wire_out)
            ctx.scratch(wire_in)
        if staged and out.size:
            copy_staged(ctx, out, wire_out)
        reqs = [
            self.comm.Irecv(part, rank, tag)
            for (rank, tag, _), part in zip(recvs, _views(wire_in, recv_shapes), strict=True)
        ]
        reqs += [
            self.comm.Isend(part, rank, tag)
            for (rank, tag, _), part in zip(sends, _views(wire_out, send_shapes), strict=True)
        ]
        Request.Waitall(reqs)
        if staged and into.size:
            copy_staged(ctx, wire_in, into)
        _unpack(ctx, a, recv_regions, into, recv_shapes, op == "sum")

    def _buffer(self, ctx: tape.Context | None, a: Any, which: str, shapes: list[tuple[int, ...]]) -> Any:
        """The contiguous buffer in ``a``'s memory for regions of these shapes, one after another (``which``:
        "out" or "in"), kept for this thread's next exchange of that size. Under differentiation its shadow is
        made when the context first sees it, so that its views' shadows (the messages') are views of it, and
        it is marked as scratch: no state that a checkpointed loop snapshots or saves. Reusing it is safe: an
        exchange is done with both buffers when it returns, and each exchange's adjoint leaves their shadows
        zero (unpacking reads the receive buffer's shadow, which its message's adjoint sends and zeroes;
        packing adds the send buffer's back and zeroes it)."""
        size = sum(int(np.prod(shape)) for shape in shapes)
        buf = self._kept((which, type(a), a.dtype.str, size), lambda: arrays.empty(a, (size,), a.dtype))
        if ctx is not None:
            ctx.shadow(buf)
            ctx.scratch(buf)
        return buf

    def _host(self, which: str, buf: Any) -> np.ndarray:
        """The host array that stages device buffer ``buf`` (``which``: "out" or "in"): page-locked, kept for
        this thread's next exchange of that size (an exchange's copies to and from it are done when it
        returns)."""
        return self._kept(
            ("staged " + which, buf.dtype.str, buf.size),
            lambda: arrays.host_buffer(buf, buf.shape, buf.dtype),
        )

    def _kept(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The buffer kept under ``key`` for this thread's exchanges, ``make()`` on the first."""
        key = (threading.get_ident(), *key)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = make()
        return buf


def _side(o: int, n: int, w: int, *, outer: bool) -> slice:
    """The index range along one axis toward offset ``o``: the shared plane (``w == 0``), or the ``w``
    layers sent (inner) or received into (outer, the ghosts)."""
    if o == 0:
        return slice(w, n - w)
    if w == 0:
        return slice(0, 1) if o < 0 else slice(n - 1, n)
    if outer:
        return slice(0, w) if o < 0 else slice(n - w, n)
    return slice(w, 2 * w) if o < 0 else slice(n - 2 * w, n - w)


def _at(region: Region) -> tuple:
    """The index of ``region`` in an array whose leading axes are fields: ``(..., *region)``."""
    return (Ellipsis, *region) if isinstance(region, tuple) else (Ellipsis, region)


def _views(buf: Any, shapes: list[tuple[int, ...]]) -> list[Any]:
    """The regions of ``buf`` (see ``Halo._buffer``), shaped."""
    views, at = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        views.append(buf[at : at + n].reshape(shape))
        at += n
    return views


def _pack(
    ctx: tape.Context | None, a: Any, regions: list[tuple], out: Any, shapes: list[tuple[int, ...]]
) -> None:
    """``a``'s regions gathered into ``out`` (``Halo._buffer``; ``shapes``: theirs). Tangent: the same gather;
    adjoint: add back, zero."""
    views = _views(out, shapes)

    def gather() -> None:
        for region, view in zip(regions, views, strict=True):
            view[...] = a[region]

    redone(current_phase(ctx), gather, (a,), enqueues=True)
    da = None if ctx is None else ctx.shadow(a)
    if ctx is None or da is None:
        return
    dout = float_shadow(ctx, out)
    douts = _views(dout, shapes)
    if not ctx.reverse_mode:
        for region, dview in zip(regions, douts, strict=True):
            dview[...] = da[region]
        return

    def reverse() -> None:
        for region, dview in zip(regions, douts, strict=True):
            da[region] += dview
        arrays.zero(dout)

    ctx.record(Adjoint(reverse, device=arrays.is_cupy(a)))


def _unpack(
    ctx: tape.Context | None, a: Any, regions: list[tuple], buf: Any, shapes: list[tuple[int, ...]], add: bool
) -> None:
    """``a[region] += part`` or ``a[region] = part`` for the regions and the parts of ``buf``, in order.
    Adjoint, in reverse order: each part's shadow reads its region's (which a copy then zeroes)."""
    if ctx is not None:
        ctx.will_write([a])
    parts = list(zip(regions, _views(buf, shapes), strict=True))

    def scatter() -> None:
        for region, part in parts:
            if add:
                a[region] += part
            else:
                a[region] = part

    redone(current_phase(ctx), scatter, (a,), enqueues=True)
    da = None if ctx is None else ctx.shadow(a)
    if ctx is None or da is None:
        return
    dparts = list(zip(regions, _views(float_shadow(ctx, buf), shapes), strict=True))
    if not ctx.reverse_mode:
        for region, dpart in dparts:
            if add:
                da[region] += dpart
            else:
                da[region] = dpart
        return

    def reverse() -> None:
        for region, dpart in reversed(dparts):
            dpart[...] += da[region]
            if not add:
                da[region] = 0

    ctx.record(Adjoint(reverse, device=arrays.is_cupy(a)))
