"""Tensor-operation study: 15 tensor ops and a 3-layer MLP, forward and pad-derived backward, on 1 CPU thread,
all CPU threads and a GPU.

Each op is one ``@pad.kernel`` launched over its output elements (one output element per index; sum and max
along an axis: one output row per index with an inner loop). The forward time is one ``pad.launch``; the
backward time is one ``pad.autodiff`` of a function that makes that launch (it runs the forward launch and
the adjoint launch pad derived), with the output's shadow seeded with random values. The MLP
(in -> width -> width -> out, relu) is built from the op kernels only and trained by full-batch SGD, one
``pad.autodiff`` per step, on synthetic regression data; the run fails if the loss does not fall.

    python scripts/bench_tensor_ops.py --target cpu1      # writes results/tensor_ops_cpu1.json
    python scripts/bench_tensor_ops.py --target cpuN      # all threads
    python scripts/bench_tensor_ops.py --target gpu       # CuPy arrays, CUDA kernels
    python scripts/bench_tensor_ops.py --plot             # PNG plots from the JSON files in results/
    python scripts/bench_tensor_ops.py --plot --results results/h100   # ... read from and written to results/h100

The script is generic over the array module ``xp`` (numpy or cupy): the kernels and the pad calls are the
same on every target. Times are the best of several calls after a warm-up at a small size (compilation
excluded). ``--max-seconds`` bounds each measurement: a size whose time, extrapolated from the previous size,
would exceed it is skipped and recorded as skipped with the reason.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import pad

# ============================================================================================ the 15 ops
# Element-wise ops run over flat views of their (contiguous) matrices, one element per launch index, as a
# hand-written CUDA kernel would: index i owns element i, so pad sees that the adjoint's `da[i] += ...` needs
# no privatization (an index computed as (i // cols, i % cols) would hide that, see the README). matmul and
# transpose index 2-D arrays by (i // cols, i % cols); sum and max along axis 1 take one row per index.


@pad.kernel
def k_add(i, a, b, out):
    out[i] = a[i] + b[i]


@pad.kernel
def k_add_bcast(i, a, b, out):
    """out = a + b[newaxis, :] on flat views of a and out: b (one value per column) broadcast along axis 0."""
    out[i] = a[i] + b[i % b.shape[0]]


@pad.kernel
def k_copy(i, a, out):
    out[i] = a[i]


@pad.kernel
def k_divide(i, a, b, out):
    out[i] = a[i] / b[i]


@pad.kernel
def k_exp(i, a, out):
    out[i] = math.exp(a[i])


@pad.kernel
def k_log(i, a, out):
    out[i] = math.log(a[i])


@pad.kernel
def k_matmul(i, a, b, out):
    """out = a @ b, one output element per index, inner loop over k."""
    r = i // out.shape[1]
    c = i % out.shape[1]
    s = 0.0
    for k in range(a.shape[1]):
        s += a[r, k] * b[k, c]
    out[r, c] = s


@pad.kernel
def k_max_rows(i, a, out):
    """out[r] = max over columns of a[r, :] (max along axis 1), one row per index."""
    m = a[i, 0]
    for c in range(1, a.shape[1]):
        m = max(m, a[i, c])
    out[i] = m


@pad.kernel
def k_multiply(i, a, b, out):
    out[i] = a[i] * b[i]


@pad.kernel
def k_negate(i, a, out):
    out[i] = -a[i]


@pad.kernel
def k_power(i, p, a, out):
    """out = a ** p for a scalar exponent p (a > 0)."""
    out[i] = a[i] ** p


@pad.kernel
def k_relu(i, a, out):
    out[i] = max(a[i], 0.0)


@pad.kernel
def k_subtract(i, a, b, out):
    out[i] = a[i] - b[i]


@pad.kernel
def k_sum_rows(i, a, out):
    """out[r] = sum over columns of a[r, :] (sum along axis 1), one row per index."""
    s = 0.0
    for c in range(a.shape[1]):
        s += a[i, c]
    out[i] = s


@pad.kernel
def k_transpose(i, a, out):
    r = i // out.shape[1]
    c = i % out.shape[1]
    out[r, c] = a[c, r]


@pad.kernel
def k_sgd(i, lr, w, dw):
    """SGD update on flat views, zeroing the gradient for the next step (not one of the 15 ops)."""
    w[i] -= lr * dw[i]
    dw[i] = 0.0


POWER = 2.5


def flat(x):
    """The flat view of a contiguous array (inside autodiff, pad maps it to the view of its shadow)."""
    return x.reshape(-1)


def add(a, b, out):
    pad.launch(k_add, out.size, flat(a), flat(b), flat(out))


def add_bcast(a, b, out):
    pad.launch(k_add_bcast, out.size, flat(a), b, flat(out))


def copy(a, out):
    pad.launch(k_copy, out.size, flat(a), flat(out))


def divide(a, b, out):
    pad.launch(k_divide, out.size, flat(a), flat(b), flat(out))


def exp(a, out):
    pad.launch(k_exp, out.size, flat(a), flat(out))


def log(a, out):
    pad.launch(k_log, out.size, flat(a), flat(out))


def matmul(a, b, out):
    pad.launch(k_matmul, out.size, a, b, out)


def max_rows(a, out):
    pad.launch(k_max_rows, out.shape[0], a, out)


def multiply(a, b, out):
    pad.launch(k_multiply, out.size, flat(a), flat(b), flat(out))


def negate(a, out):
    pad.launch(k_negate, out.size, flat(a), flat(out))


def power(a, out):
    pad.launch(k_power, out.size, POWER, flat(a), flat(out))


def relu(a, out):
    pad.launch(k_relu, out.size, flat(a), flat(out))


def subtract(a, b, out):
    pad.launch(k_subtract, out.size, flat(a), flat(b), flat(out))


def sum_rows(a, out):
    pad.launch(k_sum_rows, out.shape[0], a, out)


def transpose(a, out):
    pad.launch(k_transpose, out.size, a, out)


@dataclass(frozen=True)
class Op:
    name: str
    program: Callable[..., None]  # program(*inputs, out)
    inputs: tuple[str, ...]  # per input: "m" an n x n matrix, "v" a length-n vector
    out: str  # "m" or "v"
    domain: str  # "positive": inputs in [0.5, 1.5]; "signed": +-[0.5, 1.5] (away from relu's kink)
    cubic: bool = False  # work grows as n**3 (matmul), else n**2


OPS: list[Op] = [
    Op("add", add, ("m", "m"), "m", "signed"),
    Op("broadcast_add", add_bcast, ("m", "v"), "m", "signed"),
    Op("copy", copy, ("m",), "m", "signed"),
    Op("divide", divide, ("m", "m"), "m", "signed"),
    Op("exp", exp, ("m",), "m", "signed"),
    Op("log", log, ("m",), "m", "positive"),
    Op("matmul", matmul, ("m", "m"), "m", "signed", cubic=True),
    Op("max_axis", max_rows, ("m",), "v", "signed"),
    Op("multiply", multiply, ("m", "m"), "m", "signed"),
    Op("negate", negate, ("m",), "m", "signed"),
    Op("power", power, ("m",), "m", "positive"),
    Op("relu", relu, ("m",), "m", "signed"),
    Op("subtract", subtract, ("m", "m"), "m", "signed"),
    Op("sum_axis", sum_rows, ("m",), "v", "signed"),
    Op("transpose", transpose, ("m",), "m", "signed"),
]


def make_arrays(op: Op, xp: Any, rng: np.random.Generator, n: int, dtype: Any) -> tuple[list, Any]:
    """The op's inputs (drawn from its domain) and a filled output array, as ``xp`` arrays."""

    def draw(kind: str) -> Any:
        shape = (n, n) if kind == "m" else (n,)
        v = rng.uniform(0.5, 1.5, shape)
        if op.domain == "signed":
            v *= rng.choice([-1.0, 1.0], shape)
        return xp.asarray(v.astype(dtype))

    return [draw(k) for k in op.inputs], draw(op.out)


