"""A NumPy write to an array under differentiation between pad operations is refused with a message naming
the array and the fix, never ignored; pad.copy/scale/axpy/fill write it differentiably."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import pad

N = 12


@pad.kernel
def heat(i, c, u, unew):
    j = i + 1
    unew[j] = u[j] + c * (u[j - 1] - 2.0 * u[j] + u[j + 1])


def start() -> np.ndarray:
    return np.sin(np.linspace(0.0, 3.0, N))


def copy_back(c, u, unew):
    for _ in range(3):
        pad.launch(heat, N - 2, c, u, unew)
        u[:] = unew


def with_pad_copy(c, u, unew):
    for _ in range(3):
        pad.launch(heat, N - 2, c, u, unew)
        pad.copy(u, unew)


def scaled_after(c, u, unew):
    pad.launch(heat, N - 2, c, u, unew)
    unew *= 2.0


def copyto(c, u, unew):
    pad.launch(heat, N - 2, c, u, unew)
    np.copyto(u, unew)


def filled(c, u, unew):
    pad.launch(heat, N - 2, c, u, unew)
    u.fill(0.0)


@pytest.mark.parametrize(
    ("program", "source", "name"),
    [
        (copy_back, "u[:] = unew", "argument 1 ('u')"),
        (scaled_after, "unew *= 2.0", "argument 2 ('unew')"),
        (copyto, "np.copyto(u, unew)", "argument 1 ('u')"),
        (filled, "u.fill(0.0)", "argument 1 ('u')"),
    ],
)
@pytest.mark.parametrize("mode", ["autodiff", "fwddiff"])
def test_numpy_write_is_refused_naming_array_line_and_fix(program, source, name, mode):
    u, unew = start(), start()
    args = (
        pad.Active(0.1) if mode == "autodiff" else pad.Dup(0.1, 1.0),
        pad.Dup(u, np.ones(N)),
        pad.Dup(unew, np.zeros(N)),
    )
    with pytest.raises(ValueError) as info:
        getattr(pad, mode)(program, *args)
    message = str(info.value)
    assert "test_numpy_writes.py:" in message and f"`{source}` writes {name} with NumPy" in message
    assert "pad.copy(dst, src) for dst[...] = src" in message and "pad.scale(x, a) for x *= a" in message
    assert u.flags.writeable and unew.flags.writeable  # given back writable, also after an error


class Solver:
    def step(self, c, u, unew):
        filled(c, u, unew)


@pytest.mark.parametrize("program", [Solver().step, functools.partial(filled)], ids=["method", "partial"])
def test_a_bound_method_or_a_partial_names_the_array_too(program):
    u, unew = start(), start()
    with pytest.raises(ValueError, match=r"`u.fill\(0.0\)` writes argument 1 \('u'\) with NumPy"):
        pad.autodiff(program, pad.Active(0.1), pad.Dup(u, np.ones(N)), pad.Dup(unew, np.zeros(N)))


def test_the_copy_back_written_with_pad_copy_is_differentiated():
    """The issue's heat equation: dJ/dc was 0.0 where finite differences give -1.56; now they agree."""
    errors = pad.check_grad(
        with_pad_copy, pad.Active(0.1), pad.Dup(start(), np.zeros(N)), pad.Dup(start(), np.zeros(N))
    )
    assert errors["fd"] < 1e-6

    def objective(c: float) -> float:
        u, unew = start(), start()
        copy_back(c, u, unew)  # plain NumPy outside autodiff is fine
        return float(u.sum())

    u, unew = start(), start()
    (dc,) = pad.autodiff(with_pad_copy, pad.Active(0.1), pad.Dup(u, np.ones(N)), pad.Dup(unew, np.zeros(N)))
    assert dc == pytest.approx((objective(0.1 + 1e-6) - objective(0.1 - 1e-6)) / 2e-6, rel=1e-6)
    assert dc < -1.0


@pytest.mark.parametrize(
    "make",
    [
        lambda rng: rng.uniform(0.5, 1.5, 7),  # 1-D
        lambda rng: rng.uniform(0.5, 1.5, (4, 6))[:, 1:5],  # a 2-D view, not contiguous
        lambda rng: rng.uniform(0.5, 1.5, (2, 3, 4)),  # contiguous, flattened
        lambda rng: rng.uniform(0.5, 1.5, 9).astype(np.float32),
    ],
    ids=["1-D", "2-D view", "3-D", "float32"],
)
def test_array_operations_are_differentiated(make):
    rng = np.random.default_rng(3)
    x, y = make(rng), make(rng)
    tol = {"rtol": 3e-3, "atol": 1e-4} if x.dtype == np.float32 else {}

    def program(a, x, y):
        pad.axpy(a, x, y)  # y += a x
        pad.scale(y, a)  # y *= a
        pad.copy(x, y)  # x[...] = y
        pad.scale(y, 0.5)
        pad.fill(y, 0.25)  # y's old values no longer matter
        pad.axpy(2.0, x, y)

    pad.check_grad(
        program, pad.Active(1.3), pad.Dup(x, np.zeros_like(x)), pad.Dup(y, np.zeros_like(y)), **tol
    )
    xs, ys = x.copy(), y.copy()
    program(1.3, x, y)  # outside autodiff: the same NumPy semantics
    a = 1.3
    ys = (ys + a * xs) * a
    np.testing.assert_allclose(x, ys, rtol=1e-6)
    np.testing.assert_allclose(y, 0.25 + 2.0 * ys, rtol=1e-6)


