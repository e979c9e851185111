"""``pad.precompile``: launches noted and not run, compiled ahead in parallel processes into numba's cache, and
loaded from it, not compiled, by a later process's first launches."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

import pad

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pad.kernel
def k_axpy(i, a, x, y):
    y[i] += a * x[i]


@pad.kernel
def k_square(i, x, y):
    y[i] = x[i] * x[i]


def program(x, y):
    pad.launch(k_axpy, x.shape[0], 2.0, x, y)
    pad.launch(k_square, x.shape[0], x, y)


def gradient(x, y):
    pad.autodiff(program, pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.ones_like(y)))


LATER_PROCESS = """
import numpy as np
from numba.core import event
from tests.unit.test_precompile import gradient, program
x, y = np.arange(4.0), np.ones(4)
with event.install_recorder("numba:compile") as recorder:
    program(x, y)
    gradient(x, y)
compiled = sorted({e.data["dispatcher"].py_func.__name__ for e in recorder.buffer if e.is_start})
print("compiled:", [name for name in compiled if name.startswith("k_")], "y:", y.tolist())
"""


def test_launches_are_noted_not_run_then_compiled_for_later_processes(tmp_path, monkeypatch):
    monkeypatch.setenv("PAD_CACHE_DIR", str(tmp_path))
    x, y = np.arange(4.0), np.ones(4)
    done = pad.precompile(lambda: (program(x, y), gradient(x, y)), workers=1)
    assert y.tolist() == [1.0, 1.0, 1.0, 1.0]  # nothing ran
    assert done["launchers"] == done["compiled"] == 4  # primal and adjoint of both kernels
    assert pad.precompile(program, x, y)["compiled"] == 0  # compiled already: nothing to do
    assert not [*tmp_path.glob("claims-*"), *tmp_path.glob("*.ahead")]  # the workers' claims and tasks: gone

    env = {**os.environ, "PYTHONPATH": REPO, "PAD_CACHE_DIR": str(tmp_path)}
    later = subprocess.run(
        [sys.executable, "-c", LATER_PROCESS], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert later.returncode == 0, later.stderr
    assert later.stdout.strip() == "compiled: [] y: [0.0, 1.0, 4.0, 9.0]", later.stdout  # loaded, and right
