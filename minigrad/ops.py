"""Every differentiable operation: a forward on arrays and a gradient rule on Tensors.

Gradient rules are written with Tensor operations, so under create_graph they
are recorded themselves and gradients of any order come for free. Binary
operations take a Tensor or a plain number on either side (a number keeps the
Tensor's dtype, as in NumPy); broadcasting is NumPy's, and each gradient is
summed back to its input's shape (SumTo).
"""

import numpy as np

from minigrad.function import Function
from minigrad.tensor import Tensor

_wrap = Tensor._wrap


def _data(value):
    return value.data if value.__class__ is Tensor else value


def _shape(value):
    return value.data.shape if value.__class__ is Tensor else ()


def _needs(value):
    return value.__class__ is Tensor and value.requires_grad


def _sum_to(grad, shape):
    return grad if grad.data.shape == shape else SumTo.apply(grad, shape)


class _Binary(Function):
    """Elementwise with broadcasting: one NumPy ufunc forward, a gradient rule per subclass."""

    ufunc = None
    saves = True  # whether the gradient needs the operands' values (then in-place changes are caught)

    @classmethod
    def forward(cls, ctx, a, b):
        if cls.saves:
            ctx.save_for_backward(*[v for v in (a, b) if v.__class__ is Tensor])
        try:
            return _wrap(cls.ufunc(_data(a), _data(b)))
        except ValueError:
            raise ValueError("%s: shapes %s and %s cannot be broadcast together"
                             % (cls.ufunc.__name__, tuple(_shape(a)), tuple(_shape(b)))) from None


class Add(_Binary):
    ufunc, saves = np.add, False

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.inputs
        return (_sum_to(grad, _shape(a)) if _needs(a) else None,
                _sum_to(grad, _shape(b)) if _needs(b) else None)


class Sub(_Binary):
    ufunc, saves = np.subtract, False

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.inputs
        return (_sum_to(grad, _shape(a)) if _needs(a) else None,
                _sum_to(-grad, _shape(b)) if _needs(b) else None)


class Mul(_Binary):
    ufunc = np.multiply

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # raises if freed or modified in place
        a, b = ctx.inputs
        return (_sum_to(grad * b, _shape(a)) if _needs(a) else None,
                _sum_to(grad * a, _shape(b)) if _needs(b) else None)


class Div(_Binary):
    ufunc = np.true_divide

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors
        a, b = ctx.inputs
        return (_sum_to(grad / b, _shape(a)) if _needs(a) else None,
                _sum_to(-grad * a / (b * b), _shape(b)) if _needs(b) else None)


class Pow(_Binary):
    ufunc = np.power

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors
        a, b = ctx.inputs
        ga = gb = None
        if _needs(a):
            ga = _sum_to(grad * b * a ** (b - 1), _shape(a))
        if _needs(b):
            gb = _sum_to(grad * a ** b * Log.apply(a), _shape(b))
        return ga, gb


class Neg(Function):
    @staticmethod
    def forward(ctx, a):
        return _wrap(np.negative(a.data))

    @staticmethod
    def backward(ctx, grad):
        return -grad


class MatMul(Function):
    """np.matmul: 1-D operands are promoted as NumPy does, batch dimensions broadcast."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        try:
            return _wrap(np.matmul(a.data, b.data))
        except ValueError:
            raise ValueError("matmul: shapes %s and %s are not aligned"
                             % (tuple(a.shape), tuple(b.shape))) from None

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        # 1-D operands were promoted to matrices: give the gradient those dims back.
        a2 = a if a.ndim > 1 else Reshape.apply(a, (1,) + a.shape)
        b2 = b if b.ndim > 1 else Reshape.apply(b, b.shape + (1,))
        g = grad
        if a.ndim == 1 and b.ndim == 1:
            g = Reshape.apply(grad, (1, 1))
        elif a.ndim == 1:
            g = Reshape.apply(grad, grad.shape[:-1] + (1, grad.shape[-1]))
        elif b.ndim == 1:
            g = Reshape.apply(grad, grad.shape + (1,))
        ga = gb = None
        if a.requires_grad:
            ga = _sum_to(MatMul.apply(g, Permute.apply(b2, _swap_last(b2.ndim))), a2.shape)
            ga = Reshape.apply(ga, a.shape) if ga.shape != a.shape else ga
        if b.requires_grad:
            gb = _sum_to(MatMul.apply(Permute.apply(a2, _swap_last(a2.ndim)), g), b2.shape)
            gb = Reshape.apply(gb, b.shape) if gb.shape != b.shape else gb
        return ga, gb


def _swap_last(ndim):
    axes = list(range(ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return tuple(axes)


def _axes(dim, ndim):
    if dim is None:
        return None
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    for d in dims:
        if not -ndim <= d < max(ndim, 1):
            raise IndexError("dimension %d is out of range for a tensor with %d dimensions"
                             % (d, ndim))
    return tuple(d % max(ndim, 1) for d in dims)


def _keepdim_shape(shape, axes):
    if axes is None:
        return (1,) * len(shape)
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _unreduce(ctx, grad):
    """A reduction's incoming gradient with the reduced dims back (as size 1)."""
    return grad if ctx.keepdim else Reshape.apply(grad, _keepdim_shape(ctx.shape, ctx.axes))


