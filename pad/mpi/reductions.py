"""Reductions: Reduce and Allreduce (SUM, PROD, MIN, MAX), Reduce_scatter_block, Scan and Exscan (SUM).

For ``y = op(x_0, ..., x_{p-1})`` (elementwise over ranks) rank i's input gets ``x̄_i += w_i * ḡ`` where
``ḡ`` is the total seed on ``y``: the Allreduce-SUM of every rank's seed for Allreduce, the root's seed
(Bcast) for Reduce. The weight ``w_i = ∂y/∂x_i`` is
- 1 for SUM (the adjoint is then the transposed collective alone);
- for PROD, the product of the other ranks' values: ``y / x_i`` where ``y != 0``; where ``y == 0`` (a zero
  input, or underflow) the inputs there are gathered and the others' product taken exactly;
- for MIN and MAX, 1 on the winning rank and 0 elsewhere. The winner of an element is the lowest rank
  whose value equals the result (an Allreduce-MIN of candidate ranks), the same rule on every rank, so a
  tie sends the whole adjoint to one rank.
Tangent: ``ẏ = SUM-reduce(w_i * ẋ_i)``. Floating-point data must use these ops (others raise on every
rank); integer buffers are inactive and accept any op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pad import tape
from pad.mpi._core import (
    IN_PLACE,
    MIN,
    SUM,
    Adjoint,
    Comm,
    agree,
    as_array,
    flat,
    float_shadow,
    note,
    op_name,
    phase,
    register,
    require,
)


def _weights(comm: Comm, name: str, x: np.ndarray, y: np.ndarray, stage: str, call: str) -> np.ndarray | None:
    """``∂y/∂x`` for this rank's input ``x`` of a reduction with result ``y`` (known on every rank)."""
    if name == "SUM":
        return None
    x, y = x.reshape(-1), y.reshape(-1)
    p, me = comm.size, comm.rank
    if name == "PROD":
        w = np.zeros_like(x)
        np.divide(y, x, out=w, where=y != 0)
        zero = np.flatnonzero(y == 0)  # the same elements on every rank
        if zero.size:
            mine, every = np.ascontiguousarray(x[zero]), np.empty((p, zero.size), x.dtype)
            comm.private.Allgather(mine, every)
            w[zero] = np.prod(np.delete(every, me, axis=0), axis=0)
            note(comm, stage, "Allgather", "", None, (p - 1) * mine.nbytes, call)
        return w
    winner = np.where(x == y, me, p).astype(np.int32)
    comm.private.Allreduce(IN_PLACE, winner, MIN)
    note(comm, stage, "Allreduce", "", None, (p - 1) * winner.nbytes, call)
    return (winner == me).astype(x.dtype)


