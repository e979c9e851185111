"""Blocking point-to-point: Send, Recv, Sendrecv. Transposes swap them: a send's adjoint receives the
receiver's shadow and adds it; a receive's adjoint sends its shadow back and zeroes it (the receive
overwrote the buffer). In fwddiff a message carries its tangent with it (``joined``); adjoints travel on
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
    joined,
    note,
    outgoing,
    pair_tag,
    phase,
    register,
    shadow,
    split,
)


def take(comm: Comm, dx: np.ndarray | None, peer: int, ptag: int, tag: int, op: str) -> None:
    """Adjoint of a send: receive the receiver's shadow from ``peer`` and add it to ``dx``."""
    got = incoming(dx)
    checked(lambda st: comm.private.Recv(got, peer, ptag, st), got, f"adjoint of {op}", peer)
    if dx is not None:
        dx[...] += got
    note(comm, "reverse", "Recv", f"<- {peer}", tag, got.nbytes, op)


def give(comm: Comm, part: np.ndarray | None, peer: int, ptag: int, tag: int, op: str) -> None:
    """Adjoint of a receive: send the received part's shadow back to ``peer``, then zero it."""
    comm.private.Send(outgoing(part), peer, ptag)
    if part is not None:
        part[...] = 0
    note(comm, "reverse", "Send", f"-> {peer}", tag, 0, op)


def received(dx: np.ndarray | None, x: np.ndarray, st: Any) -> np.ndarray | None:
    """The shadow of the part of ``x`` a receive filled (a receive may fill less than its buffer)."""
    return None if dx is None else flat(dx, st.Get_count(MPI.BYTE) // x.itemsize)


@register("Send")
def send(comm: Comm, ctx: tape.Context, buf: Any, dest: int, tag: int = 0) -> None:
    """Send ``buf`` to ``dest``. Tangent: it travels in the same message. Adjoint: receive the
    receiver's shadow from ``dest`` and add it to ``buf``'s shadow."""
    x = as_array(buf)
    dx = shadow(ctx, x)
    note(comm, phase(ctx), "Send", f"-> {dest}", tag, 0, "Send", "Recv")
    if not ctx.reverse_mode:
        comm.mpi.Send(joined(x, dx, False), dest, tag)
        return
    comm.mpi.Send(x, dest, tag)
    ptag = pair_tag(ctx, comm, "send", dest, tag)
    ctx.record(Adjoint(lambda: take(comm, dx, dest, ptag, tag, "Send")))


@register("Recv")
def recv(
    comm: Comm, ctx: tape.Context, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None
) -> None:
    """Receive into ``buf``. Tangent: it arrives in the same message. Adjoint: send the received
    part's shadow back to the sender and zero it."""
    x = as_array(buf)
    ctx.will_write([x])
    dx = shadow(ctx, x)
    st = status if status is not None else MPI.Status()
    if ctx.reverse_mode:
        comm.mpi.Recv(x, source, tag, st)
    else:
        both = joined(x, dx, True)
        comm.mpi.Recv(both, source, tag, st)
        split(both, x, dx, st)
    src, tg = st.Get_source(), st.Get_tag()
    note(comm, phase(ctx), "Recv", f"<- {src}", tg, st.Get_count(MPI.BYTE), "Recv", "Send")
    if not ctx.reverse_mode:
        return
    part = received(dx, x, st)
    ptag = pair_tag(ctx, comm, "recv", src, tg)
    ctx.record(Adjoint(lambda: give(comm, part, src, ptag, tg, "Recv")))


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
    dx, dy = shadow(ctx, x), shadow(ctx, y)
    st = status if status is not None else MPI.Status()
    if ctx.reverse_mode:
        comm.mpi.Sendrecv(x, dest, sendtag, y, source, recvtag, st)
    else:
        both = joined(y, dy, True)
        comm.mpi.Sendrecv(joined(x, dx, False), dest, sendtag, both, source, recvtag, st)
        split(both, y, dy, st)
    src, tg = st.Get_source(), st.Get_tag()
    note(
        comm,
        phase(ctx),
        "Sendrecv",
        f"-> {dest} <- {src}",
        sendtag,
        st.Get_count(MPI.BYTE),
        "Sendrecv",
        "Sendrecv",
    )
    if not ctx.reverse_mode:
        return
    part = received(dy, y, st)
    stag = pair_tag(ctx, comm, "send", dest, sendtag)
    rtag = pair_tag(ctx, comm, "recv", src, tg)

    def reverse() -> None:
        got = incoming(dx)
        out = outgoing(part)
        checked(
            lambda s: comm.private.Sendrecv(out, src, rtag, got, dest, stag, s),
            got,
            "adjoint of Sendrecv",
            dest,
        )
        if part is not None:
            part[...] = 0
        if dx is not None:
            dx[...] += got
        note(comm, "reverse", "Sendrecv", f"-> {src} <- {dest}", sendtag, got.nbytes, "Sendrecv")

    ctx.record(Adjoint(reverse))
