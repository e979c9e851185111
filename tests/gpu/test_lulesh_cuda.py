"""LULESH on the CUDA target: the same kernels on device arrays agree with the CPU run.

On numba's CUDA simulator a tiny mesh for a few cycles; on a real GPU also ``-s 30`` to the end, whose
Final Origin Energy must match the CPU's to 1e-10 relative.
"""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import numba
import numpy as np
import pytest
from mpi4py import MPI

import pad.mpi
from apps.cli import CONTEXT_BYTES, Memory
from apps.lulesh import __main__ as lulesh
from apps.lulesh import hydro as H
from apps.lulesh import mesh as M
from apps.lulesh.adjoint import StepGradient
from tests.apps.test_lulesh import _ranks, plant_faults_mid_run, replayed_gradients_equal_launched_ones
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


@pytest.mark.parametrize("nx", [3, 5])
def test_device_resident_loop_gives_the_cpus_cycles_and_energy(nx):
    """To the end of the run (the original's -s 3 and -s 5), the time step and stop test on the device."""
    (n_cpu, cpu), (n_gpu, gpu) = _run(nx, 10**9, "cpu"), _run(nx, 10**9, "gpu")
    assert n_gpu == n_cpu == {3: 23, 5: 72}[nx]
    assert abs(gpu[2][0] - cpu[2][0]) <= 1e-10 * cpu[2][0]


def _device_hydro(nx: int) -> tuple[H.Hydro, H.State]:
    h = H.Hydro(M.build(nx, 1, 0, 11, 1, 1), pad.mpi.Comm(MPI.COMM_SELF), Memory("gpu"))
    s = h.initial_state()
    h.setup(s)
    return h, s


def test_replayed_device_cycles_equal_launched_ones():
    (h, s), (g, t) = _device_hydro(3), _device_hydro(3)
    assert h.advance(s, 6) == 6
    for cycle in range(6):
        g.cycle(cycle, t)
    assert h.replayed_leapfrog.why is None
    for a, b in zip(s.arrays(), t.arrays(), strict=True):
        assert np.array_equal(h.memory.get(a), g.memory.get(b))


def test_replayed_device_gradients_equal_launched_ones():
    """The per-cycle gradient replayed (on a GPU as a CUDA graph): its atomics add in any order."""
    replayed_gradients_equal_launched_ones(*_device_hydro(3), *_device_hydro(3), rtol=1e-12)


@pytest.mark.skipif(not SIMULATED, reason="watches the simulator's device arrays")
def test_a_replayed_gradient_cycle_reads_nothing_back(monkeypatch):
    """A GPU captures a replayed step as one CUDA graph, and a capture refuses a device-to-host copy: the
    per-cycle gradient's replays read nothing back (numba's simulator replays in Python, where a read
    would pass unseen; miniBUDE's gradient once read its tapes' overflow flag there)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    h, s = _device_hydro(3)
    h.advance(s, 2)
    h.time_increment(s, first=False)
    step = StepGradient(h)
    step(s)  # recorded
    reads: list[tuple[int, ...]] = []
    real = FakeCUDAArray.copy_to_host
    monkeypatch.setattr(
        FakeCUDAArray, "copy_to_host", lambda a, *args, **kw: reads.append(a.shape) or real(a, *args, **kw)
    )
    step(s)
    step(s)
    assert step.replayed.why is None
    assert not reads, reads


def test_a_fault_found_late_on_the_device_names_its_cycle_and_element():
    fault = plant_faults_mid_run(*_device_hydro(4))
    assert (fault.code, fault.cycle, fault.element) == (H.VOLUME_ERROR, 4, 7), fault


EIGHT_RANKS_S2 = 8 * (CONTEXT_BYTES + H.device_bytes(2, "primal"))
"""What 8 ranks of ``-s 2`` sharing one GPU need, by the apps' estimate."""


@pytest.mark.skipif(not SIMULATED, reason="the 8-rank run shares one simulated device")
def test_eight_device_ranks_reproduce_the_serial_run(tmp_path, monkeypatch):
    """8 ranks on one GPU whose memory holds them exactly (``PAD_GPU_MEMORY``): the serial run of -s 4."""
    monkeypatch.setenv("PAD_GPU_MEMORY", str(EIGHT_RANKS_S2))
    out = tmp_path / "r8.json"
    done = _ranks(8, "-m", "apps.lulesh", "-s", "2", "-i", "6", "--device", "gpu", "-q", "--json", str(out))
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    (n_cpu, cpu) = _run(4, 6, "cpu")
    assert (r["ranks"], r["iterations"]) == (8, n_cpu)
    assert abs(r["final_origin_energy"] - cpu[2][0]) <= 1e-10 * cpu[2][0]
    assert r["gpu_memory"] == {"estimate_bytes": H.device_bytes(2, "primal"), "held_bytes": None}
    # the halo exchanges' and the time step's device buffers, staged or handed to MPI as they are
    mpi = r["mpi"]["primal"]["plain"]
    assert mpi["calls"] > 0 and mpi["seconds"] > 0
    assert (mpi["staged_bytes"] > 0) == (r["mpi"]["device_buffers"] == "staged")