class Sum(Function):
    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        axes = _axes(dim, a.ndim)
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        return _wrap(np.asarray(a.data.sum(axis=axes, keepdims=keepdim)))

    @staticmethod
    def backward(ctx, grad):
        return Expand.apply(_unreduce(ctx, grad), ctx.shape)


class Mean(Function):
    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        axes = _axes(dim, a.ndim)
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        ctx.count = a.data.size if axes is None else int(np.prod([a.shape[i] for i in axes]))
        return _wrap(np.asarray(a.data.mean(axis=axes, keepdims=keepdim)))

    @staticmethod
    def backward(ctx, grad):
        return Expand.apply(_unreduce(ctx, grad) / ctx.count, ctx.shape)


class Max(Function):
    """Over one dim, the gradient goes to the first maximal element (as torch.max(dim));
    over all elements it is shared evenly between ties (as torch.max())."""

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        if a.data.size == 0:
            raise RuntimeError("max() of an empty tensor")
        axes = _axes(dim, a.ndim)
        if axes is None:
            out = a.data.max()
            mask = a.data == out
            ctx.mask = mask / mask.sum()
            result = out.reshape((1,) * a.ndim) if keepdim else np.asarray(out)
        else:
            (axis,) = axes
            index = np.expand_dims(a.data.argmax(axis=axis), axis)
            mask = np.zeros(a.shape, dtype=a.dtype)
            np.put_along_axis(mask, index, 1, axis=axis)
            ctx.mask = mask
            out = np.take_along_axis(a.data, index, axis=axis)
            result = out if keepdim else out.squeeze(axis)
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        return _wrap(result)

    @staticmethod
    def backward(ctx, grad):
        return _unreduce(ctx, grad) * ctx.mask


class _OfOutput(Function):
    """y = fn(x) whose gradient is a function of y: the output is saved, and under
    create_graph it carries the graph back to the input."""

    fn = None

    @classmethod
    def forward(cls, ctx, a):
        out = _wrap(cls.fn(a.data))
        ctx.save_for_backward(out)
        return out


def _sigmoid(x):
    # exp of a non-positive number only: no overflow for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


class Exp(_OfOutput):
    fn = staticmethod(np.exp)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


class Tanh(_OfOutput):
    fn = staticmethod(np.tanh)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


class Sigmoid(_OfOutput):
    fn = staticmethod(_sigmoid)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)


class Log(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return _wrap(np.log(a.data))

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad / a


class ReLU(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.mask = a.data > 0
        return _wrap(np.maximum(a.data, 0))

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.mask


class Reshape(Function):
    @staticmethod
    def forward(ctx, a, shape):
        ctx.shape = a.shape
        try:
            return _wrap(a.data.reshape(shape))
        except ValueError:
            raise ValueError("reshape: cannot reshape a tensor of shape %s (%d elements) into %s"
                             % (tuple(a.shape), a.data.size, tuple(shape))) from None

    @staticmethod
    def backward(ctx, grad):
        return Reshape.apply(grad, ctx.shape)


class Permute(Function):
    @staticmethod
    def forward(ctx, a, axes):
        ctx.axes = axes
        return _wrap(a.data.transpose(axes))

    @staticmethod
    def backward(ctx, grad):
        return Permute.apply(grad, tuple(np.argsort(ctx.axes)))


class Expand(Function):
    """Broadcasts to `shape` (a copy, so results are ordinary writable arrays)."""

    @staticmethod
    def forward(ctx, a, shape):
        ctx.shape = a.shape
        return _wrap(np.array(np.broadcast_to(a.data, shape)))

    @staticmethod
    def backward(ctx, grad):
        return SumTo.apply(grad, ctx.shape)


class SumTo(Function):
    """Sums a broadcast result back to `shape`: the gradient of broadcasting."""

    @staticmethod
    def forward(ctx, a, shape):
        ctx.shape = a.shape
        lead = a.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, n in enumerate(shape) if n == 1 and a.shape[lead + i] != 1)
        out = a.data.sum(axis=axes, keepdims=True) if axes else a.data
        return _wrap(np.asarray(out).reshape(shape))

    @staticmethod
    def backward(ctx, grad):
        return Expand.apply(grad, ctx.shape)


class Index(Function):
    """x[index]: basic and advanced NumPy indexing."""

    @staticmethod
    def forward(ctx, a, index):
        ctx.shape, ctx.index = a.shape, index
        try:
            return _wrap(np.array(a.data[index]))
        except IndexError as e:
            raise IndexError("index %r into a tensor of shape %s: %s" % (index, tuple(a.shape), e)) from None

    @staticmethod
    def backward(ctx, grad):
        return IndexAdd.apply(grad, ctx.index, ctx.shape)


class IndexAdd(Function):
    """zeros(shape) with `a` added at `index` (repeated indices accumulate)."""

    @staticmethod
    def forward(ctx, a, index, shape):
        ctx.index = index
        out = np.zeros(shape, dtype=a.dtype)
        np.add.at(out, index, a.data)
        return _wrap(out)

    @staticmethod
    def backward(ctx, grad):
        return Index.apply(grad, ctx.index)
