"""slurm/scale.sbatch under a real Slurm (skipped where none answers): miniBUDE on 1 and 2 ranks as srun job
steps, and on 1 and 2 threads in the batch step, in a 2-task allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.slurm_support import slurm_answers

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.parametrize("kind", ["ranks", "threads"])
def test_scale_sbatch_runs_a_study_under_slurm(tmp_path, kind):
    why = slurm_answers()
    if why:
        pytest.skip(why)
    env = {
        **os.environ,
        "VENV": os.path.dirname(os.path.dirname(os.path.abspath(sys.executable))),
        "KIND": kind,
        "WORKERS": "1 2",
        "SIZES": "64",
        "ITERATIONS": "2",
        "RESULTS": str(tmp_path / "studies"),
    }
    log = tmp_path / "job.log"
    cmd = ["sbatch", "--wait", "--ntasks=2", f"--output={log}", "slurm/scale.sbatch"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the job did not end within 300 s (squeue shows why; a job asking for too many CPUs pends)"
        )
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    job = proc.stdout.split()[-1]
    results = tmp_path / "studies" / f"minibude-{kind}-strong-{job}.jsonl"
    runs = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(r["workers"], r["mode"]) for r in runs] == [
        (1, "primal"),
        (1, "grad"),
        (2, "primal"),
        (2, "grad"),
    ]
    for r in runs:
        assert r["ok"] and r["result"]["valid"] and r["result"]["problem"]["deck"] == "bm1", r
        assert r["machine"]["slurm_job"] == job
        assert r["command"].startswith("srun --mpi=pmi2 -n ") == (kind == "ranks")
        assert (r["result"]["ranks"], r["result"]["threads"]) == (r["ranks"], r["threads"])
    assert f"4 of 4 points ran; results in {results}" in text, text
    assert text.startswith(f"scale.sbatch: job {job}, partition debug, account "), text
    if kind == "ranks":
        assert all(r["machine"]["launcher_flavour"] == "Slurm" for r in runs)
