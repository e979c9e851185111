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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pad import tape
from pad.mpi._core import (
    IN_PLACE,
    MIN,
    SUM,
    Adjoint,
    Comm,
    Wire,
    agree,
    as_array,
    flat,
    float_shadow,
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
    wire = comm.wire(stage, call)
    if name == "PROD":
        w = np.zeros_like(x)
        np.divide(y, x, out=w, where=y != 0)
        zero = np.flatnonzero(y == 0)  # the same elements on every rank
        if zero.size:
            mine, every = np.ascontiguousarray(x[zero]), np.empty((p, zero.size), x.dtype)
            wire.Allgather(mine, every)
            w[zero] = np.prod(np.delete(every, me, axis=0), axis=0)
        return w
    winner = np.where(x == y, me, p).astype(np.int32)
    wire.Allreduce(IN_PLACE, winner, MIN)
    return (winner == me).astype(x.dtype)


@dataclass
class _Reduction:
    """One Reduce (to ``root``) or Allreduce (``root`` None) of ``x`` into ``r``, as its tangent and adjoint
    see it: ``name`` the op (SUM, PROD, MIN, MAX), ``kx`` the input kept for the weights (None for SUM)."""

    comm: Comm
    call: str
    name: str
    root: int | None
    x: np.ndarray
    r: Any
    kx: Any

    @property
    def gets(self) -> bool:
        """Whether this rank receives the result."""
        return self.root is None or self.comm.rank == self.root

    @property
    def linear(self) -> bool:
        return self.name == "SUM"


def _reduce(
    comm: Comm, ctx: tape.Context, call: str, sendbuf: Any, recvbuf: Any, op: Any, root: int | None
) -> None:
    """Reduce (to ``root``) or Allreduce (``root=None``), differentiated as the module docstring says."""
    s, r = as_array(sendbuf), as_array(recvbuf)
    x = r if s is IN_PLACE else s
    agree(comm, call, x.dtype.str, x.size, root, op_name(op))
    active = x.dtype.kind == "f"
    name = require(op, ("SUM", "PROD", "MIN", "MAX"), call) if active else ""
    keep = active and name != "SUM"
    kx: Any = None if not keep else ctx.keep(x) if ctx.reverse_mode else tape.Kept(x.copy())
    red = _Reduction(comm, call, name, root, x, r, kx)
    if red.gets:
        ctx.will_write([r])
    wire = comm.wire(phase(ctx), call, "Allreduce" if root is None else "Bcast", private=False)
    if root is None:
        wire.Allreduce(s, r, op)
    else:
        wire.Reduce(s, r if red.gets else None, op, root)
    if not active:
        return
    dx, dr = float_shadow(ctx, x), float_shadow(ctx, r if red.gets else None)
    if ctx.reverse_mode:
        ctx.record(
            Adjoint(
                _reduce_adjoint(red, dx, dr, None if red.linear or not red.gets else ctx.keep(r)),
                comm.private,
            )
        )
    else:
        _reduce_tangent(red, dx, dr)


def _reduce_tangent(red: _Reduction, dx: np.ndarray, dr: Any) -> None:
    """``ẏ = SUM-reduce(w ẋ)``: the weights need the result on every rank (Reduce's root broadcasts it)."""
    comm, root = red.comm, red.root
    w = None
    if not red.linear:
        y = red.r
        if root is not None:
            y = red.r.copy() if red.gets else np.empty_like(red.x)
            comm.wire("tangent", red.call).Bcast(y, root)
        w = _weights(comm, red.name, red.kx.value, y, "tangent", red.call)
    t = dx.copy() if w is None else dx * w.reshape(dx.shape)
    if root is None:
        comm.private.Allreduce(t, dr, SUM)
    else:
        comm.private.Reduce(t, dr, SUM, root)


def _reduce_adjoint(red: _Reduction, dx: np.ndarray, dr: Any, ky: Any) -> Callable[[], None]:
    """The reverse of a reduction: ``x̄ += w ḡ``, ``ḡ`` the total seed on the result (``ky``: the result
    kept at the root for PROD/MIN/MAX)."""
    comm, root, x = red.comm, red.root, red.x

    def reverse() -> None:
        y: Any
        wire = comm.wire("reverse", red.call)
        if root is None:  # the total seed, summed in place: no buffer to allocate
            wire.Allreduce(IN_PLACE, dr, SUM)
            g = dr
            y = None if red.linear else ky.value
        else:  # one Bcast carries the root's seed and, for PROD/MIN/MAX, the result
            both = np.empty((1 if red.linear else 2, x.size), x.dtype)
            if red.gets:
                both[0] = dr.reshape(-1)
                if not red.linear:
                    both[1] = ky.value.reshape(-1)
            wire.Bcast(both, root)
            g, y = both[0], None if red.linear else both[1]
        w = None if red.linear else _weights(comm, red.name, red.kx.value, y, "reverse", red.call)
        add = g if w is None else g.reshape(-1) * w
        add = add if add.shape == dx.shape else add.reshape(dx.shape)
        if dx is dr:  # IN_PLACE: the input's shadow is the output's, overwritten by its adjoint
            if add is not dr:
                dr[...] = add
        else:
            dx[...] += add
            if red.gets:
                dr[...] = 0
        for kept in (red.kx, ky):
            if kept is not None:
                kept.release()

    return reverse


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
    comm.wire(phase(ctx), "Reduce_scatter_block", "Allgather", private=False).Reduce_scatter_block(s, r, op)
    if not active:
        return
    ds, dr = float_shadow(ctx, s), float_shadow(ctx, r)
    out = flat(dr, block)  # what the op wrote: the first block under IN_PLACE
    if not ctx.reverse_mode:
        comm.private.Reduce_scatter_block(ds, dr, SUM)
        return

    def reverse() -> None:
        got = np.empty(p * block, x.dtype)
        comm.wire("reverse", "Reduce_scatter_block").Allgather(out, got)
        out[...] = 0
        target = dr if ds is IN_PLACE else ds
        target[...] += got.reshape(target.shape)

    ctx.record(Adjoint(reverse, comm.private))


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
    getattr(comm.wire(phase(ctx), call, f"{call} (ranks reversed)", private=False), call)(s, r, op)
    if not active:
        return
    ds, dr = float_shadow(ctx, s), float_shadow(ctx, r)
    if not ctx.reverse_mode:
        getattr(comm.private, call)(ds, dr, SUM)
        return

    def reverse() -> None:
        seed, got = dr if writes else np.zeros_like(dr), np.zeros_like(dr)
        getattr(Wire(comm, comm.reversed(), "reverse", call, where="ranks reversed"), call)(seed, got, SUM)
        if writes:
            dr[...] = 0
        target = dr if ds is IN_PLACE else ds
        target[...] += got.reshape(target.shape)

    ctx.record(Adjoint(reverse, comm.private))


@register("Scan")
def scan(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Inclusive prefix SUM over ranks. Adjoint: the suffix sum of the seeds (Scan over reversed ranks)."""
    _scan(comm, ctx, "Scan", sendbuf, recvbuf, op)


@register("Exscan")
def exscan(comm: Comm, ctx: tape.Context, sendbuf: Any, recvbuf: Any, op: Any = SUM) -> None:
    """Exclusive prefix SUM over ranks. Adjoint: the exclusive suffix sum of the seeds."""
    _scan(comm, ctx, "Exscan", sendbuf, recvbuf, op)
