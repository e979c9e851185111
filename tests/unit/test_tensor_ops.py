"""The 15 tensor-op kernels of scripts/bench_tensor_ops.py and its MLP: pad's gradients against finite
differences and the forward/reverse dot-product test, at small sizes."""

from __future__ import annotations

import numpy as np
import pytest

import pad
from scripts.bench_tensor_ops import OPS, check_op, mlp_loss, mlp_problem, train_mlp


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


def test_mlp_gradient():
    x, y, params = mlp_problem(np, width=5, batch=4, nin=3, nout=2, dtype=np.float64)
    for p in params[1::2]:  # nonzero biases so the check also covers them away from relu's kink
        p[...] = 0.1
    pad.check_grad(
        mlp_loss, x, y, *[pad.Dup(p, np.zeros_like(p)) for p in params], pad.Dup(np.zeros(4), np.zeros(4))
    )


def test_mlp_loss_falls():
    row = train_mlp(np, width=16, steps=10, lr=0.02, batch=32, nin=8, nout=2, dtype=np.float64)
    assert row["loss_last"] < 0.9 * row["loss_first"]
