"""Bad input gets a clear error, raised before any work; a failed autodiff loses no primal data."""

from __future__ import annotations

import math
import re
from pathlib import Path

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
def k_iterate_rows(i, x, y):
    for row in x:
        y[i] += row[0]


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


@pad.func
def scaled(a, b):
    return a * b


@pad.kernel
def k_too_many(i, x, y):
    y[i] = math.sin(x[i], 2.0)


@pad.kernel
def k_arctan_of_two(i, x, y):
    y[i] = np.arctan(x[i], y[i])


@pad.kernel
def k_too_few(i, x, y):
    y[i] = math.atan2(x[i])


@pad.kernel
def k_none(i, x, y):
    y[i] = np.add()


@pad.kernel
def k_keyword(i, x, y):
    y[i] = np.add(x[i], 1.0, out=y)


@pad.kernel
def k_helper_too_few(i, x, y):
    y[i] = scaled(x[i])


@pad.kernel
def k_len_of_nothing(i, x, y):
    y[i] = len()


@pad.kernel
def k_dict(i, x, y):
    d = {"a": 1.0}
    y[i] = d["a"]


@pad.kernel
def k_lambda(i, x, y):
    f = lambda v: v  # noqa: E731
    y[i] = f(x[i])


@pad.kernel
def k_with(i, x, y):
    with open("f"):
        y[i] = x[i]


@pad.kernel
def k_generator(i, x, y):
    y[i] = max(v for v in x)


@pad.kernel
def k_tuple_out_of_range(i, x, y):
    t = (x[i], 2.0)
    y[i] = t[2]


@pad.kernel
def k_tuple_update(i, x, y):
    t = (x[i], 2.0)
    t[0] += 1.0


@pad.kernel
def k_float_index(i, x, y):
    y[i] = x[x[i]]


@pad.kernel
def k_bitwise_float(i, x, y):
    y[i] = x[i] & 1


@pad.kernel
def k_bad_axis(i, x, y):
    y[i] = x.shape[1]


@pad.kernel
def k_shape_axis(i, x, y):
    y[i] = x.shape[i]


@pad.kernel
def k_infinite(i, x, y):
    y[i] = min(x[i], math.inf) + max(x[i], -1e400)


def test_infinite_constants_compile():
    y = np.zeros(3)
    pad.launch(k_infinite, 3, np.array([1.0, -2.0, 3.0]), y)
    np.testing.assert_array_equal(y, [2.0, -4.0, 6.0])


@pytest.mark.parametrize(
    ("kernel", "construct", "advice"),
    [
        (k_too_many, "math.sin() takes 1 argument (x), 2 given", "docs/kernels.md"),
        (k_arctan_of_two, "np.arctan() takes 1 argument (x), 2 given", "docs/kernels.md"),
        (k_too_few, "math.atan2() takes 2 arguments (y, x), 1 given", "docs/kernels.md"),
        (k_none, "np.add() takes 2 arguments (a, b), 0 given", "docs/kernels.md"),
        (k_keyword, "np.add() takes no keyword arguments in kernels, out= given", "by position"),
        (k_helper_too_few, "scaled(a, b): missing a required argument: 'b'", ""),
        (k_len_of_nothing, "len() takes 1 argument (an array), 0 given", ""),
        (k_dict, "a dict is not supported", "use a tuple, or pad.local_array"),
        (k_lambda, "lambda is not supported", "@pad.func helper"),
        (k_with, "with is not supported", "write the body without it"),
        (k_generator, "a generator expression is not supported", "for loop over range"),
        (k_tuple_out_of_range, "index 2 is out of range for the tuple 't' of 2 items", ""),
        (k_tuple_update, "tuples are immutable", "build a new tuple"),
        (k_float_index, "an index of 'x' is a float", "int(...)"),
        (k_bitwise_float, "a bitwise operator (& | ^ << >> ~) is applied to a float", "integers"),
        (k_bad_axis, "x.shape[1]: axis 1 of an array of 1 dimension(s)", ""),
        (k_shape_axis, "the axis of x.shape[i] is not an integer constant", "a.shape[0]"),
    ],
)
def test_wrong_call_or_construct_names_function_file_and_line(kernel, construct, advice):
    """Calls checked against each function's arguments, constructs refused in words; never an internal error."""
    with pytest.raises(pad.KernelSyntaxError) as info:
        pad.launch(kernel, 3, np.ones(3), np.zeros(3))
    message = str(info.value)
    line = next(
        n
        for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if text.startswith(f"def {kernel.__name__}(")
    )
    reported = int(re.search(r"test_errors\.py:(\d+):", message)[1])  # type: ignore[index]
    assert line < reported <= line + 3, message  # a line of the kernel's body
    assert construct in message
    assert advice in message


