"""Property tests: random shapes (with broadcasting) and values, forward and backward vs torch."""

import numpy as np
from hypothesis import example, given, settings
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


@st.composite
def matmul_operands(draw):
    """Operands of each form matmul takes: vectors (dot, mv, vm), matrices and stacks of them
    with broadcast batch dims; an inner dimension of 1 (outer products, which _matmul computes
    by its own paths) half the time."""
    n, m = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    k = draw(st.sampled_from([1, 1, 2, 3]))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a_shape = (k,) if draw(st.integers(0, 3)) == 0 else batch.input_shapes[0] + (n, k)
    b_shape = (k,) if draw(st.integers(0, 3)) == 0 else batch.input_shapes[1] + (k, m)
    return (draw(hnp.arrays(np.float64, a_shape, elements=FLOATS)),
            draw(hnp.arrays(np.float64, b_shape, elements=FLOATS)))


def _outer(a_shape, b_shape):
    rng = np.random.default_rng(0)
    return rng.normal(size=a_shape), rng.normal(size=b_shape)


@settings(max_examples=60, deadline=None)
@given(matmul_operands())
# and each of _matmul's outer-product paths, each way round
@example(_outer((2, 4, 1), (2, 1, 3)))
@example(_outer((2, 3, 1), (1, 1, 4)))
@example(_outer((4, 1), (2, 1, 3)))
@example(_outer((2, 4, 1), (1, 3)))
@example(_outer((2, 3, 1), (1, 4)))
def test_matmul_of_every_form_and_its_gradients(pair):
    assert_matches_torch(lambda L, x, y: x @ y, list(pair))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cross_entropy_of_random_logits(data):
    n, c = data.draw(st.integers(1, 6)), data.draw(st.integers(2, 6))
    logits = data.draw(hnp.arrays(np.float64, (n, c), elements=st.floats(-50, 50, width=64)))
    target = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    assert_matches_torch(lambda L, x: L.cross_entropy(x, target), [logits], atol=1e-9)
