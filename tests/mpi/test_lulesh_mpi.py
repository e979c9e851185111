"""LULESH under MPI: a cube of ranks runs (results as the serial run of the whole mesh); any other count
is a one-line error on rank 0 and status 2 on every rank; at 8 ranks the cycles and their gradients are
replayed (``pad.graph``). Run at 1 to 4 ranks by ``scripts/test.sh``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mpi4py import MPI

import pad
import pad.mpi
from apps.lulesh import __main__ as cli
from apps.lulesh import hydro as H
from apps.lulesh import mesh as M
from apps.lulesh.adjoint import DIFFERENTIATED, StepGradient, constants

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]


def test_a_cube_of_ranks_runs_and_any_other_count_is_refused(comm, everywhere, capsys, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"lulesh{comm.rank}") / "r.json"
    # a mesh the C++ original's results know: edge 3 on one rank, edge 10 (10 cycles) on 8
    size, cycles = (5, 10) if comm.size == 8 else (3, None)
    status = cli.main(["-s", str(size), "-q", "--json", str(out)] + (["-i", str(cycles)] if cycles else []))
    err = capsys.readouterr().err
    if comm.size in (1, 8):
        assert everywhere(status == 0)
        if comm.rank == 0:
            r = json.loads(out.read_text())
            edge = size * round(comm.size ** (1 / 3))
            assert r["valid"] and r["checks"]["reference"]["iterations"] == cli.REFERENCE[(edge, cycles)][0]
    else:
        assert everywhere(status == 2)
        said = f"lulesh: error: the number of MPI ranks must be a cube of an integer (1, 8, 27, ...), got {comm.size}\n"
        assert everywhere(err == (said if comm.rank == 0 else ""))


def _hydro(comm: pad.mpi.Comm) -> tuple[H.Hydro, H.State]:
    h = H.Hydro(M.build(2, comm.size, comm.rank, 11, 1, 1), comm)
    s = h.initial_state()
    h.setup(s)
    return h, s


@pytest.mark.skipif(MPI.COMM_WORLD.Get_size() != 8, reason="LULESH's ranks form a cube: 8 of them here")
def test_eight_ranks_replay_their_cycles_and_gradients(comm, everywhere):
    """The cycles after the first (time increment and leap-frog step, with their Allreduce and halo
    exchanges) and the per-cycle gradients are replayed on every rank, and give bitwise the states and
    gradients of cycles run without replays."""
    (h, s), (g, t) = _hydro(comm), _hydro(comm)
    cycles = h.advance(s, 5)
    for cycle in range(cycles):
        g.cycle(cycle, t)
    assert everywhere(h.replayed_leapfrog.why is None and h.later_increment.why is None)
    assert everywhere(all(np.array_equal(a, b) for a, b in zip(s.arrays(), t.arrays(), strict=True)))

    replayed, launched = StepGradient(h), StepGradient(g)

    def plain(state: H.State) -> dict:
        pad.autodiff(launched.step, *launched.arguments(state), *constants(g))
        return launched.shadows

    for cycle in range(cycles, cycles + 4):
        h.cycle(cycle, s, replayed)
        g.cycle(cycle, t, plain)
        same = [np.array_equal(replayed.shadows[n], launched.shadows[n]) for n in DIFFERENTIATED]
        assert everywhere(replayed.replayed.why is None and all(same))
    assert everywhere(all(np.array_equal(a, b) for a, b in zip(s.arrays(), t.arrays(), strict=True)))
