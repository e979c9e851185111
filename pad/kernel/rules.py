"""The one table of scalar operations: how each prints, what it returns, and its partial derivatives.

A rule's ``partials(out, *args)`` returns one expression per argument: the partial derivative of the result
with respect to that argument (``None`` where it is zero), written with ``out`` (the result) and the
arguments. Tangents are ``sum(partial * tangent)``; adjoints are ``arg_bar += partial * out_bar``. An op with
no partials is piecewise constant (comparisons, floor, integer casts): it never carries a derivative.

At a kink the partial is the minimal-norm subgradient (JAX's and PyTorch's choice), which central differences
agree with and which depends neither on the sign of a zero nor on the order of arguments: ``abs(x)`` has
``sign(x)`` (0 at 0, whether +0.0 or -0.0), and a tie of ``min``/``max`` gives each argument 0.5.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from pad.kernel.ir import Expr, Lit, call

Partials = Callable[..., list[Expr | None]]


@dataclass(frozen=True)
class Rule:
    template: str
    result: str
    partials: Partials | None = None
    cuda: str | None = None  # the template in CUDA kernels, where it differs (helpers of cuda_runtime.py)
    wide: bool = False  # the template computes in float64 (a runtime helper): cast back where float32

    @property
    def arity(self) -> int:
        return len(set(re.findall(r"\{(\d+)\}", self.template)))

    @property
    def params(self) -> tuple[str, ...]:
        """The arguments' names, for messages and docs (the partials' parameters after ``out``)."""
        if self.partials is not None:
            return tuple(inspect.signature(self.partials).parameters)[1:]
        return ("x", "y", "z")[: self.arity]


RULES: dict[str, Rule] = {}


def rule(
    name: str,
    template: str,
    result: str = "float",
    partials: Partials | None = None,
    cuda: str | None = None,
    wide: bool = False,
) -> None:
    """Register an op. ``result``: "promote" (NumPy promotion of the arguments), "float" (promotion, ints
    become float64), "same" (the first argument's type), "bool", "int", "f4" or "f8"."""
    RULES[name] = Rule(template, result, partials, cuda, wide)


def _sel(cond: Expr, a: Expr | float, b: Expr | float) -> Expr:
    return call("select", cond, a, b)


def _ind(cond: Expr) -> Expr:
    """1 where ``cond`` holds, else 0, in the precision of the value it goes into, without a branch."""
    return call("indicator", cond)


def _sign(x: Expr) -> Expr:
    """-1, 0 or 1, the partial of ``abs``: 0 at both zeros (``copysign(1, x)`` would follow the sign bit)."""
    return _ind(call("gt", x, 0.0)) - _ind(call("lt", x, 0.0))


def _winner(a: Expr, b: Expr) -> Expr:
    """The partial of ``min(a, b)`` in ``a`` and of ``max(a, b)`` in ``b``: 1 where ``a < b``, 0.5 at a tie."""
    return _ind(call("lt", a, b)) + 0.5 * _ind(call("eq", a, b))


def _or_nan(partial: Expr, a: Expr, b: Expr) -> Expr:
    """The partial of ``np.fmin``/``np.fmax`` in ``a``: 1 where ``b`` alone is NaN (the result is ``a``)."""
    return partial + _ind(call("ne", b, b)) * _ind(call("eq", a, a))


def _sqrt(x: Expr) -> Expr:
    return call("sqrt", x)


_LN2, _LN10, _PI = Lit(math.log(2.0), True), Lit(math.log(10.0), True), Lit(math.pi, True)
_TWO_OVER_SQRTPI = Lit(2.0 / math.sqrt(math.pi), True)


# Arithmetic.
rule("copy", "{0}", "same", lambda out, x: [Lit(1, True)])
rule("neg", "(-{0})", "same", lambda out, x: [Lit(-1, True)])
rule("add", "({0} + {1})", "promote", lambda out, a, b: [Lit(1, True), Lit(1, True)])
rule("sub", "({0} - {1})", "promote", lambda out, a, b: [Lit(1, True), Lit(-1, True)])
rule("mul", "({0} * {1})", "promote", lambda out, a, b: [b, a])


def _quotient(out: Expr, a: Expr, b: Expr) -> list[Expr | None]:
    """The partials of ``a / b``: ``1 / b`` and ``-out / b``, written with the one reciprocal ``1 / b`` that
    other partials with the divisor ``b`` share (compilers merge equal divisions; a GPU's exact division
    is a long sequence). The second is ``-out * out / a`` where ``a`` is a nonzero literal (``1.0 / x``): the
    same ``-a / b**2`` with no division left at run time."""
    inverse = 1.0 / b
    if isinstance(a, Lit) and not isinstance(a.value, bool) and a.value != 0:
        square = -(out * out)
        return [inverse, square if a.value == 1 else square * Lit(1.0 / float(a.value), True)]
    return [inverse, -out * inverse]


rule("div", "({0} / {1})", "float", _quotient)
rule(
    "pow",
    "({0} ** {1})",
    "promote",
    lambda out, a, b: [b * call("pow", a, b - 1.0), _sel(call("gt", a, 0.0), out * call("log", a), 0.0)],
)
rule("floordiv", "({0} // {1})", "promote")
rule("mod", "({0} % {1})", "promote", lambda out, a, b: [Lit(1, True), -call("floor", a / b)])
rule("min", "min({0}, {1})", "promote", lambda out, a, b: [_winner(a, b), _winner(b, a)])
rule("max", "max({0}, {1})", "promote", lambda out, a, b: [_winner(b, a), _winner(a, b)])
rule("abs", "abs({0})", "same", lambda out, x: [_sign(x)])
rule("fabs", "math.fabs({0})", "float", lambda out, x: [_sign(x)])
rule(
    "copysign",
    "math.copysign({0}, {1})",
    "float",
    lambda out, a, b: [_sign(a) * call("copysign", 1.0, b), None],
)
rule("select", "({1} if {0} else {2})", "promote")
# A boolean as 0.0 or 1.0 (derivatives of min/max): np.float32(...) where the value is float32 (emit.py).
rule("indicator", "np.float64({0})", "float")

# Elementary functions.
# The square root's partial names the reciprocal ``1 / out`` that a quotient by it shares (``_quotient``).
rule("sqrt", "math.sqrt({0})", "float", lambda out, x: [0.5 * (1.0 / out)])
rule("cbrt", "np.cbrt({0})", "float", lambda out, x: [1.0 / (3.0 * out * out)], cuda="cuda.cbrt({0})")
rule("square", "({0} * {0})", "same", lambda out, x: [2.0 * x])
rule("reciprocal", "np.reciprocal({0})", "same", lambda out, x: [-(out * out)], cuda="(1.0 / {0})")
rule("exp", "math.exp({0})", "float", lambda out, x: [out])
rule("exp2", "np.exp2({0})", "float", lambda out, x: [out * _LN2], cuda="math.pow(2.0, {0})")
rule("expm1", "math.expm1({0})", "float", lambda out, x: [out + 1.0])
rule("log", "math.log({0})", "float", lambda out, x: [1.0 / x])
rule("log2", "math.log2({0})", "float", lambda out, x: [1.0 / (x * _LN2)])
rule("log10", "math.log10({0})", "float", lambda out, x: [1.0 / (x * _LN10)])
rule("log1p", "math.log1p({0})", "float", lambda out, x: [1.0 / (1.0 + x)])
rule(
    "logaddexp",
    "np.logaddexp({0}, {1})",
    "float",
    lambda out, a, b: [call("exp", a - out), call("exp", b - out)],
    cuda="_logaddexp({0}, {1})",
)
rule(
    "logaddexp2",
    "np.logaddexp2({0}, {1})",
    "float",
    lambda out, a, b: [call("exp2", a - out), call("exp2", b - out)],
    cuda="_logaddexp2({0}, {1})",
)
rule("sin", "math.sin({0})", "float", lambda out, x: [call("cos", x)])
rule("cos", "math.cos({0})", "float", lambda out, x: [-call("sin", x)])
rule("tan", "math.tan({0})", "float", lambda out, x: [1.0 + out * out])
rule("asin", "math.asin({0})", "float", lambda out, x: [1.0 / _sqrt(1.0 - x * x)])
rule("acos", "math.acos({0})", "float", lambda out, x: [-1.0 / _sqrt(1.0 - x * x)])
rule("atan", "math.atan({0})", "float", lambda out, x: [1.0 / (1.0 + x * x)])
rule("atan2", "math.atan2({0}, {1})", "float", lambda out, y, x: [x / (x * x + y * y), -y / (x * x + y * y)])
rule("sinh", "math.sinh({0})", "float", lambda out, x: [call("cosh", x)])
rule("cosh", "math.cosh({0})", "float", lambda out, x: [call("sinh", x)])
rule("tanh", "math.tanh({0})", "float", lambda out, x: [1.0 - out * out])
rule("asinh", "math.asinh({0})", "float", lambda out, x: [1.0 / call("hypot", x, 1.0)])
rule("acosh", "math.acosh({0})", "float", lambda out, x: [1.0 / (_sqrt(x - 1.0) * _sqrt(x + 1.0))])
rule("atanh", "math.atanh({0})", "float", lambda out, x: [1.0 / ((1.0 - x) * (1.0 + x))])
rule(
    "hypot",
    "math.hypot({0}, {1})",
    "float",
    lambda out, x, y: [_sel(call("gt", out, 0.0), x / out, 0.0), _sel(call("gt", out, 0.0), y / out, 0.0)],
)
rule("degrees", "math.degrees({0})", "float", lambda out, x: [Lit(180.0 / math.pi, True)])
rule("radians", "math.radians({0})", "float", lambda out, x: [Lit(math.pi / 180.0, True)])
rule("erf", "math.erf({0})", "float", lambda out, x: [_TWO_OVER_SQRTPI * call("exp", -(x * x))])
rule("erfc", "math.erfc({0})", "float", lambda out, x: [-_TWO_OVER_SQRTPI * call("exp", -(x * x))])
rule("gamma", "math.gamma({0})", "float", lambda out, x: [out * call("digamma", x)])
rule("lgamma", "math.lgamma({0})", "float", lambda out, x: [call("digamma", x)])
rule(
    "digamma", "digamma({0})", "float", cuda="_digamma({0})", wide=True
)  # lgamma's derivative (pad.kernel.runtime)
rule(
    "sinc",
    "np.sinc({0})",
    "float",
    lambda out, x: [_sel(call("ne", x, 0.0), (call("cos", _PI * x) - out) / x, 0.0)],
    cuda="_sinc({0})",
)
rule("ldexp", "math.ldexp({0}, {1})", "same", lambda out, x, e: [call("ldexp", 1.0, e), None])
rule(
    "fmin",
    "np.fmin({0}, {1})",
    "promote",
    lambda out, a, b: [_or_nan(_winner(a, b), a, b), _or_nan(_winner(b, a), b, a)],
)
rule(
    "fmax",
    "np.fmax({0}, {1})",
    "promote",
    lambda out, a, b: [_or_nan(_winner(b, a), a, b), _or_nan(_winner(a, b), b, a)],
)
rule(
    "fmod",
    "np.fmod({0}, {1})",
    "promote",
    lambda out, a, b: [Lit(1, True), -call("rint", (a - out) / b)],
    cuda="math.fmod({0}, {1})",
)
rule(
    "fpow",
    "np.float_power({0}, {1})",
    "f8",
    lambda out, a, b: [b * call("fpow", a, b - 1.0), _sel(call("gt", a, 0.0), out * call("log", a), 0.0)],
    cuda="math.pow(float({0}), float({1}))",
)

# Piecewise constant: no derivative.
rule("floor", "np.floor({0})", "same", cuda="_floor({0})")
rule("ceil", "np.ceil({0})", "same", cuda="_ceil({0})")
rule("trunc", "np.trunc({0})", "same", cuda="_trunc({0})")
rule("rint", "np.rint({0})", "same", cuda="_rint({0})")
rule("sign", "np.sign({0})", "same", cuda="_sign({0})")
rule("ifloor", "math.floor({0})", "int")
rule("iceil", "math.ceil({0})", "int")
rule("itrunc", "math.trunc({0})", "int")
rule("round", "round({0})", "int", cuda="int(_rint({0}))")
rule("isnan", "math.isnan({0})", "bool")
rule("isinf", "math.isinf({0})", "bool")
rule("isfinite", "math.isfinite({0})", "bool")
rule("signbit", "np.signbit({0})", "bool", cuda="(math.copysign(1.0, {0}) < 0.0)")

# Casts.
rule("float", "float({0})", "f8", lambda out, x: [Lit(1, True)])
rule("f8", "np.float64({0})", "f8", lambda out, x: [Lit(1, True)])
rule("f4", "np.float32({0})", "f4", lambda out, x: [Lit(1, True)])
rule("int", "int({0})", "int")
rule("i8", "np.int64({0})", "int")
rule("i4", "np.int32({0})", "int")
rule("bool", "bool({0})", "bool")

# Comparisons and logic (booleans never carry derivatives).
for _name, _sym in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="), ("ne", "!=")):
    rule(_name, f"({{0}} {_sym} {{1}})", "bool")
rule("not", "(not {0})", "bool")
# Bitwise operators, on integers and booleans only (analysis.check_types).
for _name, _sym in (("bitand", "&"), ("bitor", "|"), ("bitxor", "^"), ("lshift", "<<"), ("rshift", ">>")):
    rule(_name, f"({{0}} {_sym} {{1}})", "promote")
rule("invert", "(~{0})", "same")
BITWISE = ("bitand", "bitor", "bitxor", "lshift", "rshift", "invert")
rule("and", "({0} and {1})", "bool")
rule("or", "({0} or {1})", "bool")

# Integer helpers the frontend and the reverse pass use.
rule("tripcount", "len(range({0}, {1}, {2}))", "int", cuda="_tripcount({0}, {1}, {2})")
rule("shape", "{0}.shape[{1}]", "int")
rule("item", "{0}[{1}]", "same")
rule(
    "tindex", "({0} + {1} if {0} < 0 else {0})", "int"
)  # t[k] for a tuple of {1} items (frontend.tuple_item)

# The functions kernels call, by name, and the rules they map to. A call passes exactly the rule's arguments
# (``Rule.params``), by position; docs/kernels.md lists these tables (scripts/kernel_functions.py).
_SAME_NAME: tuple[str, ...] = (
    "sqrt",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sin",
    "cos",
    "tan",
)
_SAME_NAME += ("sinh", "cosh", "tanh", "hypot", "copysign", "fabs", "degrees", "radians")
_SAME_NAME += ("isnan", "isinf", "isfinite")
#: ``math.<name>`` -> rule.
MATH: dict[str, str] = {
    **{n: n for n in _SAME_NAME},
    **{n: n for n in ("asin", "acos", "atan", "atan2", "asinh", "acosh", "atanh", "erf", "erfc")},
    **{n: n for n in ("gamma", "lgamma", "ldexp", "cbrt")},
    "pow": "pow",
    "floor": "ifloor",
    "ceil": "iceil",
    "trunc": "itrunc",
}
#: ``np.<name>`` -> rule (NumPy 2's aliases ``np.asin``, ``np.pow``, ... are the same functions).
NUMPY: dict[str, str] = {
    **{n: n for n in _SAME_NAME},
    **{n: n for n in ("cbrt", "square", "reciprocal", "logaddexp", "logaddexp2", "sinc", "fmin", "fmax")},
    **{n: n for n in ("fmod", "floor", "ceil", "trunc", "rint", "sign", "signbit")},
    "add": "add",
    "subtract": "sub",
    "multiply": "mul",
    "divide": "div",
    "true_divide": "div",
    "floor_divide": "floordiv",
    "negative": "neg",
    "positive": "copy",
    "power": "pow",
    "float_power": "fpow",
    "remainder": "mod",
    "mod": "mod",
    "absolute": "abs",
    "abs": "abs",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arctan2": "atan2",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
    "deg2rad": "radians",
    "rad2deg": "degrees",
    "minimum": "min",
    "maximum": "max",
    "float32": "f4",
    "float64": "f8",
    "int64": "i8",
    "int32": "i4",
}
#: Python's builtins (``min`` and ``max`` also take more than two arguments).
BUILTINS: dict[str, str] = {
    "min": "min",
    "max": "max",
    "abs": "abs",
    "pow": "pow",
    "round": "round",
    "int": "int",
    "float": "float",
    "bool": "bool",
}

#: What computing an op again costs, in additions, where it is more (reverse mode weighs keeping a value the
#: reverse sweep needs against recomputing it): divisions and square roots several, library functions many.
COSTS: dict[str, int] = {
    **{n: 4 for n in ("div", "floordiv", "mod", "sqrt", "reciprocal")},
    **{n: 16 for n in ("pow", "fpow", "fmod", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10")},
    **{n: 16 for n in ("log1p", "gamma", "lgamma", "digamma")},
    **{n: 16 for n in ("logaddexp", "logaddexp2", "sin", "cos", "tan", "asin", "acos", "atan", "atan2")},
    **{n: 16 for n in ("sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "hypot", "erf", "erfc", "sinc")},
}
