"""The WarpSoftmax TensorFlow op: loading, gradient, Python API.

    from kernels import tf_ops
    y = tf_ops.warp_softmax(logits, axis=-1)       # as tf.nn.softmax
    z = tf_ops.warp_log_softmax(logits, axis=-1)   # as tf.nn.log_softmax

Works eagerly and inside tf.function (the op has a shape function, so traced
graphs keep static shapes); the gradient is the WarpSoftmaxGrad op, whose own
gradient (second order: Hessian-vector products, gradient penalties) is below.
"""

import tensorflow as tf

from kernels import dims
from kernels.isa import CpuIsa
from kernels.library import find

_lib = tf.load_op_library(find("warp_softmax_tf.so"))
# The CPU kernels' level in this library: cpu_isa.current(), .set("avx2"), .supported().
cpu_isa = CpuIsa(find("warp_softmax_tf.so"))
_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


@tf.RegisterGradient("WarpSoftmax")
def _warp_softmax_grad(op, grad):
    return _lib.warp_softmax_grad(grad, op.outputs[0], log_softmax=op.get_attr("log_softmax"))


def _row_sum(t):
    return tf.reduce_sum(t, -1, keepdims=True)


@tf.RegisterGradient("WarpSoftmaxGrad")
def _warp_softmax_grad_grad(op, v):
    """Second order: the gradients of dx(g, y) in g and y (y * (g - sum(g * y)) for
    softmax, g - exp(y) * sum(g) for log-softmax, along the last axis), as the
    torch operator's rules in ops.py."""
    g, y = op.inputs
    if op.get_attr("log_softmax"):
        e = tf.exp(y)
        return v - _row_sum(v * e), -v * e * _row_sum(g)
    return (_lib.warp_softmax_grad(v, y, log_softmax=False),  # symmetric in g
            v * (g - _row_sum(g * y)) - g * _row_sum(v * y))


def _apply(logits, axis, log):
    logits = tf.convert_to_tensor(logits)
    if logits.dtype not in _DTYPES:
        raise TypeError("warp_softmax: logits must be float16, bfloat16, float32 or float64, got %s"
                        % logits.dtype.name)
    rank = logits.shape.rank
    if rank is None:
        # The op's own axis needs no rank (as tf.nn.softmax's default); a scalar fails when run, as there.
        if axis == -1:
            return _lib.warp_softmax(logits, log_softmax=log)
        raise ValueError("warp_softmax needs logits of known rank for axis %d (axis -1 takes any)" % axis)
    axis = dims.normalize(axis, rank, "warp_softmax", "axis", ValueError)
    if rank == 0 or axis == rank - 1:
        return _lib.warp_softmax(logits, log_softmax=log) if rank else \
            tf.reshape(_lib.warp_softmax(tf.reshape(logits, [1]), log_softmax=log), [])
    perm = [i for i in range(rank) if i != axis] + [axis]  # the axis last, then back
    inverse = [perm.index(i) for i in range(rank)]
    return tf.transpose(_lib.warp_softmax(tf.transpose(logits, perm), log_softmax=log), inverse)


def warp_softmax(logits, axis=-1):
    """softmax over `axis` with warp_softmax's kernels; as tf.nn.softmax."""
    return _apply(logits, axis, False)


def warp_log_softmax(logits, axis=-1):
    """log_softmax over `axis` with the same kernels; as tf.nn.log_softmax."""
    return _apply(logits, axis, True)
