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
