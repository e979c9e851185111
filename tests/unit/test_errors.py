"""Bad input gets a clear error, raised before any work; a failed autodiff loses no primal data."""

from __future__ import annotations

import numpy as np
import pytest

import pad


@pad.kernel
def k_ok(i, x, y):
    y[i] = 2.0 * x[i]


@pad.kernel
def k_print(i, x):
    print(x[i])


@pad.kernel
def k_slice(i, x, y):
    y[i] = x[1:3][0]


@pad.kernel
def k_iterate_array(i, x, y):
    for v in x:
        y[i] += v


@pad.kernel
def k_allocate(i, x):
    tmp = np.zeros(3)
    x[i] = tmp[0]


@pad.kernel
def k_comprehension(i, x):
    x[i] = sum([x[j] for j in range(3)])


@pad.kernel
def k_try(i, x):
    try:
        x[i] = 1.0
    except Exception:
        pass


@pad.kernel
def k_return_value(i, x):
    return x[i]


@pad.kernel
def k_race(i, idx, x):
    x[idx[i]] += 1.0
    x[i] = x[i] * 2.0


@pad.kernel
def k_index_reassign(i, x):
    i = i + 1
    x[i] = 0.0


@pytest.mark.parametrize(
    ("kernel", "args", "construct", "advice"),
    [
        (k_print, (np.ones(3),), "print", "kernels call math/numpy"),
        (k_slice, (np.ones(3), np.ones(3)), "slices are not supported", "index single elements"),
        (k_iterate_array, (np.ones(3), np.ones(3)), "only `for ... in range(...)`", "loop over an index"),
        (k_allocate, (np.ones(3),), "np.zeros", "kernels call math/numpy"),
        (k_comprehension, (np.ones(3),), "ListComp", ""),
        (k_try, (np.ones(3),), "the statement Try is not supported", "kernels use assignments"),
        (k_return_value, (np.ones(3),), "kernels cannot return a value", "store results into an output array"),
        (k_race, (np.zeros(3, np.int64), np.ones(3)), "is reduced into", "Reduce into a separate array"),
        (k_index_reassign, (np.ones(3),), "launch index cannot be reassigned", "copy it"),
    ],
)
def test_unsupported_construct_names_file_line_and_fix(kernel, args, construct, advice):
    with pytest.raises(pad.KernelSyntaxError) as info:
        pad.launch(kernel, 3, *args)
    message = str(info.value)
    assert "test_errors.py:" in message
    assert construct in message
    assert advice in message


def test_error_names_the_right_line():
    with pytest.raises(pad.KernelSyntaxError) as info:
        pad.launch(k_print, 3, np.ones(3))
    line = next(n for n, text in enumerate(open(__file__).read().splitlines(), 1) if "print(x[i])" in text)
    assert f"test_errors.py:{line}:" in str(info.value)


def test_calling_a_kernel_directly():
    with pytest.raises(TypeError, match="cannot be called directly.*pad.launch"):
        k_ok(0, np.ones(3), np.ones(3))


@pytest.mark.parametrize(("n", "error", "match"), [(-1, ValueError, "must not be negative"), (2.5, TypeError, "integer")])
def test_bad_launch_size(n, error, match):
    y = np.zeros(3)
    with pytest.raises(error, match=match):
        pad.launch(k_ok, n, np.ones(3), y)
    assert not y.any()


def test_launch_needs_a_kernel():
    with pytest.raises(TypeError, match="needs a @pad.kernel"):
        pad.launch(lambda i: None, 3)


def test_unsupported_argument_type():
    with pytest.raises(TypeError, match="argument 1 of kernel k_ok"):
        pad.launch(k_ok, 3, "text", np.ones(3))


def _program(x, y):
    pad.launch(k_ok, 3, x, y)


@pytest.mark.parametrize(
    ("shadow", "error", "match"),
    [
        (np.zeros(4), ValueError, "shape"),
        (np.zeros(3, np.float32), ValueError, "dtype"),
        ([0.0, 0.0, 0.0], TypeError, "array shadow"),
    ],
)
def test_shadow_mismatch(shadow, error, match):
    y = np.zeros(3)
    with pytest.raises(error, match=match):
        pad.autodiff(_program, pad.Dup(np.ones(3), shadow), pad.Dup(y, np.ones(3)))
    assert not y.any()


def test_read_only_shadow():
    shadow = np.zeros(3)
    shadow.flags.writeable = False
    with pytest.raises(ValueError, match="not writable"):
        pad.autodiff(_program, pad.Dup(np.ones(3), shadow), pad.Dup(np.zeros(3), np.ones(3)))


def test_integer_array_cannot_be_dup():
    with pytest.raises(TypeError, match="floating-point"):
        pad.autodiff(_program, pad.Dup(np.ones(3, np.int64), np.ones(3, np.int64)), np.zeros(3))


@pytest.mark.parametrize("value", [1, True, "1.0", np.ones(2)])
def test_active_must_be_a_float(value):
    with pytest.raises(TypeError, match="Active scalar must be a float"):
        pad.autodiff(lambda a: None, pad.Active(value))


def test_python_arithmetic_on_active_is_refused():
    with pytest.raises(TypeError, match="not differentiated"):
        pad.autodiff(lambda a: a * 2.0, pad.Active(1.0))


def test_failed_forward_pass_keeps_primal_results():
    y = np.zeros(3)

    def program(x, y):
        pad.launch(k_ok, 3, x, y)
        raise RuntimeError("the user's program failed")

    with pytest.raises(RuntimeError, match="user's program failed"):
        pad.autodiff(program, pad.Dup(np.ones(3), np.zeros(3)), pad.Dup(y, np.ones(3)))
    np.testing.assert_array_equal(y, 2.0)


def test_failed_reverse_pass_keeps_primal_results():
    y = np.zeros(3)
    x = np.ones(3)
    bad_shadow = np.zeros(3)

    def program(x, y):
        pad.launch(k_ok, 3, x, y)
        pad.launch(k_inplace_double, 3, y)
        bad_shadow.flags.writeable = False  # the reverse pass will fail writing this shadow

    with pytest.raises(ValueError):
        pad.autodiff(program, pad.Dup(x, bad_shadow), pad.Dup(y, np.ones(3)))
    np.testing.assert_array_equal(y, 4.0)
    np.testing.assert_array_equal(x, 1.0)


@pad.kernel
def k_inplace_double(i, y):
    y[i] = 2.0 * y[i]


def test_nested_autodiff_is_refused():
    with pytest.raises(RuntimeError, match="cannot be nested"):
        pad.autodiff(lambda: pad.autodiff(lambda: None))
