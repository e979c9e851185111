"""GPU benchmark: primal vs gradient time of three kernel shapes on the device, launch overhead, tape bytes,
and the same gradients in JAX (``jax.grad`` of a ``jit``-ted equivalent) when JAX is installed.

Run on a machine with a CUDA GPU and CuPy: ``python scripts/bench_gpu.py`` (JSON to
``results/bench_gpu.json``). Gradient time is one ``pad.autodiff`` (primal launch, tape, adjoint launch).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_kernels import empty, gather_scatter, pairwise, stencil

import pad
from pad.parallel import gpu


def timed(
    fn: Callable[[], object],
    repeat: int,
    sync: Callable[[], None],
    setup: Callable[[], object] = lambda: None,
) -> float:
    """Best wall time of ``fn`` over ``repeat`` runs, each after ``setup`` (untimed), the device drained
    before and after each."""
    setup()
    fn()
    sync()
    best = float("inf")
    for _ in range(repeat):
        setup()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def pad_case(cp: Any, launch: Callable[..., None], dups: list[Any], consts: tuple, repeat: int) -> dict:
    sync = cp.cuda.Device().synchronize
    seeds = [cp.ones_like(a) for a in dups]

    def primal() -> None:
        launch(*consts, *dups)

    def gradient() -> None:
        pad.autodiff(
            lambda *a: launch(*consts, *a), *[pad.Dup(a, s) for a, s in zip(dups, seeds, strict=True)]
        )

    # Every run starts from the same values and seeds: an autodiff consumes the seeds of the outputs it
    # overwrites (zeroes them), and an adjoint run with zero seeds skips its atomics.
    start_values = [a.copy() for a in dups]

    def reset() -> None:
        for a, v, s in zip(dups, start_values, seeds, strict=True):
            a[...] = v
            s.fill(1.0)

    gpu.stats["peak_tape_bytes"] = 0
    t_primal, t_grad = timed(primal, repeat, sync, reset), timed(gradient, repeat, sync, reset)
    return {
        "primal_s": t_primal,
        "gradient_s": t_grad,
        "ratio": t_grad / t_primal,
        "tape_bytes": gpu.stats["peak_tape_bytes"],
    }


def jax_cases(sizes: dict, repeat: int) -> dict:
    """The same three gradients in JAX (float64, like the pad kernels)."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {"skipped": "jax is not installed"}
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)

    def run(f: Callable[..., Any], *xs: Any) -> dict:
        try:
            return measure(f, *xs)
        except Exception as e:  # e.g. out of device memory: report it, keep the pad numbers
            return {"error": f"{type(e).__name__}: {str(e)[:300]}"}

    def measure(f: Callable[..., Any], *xs: Any) -> dict:
        fwd = jax.jit(f)
        grad = jax.jit(jax.grad(lambda *a: jnp.sum(f(*a)), argnums=tuple(range(len(xs)))))

        def sync_call(g: Callable[..., Any]) -> Callable[[], None]:
            return lambda: jax.block_until_ready(g(*xs))

        t_primal = timed(sync_call(fwd), repeat, lambda: None)
        t_grad = timed(sync_call(grad), repeat, lambda: None)
        return {"primal_s": t_primal, "gradient_s": t_grad, "ratio": t_grad / t_primal}

    n = sizes["pairwise"]
    pos = jnp.asarray(rng.uniform(0, 16 * (n / 4096) ** (1 / 3), (n, 3)))
    q = jnp.asarray(rng.uniform(-1, 1, n))

    def energy(pos: Any, q: Any) -> Any:
        def one(pi: Any, qi: Any) -> Any:
            d = pi[None, :] - pos
            r2 = jnp.sum(d * d, axis=1) + 0.01
            return jnp.sum(jnp.where(r2 < 4.0, qi * q * (1.0 / jnp.sqrt(r2) - 0.5), 0.0))

        # Rematerialized per batch: without jax.checkpoint the gradient keeps all n*n pair terms (OOM).
        return jax.lax.map(jax.checkpoint(lambda a: one(*a)), (pos, q), batch_size=256)

    x = jnp.asarray(rng.uniform(0, 1, sizes["stencil"]))

    def smooth(x: Any) -> Any:
        return jnp.concatenate([x[:1], 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:], x[-1:]])

    m = sizes["gather"]
    idx = jnp.asarray(rng.integers(0, m, m))
    w, v = jnp.asarray(rng.uniform(0, 1, m)), jnp.asarray(rng.uniform(0, 1, m))

    def scatter(w: Any, v: Any) -> Any:
        return jnp.zeros(m).at[idx].add(w * v)

    return {
        "device": str(jax.devices()[0]),
        "pairwise energy": run(energy, pos, q),
        "stencil": run(smooth, x),
        "gather/scatter": run(scatter, w, v),
    }


