"""The rule table (pad/kernel/rules.py), function by function: each name computes what the function computes,
and each partial derivative agrees with complex-step derivatives (where the function is analytic) and with
central differences; special points give what NumPy's arithmetic gives. docs/kernels.md lists the table.

Rules are evaluated here as Python, from the same templates the generated kernels print; every function also
runs compiled, through ``pad.check_grad``, in the corpus (tests/unit/corpus.py, on CPU threads and on the
CUDA simulator): ``test_every_function_is_in_the_corpus`` keeps it so.
"""

from __future__ import annotations

import builtins
import math
import re
from pathlib import Path

import numpy as np
import pytest
from numba import njit

import pad
from pad.kernel.emit import Printer
from pad.kernel.ir import Call, Expr, Lit, Name
from pad.kernel.rules import BUILTINS, COSTS, MATH, NUMPY, RULES
from pad.kernel.runtime import digamma
from scripts.kernel_functions import render

FUNCTIONS = [
    (f"{prefix}{name}", module, name, op)
    for prefix, module, table in (("math.", math, MATH), ("np.", np, NUMPY), ("", builtins, BUILTINS))
    for name, op in table.items()
]

# Points inside each function's domain, away from kinks and jumps.
POINTS: dict[str, list[tuple[float, ...]]] = {
    "asin": [(-0.6,), (0.2,), (0.7,)],
    "acos": [(-0.6,), (0.2,), (0.7,)],
    "atanh": [(-0.6,), (0.2,), (0.7,)],
    "acosh": [(1.2,), (1.7,), (3.0,)],
    "lgamma": [(0.37,), (2.9,), (-1.3,)],
    "gamma": [(0.37,), (2.9,), (-1.3,)],
    "ldexp": [(0.37, 3), (1.23, -2)],
}
UNARY = [(0.37,), (0.81,), (1.23,), (2.9,)]
BINARY = [(0.37, 0.81), (1.23, 0.6), (2.9, 1.7)]

# Complex twins of the analytic functions: f(x + ih) = f(x) + ih f'(x) + O(h^2), exact to rounding.
ANALYTIC = {
    "copy": np.positive,
    "neg": np.negative,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "pow": np.power,
    "fpow": np.float_power,
    "square": np.square,
    "reciprocal": np.reciprocal,
    "sqrt": np.sqrt,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "degrees": lambda z: z * (180.0 / math.pi),
    "radians": lambda z: z * (math.pi / 180.0),
    "sinc": np.sinc,
    "float": complex,
    "f8": np.complex128,
}


def evaluate(e: Expr, values: dict[str, float]) -> float:
    """``e`` printed as generated kernels print it, run as Python on float64 values (NumPy's arithmetic)."""
    text = Printer({}, {}).expr(e, "f8")
    with np.errstate(all="ignore"):
        return eval(text, {"math": math, "np": np, "digamma": digamma}, dict(values))


def partials(op: str, point: tuple[float, ...]) -> list[float | None]:
    rule = RULES[op]
    names = [Name(p) for p in rule.params]
    values = {
        p: np.float64(v) if isinstance(v, float) else v for p, v in zip(rule.params, point, strict=True)
    }
    values["out"] = evaluate(Call(op, tuple(names)), values)
    assert rule.partials is not None
    return [None if d is None else float(evaluate(d, values)) for d in rule.partials(Name("out"), *names)]


