"""vmap's batching rules: each operation rewritten over a leading batch dimension.

Inside vmap a batched tensor holds the whole batch: its data's dim 0 is the
batch dimension, the rest is one example's (logical) shape. A rule takes the
operation's arguments and, for each, whether it is batched, and returns the
batched result, computed with ordinary operations on the whole batch (one
NumPy call per operation, no loop over examples). Those operations are
recorded as usual, so reverse mode differentiates through vmap, and
minigrad.func.grad inside vmap differentiates the batched graph directly.
"""

import math

import numpy as np

from minigrad import functional as F
from minigrad import ops
from minigrad.dtypes import result_dtype
from minigrad.tensor import Tensor


def repeated(t, count):
    """t repeated `count` times along a new dim 0: a stride-0 view, in recorded operations (so
    that a transform outside sees through it)."""
    shape = t.shape  # (one example's, under the vmap that batches t: repeated per example)
    return ops.Expand.apply(ops.Reshape.apply(t, (1,) + shape), (count,) + shape)


def _ndim(value, batched):
    """The logical (one example's) number of dims."""
    return value.ndim - 1 if batched else np.ndim(value)


def _lift(value, batched, ndim):
    """A batched value with 1-sized dims after the batch dim, up to `ndim` logical dims, so
    that NumPy's right-aligned broadcasting lines its example dims up with the others'."""
    if not batched or value.ndim - 1 >= ndim:
        return value
    k = value.ndim - 1
    return ops.Reshape.apply(value, value.shape[:1] + (1,) * (ndim - k) + value.shape[1:])


def elementwise(cls, args, batched):
    n = max(_ndim(v, b) for v, b in zip(args, batched))
    if issubclass(cls, ops._Binary):
        args = _promoted_per_example(args, batched)
    try:
        return cls.apply(*[_lift(v, b, n) for v, b in zip(args, batched)])
    except ValueError:
        # The operation's own message names the batched shapes, which the caller never wrote.
        shapes = [tuple(v.shape[1:]) if b else np.shape(v)
                  for v, b in zip(args, batched) if not callable(v)]  # (Compare's ufunc)
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            ufunc = getattr(cls, "ufunc", None) or next((v for v in args if callable(v)), None)
            name = ufunc.__name__ if ufunc else cls.__name__.lower()
            raise ValueError("%s: shapes %s cannot be broadcast together (per example, inside "
                             "vmap)" % (name, " and ".join(map(str, shapes)))) from None
        raise


def _promoted_per_example(args, batched):
    """Two tensor operands of different dtypes cast to what one example's operation would
    give: torch lets a 0-d operand's dtype count less than a dimensioned one's, and a batched
    example's 0-d operand has a dim (float64 0-d * float32 [n] stays float32)."""
    (a, b), (ba, bb) = args, batched
    if (a.__class__ is not Tensor or b.__class__ is not Tensor or a.dtype == b.dtype
            or "b" in (a.dtype.kind, b.dtype.kind)):
        return args
    dtype = result_dtype(a.dtype, _ndim(a, ba) > 0, b.dtype, _ndim(b, bb) > 0)
    return [v if v.dtype == dtype else ops.Cast.apply(v, dtype) for v in args]


def unary(cls, args, batched):
    return cls.apply(*args)


def reduction(cls, args, batched):
    """sum, mean, max over logical dims: the same dims one further; over all: all but dim 0."""
    a, dim, keepdim = tuple(args) + (None, False)[len(args) - 1:]
    name = cls.__name__.lower()
    axes = ops._axes(name, dim, a.shape[1:])  # checked against the example's shape
    if axes is None:
        # max() over all elements shares ties: a tuple of dims keeps that meaning.
        return cls.apply(a, tuple(range(1, a.ndim)), keepdim)
    if cls is ops.Max and isinstance(dim, (int, np.integer)):
        return cls.apply(a, axes[0] + 1, keepdim)
    return cls.apply(a, tuple(i + 1 for i in axes), keepdim)


def argmax(cls, args, batched):
    """max(dim)'s indices over the same dim one further; a 0-d example's is its only element."""
    a, dim, keepdim = args
    axes = ops._axes("max", dim, a.shape[1:])
    if axes is None:
        return cls.apply(ops.Reshape.apply(a, a.shape + (1,)), 1, False)
    return cls.apply(a, axes[0] + 1, keepdim)


