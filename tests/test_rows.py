"""The shared row helpers: unit rows and the row softmax."""

import numpy as np

from crossembed._rows import row_norms, softmax_rows, unit_rows


def test_unit_rows_have_norm_one_and_zero_rows_stay_zero():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-200, 0.0]], dtype=np.float32)
    u = unit_rows(x)
    assert u.dtype == np.float64
    assert np.allclose(u, [[0.6, 0.8], [0.0, 0.0], [0.0, 0.0]])
    assert row_norms(np.ones((2, 4), np.float32)).shape == (2, 1)


def test_softmax_rows_sum_to_one_and_survive_large_logits():
    p = softmax_rows([[1000.0, 1000.0], [0.0, np.log(3.0)]])
    assert np.allclose(p, [[0.5, 0.5], [0.25, 0.75]])
    assert np.allclose(p.sum(axis=1), 1.0)


def test_unit_rows_in_the_inputs_own_dtype():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], dtype=np.float32)
    u = unit_rows(x, dtype=None)
    assert u.dtype == np.float32
    np.testing.assert_array_equal(u, x / np.where(row_norms(x) > 0, row_norms(x), 1.0))
