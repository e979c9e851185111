"""A first look at pad: differentiate a small kernel program and check the gradient.

Run with ``python -m pad.demo``.
"""

from __future__ import annotations

import math
import time

import numpy as np

import pad


@pad.func
def rotate(x, y, c, s):
    return c * x - s * y, s * x + c * y


@pad.kernel
def step(i, a, x, y):
    u, v = rotate(x[i], y[i], 0.6, 0.8)
    y[i] = a * math.sin(u * v) + y[i]


def program(a, x, y):
    for _ in range(3):
        pad.launch(step, x.shape[0], a, x, y)


def main() -> None:
    n = 1_000_000
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    dx, dy = np.zeros(n), np.ones(n)  # seed: the objective is sum(y) at the end
    (da,) = pad.autodiff(program, pad.Active(2.0), pad.Dup(x, dx), pad.Dup(y, dy))
    print(f"d sum(y) / d a      = {da:.6f}")
    print(f"d sum(y) / d x[:3]  = {dx[:3]}")

    x, y = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    start = time.perf_counter()
    program(2.0, x, y)
    primal = time.perf_counter() - start
    start = time.perf_counter()
    pad.autodiff(program, pad.Active(2.0), pad.Dup(x, np.zeros(n)), pad.Dup(y, np.ones(n)))
    grad = time.perf_counter() - start
    print(f"n = {n:,}: primal {primal * 1e3:.1f} ms, gradient {grad * 1e3:.1f} ms ({grad / primal:.2f}x)")

    small = 64
    errors = pad.check_grad(
        program,
        pad.Active(2.0),
        pad.Dup(rng.uniform(-1, 1, small), np.zeros(small)),
        pad.Dup(rng.uniform(-1, 1, small), np.zeros(small)),
    )
    print(f"check_grad: finite differences and dot-product test pass (largest relative errors {errors})")
    print("\nThe generated adjoint kernel:\n")
    print(pad.show(step, "adjoint", 2.0, pad.Dup(x, x), pad.Dup(y, y)))


if __name__ == "__main__":
    main()
