"""The tiny real study that the runner's and the notebook's tests read."""

from __future__ import annotations

import fcntl
import os
import sys

import pytest

from scripts import scale

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory, worker_id) -> str:
    """miniBUDE bm1, 128 poses: threads 1 and 2, ranks 1 and 2 under the venv's mpiexec, primal and gradient.

    Run once per test session: pytest-xdist's workers share the parent of their temporary directories, and
    the first to take the lock runs the study while the others wait for it.
    """
    shared = (
        tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    )
    out = shared / "tiny-study.jsonl"
    with open(shared / "tiny-study.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "tiny-study.done").exists():
            out.unlink(missing_ok=True)  # a study that failed half-way in another worker starts again
            for kind in ("threads", "ranks"):
                argv = [
                    "minibude",
                    "--kind",
                    kind,
                    "--workers",
                    "1",
                    "2",
                    "--sizes",
                    "128",
                    "--iterations",
                    "2",
                ]
                assert (
                    scale.main([*argv, "--mpiexec", MPIEXEC, "--out", str(out), "--", "--deck", "bm1"]) == 0
                )
            (shared / "tiny-study.done").touch()
    return str(out)
