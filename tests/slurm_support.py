"""What the tests of the Slurm scripts share: whether a Slurm answers here."""

from __future__ import annotations

import shutil
import subprocess


def slurm_answers() -> str | None:
    """Why a batch-script test cannot run, or None when sbatch exists and a partition has an idle node."""
    if shutil.which("sbatch") is None:
        return "no sbatch on PATH (start one with ../shared/tools/slurm-local.sh)"
    try:
        proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if proc.returncode != 0 or "idle" not in proc.stdout.split():
        return f"no idle Slurm node (sinfo: {(proc.stdout + proc.stderr).strip()[:200]})"
    return None
