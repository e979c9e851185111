"""What pad sends: the debug log, the byte counters (the reverse moves what the forward moved)."""

import numpy as np
import pytest

import pad
import pad.mpi
from pad.mpi import IN_PLACE

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(60)]


def test_debug_log(comm, capfd):
    r, p = comm.rank, comm.size
    x, y = np.ones(2), np.zeros(2)

    def f(x, y):
        pad.mpi.Request.Waitall([comm.Isend(x, (r + 1) % p, 7), comm.Irecv(y, (r - 1) % p, 7)])

    pad.mpi.set_debug(True)
    try:
        pad.autodiff(f, pad.Dup(x, np.zeros(2)), pad.Dup(y, np.ones(2)))
    finally:
        pad.mpi.set_debug(False)
    err = capfd.readouterr().err.splitlines()
    assert f"r{r} | Isend -> {(r + 1) % p} tag 7 | adjoint: Irecv" in err
    assert f"r{r} | Irecv <- {(r - 1) % p} tag 7 | adjoint: Isend" in err
    assert f"r{r} | adjoint of Isend: Irecv <- {(r + 1) % p} tag 7" in err
    assert f"r{r} | adjoint of Irecv: Isend -> {(r - 1) % p} tag 7" in err


LINEAR = {
    "Sendrecv": lambda c, s, r: c.Sendrecv(s, (c.rank + 1) % c.size, 0, r, (c.rank - 1) % c.size, 0),
    "Bcast": lambda c, s, r: c.Bcast(r, c.size - 1),
    "Reduce": lambda c, s, r: c.Reduce(s, r, pad.mpi.SUM, 0),
    "Allreduce": lambda c, s, r: c.Allreduce(s, r),
    "Gather": lambda c, s, r: c.Gather(s[:2], r, 0),
    "Scatter": lambda c, s, r: c.Scatter(s, r[:2], 0),
    "Allgather": lambda c, s, r: c.Allgather(s[:2], r),
    "Allgather IN_PLACE": lambda c, s, r: c.Allgather(IN_PLACE, r),
    "Alltoall": lambda c, s, r: c.Alltoall(s, r),
    "Reduce_scatter_block": lambda c, s, r: c.Reduce_scatter_block(s, r[:2]),
    "Scan": lambda c, s, r: c.Scan(s, r),
    "Exscan": lambda c, s, r: c.Exscan(s, r),
}


@pytest.mark.parametrize("name", list(LINEAR))
def test_reverse_moves_forward_bytes(comm, name):
    """Summed over ranks, a linear op's reverse receives exactly the bytes its forward received."""
    n = 2 * comm.size
    s, r = np.ones(n), np.ones(n)
    pad.mpi.reset_stats()
    pad.autodiff(lambda s, r: LINEAR[name](comm, s, r), pad.Dup(s, np.ones(n)), pad.Dup(r, np.ones(n)))
    st = pad.mpi.stats()
    fwd = comm.mpi.allreduce(st["forward"]["bytes"])
    rev = comm.mpi.allreduce(st["reverse"]["bytes"])
    assert fwd == rev
    assert fwd > 0 or comm.size == 1


# What every rank together receives in the forward pass of LINEAR[name] (n = 2p doubles, blocks of 2), on
# p ranks: the transfer log derives it from each call's arguments (pad.mpi._core.RECEIVES).
RECEIVED = {
    "Sendrecv": lambda p, n: p * n * 8,
    "Bcast": lambda p, n: (p - 1) * n * 8,
    "Reduce": lambda p, n: (p - 1) * n * 8,
    "Allreduce": lambda p, n: p * (p - 1) * n * 8,
    "Gather": lambda p, n: (p - 1) * 2 * 8,
    "Scatter": lambda p, n: (p - 1) * 2 * 8,
    "Allgather": lambda p, n: p * (p - 1) * 2 * 8,
    "Allgather IN_PLACE": lambda p, n: p * (p - 1) * 2 * 8,
    "Alltoall": lambda p, n: p * (p - 1) * 2 * 8,
    "Reduce_scatter_block": lambda p, n: p * (p - 1) * 2 * 8,
    "Scan": lambda p, n: p * (p - 1) // 2 * n * 8,
    "Exscan": lambda p, n: p * (p - 1) // 2 * n * 8,
}


@pytest.mark.parametrize("name", list(LINEAR))
def test_forward_bytes_are_what_the_ranks_receive(comm, name):
    n = 2 * comm.size
    s, r = np.ones(n), np.ones(n)
    pad.mpi.reset_stats()
    pad.autodiff(lambda s, r: LINEAR[name](comm, s, r), pad.Dup(s, np.ones(n)), pad.Dup(r, np.ones(n)))
    assert comm.mpi.allreduce(pad.mpi.stats()["forward"]["bytes"]) == RECEIVED[name](comm.size, n)


