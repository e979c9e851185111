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
Differentiation: packing is a gather (adjoint: add back), the messages are pad's Isend/Irecv, unpacking
adds (adjoint: the shadow is read back) or copies (adjoint: read back, then zeroed).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from pad import arrays, tape
from pad.mpi import _wire
from pad.mpi._core import Adjoint, Comm, Request, current_phase, float_shadow

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
        links = [
            (
                rank,
                None if owner_wins and rank > me else send,
                None if owner_wins and rank < me else recv,
                st,
                rt,
            )
            for rank, send, recv, st, rt in self.links
        ]
        if ctx is not None:
            a = ctx.writable(a)  # an array under differentiation is read-only to the program
        outgoing = [(rank, tag, _pack(ctx, a, send)) for rank, send, _, tag, _ in links if send is not None]
        incoming = [
            (rank, tag, recv, arrays.empty(a, a[_at(recv)].shape, a.dtype))
            for rank, _, recv, _, tag in links
            if recv is not None
        ]
        reqs = [self.comm.Irecv(buf, rank, tag) for rank, tag, _, buf in incoming]
        reqs += [self.comm.Isend(buf, rank, tag) for rank, tag, buf in outgoing]
        Request.Waitall(reqs)
        for _, _, recv, buf in sorted(incoming, key=lambda link: link[0]) if owner_wins else incoming:
            _unpack(ctx, a, recv, buf, op == "sum")


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


def _pack(ctx: tape.Context | None, a: Any, region: Region) -> Any:
    """``a[region]`` as a new contiguous array. Tangent: the same gather; adjoint: add back, zero."""
    region = _at(region)
    out = a[region].copy()
    da = None if ctx is None else ctx.shadow(a)
    if ctx is None or da is None:
        return out
    dout = float_shadow(ctx, out)
    if not ctx.reverse_mode:
        dout[...] = da[region]
        return out

    def reverse() -> None:
        da[region] += dout
        dout[...] = 0

    ctx.record(Adjoint(reverse))
    return out


def _unpack(ctx: tape.Context | None, a: Any, region: Region, buf: Any, add: bool) -> None:
    """``a[region] += buf`` or ``a[region] = buf``. Adjoint: ``buf``'s shadow reads ``a[region]``'s
    (which a copy then zeroes)."""
    region = _at(region)
    if ctx is not None:
        ctx.will_write([a])
    if add:
        a[region] += buf
    else:
        a[region] = buf
    da = None if ctx is None else ctx.shadow(a)
    if ctx is None or da is None:
        return
    dbuf = float_shadow(ctx, buf)
    if not ctx.reverse_mode:
        if add:
            da[region] += dbuf
        else:
            da[region] = dbuf
        return

    def reverse() -> None:
        dbuf[...] += da[region]
        if not add:
            da[region] = 0

    ctx.record(Adjoint(reverse))
