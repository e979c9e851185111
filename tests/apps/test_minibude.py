"""miniBUDE on pad: deck I/O, energies against the reference, gradients, threads, GPU simulator, CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import pad
from apps.minibude.__main__ import main
from apps.minibude.deck import SHIPPED, InputError, read_deck, synthetic_deck, write_deck
from apps.minibude.driver import Docking, verify
from apps.minibude.kernels import NCOEF, fasten, fasten_x4, pair_coefficients
from tests.apps.minibude_support import real_deck, reference_energies, small_deck, smoothed

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


# ------------------------------------------------------------------------------------------------ deck
def test_deck_round_trip(tmp_path):
    deck = small_deck()
    deck = dataclasses.replace(deck, ref_energies=reference_energies(deck))
    write_deck(deck, str(tmp_path))
    back = read_deck(str(tmp_path))
    for name in (
        "protein_xyz",
        "protein_type",
        "ligand_xyz",
        "ligand_type",
        "ff_hbtype",
        "ff_params",
        "poses",
    ):
        np.testing.assert_array_equal(getattr(back, name), getattr(deck, name), err_msg=name)
    np.testing.assert_allclose(back.ref_energies, deck.ref_energies, atol=1e-6)


def test_synthetic_deck_is_deterministic_and_realistic():
    a, b = synthetic_deck(nposes=64), synthetic_deck(nposes=64)
    np.testing.assert_array_equal(a.poses, b.poses)
    assert (a.natpro, a.natlig, a.ntypes) == (938, 26, 34)
    assert a.ff_params[:, 0].min() >= 1.4 and a.ff_params[:, 0].max() <= 2.1
    e = Docking(a, ppwi=16).score()
    assert np.isfinite(e).all() and (e > 0).any() and (e < 0).any()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", "protein.in: missing deck file"),
        ("truncated", "ligand.in: truncated"),
        ("poses", "poses.in:"),
        ("type", "protein.in: forcefield type index 99 out of range"),
        ("ref", "ref_energies.out: 3 reference energies"),
    ],
)
def test_deck_errors_name_the_file(tmp_path, damage, message):
    deck = small_deck()
    write_deck(deck, str(tmp_path))
    if damage == "missing":
        os.remove(tmp_path / "protein.in")
    elif damage == "truncated":
        with open(tmp_path / "ligand.in", "ab") as fh:
            fh.write(b"\0" * 5)
    elif damage == "poses":
        np.zeros(6 * 5 + 1, np.float32).tofile(tmp_path / "poses.in")
    elif damage == "type":
        types = deck.protein_type.copy()
        types[3] = 99
        write_deck(dataclasses.replace(deck, protein_type=types), str(tmp_path))
    else:
        np.savetxt(tmp_path / "ref_energies.out", np.ones(3))
    with pytest.raises(InputError, match=message):
        read_deck(str(tmp_path))


# ------------------------------------------------------------------------------------------------ energies
@pytest.mark.parametrize("ppwi", [1, 7, 64])
def test_energies_match_reference_formula(ppwi):
    """Pose blocking with a ragged last block, all hbtypes and zero hydrophobicities, vs float64 NumPy."""
    deck = small_deck()
    e = Docking(deck, ppwi=ppwi).score()
    np.testing.assert_allclose(e, reference_energies(deck), rtol=2e-5, atol=2e-3)


@pytest.mark.parametrize("ppwi", [1, 5, 8])
def test_one_and_four_poses_per_pass_agree(ppwi):
    deck = small_deck(nposes=11)
    dock = Docking(deck, ppwi=ppwi)
    args = (dock.protein_xyz, dock.ligand_xyz, dock.ligand_type, dock.coef, dock.poses)
    blocks = (deck.nposes + ppwi - 1) // ppwi
    one, four = np.zeros(deck.nposes, np.float32), np.zeros(deck.nposes, np.float32)
    pad.launch(fasten, blocks, ppwi, *args, one)
    pad.launch(fasten_x4, blocks, ppwi, *args, four)
    np.testing.assert_allclose(four, one, rtol=1e-6, atol=1e-4)


def test_a_pose_s_gradient_is_the_same_wherever_it_falls_in_a_pass():
    """The poses' gradient, to the bit, for poses shifted by one to three slots among the four of a pass (as
    another rank count would place them): what lets any rank count reach the serial L-BFGS poses."""
    deck = small_deck(nposes=23)
    rng = np.random.default_rng(1)
    poses = (deck.poses + rng.normal(0.0, 0.05, deck.poses.shape)).astype(np.float32)
    whole = Docking(dataclasses.replace(deck, poses=poses), ppwi=4).gradient("poses")
    for shift in (1, 2, 3):
        tail = dataclasses.replace(deck, poses=np.ascontiguousarray(poses[:, shift:]))
        np.testing.assert_array_equal(Docking(tail, ppwi=4).gradient("poses"), whole[:, shift:])


def test_bm1_first_1024_poses_match_reference():
    deck = real_deck("bm1").first(1024)
    valid, worst = verify(Docking(deck, ppwi=32).score(), deck.ref_energies)
    assert valid, f"max relative difference {worst:.3e} exceeds 0.025 %"
    np.testing.assert_allclose(
        deck.ref_energies[:8], [865.52, 25.07, 368.43, 14.67, 574.99, 707.35, 33.95, 135.59], atol=6e-3
    )


def test_verify_uses_absolute_reference():
    ref = np.array([-100.0, 50.0, 0.5])
    assert verify(np.array([-100.0, 50.0, 0.9], np.float32), ref)[0]
    assert not verify(np.array([-90.0, 50.0, 0.5], np.float32), ref)[0]


def test_threads_agree():
    import numba

    deck = small_deck(nposes=200)
    before = numba.get_num_threads()
    try:
        results = []
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            dock = Docking(deck, ppwi=8)
            results.append((dock.score().copy(), dock.gradient("protein"), dock.gradient("poses")))
    finally:
        numba.set_num_threads(before)
    (e1, gp1, gq1), (e2, gp2, gq2) = results
    np.testing.assert_array_equal(e1, e2)
    np.testing.assert_array_equal(gq1, gq2)
    np.testing.assert_allclose(gp1, gp2, rtol=1e-4, atol=1e-3 * np.abs(gp1).max())


# ------------------------------------------------------------------------------------------------ gradients
@pad.kernel
def shifted(k, base, scale, offset, out):
    """out = base + scale * offset, elementwise over 2-D arrays."""
    r = k // base.shape[1]
    c = k % base.shape[1]
    out[r, c] = base[r, c] + scale * offset[r, c]


OFFSET_SCALE = {"protein": 1.0, "poses": 0.1, "forcefield": 0.1}


def _objective(deck, wrt, kernel=fasten, ppwi=4):
    """The energies as a function of an offset added to the protein, the poses or the forcefield.

    pad.check_grad steps by cbrt(eps) times the inputs' magnitude; differentiating with respect to an offset
    that starts at zero keeps that step small (5e-3 in float32, and a tenth of it for poses and forcefield,
    which move many atom pairs at once), so finite differences straddle few of the energy's kinks.
    """
    protein_xyz = np.ascontiguousarray(deck.protein_xyz.T)
    base = {"protein": protein_xyz, "poses": deck.poses, "forcefield": deck.ff_params}[wrt]
    nblocks = (deck.nposes + ppwi - 1) // ppwi

    def energies_of(offset, energies):
        moved = np.empty_like(base)
        pad.launch(shifted, base.size, base, OFFSET_SCALE[wrt], offset, moved)
        protein, poses, ff_params = protein_xyz, deck.poses, deck.ff_params
        if wrt == "protein":
            protein = moved
        elif wrt == "poses":
            poses = moved
        else:
            ff_params = moved
        coef = np.empty((deck.ntypes, NCOEF, deck.natpro), np.float32)
        pad.launch(
            pair_coefficients, deck.ntypes * deck.natpro, deck.ff_hbtype, ff_params, deck.protein_type, coef
        )
        pad.launch(kernel, nblocks, ppwi, protein, deck.ligand_xyz, deck.ligand_type, coef, poses, energies)

    return energies_of, np.zeros_like(base)


@pytest.mark.parametrize("wrt", ["protein", "poses", "forcefield"])
@pytest.mark.parametrize("which", ["synthetic", "bm1"])
@pytest.mark.parametrize("kernel", ["fasten", "fasten_x4"])
def test_gradients_pass_check_grad(wrt, which, kernel):
    """Both kernels; fasten_x4 with ppwi 6 also has passes with spare (repeated, unstored) pose slots."""
    deck = small_deck(nposes=12, smooth=True) if which == "synthetic" else smoothed(real_deck("bm1").first(8))
    k, ppwi = (fasten, 4) if kernel == "fasten" else (fasten_x4, 6)
    f, offset = _objective(deck, wrt, k, ppwi)
    energies = np.zeros(deck.nposes, np.float32)
    # Float32 finite differences of bm1's energies (hundreds each) carry an absolute noise of about
    # eps32 * |J| / h = 0.07, above 1e-2 where a direction's derivative is small.
    pad.check_grad(
        f,
        pad.Dup(offset, np.zeros_like(offset)),
        pad.Dup(energies, np.zeros_like(energies)),
        rtol=1e-2,
        atol=1e-2 if which == "synthetic" else 0.2,
    )


@pytest.mark.parametrize("wrt", ["protein", "poses", "forcefield"])
def test_driver_gradient_matches_finite_differences(wrt):
    dock = Docking(small_deck(nposes=24, smooth=True), ppwi=8)
    checked = dock.finite_difference_check(wrt, dock.gradient(wrt), count=6)
    assert checked["max_rel_error"] < 2e-2, checked


@pytest.mark.parametrize("wrt", ["protein", "poses", "forcefield"])
def test_gradients_match_float64_reference_formula(wrt):
    """pad's float32 gradients against float64 central differences of the reference's own formula."""
    deck = small_deck(nposes=12, smooth=True)
    dock = Docking(deck, ppwi=4)
    got = dock.reduced_gradient(wrt, dock.gradient(wrt))
    field = {"protein": "protein_xyz", "poses": "poses", "forcefield": "ff_params"}[wrt]
    base = getattr(deck, field).astype(np.float64)
    rng = np.random.default_rng(5)
    for flat in rng.choice(base.size, 8, replace=False):
        idx = np.unravel_index(flat, base.shape)
        sums = []
        for h in (1e-6, -1e-6):
            moved = base.copy()
            moved[idx] += h
            sums.append(reference_energies(dataclasses.replace(deck, **{field: moved})).sum())
        fd = (sums[0] - sums[1]) / 2e-6
        mine = got[idx[::-1]] if wrt == "poses" else got[idx]
        assert abs(mine - fd) <= 2e-3 * max(1.0, abs(fd)), (wrt, idx, mine, fd)


def test_charge_gradient_of_uncharged_types_matches_central_differences():
    """bm1's uncharged types (elsc 0, type 18 stored as -0.0) sit on the kink of -|chrg| against 'E' atoms:
    their elsc gradient is abs's partial at zero, 0 there (pad/kernel/rules.py), as central differences say."""
    deck = real_deck("bm1").first(8)
    got = Docking(deck, ppwi=4).gradient("forcefield")
    used = np.union1d(deck.ligand_type, deck.protein_type)
    uncharged = [t for t in used if deck.ff_params[t, 2] == 0.0]
    assert 18 in uncharged and np.signbit(deck.ff_params[18, 2])
    base = deck.ff_params.astype(np.float64)
    for t in uncharged:
        sums = []
        for h in (1e-4, -1e-4):
            moved = base.copy()
            moved[t, 2] += h
            sums.append(reference_energies(dataclasses.replace(deck, ff_params=moved)).sum())
        fd = (sums[0] - sums[1]) / 2e-4
        assert abs(got[t, 2] - fd) <= 2e-3 * max(1.0, abs(fd)), (t, got[t, 2], fd)