def launch_overhead_us(cp: Any, reps: int) -> dict:
    """Microseconds per launch of an empty kernel: pad.launch, and numba's own dispatch for reference."""
    from numba import cuda

    e = cp.zeros(1)
    sync = cp.cuda.Device().synchronize
    pad.launch(empty, 1, e)
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        pad.launch(empty, 1, e)
    sync()
    pad_us = (time.perf_counter() - start) / reps * 1e6

    @cuda.jit
    def bare(x: Any) -> None:
        pass

    timings = {"pad_us": pad_us}
    for arg, label in ((e, "numba_cupy_us"), (cuda.as_cuda_array(e), "numba_device_array_us")):
        bare[1, 32](arg)  # compile
        sync()
        start = time.perf_counter()
        for _ in range(reps):
            bare[1, 32](arg)
        sync()
        timings[label] = (time.perf_counter() - start) / reps * 1e6
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", default="results/bench_gpu.json")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="shrink problem sizes for a quick run")
    parser.add_argument("--no-jax", action="store_true")
    args = parser.parse_args()
    import cupy as cp

    sizes = {
        k: max(256, int(v * args.scale))
        for k, v in {"pairwise": 65536, "stencil": 2**26, "gather": 2**24}.items()
    }
    rng = np.random.default_rng(0)
    n = sizes["pairwise"]
    # Same density of neighbours within the cutoff as the CPU benchmark's 4096 atoms in a box of 16.
    pos = cp.asarray(rng.uniform(0, 16 * (n / 4096) ** (1 / 3), (n, 3)))
    q = cp.asarray(rng.uniform(-1, 1, n))
    x = cp.asarray(rng.uniform(0, 1, sizes["stencil"]))
    m = sizes["gather"]
    idx = cp.asarray(rng.integers(0, m, m))
    cases = {
        "pairwise energy": pad_case(
            cp,
            lambda p, qq, e: pad.launch(pairwise, p.shape[0], p, qq, e),
            [pos, q, cp.zeros(n)],
            (),
            args.repeat,
        ),
        "stencil": pad_case(
            cp, lambda a, b: pad.launch(stencil, a.shape[0], a, b), [x, cp.zeros_like(x)], (), args.repeat
        ),
        "gather/scatter": pad_case(
            cp,
            lambda ii, w, a, b: pad.launch(gather_scatter, ii.shape[0], ii, w, a, b),
            [cp.asarray(rng.uniform(0, 1, m)), cp.asarray(rng.uniform(0, 1, m)), cp.zeros(m)],
            (idx,),
            args.repeat,
        ),
    }
    report = {
        "benchmark": "gpu",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": platform.node(),
        "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "sizes": sizes,
        "pad": cases,
        "launch_overhead": launch_overhead_us(cp, 2000),
        "jax": {"skipped": "--no-jax"} if args.no_jax else jax_cases(sizes, args.repeat),
        "targets": {"pairwise energy": 3.0, "stencil": 3.0, "gather/scatter": 5.0, "pad_us": 15.0},
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
