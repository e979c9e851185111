"""Non-blocking point-to-point: Isend, Irecv and the Waits on their requests.

The reverse pass keeps the overlap of the primal: the reverse of a Wait *starts* the adjoint transfer
(an Irecv for an Isend, an Isend of the shadow for an Irecv) and the reverse of the Isend/Irecv
*completes* it (adds what came back to the send buffer's shadow / zeroes the receive buffer's shadow).
A request still pending when the differentiated function returns is an error on every rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI

from pad import tape
from pad.mpi._core import (
    ANY_SOURCE,
    ANY_TAG,
    COMM_WORLD,
    EMPTY,
    IN_PLACE,
    MAX,
    Adjoint,
    Comm,
    Request,
    as_array,
    checked,
    companion,
    expect,
    flat,
    note,
    pair_tag,
    phase,
    register,
    shadow,
    state,
    used,
)


def _track(ctx: tape.Context, req: Request, what: str) -> None:
    """Remember ``req`` until it is waited (checked when the differentiated function returns)."""
    pending = state(ctx).pending
    pending[id(req)] = what
    req._then.insert(0, lambda _: pending.pop(id(req), None))


@register("Isend")
def isend(comm: Comm, ctx: tape.Context, buf: Any, dest: int, tag: int = 0) -> Request:
    """Start sending ``buf`` to ``dest``. Tangent: the tangent is sent alongside. Adjoint: the reverse of
    the Wait posts an Irecv of the receiver's shadow; the reverse of the Isend waits for it and adds it
    to ``buf``'s shadow."""
    x = as_array(buf)
    reqs = [comm.mpi.Isend(x, dest, tag)]
    dx = shadow(ctx, x)
    ptag = pair_tag(ctx, comm, "send", dest, tag)
    note(comm, phase(ctx), "Isend", f"-> {dest}", tag, 0, "Isend", "Irecv")
    if not ctx.reverse_mode:
        reqs.append(comm.private.Isend(companion(dx), dest, ptag))
        req = Request(reqs)
        _track(ctx, req, f"Isend -> {dest} tag {tag}")
        return req
    got = EMPTY if dx is None else np.empty_like(dx)
    adjoint: Any = None

    def wait_reverse() -> None:
        nonlocal adjoint
        adjoint = comm.private.Irecv(got, dest, ptag)
        note(comm, "reverse", "Irecv", f"<- {dest}", tag, got.nbytes, "Isend")

    def isend_reverse() -> None:
        checked(adjoint.Wait, got, "adjoint of Isend", dest)
        if dx is not None:
            dx[...] += got

    ctx.record(Adjoint(isend_reverse))
    req = Request(reqs, [lambda _: ctx.record(Adjoint(wait_reverse))])
    _track(ctx, req, f"Isend -> {dest} tag {tag}")
    return req


@register("Irecv")
def irecv(comm: Comm, ctx: tape.Context, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
    """Start receiving into ``buf``. Tangent: the tangent is received alongside. Adjoint: the reverse of
    the Wait starts an Isend of the received part's shadow back to the sender; the reverse of the Irecv
    waits for it and zeroes that shadow."""
    x = as_array(buf)
    ctx.will_write([x])
    dx = shadow(ctx, x)
    reqs = [comm.mpi.Irecv(x, source, tag)]
    known = source != ANY_SOURCE and tag != ANY_TAG
    ptag = pair_tag(ctx, comm, "recv", source, tag) if known else 0
    if known and not ctx.reverse_mode:  # post the tangent early: the sender's Wait may depend on it
        reqs.append(comm.private.Irecv(companion(dx), source, ptag))
    part: np.ndarray | None = None
    adjoint: Any = None

    def complete(statuses: list[Any]) -> None:
        nonlocal part, ptag
        st = statuses[0]
        src, tg = st.Get_source(), st.Get_tag()
        part = None if dx is None else flat(dx, st.Get_count(MPI.BYTE) // x.itemsize)
        note(comm, phase(ctx), "Irecv", f"<- {src}", tg, st.Get_count(MPI.BYTE), "Irecv", "Isend")
        if not known:
            ptag = pair_tag(ctx, comm, "recv", src, tg)
        got = companion(part)
        if ctx.reverse_mode:
            ctx.record(Adjoint(lambda: wait_reverse(src, tg)))
        elif known:
            expect(statuses[1].Get_count(MPI.BYTE), got, "tangent of Irecv", src)
        else:
            checked(lambda s: comm.private.Recv(got, src, ptag, s), got, "tangent of Irecv", src)

    def wait_reverse(src: int, tg: int) -> None:
        nonlocal adjoint
        adjoint = comm.private.Isend(companion(part), src, ptag)
        note(comm, "reverse", "Isend", f"-> {src}", tg, 0, "Irecv")

    def irecv_reverse() -> None:
        adjoint.Wait()
        if part is not None:
            part[...] = 0

    if ctx.reverse_mode:
        ctx.record(Adjoint(irecv_reverse))
    req = Request(reqs, [complete])
    _track(ctx, req, f"Irecv <- {source} tag {tag}")
    return req


@tape.on_forward_end
def _all_waited(ctx: tape.Context) -> None:
    """Fail on every rank if any rank left a request started inside the function unwaited."""
    if not used(ctx):
        return
    mine = list(state(ctx).pending.values())
    flag = np.array([len(mine)], np.int64)
    COMM_WORLD.private.Allreduce(IN_PLACE, flag, MAX)
    if flag[0]:
        where = "on this rank: " + ", ".join(mine) if mine else "on another rank"
        raise RuntimeError(
            "pad.mpi: a request started inside autodiff/fwddiff was never waited "
            f"({where}); call Wait()/Request.Waitall() before the function returns"
        )
