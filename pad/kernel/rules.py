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


RULES: dict[str, Rule] = {}


def rule(
    name: str, template: str, result: str = "float", partials: Partials | None = None, cuda: str | None = None
) -> None:
    """Register an op. ``result``: "promote" (NumPy promotion of the arguments), "float" (promotion, ints
    become float64), "same" (the first argument's type), "bool", "int", "f4" or "f8"."""
    RULES[name] = Rule(template, result, partials, cuda)


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


def _sqrt(x: Expr) -> Expr:
    return call("sqrt", x)


# Arithmetic.
rule("copy", "{0}", "same", lambda out, x: [Lit(1, True)])
rule("neg", "(-{0})", "same", lambda out, x: [Lit(-1, True)])
rule("add", "({0} + {1})", "promote", lambda out, a, b: [Lit(1, True), Lit(1, True)])
rule("sub", "({0} - {1})", "promote", lambda out, a, b: [Lit(1, True), Lit(-1, True)])
rule("mul", "({0} * {1})", "promote", lambda out, a, b: [b, a])
rule("div", "({0} / {1})", "float", lambda out, a, b: [1.0 / b, -out / b])
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

# Elementary functions (math.* and their numpy twins map here).
rule("sqrt", "math.sqrt({0})", "float", lambda out, x: [0.5 / out])
rule("cbrt", "np.cbrt({0})", "float", lambda out, x: [1.0 / (3.0 * out * out)], cuda="cuda.cbrt({0})")
rule("exp", "math.exp({0})", "float", lambda out, x: [out])
rule("log", "math.log({0})", "float", lambda out, x: [1.0 / x])
rule("log1p", "math.log1p({0})", "float", lambda out, x: [1.0 / (1.0 + x)])
rule("expm1", "math.expm1({0})", "float", lambda out, x: [out + 1.0])
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
rule(
    "hypot",
    "math.hypot({0}, {1})",
    "float",
    lambda out, x, y: [_sel(call("gt", out, 0.0), x / out, 0.0), _sel(call("gt", out, 0.0), y / out, 0.0)],
)
rule("floor", "np.floor({0})", "same", cuda="_floor({0})")
rule("ceil", "np.ceil({0})", "same", cuda="_ceil({0})")
rule("ifloor", "math.floor({0})", "int")
rule("iceil", "math.ceil({0})", "int")

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
rule("and", "({0} and {1})", "bool")
rule("or", "({0} or {1})", "bool")

# Integer helpers the frontend and the reverse pass use.
rule("tripcount", "len(range({0}, {1}, {2}))", "int", cuda="_tripcount({0}, {1}, {2})")
rule("shape", "{0}.shape[{1}]", "int")
rule("item", "{0}[{1}]", "same")

#: ``math.x`` / ``np.x`` names that map to a rule, and builtins.
FUNCTIONS: dict[str, str] = {
    **{
        n: n
        for n in ("sqrt", "cbrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "sinh", "cosh", "tanh")
    },
    **{n: n for n in ("asin", "acos", "atan", "atan2", "hypot", "copysign", "fabs")},
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "arctan2": "atan2",
    "power": "pow",
    "pow": "pow",
    "absolute": "abs",
    "minimum": "min",
    "maximum": "max",
    "float32": "f4",
    "float64": "f8",
    "int64": "i8",
    "int32": "i4",
}
MATH_ONLY: dict[str, str] = {"floor": "ifloor", "ceil": "iceil"}
NUMPY_ONLY: dict[str, str] = {"floor": "floor", "ceil": "ceil", "abs": "abs"}
BUILTINS: dict[str, str] = {
    "min": "min",
    "max": "max",
    "abs": "abs",
    "int": "int",
    "float": "float",
    "bool": "bool",
}
