"""``pad.autodiff(f, ..., fuse=True)``: the last launch's adjoint also makes its outputs.

Same inputs and seeds with and without fusing: the primal results, the shadows and the Active derivatives
agree, on every corpus kernel; and the kernels built for fusing do fuse.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import pad
from pad.kernel.emit import DERIVATIVE_FLAGS
from pad.parallel import LaunchRecord
from tests.unit.corpus import CASES


def run(case, fuse: bool):
    rng = np.random.default_rng(zlib.crc32(case.name.encode()) + 7)
    args = case.make_args(rng, case.dtype)
    seeded = [
        pad.Dup(a.value, rng.uniform(-1, 1, a.value.shape).astype(a.value.dtype))
        if isinstance(a, pad.Dup) and isinstance(a.value, np.ndarray)
        else a
        for a in args
    ]
    active = pad.autodiff(case.program, *seeded, fuse=fuse)
    arrays = [a.value for a in seeded if isinstance(a, (pad.Dup, pad.Const)) and hasattr(a.value, "shape")]
    shadows = [a.shadow for a in seeded if isinstance(a, pad.Dup) and hasattr(a.value, "shape")]
    return arrays, shadows, active


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fused_gradient_equals_unfused(case):
    plain, fused = run(case, False), run(case, True)
    rtol = 1e-12 if case.dtype == np.float64 else 1e-5
    for a, b in zip(plain[0] + plain[1], fused[0] + fused[1], strict=True):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(fused[2], plain[2], rtol=rtol, atol=rtol)


@pad.kernel
def energy(i, x, q, e):
    total = 0.0
    for j in range(x.shape[0]):
        d = x[i] - x[j]
        total += q[j] * d * d
    e[i] = total


@pad.kernel
def scale(i, e, y):
    y[i] = 2.0 * e[i]


def _spy_reverse(monkeypatch) -> list[tuple[str, bool]]:
    """(kernel, whether its fused adjoint ran) for every launch reversed from now on."""
    runs = []
    reverse = LaunchRecord.reverse

    def spy(self):
        runs.append((self.variant.kernel, "(fused, cpu)" in self.variant.source))
        reverse(self)

    monkeypatch.setattr(LaunchRecord, "reverse", spy)
    return runs


def test_last_launch_fuses_and_earlier_ones_run_when_needed(monkeypatch):
    rng = np.random.default_rng(3)
    x, q = rng.uniform(size=64), rng.uniform(size=64)
    fused_runs = _spy_reverse(monkeypatch)

    def f(x, q, e, y):
        pad.launch(energy, 64, x, q, e)  # deferred, then run by the next launch, which reads e
        pad.launch(scale, 64, e, y)

    e, y = np.zeros(64), np.zeros(64)
    de, dy = np.zeros(64), np.ones(64)
    pad.autodiff(
        f, pad.Dup(x, np.zeros(64)), pad.Dup(q, np.zeros(64)), pad.Dup(e, de), pad.Dup(y, dy), fuse=True
    )
    expected = ((x[:, None] - x[None, :]) ** 2 * q[None, :]).sum(axis=1)
    np.testing.assert_allclose(e, expected, rtol=1e-12)
    np.testing.assert_allclose(y, 2 * expected, rtol=1e-12)
    e2 = np.zeros(64)
    pad.autodiff(
        lambda x, q, e: pad.launch(energy, 64, x, q, e),
        pad.Dup(x, np.zeros(64)),
        pad.Dup(q, np.zeros(64)),
        pad.Dup(e2, np.ones(64)),
        fuse=True,
    )
    np.testing.assert_allclose(e2, expected, rtol=1e-12)  # made by the fused adjoint
    # First autodiff: energy's primal ran when scale needed e (plain adjoint); scale has no loop to fuse.
    # Second: energy was the last launch, so its fused adjoint made e.
    assert fused_runs == [("scale", False), ("energy", False), ("energy", True)]


@pad.kernel
def energy_and_twice(i, x, q, e, twice):
    total = 0.0
    for j in range(x.shape[0]):
        d = x[i] - x[j]
        total += q[j] * d * d
    e[i] = total
    twice[i] = 2.0 * total


def test_outputs_nobody_needs_leave_the_last_launch_to_its_plain_adjoint(monkeypatch):
    """``DupNoNeed`` outputs of the last launch: neither its primal nor its fused adjoint runs, only the plain
    adjoint (the output keeps what it held); the gradients are those of a run that made every output."""
    rng = np.random.default_rng(5)
    x, q = rng.uniform(size=64), rng.uniform(size=64)
    seed = rng.uniform(0.5, 1.5, 64)

    def f(x, q, e):
        pad.launch(energy, 64, x, q, e)

    made = {"dx": np.zeros(64), "dq": np.zeros(64)}
    pad.autodiff(f, pad.Dup(x, made["dx"]), pad.Dup(q, made["dq"]), pad.Dup(np.zeros(64), seed.copy()))
    runs = _spy_reverse(monkeypatch)
    left = {"dx": np.zeros(64), "dq": np.zeros(64)}
    e, de = np.full(64, 7.0), seed.copy()
    pad.autodiff(f, pad.Dup(x, left["dx"]), pad.Dup(q, left["dq"]), pad.DupNoNeed(e, de), fuse=True)
    assert runs == [("energy", False)]
    np.testing.assert_array_equal(e, 7.0)  # not made: no primal, no fused adjoint
    np.testing.assert_array_equal(de, 0.0)  # the seed is consumed as a Dup's
    for name in made:
        np.testing.assert_allclose(left[name], made[name], rtol=1e-12, atol=0.0)
        assert np.abs(made[name]).min() > 0.0


def test_an_output_still_needed_keeps_the_fused_adjoint_and_a_later_read_the_primal(monkeypatch):
    """A last launch that also writes a ``Dup`` makes its outputs (fused), the unneeded one too; a launch whose
    unneeded output a later launch reads runs forward first, as without ``DupNoNeed``."""
    runs = _spy_reverse(monkeypatch)
    rng = np.random.default_rng(6)
    x, q = rng.uniform(size=64), rng.uniform(size=64)
    expected = ((x[:, None] - x[None, :]) ** 2 * q[None, :]).sum(axis=1)
    e, twice = np.zeros(64), np.zeros(64)
    pad.autodiff(
        lambda x, q, e, twice: pad.launch(energy_and_twice, 64, x, q, e, twice),
        pad.Dup(x, np.zeros(64)),
        pad.Const(q),
        pad.DupNoNeed(e, np.ones(64)),
        pad.Dup(twice, np.ones(64)),
        fuse=True,
    )
    np.testing.assert_allclose(twice, 2 * expected, rtol=1e-12)
    np.testing.assert_allclose(e, expected, rtol=1e-12)

    def f(x, q, e, y):
        pad.launch(energy, 64, x, q, e)
        pad.launch(scale, 64, e, y)

    e, y = np.zeros(64), np.zeros(64)
    pad.autodiff(
        f, pad.Dup(x, np.zeros(64)), pad.Const(q), pad.Dup(e, np.zeros(64)), pad.DupNoNeed(y, np.ones(64)),
        fuse=True,
    )  # fmt: skip
    np.testing.assert_allclose(e, expected, rtol=1e-12)  # a later launch read it: its primal ran
    assert runs == [("energy_and_twice", True), ("scale", False), ("energy", False)]


def test_check_grad_takes_outputs_nobody_needs_as_dup():
    rng = np.random.default_rng(7)
    x, q = rng.uniform(size=16), rng.uniform(size=16)
    pad.check_grad(
        lambda x, q, e: pad.launch(energy, 16, x, q, e),
        pad.Dup(x, np.zeros(16)),
        pad.Dup(q, np.zeros(16)),
        pad.DupNoNeed(np.zeros(16), np.zeros(16)),
    )


def test_energy_kernel_has_a_fused_variant():
    x = np.zeros(4)
    fused = energy.variant((x, x, x), "fused", (True, True, True))
    assert fused.fuses
    plain = energy.variant((x, x, x), "adjoint", (True, True, True))
    assert plain.source.count("for ") == fused.source.count("for ")  # no forward loop added back


def test_only_plain_cpu_adjoints_fuse_multiplies_and_adds():
    """A plain adjoint makes derivatives only, under fast-math flags; the kernels that make the program's values (the
    primal, the tangent, the fused adjoint) round as the primal does, so a gradient run's values are the
    primal run's to the bit."""
    x = np.linspace(0.5, 1.5, 8)
    args = (x, x.copy(), np.zeros(8))

    def decorator(mode: str) -> str:
        variant = energy.variant(args, mode, None if mode == "primal" else (True, True, True))
        return next(line for line in variant.source.splitlines() if "@njit" in line)

    decorators = {mode: decorator(mode) for mode in ("adjoint", "fused", "tangent", "primal")}
    assert f"fastmath={DERIVATIVE_FLAGS}" in decorators["adjoint"]
    for mode in ("fused", "tangent", "primal"):
        assert "fastmath=False" in decorators[mode], mode


