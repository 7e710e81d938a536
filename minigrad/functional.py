"""Neural-network functions: relu, linear, softmax, log_softmax, cross_entropy.

softmax, log_softmax and cross_entropy are fused Functions: one node each in
the graph, numerically stable (the row maximum is subtracted before exp), with
gradient rules written in Tensor operations so they differentiate again.
softmax, log_softmax and cross_entropy run warp_softmax's C++ kernel (kernels
package) for float32/float64 when it is built, and NumPy otherwise. Integer or boolean inputs
are promoted to float64, minigrad's default float dtype: the loss of integer logits is the
float logits' (2.4076 for [[1, 2, 3]] and class 0), not rounded to an integer (issue 12);
torch's softmax kernels refuse integers.
"""

import functools
import math

import numpy as np

from kernels import dims
from minigrad import ops
from minigrad.dtypes import floating
from minigrad.function import Function
from minigrad.grad_mode import _State
from minigrad.tensor import Tensor

_wrap = Tensor._wrap  # (bound once: Tensor._wrap looks the classmethod up and binds it per call)

try:  # warp_softmax's C++ kernels, when the kernels package is built (its pybind11 module)
    from kernels import warp_softmax_numpy as _kernel
except ImportError:
    _kernel = None


def _data(value):
    return value.data if isinstance(value, Tensor) else value


def _check_tensor(op, name, value):
    """torch.nn.functional takes Tensors only; an ndarray would otherwise fail deep inside the
    operation (an ndarray's .data is a buffer, not the array) with no word about the cause.
    The functions below call it only once an isinstance check has failed (a call for each
    argument made 8 Python calls in each step of the digits MLP)."""
    if not isinstance(value, Tensor):
        kind = type(value)
        kind = kind.__name__ if kind.__module__ == "builtins" else "%s.%s" % (kind.__module__,
                                                                               kind.__name__)
        raise TypeError("%s: %s must be a minigrad Tensor, got %s; wrap it: minigrad.Tensor(...)"
                        % (op, name, kind))


def relu(x):
    if not isinstance(x, Tensor):
        _check_tensor("relu", "input", x)
    return ops.ReLU.apply(x)


def where(condition, input, other):
    """`input` where `condition` holds, else `other`, as torch.where: the three broadcast
    together, input and other promote; `condition` a boolean tensor or array (no gradient),
    `input` and `other` tensors or numbers."""
    if not isinstance(condition, Tensor):  # (a copy: the backward reads it)
        condition = Tensor(condition)
    if condition.dtype != bool:
        raise TypeError("where: expected condition to be a boolean tensor, got %s (as in torch); "
                        "compare to make one: where(x > 0, x, 0)" % condition.dtype)
    return ops.Where.apply(condition, input, other)


