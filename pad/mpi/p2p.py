"""Blocking point-to-point: Send, Recv, Sendrecv. Transposes swap them: a send's adjoint receives the
receiver's shadow and adds it; a receive's adjoint sends its shadow back and zeroes it (the receive
overwrote the buffer). In fwddiff a message carries its tangent with it (``messages``); adjoints travel on
pad's private communicator with a tag that names the message (``pair_tag``), so they can never match the
user's traffic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from pad import tape
from pad.mpi._core import (
    ANY_SOURCE,
    ANY_TAG,
    Adjoint,
    Comm,
    as_array,
    checked,
    flat,
    incoming,
    messages,
    outgoing,
    pair_tag,
    register,
    shadow,
)


def take(comm: Comm, dx: np.ndarray | None, peer: int, ptag: int, tag: int, op: str) -> None:
    """Adjoint of a send: receive the receiver's shadow from ``peer`` and add it to ``dx``."""
    got = incoming(dx)
    wire = comm.wire("reverse", op, tag=tag)
    checked(lambda st: wire.Recv(got, peer, ptag, st), got, f"adjoint of {op}", peer)
    if dx is not None:
        dx[...] += got


def give(comm: Comm, part: np.ndarray | None, peer: int, ptag: int, tag: int, op: str) -> None:
    """Adjoint of a receive: send the received part's shadow back to ``peer``, then zero it."""
    comm.wire("reverse", op, tag=tag).Send(outgoing(part), peer, ptag)
    if part is not None:
        part[...] = 0


def received(dx: np.ndarray | None, x: np.ndarray, st: Any) -> np.ndarray | None:
    """The shadow of the part of ``x`` a receive filled (a receive may fill less than its buffer)."""
    return None if dx is None else flat(dx, st.Get_count(MPI.BYTE) // x.itemsize)


@register("Send")
def send(comm: Comm, ctx: tape.Context, buf: Any, dest: int, tag: int = 0) -> None:
    """Send ``buf`` to ``dest``. Tangent: it travels in the same message. Adjoint: receive the
    receiver's shadow from ``dest`` and add it to ``buf``'s shadow."""
    x = as_array(buf)
    messages(comm, ctx, "Send", "Recv").Send(x, dest, tag)
    if not ctx.reverse_mode:
        return
    dx = shadow(ctx, x)
    ptag = pair_tag(ctx, comm, "send", dest, tag)
    ctx.record(Adjoint(lambda: take(comm, dx, dest, ptag, tag, "Send"), comm.private))


@register("Recv")
def recv(
    comm: Comm, ctx: tape.Context, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None
) -> None:
    """Receive into ``buf``. Tangent: it arrives in the same message. Adjoint: send the received
    part's shadow back to the sender and zero it."""
    x = as_array(buf)
    ctx.will_write([x])
    st = status if status is not None else MPI.Status()
    messages(comm, ctx, "Recv", "Send").Recv(x, source, tag, st)
    if not ctx.reverse_mode:
        return
    src, tg = st.Get_source(), st.Get_tag()
    part = received(shadow(ctx, x), x, st)
    ptag = pair_tag(ctx, comm, "recv", src, tg)
    ctx.record(Adjoint(lambda: give(comm, part, src, ptag, tg, "Recv"), comm.private))


@register("Sendrecv")
def sendrecv(
    comm: Comm,
    ctx: tape.Context,
    sendbuf: Any,
    dest: int,
    sendtag: int = 0,
    recvbuf: Any = None,
    source: int = ANY_SOURCE,
    recvtag: int = ANY_TAG,
    status: Any = None,
) -> None:
    """Send ``sendbuf`` to ``dest`` while receiving ``recvbuf``. Tangent: in the same messages.
    Adjoint: the reversed Sendrecv, the received part's shadow goes back to the sender (then zeroed)
    while ``dest`` returns the shadow of what it received, added to ``sendbuf``'s shadow."""
    x, y = as_array(sendbuf), as_array(recvbuf)
    ctx.will_write([y])
    st = status if status is not None else MPI.Status()
    messages(comm, ctx, "Sendrecv", "Sendrecv").Sendrecv(x, dest, sendtag, y, source, recvtag, st)
    if not ctx.reverse_mode:
        return
    src, tg = st.Get_source(), st.Get_tag()
    dx, part = shadow(ctx, x), received(shadow(ctx, y), y, st)
    stag = pair_tag(ctx, comm, "send", dest, sendtag)
    rtag = pair_tag(ctx, comm, "recv", src, tg)

    def reverse() -> None:
        got, out = incoming(dx), outgoing(part)
        wire = comm.wire("reverse", "Sendrecv", tag=sendtag)
        checked(lambda s: wire.Sendrecv(out, src, rtag, got, dest, stag, s), got, "adjoint of Sendrecv", dest)
        if part is not None:
            part[...] = 0
        if dx is not None:
            dx[...] += got

    ctx.record(Adjoint(reverse, comm.private))