# ============================================================================================ timing
def module_of(x: Any) -> Any:
    """numpy for host arrays, cupy for device arrays (imported only then)."""
    if isinstance(x, np.ndarray):
        return np
    import cupy

    return cupy


def synchronize(xp: Any) -> None:
    if xp is not np:
        xp.cuda.Device().synchronize()


def best_time(
    fn: Callable[[], object], xp: Any, prepare: Callable[[], object], repeat: int, min_time: float
) -> tuple[float, int]:
    """Best of up to ``repeat`` calls (fewer once ``min_time`` seconds are spent); ``prepare`` is untimed."""
    times: list[float] = []
    while len(times) < repeat and (sum(times) < min_time or len(times) < 1):
        prepare()
        synchronize(xp)
        start = time.perf_counter()
        fn()
        synchronize(xp)
        times.append(time.perf_counter() - start)
        if times[-1] > min_time:  # slow: one sample is enough (a second would double the run)
            break
    return min(times), len(times)


def op_runner(
    op: Op, xp: Any, rng: np.random.Generator, n: int, dtype: Any
) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None], Callable[[], None]]:
    """(forward, backward, prepare_forward, prepare_backward) closures for ``op`` at size ``n``."""
    inputs, out = make_arrays(op, xp, rng, n, dtype)
    shadows = [xp.zeros_like(a) for a in inputs]
    dout = xp.zeros_like(out)
    seed = xp.asarray(rng.uniform(-1.0, 1.0, out.shape).astype(dtype))

    def forward() -> None:
        op.program(*inputs, out)

    def backward() -> None:
        pad.autodiff(
            op.program, *[pad.Dup(a, d) for a, d in zip(inputs, shadows, strict=True)], pad.Dup(out, dout)
        )

    def prepare_backward() -> None:
        dout[...] = seed  # autodiff consumes the seed
        for d in shadows:
            d[...] = 0

    return forward, backward, lambda: None, prepare_backward


