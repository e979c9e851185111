"""Kernels whose generated code ``tests/unit/test_show.py`` compares with the files beside this one."""

import math

import pad
from tests.unit.show.helpers import damped


@pad.kernel
def step(i, a, x, y):
    y[i] = a * math.sin(x[i]) + y[i] * y[i]


@pad.kernel
def pairs(i, x, e, cutoff):
    total = 0.0
    for j in range(x.shape[0]):
        r = abs(x[i] - x[j])
        if r < cutoff:
            total += math.exp(-r)
    e[i] = total


@pad.kernel
def branch(i, x, y):
    if x[i] > 0.0:
        y[i] = math.sqrt(x[i])
    else:
        y[i] = -x[i] * x[i]


@pad.kernel
def scatter(i, w, x, cells, y):
    y[cells[i]] += w * x[i]


@pad.kernel
def helped(i, x, y):
    y[i] = damped(x[i], 0.5)


@pad.kernel(fastmath=True)
def zones(i, x, k, e):
    total = 0.0
    for j in range(x.shape[0]):
        r = abs(x[i] - x[j])
        near = r - 0.5
        far = r - 1.0
        total += k * (near if near < 0.0 else 0.0) + 2.0 * (far if far < 0.0 else 0.0)
    e[i] = total
