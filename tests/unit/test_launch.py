"""pad.launch semantics: every index runs once, empty kernels and empty launches, views as arguments."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import pad


@pad.kernel
def k_empty(i, x):
    pass


@pad.kernel
def k_mark(i, counts, offset):
    counts[i] += 1 + offset


@pad.kernel
def k_sine(i, x, y):
    y[i] = math.sin(x[i]) * x[i]


def test_empty_kernel_and_empty_launch():
    x = np.zeros(3)
    pad.launch(k_empty, 3, x)
    pad.launch(k_mark, 0, np.zeros(0, np.int64), 0)
    assert not x.any()


def test_every_index_runs_exactly_once():
    counts = np.zeros(10007, np.int64)
    pad.launch(k_mark, counts.shape[0], counts, 0)
    pad.launch(k_mark, counts.shape[0], counts, 1)
    assert (counts == 3).all()


def test_strided_view_argument():
    base = np.zeros((4, 6), np.int64)
    pad.launch(k_mark, 3, base[1, ::2], 4)
    assert base[1, ::2].tolist() == [5, 5, 5] and base.sum() == 15


def test_launches_on_other_layouts_in_turn_each_run_the_chunk_of_their_types():
    """The chunks runner calls a launcher back through an address (``runtime.run_chunks``): a launch whose
    arrays are laid out otherwise than the last one's must run the launcher compiled for its own types."""
    base = np.linspace(0.1, 2.0, 12)
    for x, y in [(base[:6], np.zeros(6)), (base[::2], np.zeros(12)[1::2])] * 2:
        pad.launch(k_sine, 6, x, y)
        np.testing.assert_allclose(y, np.sin(x) * x, rtol=1e-14)


def test_import_pad_loads_neither_cupy_nor_numba_cuda():
    import subprocess
    import sys

    code = "import sys, pad, pad.mpi; print(sorted(m for m in ('cupy', 'numba.cuda') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------- (i // n, i % n)
@pad.kernel
def _add_rc(i, a, b, out, n):
    r = i // n
    c = i % n
    out[r, c] = a[r, c] + b[r, c]


