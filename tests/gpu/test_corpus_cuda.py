"""The kernel corpus on the CUDA target: gradients checked on the device, and CPU and GPU agree.

Runs on a real GPU with CuPy arrays, or on numba's CUDA simulator with numba device arrays when
``NUMBA_ENABLE_CUDASIM=1`` (``scripts/test.sh`` runs it that way); skips otherwise.
"""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import pad
from pad import arrays
from tests.unit.corpus import CASES

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _gpu_available() -> bool:
    if SIMULATED:
        return True
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _gpu_available(), reason="no GPU and NUMBA_ENABLE_CUDASIM is not 1"),
]

TOLERANCES = {np.float64: (1e-6, 1e-9), np.float32: (3e-3, 1e-4)}


def device(a: np.ndarray):
    if SIMULATED:
        from numba import cuda

        return cuda.to_device(a)
    import cupy

    return cupy.asarray(a)


def on_device(args: tuple) -> tuple:
    out = []
    for a in args:
        if isinstance(a, pad.Dup) and isinstance(a.value, np.ndarray):
            out.append(pad.Dup(device(a.value), device(a.shadow)))
        elif isinstance(a, np.ndarray):
            out.append(device(a))
        else:
            out.append(a)
    return tuple(out)


def values(args: tuple) -> list:
    return [a.value if isinstance(a, (pad.Dup, pad.Const, pad.Active)) else a for a in args]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_on_device(case):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    args = on_device(case.make_args(rng, case.dtype))
    rtol, atol = TOLERANCES[case.dtype]
    pad.check_grad(case.program, *args, rtol=rtol, atol=atol, directions=1)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cpu_and_gpu_agree(case):
    """Same inputs and seeds: the primal results and the gradients agree; repeated gradients agree, and so
    do gradients whose last launch is fused (``autodiff(..., fuse=True)``)."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()) + 1)
    host = case.make_args(rng, case.dtype)
    seeds = {
        k: rng.uniform(-1, 1, a.value.shape).astype(a.value.dtype)
        for k, a in enumerate(host)
        if isinstance(a, pad.Dup) and isinstance(a.value, np.ndarray)
    }
    rtol = 1e-9 if case.dtype == np.float64 else 1e-4

    def gradient(args: tuple, fuse: bool = False) -> tuple[list, tuple]:
        initial = [arrays.to_host(v).copy() if hasattr(v, "shape") else v for v in values(args)]
        annotated = [
            pad.Dup(a.value, arrays.like(a.value, seeds[k])) if k in seeds else a for k, a in enumerate(args)
        ]
        active = pad.autodiff(case.program, *annotated, fuse=fuse)
        results = [arrays.to_host(v).copy() for v in values(args) if hasattr(v, "shape")]
        shadows = [arrays.to_host(annotated[k].shadow).copy() for k in sorted(seeds)]
        for v, start in zip(values(args), initial, strict=True):
            if hasattr(v, "shape"):
                arrays.assign(v, start)
        return results + shadows, active

    cpu, cpu_active = gradient(host)
    dev_args = on_device(host)
    gpu1, gpu1_active = gradient(dev_args)
    gpu2, gpu2_active = gradient(dev_args)
    fused, fused_active = gradient(dev_args, fuse=True)
    scale = max(1.0, *(float(np.abs(a).max(initial=0)) for a in cpu))
    for a, b, c, d in zip(cpu, gpu1, gpu2, fused, strict=True):
        np.testing.assert_allclose(b, a, rtol=rtol * 10, atol=rtol * scale)
        np.testing.assert_allclose(c, b, rtol=rtol, atol=rtol * scale)
        np.testing.assert_allclose(d, b, rtol=rtol * 10, atol=rtol * scale)
    np.testing.assert_allclose(gpu1_active, cpu_active, rtol=rtol * 10, atol=rtol * scale)
    np.testing.assert_allclose(gpu2_active, gpu1_active, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(fused_active, gpu1_active, rtol=rtol * 10, atol=rtol * scale)
