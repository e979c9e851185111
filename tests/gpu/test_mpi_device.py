"""Device buffers between ranks on numba's simulator: staged through host memory, or handed to MPI as they
are where it is CUDA-aware (forced with PAD_MPI_CUDA_AWARE=1: the simulator's arrays are host memory, which
any MPI can read), with the same results, and the choice visible in ``pad.mpi.stats()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.gpu.test_corpus_cuda import SIMULATED

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not SIMULATED, reason="numba's simulated device arrays")]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside the interpreter")
@pytest.mark.parametrize(("aware", "how"), [("0", "staged"), ("1", "direct")])
def test_a_ring_of_device_buffers_and_its_adjoint(aware, how):
    env = dict(
        os.environ, PAD_MPI_CUDA_AWARE=aware, PYTHONPATH=REPO, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"
    )
    script = os.path.join(REPO, "tests", "gpu", "mpi_device_ring.py")
    done = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr  # the script asserts the values and the gradient
    out = json.loads(done.stdout)
    assert out["transport"] == {"device_buffers": how, "why": f"PAD_MPI_CUDA_AWARE={aware}"}
    for st in out["stats"]:
        # 4 float64 each way: staged, every device buffer is copied to the host and back
        staged = {"plain": 128, "forward": 128, "reverse": 128} if how == "staged" else {}
        for phase in ("plain", "forward", "reverse"):
            assert st[phase]["staged_bytes"] == staged.get(phase, 0), (phase, st)
            assert st[phase]["seconds"] > 0.0
        assert st["forward"]["bytes"] == st["reverse"]["bytes"] == 32