@pad.kernel
def _scale_rc(i, a, out):
    out[i // 3, i % 3] += 2.0 * a[i // a.shape[1], i % a.shape[1]] * a[i // a.shape[1], i % a.shape[1]]


@pad.kernel
def _mixed_rc(i, a, out, n, m):
    out[i // n, i % m] += a[i]  # different divisors: iterations may share an element


@pad.kernel
def _varying_rc(i, a, out, n):
    m = n
    if i > 2:
        m = n + 1
    out[i // m, i % m] += a[i]  # m assigned twice (in a branch): not loop-invariant as far as pad sees


def test_div_mod_index_owned_by_iteration():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    out = np.zeros((4, 3))
    assert _add_rc.variant((a, b, out, 3), "adjoint", (True, True, True, False)).privates == []
    assert _add_rc.variant((a, b, out, 3), "tangent", (True, True, True, False)).privates == []
    pad.check_grad(
        lambda a, b, out: pad.launch(_add_rc, 12, a, b, out, 3),
        *[pad.Dup(v, np.zeros_like(v)) for v in (a, b, out)],
    )
    assert _scale_rc.variant((a, out), "primal").privates == []
    assert _scale_rc.variant((a, out), "adjoint", (True, True)).privates == []
    pad.check_grad(
        lambda a, out: pad.launch(_scale_rc, 12, a, out),
        pad.Dup(a, np.zeros_like(a)),
        pad.Dup(out, np.zeros_like(out)),
    )
    x = np.ones(12)
    assert _mixed_rc.variant((x, out, 3, 4), "primal").privates != []
    assert _varying_rc.variant((x, out, 3), "primal").privates != []


@pad.func
def _mark_at(flags, j, bit):
    flags[j] += bit


@pad.kernel
def _mark_negative(i, x, flags, count):
    if x[i] < 0.0:
        _mark_at(flags, i, 2)  # inlined: the helper's j is a copy of i, made in a branch
        count[0] += 1


def test_a_helper_adding_at_its_copy_of_the_launch_index_owns_the_element():
    x = np.array([-1.0, 2.0, -3.0, 4.0, -5.0])
    flags, count = np.zeros(5, np.int64), np.zeros(1, np.int64)
    variant = _mark_negative.variant((x, flags, count), "primal")
    assert variant.privates == [("primal", 2)]  # the count only
    pad.launch(_mark_negative, 5, x, flags, count)
    assert flags.tolist() == [2, 0, 2, 0, 2] and count[0] == 3


@pad.kernel
def _chunk_min(c, chunks, x, out):
    smallest = 1.0e20
    for k in range(c * x.shape[0] // chunks, (c + 1) * x.shape[0] // chunks):
        smallest = min(smallest, x[k] * x[k] + 0.1 * x[k])
    out[c] = smallest


@pad.kernel
def _chunk_overlap(c, chunks, x, out):
    total = 0.0
    for k in range(c * x.shape[0] // chunks, (c + 2) * x.shape[0] // chunks):  # two chunks' worth: overlap
        total += x[k] * x[k]
    out[c] = total


def test_loops_over_chunks_of_the_launch_index_own_their_elements():
    """``range(c * n // chunks, (c + 1) * n // chunks)`` gives each launch index its own elements: their
    adjoints are added in place; ranges that overlap keep private buffers."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, 1003)
    assert _chunk_min.variant((7, x, np.zeros(7)), "adjoint", (False, True, True)).privates == []
    assert _chunk_overlap.variant((7, x, np.zeros(7)), "adjoint", (False, True, True)).privates != []
    for kernel in (_chunk_min, _chunk_overlap):
        pad.check_grad(
            lambda x, out, kernel=kernel: pad.launch(kernel, 6, 7, x, out),
            pad.Dup(x.copy(), np.zeros(1003)),
            pad.Dup(np.zeros(7), np.zeros(7)),
        )


TENTH = 0.1
STRONG = np.float64(0.1)


@pad.kernel
def k_weak(i, a, out, above, strong):
    e = 0.0
    for _k in range(3):
        e += max(a[i], 0.0) * TENTH + 0.3
    out[i] = e
    above[i] = a[i] > 0.1
    strong[i] = a[i] * STRONG


def test_python_floats_are_weak_in_float32_kernels():
    """Python float literals and globals take float32 where they meet float32 values (NumPy 2's rule for
    Python scalars), comparisons included; NumPy float64 constants stay float64."""
    a = np.array([0.1, -0.5, 1.7, 2.9e-3, 3.3], np.float32)
    out, above, strong = np.zeros_like(a), np.zeros(a.shape, np.bool_), np.zeros(a.shape, np.float64)
    pad.launch(k_weak, a.shape[0], a, out, above, strong)
    e = np.zeros_like(a)
    for _ in range(3):
        e += np.maximum(a, 0.0) * TENTH + 0.3  # float32 throughout under NumPy 2
    assert e.dtype == np.float32
    np.testing.assert_array_equal(out, e)
    np.testing.assert_array_equal(above, a > 0.1)
    assert not above[0]  # float32(0.1) == 0.1 in float32; in float64 it is larger
    np.testing.assert_array_equal(strong, a.astype(np.float64) * STRONG)


@pad.kernel
def k_shifted_square(i, x, y):
    j = i + 1
    if x[i] > 0.0:
        y[j] = x[i] * x[i]
    else:
        y[j] = 3.0 * x[i]


def test_adjoint_consumes_the_seeds_of_what_each_index_overwrites_and_no_others():
    """Every index stores ``y[i + 1]`` once, on either branch: the CPU adjoint clears those seeds a block of
    indices at a time after reading them; the elements outside the launch keep theirs."""
    rng = np.random.default_rng(5)
    n = 5003  # two chunks, each over two blocks and a part of one
    x, dy = rng.uniform(-1, 1, n), rng.uniform(0.5, 1.5, n + 3)
    dx = rng.uniform(-1, 1, n)
    expected_dx = dx + np.where(x > 0.0, 2.0 * x, 3.0) * dy[1 : n + 1]
    seeds = dy.copy()
    pad.autodiff(
        lambda a, b: pad.launch(k_shifted_square, n, a, b), pad.Dup(x, dx), pad.Dup(np.zeros(n + 3), dy)
    )
    # atol: where the seed's term cancels dx, the adjoint's sum (fast-math flags) rounds otherwise than NumPy's
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-14, atol=1e-15)
    assert not dy[1 : n + 1].any()
    assert dy[0] == seeds[0] and (dy[n + 1 :] == seeds[n + 1 :]).all()


@pad.kernel
def k_square_in_place(i, x):
    x[i] = x[i] * x[i]


def test_repeated_autodiff_reuses_its_own_arrays_cleanly():
    """Each autodiff allocates a shadow for the intermediate ``t`` and a copy of ``t`` before the second launch
    overwrites it; the next autodiff takes both from the pool (zeroed, refilled) and gets the same gradient."""
    from pad import tape

    rng = np.random.default_rng(9)
    x0 = rng.uniform(0.5, 1.5, 4096)
    t = np.empty(4096)

    def program(x, y):
        t[:] = 0.0
        pad.launch(k_shifted_square, 4095, x, t)  # t[i + 1] = x[i]^2 or 3 x[i]
        pad.launch(k_square_in_place, 4096, t)
        pad.launch(k_shifted_square, 4095, t, y)

    grads = []
    for _ in range(3):
        dx = np.zeros(4096)
        pad.autodiff(program, pad.Dup(x0.copy(), dx), pad.Dup(np.zeros(4096), np.ones(4096)))
        grads.append(dx)
    np.testing.assert_array_equal(grads[1], grads[0])
    np.testing.assert_array_equal(grads[2], grads[0])
    assert np.abs(grads[0]).sum() > 0
    assert tape.POOL.take((4096,), np.float64) is not None  # t's shadow and its copy went back to the pool


def test_show_returns_the_source_and_prints_only_to_a_file_given(capsys):
    x, y = np.ones(4), np.ones(4)
    source = pad.show(k_sine, "adjoint", pad.Dup(x, x.copy()), pad.Dup(y, y.copy()))
    assert "def k_sine_adjoint" in source and capsys.readouterr().out == ""
    assert pad.show(k_sine, "primal", x, y, file=sys.stdout) in capsys.readouterr().out


def test_check_grad_returns_the_errors_it_measured_below_the_tolerance():
    """Rounding makes finite differences differ a little from forward mode: that error is reported, not 0."""
    x = np.linspace(0.1, 1.0, 16)
    errors = pad.check_grad(
        lambda x, y: pad.launch(k_sine, 16, x, y),
        pad.Dup(x, np.zeros(16)),
        pad.Dup(np.zeros(16), np.zeros(16)),
    )
    assert set(errors) == {"fd", "dot", "fd_abs", "dot_abs"}
    assert 0.0 < errors["fd"] < 1e-6 and 0.0 < errors["fd_abs"] < 1e-6, errors


def test_a_launch_keeps_only_the_values_its_adjoint_reads(monkeypatch):
    """``y += a * x``'s adjoint reads ``x`` only where ``a`` is active, and never ``y``: a later write to
    them copies only what it reads, and the gradient is the same (a keep-all loop of LULESH copied every
    cycle's corner forces, which its gather's adjoint never reads)."""
    from tests.unit import kops

    copies: list[tuple] = []
    real = pad.tape.Context._copy
    monkeypatch.setattr(pad.tape.Context, "_copy", lambda self, a: copies.append(a.shape) or real(self, a))
    n = 8
    for active in (False, True):
        copies.clear()
        x, y, z = np.linspace(0.1, 0.8, n), np.linspace(1.0, 2.0, n), np.linspace(0.2, 0.9, n)
        x0 = x.copy()
        dx, dy, dz = np.zeros(n), np.ones(n), np.zeros(n)

        def f(a, x, y, z):
            kops.axpy(a, x, y)  # y += a x
            kops.sin_to(z, x)  # x = sin(z): overwrites what axpy read

        da = pad.autodiff(
            f, pad.Active(0.3) if active else 0.3, pad.Dup(x, dx), pad.Dup(y, dy), pad.Dup(z, dz)
        )
        assert np.array_equal(y, np.linspace(1.0, 2.0, n) + 0.3 * x0) and np.array_equal(x, np.sin(z))
        assert np.allclose(dx, 0.3) and np.array_equal(dy, np.ones(n)) and np.array_equal(dz, np.zeros(n))
        if active:
            assert np.isclose(da[0], x0.sum())
        assert copies == ([(n,)] if active else [])  # x's old values, for a's derivative alone


def test_a_kept_value_whose_adjoints_have_run_is_let_go_not_copied(monkeypatch):
    """A value kept for adjoints is copied when its array is overwritten while one of them has yet to run,
    and let go without a copy once all have (a checkpointed loop's reversed steps left theirs among the
    kept values, copied at the next step's first write: a step never looked clean enough to replay)."""
    copies: list[tuple] = []
    real = pad.tape.Context._copy
    monkeypatch.setattr(pad.tape.Context, "_copy", lambda self, a: copies.append(a.shape) or real(self, a))
    ctx = pad.tape.Context(reverse_mode=True)
    x, y = np.arange(4.0), np.arange(3.0)
    needed, done = ctx.keep(x), ctx.keep(y)
    done.release()
    assert ctx.live_kept() == {id(needed)} and not ctx.keeps_within([pad.arrays.extent(y)])
    ctx.will_write([x, y])
    x[...], y[...] = -1.0, -1.0
    assert copies == [(4,)] and needed.copied and not done.copied
    assert np.array_equal(needed.value, np.arange(4.0)) and ctx.live_kept() == set()


@pad.kernel
def k_squared_in_place(i, a, x, y):
    y[i] = a * math.sin(x[i]) + y[i] * y[i]


@pad.kernel
def k_doubled_square(i, y, z):
    z[i] = 2.0 * y[i] * y[i]


def test_an_adjoint_that_leaves_an_array_alone_reads_its_kept_value_without_a_copy(monkeypatch):
    """An in-place update's adjoint stores nothing into the array (the primal launch made the new values,
    and nothing in the kernel reads them again): it reads the old values kept for it and for an earlier
    launch's adjoint as they are, where it used to overwrite a scratch copy of them."""
    scratch: list[object] = []
    real = pad.tape.Kept.scratch
    monkeypatch.setattr(pad.tape.Kept, "scratch", lambda self: scratch.append(self) or real(self))
    n = 9
    source = k_squared_in_place.variant(
        (0.5, np.zeros(n), np.zeros(n)), "adjoint", (False, True, True)
    ).source
    assert not any(line.strip().startswith("y[i] =") for line in source.splitlines()), source

    def f(x, y, z):
        pad.launch(k_doubled_square, n, y, z)  # reads y: its old value is kept for this adjoint
        pad.launch(k_squared_in_place, n, 0.5, x, y)  # and for this one, which overwrites y

    x, y = np.linspace(-1.0, 1.0, n), np.linspace(0.2, 0.6, n)
    pad.check_grad(f, pad.Dup(x, np.zeros(n)), pad.Dup(y, np.zeros(n)), pad.Dup(np.zeros(n), np.zeros(n)))
    assert not scratch  # check_grad's reverse passes ran both adjoints


def test_a_full_stack_grows_to_twice_its_room_keeping_what_it_holds():
    from pad.kernel import runtime

    for stack in (np.linspace(0.5, 2.5, 5), np.arange(-3, 4)):
        grown = runtime.grown(stack)
        assert grown.dtype == stack.dtype and grown.shape == (2 * stack.shape[0],)
        np.testing.assert_array_equal(grown[: stack.shape[0]], stack)


@pad.kernel
def _write_both(i, x, y, z):
    y[i] = x[i] * x[i]
    z[i] = 2.0 * x[i]


@pytest.mark.parametrize("mode", ["autodiff", "fwddiff"])
@pytest.mark.parametrize("alias", ["same array", "a view"])
def test_a_differentiated_launch_refuses_a_written_array_passed_twice(mode, alias):
    """Each argument gets a shadow of its own: an alias of a written one would give a silently wrong
    derivative (it gave 2 + 2 x where the run's derivative is 2). The primal launch runs as written. A view
    of the same memory under another name is looked for under PAD_DEBUG."""
    x, y = np.linspace(0.5, 1.0, 4), np.zeros(4)
    pad.launch(_write_both, 4, x, y, y)
    np.testing.assert_allclose(y, 2 * x)

    def program(x, y):
        pad.launch(_write_both, 4, x, y, y if alias == "same array" else y[::-1][::-1])

    args = (pad.Dup(x, np.zeros(4)), pad.Dup(y, np.ones(4)))
    with (
        pad.debug(alias == "a view"),
        pytest.raises(ValueError, match=r"_write_both.*'y' and 'z' share memory"),
    ):
        getattr(pad, mode)(program, *args)


@pad.kernel
def k_previous_through(i, idx, x, y):
    y[i] = x[i - 1] * x[idx[i]]


def test_an_index_below_the_launch_index_still_wraps_as_in_python():
    """Launchers tell LLVM that the launch index is never negative; ``i - 1`` at index 0 still reads the last
    element, in the primal and in the planned adjoint (whose scatter through ``idx`` is coloured)."""
    n = 7
    rng = np.random.default_rng(5)
    idx, x = rng.integers(0, n, n), rng.uniform(0.5, 1.5, n)
    y = np.zeros(n)
    pad.launch(k_previous_through, n, idx, x, y)
    np.testing.assert_array_equal(y, np.roll(x, 1) * x[idx])
    seed, dx = rng.uniform(size=n), np.zeros(n)
    pad.autodiff(
        lambda x, y: pad.launch(k_previous_through, n, idx, x, y), pad.Dup(x, dx), pad.Dup(y, seed.copy())
    )
    want = np.roll(seed * x[idx], -1) + np.bincount(idx, seed * np.roll(x, 1), minlength=n)
    np.testing.assert_allclose(dx, want, rtol=1e-14)


@pad.kernel(fastmath=True)
def k_row_sums(i, a, out):
    total = 0.0
    for j in range(a.shape[1]):
        total += a[i, j]
    out[i] = total


@pad.kernel(fastmath=True)
def k_halve(i, a, out):
    out[i] = 0.5 * a[i]


WHOLE_BLOCKS = "_lo = min(_n, (_n + 63) // 64 * _c // _nchunks * 64)"
EVEN = "_lo = _n * _c // _nchunks"


def test_chunks_are_whole_blocks_where_fast_math_may_vectorize_the_index_loop():
    """Whole 64-index blocks where a vectorized loop's scalar tail would round otherwise (fast-math, no loop
    inside); even shares elsewhere, so that a few costly indices still spread over the threads."""
    a, out = np.ones((5, 3)), np.zeros(5)
    assert WHOLE_BLOCKS in pad.show(k_halve, "primal", a[:, 0].copy(), out)
    assert EVEN in pad.show(k_row_sums, "primal", a, out)  # its index loop is not the innermost
    assert EVEN in pad.show(k_sine, "primal", out, out.copy())  # no fast-math flags: one rounding
    assert WHOLE_BLOCKS in pad.show(
        k_sine, "adjoint", pad.Dup(out, out.copy()), pad.Dup(out.copy(), out.copy())
    )


@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000, 4099])
def test_whole_block_chunks_cover_every_index(n):
    x, y = np.linspace(1.0, 2.0, n), np.zeros(n)
    pad.launch(k_halve, n, x, y)
    np.testing.assert_array_equal(y, 0.5 * x)
