"""slurm/minibude.sbatch under a real Slurm (skipped where none answers): a tiny deck, 2 ranks, srun and mpiexec."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from apps.minibude.deck import write_deck
from tests.apps.minibude_support import reference_energies, small_deck
from tests.slurm_support import slurm_answers

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.parametrize("use_srun", ["0", "1"])
def test_sbatch_script_runs_under_slurm(tmp_path, use_srun):
    why = slurm_answers()
    if why:
        pytest.skip(why)
    deck = small_deck(nposes=16)
    write_deck(dataclasses.replace(deck, ref_energies=reference_energies(deck)), str(tmp_path / "deck"))
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    env = {
        **os.environ,
        "VENV": venv,
        "DECK": str(tmp_path / "deck"),
        "RESULTS": str(tmp_path / "results"),
        "USE_SRUN": use_srun,
    }
    log = tmp_path / "job.log"
    cmd = ["sbatch", "--wait", "--ntasks-per-node=2", f"--output={log}", "slurm/minibude.sbatch"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the job did not end within 240 s (squeue shows why; a job asking for too many CPUs pends)"
        )
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    job = proc.stdout.split()[-1]
    for mode in ("primal", "grad"):
        result = json.loads((tmp_path / "results" / f"minibude-{job}-{mode}.json").read_text())
        assert result["ranks"] == 2 and result["valid"] is True and result["mode"] == mode, result
    assert (tmp_path / "results" / f"minibude-{job}-dprotein.npy").exists()
    assert "valid: yes" in text, text
