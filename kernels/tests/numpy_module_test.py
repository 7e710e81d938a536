"""kernels.warp_softmax_numpy: the same kernels over NumPy arrays."""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import warp_softmax_numpy as k
from kernels.isa import CpuIsa
from kernels.tests import checks

rng = np.random.default_rng(0)
isa = checks.isa_fixture(CpuIsa(k.__file__))


def ref(x, axis, log):
    t = torch.from_numpy(np.asarray(x, dtype=np.float64))
    return (torch.log_softmax if log else torch.softmax)(t, axis).numpy()


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("log", [False, True])
def test_forward_any_axis_and_strides(dtype, tol, log, isa):
    fn = k.log_softmax if log else k.softmax
    for x in (rng.normal(size=(5, 300)) * 3, rng.normal(size=(4, 6, 7))[:, ::2].transpose(2, 0, 1),
              rng.normal(size=(100_000, 4))):  # large enough to run on several threads
        x = x.astype(dtype)
        for axis in range(-x.ndim, x.ndim):
            y = fn(x, axis)
            assert y.dtype == dtype and y.shape == x.shape
            np.testing.assert_allclose(y, ref(x, axis, log), atol=tol * (10 if log else 1), rtol=tol * 10)


@pytest.mark.parametrize("log", [False, True])
def test_backward_matches_torch(log, isa):
    x = torch.from_numpy(rng.normal(size=(6, 40)))
    xt = x.clone().requires_grad_()
    y = (torch.log_softmax if log else torch.softmax)(xt, 0)
    dy = rng.normal(size=(6, 40))
    y.backward(torch.from_numpy(dy))
    fn = k.log_softmax_backward if log else k.softmax_backward
    np.testing.assert_allclose(fn(dy, y.detach().numpy(), 0), xt.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_0d_arrays_are_rows_of_one_element_as_in_torch(dtype):
    """Forward and backward alike (the backward refused 0-d arrays): y = 1 or 0, dx = 0."""
    x, dy = np.array(1.5, dtype), np.array(2.0, dtype)
    for log, fn, backward in ((False, k.softmax, k.softmax_backward),
                              (True, k.log_softmax, k.log_softmax_backward)):
        y = fn(x)
        assert y.shape == () and y == ref(x, -1, log)
        dx = backward(dy, y)
        t = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
        (torch.log_softmax if log else torch.softmax)(t, 0).backward(torch.tensor(2.0, dtype=torch.float64))
        assert dx.shape == () and dx.dtype == dtype and dx == t.grad.item()


def test_bad_input_is_a_python_exception():
    with pytest.raises(TypeError, match="float32 or float64"):
        k.softmax(np.arange(4))
    with pytest.raises(IndexError, match=r"axis 2 is out of range for 2 dimensions \(valid: -2 to 1\)"):
        k.softmax(np.ones((2, 3)), 2)
    with pytest.raises(ValueError, match="same shape"):
        k.softmax_backward(np.ones((2, 3)), np.ones((3, 2)))
    # An axis as NumPy's reductions take it: np.int64 yes, a bool or a float no (not as 0 or 1).
    assert np.array_equal(k.softmax(np.ones((2, 3)), np.int64(0)), np.full((2, 3), 0.5))
    with pytest.raises(IndexError, match="axis %d is out of range" % -2 ** 70):  # (as given, not clamped)
        k.softmax(np.ones((2, 3)), -2 ** 70)
    for axis, name in ((True, "bool"), (1.0, "float"), (None, "NoneType")):
        with pytest.raises(TypeError, match="softmax: axis must be an int, not " + name):
            k.softmax(np.ones((2, 3)), axis)
        with pytest.raises(TypeError, match="softmax_backward: axis must be an int, not " + name):
            k.log_softmax_backward(np.ones((2, 3)), np.ones((2, 3)), axis)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("log", [False, True])
def test_every_mask_pattern_matches_torch(dtype, log, isa):
    fn = k.log_softmax if log else k.softmax
    # Under 4 vectors (16, 32 or 64 columns by level) rows go W at a time through a tile:
    # both sides of each level's boundary, over several groups, the last one partial.
    for cols in (3, 10, 15, 16, 31, 32, 63, 64, 300, 2049, 5000):
        for pattern, mask in checks.masks(37, cols).items():
            x = checks.masked_logits(37, cols, mask).astype(dtype)
            y = fn(x, -1)
            assert not np.isnan(y[~mask.all(-1)]).any(), pattern  # fully masked rows: NaN
            checks.assert_close(y, ref(x, -1, log), dtype, log)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=checks.masked_rows(), dtype=st.sampled_from(["float32", "float64"]))
