"""The shell scripts (batch scripts, studies.sh, test.sh) on the bash versions clusters have."""

from __future__ import annotations

import glob
import os
import re

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPTS = sorted(
    glob.glob(f"{REPO}/slurm/*.sbatch") + glob.glob(f"{REPO}/slurm/*.sh") + glob.glob(f"{REPO}/scripts/*.sh")
)


def test_arrays_that_may_be_empty_are_expanded_safely_on_old_bash():
    """Under ``set -u``, bash before 4.4 (RHEL 7's 4.2, say) stops at ``"${a[@]}"`` of an empty array
    ("unbound variable"). An array that ``read -a`` fills, or that starts empty, may be empty: it must be
    expanded as ``${a[@]+"${a[@]}"}``."""
    assert len(SCRIPTS) >= 6
    for path in SCRIPTS:
        with open(path) as fh:
            text = fh.read()
        maybe_empty = set(re.findall(r"read -r?a (\w+)", text)) | set(re.findall(r"(\w+)=\(\)", text))
        for name in maybe_empty:
            bare = re.findall(rf'(?<!\+)"\$\{{{name}\[@\]\}}"', text)
            assert not bare, (
                f'{os.path.relpath(path, REPO)}: "${{{name}[@]}}" may be empty: write ${{{name}[@]+"${{{name}[@]}}"}}'
            )
