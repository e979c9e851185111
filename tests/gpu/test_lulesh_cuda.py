"""LULESH on the CUDA target: the same kernels on device arrays agree with the CPU run.

On numba's CUDA simulator a tiny mesh for a few cycles; on a real GPU also ``-s 30`` to the end, whose
Final Origin Energy must match the CPU's to 1e-10 relative.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from mpi4py import MPI

import pad.mpi
from apps.cli import Memory
from apps.lulesh import hydro as H
from apps.lulesh import mesh as M
from tests.gpu.test_corpus_cuda import SIMULATED, _gpu_available

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _gpu_available(), reason="no GPU and NUMBA_ENABLE_CUDASIM is not 1"),
]


def _run(nx: int, cycles: int, device: str) -> tuple[int, list[np.ndarray]]:
    memory = Memory(device)
    h = H.Hydro(M.build(nx, 1, 0, 11, 1, 1), pad.mpi.Comm(MPI.COMM_SELF), memory)
    s = h.initial_state()
    h.setup(s)
    done = h.advance(s, cycles)
    return done, [memory.get(a) for a in s.arrays()]


def test_device_run_agrees_with_the_cpu():
    nx, cycles = (3, 4) if SIMULATED else (12, 100)
    (n_cpu, cpu), (n_gpu, gpu) = _run(nx, cycles, "cpu"), _run(nx, cycles, "gpu")
    assert n_cpu == n_gpu == cycles
    for a, b in zip(
        cpu, gpu, strict=True
    ):  # GPUs contract a * b + c into fused multiply-adds: rounding differs
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-9 * np.abs(a).max())


@pytest.mark.skipif(SIMULATED, reason="a whole -s 30 run takes hours on the simulator")
def test_s30_to_the_end_matches_the_cpu_final_energy():
    (n_cpu, cpu), (n_gpu, gpu) = _run(30, 10**9, "cpu"), _run(30, 10**9, "gpu")
    assert n_cpu == n_gpu == 932
    e_cpu, e_gpu = cpu[2][0], gpu[2][0]
    assert abs(e_gpu - e_cpu) <= 1e-10 * abs(e_cpu)


def _gradients(nx: int, device: str) -> tuple[dict[str, np.ndarray], Any]:
    from apps.lulesh.adjoint import StepGradient, sensitivity

    memory = Memory(device)
    h = H.Hydro(M.build(nx, 1, 0, 11, 1, 1), pad.mpi.Comm(MPI.COMM_SELF), memory)
    s = h.initial_state()
    h.setup(s)
    h.advance(s, 2)
    h.time_increment(s, first=False)
    step = {name: memory.get(a).copy() for name, a in StepGradient(h)(s).items()}
    return step, sensitivity(h, 4, H.default_parameters(nx, 1), snapshots=2)


def test_device_gradients_agree_with_the_cpu():
    """One cycle's gradient of the whole state, and the whole run's (checkpointed) gradient."""
    nx = 2 if SIMULATED else 12
    (step_cpu, run_cpu), (step_gpu, run_gpu) = _gradients(nx, "cpu"), _gradients(nx, "gpu")
    for name, a in step_cpu.items():
        np.testing.assert_allclose(step_gpu[name], a, rtol=1e-9, atol=1e-9 * np.abs(a).max(), err_msg=name)
    assert run_gpu.cycles == run_cpu.cycles == 4
    for name, value in run_cpu.parameters.items():
        assert abs(run_gpu.parameters[name] - value) <= 1e-9 * abs(value), name
    scale = np.abs(run_cpu.coords).max()
    np.testing.assert_allclose(run_gpu.coords, run_cpu.coords, rtol=1e-9, atol=1e-9 * scale)