@pytest.mark.skipif(not SIMULATED, reason="fakes the simulated device's memory size")
def test_more_ranks_than_the_gpu_memory_holds_stop_every_rank_with_status_2(tmp_path, monkeypatch):
    """One byte short: every rank stops before allocating (no rank waits in a collective), status 2, and
    rank 0 prints the one error naming the rank that does not fit, the GPU and the bytes."""
    monkeypatch.setenv("PAD_GPU_MEMORY", str(EIGHT_RANKS_S2 - 1))
    out = tmp_path / "r8.json"
    done = _ranks(8, "-m", "apps.lulesh", "-s", "2", "--device", "gpu", "--json", str(out), timeout=120)
    assert done.returncode == 2 and not out.exists() and "Run completed" not in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "lulesh: error: --device gpu: rank 7 does not fit on the simulated GPU: rank(s) 0, 1, 2, 3, 4, 5, 6, 7 "
        "share it and need 4.3 GB in all, over its 4.3 GB; rank 7 needs 536.9 MB (LULESH -s 2 --mode primal: "
    ), done.stderr


def _device_peak(monkeypatch, run: Any) -> int:
    """The most bytes of simulated device arrays alive at once while ``run()`` runs, Python's garbage collector
    off (what the estimate assumes: the garbage of a cycle stays until the next one)."""
    from pad.kernel.cuda_runtime import cuda

    live, peak = [0], [0]

    def release(nbytes: int) -> None:
        live[0] -= nbytes

    def tracked(allocate: Any) -> Any:
        def allocation(*args: Any, **kwargs: Any) -> Any:
            a = allocate(*args, **kwargs)
            live[0] += a.nbytes
            peak[0] = max(peak[0], live[0])
            weakref.finalize(a, release, a.nbytes)
            return a

        return allocation

    for name in ("to_device", "device_array", "device_array_like"):
        monkeypatch.setattr(cuda, name, tracked(getattr(cuda, name)))
    gc.disable()
    try:
        run()
    finally:
        gc.enable()
    return peak[0]


@pytest.mark.skipif(not SIMULATED, reason="counts the simulator's device arrays")
@pytest.mark.parametrize("mode", ["primal", "grad"])
def test_the_memory_estimate_is_the_peak_of_a_simulated_run(monkeypatch, mode):
    """``device_bytes`` against the device arrays alive at the peak of a one-rank run of -s 3, to 1 %, less
    the halos' allowance (one rank exchanges nothing). Adding arrays to the step means updating the table."""

    def run() -> None:
        h = H.Hydro(M.build(3, 1, 0, 11, 1, 1), pad.mpi.Comm(MPI.COMM_SELF), Memory("gpu"))
        s = h.initial_state()
        h.setup(s)
        h.advance(s, 2, leapfrog=StepGradient(h) if mode == "grad" else None)

    peak = _device_peak(monkeypatch, run)
    estimate = H.device_bytes(3, mode) - H.HALO_BYTES * 6 * 4**2
    assert abs(estimate - peak) <= 0.01 * peak, (estimate, peak)


def _gradients(nx: int, device: str) -> tuple[dict[str, np.ndarray], Any, Any]:
    from apps.lulesh.adjoint import LeastSquares, StepGradient, sensitivity

    memory = Memory(device)
    h = H.Hydro(M.build(nx, 1, 0, 11, 1, 1), pad.mpi.Comm(MPI.COMM_SELF), memory)
    s = h.initial_state()
    h.setup(s)
    h.advance(s, 2)
    h.time_increment(s, first=False)
    step = {name: memory.get(a).copy() for name, a in StepGradient(h)(s).items()}
    parameters = H.default_parameters(nx, 1)
    misfit = LeastSquares(h, "e", np.zeros(h.mesh.nelem))  # J = sum e^2 / 2 at the end
    run = sensitivity(h, 4, parameters, snapshots=2)
    return step, run, sensitivity(h, 4, parameters, snapshots=2, objective=misfit)


def test_device_gradients_agree_with_the_cpu():
    """One cycle's gradient of the whole state, and the whole run's (checkpointed) gradients of the Final
    Origin Energy and of a least-squares misfit."""
    nx = 2 if SIMULATED else 12
    (step_cpu, run_cpu, fit_cpu), (step_gpu, run_gpu, fit_gpu) = _gradients(nx, "cpu"), _gradients(nx, "gpu")
    for name, a in step_cpu.items():
        np.testing.assert_allclose(step_gpu[name], a, rtol=1e-9, atol=1e-9 * np.abs(a).max(), err_msg=name)
    assert run_gpu.cycles == run_cpu.cycles == 4
    for name, value in run_cpu.parameters.items():
        assert abs(run_gpu.parameters[name] - value) <= 1e-9 * abs(value), name
    scale = np.abs(run_cpu.coords).max()
    np.testing.assert_allclose(run_gpu.coords, run_cpu.coords, rtol=1e-9, atol=1e-9 * scale)
    assert abs(fit_gpu.value - fit_cpu.value) <= 1e-12 * fit_cpu.value
    for name, value in fit_cpu.parameters.items():
        assert abs(fit_gpu.parameters[name] - value) <= 1e-9 * abs(value), name
    assert fit_cpu.parameters["einit"] != 0.0


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one thread is all numba has")  # type: ignore[attr-defined]
def test_a_gpu_rank_runs_its_host_work_on_the_threads_asked(tmp_path):
    """``--threads`` sets a GPU rank's host threads too (the tape's fills and copies run there): 8 ranks
    each on every core of the node once ran 256 threads on 32 cores."""
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(2)
        argv = ["-s2", "-i1", "--device=gpu", "--threads=1", "-q", f"--json={tmp_path / 'r.json'}"]
        assert lulesh.main(argv) == 0
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)
