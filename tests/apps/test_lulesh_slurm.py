"""slurm/lulesh.sbatch under a real Slurm (skipped where none answers): 8 ranks of -s 5, srun and mpiexec."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.slurm_support import slurm_answers

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.parametrize("use_srun", ["0", "1"])
def test_sbatch_script_runs_under_slurm(tmp_path, use_srun):
    why = slurm_answers()
    if why:
        pytest.skip(why)
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    env = {
        **os.environ,
        "VENV": venv,
        "SIZE": "5",
        "RESULTS": str(tmp_path / "results"),
        "USE_SRUN": use_srun,
    }
    log = tmp_path / "job.log"
    cmd = ["sbatch", "--wait", "--ntasks=8", f"--output={log}", "slurm/lulesh.sbatch"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the job did not end within 300 s (squeue shows why; a job asking for too many CPUs pends)"
        )
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    job = proc.stdout.split()[-1]
    result = json.loads((tmp_path / "results" / f"lulesh-{job}.json").read_text())
    assert (result["ranks"], result["iterations"], result["valid"]) == (8, 231, True), (
        result
    )  # the serial -s 10 run
    assert "Final Origin Energy" in text and "MPI tasks           =  8" in text, text
    started = "ranks started by srun --mpi=pmi2;" if use_srun == "1" else "/mpiexec -n 8;"
    assert text.startswith(f"lulesh.sbatch: job {job}, partition debug, account ") and started in text
    assert "check reference: iteration count and Final Origin Energy equal the C++ original's" in text