@pytest.mark.parametrize(("shown", "module", "name", "op"), FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_rule(shown, module, name, op):
    rule = RULES[op]
    fn = getattr(module, name)
    arity = rule.arity
    for point in POINTS.get(op, UNARY if arity == 1 else BINARY):
        values = {
            p: np.float64(v) if isinstance(v, float) else v for p, v in zip(rule.params, point, strict=True)
        }
        expected = fn(*point)
        assert evaluate(Call(op, tuple(Name(p) for p in rule.params)), values) == pytest.approx(
            expected, rel=1e-15, abs=1e-300
        ), f"{shown}{point}: the rule computes another function"
        derivatives = partials(op, point) if rule.partials is not None else [None] * arity
        for k, x in enumerate(point):
            if not isinstance(x, float) or op == "f4":
                continue  # an integer argument (ldexp's exponent); float32's rounding
            h = 1e-6 * max(1.0, abs(x))
            up, down = list(point), list(point)
            up[k], down[k] = x + h, x - h
            fd = (float(fn(*up)) - float(fn(*down))) / (2 * h)
            d = derivatives[k]
            assert (0.0 if d is None else d) == pytest.approx(fd, rel=1e-6, abs=1e-8), (
                f"{shown}{point}: partial {k} is {d}, central differences give {fd}"
            )
            if op in ANALYTIC:
                z = [complex(v) for v in point]
                z[k] += 1e-30j
                cs = float(np.imag(ANALYTIC[op](*z))) / 1e-30
                assert d == pytest.approx(cs, rel=1e-13, abs=1e-300), (
                    f"{shown}{point}: partial {k} is {d}, the complex step gives {cs}"
                )


# Where the partials meet a kink, a pole or a NaN: (op, point, partials).
NAN = math.nan
SPECIAL = [
    ("sqrt", (0.0,), [math.inf]),
    ("log", (0.0,), [math.inf]),
    ("reciprocal", (0.0,), [-math.inf]),
    ("asin", (1.0,), [math.inf]),
    ("acosh", (1.0,), [math.inf]),
    ("atanh", (1.0,), [math.inf]),
    ("abs", (0.0,), [0.0]),
    ("abs", (-0.0,), [0.0]),
    ("copysign", (0.0, -1.0), [0.0, None]),
    ("hypot", (0.0, 0.0), [0.0, 0.0]),
    ("min", (1.0, 1.0), [0.5, 0.5]),
    ("fmin", (NAN, 1.0), [0.0, 1.0]),
    ("fmax", (1.0, NAN), [1.0, 0.0]),
    ("fmin", (2.0, 2.0), [0.5, 0.5]),
    ("pow", (0.0, 2.0), [0.0, 0.0]),
    ("sinc", (0.0,), [0.0]),
    ("logaddexp", (0.0, 0.0), [0.5, 0.5]),
    ("erf", (0.0,), [2.0 / math.sqrt(math.pi)]),
    ("lgamma", (1.0,), [-0.5772156649015329]),
    ("lgamma", (0.0,), [NAN]),
    ("lgamma", (-2.0,), [NAN]),
    ("gamma", (0.5,), [math.sqrt(math.pi) * (-0.5772156649015329 - 2.0 * math.log(2.0))]),
]


@pytest.mark.parametrize(("op", "point", "expected"), SPECIAL, ids=[f"{s[0]}{s[1]}" for s in SPECIAL])
def test_special_points(op, point, expected):
    """Compiled as the generated kernels are (numba, NumPy's error model: 1/0 is inf, not an error)."""
    rule = RULES[op]
    names = [Name(p) for p in rule.params]
    printer = Printer({}, {})
    assert rule.partials is not None
    derivatives = [printer.expr(d, "f8") for d in rule.partials(Name("out"), *names) if d is not None]
    source = (
        f"def f({', '.join(rule.params)}):\n"
        f"    out = {printer.expr(Call(op, tuple(names)), 'f8')}\n"
        f"    return ({', '.join(derivatives)},)\n"
    )
    scope = {"math": math, "np": np, "digamma": digamma}
    exec(source, scope)
    got = iter(njit(error_model="numpy")(scope["f"])(*point))
    for want in expected:
        if want is None:
            continue
        value = next(got)
        assert value == pytest.approx(want, rel=1e-14, nan_ok=True), f"{op}{point}: {source}"


@pytest.mark.parametrize("numerator", [1.0, 3.0, 2, -0.25])
def test_a_literal_numerator_leaves_no_division_in_the_denominator_s_partial(numerator):
    """``c / b``'s partial in ``b`` is ``-out * out / c``, ``-c / b**2`` with no division at run time; at
    ``b = 0`` it is infinite, as ``-out / b`` was."""
    printer = Printer({}, {})
    partial = RULES["div"].partials(Name("out"), Lit(numerator), Name("b"))[1]
    assert "/" not in printer.expr(partial, "f8")
    for b in (0.37, -1.7, 2.9):
        got = evaluate(partial, {"out": np.float64(numerator / b), "b": np.float64(b)})
        assert got == pytest.approx(-numerator / b**2, rel=1e-15)
    at_zero = evaluate(partial, {"out": np.float64(math.copysign(math.inf, numerator)), "b": np.float64(0.0)})
    assert at_zero == -math.inf * math.copysign(1.0, numerator)


@pad.kernel
def k_literal_over(i, x, y):
    y[i] = 1.0 / x[i] + 3.0 / (x[i] * x[i]) + 0.0 / x[i]


def test_a_literal_numerator_differentiates_compiled():
    x = np.linspace(0.5, 2.0, 9)
    pad.check_grad(
        lambda x, y: pad.launch(k_literal_over, 9, x, y),
        pad.Dup(x, np.zeros(9)),
        pad.Dup(np.zeros(9), np.zeros(9)),
    )


def test_every_function_is_in_the_corpus():
    source = (Path(__file__).parent / "corpus.py").read_text()
    missing = [shown for shown, *_ in FUNCTIONS if not re.search(rf"(?<![\w.]){re.escape(shown)}\(", source)]
    assert not missing, f"functions no corpus kernel calls: {missing}"


def test_costs_name_rules():
    assert set(COSTS) <= set(RULES), f"costs of no rule: {sorted(set(COSTS) - set(RULES))}"


def test_functions_table_is_rendered():
    assert render(check=True) == 0, "docs/kernels.md's table is stale: python -m scripts.kernel_functions"