def test_pose_gradient_is_per_pose():
    """d(energy k)/d(pose k) from one reverse pass equals the gradient of pose k's energy alone."""
    deck = small_deck(nposes=9)
    full = Docking(deck, ppwi=4).gradient("poses")
    alone = Docking(dataclasses.replace(deck, poses=deck.poses[:, 8:9].copy()), ppwi=4).gradient("poses")
    np.testing.assert_allclose(alone[:, 0], full[:, 8], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("wrt", ["protein", "poses", "forcefield"])
def test_a_replayed_gradient_follows_its_inputs(wrt):
    """Each kind of gradient is a pad.graph step replayed after its first call: a second call gives the
    same gradient in a new array, and one after the poses moved in place, or were replaced, gives what a
    new Docking gives there."""
    deck = small_deck(nposes=9)
    dock = Docking(deck, ppwi=4)
    first, again = dock.gradient(wrt), dock.gradient(wrt)
    assert np.array_equal(first, again) and first is not again
    dock.poses[3:] += 0.25  # translations, in place
    moved = dock.gradient(wrt)
    fresh = Docking(dataclasses.replace(deck, poses=dock.poses.copy()), ppwi=4).gradient(wrt)
    np.testing.assert_array_equal(moved, fresh)
    assert not np.array_equal(moved, first)
    dock.poses = deck.poses.copy()  # a new array: recorded anew, not replayed on the old one
    np.testing.assert_array_equal(dock.gradient(wrt), first)


# ------------------------------------------------------------------------------------------------ GPU
_SIM_SCRIPT = """
import numpy as np
from numba import cuda
import pad
from apps.minibude.driver import Docking
from apps.minibude.kernels import fasten, fasten_x4
from tests.apps.minibude_support import small_deck
deck = small_deck(nposes=6)
cpu = Docking(deck, ppwi=4)
expected = cpu.score().copy()
grad_cpu = np.asarray(cpu.gradient("protein"))
host = [cpu.protein_xyz, deck.ligand_xyz, deck.ligand_type, cpu.coef, np.ascontiguousarray(deck.poses)]
for kernel, ppwi in ((fasten, 1), (fasten_x4, 4)):
    args = [cuda.to_device(np.ascontiguousarray(a)) for a in host]
    blocks = (deck.nposes + ppwi - 1) // ppwi
    energies = cuda.to_device(np.zeros(deck.nposes, np.float32))
    pad.launch(kernel, blocks, ppwi, *args, energies)
    np.testing.assert_allclose(energies.copy_to_host(), expected, rtol=1e-5, atol=1e-3)
    dprotein = cuda.to_device(np.zeros_like(host[0]))
    seed = cuda.to_device(np.ones(deck.nposes, np.float32))
    pad.autodiff(
        lambda p, lx, lt, c, q, e: pad.launch(kernel, blocks, ppwi, p, lx, lt, c, q, e),
        pad.Dup(args[0], dprotein), pad.Const(args[1]), args[2], pad.Const(args[3]), pad.Const(args[4]),
        pad.Dup(energies, seed),
    )
    scale = float(np.abs(grad_cpu).max())
    np.testing.assert_allclose(dprotein.copy_to_host(), grad_cpu, rtol=1e-3, atol=1e-4 * scale)
"""


def test_gpu_kernel_under_cuda_simulator():
    """Both fasten kernels on numba's CUDA simulator give the CPU energies and protein gradient."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": REPO}
    proc = subprocess.run(
        [sys.executable, "-c", _SIM_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_runs_and_writes_results(tmp_path, capsys):
    deck_dir = tmp_path / "deck"
    deck = small_deck(nposes=20)
    write_deck(dataclasses.replace(deck, ref_energies=reference_energies(deck)), str(deck_dir))
    out, grad, res = tmp_path / "e.txt", tmp_path / "g.npy", tmp_path / "r.json"
    argv = ["--deck", str(deck_dir), "--mode", "grad", "--wrt", "poses", "--iterations", "1", "--ppwi", "8"]
    argv += [
        "--output",
        str(out),
        "--grad-output",
        str(grad),
        "--json",
        str(res),
        "--check",
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    r = json.loads(res.read_text())
    for key in ("app", "mode", "ranks", "threads", "device", "problem", "iterations", "time_primal_s"):
        assert key in r
    assert r["valid"] and r["mode"] == "grad" and r["overhead"] > 0 and r["checks"]["reference"]
    assert np.loadtxt(out).shape == (20,)
    assert np.load(grad).shape == (20, 6)
    assert r["compile_s"] >= 0.0 and r["checks"]["finite_differences"]["passed"]
    text = capsys.readouterr().out
    assert "valid: yes" in text and "warm-up (compiles): " in text
    fd, ref = r["checks"]["finite_differences"], r["checks"]["reference"]
    assert (
        f"check finite_differences: 4 gradient entries against central differences of the energies: "
        f"error {fd['error']:.3g}, tolerance 0.02: pass" in text
    )
    assert "check reference: 20 pose energies against the deck's reference energies" in text
    assert f"error {ref['error']:.3g}, tolerance 0.00025: pass" in text


def test_cli_finds_shipped_deck_by_name_or_path(tmp_path, capsys, monkeypatch):
    """``--deck bm1`` reads the deck shipped in apps/minibude/data from any directory, and verifies it."""
    monkeypatch.chdir(tmp_path)
    for deck in ("bm1", os.path.join(SHIPPED, "bm1")):
        res = tmp_path / "r.json"
        argv = ["--deck", deck, "--poses", "64", "--iterations", "1", "--threads", "1", "--json", str(res)]
        assert main(argv) == 0
        r = json.loads(res.read_text())
        assert r["valid"] and r["problem"]["deck"] == "bm1" and r["checks"]["reference"]["poses"] == 64
        assert r["checks"]["reference"]["max_rel_diff"] < 2.5e-4
    assert "valid: yes" in capsys.readouterr().out


def test_cli_optimize_lowers_energies(tmp_path, capsys):
    deck_dir = tmp_path / "deck"
    deck = small_deck(nposes=40)
    write_deck(dataclasses.replace(deck, ref_energies=reference_energies(deck)), str(deck_dir))
    out = tmp_path / "e.txt"
    argv = [
        "--deck",
        str(deck_dir),
        "--iterations",
        "1",
        "--optimize",
        "3",
        "--threads",
        "1",
        "--output",
        str(out),
    ]
    assert main(argv) == 0  # the reference check and --output see the energies before optimization
    np.testing.assert_allclose(np.loadtxt(out), reference_energies(deck), rtol=2e-5, atol=2e-3)
    text = capsys.readouterr().out
    improved = int(text.split("L-BFGS steps lowered the energy of ")[1].split()[0])
    assert improved > 20


@pytest.mark.parametrize("optimizer", ["descent", "random"])
def test_cli_optimize_with_the_baselines(tmp_path, optimizer):
    out = tmp_path / "r.json"
    argv = ["--poses", "64", "--iterations", "1", "--threads", "1", "--optimize", "3", "--json", str(out)]
    assert main([*argv, "--optimizer", optimizer]) == 0
    o = json.loads(out.read_text())["optimize"]
    assert o["method"] == optimizer and o["steps"] == 3 and o["poses_improved"] > 0


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--poses", "0"], "--poses"),
        (["--poses", "100000"], "--poses"),
        (["--deck", "/nonexistent/deck"], "/nonexistent/deck"),
        (["--deck", "bm9"], "--deck: bm9 is neither a deck directory nor a shipped deck (bm1)"),
        (["--ppwi", "0"], "--ppwi"),
        (["--mode", "fast"], "--mode"),
        (["--output", "/nonexistent/dir/e.txt"], "--output"),
        (["--check"], "--check: only with --mode grad"),
        (["--wrt", "poses"], "--wrt: only with --mode grad"),
        (["--threads", "4096"], "--threads"),
        (["--optimize", "-1"], "--optimize: -1 must not be negative"),
        (["--optimizer", "random"], "--optimizer: only with --optimize K"),
        (["--optimize", "2", "--optimizer", "newton"], "--optimizer"),
    ],
)
def test_cli_errors_are_one_line(argv, names, capsys):
    assert main([*argv, "--iterations", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and names in err and err.startswith("minibude: error:"), err


def test_cli_bad_deck_exits_2_without_traceback(tmp_path):
    write_deck(small_deck(), str(tmp_path))
    with open(tmp_path / "protein.in", "r+b") as fh:
        fh.truncate(17)
    proc = subprocess.run(
        [sys.executable, "-m", "apps.minibude", "--deck", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "protein.in" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert exc.value.code == 0 and text.startswith("usage: python -m apps.minibude")
    assert (
        "K steps of local optimization of every pose (--optimizer) (default: 0)" in text
        and "(default: 8)" in text
        and "(default: protein)" in text
        and "(default: cpu)" in text
    )


def test_cli_without_reference_energies_or_check_says_nothing_was_checked(capsys):
    """The synthetic deck has no reference energies: no ``valid: yes`` for what was not checked."""
    assert main(["--poses", "1024", "--iterations", "1", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "valid: not checked" in text and "valid: yes" not in text and "1024 poses" in text