def matmul(cls, args, batched):
    (a, b), (ba, bb) = args, batched
    batch = (a if ba else b).shape[0]
    la, lb = a.shape[ba:], b.shape[bb:]  # one example's shapes
    if len(la) == 0 or len(lb) == 0:
        raise ValueError("matmul: both operands need at least one dimension, got shapes %s and "
                         "%s (per example, inside vmap); multiply by a 0-d tensor with *" % (la, lb))
    try:
        if la[-1] != lb[-2 if len(lb) > 1 else 0]:
            raise ValueError
        shape = (np.broadcast_shapes(la[:-2], lb[:-2]) + la[-2:-1] * (len(la) > 1)
                 + lb[-1:] * (len(lb) > 1))
    except ValueError:  # checked here: the batched operation would name the batched shapes
        raise ValueError("matmul: shapes %s and %s are not aligned (per example, inside vmap)"
                         % (la, lb)) from None
    # Batches of vectors become batches of one-row (one-column) matrices; the result is
    # reshaped to the example's result shape afterwards.
    if ba and len(la) == 1:
        a = ops.Reshape.apply(a, (batch, 1) + la)
    if bb and len(lb) == 1:
        b = ops.Reshape.apply(b, (batch,) + lb + (1,))
    n = max(_ndim(a, ba), _ndim(b, bb))
    out = ops.MatMul.apply(_lift(a, ba, n), _lift(b, bb, n))
    return out if out.shape[1:] == shape else ops.Reshape.apply(out, (batch,) + shape)


