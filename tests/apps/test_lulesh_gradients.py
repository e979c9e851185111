"""LULESH's gradients: one cycle's (Enzyme's measurement) and the whole run's, against finite differences,
forward mode, other thread and rank counts, and the keep-everything tape."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import pad.mpi
from apps.lulesh import __main__ as cli
from apps.lulesh import adjoint, mesh
from apps.lulesh.hydro import PARAMETERS, Hydro, default_parameters

HERE = os.path.dirname(__file__)
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def _hydro(size: int) -> Hydro:
    return Hydro(mesh.build(size, 1, 0, 11, 1, 1), pad.mpi.COMM_WORLD)


def _state_at(h: Hydro, cycle: int):
    return cli._state_at(h, default_parameters(h.mesh.nx, 1), cycle)


@pytest.mark.parametrize("size", [3, 4])
def test_one_cycle_gradient_passes_the_dot_product_test_and_finite_differences(size):
    h = _hydro(size)
    s = _state_at(h, 3)
    before = adjoint.host_copy(h, s)
    r = adjoint.check_step(h, s)
    assert r["passed"], r
    assert r["dot_product"]["rel_error"] < 1e-10
    assert r["direction"]["rel_error"] < 1e-5
    assert r["entries_rel_error"] < 1e-4
    assert all(e["gradient"] != 0.0 for e in r["entries"][:6])  # the probes see the blast
    after = adjoint.host_copy(h, s)
    assert all(np.array_equal(before[n], after[n]) for n in before)  # the check leaves the state as found


def test_one_cycle_gradient_is_the_same_on_one_and_two_threads():
    grads = []
    before = numba.get_num_threads()
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            h = _hydro(6)
            s = _state_at(h, 4)
            grads.append({n: np.array(v) for n, v in adjoint.StepGradient(h)(s).items()})
    finally:
        numba.set_num_threads(before)
    for name in grads[0]:
        np.testing.assert_allclose(
            grads[1][name], grads[0][name], rtol=1e-12, atol=1e-12 * np.abs(grads[0][name]).max()
        )


THREADS = """
import numba, numpy as np
from apps.lulesh import adjoint
from tests.apps.test_lulesh_gradients import _hydro, _state_at
for size in (12, 9):  # 9: 729 elements, whose even shares end off the vector loops' steps
    grads = []
    for threads in (1, 2, 4):
        numba.set_num_threads(threads)
        h = _hydro(size)
        grads.append({n: np.array(v) for n, v in adjoint.StepGradient(h)(_state_at(h, 4)).items()})
    for other in grads[1:]:
        differ = [n for n in grads[0] if not np.array_equal(grads[0][n], other[n])]
        assert not differ, (size, differ)