def _reduce(
    comm: Comm, ctx: tape.Context, call: str, sendbuf: Any, recvbuf: Any, op: Any, root: int | None
) -> None:
    """Reduce (to ``root``) or Allreduce (``root=None``), differentiated as the module docstring says."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    gets = root is None or comm.rank == root
    x = r if s is IN_PLACE else s
    agree(comm, call, x.dtype.str, x.size, root, op_name(op))
    active = x.dtype.kind == "f"
    name = require(op, ("SUM", "PROD", "MIN", "MAX"), call) if active else ""
    linear = name == "SUM"
    kx: Any = None if not active or linear else ctx.keep(x) if ctx.reverse_mode else tape.Kept(x.copy())
    if gets:
        ctx.will_write([r])
    if root is None:
        comm.mpi.Allreduce(s, r, op)
    else:
        comm.mpi.Reduce(s, r if gets else None, op, root)
    where, adj = ("", "Allreduce") if root is None else (f"root {root}", "Bcast")
    note(comm, phase(ctx), call, where, None, (comm.size - 1) * x.nbytes if gets else 0, call, adj)
    if not active:
        return
    dx, dr = float_shadow(ctx, x), float_shadow(ctx, r if gets else None)

    def result_everywhere() -> Any:
        """The result on every rank (tangent mode: Reduce's root broadcasts it)."""
        if root is None:
            return r
        out = r.copy() if gets else np.empty_like(x)
        comm.private.Bcast(out, root)
        note(comm, "tangent", "Bcast", where, None, 0 if gets else out.nbytes, call)
        return out

    if not ctx.reverse_mode:
        w = None if linear else _weights(comm, name, kx.value, result_everywhere(), "tangent", call)
        t = dx.copy() if w is None else dx * w.reshape(dx.shape)
        if root is None:
            comm.private.Allreduce(t, dr, SUM)
        else:
            comm.private.Reduce(t, dr, SUM, root)
        return
    ky: Any = None if linear or not gets else ctx.keep(r)

    def reverse() -> None:
        y: Any
        if root is None:  # the total seed, summed in place: no buffer to allocate
            comm.private.Allreduce(IN_PLACE, dr, SUM)
            g = dr
            y = None if linear else ky.value
            note(comm, "reverse", "Allreduce", "", None, (comm.size - 1) * g.nbytes, call)
        else:  # one Bcast carries the root's seed and, for PROD/MIN/MAX, the result
            both = np.empty((1 if linear else 2, x.size), x.dtype)
            if gets:
                both[0] = dr.reshape(-1)
                if not linear:
                    both[1] = ky.value.reshape(-1)
            comm.private.Bcast(both, root)
            g, y = both[0], None if linear else both[1]
            note(comm, "reverse", "Bcast", where, None, 0 if gets else both.nbytes, call)
        w = None if linear else _weights(comm, name, kx.value, y, "reverse", call)
        add = g if w is None else g.reshape(-1) * w
        add = add if add.shape == dx.shape else add.reshape(dx.shape)
        if dx is dr:  # IN_PLACE: the input's shadow is the output's, overwritten by its adjoint
            if add is not dr:
                dr[...] = add
        else:
            dx[...] += add
            if gets:
                dr[...] = 0
        for kept in (kx, ky):
            if kept is not None:
                kept.release()

    ctx.record(Adjoint(reverse))


@register("Reduce")
def reduce(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM, root: int = 0) -> None:
    """Reduce every rank's ``sendbuf`` into the root's ``recvbuf``. Adjoint of SUM: Bcast the root's
    seed (then zero it), added to every ``sendbuf`` shadow; PROD/MIN/MAX weight it (module docstring)."""
    _reduce(comm, ctx, "Reduce", sendbuf, recvbuf, op, root)


@register("Allreduce")
def allreduce(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Reduce every rank's ``sendbuf`` into every ``recvbuf``. Adjoint of SUM: Allreduce-SUM of the
    seeds (then zeroed), added to every ``sendbuf`` shadow; PROD/MIN/MAX weight it (module docstring)."""
    _reduce(comm, ctx, "Allreduce", sendbuf, recvbuf, op, None)


@register("Reduce_scatter_block")
def reduce_scatter_block(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Sum block i of every rank's ``sendbuf`` into rank i's ``recvbuf``. Adjoint: Allgather the
    ``recvbuf`` shadows (then zeroed), added to every ``sendbuf`` shadow."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    p = comm.size
    x = r if s is IN_PLACE else s
    block = x.size // p
    agree(comm, "Reduce_scatter_block", x.dtype.str, block, None, op_name(op))
    active = x.dtype.kind == "f"
    if active:
        require(op, ("SUM",), "Reduce_scatter_block")
    ctx.will_write([r])
    comm.mpi.Reduce_scatter_block(s, r, op)
    nbytes = (p - 1) * block * x.itemsize
    note(comm, phase(ctx), "Reduce_scatter_block", "", None, nbytes, "Reduce_scatter_block", "Allgather")
    if not active:
        return
    ds, dr = float_shadow(ctx, s), float_shadow(ctx, r)
    out = flat(dr, block)  # what the op wrote: the first block under IN_PLACE
    if not ctx.reverse_mode:
        comm.private.Reduce_scatter_block(ds, dr, SUM)
        return

    def reverse() -> None:
        got = np.empty(p * block, x.dtype)
        comm.private.Allgather(out, got)
        out[...] = 0
        target = dr if ds is IN_PLACE else ds
        target[...] += got.reshape(target.shape)
        note(comm, "reverse", "Allgather", "", None, nbytes, "Reduce_scatter_block")

    ctx.record(Adjoint(reverse))


def _scan(comm: Comm, ctx: tape.Context, call: str, sendbuf: Any, recvbuf: Any, op: Any) -> None:
    """Inclusive (Scan) or exclusive (Exscan) prefix sum; the adjoint is the same scan over the ranks
    in reverse order (a suffix sum of the seeds). Exscan leaves rank 0's ``recvbuf`` untouched."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    x = r if s is IN_PLACE else s
    agree(comm, call, x.dtype.str, x.size, None, op_name(op))
    active = x.dtype.kind == "f"
    if active:
        require(op, ("SUM",), call)
    writes = call == "Scan" or comm.rank > 0
    if writes:
        ctx.will_write([r])
    getattr(comm.mpi, call)(s, r, op)
    note(comm, phase(ctx), call, "", None, comm.rank * x.nbytes, call, f"{call} (ranks reversed)")
    if not active:
        return
    ds, dr = float_shadow(ctx, s), float_shadow(ctx, r)
    if not ctx.reverse_mode:
        getattr(comm.private, call)(ds, dr, SUM)
        return

    def reverse() -> None:
        seed, got = dr if writes else np.zeros_like(dr), np.zeros_like(dr)
        getattr(comm.reversed(), call)(seed, got, SUM)
        if writes:
            dr[...] = 0
        target = dr if ds is IN_PLACE else ds
        target[...] += got.reshape(target.shape)
        note(comm, "reverse", call, "ranks reversed", None, (comm.size - 1 - comm.rank) * x.nbytes, call)

    ctx.record(Adjoint(reverse))


@register("Scan")
def scan(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Inclusive prefix SUM over ranks. Adjoint: the suffix sum of the seeds (Scan over reversed ranks)."""
    _scan(comm, ctx, "Scan", sendbuf, recvbuf, op)


@register("Exscan")
def exscan(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Exclusive prefix SUM over ranks. Adjoint: the exclusive suffix sum of the seeds."""
    _scan(comm, ctx, "Exscan", sendbuf, recvbuf, op)
