"""Scripts that need four numba threads, whatever this process has: each runs in a Python of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def assert_prints_identical(script: str, **env: str) -> None:
    """Run ``script`` from the repository's root with ``NUMBA_NUM_THREADS=4`` (and ``env``): it must exit
    cleanly within 300 s, having printed ``identical``."""
    settings = dict(os.environ, NUMBA_NUM_THREADS="4", OMP_NUM_THREADS="1", **env)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=ROOT,
        env=settings,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "identical" in done.stdout
