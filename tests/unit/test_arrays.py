"""pad.arrays' host operations: copies made on all threads equal NumPy's."""

import numpy as np
import pytest

from pad import arrays


@pytest.mark.parametrize("n", [7, arrays.FRESH_PARALLEL_BYTES // 8 - 1, arrays.FRESH_PARALLEL_BYTES // 8 + 3])
@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_copies_equal_their_source_in_new_c_contiguous_memory(n: int, dtype: type) -> None:
    src = (np.arange(3 * n) * 7 - 11).astype(dtype).reshape(3, n)
    for a in (src, src[:, ::2], src.T):  # contiguous, strided, Fortran order
        out = arrays.copy(a)
        assert out.flags.c_contiguous and out.dtype == a.dtype and out.shape == a.shape
        assert not np.shares_memory(out, a)
        np.testing.assert_array_equal(out, a)


def test_a_view_reaches_all_of_an_array_only_with_each_element_once() -> None:
    a = np.zeros((3, 4, 5))
    assert arrays.reaches_all(a, a)
    assert arrays.reaches_all(a.transpose(0, 2, 1), a)  # LULESH's corner forces
    assert arrays.reaches_all(a.reshape(12, 5), a)
    assert not arrays.reaches_all(a[:, :2], a)  # part of it
    assert not arrays.reaches_all(a[::-1], a)  # all of it, but not found so (negative strides)
    assert not arrays.reaches_all(np.zeros((3, 4, 5)), a)  # other memory
    rows = np.zeros((2, 4))
    twice = np.lib.stride_tricks.as_strided(rows, (2, 2, 2), (32, 0, 24))  # 8 elements over its 64 bytes,
    assert twice.size == rows.size and arrays.extent(twice) == arrays.extent(rows)  # some of them twice
    assert not arrays.reaches_all(twice, rows)
