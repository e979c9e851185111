"""miniBUDE's local optimization of poses (``--optimize``): L-BFGS per pose and the two baselines."""

from __future__ import annotations

import dataclasses

import numba
import numpy as np
import pytest
import scipy.optimize

from apps.cli import InputError
from apps.minibude.deck import HBTYPE_E, Deck
from apps.minibude.driver import Docking
from apps.minibude.optimize import LBFGS, METHODS, optimize
from tests.apps.minibude_support import real_deck, reference_energies


@pytest.mark.parametrize("method", list(METHODS))
def test_every_step_lowers_each_pose_energy_or_leaves_the_pose(method):
    """Pose by pose, at every step: the energy falls, or the pose (and so its energy) stays as it was."""
    deck = real_deck("bm1").first(64)
    dock = Docking(deck, ppwi=16)
    start = dock.score().copy()
    optimizer = METHODS[method](dock)
    before_poses, before = dock.poses.copy(), dock.score().copy()
    for _ in range(8):
        optimizer.step()
        poses, energies = dock.poses.copy(), dock.score().copy()
        stayed = (poses == before_poses).all(axis=0)
        assert ((energies < before) | (stayed & (energies == before))).all()
        before_poses, before = poses, energies
    assert (before < start).sum() >= 60  # nearly every pose improved


def _cage(poses: np.ndarray) -> Deck:
    """One ligand atom among four protein atoms at the corners of a tetrahedron, 3.8 Å from its centre, all
    within the charge term's range (between 3 and 5 Å): the energy is a weighted sum of the distances to the
    corners, smooth and strictly convex in the translation, with one minimum; rotations do not change it."""
    corners = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], np.float32) * (3.8 / np.sqrt(3.0))
    charges = (0.8, 1.0, 1.2, 1.0, 1.0)  # the corners' types, then the ligand's
    return Deck(
        protein_xyz=corners,
        protein_type=np.arange(4, dtype=np.int32),
        ligand_xyz=np.zeros((1, 3), np.float32),
        ligand_type=np.array([4], np.int32),
        ff_hbtype=np.array([HBTYPE_E] * 4 + [ord("N")], np.int32),
        ff_params=np.array([[1.5, 0.0, q] for q in charges], np.float32),
        poses=poses,
    )


def test_lbfgs_agrees_with_a_reference_minimizer_on_a_tiny_case():
    """From six starts, L-BFGS on pad's float32 energies and gradients reaches the minimum that scipy's BFGS
    finds on the float64 reference formula (minibude_support), independent of pad."""
    rng = np.random.default_rng(5)
    poses = np.concatenate([rng.uniform(-1.0, 1.0, (3, 6)), rng.uniform(-0.3, 0.3, (3, 6))]).astype(
        np.float32
    )
    deck = _cage(poses)
    dock = Docking(deck, ppwi=4)
    optimize(dock, "lbfgs", steps=50)
    ours = dock.score()
    for j in range(deck.nposes):

        def energy(x: np.ndarray, j: int = j) -> float:
            return float(reference_energies(dataclasses.replace(deck, poses=x[:, None]))[0])

        reference = scipy.optimize.minimize(energy, poses[:, j].astype(np.float64), method="BFGS")
        assert reference.success, reference
        assert abs(ours[j] - reference.fun) <= 1e-6 * abs(reference.fun)
        np.testing.assert_allclose(dock.poses[3:, j], reference.x[3:], atol=2e-3)
        np.testing.assert_array_equal(dock.poses[:3, j], poses[:3, j])  # rotations: a zero gradient


def test_a_pose_without_interactions_stays():
    poses = np.array([[0.1], [0.2], [0.3], [40.0], [0.0], [0.0]], np.float32)  # far from every atom
    dock = Docking(_cage(poses), ppwi=1)
    assert dock.score()[0] == 0.0
    result = optimize(dock, "lbfgs", steps=3)
    assert result["poses_improved"] == 0 and np.array_equal(dock.poses, poses)


def test_a_time_budget_of_zero_runs_no_step():
    dock = Docking(real_deck("bm1").first(8), ppwi=4)
    poses = dock.poses.copy()
    result = optimize(dock, "random", seconds=0.0)
    assert result["steps"] == 0 and result["poses_improved"] == 0 and np.array_equal(dock.poses, poses)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "lbfgs", "steps": -1}, "--optimize: -1 steps must not be negative"),
        ({"method": "lbfgs", "seconds": -1.0}, "-1.0 seconds must not be negative"),
        ({"method": "lbfgs"}, "give steps or seconds"),
        ({"method": "lbfgs", "steps": 2, "seconds": 1.0}, "give steps or seconds"),
        ({"method": "newton", "steps": 2}, "--optimizer: 'newton' is not one of lbfgs, descent, random"),
    ],
)
def test_bad_optimize_arguments_are_refused(kwargs, message):
    dock = Docking(real_deck("bm1").first(4), ppwi=4)
    with pytest.raises(InputError, match=message):
        optimize(dock, **kwargs)


def test_lbfgs_needs_a_memory():
    with pytest.raises(InputError, match="memory 0 must be at least 1"):
        LBFGS(Docking(real_deck("bm1").first(4), ppwi=4), memory=0)


def test_the_benchmark_runs_every_method_for_every_budget(tmp_path):
    from scripts.bench_optimize import main

    threads = str(numba.get_num_threads())  # the benchmark sets the thread count: keep the tests'
    result = main(
        ["--poses", "16", "--budgets", "0.0", "0.2", "--threads", threads, "--json", str(tmp_path / "r.json")]
    )
    cases = result["cases"]
    assert [(c["budget_cpu_s"], c["method"]) for c in cases] == [(b, m) for b in (0.0, 0.2) for m in METHODS]
    assert all(c["steps"] == 0 and c["poses_lowest"] == 16 for c in cases[:3])  # no time: nothing moves
    assert all(c["steps"] > 0 and c["cpu_s"] >= 0.2 for c in cases[3:])
