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
    out = _ranks("mpi_device_ring.py", 2, aware)  # the script asserts the values and the gradient
    assert out["transport"] == {"device_buffers": how, "why": f"PAD_MPI_CUDA_AWARE={aware}"}
    for st in out["stats"]:
        # 4 float64 each way: staged, both device buffers are copied to the host and back, 32 bytes a copy
        staged = {"plain": 128, "forward": 128, "reverse": 128} if how == "staged" else {}
        for phase in ("plain", "forward", "reverse"):
            assert st[phase]["staged_bytes"] == staged.get(phase, 0), (phase, st)
            assert st[phase]["staged_copies"] == staged.get(phase, 0) // 32, (phase, st)
            assert st[phase]["seconds"] > 0.0
        assert st["forward"]["bytes"] == st["reverse"]["bytes"] == 32


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside the interpreter")
@pytest.mark.parametrize(("aware", "how"), [("0", "staged"), ("1", "direct")])
def test_a_halo_exchange_of_a_device_array_crosses_to_the_host_once_each_way(aware, how):
    """4 ranks on a 2 x 2 grid (3 neighbours each): the device exchanges give the host exchange's values and
    pass check_grad (mpi_device_halo.py asserts both). Staged, an exchange copies one buffer to the host and
    one back, whatever the number of neighbours, in the primal, the forward sweep and the reverse pass alike;
    in fwddiff the tangents travel with the values (staged in both modes: one more copy each way)."""
    out = _ranks("mpi_device_halo.py", 4, aware)
    assert out["transport"]["device_buffers"] == how
    for rank in out["ranks"]:
        messages, nbytes = rank["messages"], rank["bytes"]
        copies = {"plain": 2, "forward": 2, "reverse": 2} if how == "staged" else {}
        for run, phase in (("plain", "plain"), ("autodiff", "forward"), ("autodiff", "reverse")):
            st = rank[run][phase]
            assert st["calls"] == messages == 6, (run, phase, st)
            assert st["staged_copies"] == copies.get(phase, 0), (run, phase, st)
            assert st["staged_bytes"] == nbytes * copies.get(phase, 0), (run, phase, st)
        assert rank["autodiff"]["forward"]["bytes"] == rank["autodiff"]["reverse"]["bytes"] == nbytes
        tangent = rank["fwddiff"]["tangent"]
        assert tangent["calls"] == messages and tangent["bytes"] == nbytes, tangent
        assert (tangent["staged_copies"], tangent["staged_bytes"]) == (4, 4 * nbytes), tangent


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside the interpreter")
@pytest.mark.parametrize(("aware", "how"), [("0", "staged"), ("1", "direct")])
def test_replayed_multi_rank_steps_of_device_arrays_equal_live_ones(aware, how):
    """3 ranks: a step of halo exchanges, messages and Allreduces of device arrays, and a step of its
    gradient, each replayed by pad.graph (recorded once) equal the live calls, arrays, messages and
    counts (mpi_device_graph.py compares them), staged through host memory or handed to MPI. A checkpointed
    loop of such steps replays them on every rank, to the gradient without replays."""
    out = _ranks("mpi_device_graph.py", 3, aware)
    assert out["transport"]["device_buffers"] == how
    for rank in out["ranks"]:
        for step in ("plain", "gradient"):
            assert rank[step]["why"] is None and rank[step]["same"], (step, rank)
        # inside autodiff the Allreduces stage their device buffers either way, the messages only when staged
        assert (rank["plain"]["staged"] > 0) == (how == "staged") and rank["gradient"]["staged"] > 0, rank
        assert rank["calls"] == [2, 6], rank  # recorded once each; the live steps ran every call
        assert rank["loop"]["replayed"] > 0 and rank["loop"]["same"], rank["loop"]


def _ranks(script: str, ranks: int, aware: str) -> dict:
    """The JSON that ``tests/gpu/SCRIPT`` prints run on ``ranks`` ranks (``aware``: PAD_MPI_CUDA_AWARE),
    once it has exited with status 0."""
    env = dict(
        os.environ, PAD_MPI_CUDA_AWARE=aware, PYTHONPATH=REPO, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"
    )
    path = os.path.join(REPO, "tests", "gpu", script)
    done = subprocess.run(
        [MPIEXEC, "-n", str(ranks), sys.executable, path],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout)
    return result