def _log_softmax(x, axis):
    if _kernel is not None and x.dtype in _KERNEL_DTYPES:
        return _kernel.log_softmax(x, axis)
    if x.dtype == np.float16:  # in float32, rounded once, as torch computes half precision
        return _log_softmax(x.astype(np.float32), axis).astype(np.float16)
    if x.size == 0:  # (NumPy's max of no elements raises)
        return np.empty_like(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _softmax(x, axis):
    if _kernel is not None and x.dtype in _KERNEL_DTYPES:
        return _kernel.softmax(x, axis)
    if x.dtype == np.float16:
        return _softmax(x.astype(np.float32), axis).astype(np.float16)
    if x.size == 0:
        return np.empty_like(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_max, _sum = np.maximum.reduce, np.add.reduce  # (ndarray.max and .sum go through a Python frame)


def _needs(value):
    return isinstance(value, Tensor) and value.requires_grad


def _dim(op, shape, dim):
    """dim as an axis; a 0-d tensor takes dim 0 or -1 (as in torch)."""
    if isinstance(dim, (tuple, list)) or isinstance(dim, bool):
        raise TypeError("%s: dim must be one int, got %r" % (op, dim))
    return dims.normalize(dim, len(shape), op, shape=shape)


class _RowwiseSoftmax(Function):
    """softmax-like along `dim`; the output is saved (the gradient is a function of it)."""

    fn = op = None

    @classmethod
    def forward(cls, ctx, x, dim):
        ctx.dim = dim = _dim(cls.op, x.shape, dim)
        data = floating(x.data)
        # A 0-d tensor is a row of one.
        out = _wrap(cls.fn(data.reshape(1), 0).reshape(()) if data.ndim == 0
                    else cls.fn(data, dim))
        ctx.save_for_backward(out)
        return out


class Softmax(_RowwiseSoftmax):
    fn, op = staticmethod(_softmax), "softmax"

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        if _unrecorded(grad, y):
            return _wrap(_kernel.softmax_backward(grad.data, y.data, ctx.dim)), None
        return Softmax.backward_of(y, grad, ctx.dim), None

    @staticmethod
    def backward_of(y, grad, dim):
        """The vector-Jacobian product of softmax at output y."""
        return y * (grad - (grad * y).sum(dim, keepdim=True))


class LogSoftmax(_RowwiseSoftmax):
    fn, op = staticmethod(_log_softmax), "log_softmax"

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        if _unrecorded(grad, out):
            return _wrap(_kernel.log_softmax_backward(grad.data, out.data, ctx.dim)), None
        return grad - out.exp() * grad.sum(ctx.dim, keepdim=True), None


def _unrecorded(grad, out):
    """Whether a softmax's backward can run as the kernel's one fused pass over the arrays:
    nothing records it (a first-order backward, outside the transforms) and the kernel takes
    the dtype. The rule's four recorded operations took 1.4-1.5x torch's time (float32,
    4x4x128x128, a helper's attention block)."""
    return (_kernel is not None and not (_State.enabled or _State.transforms)
            and grad.data.dtype == out.data.dtype and out.data.dtype in _KERNEL_DTYPES)


def softmax(x, dim=-1):
    if not isinstance(x, Tensor):
        _check_tensor("softmax", "input", x)
    return Softmax.apply(x, dim)


def log_softmax(x, dim=-1):
    if not isinstance(x, Tensor):
        _check_tensor("log_softmax", "input", x)
    return LogSoftmax.apply(x, dim)


def out_of_range(target, classes):
    """Whether an integer target holds a value outside [0, classes). One reduction checks both
    bounds: read as unsigned, negative values are large. A narrow signed type is widened first
    when its negative values, so read, could be below `classes` (int8's -1 reads as 255)."""
    if target.dtype.kind == "i" and classes > 1 << (8 * target.dtype.itemsize - 1):
        target = target.astype(np.int64)
    return _max(target.view(_UNSIGNED[target.dtype.itemsize])) >= classes


def check_target(shape, target):
    """Raises unless `target` holds one class index in [0, classes) per row of logits `shape`."""
    if len(shape) != 2:
        raise ValueError("cross_entropy: logits must be (batch, classes), got shape %s"
                         % (tuple(shape),))
    if target.dtype.kind not in "iu":
        raise TypeError("cross_entropy: target must hold integer class indices, got dtype %s"
                        % target.dtype)
    if target.shape != (shape[0],):
        raise ValueError("cross_entropy: target shape %s does not match %d logits rows"
                         % (tuple(target.shape), shape[0]))
    if shape[0] and out_of_range(target, shape[1]):
        raise IndexError("cross_entropy: target values must be in [0, %d), got %d..%d"
                         % (shape[1], target.min(), target.max()))


def _picks(n, classes, target):
    """The flat indices of each row's target class in a C-contiguous (n, classes) array.
    Indexing the flattened array with them took 0.9 us against 2.2 us for the pair
    (np.arange(n), target) at the digits MLP's 64x10 (Intel Xeon family 6 model 167)."""
    return _row_starts(n, classes) + target.astype(np.intp, copy=False)


@functools.lru_cache(maxsize=16)
def _row_starts(n, classes):
    starts = np.arange(0, n * classes, classes, dtype=np.intp)
    starts.flags.writeable = False  # shared by every call
    return starts


class CrossEntropy(Function):
    """Mean negative log-likelihood of integer class targets under softmax(logits)."""

    _kept_arrays = ("log_probs",)
    _forward_on_arrays = True

    @staticmethod
    def forward(ctx, logits, target):
        x = floating(logits.data)
        if isinstance(target, Tensor):
            # saved too: an in-place change to it before backward is torch's error, not a
            # gradient for other classes
            ctx.save_for_backward(logits, target)
            target = target.data
        else:
            ctx.save_for_backward(logits)
        check_target(x.shape, target)
        n = x.shape[0]
        # One pass of the log_softmax kernel; backward's softmax is its exp.
        ctx.log_probs = log_probs = _log_softmax(x, 1)
        # An empty batch gives nan, as in torch.
        loss = -_sum(log_probs.reshape(-1)[_picks(n, x.shape[1], target)]) / n if n else np.nan
        return _wrap(np.asarray(loss, dtype=x.dtype))

    @staticmethod
    def backward(ctx, grad):
        logits = ctx.saved_tensors[0]
        # The target as it came (a Tensor stays one: a trace sees it as an input).
        return CrossEntropyGrad.apply(logits, ctx.inputs[1], grad, ctx.log_probs), None


class CrossEntropyGrad(Function):
    """(softmax(logits) - onehot(target)) * grad / n: the gradient of CrossEntropy as one
    node, whose own backward (through softmax and grad) gives second derivatives."""

    @staticmethod
    def forward(ctx, logits, target, grad, log_probs=None):
        # log_probs: log_softmax(logits) from CrossEntropy's forward, if at hand.
        out = np.exp(log_probs) if log_probs is not None else _softmax(floating(logits.data), 1)
        if not out.flags.c_contiguous:  # (_picks index its rows in place, flat)
            out = np.ascontiguousarray(out)
        n = out.shape[0]
        if n:  # (an empty batch's gradient is empty)
            out.reshape(-1)[_picks(n, out.shape[1], _data(target))] -= 1
            # The scale as a Python float (a 0-d array's division cost 0.6 us): the quotient is
            # rounded to out's dtype once, as in float32 and float64 before; in float16 it is
            # closer than before, as n is no longer rounded to a float16 first.
            out *= grad.data.item() / n
        return _wrap(out)

    @staticmethod
    def backward(ctx, g):
        logits, target, grad = ctx.inputs[:3]  # (log_probs is passed only by CrossEntropy)
        n = logits.shape[0]
        probs = Softmax.apply(logits, 1)
        g_logits = Softmax.backward_of(probs, g * (grad / n), 1) if _needs(logits) else None
        g_grad = None
        if _needs(grad):
            g_grad = ((probs - onehot(target, n, logits.shape[1], probs.dtype)) * g).sum() / n
        return g_logits, None, g_grad  # (none for log_probs: _pad)


class Pick(Function):
    """x[r, target[r]] for each row r of x (rows, classes): the value at each row's class
    index, its targets checked as cross_entropy's. vmap's cross_entropy picks each example's
    log-probabilities with it (batching.py), where it indexed by an array of the targets'
    values: hlo exports Pick, the targets an operand that the program checks as it runs."""

    _forward_on_arrays = True

    @staticmethod
    def forward(ctx, x, target):
        data = np.ascontiguousarray(x.data)  # (_picks index its rows flat)
        target = _data(target)
        check_target(data.shape, target)
        return _wrap(data.reshape(-1)[_picks(data.shape[0], data.shape[1], target)])

    @staticmethod
    def backward(ctx, grad):
        x, target = ctx.inputs
        return PickGrad.apply(grad, target, x.shape[1]), None


def onehot(target, rows, classes, dtype):
    """(rows, classes) of dtype, 1 at each row's class index: an operation on the target (PickGrad
    of ones), which a trace reads; built as an array from the target's values, jit compiled the
    first call's targets in."""
    return PickGrad.apply(_wrap(np.ones(rows, dtype)), target, classes)


class PickGrad(Function):
    """Pick's gradient (rows, classes): grad[r] at each row's class index, 0 elsewhere."""

    _forward_on_arrays = True

    @staticmethod
    def forward(ctx, grad, target, classes):
        g, target = grad.data, _data(target)
        check_target((g.shape[0], classes), target)  # (an index out of range would write elsewhere)
        out = np.zeros((g.shape[0], classes), g.dtype)
        out.reshape(-1)[_picks(g.shape[0], classes, target)] = g
        return _wrap(out)

    @staticmethod
    def backward(ctx, g):
        return Pick.apply(g, ctx.inputs[1]), None  # (none for classes: _pad)


def cross_entropy(logits, target):
    """Mean cross-entropy of `logits` (batch, classes) against integer `target` (batch,); of one
    example's `logits` (classes,) against a 0-d `target`, as torch's (vmap's per-example loss)."""
    # A Tensor target is passed on as it is, so that vmap sees whether it is batched.
    if not isinstance(logits, Tensor):
        _check_tensor("cross_entropy", "input", logits)
    if not isinstance(target, Tensor):
        target = np.asarray(target)
    if logits.ndim == 1:  # a batch of one, its loss the same number
        if target.shape not in ((), (1,)):  # (torch takes either)
            raise ValueError("cross_entropy: logits of shape %s (one example) take a 0-d target, "
                             "got shape %s" % (tuple(logits.shape), tuple(target.shape)))
        return CrossEntropy.apply(logits.reshape(1, -1), target.reshape(1))
    return CrossEntropy.apply(logits, target)


class Linear(Function):
    """x @ weight.T + bias as one node (as torch's addmm): one graph node per layer."""

    _forward_on_arrays = True

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(*ops.each_reads_other(x, weight))
        dtype = x.data.dtype
        if weight.data.dtype != dtype or bias is not None and bias.data.dtype != dtype:
            raise ops.dtypes_error("linear", x, weight, bias)
        try:
            out = x.data @ weight.data.T
        except ValueError:
            raise ValueError("linear: input of shape %s does not fit a weight of shape %s"
                             % (tuple(x.shape), tuple(weight.shape))) from None
        if bias is not None:
            try:
                out += bias.data
            except ValueError:
                raise ValueError("linear: a bias of shape %s does not fit the output's shape %s; it "
                                 "takes (out_features,) = (%d,)" % (tuple(bias.shape), out.shape,
                                                                   weight.shape[0])) from None
        return _wrap(out)

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # raises if freed or modified in place
        x, weight, bias = ctx.inputs
        need_bias = bias is not None and bias._requires_grad
        if _State.enabled or _State.transforms:  # recorded, or seen by a transform: on Tensors
            return _linear_vjp(grad, x, weight, x._requires_grad, weight._requires_grad, need_bias)
        # Nothing records (a first-order backward): the same rule on the arrays, without six
        # recorded operations' bookkeeping; this runs once per layer per training step.
        gx, gw, gb = _linear_vjp(grad.data, x.data, weight.data, x._requires_grad,
                                 weight._requires_grad, need_bias)
        return (gx if gx is None else _wrap(gx), gw if gw is None else _wrap(gw),
                gb if gb is None else _wrap(gb))


def _linear_vjp(grad, x, weight, need_x, need_weight, need_bias):
    """Linear's gradients, in operators that ndarrays and Tensors share (so one rule serves
    both: see Linear.backward). The 2-D case comes first, and conj is called for complex
    operands only: the general form's calls and tuple of axes cost the digits MLP's step 3 us
    (the step timed with each form in turn in one process, Intel Xeon family 6 model 167)."""
    if x.dtype.kind == "c" or weight.dtype.kind == "c":  # (conj of a real operand: itself)
        x, weight = ops._conj(x), ops._conj(weight)
    gx = grad @ weight if need_x else None
    gw = gb = None
    if grad.ndim == 2:
        if need_weight:
            gw = grad.T @ x
        if need_bias:
            gb = _sum_rows(grad)
    else:  # leading dims of any number: rows of a matrix for the weight, summed for the bias
        if need_weight:  # (rows counted: reshape(-1, 0) of an empty array is ambiguous)
            rows = math.prod(grad.shape[:-1])
            gw = grad.reshape((rows, grad.shape[-1])).T @ x.reshape((rows, x.shape[-1]))
        if need_bias:
            gb = grad if grad.ndim == 1 else grad.sum(tuple(range(grad.ndim - 1)))
    return gx, gw, gb


_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


def _sum_rows(grad):
    """grad.sum(0): a bias's gradient. An array of a BLAS dtype is summed as a product with a
    vector of ones, one gemv; ndarray.sum's reduction over the rows takes 2.5x as long (64x128
    float32: 2.2 against 0.9 us, Intel Xeon family 6 model 167)."""
    if grad.__class__ is np.ndarray and grad.dtype in _BLAS_DTYPES:
        return _ones(grad.shape[0], grad.dtype) @ grad
    return grad.sum(0)


@functools.lru_cache(maxsize=16)
def _ones(n, dtype):
    ones = np.ones(n, dtype)
    ones.flags.writeable = False  # shared by every call
    return ones


def linear(x, weight, bias=None):
    """x @ weight.T + bias, with weight of shape (out_features, in_features)."""
    if not (isinstance(x, Tensor) and isinstance(weight, Tensor)
            and (bias is None or isinstance(bias, Tensor))):
        _check_tensor("linear", "input", x)  # the first that is not a Tensor raises
        _check_tensor("linear", "weight", weight)
        _check_tensor("linear", "bias", bias)
    if weight.ndim == 1:  # one output feature, its dim dropped: x @ weight (+ a 0-d bias)
        return x @ weight if bias is None else x @ weight + bias
    return Linear.apply(x, weight, bias)
