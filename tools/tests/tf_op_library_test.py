"""tf_op_library builds a .so that tf.load_op_library loads, eagerly and in graphs."""

import os

import numpy as np
import pytest
import tensorflow as tf

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf_example_op.so")


@pytest.fixture(scope="module")
def ops():
    return tf.load_op_library(LIBRARY)


def test_op_matches_tensorflow(ops):
    a = tf.constant(np.random.default_rng(0).normal(size=(4, 3)), tf.float32)
    b = tf.constant(np.random.default_rng(1).normal(size=(4, 3)), tf.float32)
    np.testing.assert_allclose(ops.example_scaled_add(a, b, alpha=0.5), a + 0.5 * b, rtol=1e-6)


def test_op_traces_into_a_graph_with_its_shape_function(ops):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)] * 2)
    def f(a, b):
        return ops.example_scaled_add(a, b, alpha=2.0)

    graph = f.get_concrete_function().graph
    assert "ExampleScaledAdd" in [node.op for node in graph.as_graph_def().node]
    assert f.get_concrete_function().structured_outputs.shape.as_list() == [None, 3]
    np.testing.assert_allclose(f(tf.ones([2, 3]), tf.ones([2, 3])), 3.0 * np.ones([2, 3]))


def test_bad_input_is_a_clear_error(ops):
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="ExampleScaledAdd|shape"):
        ops.example_scaled_add(tf.ones([2]), tf.ones([3]), alpha=1.0)