@pytest.mark.parametrize(
    ("kernel", "args", "construct", "advice"),
    [
        (k_print, (np.ones(3),), "print", "kernels call math/numpy"),
        (k_slice, (np.ones(3), np.ones(3)), "slices are not supported", "index single elements"),
        (k_iterate_rows, (np.ones((3, 2)), np.ones(3)), "a loop over the rows of 'x'", "range(x.shape[0])"),
        (k_allocate, (np.ones(3),), "np.zeros", "kernels call math/numpy"),
        (k_comprehension, (np.ones(3),), "the call sum(...) is not supported", "kernels call math/numpy"),
        (k_try, (np.ones(3),), "try/except is not supported", "kernels cannot raise or catch exceptions"),
        (
            k_return_value,
            (np.ones(3),),
            "kernels cannot return a value",
            "store results into an output array",
        ),
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
    line = next(
        n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "print(x[i])" in text
    )
    assert f"test_errors.py:{line}:" in str(info.value)


def test_calling_a_kernel_directly():
    with pytest.raises(TypeError, match=r"cannot be called directly.*pad\.launch"):
        k_ok(0, np.ones(3), np.ones(3))


@pytest.mark.parametrize(
    ("n", "error", "match"), [(-1, ValueError, "must not be negative"), (2.5, TypeError, "integer")]
)
def test_bad_launch_size(n, error, match):
    y = np.zeros(3)
    with pytest.raises(error, match=match):
        pad.launch(k_ok, n, np.ones(3), y)
    assert not y.any()


def test_launch_needs_a_kernel():
    with pytest.raises(TypeError, match=r"needs a @pad\.kernel"):
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


@pytest.mark.parametrize("mode", ["autodiff", "fwddiff"])
@pytest.mark.parametrize(
    ("case", "match"),
    [
        ("the array as its own shadow", r"argument 0 \('x'\)'s array and argument 0 \('x'\)'s shadow"),
        ("one shadow for two arrays", r"argument 0 \('x'\)'s shadow and argument 1 \('y'\)'s shadow"),
        ("a shadow that is another's array", r"argument 0 \('x'\)'s shadow and argument 1 \('y'\)'s array"),
        ("one array with two shadows", r"argument 0 \('x'\)'s array and argument 1 \('y'\)'s array"),
        ("a view of another's shadow", r"shadow and argument 1 \('y'\)'s shadow"),
    ],
)
def test_arrays_and_shadows_that_share_memory_are_refused(mode, case, match):
    """Each would give a silently wrong derivative (the shadows' semantics assume memory of their own);
    nothing runs."""
    x, y, buffer = np.ones(3), np.zeros(3), np.zeros(6)
    pairs = {
        "the array as its own shadow": ((x, x), (y, np.ones(3))),
        "one shadow for two arrays": ((x, buffer[:3]), (y, buffer[:3])),
        "a shadow that is another's array": ((x, y), (y, np.ones(3))),
        "one array with two shadows": ((x, np.zeros(3)), (x, np.ones(3))),
        "a view of another's shadow": ((x, buffer[:3]), (y, buffer[1:4])),
    }[case]
    with pytest.raises(ValueError, match=match):
        getattr(pad, mode)(_program, *(pad.Dup(a, d) for a, d in pairs))
    assert not y.any()


def test_one_dup_given_twice_is_one_shadow():
    x, dx = np.linspace(1.0, 2.0, 3), np.zeros(3)
    pad.autodiff(lambda a, b: pad.launch(k_ok, 3, a, b), pad.Dup(x, dx), pad.Dup(np.zeros(3), np.ones(3)))
    single = dx.copy()
    dx[:] = 0.0

    def twice(a, a_again, b):
        pad.launch(k_ok, 3, a, b)

    pad.autodiff(twice, pad.Dup(x, dx), pad.Dup(x, dx), pad.Dup(np.zeros(3), np.ones(3)))
    np.testing.assert_allclose(dx, single)


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

    with pytest.raises(Exception, match="readonly"):
        pad.autodiff(program, pad.Dup(x, bad_shadow), pad.Dup(y, np.ones(3)))
    np.testing.assert_array_equal(y, 4.0)
    np.testing.assert_array_equal(x, 1.0)


@pad.kernel
def k_inplace_double(i, y):
    y[i] = 2.0 * y[i]


def test_nested_autodiff_is_refused():
    with pytest.raises(RuntimeError, match="cannot be nested"):
        pad.autodiff(lambda: pad.autodiff(lambda: None))


def test_float32_constant_is_not_widened():
    from tests.unit.corpus import k_f32_constant

    source = pad.show(k_f32_constant, "primal", np.ones(2, np.float32), np.ones(2, np.float32))
    assert "np.float32(0.5)" in source


@pad.kernel
def k_one_element(i, x, y):
    y[0] = x[i]


@pad.kernel
def k_every_element(i, x, y):
    for k in range(y.shape[0]):
        y[k] = x[i]


@pad.kernel
def k_guard_by_loop(i, x, y):
    for k in range(3):
        if i == k:
            y[0] = x[i]


@pytest.mark.parametrize("kernel", [k_one_element, k_every_element, k_guard_by_loop])
def test_racing_store_is_refused(kernel):
    """Every launch index storing to one element: refused before anything runs, saying what to write."""
    y = np.zeros(3)
    with pytest.raises(pad.KernelSyntaxError) as info:
        pad.launch(kernel, 3, np.arange(3.0), y)
    message = str(info.value)
    assert "test_errors.py:" in message and "every launch index stores to the same element of 'y'" in message
    assert "y[...] += value" in message and "if i == 0:" in message
    assert not y.any()
    with pytest.raises(pad.KernelSyntaxError, match="same element"):
        pad.autodiff(
            lambda x, y: pad.launch(kernel, 3, x, y), pad.Dup(np.ones(3), np.zeros(3)), pad.Dup(y, y + 1)
        )


@pad.kernel
def k_first_writes(i, x, y):
    if i == 0:
        y[0] = 2.0 * x[0]
    n = x.shape[0]
    if i == n - 1:
        y[1] = x[i] * x[0]
    if i != 1:
        y[i + 2] = x[i]
    else:
        y[2 + 1] = 3.0 * x[i]


@pad.kernel
def k_scatter(i, perm, x, y):
    y[perm[i]] = x[i] * x[i]


def test_single_writers_and_index_arrays_are_accepted():
    """Guarded single writers, stores at indices that vary (an index array is trusted)."""
    x = np.linspace(1.0, 2.0, 3)
    pad.check_grad(
        lambda x, y: pad.launch(k_first_writes, 3, x, y),
        pad.Dup(x, np.zeros(3)),
        pad.Dup(np.zeros(5), np.zeros(5)),
    )
    perm = np.array([2, 0, 1])
    pad.check_grad(
        lambda x, y: pad.launch(k_scatter, 3, perm, x, y),
        pad.Dup(x, np.zeros(3)),
        pad.Dup(np.zeros(3), np.zeros(3)),
    )


def test_a_launch_of_one_index_may_store_anywhere():
    """One launch index is serial: a scalar kernel (LULESH's time step) stores at fixed elements."""
    x, y, dx = np.array([3.0]), np.zeros(1), np.zeros(1)
    pad.autodiff(lambda x, y: pad.launch(k_one_element, 1, x, y), pad.Dup(x, dx), pad.Dup(y, np.ones(1)))
    assert y[0] == 3.0 and dx[0] == 1.0
