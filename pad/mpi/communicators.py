"""Communicator management: Split, Dup, Free. No data moves, so nothing is differentiated; what matters is
that a communicator created inside ``autodiff`` lives until the reverse pass is done with it."""

from __future__ import annotations

import weakref
from typing import Any

from mpi4py import MPI

from pad import tape
from pad.mpi._core import Adjoint, Comm, register


def _child(ctx: tape.Context | None, new: Any) -> Any:
    """Wrap a new communicator; inside autodiff, a Free of it is deferred to the reverse of its creation."""
    if new == MPI.COMM_NULL:
        return MPI.COMM_NULL
    comm = Comm(new)
    if ctx is not None and ctx.reverse_mode:
        comm._born_in = weakref.ref(ctx)
        ctx.record(Adjoint(lambda: comm.release() if comm._free_pending else None))
    return comm


@register("Split", passthrough=False)
def split(comm: Comm, ctx: tape.Context | None, color: int = 0, key: int = 0) -> Any:
    """Split into sub-communicators (collective); returns a pad ``Comm`` (``MPI.COMM_NULL`` for
    ``color=MPI.UNDEFINED``)."""
    return _child(ctx, comm.mpi.Split(color, key))


@register("Dup", passthrough=False)
def dup(comm: Comm, ctx: tape.Context | None) -> Any:
    """Duplicate the communicator (collective); returns a pad ``Comm``."""
    return _child(ctx, comm.mpi.Dup())


@register("Free", passthrough=False)
def free(comm: Comm, ctx: tape.Context | None) -> None:
    """Free the communicator; inside autodiff, once the reverse pass has run the adjoints that use it."""
    if ctx is None or not ctx.reverse_mode:
        comm.release()
        return
    if comm._born_in is None or comm._born_in() is not ctx:
        raise RuntimeError(
            "pad.mpi: a communicator created outside autodiff cannot be freed inside it (its reverse pass "
            "still needs it); free it after autodiff returns"
        )
    comm._free_pending = True