def test_seconds_and_calls_per_phase(comm):
    """Every phase's time is counted: plain calls (no payload counted), forward sweep and reverse pass."""
    x, y = np.ones(4), np.zeros(4)
    pad.mpi.reset_stats()
    comm.Allreduce(x, y, pad.mpi.SUM)
    pad.autodiff(
        lambda x, y: comm.Allreduce(x, y, pad.mpi.SUM), pad.Dup(x, np.zeros(4)), pad.Dup(y, np.ones(4))
    )
    st = pad.mpi.stats()
    assert st["plain"]["calls"] == 1 and st["plain"]["bytes"] == 0
    assert all(st[p]["seconds"] > 0.0 for p in ("plain", "forward", "reverse"))
    assert st["tangent"] == {"bytes": 0, "calls": 0, "staged_bytes": 0, "staged_copies": 0, "seconds": 0.0}
    assert all(
        st[p]["staged_bytes"] == st[p]["staged_copies"] == 0 for p in st
    )  # host buffers are never staged
    pad.mpi.reset_stats()
    assert all(v == 0 for phase in pad.mpi.stats().values() for v in phase.values())


def test_the_transport_of_device_buffers_is_asked_of_the_mpi_library(monkeypatch):
    """MPIX_Query_cuda_support() decides, unless PAD_MPI_CUDA_AWARE does; the answer is cached."""
    from pad.mpi import _core

    monkeypatch.setattr(_core, "_cuda_aware", [])
    monkeypatch.delenv("PAD_MPI_CUDA_AWARE", raising=False)
    asked = pad.mpi.transport()
    assert asked["device_buffers"] in ("direct", "staged")
    assert asked["why"].startswith("MPIX_Query_cuda_support() returned ") or asked["why"] == (
        "the MPI library has no MPIX_Query_cuda_support"
    )
    monkeypatch.setenv("PAD_MPI_CUDA_AWARE", "1")
    assert pad.mpi.transport() == asked  # cached
    for setting, how in (("1", "direct"), ("0", "staged")):
        monkeypatch.setattr(_core, "_cuda_aware", [])
        monkeypatch.setenv("PAD_MPI_CUDA_AWARE", setting)
        assert pad.mpi.transport() == {"device_buffers": how, "why": f"PAD_MPI_CUDA_AWARE={setting}"}
    monkeypatch.setattr(_core, "_cuda_aware", [])
    monkeypatch.setenv("PAD_MPI_CUDA_AWARE", "yes")
    with pytest.raises(ValueError, match="PAD_MPI_CUDA_AWARE must be 0 or 1, not 'yes'"):
        pad.mpi.transport()


def _p2p_program(comm):
    """A chain of Send/Recv (a wildcard receive filling part of its buffer), an Isend/Irecv ring and a
    Sendrecv ring."""
    r, p = comm.rank, comm.size

    def f(x, y, z, w):
        if r > 0:
            comm.Recv(y, pad.mpi.ANY_SOURCE, pad.mpi.ANY_TAG)
        if r < p - 1:
            comm.Send(x, r + 1, 3)
        pad.mpi.Request.Waitall([comm.Irecv(w, (r - 1) % p, 5), comm.Isend(z, (r + 1) % p, 5)])
        comm.Sendrecv(z, (r + 1) % p, 6, w, (r - 1) % p, 6)

    return f, (np.ones(3), np.zeros(5), np.ones(2), np.zeros(2))


def _p2p_log(comm, phase):
    """The log entries of ``_p2p_program`` on this rank in ``phase``: (call, where, tag, bytes, op, adjoint)."""
    r, p = comm.rank, comm.size
    nxt, prv = (r + 1) % p, (r - 1) % p
    if phase == "reverse":
        return [
            ("Sendrecv", f"-> {prv} <- {nxt}", 6, 16, "Sendrecv", ""),
            ("Irecv", f"<- {nxt}", 5, 16, "Isend", ""),
            ("Isend", f"-> {prv}", 5, 0, "Irecv", ""),
            *([("Recv", f"<- {r + 1}", 3, 24, "Send", "")] if r < p - 1 else []),
            *([("Send", f"-> {r - 1}", 3, 0, "Recv", "")] if r > 0 else []),
        ]
    return [
        *([("Recv", f"<- {r - 1}", 3, 24, "Recv", "Send")] if r > 0 else []),
        *([("Send", f"-> {r + 1}", 3, 0, "Send", "Recv")] if r < p - 1 else []),
        ("Isend", f"-> {nxt}", 5, 0, "Isend", "Irecv"),
        ("Irecv", f"<- {prv}", 5, 16, "Irecv", "Isend"),
        ("Sendrecv", f"-> {nxt} <- {prv}", 6, 16, "Sendrecv", "Sendrecv"),
    ]


@pytest.mark.parametrize("mode", ["autodiff", "fwddiff"])
def test_point_to_point_log_entries(comm, everywhere, mode):
    """Each point-to-point call logs where it went, its tag and the bytes that arrived (a receive's from
    its status: a wildcard's source and tag, a partial receive's size; in fwddiff the value's part of a
    message that carries the tangent too); each adjoint call logs its primal's tag."""
    f, values = _p2p_program(comm)
    run = pad.autodiff if mode == "autodiff" else pad.fwddiff
    with pad.mpi.trace() as events:
        run(f, *(pad.Dup(v, np.ones_like(v)) for v in values))
    got = {
        phase: [(e.call, e.where, e.tag, e.nbytes, e.op, e.adjoint) for e in events if e.phase == phase]
        for phase in ("forward", "reverse", "tangent")
    }
    if mode == "autodiff":
        want = {"forward": _p2p_log(comm, "forward"), "reverse": _p2p_log(comm, "reverse"), "tangent": []}
    else:
        want = {"forward": [], "reverse": [], "tangent": _p2p_log(comm, "tangent")}
    assert everywhere(got == want), (got, want)