TOLERANCES = {np.dtype(np.float64): (1e-6, 1e-9), np.dtype(np.float32): (3e-3, 1e-4)}


def check_op(op: Op, xp: Any, dtype: Any, n: int = 6, seed: int = 0) -> dict[str, float]:
    """``pad.check_grad`` of one op at a small size (finite differences and the dot-product test)."""
    rng = np.random.default_rng(seed)
    inputs, out = make_arrays(op, xp, rng, n, dtype)
    rtol, atol = TOLERANCES[np.dtype(dtype)]
    return pad.check_grad(
        op.program,
        *[pad.Dup(a, xp.zeros_like(a)) for a in inputs],
        pad.Dup(out, xp.zeros_like(out)),
        rtol=rtol,
        atol=atol,
    )


def bench_op(
    op: Op, xp: Any, sizes: list[int], dtype: Any, repeat: int, min_time: float, max_seconds: float
) -> list[dict]:
    rng = np.random.default_rng(1)
    forward, backward, prep_f, prep_b = op_runner(op, xp, rng, 8, dtype)  # warm-up: compile both
    forward()
    prep_b()
    backward()
    synchronize(xp)
    rows: list[dict] = []
    prev: tuple[int, float] | None = None
    for n in sizes:
        if prev is not None:
            pn, pt = prev
            estimate = pt * (n / pn) ** (3 if op.cubic else 2)
            if estimate > max_seconds:
                rows.append(
                    {
                        "n": n,
                        "skipped": f"estimated {estimate:.1f} s for one backward call (from {pt:.2f} s at n={pn}) "
                        f"exceeds --max-seconds {max_seconds:g}",
                    }
                )
                continue
        forward, backward, prep_f, prep_b = op_runner(op, xp, rng, n, dtype)
        t_f, reps_f = best_time(forward, xp, prep_f, repeat, min_time)
        t_b, reps_b = best_time(backward, xp, prep_b, repeat, min_time)
        rows.append(
            {"n": n, "fwd_s": t_f, "bwd_s": t_b, "ratio": t_b / t_f, "reps_fwd": reps_f, "reps_bwd": reps_b}
        )
        print(
            f"  {op.name:14s} n={n:5d}  fwd {t_f * 1e3:10.3f} ms  bwd {t_b * 1e3:10.3f} ms  bwd/fwd {t_b / t_f:6.2f}",
            flush=True,
        )
        prev = (n, t_b)
        del forward, backward, prep_f, prep_b
    return rows


