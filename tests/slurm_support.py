"""What the tests of the Slurm scripts share: whether a Slurm answers here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


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


def fake_module_command(folder: Path) -> Path:
    """A folder holding a ``module`` command that prints its arguments, as a site's ``module load`` would
    load them (for the batch scripts' ``MODULES``)."""
    bin_dir = folder / "fake-modules"
    bin_dir.mkdir(exist_ok=True)
    module = bin_dir / "module"
    module.write_text('#!/bin/sh\necho "module $*"\n')
    module.chmod(0o755)
    return bin_dir