def reshape(cls, args, batched):
    a, shape = args
    shape = tuple(shape)
    if -1 in shape and a.shape[0] == 0:
        # (NumPy cannot infer a -1 over a batch of no examples: it is inferred from one's size)
        known, size = math.prod(d for d in shape if d != -1), math.prod(a.shape[1:])
        if known and size % known == 0:
            shape = tuple(size // known if d == -1 else d for d in shape)
    return ops.Reshape.apply(a, a.shape[:1] + shape)


def permute(cls, args, batched):
    a, axes = args
    return ops.Permute.apply(a, (0,) + tuple(x % (a.ndim - 1) + 1 for x in axes))


def expand(cls, args, batched):
    a, shape = args
    return ops.Expand.apply(_lift(a, True, len(shape)), a.shape[:1] + tuple(shape))


def sum_to(cls, args, batched):
    a, shape = args
    lead = a.ndim - 1 - len(shape)
    if lead:
        a = ops.Sum.apply(a, tuple(range(1, lead + 1)))
    return ops.SumTo.apply(a, a.shape[:1] + tuple(shape))


def refuse_batched_index(index):
    for i in index if isinstance(index, tuple) else (index,):
        if isinstance(i, Tensor) and i._batch is not None:
            raise NotImplementedError("vmap: indexing with a batched index tensor is not supported; "
                                      "index with an unbatched array, or use cross_entropy for "
                                      "per-example targets")


def _batched_index(index):
    refuse_batched_index(index)
    index = index if isinstance(index, tuple) else (index,)
    index = tuple(i.data if isinstance(i, Tensor) else i for i in index)
    advanced = [k for k, i in enumerate(index) if not isinstance(i, (slice, type(None), type(...)))]
    if any(not isinstance(index[k], (int, np.integer)) for k in advanced):
        # NumPy puts the dims of non-adjacent advanced indices first: before the batch dim.
        front = advanced and advanced[-1] - advanced[0] + 1 != len(advanced)
        width = np.broadcast(*[np.asarray(index[k]) for k in advanced]).ndim if front else 0
    else:
        width = 0
    return (slice(None),) + index, width


def index(cls, args, batched):
    a, idx = args
    idx, width = _batched_index(idx)
    out = ops.Index.apply(a, idx)
    if width:  # bring the batch dim back to the front
        out = ops.Permute.apply(out, (width,) + tuple(k for k in range(out.ndim) if k != width))
    return out


def index_add(cls, args, batched):
    a, idx, shape = args
    idx, width = _batched_index(idx)
    if width:
        raise NotImplementedError("vmap: the gradient of non-adjacent advanced indices is not "
                                  "supported; index one dim at a time")
    return ops.IndexAdd.apply(a, idx, a.shape[:1] + tuple(shape))


def softmax(cls, args, batched):
    x, dim = args
    if x.ndim == 1:  # a batch of 0-d tensors: rows of one
        return ops.Reshape.apply(cls.apply(ops.Reshape.apply(x, (x.shape[0], 1)), 1), x.shape)
    return cls.apply(x, F._dim(cls.op, x.shape[1:], dim) + 1)


def _example_shape(logits, target, bl, bt):
    """One example's logits shape (rows, classes), its targets' dtype and shape checked against
    it in eager cross_entropy's words (F.Pick and F.PickGrad check every example's values)."""
    shape = logits.shape[1:] if bl else logits.shape
    values = np.asarray(target.data if isinstance(target, Tensor) else target)
    F.check_target(shape, np.zeros(values.shape[1:], values.dtype) if bt else values)
    return shape


def _rows(value, batched, batch):
    """A batched or shared (then repeated) value with the batch folded into its rows: a
    Tensor stays one (a trace sees the class indices it picks by, and checks them as the
    program runs), an array one."""
    if not batched:
        value = (repeated(value, batch) if isinstance(value, Tensor)
                 else np.broadcast_to(value, (batch,) + np.shape(value)))
    shape = (value.shape[0] * value.shape[1],) + tuple(value.shape[2:])
    return ops.Reshape.apply(value, shape) if isinstance(value, Tensor) else np.reshape(value, shape)


def cross_entropy(cls, args, batched):
    """Per-example loss: the mean over rows of -log_softmax at each row's target."""
    (logits, target), (bl, bt) = args, batched
    batch = (logits if bl else target).shape[0]
    rows = _example_shape(logits, target, bl, bt)[0]
    picked = F.Pick.apply(F.LogSoftmax.apply(_rows(logits, bl, batch), 1), _rows(target, bt, batch))
    return -ops.Mean.apply(ops.Reshape.apply(picked, (batch, rows)), (1,))


def cross_entropy_grad(cls, args, batched):
    """cross_entropy's gradient per example, (softmax(logits) - onehot(target)) * grad / rows,
    in recorded operations (differentiated again by hessian, or by a jvp's tangent rule)."""
    (logits, target, grad), (bl, bt, bg) = args[:3], batched[:3]
    batch = next(a for a, b in zip(args, batched) if b).shape[0]
    shape = _example_shape(logits, target, bl, bt)
    probs = F.Softmax.apply(_rows(logits, bl, batch), 1)
    onehot = F.onehot(_rows(target, bt, batch), probs.shape[0], shape[1], probs.dtype)
    scale = grad / shape[0]
    if bg:
        scale = ops.Reshape.apply(scale, (batch, 1, 1))
    return ops.Reshape.apply(probs - onehot, (batch,) + tuple(shape)) * scale


def pick(cls, args, batched):
    (x, target), (bx, bt) = args, batched
    batch = (x if bx else target).shape[0]
    rows = x.shape[1] if bx else x.shape[0]
    return ops.Reshape.apply(F.Pick.apply(_rows(x, bx, batch), _rows(target, bt, batch)),
                             (batch, rows))


def pick_grad(cls, args, batched):
    (g, target, classes), (bg, bt) = args, batched[:2]
    batch = (g if bg else target).shape[0]
    rows = g.shape[1] if bg else g.shape[0]
    return ops.Reshape.apply(F.PickGrad.apply(_rows(g, bg, batch), _rows(target, bt, batch),
                                              classes), (batch, rows, classes))


def linear(cls, args, batched):
    (x, w, b), (bx, bw, bb) = args, batched
    if not (bx or bw):  # the bias alone is batched (jacfwd's column for it)
        return elementwise(ops.Add, (cls.apply(x, w, None), b), (False, True))
    wt = permute(None, (w, (1, 0)), None) if bw else ops.Permute.apply(w, (1, 0))
    try:
        out = matmul(None, (x, wt), (bx, bw))
    except ValueError:  # in eager linear's words
        raise ValueError("linear: input of shape %s does not fit a weight of shape %s (per "
                         "example, inside vmap)" % (x.shape[bx:], w.shape[bw:])) from None
    return out if b is None else elementwise(ops.Add, (out, b), (True, bb))


RULES = {
    ops.Add: elementwise, ops.Sub: elementwise, ops.Mul: elementwise, ops.Div: elementwise,
    ops.Pow: elementwise, ops.Where: elementwise, ops.Compare: elementwise,
    ops.Alias: unary, ops.Detach: unary, ops.Cast: unary, ops.Neg: unary, ops.Conj: unary, ops.Exp: unary, ops.Tanh: unary,
    ops.Imag: unary, ops.Sigmoid: unary, ops.Log: unary, ops.ReLU: unary, ops.Abs: unary, ops.Sign: unary,
    ops.Sum: reduction, ops.Mean: reduction, ops.Max: reduction, ops.Argmax: argmax,
    ops.MatMul: matmul, ops.Reshape: reshape, ops.Permute: permute, ops.Expand: expand,
    ops.SumTo: sum_to, ops.Index: index, ops.IndexAdd: index_add,
    F.Softmax: softmax, F.LogSoftmax: softmax, F.CrossEntropy: cross_entropy,
    F.CrossEntropyGrad: cross_entropy_grad, F.Pick: pick, F.PickGrad: pick_grad,
    F.Linear: linear,
}


def batch_rule(cls):
    rule = RULES.get(cls)
    if rule is None:
        raise NotImplementedError(
            "vmap: %s has no batching rule; add one to minigrad/batching.py's RULES, or call "
            "it outside vmap" % cls.__name__)
    return rule
