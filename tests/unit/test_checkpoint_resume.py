"""pad.checkpoint.Resumable: a loop stopped by its time limit or SIGTERM, in the forward sweep or the reverse
pass, resumes to the same gradient bit for bit; saves from other runs, versions or rank counts, or damaged
ones, are refused and left as they were; a save that fails (a full disk) leaves the previous one."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import subprocess

import numpy as np
import pytest

import pad
from pad import checkpoint
from pad.checkpoint import resume as saves
from tests.unit.kops import three_field_step as step

N = 16


def grads(nsteps=30, resumable=None, while_=True, step=step, **opts):
    """(u, v, w, du, dv, dw) after ``autodiff`` of ``nsteps`` steps, and the stats."""
    u, v, w = np.linspace(0.1, 1.0, N), np.linspace(-0.5, 0.5, N), np.zeros(N)
    du, dv, dw = np.zeros(N), np.linspace(1.0, 2.0, N), np.linspace(-1.0, 1.0, N)
    stats = checkpoint.Stats()

    def f(u, v, w):
        if while_:
            count = [0]

            def more(u, v, w):
                return count[0] < nsteps

            def counted(t, u, v, w):
                count[0] = t + 1
                step(t, u, v, w)

            checkpoint.while_loop(more, counted, u, v, w, stats=stats, resumable=resumable, **opts)
        else:
            checkpoint.loop(step, nsteps, u, v, w, stats=stats, resumable=resumable, **opts)

    pad.autodiff(f, pad.Dup(u, du), pad.Dup(v, dv), pad.Dup(w, dw))
    return (u, v, w, du, dv, dw), stats


def same_bits(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


class Clock:
    """A clock for ``Resumable.clock`` that passes the time limit once asked ``after`` times."""

    def __init__(self, after):
        self.calls, self.after = 0, after

    def __call__(self):
        self.calls += 1
        return 1e9 if self.calls > self.after else 0.0


def finish(directory, stops, **opts):
    """Resume the run saved in ``directory`` until it completes (stopping again at each of ``stops``: a
    number of time-limit checks); returns its result and how many sessions it took."""
    for after in stops:
        with checkpoint.Resumable(directory, resume=True, time_limit=1.0) as r:
            r.clock = Clock(after)
            with pytest.raises(checkpoint.Stopped):
                grads(resumable=r, **opts)
    with checkpoint.Resumable(directory, resume=True) as r:
        got, stats = grads(resumable=r, **opts)
    assert not os.listdir(directory)  # a finished run leaves nothing behind
    return got, stats


OPTIONS = {
    "keep-all": {},
    "memory": {"memory": 2_000},
    "snapshots": {"snapshots": 3},
    "loop-memory": {"memory": 2_000, "while_": False},
    "loop-snapshots": {"snapshots": 3, "while_": False},
}


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("after", [3, 20, 40])  # in the forward sweep (30 steps) twice, in the reverse pass
def test_a_time_limit_resumes_to_the_same_gradient_bits(tmp_path, name, after):
    opts = OPTIONS[name]
    want, _ = grads(**opts)
    with checkpoint.Resumable(tmp_path, time_limit=1.0) as r:
        r.clock = Clock(after)
        with pytest.raises(checkpoint.Stopped) as stop:
            grads(resumable=r, **opts)
    assert stop.value.exit_status == 75 and stop.value.reason == "the time limit"
    where = json.loads((tmp_path / "pad-run.json").read_text())["where"]
    assert ("forward" in where) == (after < 30), where
    got, stats = finish(tmp_path, [], **opts)
    assert same_bits(got, want) and stats.sessions == 2


@pytest.mark.parametrize("after", [3, 20, 40])
def test_a_replayed_loop_of_whole_snapshots_resumes_to_the_same_gradient_bits(tmp_path, monkeypatch, after):
    """Where steps' records are not kept (a GPU's replayed loop; forced here on the CPU), every step holds a
    whole snapshot taken as one batch: stopped in either pass, the run saves them and resumes to the bits
    of a run that kept every step's records."""
    want, _ = grads(while_=False)
    monkeypatch.setattr(checkpoint.Loop, "keeps_records", lambda self: False)
    opts = {"memory": 10**6, "while_": False, "replay": lambda t: t % 3}
    with checkpoint.Resumable(tmp_path, time_limit=1.0) as r:
        r.clock = Clock(after)
        with pytest.raises(checkpoint.Stopped):
            grads(resumable=r, **opts)
    got, stats = finish(tmp_path, [], **opts)
    assert same_bits(got, want) and stats.sessions == 2 and stats.replayed > 0


@pytest.mark.parametrize("name", ["keep-all", "memory", "loop-snapshots"])
def test_several_stops_in_both_passes(tmp_path, name):
    opts = OPTIONS[name]
    want, _ = grads(**opts)
    with checkpoint.Resumable(tmp_path, time_limit=1.0) as r:
        r.clock = Clock(5)
        with pytest.raises(checkpoint.Stopped):
            grads(resumable=r, **opts)
    got, stats = finish(tmp_path, [10, 20, 4], **opts)
    assert same_bits(got, want) and stats.sessions == 5


