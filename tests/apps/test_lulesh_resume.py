"""LULESH's whole-run gradient in a memory budget, stopped and resumed: `--memory`, `--checkpoint-dir`,
`--time-limit`, SIGTERM and `--resume` on the command line, each resumed run giving the same gradient bits."""

from __future__ import annotations

import errno
import json
import os
import signal

import numpy as np
import pytest

from apps.lulesh import __main__ as cli
from pad import checkpoint
from pad.checkpoint import engine
from tests.time_limits import PassesAfter

BASE = ["-s", "3", "--mode", "sensitivity", "--threads", "1", "-q"]


def _run(tmp_path, name, *extra):
    out, npy = tmp_path / f"{name}.json", tmp_path / f"{name}.npy"
    status = cli.main([*BASE, *extra, "--json", str(out), "--grad-output", str(npy)])
    if status != 0:
        return status, None, None
    return status, json.loads(out.read_text()), np.load(npy)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    status, r, coords = _run(tmp_path_factory.mktemp("ref"), "ref", "--memory", "1GB")
    assert status == 0
    return r, coords


def test_a_budget_that_holds_the_run_keeps_every_cycle(reference):
    r, _ = reference
    assert r["schedule"] == "keep-all" and r["recomputed_steps"] == 0 and r["valid"]
    assert 0 < r["peak_state_bytes"] <= r["memory"] == 10**9


def test_a_small_budget_recomputes_within_it_and_gives_the_same_bits(tmp_path, reference):
    want, coords = reference
    budget = 3 * want["state_bytes"] + 2 * want["record_bytes"]
    status, r, got = _run(tmp_path, "small", "--memory", str(budget))
    assert status == 0 and r["recomputed_steps"] > 0 and r["peak_state_bytes"] <= budget
    assert r["gradient"] == want["gradient"] and np.array_equal(got, coords)
    # the primal's cycle count is expected: the offline optimum, but for the cycles that measured the sizes
    assert r["optimal_recomputed_steps"] <= r["recomputed_steps"] <= r["optimal_recomputed_steps"] + 2


@pytest.mark.parametrize("after,where", [(5, "forward"), (40, "reverse")])
def test_a_time_limit_stops_with_75_and_resume_finishes_with_the_same_bits(
    tmp_path, reference, monkeypatch, capsys, after, where
):
    want, coords = reference
    folder = tmp_path / "ckpt"
    budget = str(3 * want["state_bytes"] + 2 * want["record_bytes"])
    monkeypatch.setattr(checkpoint.Resumable, "clock", PassesAfter(after))
    status, _, _ = _run(
        tmp_path, "a", "--memory", budget, "--checkpoint-dir", str(folder), "--time-limit", "5"
    )
    assert status == 75
    err = capsys.readouterr().err
    assert f"stopped by the time limit in the {where}" in err and f"--resume {folder}" in err, err
    monkeypatch.undo()
    status, r, got = _run(tmp_path, "b", "--memory", budget, "--resume", str(folder))
    assert status == 0 and r["sessions"] == 2 and r["valid"]
    assert r["gradient"] == want["gradient"] and np.array_equal(got, coords)
    assert not os.listdir(folder)


@pytest.mark.parametrize("at,where", [(8, "forward"), (12, "reverse")])
def test_sigterm_stops_with_75_and_resume_finishes_with_the_same_bits(
    tmp_path, reference, monkeypatch, capsys, at, where
):
    """SIGTERM during the forward sweep's 8th cycle, or after the reverse pass's 12th cycle."""
    want, coords = reference
    folder = tmp_path / "ckpt"
    calls = {"forward": 0, "reverse": 0}
    hook = engine.Loop.advance if where == "forward" else engine.Loop.reverse_step

    def signalling(self, *args, **kwargs):
        if self.opts.resumable is not None:
            calls[where] += 1
            if calls[where] == at:
                os.kill(os.getpid(), signal.SIGTERM)
        return hook(self, *args, **kwargs)

    monkeypatch.setattr(engine.Loop, "advance" if where == "forward" else "reverse_step", signalling)
    status, _, _ = _run(tmp_path, "a", "--checkpoint-dir", str(folder))
    assert status == 75 and f"stopped by SIGTERM in the {where}" in capsys.readouterr().err
    monkeypatch.undo()
    status, r, got = _run(tmp_path, "b", "--resume", str(folder))
    assert status == 0 and r["gradient"] == want["gradient"] and np.array_equal(got, coords)


def test_resume_of_another_problem_is_refused_and_the_save_kept(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ckpt"
    monkeypatch.setattr(checkpoint.Resumable, "clock", PassesAfter(3))
    assert _run(tmp_path, "a", "--checkpoint-dir", str(folder), "--time-limit", "5")[0] == 75
    monkeypatch.undo()
    before = sorted(p.name for p in folder.rglob("*"))
    assert cli.main(["-s", "4", *BASE[2:], "--resume", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("lulesh: error: --resume:") and "size 3 (this run: 4)" in err, err
    assert cli.main([*BASE, "--checkpoint-dir", str(folder)]) == 2
    assert "holds a saved run" in capsys.readouterr().err
    assert sorted(p.name for p in folder.rglob("*")) == before


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--memory", "lots"], "--memory: not a memory size: 'lots'"),
        (["--memory", "2kB"], "--memory: 2 kB is too small for -s 3: the whole-run gradient needs at least"),
        (["--memory", "1GB", "--snapshots", "4"], "--snapshots: give --snapshots or --memory, not both"),
        (["--time-limit", "60"], "--time-limit: needs --checkpoint-dir DIR"),
        (["--time-limit", "-1", "--checkpoint-dir", "x"], "--time-limit: '-1': must be more than 0 seconds"),
        (["--resume", "/nonexistent/dir"], "--resume: /nonexistent/dir is not a directory"),
        (["--resume", "."], "holds no saved run"),
    ],
)
def test_bad_memory_and_resume_flags_are_one_line_and_status_2(capsys, argv, message):
    assert cli.main([*BASE, *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and message in err, err


def test_a_disk_that_fills_under_a_snapshot_is_one_line_and_status_74(tmp_path, monkeypatch, capsys):
    """A snapshot write that fails on one rank (not agreed over ranks): that rank says so in one line,
    naming itself under MPI, and the run ends with status 74."""
    from apps.lulesh import adjoint

    def full(*_, **__):
        raise checkpoint.SaveError(errno.ENOSPC, "pad.checkpoint: writing a snapshot to d failed: No space")

    monkeypatch.setattr(adjoint, "sensitivity", full)
    status, _, _ = _run(tmp_path, "a", "--memory", "1GB")
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 74 and err == ["lulesh: pad.checkpoint: writing a snapshot to d failed: No space"], err