WIDTH = 0.1


@pad.kernel
def k_binned_squares(i, x, h):
    h[int(x[i] / WIDTH)] += x[i] * x[i]


def test_an_adjoint_that_makes_integers_from_floats_recomputes_them_exactly():
    """0.3 / 0.1 rounds below 3, 0.3 * (1 / 0.1) to 3: under the derivatives' fast-math flags the adjoint
    would put x = 0.3 in another bin than the primal did, and read that bin's seed. It keeps exact
    arithmetic instead, and gets the primal's bins."""
    x = np.array([0.3, 0.05, 0.25])
    assert int(0.3 / WIDTH) == 2 and int(0.3 * (1 / WIDTH)) == 3
    hbar = np.array([0.0, 0.0, 1.0, 5.0])
    dx = np.zeros(3)
    pad.autodiff(
        lambda x, h: pad.launch(k_binned_squares, 3, x, h), pad.Dup(x, dx), pad.Dup(np.zeros(4), hbar)
    )
    np.testing.assert_allclose(dx, [2 * 0.3 * 1.0, 0.0, 2 * 0.25 * 1.0])
    source = k_binned_squares.variant((x, np.zeros(4)), "adjoint", (True, True)).source
    assert "fastmath=False" in next(line for line in source.splitlines() if "@njit" in line)


@pad.kernel
def k_signed(i, x, y):
    y[i] = math.copysign(x[i] * x[i], x[i] - 0.5)


@pad.kernel
def k_strided(i, x, y):
    y[i] = x[int(i // 2)] * 3.0


def test_exact_adjoints_are_those_that_read_a_sign_or_make_integers_from_floats():
    """A float's sign read (``copysign``) keeps the adjoint exact; an integer made from integers does not."""
    x, y = np.linspace(0.1, 0.9, 8), np.zeros(8)

    def flags(k) -> str:
        source = k.variant((x, y), "adjoint", (True, True)).source
        return next(line for line in source.splitlines() if "@njit" in line)

    assert "fastmath=False" in flags(k_signed)
    assert f"fastmath={DERIVATIVE_FLAGS}" in flags(k_strided)
