"""``pad.graph`` over several ranks: steps that exchange halos, send and receive, and reduce are recorded with
their messages and replayed, plain or differentiated, giving bitwise what running them gives, with the same
messages (tags, order, bytes) on every rank; steps whose messages a replay could not redo say why."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import pad
import pad.mpi
from tests.unit.test_graph import k_grow, k_wave

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(120)]

N = 6


class Steps:
    """One rank's steps over ``comm``: halos on a periodic ring of ranks, a ring of messages and reductions,
    with the scratch arrays they reach by closure (``put``: host arrays to the arrays the steps use)."""

    def __init__(self, comm: pad.mpi.Comm, put: Any = np.copy) -> None:
        self.comm, self.put = comm, put
        self.ghost = pad.mpi.Halo.structured(comm, (comm.size,), (N,), ghost=1, periodic=True)
        self.shared = pad.mpi.Halo.structured(comm, (comm.size,), (N,))
        self.t = put(np.zeros(N))
        self.out, self.back, self.got = (put(np.zeros(2)) for _ in range(3))
        self.calls = 0

    def plain(self, u: Any, total: Any) -> None:
        """A step outside ``autodiff``: launches, both halos, a ring of Isend/Irecv and a Sendrecv, and
        Allreduces of host buffers."""
        self.calls += 1
        comm, r, p = self.comm, self.comm.rank, self.comm.size
        pad.launch(k_wave, N, u, self.t)
        self.shared.exchange(self.t, "sum")
        pad.launch(k_grow, N, self.t, u)
        self.ghost.exchange(u, "copy")
        reqs = [comm.Irecv(self.out, (r - 1) % p, 3), comm.Isend(u[1:3], (r + 1) % p, 3)]
        pad.mpi.Request.Waitall(reqs)
        comm.Sendrecv(u[3:5], (r + 1) % p, 4, self.back, (r - 1) % p, 4)
        pad.launch(k_grow, 2, self.out, u)
        pad.launch(k_grow, 2, self.back, u[2:])
        comm.Allreduce(u, total, pad.mpi.SUM)
        comm.Allreduce(pad.mpi.IN_PLACE, total, pad.mpi.MAX)

    def f(self, u: Any, total: Any) -> None:
        """What ``autodiff`` differentiates: as ``plain`` with Waits one by one, and reductions that keep
        their inputs (MIN) or sum in place."""
        comm, r, p = self.comm, self.comm.rank, self.comm.size
        pad.launch(k_wave, N, u, self.t)
        self.shared.exchange(self.t, "sum")
        pad.launch(k_grow, N, self.t, u)
        self.ghost.exchange(u, "copy")
        got = self.got
        recv = comm.Irecv(got, (r - 1) % p, 3)
        comm.Isend(u[1:3], (r + 1) % p, 3).Wait()
        recv.Wait()
        pad.launch(k_grow, 2, got, u)
        comm.Allreduce(u, total, pad.mpi.MIN)
        comm.Allreduce(pad.mpi.IN_PLACE, total, pad.mpi.SUM)
        pad.launch(k_wave, N, total, self.t)
        pad.launch(k_grow, N, self.t, u)

    def gradient(self, u: Any, du: Any, total: Any, dtotal: Any, seed: Any) -> None:
        """A differentiated step: the seeds copied in, then ``autodiff`` of ``f``."""
        self.calls += 1
        pad.copy(du, seed)
        pad.fill(dtotal, 1.0)
        pad.autodiff(self.f, pad.Dup(u, du), pad.Dup(total, dtotal))


def start(comm: pad.mpi.Comm) -> tuple[np.ndarray, np.ndarray]:
    """A state that differs by rank, and its seed."""
    return 0.3 + 0.1 * np.cos(np.arange(N) + comm.rank), np.sin(np.arange(N) + 2.0 * comm.rank)


def gradients(comm: pad.mpi.Comm) -> tuple[Steps, Steps, Any, list[np.ndarray], list[np.ndarray], np.ndarray]:
    """The differentiated step twice on this rank, from the same state: one replayed by a graph (its steps,
    the graph, its arrays), one launched (its steps, its arrays); and the seed."""
    replayed, launched = Steps(comm), Steps(comm)
    u0, seed = start(comm)
    ours = [u0.copy(), np.zeros(N), np.zeros(N), np.zeros(N)]
    theirs = [u0.copy(), np.zeros(N), np.zeros(N), np.zeros(N)]
    return replayed, launched, pad.graph(replayed.gradient), ours, theirs, seed


def counts(stats: dict) -> dict:
    """``pad.mpi.stats()`` less the seconds."""
    return {phase: {k: v for k, v in st.items() if k != "seconds"} for phase, st in stats.items()}


def test_a_plain_step_replays_its_messages_bitwise(comm, everywhere):
    replayed, launched = Steps(comm), Steps(comm)
    g = pad.graph(replayed.plain)
    u, total = start(comm)[0], np.zeros(N)
    v, other = u.copy(), np.zeros(N)
    for _ in range(4):
        pad.mpi.reset_stats()
        with pad.mpi.trace() as ours:
            g(u, total)
        mine = counts(pad.mpi.stats())
        pad.mpi.reset_stats()
        with pad.mpi.trace() as theirs:
            launched.plain(v, other)
        assert everywhere(g.why is None)
        assert everywhere(np.array_equal(u, v) and np.array_equal(total, other))
        assert everywhere(ours == theirs and mine == counts(pad.mpi.stats()))
    assert everywhere(replayed.calls == 1 and len(g._records) == 1)


def test_a_differentiated_step_replays_its_messages_and_adjoints_bitwise(comm, everywhere):
    """The forward's messages, the reverse pass's adjoint messages (Isend/Irecv, halos, Allreduce MIN with
    its winners) and the consistency checks, replayed: the gradient and the accounting of a live call."""
    replayed, launched, g, ours, theirs, seed = gradients(comm)
    for _ in range(3):
        pad.mpi.reset_stats()
        with pad.mpi.trace() as replay_events:
            g(*ours, seed)
        mine = counts(pad.mpi.stats())
        pad.mpi.reset_stats()
        with pad.mpi.trace() as live_events:
            launched.gradient(*theirs, seed)
        assert everywhere(g.why is None)
        assert everywhere(all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True)))
        assert everywhere(replay_events == live_events and mine == counts(pad.mpi.stats()))
        assert everywhere(mine["reverse"]["calls"] > 0 and mine["reverse"]["bytes"] > 0)
    assert everywhere(replayed.calls == 1 and np.any(ours[1] != seed))


def test_ranks_that_record_again_meet_ranks_that_replay(comm, everywhere):
    """Rank 0 passes a new array each call, so it runs and records the step while the others replay theirs:
    the messages and consistency checks of both are the same, and so are the results."""
    replayed, launched, g, ours, theirs, seed = gradients(comm)
    for _ in range(3):
        if comm.rank == 0:
            ours[0] = ours[0].copy()
        g(*ours, seed)
        launched.gradient(*theirs, seed)
        assert everywhere(all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True)))
    assert everywhere(replayed.calls == (3 if comm.rank == 0 else 1))


def test_a_step_it_cannot_replay_says_why_and_runs_every_time(comm, everywhere):
    """A receive from any rank, fwddiff's tangents, a new communicator, a wait on mpi4py's own request, a
    request never waited: each step runs on every call, and ``why`` says what."""
    r, p = comm.rank, comm.size
    x, y = np.arange(3.0) + r, np.zeros(3)
    left = np.arange(3.0) + (r - 1) % p

    def wildcard() -> None:
        req = comm.Irecv(y, pad.mpi.ANY_SOURCE, 7)
        comm.Send(x, (r + 1) % p, 7)
        req.Wait()

    def tangents() -> None:
        pad.fwddiff(
            lambda a, b: comm.Allreduce(a, b, pad.mpi.SUM), pad.Dup(x, np.ones(3)), pad.Dup(y, np.zeros(3))
        )

    def splits() -> None:
        comm.Split(0, r).Free()

    def theirs() -> None:
        req = comm.mpi.Irecv(y, (r - 1) % p, 8)
        comm.Send(x, (r + 1) % p, 8)
        pad.mpi.Request.Waitall([req])

    def unwaited() -> None:
        comm.Isend(x, (r + 1) % p, 10)  # complete once the receive matches it, but never waited
        comm.Recv(y, (r - 1) % p, 10)

    cases = [
        (wildcard, "receives from any rank or with any tag (Irecv)", left),
        (tangents, "Allreduce in forward mode (fwddiff)", p * np.arange(3.0) + p * (p - 1) / 2),
        (splits, "makes or frees a communicator (Split)", np.zeros(3)),
        (theirs, "waits for a request it did not start with pad.mpi", left),
        (unwaited, "returns before waiting for a request it started", left),
    ]
    for step, why, want in cases:
        g = pad.graph(step)
        for _ in range(2):
            y[...] = 0.0
            g()
            assert everywhere(g.why is not None and why in g.why), g.why
            assert everywhere(np.array_equal(y, want)), (why, y)


def test_a_replayed_receive_that_gets_another_size_fails(comm, everywhere):
    """A receive whose message arrives shorter than when its step was recorded (the sender decides its
    length as it runs, outside the record) fails instead of replaying what it did not get."""
    r, p = comm.rank, comm.size
    into = np.zeros(4)
    g = pad.graph(lambda: comm.Recv(into, (r - 1) % p, 9))
    req = comm.Isend(np.arange(4.0), (r + 1) % p, 9)
    g()
    req.Wait()
    req = comm.Isend(np.arange(2.0), (r + 1) % p, 9)
    with pytest.raises(RuntimeError, match="received 16 bytes where its record received 32"):
        g()
    req.Wait()
    assert everywhere(g.why is None)