print("identical")
"""


def test_one_cycle_gradient_is_identical_on_1_2_and_4_threads():
    """Scatter adjoints run by plans that do not depend on the thread count, so no sum does; fast-math
    launchers' chunks start where the vector loops' steps do for any count, so no rounding does either."""
    env = dict(os.environ, NUMBA_NUM_THREADS="4", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", THREADS],
        cwd=os.path.dirname(os.path.dirname(HERE)),
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "identical" in done.stdout


def _whole_run(size: int, cycles: int, snapshots: int | None):
    h = _hydro(size)
    parameters = default_parameters(size, 1)
    return h, parameters, adjoint.sensitivity(h, cycles, parameters, snapshots)


@pytest.mark.parametrize("size,cycles,ran", [(3, 20, 20), (4, 50, 45)])  # -s 4 reaches the stop time
def test_whole_run_gradient_matches_central_differences(size, cycles, ran):
    h, parameters, result = _whole_run(size, cycles, snapshots=5)
    assert result.cycles == ran
    r = adjoint.check_sensitivity(h, result, parameters)
    worst = max(c["rel_error"] for c in r["entries"])
    assert r["passed"] and worst < 1e-5, r
    assert {c["what"] for c in r["entries"]} == {*PARAMETERS, "coords . direction"}
    # zero exactly where the differences are: ss4o3 (LULESH never reads it), the limiter where it never binds
    assert all((c["gradient"] == 0.0) == (c["fd"] == 0.0) for c in r["entries"]), r
    assert result.parameters["ss4o3"] == 0.0 and result.parameters["hgcoef"] != 0.0


def test_checkpointed_whole_run_gradient_equals_keeping_everything():
    _, _, kept = _whole_run(3, 23, snapshots=None)
    _, _, checkpointed = _whole_run(3, 23, snapshots=3)
    assert kept.cycles == checkpointed.cycles == 23 and kept.energy == checkpointed.energy
    for name in PARAMETERS:
        assert abs(kept.parameters[name] - checkpointed.parameters[name]) <= 1e-12 * abs(
            kept.parameters[name]
        )
    np.testing.assert_allclose(
        checkpointed.coords, kept.coords, rtol=1e-12, atol=1e-12 * np.abs(kept.coords).max()
    )
    stats = checkpointed.stats
    assert stats.snapshots_peak <= 3 and stats.recomputed >= pad.checkpoint.optimal_recomputations(23, 3) > 0


def _on_ranks(n: int, size: int, path) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    script = os.path.join(HERE, "lulesh_gradients.py")
    done = subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", script, str(size), str(path)],  # errors abort
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(np.load(path))


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside the interpreter")
def test_eight_ranks_give_the_serial_gradients_of_twice_the_edge(tmp_path):
    serial = _on_ranks(1, 4, tmp_path / "serial.npz")
    ranks = _on_ranks(8, 2, tmp_path / "ranks.npz")
    # dJ/d(coordinates) after cycle ~10 is one of several one-sided gradients (see
    # adjoint.coordinate_direction): which mirror-image element the time step's minimum picks among equal
    # ones depends on the decomposition. Their symmetric parts are the same.
    serial["run_coords"], ranks["run_coords"] = (_symmetric_part(r["run_coords"], 5) for r in (serial, ranks))
    for key, value in serial.items():
        if key.startswith("step_") or key in ("run_params", "run_coords", "run_energy", "misfit"):
            scale = np.abs(value).max()
            np.testing.assert_allclose(ranks[key], value, rtol=1e-10, atol=1e-10 * scale, err_msg=key)
    assert (ranks["run_check"] < 1e-5).all() and (serial["run_check"] < 1e-5).all()


def _symmetric_part(g: np.ndarray, n: int) -> np.ndarray:
    """The average of a field of 3-vectors on the n^3 nodes (shape (3, n^3), global order) over the six
    permutations of the axes, applied to the nodes and the vectors' components alike."""
    field = g.reshape(3, n, n, n)  # components x, y, z; nodes indexed (z, y, x)
    total = np.zeros_like(field)
    for p in itertools.permutations(range(3)):
        total += field[list(p)].transpose(0, *(3 - p[2 - axis] for axis in range(3)))
    return (total / 6.0).reshape(g.shape)


def test_timed_runs_replay_what_the_warm_up_recorded():
    """Every run of a Hydro starts in the same arrays: a timed gradient run replays from its first cycle the
    ``pad.graph`` step its warm-up recorded, and ends where a run in new arrays ends."""
    h = _hydro(4)
    parameters = default_parameters(4, 1)
    step = adjoint.StepGradient(h)
    first, _, _ = cli._timed(h, parameters, 3, leapfrog=step)
    energies = np.array(first.e)
    again, cycles, _ = cli._timed(h, parameters, 3, leapfrog=step)
    assert again is first and cycles == 3 and len(step.replayed._records) == 1
    np.testing.assert_array_equal(again.e, energies)
    fresh = h.initial_state(parameters)
    h.setup(fresh)
    h.advance(fresh, 3)
    np.testing.assert_array_equal(fresh.e, energies)


