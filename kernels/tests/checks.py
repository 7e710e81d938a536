"""What every binding's tests share: tolerances tied to each format, the masks
users send, and running a test under every CPU level this machine supports.

Arrays here are NumPy float64 (the result of a binding cast up, and its
framework's own float64 result as the reference), so each binding's test
compares with its framework and none of this depends on one.
"""

import numpy as np
import pytest
from hypothesis import strategies as st

# Machine epsilon of each format: its spacing at 1.0, 2^-(mantissa bits).
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# Absolute error allowed near zero: float16's subnormal step; for float32 and
# bfloat16 the smallest normal, below which the kernels' exp gives 0.
TINY = {"float64": 2.0**-1022, "float32": 2.0**-126, "float16": 2.0**-24, "bfloat16": 2.0**-126}
# Allowed error in units of EPS. float32 and float64 are computed in their own
# format (a polynomial exp of about 1 ulp, and sums of up to 32K terms); 16-bit
# formats are computed in float32 and rounded once, so they are within one unit
# of the float64 result.
ULPS = {"float64": 16, "float32": 16, "float16": 1, "bfloat16": 1}


def assert_close(ours, ref, dtype, log):
    """ours (any binding's output, cast to float64) against the float64 reference.

    Each element may be off by ULPS[dtype] units of the format, scaled by the
    conditioning of softmax itself: exp(x - max) in a format with unit
    roundoff e has relative error about e * |x - max|, which is |log y| for a
    softmax value y and about |y| for a log_softmax value. Below TINY[dtype]
    softmax values are compared absolutely."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    unit = ULPS[dtype] * EPS[dtype]
    with np.errstate(divide="ignore", invalid="ignore"):
        if log:
            allowed = unit * (1 + np.abs(ref))
        else:
            allowed = TINY[dtype] + unit * np.abs(ref) * (1 + np.abs(np.log(ref)))
        error = np.abs(ours - ref)
    same = (ours == ref) | (np.isnan(ours) & np.isnan(ref))  # exact zeros, infinities, NaN
    bad = ~same & ~(error <= allowed)
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            "%d of %d %s %s values off by more than %d units (with softmax's conditioning); "
            "first at %s: got %r, want %r, allowed error %.3g"
            % (bad.sum(), bad.size, dtype, "log_softmax" if log else "softmax", ULPS[dtype],
               where, ours[where], ref[where], allowed[where]))


def masks(rows, cols, seed=0):
    """{pattern: bool array (rows, cols)}, True where the logit is -inf: the
    patterns of attention masks and padded batches, at the kernels' block
    size of 1024 (a fully masked block first, in the middle, last, ...)."""
    rng = np.random.default_rng(seed)
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    block = 1024
    patterns = {
        "causal": j > i * max(1, cols // rows),
        "left_pad": j < (rng.integers(0, cols, size=(rows, 1))),
        "right_pad": j >= (rng.integers(1, cols + 1, size=(rows, 1))),
        "window": np.abs(j - (i * cols) // max(rows, 1)) > 64,
        "first_block": j < block,
        "all_but_last": j < cols - 1,
        "all_but_first": j > 0,
        "random": rng.random((rows, cols)) < 0.9,
        # whole rows masked among others (padding queries): rows that go two at a time pair one
        # of each, in both orders
        "every_third_row": (i % 3 == 1) & (j >= 0),
    }
    if cols > 2 * block:
        patterns["middle_block"] = (j >= block) & (j < 2 * block)
        patterns["every_block_but_one"] = (j // block) != (cols // block) // 2
        patterns["last_block"] = j >= (cols // block) * block
    return {name: np.broadcast_to(m, (rows, cols)).copy() for name, m in patterns.items()}


def masked_logits(rows, cols, mask, seed=0, scale=3.0):
    """Normal logits with -inf where `mask` is True, as float64."""
    x = np.random.default_rng(seed).normal(size=(rows, cols)) * scale
    x[mask] = -np.inf
    return x


@st.composite
def masked_rows(draw, max_rows=4, max_cols=5000):
    """Hypothesis: (logits float64, mask) with a random mix of mask patterns:
    causal, left padding, windows and runs of -inf at random places."""
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(1, max_cols))
    mask = np.zeros((rows, cols), bool)
    for r in range(rows):
        for _ in range(draw(st.integers(0, 3))):
            start = draw(st.integers(0, cols - 1))
            length = draw(st.integers(1, cols - start))
            mask[r, start:start + length] = True
    seed = draw(st.integers(0, 2**16))
    return masked_logits(rows, cols, mask, seed=seed), mask


def isa_fixture(control, also=()):
    """A pytest fixture running a test once per CPU level this machine
    supports (kernels.isa.CpuIsa `control`), restoring the level after; then
    once per value in `also` (a device, say; pytest.param for its marks),
    with the level untouched."""
    levels = control.supported()

    @pytest.fixture(params=[*levels, *also])
    def isa(request):
        if request.param not in levels:
            yield request.param
            return
        before = control.current()
        control.set(request.param)
        yield request.param
        control.set(before)
    return isa
