"""miniBUDE under MPI: any rank count gives the serial energies and gradients; too many ranks is an error.

Run by ``scripts/test.sh`` under ``mpiexec -n 1..4``; every verdict is agreed over ranks.
"""

from __future__ import annotations

import numpy as np
import pytest

from apps.minibude.__main__ import FD_TOLERANCE
from apps.minibude.deck import InputError
from apps.minibude.driver import Docking
from apps.minibude.optimize import optimize
from tests.apps.minibude_support import real_deck, small_deck, smoothed

MPI = pytest.importorskip("mpi4py.MPI")


def _all(ok: bool) -> bool:
    """True when ``ok`` holds on every rank (so every rank passes or fails together)."""
    return bool(MPI.COMM_WORLD.allreduce(bool(ok), op=MPI.LAND))


def _agree(a, b, rtol: float, atol: float) -> bool:
    return a is None or b is None or np.allclose(a, b, rtol=rtol, atol=atol)


@pytest.mark.mpi
def test_energies_and_gradients_agree_with_serial():
    comm = MPI.COMM_WORLD
    deck = small_deck(nposes=23, smooth=True)
    serial = Docking(deck, ppwi=4)
    parallel = Docking(deck, ppwi=4, comm=comm)
    parallel.score()
    energies = parallel.gather_energies()
    ok = comm.rank != 0 or np.allclose(energies, serial.score(), rtol=1e-6, atol=1e-4)
    for wrt in ("protein", "poses", "forcefield"):
        expected = serial.reduced_gradient(wrt, serial.gradient(wrt))
        got = parallel.reduced_gradient(wrt, parallel.gradient(wrt))
        scale = float(np.abs(expected).max())
        ok = ok and _agree(got, expected, rtol=1e-4, atol=1e-4 * scale)
    assert _all(ok), f"rank {comm.rank}: MPI results differ from the serial ones on {comm.size} ranks"


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["lbfgs", "random"])
def test_optimized_poses_and_counts_agree_with_serial(method):
    """Each rank moves its own poses: the poses reached (L-BFGS), and the counts over ranks, are the serial
    run's; random search draws per rank, so only its counts are summed alike."""
    comm = MPI.COMM_WORLD
    deck = small_deck(nposes=23)
    serial, parallel = Docking(deck, ppwi=4), Docking(deck, ppwi=4, comm=comm)
    got, want = optimize(parallel, method, steps=4), optimize(serial, method, steps=4)
    ok = got["steps"] == 4 and 0 < got["poses_improved"] <= deck.nposes
    parallel.score()
    energies = parallel.gather_energies()
    if method == "lbfgs":
        ok = ok and got["poses_improved"] == want["poses_improved"]
        ok = ok and (comm.rank != 0 or np.array_equal(energies, serial.score()))
    assert _all(ok), f"rank {comm.rank}: {got} on {comm.size} ranks, {want} serially"


@pytest.mark.mpi
def test_more_ranks_than_poses_is_an_error():
    comm = MPI.COMM_WORLD
    if comm.size == 1:
        pytest.skip("one rank never outnumbers the poses")
    deck = small_deck(nposes=comm.size - 1)
    with pytest.raises(InputError, match=f"mpiexec -n {comm.size}: more MPI ranks than poses"):
        Docking(deck, comm=comm)


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("wrt", "poses"), [("protein", 1024), ("protein", 4096), ("poses", 1024), ("forcefield", 1024)]
)
def test_finite_difference_check_gives_the_serial_verdict(wrt, poses):
    """``--check`` of bm1 under MPI checks the whole gradient, as one rank does: the same entries, the same
    error to rounding, the same verdict (it used to check each rank's share: 2 ranks of 1024 poses failed)."""
    comm = MPI.COMM_WORLD
    deck = real_deck("bm1").first(poses)
    if wrt == "forcefield":
        deck = smoothed(deck)
    parallel = Docking(deck, comm=comm)
    got = parallel.finite_difference_check(wrt, parallel.gradient(wrt))
    want = None
    if comm.rank == 0:
        serial = Docking(deck)
        want = serial.finite_difference_check(wrt, serial.gradient(wrt))
    want = comm.bcast(want)
    error, expected = got["max_rel_error"], want["max_rel_error"]
    same = abs(error - expected) <= 1e-4 and expected <= FD_TOLERANCE  # errors of 1e-4 to 1e-2
    assert _all(same), f"rank {comm.rank} of {comm.size}: error {error} where one rank finds {expected}"