def test_cli_grad_mode_checks_and_reports(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert cli.main(["-s", "3", "-i", "5", "--mode", "grad", "--check", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["mode"] == "grad" and r["valid"] and r["iterations"] == 5
    assert r["checks"]["gradient"]["passed"] and r["checks"]["gradient_run_equals_primal"]["passed"]
    assert r["time_grad_s"] > 0 and r["overhead"] == pytest.approx(r["time_grad_s"] / r["time_primal_s"])
    text = capsys.readouterr().out
    assert "Gradient per cycle" in text and text.rstrip().splitlines()[-1].startswith("FOM")
    entries, dot, along = r["checks"]["gradient"]["parts"]
    for part, tolerance in ((entries, "0.0001"), (dot, "1e-10"), (along, "1e-05")):
        assert part["passed"] and f"check gradient: {part['what']}: error {part['error']:.3g}, " in text
        assert f"tolerance {tolerance}: pass" in text
    assert "20 entries of cycle 3's gradient against central differences" in entries["what"]
    assert "check symmetry: symmetry of rank 0's energies on the z = 0 plane (MaxRelDiff): error " in text
    assert "check gradient_run_equals_primal: " in text and "Warm-up (compiles)   = " in text


def test_cli_sensitivity_mode_writes_the_gradient_and_its_plot(tmp_path, capsys):
    out, npy, png = tmp_path / "s.json", tmp_path / "dJdx.npy", tmp_path / "dJdx.png"
    argv = ["-s", "3", "--mode", "sensitivity", "--snapshots", "4", "--set", "hgcoef=2.5", "--check"]
    assert cli.main([*argv, "--json", str(out), "--grad-output", str(npy), "--plot", str(png)]) == 0
    r = json.loads(out.read_text())
    assert r["valid"] and r["iterations"] == 23 and r["parameters"] == {"hgcoef": 2.5}
    assert r["checks"]["gradient"]["passed"] and r["snapshots"] == 4 and r["snapshots_peak"] <= 4
    assert [p["what"] for p in r["checks"]["gradient"]["parts"]][:2] == [
        "dJ/d(einit) against central differences of whole runs",
        "dJ/d(hgcoef) against central differences of whole runs",
    ]
    assert r["recomputed_steps"] >= r["optimal_recomputed_steps"] > 0 and r["peak_state_bytes"] > 0
    coords = np.load(npy)
    assert coords.shape == (64, 3) and r["gradient"]["coords_norm"] == pytest.approx(np.linalg.norm(coords))
    assert set(r["gradient"]) == {*PARAMETERS, "coords_norm"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Sensitivity of the Final Origin Energy" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--set", "gamma=2"], "--set: 'gamma=2': expected NAME=VALUE with NAME one of einit, hgcoef"),
        (["--set", "hgcoef=abc"], "'abc' is not a number"),
        (["--check"], "--check: only with --mode grad or --mode sensitivity"),
        (["--mode", "grad", "--grad-output", "x.npy"], "--grad-output: only with --mode sensitivity"),
        (["--mode", "sensitivity", "--snapshots", "0"], "--snapshots"),
        (["--mode", "grad", "--snapshots", "4"], "--snapshots: only with --mode sensitivity"),
        (["--mode", "sensitivity", "--plot-scale", "linear"], "--plot-scale: only with --plot"),
        (
            ["--mode", "sensitivity", "--plot", "p.png", "--plot-slice", "4", "-s", "3"],
            "--plot-slice: 4 is past",
        ),
        (["--mode", "sensitivity", "--plot", "p.png", "--plot-component", "w"], "--plot-component: invalid"),
        (["--mode", "gard"], "--mode: invalid choice: 'gard'"),
    ],
)
def test_bad_gradient_flags_are_one_line_and_status_2(capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and message in err


@pytest.mark.parametrize("component", ["norm", "x"])
def test_sensitivity_figure_centres_nodes_and_names_the_global_mesh(component):
    """8 ranks of -s 3: the global 6^3 mesh and the rank count in the title, one cell centred on each of the
    7 x 7 nodes of the plane, a symmetric-log colour scale that shows the nodes at exactly zero."""
    pytest.importorskip("matplotlib")
    from matplotlib.colors import SymLogNorm

    coords = np.zeros((3, 7**3))
    plane = np.arange(49.0).reshape(7, 7)  # 0 at the origin, then growing: values over two decades
    coords[0, 49:98] = plane.ravel()  # the plane z = h
    args = argparse.Namespace(s=3, plot_slice=1, plot_component=component, plot_scale=None, plot_contours=2)
    fig = cli.sensitivity_figure(args, coords, 2, 40)
    ax = fig.axes[0]
    title = ax.get_title()
    assert (
        "6x6x6 elements (8 ranks of -s 3), 40 cycles" in title and "z = 0.1875 (node plane 1 of 0-6)" in title
    )
    (mesh,) = ax.collections[:1]
    assert isinstance(mesh.norm, SymLogNorm) and mesh.norm.vmax == 48.0
    assert mesh.norm.vmin == (0.0 if component == "norm" else -48.0) and mesh.norm.linthresh == 1.0
    np.testing.assert_array_equal(mesh.get_array().reshape(7, 7), plane)
    edges = mesh.get_coordinates()[0, :, 0]  # cell edges along x: half a spacing either side of each node
    np.testing.assert_allclose(edges, (np.arange(8) - 0.5) * 1.125 / 6)
    assert len(ax.collections) > 1  # the contour lines