def test_property_random_masks_match_torch(data, dtype, isa):
    logits, _ = data
    x = logits.astype(dtype)
    for log in (False, True):
        checks.assert_close((k.log_softmax if log else k.softmax)(x, -1), ref(x, -1, log), dtype, log)


@pytest.mark.parametrize("cols", [2, 200])  # the short-row kernels' vector log, the row loop's logf
def test_log_softmax_takes_the_log_of_the_sum_to_float32_precision(cols, isa):
    # Rows [0, b, -inf, ...]: the first entry is -log(s), s = 1 + e^b over [1, 64]. The
    # shared tolerance (16 units) lets a log a few units off through; this one does not (a
    # 1/6 for the 1/7 in log_at_least_one's series measured 1.7 units, the kernels 0.66).
    b = np.log(np.linspace(1.0001, 64, 20001) - 1).astype(np.float32)
    x = np.full((len(b), cols), -np.inf, np.float32)
    x[:, 0], x[:, 1] = 0, b
    want = -np.log1p(np.exp(b.astype(np.float64)))
    err = np.abs(k.log_softmax(x, 1)[:, 0] - want) / (2.0**-23 * (1 + np.abs(want)))
    assert err.max() < 1.0, (err.max(), b[err.argmax()])


def test_float64_exp_is_within_an_ulp_where_the_level_has_fma(isa):
    # log_softmax_backward of rows [0, y...] with dy = [1, 0...] gives -exp(y) exactly (the sum
    # of dy is 1), so it shows the float64 exp itself, including its subnormal results, its
    # exact 0 for -inf and its libm lanes above 0. Against exp in long double, rounded once.
    r = np.random.default_rng(1)
    y = np.concatenate([-r.random(60000) * np.log(2), -r.random(60000) * 50, -r.random(60000) * 746,
                        -745.2 + r.random(20000) * 40, r.random(2000) * 700])
    rows = np.concatenate([np.zeros((len(y) // 100, 1)), y.reshape(-1, 100)], 1)
    dy = np.zeros_like(rows)
    dy[:, 0] = 1
    got = -k.log_softmax_backward(dy, rows, 1)[:, 1:].reshape(-1)
    exact = np.exp(y.astype(np.longdouble))
    ulp = np.spacing(exact.astype(np.float64)).astype(np.longdouble)  # 2^-1074 for subnormals
    err = np.abs(got - exact) / ulp
    # Without fused multiply-adds (baseline x86-64) the polynomial's roundings add up to 1.15.
    bound = 1.25 if isa == "baseline" else 1.0
    assert err.max() < bound, (err.max(), y[err.argmax()])
    special = np.array([[0.0, -np.inf, np.nan, -1e300, 0.0, 710.0]])
    dy = np.array([[1.0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(-k.log_softmax_backward(dy, special, 1)[0, 1:],
                                  [0.0, np.nan, 0.0, 1.0, np.inf])


@pytest.mark.parametrize("cols", [4000, 32768, 262144])
def test_float64_sum_of_a_long_row_stays_within_the_tolerance(cols, isa):
    # One dominant term among many small ones: with its chunks' sums added plainly, a row of
    # 32768 came out 50 units off at baseline and 26 at avx2 (torch's own: 370, growing with
    # the row); compensated, 12 at most at any length.
    x = np.full((1, cols), 48.75)
    x[0, 0] = 65.5
    e = np.exp(x.astype(np.longdouble) - 65.5)
    exact = e / e.sum()
    err = np.abs(k.softmax(x, 1) - exact) / exact / 2.0**-52
    assert err.max() < checks.ULPS["float64"], err.max()
