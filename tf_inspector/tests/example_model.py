"""A small model and a script for the CLI tests (graph and retrace)."""

import example_helper  # a sibling file, found as `python example_model.py` would
import tensorflow as tf

w = tf.Variable(tf.ones([8, 4]))


def mlp(x):
    return tf.nn.relu(tf.matmul(x, w) + example_helper.SHIFT)


@tf.function
def scale(x, factor):
    return x * factor


if __name__ == "__main__":
    for factor in (1.0, 2.0, 3.0):  # a Python float per call: three traces
        scale(tf.ones([2]), factor)
