"""Data-movement collectives and their transposes: Bcast <-> Reduce-SUM, Gather <-> Scatter,
Allgather <-> Reduce_scatter_block, Alltoall <-> Alltoall, Barrier <-> Barrier.

Each op checks collectively that every rank makes the same call (``agree``), runs the primal on the
user's communicator, then either the same op on the tangents (fwddiff) or records its transpose, which
runs on pad's private communicator on every rank whatever its shadow holds. Integer buffers are inactive.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pad import tape
from pad.mpi._core import IN_PLACE, SUM, Adjoint, Comm, agree, as_array, float_shadow, phase, register


@register("Bcast")
def bcast(comm: Comm, ctx: tape.Context, buf: Any, root: int = 0) -> None:
    """Broadcast ``buf`` from ``root``. Adjoint: Reduce-SUM of every rank's shadow into the root's
    shadow; the other ranks' shadows are zeroed (their buffers were overwritten)."""
    x = as_array(buf)
    agree(comm, "Bcast", x.dtype.str, x.size, root)
    mine = comm.rank == root
    if not mine:
        ctx.will_write([x])
    comm.wire(phase(ctx), "Bcast", "Reduce", private=False).Bcast(x, root)
    if x.dtype.kind != "f":
        return
    dx = float_shadow(ctx, x)
    if not ctx.reverse_mode:
        comm.private.Bcast(dx, root)
        return

    def reverse() -> None:
        wire = comm.wire("reverse", "Bcast")
        if mine:
            wire.Reduce(IN_PLACE, dx, SUM, root)
        else:
            wire.Reduce(dx, None, SUM, root)
            dx[...] = 0

    ctx.record(Adjoint(reverse, comm.private))


@register("Gather")
def gather(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
    """Gather every rank's ``sendbuf`` into the root's ``recvbuf``. Adjoint: Scatter the root's
    shadow back (added to each ``sendbuf``'s shadow), then zero it (IN_PLACE: the root's own block stays)."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    mine, p = comm.rank == root, comm.size
    x = r if s is IN_PLACE else s
    agree(comm, "Gather", x.dtype.str, x.size // p if s is IN_PLACE else x.size, root)
    if mine:
        ctx.will_write([r])
    comm.wire(phase(ctx), "Gather", "Scatter", private=False).Gather(s, r if mine else None, root)
    if x.dtype.kind != "f":
        return
    ds, dr = float_shadow(ctx, s), float_shadow(ctx, r if mine else None)
    if not ctx.reverse_mode:
        comm.private.Gather(ds, dr, root)
        return

    def reverse() -> None:
        wire = comm.wire("reverse", "Gather")
        if ds is IN_PLACE:  # the root's own block is its input's shadow: it stays
            wire.Scatter(dr, IN_PLACE, root)
            own = dr.reshape(p, -1)[root].copy()
            dr[...] = 0
            dr.reshape(p, -1)[root] = own
        else:
            got = np.empty_like(ds)
            wire.Scatter(dr, got, root)
            if mine:
                dr[...] = 0
            ds[...] += got

    ctx.record(Adjoint(reverse, comm.private))


@register("Scatter")
def scatter(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, root: int = 0) -> None:
    """Scatter the root's ``sendbuf`` in blocks to every rank's ``recvbuf``. Adjoint: Gather the
    ``recvbuf`` shadows to the root (added to its ``sendbuf`` shadow), then zero them."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    mine, p = comm.rank == root, comm.size
    x = s if r is IN_PLACE else r
    agree(comm, "Scatter", x.dtype.str, x.size // p if r is IN_PLACE else x.size, root)
    if r is not IN_PLACE:
        ctx.will_write([r])
    comm.wire(phase(ctx), "Scatter", "Gather", private=False).Scatter(s if mine else None, r, root)
    if x.dtype.kind != "f":
        return
    ds, dr = float_shadow(ctx, s if mine else None), float_shadow(ctx, r)
    if not ctx.reverse_mode:
        comm.private.Scatter(ds, dr, root)
        return

    def reverse() -> None:
        wire = comm.wire("reverse", "Scatter")
        if mine:
            got = np.zeros_like(ds)  # the root's own block stays zero under IN_PLACE
            wire.Gather(dr, got, root)
            if dr is not IN_PLACE:
                dr[...] = 0
            ds[...] += got
        else:
            wire.Gather(dr, None, root)
            dr[...] = 0

    ctx.record(Adjoint(reverse, comm.private))


def _exchange(comm: Comm, ctx: tape.Context, call: str, adjoint: str, sendbuf: Any, recvbuf: Any) -> None:
    """Allgather or Alltoall: every rank receives one block from every rank into ``recvbuf``. The
    adjoint collective (``adjoint``) sends the ``recvbuf`` shadows back; they are zeroed and what comes
    back is added to the ``sendbuf`` shadows (IN_PLACE: to the input's part of ``recvbuf``'s shadow)."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    p = comm.size
    agree(comm, call, r.dtype.str, r.size // p)
    ctx.will_write([r])
    getattr(comm.wire(phase(ctx), call, adjoint, private=False), call)(s, r)
    if r.dtype.kind != "f":
        return
    ds, dr = float_shadow(ctx, s), float_shadow(ctx, r)
    if not ctx.reverse_mode:
        getattr(comm.private, call)(ds, dr)
        return
    gathers = call == "Allgather"  # its input is one block, Alltoall's all p

    def reverse() -> None:
        got = np.empty(r.size // p if gathers else r.size, r.dtype)
        getattr(comm.wire("reverse", call), adjoint)(dr, got)
        dr[...] = 0
        own = dr.reshape(p, -1)[comm.rank] if gathers else dr
        target = own if ds is IN_PLACE else ds
        target[...] += got.reshape(target.shape)

    ctx.record(Adjoint(reverse, comm.private))


@register("Allgather")
def allgather(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any) -> None:
    """Gather every rank's ``sendbuf`` into every rank's ``recvbuf``. Adjoint: Reduce_scatter_block-SUM
    of the ``recvbuf`` shadows, added to each ``sendbuf`` shadow (IN_PLACE: the own block)."""
    _exchange(comm, ctx, "Allgather", "Reduce_scatter_block", sendbuf, recvbuf)


@register("Alltoall")
def alltoall(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any) -> None:
    """Block j of rank i's ``sendbuf`` goes to block i of rank j's ``recvbuf``. Adjoint: Alltoall of
    the ``recvbuf`` shadows, added to the ``sendbuf`` shadows (the permutation transposes to its inverse)."""
    _exchange(comm, ctx, "Alltoall", "Alltoall", sendbuf, recvbuf)


@register("Barrier")
def barrier(comm: Comm, ctx: tape.Context) -> None:
    """Synchronise. Adjoint: a Barrier at the mirrored place of the reverse pass."""
    agree(comm, "Barrier")
    comm.wire(phase(ctx), "Barrier", "Barrier", private=False).Barrier()
    if not ctx.reverse_mode:
        return

    def reverse() -> None:
        comm.wire("reverse", "Barrier").Barrier()

    ctx.record(Adjoint(reverse, comm.private))
