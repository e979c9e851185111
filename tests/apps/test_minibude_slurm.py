"""slurm/minibude.sbatch under a real Slurm (skipped where none answers): a tiny deck on 2 ranks, started by
the venv's mpiexec, by srun, and as a site would (its modules, partition and account from the environment),
and a launcher that does not match mpi4py's MPI refused in one line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from apps.minibude.deck import write_deck
from tests.apps.minibude_support import reference_energies, small_deck
from tests.slurm_support import fake_module_command, slurm_answers

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SITE = {"MODULES": "fakempi/1.0 python/3", "LAUNCHER": "srun --mpi=pmi2"}
SITE |= {"SBATCH_PARTITION": "debug", "SBATCH_ACCOUNT": "pad-test"}


def _submit(tmp_path, settings: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    deck = small_deck(nposes=16)
    write_deck(dataclasses.replace(deck, ref_energies=reference_energies(deck)), str(tmp_path / "deck"))
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    env = {**os.environ, "VENV": venv, "DECK": str(tmp_path / "deck"), "RESULTS": str(tmp_path / "results")}
    env["PATH"] = f"{fake_module_command(tmp_path)}{os.pathsep}{env['PATH']}"
    log = tmp_path / "job.log"
    cmd = ["sbatch", "--wait", "--ntasks-per-node=2", f"--output={log}", "slurm/minibude.sbatch"]
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env | settings, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the job did not end within 240 s (squeue shows why; a job asking for too many CPUs pends)"
        )
    return proc, log.read_text() if log.exists() else ""


LAUNCHERS = {  # settings, and how the job log says the ranks started
    "mpiexec": ({"USE_SRUN": "0"}, "mpiexec -n 2;"),
    "srun": ({"USE_SRUN": "1"}, "ranks started by srun --mpi=pmi2;"),
    "site": (SITE, "ranks started by srun --mpi=pmi2;"),
}


@pytest.mark.parametrize("launcher", list(LAUNCHERS))
def test_sbatch_script_runs_under_slurm(tmp_path, launcher):
    why = slurm_answers()
    if why:
        pytest.skip(why)
    settings, started = LAUNCHERS[launcher]
    proc, text = _submit(tmp_path, settings)
    assert proc.returncode == 0, proc.stdout + proc.stderr + text
    job = proc.stdout.split()[-1]
    for mode in ("primal", "grad"):
        result = json.loads((tmp_path / "results" / f"minibude-{job}-{mode}.json").read_text())
        assert result["ranks"] == 2 and result["valid"] is True and result["mode"] == mode, result
    assert (tmp_path / "results" / f"minibude-{job}-dprotein.npy").exists()
    assert "valid: yes" in text and "check finite_differences: " in text, text
    lines = text.splitlines()
    if launcher == "site":
        assert lines.pop(0) == "module load fakempi/1.0 python/3" and "account pad-test," in lines[0], text
    assert (
        lines[0].startswith(f"minibude.sbatch: job {job}, partition debug, account ") and started in lines[0]
    )
    assert "2 task(s) on 1 node(s)" in lines[0] and "mpi4py's MPI: MPICH Version:" in lines[0]


def test_a_launcher_that_does_not_match_mpi4py_is_one_line(tmp_path):
    """srun without PMI starts 2 processes that the mpich wheel's MPI does not join: refused, not run twice."""
    why = slurm_answers()
    if why:
        pytest.skip(why)
    proc, text = _submit(tmp_path, {"LAUNCHER": "srun --mpi=none"})
    assert proc.returncode != 0, text
    errors = [line for line in text.splitlines() if line.startswith("minibude: error:")]
    assert len(errors) == 1 and "the launcher started 2 processes (SLURM_STEP_NUM_TASKS=2)" in errors[0], text
    assert "miniBUDE on pad" not in text
