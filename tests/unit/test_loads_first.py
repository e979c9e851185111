"""CUDA adjoints read what each thread alone touches before their stores and atomic adds
(``optimize.owned_loads_first``): the seeds of the outputs, the inputs' own shadows."""

from __future__ import annotations

import re

import numpy as np

import pad
from pad.kernel.ir import ArrayKind, Assign, Elem, If, Lit, Name, Namer, Store, While, call
from pad.kernel.optimize import owned_loads_first


@pad.kernel
def k_gather_scale(i, idx, x, s, y):
    """A gather (its adjoint adds atomically into the shared elements of x's shadow), then an output loop."""
    t = 0.0
    for k in range(4):
        t += x[idx[k, i]] * x[idx[k, i]]
    for k in range(3):
        y[k, i] = t * s[i] * (k + 1)


@pad.kernel
def k_branches(i, c, x, y, z):
    """z[i] is written on both ways through the body, y[i] on one."""
    if c[i] > 0.0:
        y[i] = x[i] * x[i]
        z[i] = 2.0 * x[i]
    else:
        z[i] = 3.0 * x[i] * x[i]


@pad.kernel
def k_early_return(i, m, x, y):
    """y has m elements, fewer than the launch's indices."""
    if i >= m[0]:
        return
    y[i] = x[i] * x[i]


@pad.func
def store_row(j, row, v, y):
    """An output at the helper's own names for the launch index and for a literal row."""
    y[row, j] = v


@pad.func
def store_pair(j, t, y):
    """Two rows of outputs, each through a helper of its own."""
    store_row(j, 0, t, y)
    store_row(j, 1, t * t, y)


@pad.kernel
def k_helper_outputs(i, idx, x, y, z):
    """A helper's outputs, then a gather's (whose adjoint, run first, adds atomically into x's shadow)."""
    store_pair(i, x[idx[0, i]] * x[i], y)
    z[i] = x[idx[1, i]] * x[idx[1, i]]


def gather_args(n: int = 6) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(3)
    idx = rng.integers(0, n, size=(4, n)).astype(np.int32)
    return idx, rng.uniform(0.5, 1.5, n), rng.uniform(0.5, 1.5, n), np.zeros((3, n))


def branch_args(n: int = 6) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(4)
    return rng.uniform(-1, 1, n), rng.uniform(0.5, 1.5, n), np.zeros(n), np.zeros(n)


def helper_args(n: int = 6) -> tuple[np.ndarray, ...]:
    idx, x, _, _ = gather_args(n)
    return idx, x, np.zeros((2, n)), np.zeros(n)


def early_return_args(n: int = 6) -> tuple[np.ndarray, ...]:
    return np.array([n - 2]), np.linspace(0.5, 1.5, n), np.zeros(n - 2)


def _lines(kernel, args, active) -> list[str]:
    source = kernel.variant(args, "adjoint", active, target="cuda").source
    return [line.strip() for line in source.splitlines()]


def _first_atomic(lines: list[str]) -> int:
    return next(k for k, line in enumerate(lines) if "cuda.atomic.add" in line)


def test_seeds_and_own_shadows_are_read_before_the_scatter():
    lines = _lines(k_gather_scale, gather_args(), (False, True, True, True))
    hoisted = [line for line in lines[: _first_atomic(lines)] if line.startswith("_first")]
    loaded = {line.split(" = ")[1] for line in hoisted}
    # the output loop is unrolled so that each seed is an element of its own
    assert {f"_b_y[{k}, i]" for k in range(3)} | {"_b_s[i]"} <= loaded
    assert not any("_b_x" in x for x in loaded)  # shared with other threads' atomic adds
    # the first add into the thread's own element starts from the value read first; later adds stay adds
    assert any(line.startswith("_b_s[i] = _first") for line in lines)


def test_a_helpers_name_for_the_launch_index_is_seen_through():
    lines = _lines(k_helper_outputs, helper_args(), (False, True, True, True))
    hoisted = {line.split(" = ")[1] for line in lines[: _first_atomic(lines)] if line.startswith("_first")}
    assert {"_b_y[0, i]", "_b_y[1, i]", "_b_z[i]"} <= hoisted


def test_a_read_on_one_way_through_a_branch_stays_there():
    lines = _lines(k_branches, branch_args(), (False, True, True, True))
    loaded = {line.split(" = ")[1] for line in lines if line.startswith("_first")}
    assert "_b_z[i]" in loaded  # read on both ways: in bounds wherever the thread goes
    assert "_b_y[i]" not in loaded


def test_a_read_after_an_early_return_stays_there():
    lines = _lines(k_early_return, early_return_args(), (False, True, True))
    assert not any(line.startswith("_first") for line in lines)  # y[i] is out of bounds past m


def test_cpu_adjoints_are_left_as_they_were():
    source = k_gather_scale.variant(gather_args(), "adjoint", (False, True, True, True)).source
    assert not re.search(r"_first\d", source)


def test_only_the_first_read_takes_the_value_from_the_start():
    """Read in a branch's test, stored in the branch, read again: the test reads the value from the start,
    the read after the store the element; a ``while`` test, evaluated again each time, stays as it is."""
    i, a, b = Name("i"), ArrayKind(np.dtype(np.float64), 1), ArrayKind(np.dtype(np.float64), 1)
    body = [
        If(
            call("gt", Elem("a", (i,)), Lit(0.0)),
            [Store("a", (i,), Lit(1.0)), Assign("z", Elem("a", (i,)))],
            [Store("a", (i,), Lit(2.0))],
        ),
        While([], call("gt", Elem("b", (i,)), Lit(0.0)), [Store("b", (i,), Lit(0.0))]),
    ]
    out = owned_loads_first(body, "i", {"a": a, "b": b}, {}, Namer())
    first, branch, loop = out
    assert isinstance(first, Assign) and first.value == Elem("a", (i,))
    assert isinstance(branch, If) and branch.cond == call("gt", Name(first.target), Lit(0.0))
    assert branch.body[1] == Assign("z", Elem("a", (i,)))
    assert loop == body[1]
