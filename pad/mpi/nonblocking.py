"""Non-blocking point-to-point: Isend, Irecv and the Waits on their requests.

The reverse pass keeps the overlap of the primal: the reverse of a Wait *starts* the adjoint transfer
(an Irecv for an Isend, an Isend of the shadow for an Irecv) and the reverse of the Isend/Irecv
*completes* it (adds what came back to the send buffer's shadow / zeroes the receive buffer's shadow).
A request still pending when the differentiated function returns is an error on every rank.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
from mpi4py import MPI

from pad import arrays, tape
from pad.mpi._core import (
    ANY_SOURCE,
    ANY_TAG,
    COMM_WORLD,
    IN_PLACE,
    MAX,
    Adjoint,
    Comm,
    Request,
    as_array,
    checked,
    flat,
    incoming,
    messages,
    outgoing,
    pair_tag,
    redone,
    register,
    shadow,
    state,
    used,
)


def _track(ctx: tape.Context, req: Request, what: str) -> Request:
    """Remember ``req`` until it is waited (checked when the differentiated function returns)."""
    pending = state(ctx).pending
    pending[id(req)] = what

    def waited(_: list[Any]) -> None:
        del pending[id(req)]

    req._then.insert(0, waited)
    return req


@register("Isend")
def isend(comm: Comm, ctx: tape.Context, buf: Any, dest: int, tag: int = 0) -> Request:
    """Start sending ``buf`` to ``dest``. Tangent: the tangent travels in the same message. Adjoint: the
    reverse of the Wait posts an Irecv of the receiver's shadow; the reverse of the Isend waits for it and
    adds it to ``buf``'s shadow."""
    x = as_array(buf)
    req = messages(comm, ctx, "Isend", "Irecv").Isend(x, dest, tag)
    what = f"Isend -> {dest} tag {tag}"
    if not ctx.reverse_mode:
        return _track(ctx, req, what)
    dx = shadow(ctx, x)
    ptag = pair_tag(ctx, comm, "send", dest, tag)
    got: Any = None
    adjoint: Any = None

    def wait_reverse() -> None:
        nonlocal adjoint, got
        got = incoming(dx)
        arrays.synchronize(got)  # a device buffer handed to MPI: its memory's earlier work done
        adjoint = comm.wire("reverse", "Isend", tag=tag).Irecv(got, dest, ptag)

    def isend_reverse() -> None:
        checked(adjoint.Wait, got, "adjoint of Isend", dest)
        if dx is not None:
            arrays.add(dx, got)

    ctx.record(Adjoint(isend_reverse, comm.private))
    req._then.append(lambda _: ctx.record(Adjoint(wait_reverse, comm.private)))
    return _track(ctx, req, what)


@register("Irecv")
def irecv(comm: Comm, ctx: tape.Context, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
    """Start receiving into ``buf``. Tangent: the tangent arrives in the same message. Adjoint: the reverse
    of the Wait starts an Isend of the received part's shadow back to the sender; the reverse of the Irecv
    waits for it and zeroes that shadow."""
    x = as_array(buf)
    ctx.will_write([x])
    arrays.synchronize(x)  # a device buffer handed to MPI: the copy the tape keeps of it taken first
    req = messages(comm, ctx, "Irecv", "Isend").Irecv(x, source, tag)  # logs itself when it completes
    what = f"Irecv <- {source} tag {tag}"
    if not ctx.reverse_mode:
        return _track(ctx, req, what)
    dx = shadow(ctx, x)
    # a receive naming its source and tag is numbered when posted (the order MPI matches it in); a
    # wildcard receive when it completes
    known = source != ANY_SOURCE and tag != ANY_TAG
    ptag = pair_tag(ctx, comm, "recv", source, tag) if known else 0
    part: np.ndarray | None = None
    adjoint: Any = None

    def complete(statuses: list[Any]) -> None:
        nonlocal part, ptag
        st = statuses[0]
        src, tg = st.Get_source(), st.Get_tag()
        part = None if dx is None else flat(dx, st.Get_count(MPI.BYTE) // x.itemsize)
        if not known:
            ptag = pair_tag(ctx, comm, "recv", src, tg)
        ctx.record(Adjoint(lambda: wait_reverse(src, tg), comm.private))

    def wait_reverse(src: int, tg: int) -> None:
        nonlocal adjoint
        arrays.synchronize(outgoing(part))  # the adjoint kernels that summed into it done
        adjoint = comm.wire("reverse", "Irecv", tag=tg).Isend(outgoing(part), src, ptag)

    def irecv_reverse() -> None:
        adjoint.Wait()
        if part is not None:
            part[...] = 0

    ctx.record(Adjoint(irecv_reverse, comm.private))
    req._then.append(complete)
    return _track(ctx, req, what)


@tape.on_forward_end
def _all_waited(ctx: tape.Context) -> None:
    """Fail on every rank if any rank left a request started inside the function unwaited (a replay of a
    step ``pad.graph`` recorded checks too, with the ranks that run it)."""
    if used(ctx):
        redone(
            "forward" if ctx.reverse_mode else "tangent",
            partial(_none_pending, list(state(ctx).pending.values())),
        )


def _none_pending(mine: list[str]) -> None:
    flag = np.array([len(mine)], np.int64)
    COMM_WORLD.private.Allreduce(IN_PLACE, flag, MAX)
    if flag[0]:
        where = "on this rank: " + ", ".join(mine) if mine else "on another rank"
        raise RuntimeError(
            "pad.mpi: a request started inside autodiff/fwddiff was never waited "
            f"({where}); call Wait()/Request.Waitall() before the function returns"
        )
