"""A corpus of kernels of many shapes, each with a program that launches it and example arguments.

Every case is checked by ``pad.check_grad`` (tests/unit/test_corpus.py) and reused by the GPU tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import pad
from pad import arrays

HARDNESS = 38.0


@dataclass
class Case:
    name: str
    program: Callable[..., Any]
    make_args: Callable[[np.random.Generator, Any], tuple]
    dtype: Any = np.float64


CASES: list[Case] = []


def case(name: str, dtype: Any = np.float64) -> Callable:
    def register(build: Callable[[], tuple[Callable, Callable]]) -> Callable:
        program, make_args = build()
        CASES.append(Case(name, program, make_args, dtype))
        return build

    return register


def dup(a: np.ndarray) -> pad.Dup:
    return pad.Dup(a, np.zeros_like(a))


def arr(rng: np.random.Generator, n: int, dtype: Any, lo: float = 0.5, hi: float = 1.5) -> np.ndarray:
    return rng.uniform(lo, hi, n).astype(dtype)


# -------------------------------------------------------------------------------------- straight-line
@pad.kernel
def k_arith(i, x, y):
    a = x[i]
    y[i] = (a * a - 3.0 * a) / (a + 2.0) + a**3 - -a + 1.5 % a + a // 0.3


@case("arith")
def _arith():
    def prog(x, y):
        pad.launch(k_arith, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_elementary(i, x, y):
    a = x[i]
    y[i] = (
        math.sqrt(a)
        + np.cbrt(a)
        + math.exp(a)
        + math.log(a)
        + math.log1p(a)
        + math.expm1(a)
        + math.sin(a)
        + math.cos(a)
        + math.tan(a)
        + math.asin(a - 1.0)
        + math.acos(a - 1.0)
        + math.atan(a)
        + math.sinh(a)
        + math.cosh(a)
        + math.tanh(a)
        + math.fabs(a - 1.0)
        + abs(a - 1.0)
    )


@case("elementary")
def _elementary():
    def prog(x, y):
        pad.launch(k_elementary, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt, 0.6, 1.4)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_shared_sums(i, x, y):
    a = x[i]
    b = y[i]
    p = (a + b) * (a - b) + (a + b) * a  # one sum, read twice in a line
    q = (a + b) * b + (a - b) * b  # and again in the next: the same values
    a = 2.0 * a
    y[i] = p + q + (a + b) * p  # a changed: another sum


@case("repeated operations on the same values")
def _shared_sums():
    def prog(x, y):
        pad.launch(k_shared_sums, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 8, dt)), dup(arr(rng, 8, dt)))


@pad.func
def pair_sum(v, a, b):
    return v[a] + v[b]


@pad.kernel
def k_shared_loads(i, x, y):
    v = pad.local_array(3)
    for k in range(3):
        v[k] = x[3 * i + k]
    s = pair_sum(v, 0, 1) * pair_sum(v, 1, 0)  # the same loads and sum (its operands swapped)
    t = pair_sum(v, 1, 2)
    v[1] = s * t  # a store into v: what was loaded from v is stale from here
    w = x[i] * t
    y[i] = pair_sum(v, 0, 1) * y[i] + x[i] * w  # x[i] again: nothing was stored since
    y[i] += x[i] * t  # after a store into y, x[i] is loaded again (x and y might share memory)


@case("repeated loads of a local array through a helper")
def _shared_loads():
    def prog(x, y):
        pad.launch(k_shared_loads, y.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 12, dt)), dup(arr(rng, 4, dt)))


@pad.kernel
def k_binary_fns(i, x, y, z):
    a = x[i]
    b = y[i]
    z[i] = math.atan2(a, b) + math.hypot(a, b) + math.pow(a, b) + np.power(b, 2.5) + math.copysign(a, b - 1.0)
    z[i] += min(a, b) * max(a, b) + np.minimum(a, 2.0 * b) + np.maximum(a * b, 1.0) + min(a, b, 1.2)


@case("binary functions")
def _binary():
    def prog(x, y, z):
        pad.launch(k_binary_fns, x.shape[0], x, y, z)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)), dup(arr(rng, 16, dt)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_numpy_names(i, x, y):
    a = x[i]
    y[i] = (
        np.sqrt(a) * np.exp(-a)
        + np.arctan2(a, 2.0)
        + np.arcsin(a - 1.0)
        + np.abs(-a)
        + np.log(a)
        + np.floor(a) * a
    )


@case("numpy names")
def _numpy_names():
    def prog(x, y):
        pad.launch(k_numpy_names, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt, 0.6, 1.4)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_numpy_functions(i, x, y):
    a = x[i]
    b = 0.5 * a + 0.1
    y[i] = np.add(a, b) * np.subtract(a, 0.2) + np.multiply(a, b) + np.divide(a, b) + np.true_divide(1.0, a)
    y[i] += np.negative(a) * np.positive(b) + np.square(a) + np.reciprocal(a)
    y[i] += np.fmin(a, b) + np.fmax(a, 1.0) + np.exp2(a) + np.log2(a) + np.log10(a) + np.float_power(a, b)
    y[i] += np.logaddexp(a, b) + np.logaddexp2(a, 0.5) + np.sinc(a)
    y[i] += np.arcsinh(a) + np.arccosh(a + 1.0) + np.arctanh(a - 1.0) + np.deg2rad(a)
    y[i] += np.rad2deg(b) * 0.01 + np.degrees(a) * 0.01 + np.radians(b) + np.hypot(a, b) + np.copysign(a, -b)
    y[i] += np.cbrt(a) + np.expm1(a) + np.log1p(a) + np.sinh(a) + np.cosh(a) + np.tanh(a) + np.tan(a)
    y[i] += np.sin(a) + np.cos(a) + np.arccos(a - 1.0) + np.arctan(a) + np.fabs(a - 1.0) + np.absolute(b)
    y[i] += np.minimum(a, b) + np.maximum(a, b)
    if not np.isnan(a) and np.isfinite(b) and not np.isinf(a) and not np.signbit(a):
        y[i] += np.power(a, 2.0)


@case("numpy functions")
def _numpy_functions():
    def prog(x, y):
        pad.launch(k_numpy_functions, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt, 0.6, 1.4)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_math_functions(i, x, y):
    a = x[i]
    y[i] = math.log10(a) + math.log2(a) + math.exp2(a) + math.erf(a) + math.erfc(a) + math.lgamma(a)
    y[i] += math.gamma(a) + math.lgamma(a - 2.5) + math.asinh(a) + math.acosh(a + 1.0) + math.atanh(a - 1.0)
    y[i] += math.degrees(a) * 0.01 + math.radians(a) + math.ldexp(a, 3) + math.cbrt(a) + math.pow(a, 1.5)
    y[i] += pow(a, 3.0)
    if not math.isnan(a) and math.isfinite(a) and not math.isinf(a):
        y[i] += math.copysign(a, 1.0) + math.fabs(-a)


@case("math functions")
def _math_functions():
    def prog(x, y):
        pad.launch(k_math_functions, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt, 0.6, 1.4)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_piecewise(i, x, y):
    a = x[i]
    y[i] = np.floor_divide(a, 0.3) * a + np.fmod(a, 0.3) + np.remainder(a, 0.3) + np.mod(a, 0.7)
    y[i] += np.sign(a - 1.0) + np.trunc(a) + np.rint(a) * a + np.ceil(a) + np.floor(a * 3.0) * a
    y[i] += math.trunc(a * 3.0) * a + math.floor(a) + math.ceil(a) + round(a * 2.0) * a
    y[i] += np.int64(a * 3.0) * np.float64(a) + np.int32(a * 5.0) + bool(a > 1.0) * a


@case("piecewise constant and periodic functions")
def _piecewise():
    def prog(x, y):
        pad.launch(k_piecewise, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt, 0.6, 1.4)), dup(arr(rng, 16, dt)))


@pad.func
def weighted(a, b, wa=0.25, wb=0.75):
    return wa * a + wb * b


@pad.kernel
def k_iteration(i, x, coef, y):
    s = 0.0
    for v in x:
        s += v * v
    for k, v in enumerate(x):
        s += math.sin(k * v)
    for c, v in zip(coef, x):  # noqa: B905 (numba's zip takes no strict=)
        s += c * v
    for c in coef:
        s += c * x[i]
    y[i] = s + coef[i % 3] * x[i] + coef[-1] * weighted(x[i], s, wb=0.5)


@case("for over arrays, tuples, enumerate and zip; tuples indexed at run time")
def _iteration():
    def prog(x, y):
        pad.launch(k_iteration, x.shape[0], x, (0.5, 1.5, 2.5), y)

    return prog, lambda rng, dt: (dup(arr(rng, 9, dt)), dup(arr(rng, 9, dt)))


@pad.kernel
def k_tuples(i, x, y):
    a, b = x[i], 2.0 * x[i]
    b, a = a, b
    t = (a * b, a + b)
    p, q = t
    y[i] = p * t[1] + q


@case("tuples and unpacking")
def _tuples():
    def prog(x, y):
        pad.launch(k_tuples, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_tuple_param(i, coef, x, y):
    c0, c1 = coef
    y[i] = c0 * x[i] + c1 * x[i] * x[i] + coef[0]


@case("tuple parameter")
def _tuple_param():
    def prog(x, y):
        pad.launch(k_tuple_param, x.shape[0], (0.5, 2.0), x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)), dup(arr(rng, 16, dt)))


@pad.kernel
def k_active_scalar(i, a, b, x, y):
    y[i] = a * math.sin(b * x[i]) + a * a


@case("active scalars")
def _active_scalar():
    def prog(a, b, x, y):
        pad.launch(k_active_scalar, x.shape[0], a, b, x, y)

    return prog, lambda rng, dt: (
        pad.Active(1.3),
        pad.Active(0.7),
        dup(arr(rng, 16, dt)),
        dup(arr(rng, 16, dt)),
    )


@pad.kernel
def k_inplace(i, y):
    y[i] = math.sin(y[i]) * y[i] + 1.0


@case("in-place update")
def _inplace():
    def prog(y):
        pad.launch(k_inplace, y.shape[0], y)
        pad.launch(k_inplace, y.shape[0], y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)),)


@pad.kernel
def k_inplace_mul(i, y, x):
    y[i] *= x[i]
    y[i] /= 1.0 + x[i]
    y[i] -= x[i] ** 2


@case("in-place augmented")
def _inplace_mul():
    def prog(y, x):
        pad.launch(k_inplace_mul, y.shape[0], y, x)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)), dup(arr(rng, 16, dt)))


# -------------------------------------------------------------------------------------- branches
@pad.kernel
def k_branches(i, x, y):
    a = x[i]
    if a < 0.8:
        b = a * a
    elif a < 1.1:
        b = math.sin(a)
    else:
        b = a * 3.0
        if b > 4.0:
            b = b - 1.0
    y[i] = b * a if (a > 0.9 and not a > 1.3) or a < 0.6 else b + a


@case("if/elif/else and boolean logic")
def _branches():
    def prog(x, y):
        pad.launch(k_branches, x.shape[0], x, y)

    def args(rng, dt):
        x = np.array([0.55, 0.7, 0.85, 0.95, 1.05, 1.2, 1.35, 1.45], dt)
        return dup(x), dup(arr(rng, 8, dt))

    return prog, args


@pad.kernel
def k_early_return(i, x, y):
    a = x[i]
    if a > 1.2:
        y[i] = a
        return
    y[i] = a * a
    if a < 0.8:
        return
    y[i] = y[i] * 3.0


@case("early return")
def _early_return():
    def prog(x, y):
        pad.launch(k_early_return, x.shape[0], x, y)

    def args(rng, dt):
        return dup(np.array([0.6, 0.7, 0.9, 1.0, 1.1, 1.3, 1.4], dt)), dup(arr(rng, 7, dt))

    return prog, args


# -------------------------------------------------------------------------------------- loops
@pad.kernel
def k_accumulate(i, x, y, m):
    s = 0.0
    for k in range(m):
        s += x[i] * k + math.sin(s * 0.1)
    y[i] = s


@case("loop accumulator with recurrence")
def _accumulate():
    def prog(x, y):
        pad.launch(k_accumulate, x.shape[0], x, y, 5)

    return prog, lambda rng, dt: (dup(arr(rng, 8, dt)), dup(arr(rng, 8, dt)))


@pad.kernel
def k_recurrence(i, x, y, m):
    v = x[i]
    for _ in range(m):
        v = math.sin(v) * 1.5 + 0.1 * v * v
    y[i] = v


@case("nonlinear recurrence")
def _recurrence():
    def prog(x, y):
        pad.launch(k_recurrence, x.shape[0], x, y, 6)

    return prog, lambda rng, dt: (dup(arr(rng, 8, dt)), dup(arr(rng, 8, dt)))


@pad.kernel
def k_ranges(i, x, y, lo, hi, st):
    s = 0.0
    for k in range(lo, hi, st):
        s = s * 0.5 + x[i] * k
    for k in range(hi, lo, -st):
        s = s + math.cos(s) * k
    for k in range(3):
        for j in range(k, 2 * k + 1):
            s = s * x[i] * 0.3 + j
    y[i] = s


@case("range start/stop/step, nested, runtime trip counts")
def _ranges():
    def prog(x, y):
        pad.launch(k_ranges, x.shape[0], x, y, 1, 9, 3)

    return prog, lambda rng, dt: (dup(arr(rng, 8, dt)), dup(arr(rng, 8, dt)))


@pad.kernel
def k_last_value(i, x, y):
    s = 0.0
    t = 0.0
    for k in range(x.shape[0]):
        t = x[k] * x[(k + i) % x.shape[0]]
        s += t
    y[i] = s * t  # t: the last iteration's value, whose adjoint belongs to that iteration alone


@case("loop sum that also leaves its last value")
def _last_value():
    def prog(x, y):
        pad.launch(k_last_value, y.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 6, dt)), dup(arr(rng, 4, dt)))


@pad.kernel
def k_while(i, x, y):
    v = x[i]
    n = 0
    while v < 10.0:
        v = v * 1.7 + math.sqrt(v)
        n += 1
    y[i] = v * n


@case("while with data-dependent trip count")
def _while():
    def prog(x, y):
        pad.launch(k_while, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(np.linspace(0.3, 3.0, 9).astype(dt) + 0.013), dup(arr(rng, 9, dt)))


@pad.kernel
def k_break_continue(i, x, y, m):
    s = x[i]
    for k in range(m):
        if k == 1:
            continue
        s = s * s * 0.5 + 0.3
        if s > 2.0:
            break
        s = s + x[i] * 0.1
    y[i] = s


@case("break and continue")
def _break_continue():
    def prog(x, y):
        pad.launch(k_break_continue, x.shape[0], x, y, 12)

    return prog, lambda rng, dt: (dup(np.linspace(0.5, 1.8, 9).astype(dt) + 0.0071), dup(arr(rng, 9, dt)))


@pad.kernel
def k_return_in_loop(i, x, y):
    v = x[i]
    for k in range(20):
        v = v * 1.3 + 0.01 * k
        if v > 3.0:
            y[i] = v * v
            return
    y[i] = -v


@case("return inside a loop")
def _return_in_loop():
    def prog(x, y):
        pad.launch(k_return_in_loop, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(np.linspace(0.1, 2.0, 9).astype(dt) + 0.0033), dup(arr(rng, 9, dt)))


@pad.kernel
def k_while_break(i, x, y):
    v = x[i]
    k = 0
    while True:
        k += 1
        v = v + math.sin(v) * 0.5
        if v > 2.5 or k > 30:
            break
    y[i] = v


@case("while True with break")
def _while_break():
    def prog(x, y):
        pad.launch(k_while_break, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 9, dt)), dup(arr(rng, 9, dt)))


@pad.kernel
def k_array_loop_inplace(i, y, m):
    for _ in range(m):
        y[i] = 0.5 * (y[i] + 2.0 / y[i])


@case("in-place array update inside a loop")
def _array_loop_inplace():
    def prog(y):
        pad.launch(k_array_loop_inplace, y.shape[0], y, 4)

    return prog, lambda rng, dt: (dup(arr(rng, 8, dt, 1.0, 3.0)),)


@pad.kernel
def k_row_recurrence(i, a, b):
    n = a.shape[1]
    for j in range(1, n):
        a[i, j] = a[i, j - 1] * 0.5 + math.sin(a[i, j]) * b[j]


@case("2-D in-place recurrence along rows")
def _row_recurrence():
    def prog(a, b):
        pad.launch(k_row_recurrence, a.shape[0], a, b)

    def args(rng, dt):
        return dup(rng.uniform(0.5, 1.5, (4, 6)).astype(dt)), dup(arr(rng, 6, dt))

    return prog, args


# -------------------------------------------------------------------------------------- indexing
@pad.kernel
def k_gather(i, idx, x, y):
    y[i] = x[idx[i]] * x[idx[(i + 1) % idx.shape[0]]]


@case("indirect gather")
def _gather():
    def prog(idx, x, y):
        pad.launch(k_gather, idx.shape[0], idx, x, y)

    return prog, lambda rng, dt: (rng.integers(0, 10, 12), dup(arr(rng, 10, dt)), dup(arr(rng, 12, dt)))


@pad.kernel
def k_scatter_add(i, idx, x, y):
    y[idx[i]] += x[i] * x[i]
    y[idx[i] // 2] -= math.sin(x[i])


@case("scatter-add at shared indices")
def _scatter():
    def prog(idx, x, y):
        pad.launch(k_scatter_add, idx.shape[0], idx, x, y)

    return prog, lambda rng, dt: (rng.integers(0, 6, 40), dup(arr(rng, 40, dt)), dup(arr(rng, 6, dt)))


@pad.kernel
def k_stencil(i, x, y):
    n = x.shape[0]
    if i == 0 or i == n - 1:
        y[i] = x[i]
    else:
        y[i] = 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1] + 0.1 * x[i] * x[i + 1]


@case("1-D stencil")
def _stencil():
    def prog(x, y):
        pad.launch(k_stencil, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 20, dt)), dup(arr(rng, 20, dt)))


@pad.kernel
def k_matvec(i, a, x, y):
    s = 0.0
    for j in range(x.shape[0]):
        s += a[i, j] * x[j]
    y[i] = math.tanh(s)


@case("2-D indexing: dense mat-vec")
def _matvec():
    def prog(a, x, y):
        pad.launch(k_matvec, a.shape[0], a, x, y)

    def args(rng, dt):
        return dup(rng.uniform(-1, 1, (5, 7)).astype(dt)), dup(arr(rng, 7, dt)), dup(arr(rng, 5, dt))

    return prog, args


@pad.kernel
def k_3d(i, a, out):
    s = 0.0
    for j in range(a.shape[1]):
        for k in range(a.shape[2]):
            s += a[i, j, k] * a[i, j][k] * (j + 1)
    out[i, 0] = s
    out[i][1] = math.sqrt(s)


@case("3-D arrays and chained indexing")
def _3d():
    def prog(a, out):
        pad.launch(k_3d, a.shape[0], a, out)

    def args(rng, dt):
        return dup(rng.uniform(0.5, 1, (3, 4, 2)).astype(dt)), dup(rng.uniform(0.5, 1, (3, 2)).astype(dt))

    return prog, args


@pad.kernel
def k_int_math(i, ints, x, y):
    k = ints[i] * 2 + 1
    j = k // 3 - k % 2
    f = float(k) * x[i] + int(x[i] * 10.0) + j
    y[i] = f * x[i]


@case("integer arithmetic and casts")
def _int_math():
    def prog(ints, x, y):
        pad.launch(k_int_math, x.shape[0], ints, x, y)

    return prog, lambda rng, dt: (rng.integers(0, 9, 8), dup(arr(rng, 8, dt)), dup(arr(rng, 8, dt)))


# -------------------------------------------------------------------------------------- helpers
@pad.func
def sq(v):
    return v * v


@pad.func
def poly(v, c):
    return sq(v) * c + sq(sq(v)), v - c


@pad.func
def clipped(v):
    if v > 1.2:
        return 1.2 + 0.1 * v
    if v < 0.7:
        return 0.7
    return v


@pad.kernel
def k_helpers(i, x, y):
    p, q = poly(x[i], 0.5)
    y[i] = clipped(p) * q + sq(clipped(x[i]))


@case("nested helpers, tuple returns, early returns in helpers")
def _helpers():
    def prog(x, y):
        pad.launch(k_helpers, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(np.linspace(0.5, 1.5, 11).astype(dt) + 0.01), dup(arr(rng, 11, dt)))


@pad.func
def dot3(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@pad.func
def fill_cross(a, b, out):
    out[0] = a[1] * b[2] - a[2] * b[1]
    out[1] = a[2] * b[0] - a[0] * b[2]
    out[2] = a[0] * b[1] - a[1] * b[0]


@pad.kernel
def k_local_arrays(i, x, y):
    a = pad.local_array(3)
    b = pad.local_array((3,), np.float64)
    c = pad.local_array(3)
    for d in range(3):
        a[d] = x[3 * i + d]
        b[d] = math.cos(x[3 * i + d])
    fill_cross(a, b, c)
    y[i] = dot3(c, c) + dot3(a, b)


@case("local arrays and helpers taking arrays")
def _local_arrays():
    def prog(x, y):
        pad.launch(k_local_arrays, y.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 12, dt)), dup(arr(rng, 4, dt)))


# Constant tables: module-level arrays read by indexing, printed into the generated code (no shadow).
MODES = np.array([[1.0, 1.0, -1.0, -1.0], [1.0, -1.0, -1.0, 1.0], [0.5, -2.0, 0.25, 3.0]])
CORNERS = np.array([3, 0, 2, 1], dtype=np.int32)


@pad.kernel
def k_tables(i, x, y):
    for m in range(MODES.shape[0]):
        s = 0.0
        for k in range(len(CORNERS)):
            s += MODES[m, k] * x[4 * i + CORNERS[k]] * x[4 * i + k]
        for r in range(CORNERS[i % 4]):  # trips from a table: a CUDA adjoint's stack depth reads it too
            s = math.sin(s) * MODES[m, r]
        y[3 * i + m] = s * MODES[m, m]


@case("constant tables")
def _tables():
    def prog(x, y):
        pad.launch(k_tables, y.shape[0] // 3, x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 16, dt)), dup(arr(rng, 12, dt)))


@pad.kernel
def k_local_inplace(i, x, y):
    w = pad.local_array(4)
    for k in range(4):
        w[k] = x[i] + k
    for _ in range(3):
        for k in range(1, 4):
            w[k] = w[k] * 0.5 + math.sin(w[k - 1])
    y[i] = w[3] * w[0]


@case("local array overwritten in a loop")
def _local_inplace():
    def prog(x, y):
        pad.launch(k_local_inplace, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 6, dt)), dup(arr(rng, 6, dt)))


@pad.kernel
def k_local_dead_stores(i, n, x, y):
    w = pad.local_array(6)
    v = pad.local_array((4, 2))
    c = pad.local_array(3)
    for k in range(6):
        w[k] = x[i] * (k + 1)
    w[4] = math.sin(w[2]) * w[4]  # reads the element it overwrites
    w[5] = w[1] * w[1]  # the loop's w[5] is never read
    if x[i] > 1.0:
        w[0] = 2.0 * w[1]  # only on some paths: the loop's w[0] stays live
    c[0] = w[1] * w[2]
    c[1] = w[3] - w[0]
    c[2] = w[4] * w[5]  # never read
    w[1] = c[0] * c[1]
    for m in range(2):
        for k in range(4):
            v[k, m] = w[k + m] * w[5]
    s = 0.0
    for k in range(n):  # a bound known only when launched: every element of v may be read
        s += v[k % 4, k % 2] * w[4]
    y[i] = s + w[0] * w[3] + v[3, 1] + w[1]


@case("local array stores, some dead, read at known and unknown indices")
def _local_dead_stores():
    def prog(x, y):
        pad.launch(k_local_dead_stores, x.shape[0], 5, x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 6, dt, 0.6, 1.4)), dup(arr(rng, 6, dt)))


@pad.kernel
def k_dead_replay(i, x, y):
    g = pad.local_array((3, 2))
    h = pad.local_array(6)
    for m in range(2):
        s = 0.0
        for k in range(3):
            s += x[i] * (k + m + 1)
        for k in range(3):
            g[k, m] = math.cos(s * k)  # read by the forward sweep only: dead where the reverse replays it
    for k in range(6):
        h[k] = g[k % 3, 0] * g[k % 3, 1]
    for k in range(1, 6):  # more iterations than a CUDA adjoint unrolls (optimize.UNROLLED_TRIPS)
        h[k] = h[k] + 0.5 * h[k - 1]  # reads what the previous iteration stored
    t = 0.0
    for k in range(6):
        t += h[k] * h[k]
    y[i] = t


@pad.kernel
def k_axes_in_place(n, f, xv):
    """LULESH's node update in small: each axis's velocity row (cut near zero), then its position row, updated
    in place by a loop over three axes that loads what it stores."""
    for axis in range(3):
        vel = xv[3 + axis, n] + f[axis, n] * xv[axis, n]
        if abs(vel) < 0.1:
            vel = 0.0
        xv[3 + axis, n] = vel
        xv[axis, n] = xv[axis, n] + vel * 0.5


@case("recomputed loop rebuilding a local array the reverse sweep never reads")
def _dead_replay():
    def prog(x, y):
        pad.launch(k_dead_replay, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 5, dt)), dup(arr(rng, 5, dt)))


@pad.kernel
def k_kept_modes(i, x, g, y):
    hourgam = pad.local_array((3, 4))
    total = 0.0
    for m in range(4):
        h = 0.0
        for k in range(3):
            h += x[i, k] * g[m, k]  # a mode sum the iteration's reverse reads: kept per m
        for k in range(3):
            e = math.exp(math.sin(h * g[m, k]))  # read by the inner reverse: kept per (m, k)
            hourgam[k, m] = e * x[i, k]
            total += e * e
    for k in range(3):
        total += hourgam[k, 0] * hourgam[k, 3]
    y[i] = total


@case("values of small fixed loops kept for the reverse sweep, per iteration of nested loops")
def _kept_modes():
    def prog(x, g, y):
        pad.launch(k_kept_modes, x.shape[0], x, g, y)

    return prog, lambda rng, dt: (
        dup(arr(rng, 15, dt).reshape(5, 3)),
        dup(arr(rng, 12, dt, -1.0, 1.0).reshape(4, 3)),
        dup(arr(rng, 5, dt)),
    )


@pad.kernel
def k_kept_in_stored(i, x, y):
    w = pad.local_array(3)
    for k in range(3):
        w[k] = x[i, k]
    c = 1.0
    for _ in range(3):  # loads and stores w: its iterations save what they overwrite
        for k in range(3):  # its values differ from one pass to the next: kept per pass and k
            c = c * 0.5 + math.exp(math.sin(w[k] * c))
        for k in range(3):
            w[k] = w[k] * 0.75 + 0.1 * c
    for k in range(2):
        if w[k] > c * 0.3:  # noqa: SIM108 (a branch, not a select)
            t = math.tanh(w[k] * c)  # assigned on some paths only, read by the reverse on the same ones
        else:
            t = w[k] * w[k]
        c = c + t * t
    y[i] = c + w[2]


@case("values kept inside a stored loop, and under branches")
def _kept_in_stored():
    def prog(x, y):
        pad.launch(k_kept_in_stored, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 12, dt, 0.1, 1.2).reshape(4, 3)), dup(arr(rng, 4, dt)))


@pad.kernel
def k_saved_in_variables(i, x, t, y):
    a = x[i]
    b = math.sin(a)
    a = a * b + 1.0  # overwrites a value the reverse of ``b`` reads: saved once, outside every loop
    if a > 1.2:
        b = b * a  # saved under a branch
    w = pad.local_array(3)
    for k in range(3):
        w[k] = t[i, k] * a
    s = 0.0
    for k in range(3):
        s += math.cos(w[k]) * b
    w[1] = s * w[2]  # overwrites an element the loop above reads: its old value is saved
    y[i] = w[1] * a + b


@case("values the reverse needs saved before they are overwritten, outside loops")
def _saved_in_variables():
    def prog(x, t, y):
        pad.launch(k_saved_in_variables, x.shape[0], x, t, y)

    return prog, lambda rng, dt: (
        dup(arr(rng, 6, dt, 0.2, 1.6)),
        dup(arr(rng, 18, dt).reshape(6, 3)),
        dup(arr(rng, 6, dt)),
    )


# -------------------------------------------------------------------------------------- app-shaped
@pad.kernel
def k_hex_forces(i, nodelist, x, y, z, p, fx, fy, fz):
    xl = pad.local_array(8)
    yl = pad.local_array(8)
    zl = pad.local_array(8)
    for k in range(8):
        n = nodelist[i, k]
        xl[k] = x[n]
        yl[k] = y[n]
        zl[k] = z[n]
    cx = 0.0
    cy = 0.0
    cz = 0.0
    for k in range(8):
        cx += 0.125 * xl[k]
        cy += 0.125 * yl[k]
        cz += 0.125 * zl[k]
    vol = 0.0
    for k in range(8):
        vol += (xl[k] - cx) ** 2 + (yl[k] - cy) ** 2 + (zl[k] - cz) ** 2
    scale = p[i] * math.sqrt(vol)
    for k in range(8):
        n = nodelist[i, k]
        fx[n] += scale * (xl[k] - cx)
        fy[n] += scale * (yl[k] - cy)
        fz[n] += scale * (zl[k] - cz)


@case("LULESH-like hexahedron gather / compute / scatter-add")
def _hex():
    def prog(nodelist, x, y, z, p, fx, fy, fz):
        pad.launch(k_hex_forces, nodelist.shape[0], nodelist, x, y, z, p, fx, fy, fz)

    def args(rng, dt):
        # A 3x1x1 row of hexahedra sharing faces: 16 nodes.
        nodes = np.array([[e, e + 1, e + 5, e + 4, e + 8, e + 9, e + 13, e + 12] for e in range(3)], np.int64)
        coords = [dup(arr(rng, 16, dt)) for _ in range(3)]
        return (
            nodes,
            *coords,
            dup(arr(rng, 3, dt)),
            dup(arr(rng, 16, dt)),
            dup(arr(rng, 16, dt)),
            dup(arr(rng, 16, dt)),
        )

    return prog, args


@pad.kernel
def k_pairwise(i, pos, charge, radius, energy):
    e = 0.0
    xi = pos[i, 0]
    yi = pos[i, 1]
    for j in range(pos.shape[0]):
        if j == i:
            continue
        dx = xi - pos[j, 0]
        dy = yi - pos[j, 1]
        r = math.sqrt(dx * dx + dy * dy)
        dist = r - (radius[i] + radius[j])
        if dist < 0.0:
            e += HARDNESS * (1.0 - r / (radius[i] + radius[j]))
        elif dist < 2.0:
            e += charge[i] * charge[j] * (1.0 - 0.5 * dist)
        else:
            e -= 0.01 * charge[i] * charge[j] / r
    energy[i] = 0.5 * e


@case("miniBUDE-like branchy pairwise energy")
def _pairwise():
    def prog(pos, charge, radius, energy):
        pad.launch(k_pairwise, pos.shape[0], pos, charge, radius, energy)

    def args(rng, dt):
        pos = rng.uniform(0, 6, (24, 2)).astype(dt)
        return dup(pos), dup(arr(rng, 24, dt, -1, 1)), dup(arr(rng, 24, dt, 0.3, 0.8)), dup(arr(rng, 24, dt))

    return prog, args


@pad.kernel(fastmath=True)
def k_zones(i, pos, cut, energy):
    """miniBUDE's pair energy in fast math: zone tests as selects, summed; their adjoint shares of the sum's
    adjoint are scaled by it once (``optimize.defer_scales``)."""
    e = 0.0
    for j in range(pos.shape[0]):
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        d = math.sqrt(dx * dx + dy * dy + 0.01)
        near = d - cut[j]
        mid = d - 2.0 * cut[j]
        far = d - 3.0
        e += (
            cut[i] * (near if near < 0.0 else 0.0)
            + 0.5 * (mid if mid < 0.0 else 0.0)
            + (far if far < 0.0 else 0.0)
        )
    energy[i] = e


@case("fast-math zone energy")
def _zones():
    def prog(pos, cut, energy):
        pad.launch(k_zones, pos.shape[0], pos, cut, energy)

    def args(rng, dt):
        return dup(rng.uniform(0, 3, (24, 2)).astype(dt)), arr(rng, 24, dt, 0.5, 1.5), dup(arr(rng, 24, dt))

    return prog, args


@pad.kernel
def k_cut_off(i, pos, q, energy):
    e = 0.0
    for j in range(pos.shape[0]):
        dx = pos[i, 0] - pos[j, 0]
        dy = pos[i, 1] - pos[j, 1]
        r2 = dx * dx + dy * dy + 0.01
        if r2 < 4.0:  # the distances' adjoints, zero past the cut-off, move into the branch
            e += q[i] * q[j] * (1.0 / math.sqrt(r2) - 0.5)
    energy[i] = e


@case("pair energy with a cut-off")
def _cut_off():
    def prog(pos, q, energy):
        pad.launch(k_cut_off, pos.shape[0], pos, q, energy)

    def args(rng, dt):
        pos = rng.uniform(0, 8, (24, 2)).astype(dt)
        return dup(pos), dup(arr(rng, 24, dt, -1, 1)), dup(arr(rng, 24, dt))

    return prog, args


@pad.kernel
def k_energy_sum(i, x, total):
    total[0] += x[i] * x[i] * 0.5


@case("reduction into one element")
def _energy_sum():
    def prog(x, total):
        pad.launch(k_energy_sum, x.shape[0], x, total)

    return prog, lambda rng, dt: (dup(arr(rng, 50, dt)), dup(arr(rng, 1, dt)))


# -------------------------------------------------------------------------------------- programs
@pad.kernel
def k_scale(i, a, x, y):
    y[i] = a * x[i]


@pad.kernel
def k_square_into(i, x):
    x[i] = x[i] * x[i]


@case("several launches, overwriting an array an earlier adjoint needs")
def _program():
    def prog(a, x, y, z):
        n = x.shape[0]
        pad.launch(k_scale, n, a, x, y)
        pad.launch(k_inplace, n, y)
        pad.launch(k_scale, n, a, y, z)
        pad.launch(k_square_into, n, y)
        for _ in range(2):
            pad.launch(k_stencil, n, z, x)
            pad.launch(k_stencil, n, x, z)
        if float(z[0]) > -1e9:  # Python control flow on primal values
            pad.launch(k_scale, n, 0.5, z, y)

    return prog, lambda rng, dt: (
        pad.Active(0.9),
        dup(arr(rng, 12, dt)),
        dup(arr(rng, 12, dt)),
        dup(arr(rng, 12, dt)),
    )


@case("intermediate arrays allocated inside the program")
def _intermediate():
    def prog(x, y):
        tmp = arrays.zeros_like(x)  # in x's memory: host, or device on the CUDA target
        pad.launch(k_scale, x.shape[0], 2.0, x, tmp)
        pad.launch(k_inplace, x.shape[0], tmp)
        pad.launch(k_gather, x.shape[0], arrays.like(x, np.arange(x.shape[0])[::-1], np.int64), tmp, y)

    return prog, lambda rng, dt: (dup(arr(rng, 10, dt)), dup(arr(rng, 10, dt)))


@case("views of Dup arrays")
def _views():
    def prog(x, y):
        pad.launch(k_scale, 5, 3.0, x[2:7], y[::2])
        pad.launch(k_inplace, 4, x[:4])

    return prog, lambda rng, dt: (dup(arr(rng, 10, dt)), dup(arr(rng, 10, dt)))


# -------------------------------------------------------------------------------------- float32
for _c in list(CASES):
    if _c.name in {
        "active scalars",
        "elementary",
        "repeated operations on the same values",
        "repeated loads of a local array through a helper",
        "binary functions",
        "numpy functions",
        "math functions",
        "loop accumulator with recurrence",
        "nonlinear recurrence",
        "2-D indexing: dense mat-vec",
        "LULESH-like hexahedron gather / compute / scatter-add",
        "scatter-add at shared indices",
        "local arrays and helpers taking arrays",
        "if/elif/else and boolean logic",
    }:
        CASES.append(Case(_c.name + " [float32]", _c.program, _c.make_args, np.float32))


F32_HALF = np.float32(0.5)


@pad.kernel
def k_f32_constant(i, x, y):
    y[i] = F32_HALF * x[i] * x[i]


@case("float32 module constant keeps float32", np.float32)
def _f32_constant():
    def prog(x, y):
        pad.launch(k_f32_constant, x.shape[0], x, y)

    return prog, lambda rng, dt: (dup(arr(rng, 8, dt)), dup(arr(rng, 8, dt)))
