"""The WarpSoftmax TensorFlow op: values and gradients against tf.nn, eagerly and traced."""

import numpy as np
import pytest
import tensorflow as tf
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels import tf_ops
from kernels.tests import checks

rng = np.random.default_rng(0)
isa = checks.isa_fixture(tf_ops.cpu_isa)
PAIRS = [(tf_ops.warp_softmax, tf.nn.softmax), (tf_ops.warp_log_softmax, tf.nn.log_softmax)]


@pytest.mark.parametrize("ours,theirs", PAIRS)
def test_matches_tf_nn_over_shapes_and_axes(ours, theirs, isa):
    for shape in [(7,), (4, 1024), (3, 5, 33), (2, 40000)]:
        x = tf.constant(rng.normal(size=shape) * 3, tf.float32)
        for axis in range(-len(shape), len(shape)):
            ref = theirs(tf.cast(x, tf.float64), axis=axis)
            np.testing.assert_allclose(ours(x, axis), ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("log", [False, True])
def test_every_dtype_and_mask_pattern_matches_tf_nn(dtype, log, isa):
    ours, theirs = PAIRS[log]
    for cols in (300, 2049):
        for pattern, mask in checks.masks(4, cols).items():
            x = tf.cast(tf.constant(checks.masked_logits(4, cols, mask)), dtype)
            y = ours(x)
            assert y.dtype == x.dtype
            checks.assert_close(tf.cast(y, tf.float64), theirs(tf.cast(x, tf.float64)), dtype, log)


@pytest.mark.parametrize("ours,theirs", PAIRS)
def test_gradient_matches_tf_nn(ours, theirs):
    x = tf.constant(rng.normal(size=(5, 30)), tf.float64)
    w = tf.constant(rng.normal(size=(5, 30)), tf.float64)
    grads = []
    for fn in (ours, theirs):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x, axis=0) * w)
        grads.append(tape.gradient(loss, x))
    np.testing.assert_allclose(grads[0], grads[1], atol=1e-12)
    theoretical, numerical = tf.test.compute_gradient(lambda t: ours(t), [x[:2, :4]])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


@pytest.mark.parametrize("ours,theirs", PAIRS)
def test_second_order_gradient_matches_tf_nn(ours, theirs):
    """A gradient of a gradient (a gradient penalty) through the WarpSoftmaxGrad op."""
    x = tf.constant(rng.normal(size=(4, 9)), tf.float64)
    w = tf.constant(rng.normal(size=(4, 9)), tf.float64)
    results = []
    for fn in (ours, theirs):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                loss = tf.reduce_sum(fn(x, axis=1) ** 3 * w)
            penalty = tf.reduce_sum(inner.gradient(loss, x) ** 2)
        results.append(outer.gradient(penalty, x))
    np.testing.assert_allclose(results[0], results[1], atol=1e-12)


def test_traces_into_tf_function_with_static_shapes():
    @tf.function
    def f(x):
        return tf_ops.warp_softmax(x)

    concrete = f.get_concrete_function(tf.TensorSpec([None, 8], tf.float32))
    ops = [node.op for node in concrete.graph.as_graph_def().node]
    assert "WarpSoftmax" in ops
    assert concrete.structured_outputs.shape.as_list() == [None, 8]
    np.testing.assert_allclose(f(tf.ones([3, 8])), np.full([3, 8], 1 / 8), rtol=1e-6)


@pytest.mark.parametrize("ours,theirs", PAIRS)
def test_traces_with_an_unknown_rank_along_the_last_axis_as_tf_nn(ours, theirs):
    # A signature such as serving's TensorSpec(None): tf.nn takes it for axis -1, so does ours.
    spec = tf.TensorSpec(None, tf.float32)
    f, g = (tf.function(fn, input_signature=[spec]) for fn in (ours, theirs))
    for shape in ([5], [3, 4], [2, 3, 4]):
        x = tf.constant(rng.normal(size=shape), tf.float32)
        np.testing.assert_allclose(f(x), g(x), atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="known rank for axis 0"):
        tf.function(lambda t: ours(t, 0), input_signature=[spec]).get_concrete_function()


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError, match="int32"):
        tf_ops.warp_softmax(tf.constant([1, 2, 3]))
    with pytest.raises(ValueError, match=r"axis 2 is out of range for 2 dimensions \(valid: -2 to 1\)"):
        tf_ops.warp_softmax(tf.ones([2, 3]), axis=2)
    lib = tf_ops._lib
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="WarpSoftmaxGrad|shape"):
        lib.warp_softmax_grad(tf.ones([2, 3]), tf.ones([3, 2]))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=checks.masked_rows(), dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]))
def test_property_random_masks_match_torch(data, dtype, isa):
    # Against torch's float64 softmax of the same rounded logits, as the other bindings.
    logits, _ = data
    x = tf.cast(tf.constant(logits), dtype)
    x64 = torch.from_numpy(tf.cast(x, tf.float64).numpy())
    for log, ours in ((False, tf_ops.warp_softmax), (True, tf_ops.warp_log_softmax)):
        want = (torch.log_softmax if log else torch.softmax)(x64, -1).numpy()
        checks.assert_close(tf.cast(ours(x), tf.float64), want, dtype, log)
