"""slurm/lulesh-sensitivity.sbatch under a real Slurm (skipped where none answers): Slurm's SIGTERM makes the
run save itself, the job requeues itself, and the requeued job resumes to the gradient of an uninterrupted
run, bit for bit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from apps.lulesh import __main__ as cli
from tests.slurm_support import slurm_answers

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIZE = "8"


def _state(job: str) -> tuple[str, int]:
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    state = re.search(r"JobState=(\w+)", shown)
    restarts = re.search(r"Restarts=(\d+)", shown)
    return (state.group(1) if state else "GONE"), int(restarts.group(1)) if restarts else 0


@pytest.mark.parametrize("use_srun", ["0", "1"])
def test_the_job_saves_on_sigterm_requeues_and_resumes_to_the_same_gradient(tmp_path, use_srun):
    why = slurm_answers()
    if why:
        pytest.skip(why)
    reference = tmp_path / "reference.json"
    assert (
        cli.main(["-s", SIZE, "--mode", "sensitivity", "--threads", "1", "-q", "--json", str(reference)]) == 0
    )
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    results, log = tmp_path / "results", tmp_path / "job.log"
    env = {**os.environ, "VENV": venv, "SIZE": SIZE, "RESULTS": str(results), "USE_SRUN": use_srun}
    cmd = [
        "sbatch",
        "--parsable",
        "--cpus-per-task=1",
        "--time=10",
        f"--output={log}",
        "slurm/lulesh-sensitivity.sbatch",
    ]
    job = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout.strip()
    try:
        deadline = time.monotonic() + 240
        while "whole-run gradient started" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, f"job {job} did not start: {_state(job)}"
            time.sleep(0.2)
        time.sleep(0.5)  # into the gradient's loop
        subprocess.run(["scancel", "--signal=TERM", "--batch", job], check=True)
        while _state(job)[0] not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GONE"):
            assert time.monotonic() < deadline + 240, f"job {job} did not end: {_state(job)}"
            time.sleep(1.0)
    finally:
        subprocess.run(["scancel", job], capture_output=True)
    text = log.read_text()
    state, restarts = _state(job)
    assert state == "COMPLETED" and restarts == 1, (state, restarts, text)
    assert "stopped by SIGTERM in the " in text and f"requeueing job {job}" in text and "resumes" in text, (
        text
    )
    got = json.loads((results / f"lulesh-sensitivity-{job}.json").read_text())
    want = json.loads(reference.read_text())
    assert got["valid"] and got["sessions"] == 2 and got["gradient"] == want["gradient"]
    assert not (results / f"lulesh-sensitivity-{job}.save").exists()
