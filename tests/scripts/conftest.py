"""The tiny real study that the runner's and the notebook's tests read."""

from __future__ import annotations

import os
import sys

import pytest

from scripts import scale

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> str:
    """miniBUDE bm1, 128 poses: threads 1 and 2, ranks 1 and 2 under the venv's mpiexec, primal and gradient."""
    out = str(tmp_path_factory.mktemp("study") / "tiny.jsonl")
    for kind in ("threads", "ranks"):
        argv = ["minibude", "--kind", kind, "--workers", "1", "2", "--sizes", "128", "--iterations", "2"]
        assert scale.main([*argv, "--mpiexec", MPIEXEC, "--out", out, "--", "--deck", "bm1"]) == 0
    return out