def test_array_operations_refuse_other_shapes():
    with pytest.raises(ValueError, match=r"pad.copy: the arrays' shapes \(3,\) and \(4,\) differ"):
        pad.copy(np.zeros(3), np.zeros(4))
    with pytest.raises(TypeError, match="views of 3 dimensions must be C-contiguous"):
        pad.fill(np.zeros((3, 4, 5))[:, 1:], 1.0)


@pad.kernel
def k_double(i, x, y):
    y[i] = 2.0 * x[i]


def test_kernels_get_writable_aliases_compiled_once():
    """Read-only arrays are a different numba type: kernels see writable aliases of the same type, views
    included, so nothing compiles twice."""
    x, y = np.ones(6), np.zeros(6)

    def program(x, y):
        pad.launch(k_double, 6, x, y)
        pad.launch(k_double, 3, x[3:], y[:3])  # views of read-only arrays

    dx = np.zeros(6)
    pad.autodiff(program, pad.Dup(x, dx), pad.Dup(y, np.ones(6)))
    np.testing.assert_array_equal(y, 2.0)
    np.testing.assert_array_equal(dx, [0, 0, 0, 4, 4, 4])  # x[3:] reaches y twice
    for mode, active in (("primal", None), ("adjoint", (True, True))):
        launcher = k_double.variant((x, y), mode, active).launcher
        assert len(launcher.signatures) == 1 and "readonly" not in str(launcher.signatures[0])


def test_const_arrays_and_python_reads_are_free():
    """Only arrays under differentiation are protected: a Const array may change, and reads are fine."""
    scale = np.ones(6)

    @pad.kernel
    def k_scaled(i, s, x, y):
        y[i] = s[i] * x[i]

    def program(x, y):
        total = float(x.sum())  # a Python read: a constant for differentiation
        scale[:] = total
        pad.launch(k_scaled, 6, scale, x, y)

    dx = np.zeros(6)
    pad.autodiff(program, pad.Dup(np.ones(6), dx), pad.Dup(np.zeros(6), np.ones(6)))
    np.testing.assert_array_equal(dx, 6.0)


@pad.kernel
def k_square(i, x, t):
    t[i] = x[i] * x[i]


@pad.kernel
def k_use(i, t, y):
    y[i] = t[i] * t[i]


def scratch_written(x, y):
    t = np.zeros_like(x)  # an array the program allocates: pad does not protect it
    pad.launch(k_square, x.shape[0], x, t)
    t *= 2.0
    pad.launch(k_use, x.shape[0], t, y)


def test_pad_debug_names_a_write_to_an_unprotected_array():
    x = np.linspace(1.0, 2.0, 5)
    with pad.debug(), pytest.raises(ValueError) as info:
        pad.autodiff(scratch_written, pad.Dup(x, np.zeros(5)), pad.Dup(np.zeros(5), np.ones(5)))
    assert str(info.value).startswith(
        "pad.launch(k_use): an array pad.launch(k_square) wrote (shape (5,), float64)"
    )
    assert "write pad did not see" in str(info.value) and "pad.copy/scale/axpy/fill" in str(info.value)


def test_check_grad_names_the_cause_it_finds():
    with pytest.raises(AssertionError) as info:
        pad.check_grad(
            scratch_written, pad.Dup(np.linspace(1.0, 2.0, 5), np.zeros(5)), pad.Dup(np.zeros(5), np.zeros(5))
        )
    assert (
        "rerun under PAD_DEBUG=1, pad found: pad.launch(k_use): an array pad.launch(k_square) wrote"
        in str(info.value)
    )


@pad.kernel
def k_gather(i, idx, x, y):
    y[i] = x[idx[i]] * x[idx[i]]


def test_pad_debug_names_a_changed_const_the_adjoint_reads():
    idx = np.arange(4)

    def program(x, y):
        pad.launch(k_gather, 4, idx, x, y)
        idx[:] = idx[::-1].copy()  # a Const index array: the adjoint would gather through the new one

    with (
        pad.debug(),
        pytest.raises(ValueError, match=r"pad.launch\(k_gather\): argument 1 was changed after the launch"),
    ):
        pad.autodiff(
            program, pad.Dup(np.linspace(1.0, 2.0, 4), np.zeros(4)), pad.Dup(np.zeros(4), np.ones(4))
        )
