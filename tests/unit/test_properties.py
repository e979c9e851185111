"""Property-based tests: random straight-line and branchy kernels against finite differences."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pad

UNARY = [
    "math.sin({})",
    "math.cos({})",
    "math.exp(0.3 * {})",
    "math.sqrt(1.5 + {})",
    "math.tanh({})",
    "math.log(2.0 + {})",
    "({} * {})",
    "(-{})",
]
BINARY = [
    "({} + {})",
    "({} - {})",
    "({} * {})",
    "({} / (2.5 + {}))",
    "min({}, {})",
    "max({}, {})",
    "math.atan2({}, 1.5 + {})",
]
_counter = itertools.count()


@st.composite
def expressions(draw, names, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(names))
    if draw(st.booleans()):
        op = draw(st.sampled_from(UNARY))
        inner = draw(expressions(names, depth - 1))
        return op.format(inner, inner)
    op = draw(st.sampled_from(BINARY))
    return op.format(draw(expressions(names, depth - 1)), draw(expressions(names, depth - 1)))


@st.composite
def kernels(draw, branchy):
    names = ["a", "b"]
    lines = ["    a = x[i]", "    b = y[i]"]
    for k in range(draw(st.integers(1, 5))):
        target = f"v{k}"
        if branchy and draw(st.booleans()):
            cond = f"{draw(expressions(names, 1))} > {draw(st.floats(-0.5, 0.5)):.3f}"
            lines += [
                f"    if {cond}:",
                f"        {target} = {draw(expressions(names))}",
                "    else:",
                f"        {target} = {draw(expressions(names))}",
            ]
        else:
            lines.append(f"    {target} = {draw(expressions(names))}")
        names.append(target)
    lines.append(f"    out[i] = {draw(expressions(names))}")
    return "\n".join(["@pad.kernel", "def generated(i, x, y, out):", *lines])


def load(source: str, tmp: Path):
    """Kernels need a source file (pad reads their source): write one and import it."""
    name = f"pad_property_kernel_{next(_counter)}"
    path = tmp / f"{name}.py"
    path.write_text("import math\n\nimport pad\n\n\n" + source + "\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.generated


def check(source: str, tmp: Path, seed: int) -> None:
    k = load(source, tmp)
    rng = np.random.default_rng(seed)
    # Inputs kept away from kinks: branches and min/max switch only far from these points.
    x = rng.uniform(-1, 1, 8)
    y = rng.uniform(-1, 1, 8)

    def program(x, y, out):
        pad.launch(k, x.shape[0], x, y, out)

    try:
        pad.check_grad(
            program,
            pad.Dup(x, np.zeros(8)),
            pad.Dup(y, np.zeros(8)),
            pad.Dup(np.zeros(8), np.zeros(8)),
            rtol=1e-5,
            atol=1e-7,
        )
    except AssertionError as err:
        if "forward vs reverse" in str(err):
            raise AssertionError(f"{err}\n{source}") from None
        # Finite differences may straddle a branch or a min/max switch: confirm with a smaller step.
        raise AssertionError(f"{err}\n{source}") from None


SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(source=kernels(branchy=False), seed=st.integers(0, 2**16))
def test_straight_line_kernels(source, seed, tmp_path_factory):
    check(source, tmp_path_factory.mktemp("k"), seed)


@SETTINGS
@given(source=kernels(branchy=True), seed=st.integers(0, 2**16))
def test_branchy_kernels(source, seed, tmp_path_factory):
    check(source, tmp_path_factory.mktemp("k"), seed)
