"""Property tests: random shapes (with broadcasting) and values, forward and backward vs torch."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minigrad.tests.torch_compare import assert_matches_torch

FLOATS = st.floats(-3, 3, allow_nan=False, width=64)


@st.composite
def broadcastable_pair(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=4))
    a, b = shapes.input_shapes
    return (draw(hnp.arrays(np.float64, a, elements=FLOATS)),
            draw(hnp.arrays(np.float64, b, elements=FLOATS)))


@settings(max_examples=60, deadline=None)
@given(broadcastable_pair())
def test_elementwise_expression_with_broadcasting(pair):
    a, b = pair
    assert_matches_torch(lambda L, x, y: (x * y + x).tanh() / (1 + y * y) - x.sigmoid() * 2, [a, b])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_matmul_then_reductions(data):
    n, k, m = (data.draw(st.integers(1, 5)) for _ in range(3))
    a = data.draw(hnp.arrays(np.float64, (n, k), elements=FLOATS))
    b = data.draw(hnp.arrays(np.float64, (k, m), elements=FLOATS))
    dim = data.draw(st.sampled_from([0, 1, -1]))
    # log_softmax weighted by the logits themselves: its backward counts (unlike
    # log_softmax(z).exp().sum(), which is identically 1 and has no gradient).
    assert_matches_torch(lambda L, x, y: (L.log_softmax(x @ y, dim=dim) * (x @ y)).sum(dim=dim)
                         * (x @ y).mean(), [a, b])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cross_entropy_of_random_logits(data):
    n, c = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 6))
    logits = data.draw(hnp.arrays(np.float64, (n, c), elements=st.floats(-50, 50, width=64)))
    target = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    assert_matches_torch(lambda L, x: L.cross_entropy(x, target), [logits], atol=1e-9)