@pytest.mark.parametrize("at", [7, 45])  # the 7th step call: forward; the 45th: a recomputation
@pytest.mark.parametrize("name", ["memory", "snapshots"])
def test_sigterm_resumes_to_the_same_gradient_bits(tmp_path, name, at):
    opts = OPTIONS[name]
    want, _ = grads(**opts)
    calls = [0]

    def signalled(t, u, v, w):
        calls[0] += 1
        if calls[0] == at:
            os.kill(os.getpid(), signal.SIGTERM)
        step(t, u, v, w)

    before = signal.getsignal(signal.SIGTERM)
    with checkpoint.Resumable(tmp_path) as r, pytest.raises(checkpoint.Stopped) as stop:
        grads(resumable=r, step=signalled, **opts)
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
    assert stop.value.reason == "SIGTERM"
    got, _ = finish(tmp_path, [], **opts)
    assert same_bits(got, want)


def test_a_run_that_is_never_stopped_leaves_nothing(tmp_path):
    want, _ = grads(memory=2_000)
    with checkpoint.Resumable(tmp_path, time_limit=1e6) as r:
        got, _ = grads(resumable=r, memory=2_000)
    assert same_bits(got, want) and not os.listdir(tmp_path)


def _stopped(directory, identity=None):
    with checkpoint.Resumable(directory, time_limit=1.0, identity=identity) as r:
        r.clock = Clock(6)
        with pytest.raises(checkpoint.Stopped):
            grads(resumable=r, memory=2_000)


def _digest(directory):
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, directory)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def _edit_run(directory, **changes):
    path = directory / "pad-run.json"
    run = json.loads(path.read_text())
    run.update(changes)
    path.write_text(json.dumps(run))


@pytest.mark.parametrize(
    "spoil,message",
    [
        (lambda d: None, "holds another run: size 4 (this run: 5)"),
        (lambda d: _edit_run(d, pad="0.0.1"), "pad version 0.0.1"),
        (lambda d: _edit_run(d, ranks=4), "4 ranks (this run has 1)"),
        (lambda d: _edit_run(d, format=99), "save format 99"),
        (lambda d: (d / "pad-run.json").write_text("{"), "is damaged: pad-run.json cannot be read"),
        (lambda d: (d / "pad-run.json").unlink(), "holds no saved run"),
        (lambda d: _largest(d).write_bytes(b"\x93NUMPY"), "is damaged: rank 0's save 1: "),
        (lambda d: _flip(_largest(d)), ".npy does not match its checksum"),
    ],
)
def test_a_save_of_another_run_or_a_damaged_one_is_refused_and_kept(tmp_path, spoil, message):
    _stopped(tmp_path, identity={"size": 4})
    spoil(tmp_path)
    before = _digest(tmp_path)
    with pytest.raises(checkpoint.ResumeError, match=re.escape(message)):
        checkpoint.Resumable(tmp_path, resume=True, identity={"size": 5 if "size" in message else 4})
    assert _digest(tmp_path) == before


def _largest(directory):
    return max((directory / "rank-0" / "save-1").glob("*.npy"), key=lambda p: p.stat().st_size)


def _flip(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_fresh_run_does_not_overwrite_a_save(tmp_path):
    _stopped(tmp_path)
    before = _digest(tmp_path)
    with pytest.raises(checkpoint.ResumeError, match=r"holds a saved run .* resume it, or use another"):
        checkpoint.Resumable(tmp_path)
    assert _digest(tmp_path) == before


def test_a_save_of_another_loop_is_refused(tmp_path):
    _stopped(tmp_path)
    with (
        checkpoint.Resumable(tmp_path, resume=True) as r,
        pytest.raises(checkpoint.ResumeError, match="args"),
    ):
        u = np.zeros(N + 1)
        pad.autodiff(
            lambda u: checkpoint.while_loop(lambda u: False, lambda t, u: None, u, resumable=r),
            pad.Dup(u, np.zeros(N + 1)),
        )


def test_a_failed_save_leaves_the_previous_one(tmp_path, monkeypatch):
    """The disk fills while the second save is written: a clear error, and the first save still resumes."""
    want, _ = grads(memory=2_000)
    _stopped(tmp_path)
    written = [0]
    real = np.save

    def filling(path, a, *args, **kwargs):
        written[0] += 1
        if written[0] == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, a, *args, **kwargs)

    monkeypatch.setattr(saves.np, "save", filling)
    with checkpoint.Resumable(tmp_path, resume=True, time_limit=1.0) as r:
        r.clock = Clock(8)
        with pytest.raises(checkpoint.SaveError) as failed:
            grads(resumable=r, memory=2_000)
    assert "No space left on device" in str(failed.value) and "still holds save 1" in str(failed.value)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path / "rank-0")) == ["save-1"]
    got, stats = finish(tmp_path, [])
    assert same_bits(got, want) and stats.sessions == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small file system needs root")
def test_a_full_disk_is_a_clear_error_and_leaves_the_save_consistent(tmp_path):
    """A real file system too small for the save."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with checkpoint.Resumable(disk, time_limit=1.0) as r:
            r.clock = Clock(6)
            with pytest.raises(checkpoint.SaveError, match=r"No space left on device.*still holds nothing"):
                grads(resumable=r, memory=2_000)
        assert sorted(os.listdir(disk)) in ([], ["rank-0"]) and not os.listdir(disk / "rank-0")
    finally:
        subprocess.run(["umount", str(disk)])
