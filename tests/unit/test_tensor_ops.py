"""The 15 tensor-op kernels of scripts/bench_tensor_ops.py and its MLP: pad's gradients against finite
differences and the forward/reverse dot-product test, at small sizes."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pad
from scripts.bench_tensor_ops import OPS, check_op, k_max_rows, mlp_loss, mlp_problem, train_mlp


def test_fifteen_ops():
    assert len({op.name for op in OPS}) == 15


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_op_gradient(op):
    errors = check_op(op, np, np.float64, n=5)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-6


def test_op_gradient_non_square_matmul():
    # the MLP multiplies rectangular matrices: (3 x 4) @ (4 x 2)
    rng = np.random.default_rng(0)
    a, b, out = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), np.zeros((3, 2))
    op = next(o for o in OPS if o.name == "matmul")
    pad.check_grad(op.program, *[pad.Dup(v, np.zeros_like(v)) for v in (a, b, out)])
    op.program(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)


def test_forward_values():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 1.5, (4, 4)), rng.uniform(0.5, 1.5, (4, 4))
    expect = {
        "add": a + b,
        "broadcast_add": a + b[0],
        "copy": a,
        "divide": a / b,
        "exp": np.exp(a),
        "log": np.log(a),
        "matmul": a @ b,
        "max_axis": a.max(axis=1),
        "multiply": a * b,
        "negate": -a,
        "power": a**2.5,
        "relu": np.maximum(a - 1.0, 0.0),
        "subtract": a - b,
        "sum_axis": a.sum(axis=1),
        "transpose": a.T,
    }
    for op in OPS:
        inputs = [a - 1.0 if op.name == "relu" else a, b[0] if op.name == "broadcast_add" else b][
            : len(op.inputs)
        ]
        out = np.zeros(expect[op.name].shape)
        op.program(*inputs, out)
        np.testing.assert_allclose(out, expect[op.name], rtol=1e-12, err_msg=op.name)


def _mlp_case():
    x, y, params = mlp_problem(np, width=5, batch=4, nin=3, nout=2, dtype=np.float64)
    for p in params[1::2]:  # nonzero biases, so the check covers them too
        p[...] = 0.1
    return x, y, params


def _loss(x, y, params):
    rowloss = np.zeros(x.shape[0])
    mlp_loss(x, y, *params, rowloss)
    return float(rowloss.sum())


def test_mlp_reverse_gradient():
    """autodiff of the MLP loss against central finite differences along random directions."""
    x, y, params = _mlp_case()
    grads = [np.zeros_like(p) for p in params]
    pad.autodiff(
        mlp_loss,
        x,
        y,
        *[pad.Dup(p, g) for p, g in zip(params, grads, strict=True)],
        pad.Dup(np.zeros(4), np.ones(4)),
    )
    rng = np.random.default_rng(3)
    for _ in range(3):
        d = [rng.uniform(-1, 1, p.shape) for p in params]
        h = 1e-6
        plus = _loss(x, y, [p + h * v for p, v in zip(params, d, strict=True)])
        minus = _loss(x, y, [p - h * v for p, v in zip(params, d, strict=True)])
        fd = (plus - minus) / (2 * h)
        ad = sum(float((g * v).sum()) for g, v in zip(grads, d, strict=True))
        assert abs(fd - ad) <= 1e-6 * max(1.0, abs(fd)), (fd, ad)


def test_mlp_check_grad_forward_mode():
    x, y, params = _mlp_case()
    pad.check_grad(
        mlp_loss, x, y, *[pad.Dup(p, np.zeros_like(p)) for p in params], pad.Dup(np.zeros(4), np.zeros(4))
    )


@pad.kernel
def k_square(i, a, out):
    out[i] = a[i] * a[i]


def _square_twice(x, y):
    t = np.empty(x.shape)  # an intermediate only ever seen through temporary views
    pad.launch(k_square, x.size, x.reshape(-1), t.reshape(-1))
    pad.launch(k_square, x.size, t.reshape(-1), y.reshape(-1))


def test_fwddiff_intermediate_seen_through_temporary_views():
    x, dy = np.full((2, 3), 1.5), np.zeros((2, 3))
    pad.fwddiff(_square_twice, pad.Dup(x, np.ones((2, 3))), pad.Dup(np.zeros((2, 3)), dy))
    np.testing.assert_allclose(dy, 4 * 1.5**3)  # d(x^4)/dx
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 1.5, (2, 3))
    pad.check_grad(_square_twice, pad.Dup(x, np.zeros_like(x)), pad.Dup(np.zeros((2, 3)), np.zeros((2, 3))))


def _overlapping_views(x, y):
    t = np.empty(6)
    pad.launch(k_square, 4, x[:4], t[:4])  # t[0:4] first, then t[2:6]: the views overlap partially
    pad.launch(k_square, 4, t[2:], y[:4])


def test_intermediate_through_overlapping_views():
    x = np.random.default_rng(1).uniform(0.5, 1.5, 6)
    pad.check_grad(_overlapping_views, pad.Dup(x, np.zeros(6)), pad.Dup(np.zeros(6), np.zeros(6)))


def test_mlp_loss_falls():
    row = train_mlp(np, width=16, steps=10, lr=0.02, batch=32, nin=8, nout=2, dtype=np.float64)
    assert row["loss_last"] < 0.9 * row["loss_first"]


def test_plot_from_a_results_folder(tmp_path):
    # --plot --results DIR reads DIR/tensor_ops_<target>.json and writes the three PNGs there;
    # skipped sizes and a missing target are drawn around
    pytest.importorskip("matplotlib")
    import json

    from scripts.bench_tensor_ops import main

    def report(target, threads, scale):
        rows = [{"n": n, "fwd_s": scale * n, "bwd_s": 3 * scale * n, "ratio": 3.0} for n in (64, 128)]
        rows.append({"n": 256, "skipped": "estimated"})
        mlp = [{"width": 64, "step_s": scale}, {"width": 128, "skipped": "estimated"}]
        return {
            "target": target,
            "threads": threads,
            "machine": {"cores": threads},
            "load_average_start": 0.1,
            "load_average_end": 1.0,
            "ops": {op.name: rows for op in OPS},
            "mlp": {"batch": 4, "nin": 2, "nout": 1, "widths": mlp},
        }

    (tmp_path / "tensor_ops_cpu1.json").write_text(json.dumps(report("cpu1", 1, 1e-3)))
    (tmp_path / "tensor_ops_cpuN.json").write_text(json.dumps(report("cpuN", 4, 3e-4)))
    assert main(["--plot", "--results", str(tmp_path)]) == 0
    for name in ("speedup", "ratio", "mlp"):
        assert (tmp_path / f"tensor_ops_{name}.png").stat().st_size > 0


def test_running_max_adjoint_saves_nothing_per_iteration():
    # m = max(m, a[i, c]): the forward records the winning column instead of pushing m once per column, and
    # the reverse replays that column alone (reverse.Reverse.extreme)
    op = next(o for o in OPS if o.name == "max_axis")
    a, out = np.ones((3, 4), np.float32), np.zeros(3, np.float32)
    source = k_max_rows.variant((a, out), "adjoint", (True, True)).source
    assert "push(" not in source and "_nf" not in source, source
    errors = check_op(op, np, np.float64, n=5)
    assert errors["fd"] < 1e-6 and errors["dot"] < 1e-6


@pad.kernel
def k_clip(i, lo, hi, a, out):
    out[i] = min(max(a[i], lo[i]), hi[i])


def test_min_max_adjoint_float32_without_branches():
    # the partials of min/max are 0/1 indicators in the kernel's precision, not float64 selects
    rng = np.random.default_rng(2)
    lo, hi = rng.uniform(-1, 0, 8).astype(np.float32), rng.uniform(0, 1, 8).astype(np.float32)
    a, out = rng.uniform(-1.5, 1.5, 8).astype(np.float32), np.zeros(8, np.float32)
    for mode in ("adjoint", "tangent"):
        source = k_clip.variant((lo, hi, a, out), mode, (True, True, True, True)).source
        # the kernel's code: after the launcher's call of its chunks runner
        code = source.split("return run_chunks(", 1)[1]
        assert " if " not in code and re.search(r"np\.float32\(\w+ (<|==) \w+\)", code), source
    pad.check_grad(
        lambda lo, hi, a, out: pad.launch(k_clip, 8, lo, hi, a, out),
        *[pad.Dup(v, np.zeros_like(v)) for v in (lo, hi, a, out)],
        rtol=3e-3,
        atol=1e-4,
    )