# ============================================================================================ the MLP
def mlp_loss(x, y, w1, b1, w2, b2, w3, b3, rowloss):
    """rowloss[r] = sum_c (mlp(x)[r, c] - y[r, c])**2 with mlp = relu(relu(x W1 + b1) W2 + b2) W3 + b3.

    Built from the op kernels only; intermediates are allocated here (pad gives them zero shadows).
    """
    xp = module_of(x)
    batch, width, nout = x.shape[0], w1.shape[1], w3.shape[1]
    h = x
    for w, b in ((w1, b1), (w2, b2)):
        z = xp.empty((batch, width), x.dtype)
        matmul(h, w, z)
        zb = xp.empty_like(z)
        add_bcast(z, b, zb)
        h = xp.empty_like(z)
        relu(zb, h)
    z = xp.empty((batch, nout), x.dtype)
    matmul(h, w3, z)
    pred = xp.empty_like(z)
    add_bcast(z, b3, pred)
    diff = xp.empty_like(pred)
    subtract(pred, y, diff)
    sq = xp.empty_like(pred)
    multiply(diff, diff, sq)
    sum_rows(sq, rowloss)


def mlp_problem(
    xp: Any, width: int, batch: int, nin: int, nout: int, dtype: Any, seed: int = 0
) -> tuple[Any, Any, list]:
    """Synthetic regression data (a smooth teacher function) and He-initialised parameters."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, nin))
    teacher = rng.normal(size=(nin, nout)) / math.sqrt(nin)
    y = np.sin(2.0 * x @ teacher)
    params = [
        rng.normal(size=(nin, width)) * math.sqrt(2.0 / nin),
        np.zeros(width),
        rng.normal(size=(width, width)) * math.sqrt(2.0 / width),
        np.zeros(width),
        rng.normal(size=(width, nout)) * math.sqrt(1.0 / width),
        np.zeros(nout),
    ]
    return (
        xp.asarray(x.astype(dtype)),
        xp.asarray(y.astype(dtype)),
        [xp.asarray(p.astype(dtype)) for p in params],
    )


def train_mlp(
    xp: Any, width: int, steps: int, lr: float, batch: int, nin: int, nout: int, dtype: Any
) -> dict[str, Any]:
    """Full-batch SGD on the mean (over the batch) of the squared error; one pad.autodiff per step."""
    x, y, params = mlp_problem(xp, width, batch, nin, nout, dtype)
    grads = [xp.zeros_like(p) for p in params]
    rowloss = xp.zeros(batch, dtype)
    drow = xp.zeros(batch, dtype)
    losses: list[float] = []
    times: list[float] = []
    for _ in range(steps):
        synchronize(xp)
        start = time.perf_counter()
        drow[...] = 1.0 / batch  # objective: mean over the batch of the row losses
        pad.autodiff(
            mlp_loss,
            x,
            y,
            *[pad.Dup(p, g) for p, g in zip(params, grads, strict=True)],
            pad.Dup(rowloss, drow),
        )
        for p, g in zip(params, grads, strict=True):
            pad.launch(k_sgd, p.size, lr, p.reshape(-1), g.reshape(-1))
        synchronize(xp)
        times.append(time.perf_counter() - start)
        losses.append(float(rowloss.sum()) / batch)  # loss before this step's update
    return {
        "width": width,
        "steps": steps,
        "step_s": float(np.median(times[1:] if len(times) > 1 else times)),
        "first_step_s": times[0],
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "losses": losses,
        "fell": losses[-1] < 0.9 * losses[0],
    }


# ============================================================================================ driver
def array_module(target: str) -> Any:
    if target == "gpu":
        import cupy  # only for the GPU target

        return cupy
    return np


def machine(xp: Any) -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    import numba

    info["numba"] = numba.__version__
    if xp is not np:
        props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
        name = props["name"]
        info["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
        info["cupy"] = xp.__version__
    return info


def run(args: argparse.Namespace) -> int:
    import numba

    xp = array_module(args.target)
    if args.target == "cpu1":
        numba.set_num_threads(1)
    dtype = np.dtype(args.dtype)
    sizes = [int(s) for s in args.sizes.split(",")]
    widths = [int(s) for s in args.widths.split(",")]
    ops = [op for op in OPS if not args.ops or op.name in args.ops.split(",")]
    report: dict[str, Any] = {
        "benchmark": "tensor_ops",
        "target": args.target,
        "device": "gpu" if args.target == "gpu" else "cpu",
        "threads": numba.get_num_threads(),
        "machine": machine(xp),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "dtype": dtype.name,
        "sizes": sizes,
        "max_seconds": args.max_seconds,
        "load_average_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "checks": {},
        "ops": {},
    }
    print(f"target {args.target}: {report['threads']} threads, {report['machine']}", flush=True)
    failed = []
    if not args.no_check:
        for op in ops:
            try:
                report["checks"][op.name] = check_op(op, xp, dtype)
            except AssertionError as e:
                failed.append(op.name)
                report["checks"][op.name] = {"error": str(e)}
        print(
            f"check_grad at n=6 ({dtype.name}): {len(ops) - len(failed)}/{len(ops)} ops pass {failed or ''}"
        )
    for op in ops:
        report["ops"][op.name] = bench_op(op, xp, sizes, dtype, args.repeat, args.min_time, args.max_seconds)
    if widths and args.mlp_steps > 0:
        report["mlp"] = run_mlp(args, xp, dtype, widths)
    report["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    mlp_rows = report.get("mlp", {}).get("widths", [])
    bad = [r["width"] for r in mlp_rows if "fell" in r and not r["fell"]]
    if failed or bad:
        print(f"FAILED: gradient checks {failed}, MLP loss did not fall at widths {bad}", file=sys.stderr)
        return 1
    return 0


def run_mlp(args: argparse.Namespace, xp: Any, dtype: Any, widths: list[int]) -> dict[str, Any]:
    cfg = {"batch": args.batch, "nin": args.nin, "nout": args.nout, "steps": args.mlp_steps, "lr": args.lr}
    train_mlp(xp, 8, 2, args.lr, args.batch, args.nin, args.nout, dtype)  # warm-up: compile
    rows: list[dict] = []
    prev: tuple[int, float] | None = None
    for w in widths:
        if prev is not None:
            pw, pt = prev
            estimate = pt * (w / pw) ** 2 * args.mlp_steps
            if estimate > args.mlp_max_seconds:
                rows.append(
                    {
                        "width": w,
                        "skipped": f"estimated {estimate:.1f} s for {args.mlp_steps} steps (from "
                        f"{pt:.3f} s per step at width {pw}) exceeds --mlp-max-seconds {args.mlp_max_seconds:g}",
                    }
                )
                continue
        row = train_mlp(xp, w, args.mlp_steps, args.lr, args.batch, args.nin, args.nout, dtype)
        rows.append(row)
        prev = (w, row["step_s"])
        print(
            f"  mlp width {w:5d}: {row['step_s'] * 1e3:9.2f} ms/step  loss {row['loss_first']:.4f} -> "
            f"{row['loss_last']:.4f}",
            flush=True,
        )
    return {**cfg, "widths": rows}


# ============================================================================================ plots
def plot(results: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {}
    for target in ("cpu1", "cpuN", "gpu"):
        f = results / f"tensor_ops_{target}.json"
        if f.exists():
            data[target] = json.loads(f.read_text())
    if "cpu1" not in data:
        raise SystemExit(f"--plot needs {results}/tensor_ops_cpu1.json (the baseline)")
    base = data["cpu1"]
    colors = {"cpu1": "black", "cpuN": "tab:blue", "gpu": "tab:green"}  # one colour per target, every plot

    def label(t: str, d: dict) -> str:
        what = f"{d['threads']} thread{'s' if d['threads'] != 1 else ''}"
        if t == "gpu":
            what = d["machine"].get("gpu", "?")
        load = (d.get("load_average_start"), d.get("load_average_end"))
        if None not in load:  # a load far above the threads used means the timings shared the cores
            what += f", load {load[0]:.1f}->{load[1]:.1f}"
        return f"{t} ({what})"

    labels = {t: label(t, d) for t, d in data.items()}

    def times(d: dict, op: str, key: str) -> dict[int, float]:
        return {r["n"]: r[key] for r in d["ops"].get(op, []) if key in r}

    names = list(base["ops"])
    ncol = 5
    nrow = math.ceil(len(names) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.2 * nrow), squeeze=False)
    for ax, op in zip(axes.flat, names, strict=False):
        for t in data:
            if t == "cpu1":
                continue
            for key, style in (("fwd_s", "-o"), ("bwd_s", "--s")):
                b, o = times(base, op, key), times(data[t], op, key)
                ns = sorted(set(b) & set(o))
                if ns:
                    ax.plot(
                        ns, [b[n] / o[n] for n in ns], style, ms=3, color=colors[t], label=f"{t} {key[:3]}"
                    )
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("n (n x n)")
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes.flat[0].set_ylabel("speedup over 1 CPU thread")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(
        "pad tensor ops: speedup over 1 CPU thread, forward (solid) and pad-derived backward (dashed)\n"
        + ", ".join(labels[t] for t in data)
    )
    fig.tight_layout()
    fig.savefig(results / "tensor_ops_speedup.png", dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.2 * nrow), squeeze=False)
    for ax, op in zip(axes.flat, names, strict=False):
        for t, d in data.items():
            r = times(d, op, "ratio")
            ns = sorted(r)
            ax.plot(ns, [r[n] for n in ns], "-o", ms=3, color=colors[t], label=t)
        ax.set_xscale("log", base=2)
        ax.set_title(op)
        ax.set_xlabel("n (n x n)")
        ax.set_ylim(bottom=0)
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    axes.flat[0].set_ylabel("backward / forward time")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(
        "pad tensor ops: time of autodiff (forward + derived adjoint) / time of the forward launch\n"
        + ", ".join(labels[t] for t in data)
    )
    fig.tight_layout()
    fig.savefig(results / "tensor_ops_ratio.png", dpi=90)
    plt.close(fig)

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    base_mlp = {r["width"]: r["step_s"] for r in base.get("mlp", {}).get("widths", []) if "step_s" in r}
    for t, d in data.items():
        m = {r["width"]: r["step_s"] for r in d.get("mlp", {}).get("widths", []) if "step_s" in r}
        ws = sorted(m)
        a1.plot(ws, [m[w] * 1e3 for w in ws], "-o", color=colors[t], label=labels[t])
        common = sorted(set(m) & set(base_mlp))
        if t != "cpu1" and common:
            a2.plot(common, [base_mlp[w] / m[w] for w in common], "-o", color=colors[t], label=labels[t])
    a1.set_xscale("log", base=2)
    a1.set_yscale("log")
    a1.set_xlabel("hidden width")
    a1.set_ylabel("ms per SGD step (forward + backward + update)")
    a1.legend(fontsize=8)
    a2.set_xscale("log", base=2)
    a2.set_yscale("log")
    a2.set_xlabel("hidden width")
    a2.set_ylabel("speedup over 1 CPU thread")
    a2.axhline(1.0, color="grey", lw=0.5)
    a2.legend(fontsize=8)
    mlp = base.get("mlp", {})
    fig.suptitle(
        f"3-layer MLP ({mlp.get('nin')} -> w -> w -> {mlp.get('nout')}, batch {mlp.get('batch')}), "
        "pad-derived gradients"
    )
    fig.tight_layout()
    fig.savefig(results / "tensor_ops_mlp.png", dpi=90)
    plt.close(fig)
    print(f"wrote {results}/tensor_ops_speedup.png, tensor_ops_ratio.png, tensor_ops_mlp.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", choices=["cpu1", "cpuN", "gpu"], default="cpuN")
    parser.add_argument("--json", help="output file (default results/tensor_ops_<target>.json)")
    parser.add_argument("--plot", action="store_true", help="only plot the JSON files found in --results")
    parser.add_argument("--results", default="results", help="folder of the JSON files and plots")
    parser.add_argument("--sizes", default="64,128,256,512,1024,2048,4096")
    parser.add_argument("--ops", default="", help="comma-separated subset of ops (default: all 15)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeat", type=int, default=7, help="at most this many timed calls per measurement")
    parser.add_argument(
        "--min-time", type=float, default=0.3, help="stop repeating once this many seconds spent"
    )
    parser.add_argument("--max-seconds", type=float, default=10.0, help="skip sizes predicted to take longer")
    parser.add_argument("--no-check", action="store_true", help="skip the check_grad of each op")
    parser.add_argument("--widths", default="64,128,256,512,1024", help="MLP hidden widths ('' to skip)")
    parser.add_argument("--mlp-steps", type=int, default=30)
    parser.add_argument("--mlp-max-seconds", type=float, default=60.0, help="skip widths predicted longer")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--nin", type=int, default=64)
    parser.add_argument("--nout", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.02)
    args = parser.parse_args(argv)
    if args.plot:
        plot(Path(args.results))
        return 0
    if args.json is None:
        args.json = str(Path(args.results) / f"tensor_ops_{args.target}.json")
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
