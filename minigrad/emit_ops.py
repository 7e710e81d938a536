"""StableHLO for each operation: one row per op class, used by minigrad.hlo.

A row takes the Emitter, the operation's arguments and its (eagerly computed)
result, whose shape and dtype the StableHLO must reproduce, and returns the SSA
name of the result. Broadcasting and dtype promotion, implicit in NumPy, are
made explicit (broadcast_in_dim, convert) from the result's shape and dtype.
"""

import numpy as np

from minigrad import functional as F
from minigrad import ops
from minigrad.dtypes import _operands
from minigrad.tensor import Tensor

_TYPES = {"f4": "f32", "f8": "f64", "i8": "i64", "i4": "i32", "i2": "i16", "i1": "i8",
          "u1": "ui8", "b1": "i1", "f2": "f16"}


def _list(values):
    return "[%s]" % ", ".join(str(int(v)) for v in values)


class Emitter:
    def __init__(self):
        self.lines, self.names, self.count = [], {}, 0
        # (name, shape, dtype, logits shape) of each class-index target that is an input or
        # computed from one, in trace order: its one-hot is all zeros for an index out of
        # range (a silently wrong loss), so jit's program returns a flag that says so
        # (targets_out_of_range), and the call raises eager's error
        self.target_checks = []

    @staticmethod
    def type(shape, dtype):
        code = np.dtype(dtype).str[1:]
        if code not in _TYPES:
            raise NotImplementedError("hlo: dtype %s is not supported" % np.dtype(dtype))
        return "tensor<%s>" % "x".join([str(n) for n in shape] + [_TYPES[code]])

    def bind(self, tensor, name):
        self.names[id(tensor)] = (name, tensor)  # the tensor is kept alive with its name

    def op(self, text, shape, dtype, operand_types=None):
        """Emits `%vN = text : type`; with operand_types, the functional type form."""
        name = "%%v%d" % self.count
        self.count += 1
        result = self.type(shape, dtype)
        if operand_types is None:
            self.lines.append("%s = %s : %s" % (name, text, result))
        else:
            self.lines.append("%s = %s : (%s) -> %s" % (name, text, ", ".join(operand_types), result))
        return name

    def constant(self, array):
        array = np.asarray(array)
        if array.dtype == bool:
            body = "true" if array.all() else "false" if not array.any() else str(
                array.tolist()).replace("True", "true").replace("False", "false")
        else:
            flat = np.ascontiguousarray(array).reshape(-1)
            # One value for all when every element has the first's bytes (== would take -0.0
            # for 0.0: a closed-over [0., -0.] became [0., 0.])
            rows = flat.view(np.uint8).reshape(flat.size, flat.itemsize)
            splat = flat.size and (rows == rows[0]).all()
            body = '"0x%s"' % (flat[:1] if splat else flat).tobytes().hex().upper()
        return self.op("stablehlo.constant dense<%s>" % body, array.shape, array.dtype)

    def value(self, v, dtype=None):
        """The SSA name of a tensor, an array or a number (as `dtype`, if given)."""
        if isinstance(v, Tensor) and id(v) in self.names:
            return self.names[id(v)][0]
        array = np.asarray(v.data if isinstance(v, Tensor) else v)
        return self.constant(array.astype(dtype) if dtype is not None else array)

    def cast(self, name, shape, src, dst):
        if np.dtype(src) == np.dtype(dst):
            return name
        return self.op("stablehlo.convert %s" % name, shape, dst, [self.type(shape, src)])

    def broadcast(self, name, shape, dtype, to, dims=None):
        """A (shape, dtype) value broadcast to `to`, its dims landing at `dims` of `to` (by
        default the trailing ones, as NumPy aligns shapes)."""
        shape, to = tuple(shape), tuple(to)
        if dims is None:
            if shape == to:
                return name
            dims = range(len(to) - len(shape), len(to))
        return self.op("stablehlo.broadcast_in_dim %s, dims = %s" % (name, _list(dims)), to, dtype,
                       [self.type(shape, dtype)])

    def operand(self, v, shape, dtype):
        """v converted to dtype and broadcast to shape."""
        array = v.data if isinstance(v, Tensor) else np.asarray(v)
        if not isinstance(v, Tensor) and array.ndim == 0:  # a number: a constant of the dtype
            return self.broadcast(self.value(array, dtype), (), dtype, shape)
        name = self.cast(self.value(v), array.shape, array.dtype, dtype)
        return self.broadcast(name, array.shape, dtype, shape)

    def reduce(self, name, shape, dtype, axes, kind):
        """Reduces `axes` of a (shape, dtype) value with stablehlo.add, maximum, minimum or or."""
        if np.dtype(dtype) == bool and kind in ("maximum", "minimum"):  # (no iinfo for bool)
            kind, init = ("or", False) if kind == "maximum" else ("and", True)
        elif kind in ("add", "or"):
            init = 0
        elif np.dtype(dtype).kind == "f":
            init = -np.inf if kind == "maximum" else np.inf
        else:
            init = np.iinfo(dtype).min if kind == "maximum" else np.iinfo(dtype).max
        zero = self.value(np.array(init, dtype))
        out = tuple(n for i, n in enumerate(shape) if i not in axes)
        return self.op("stablehlo.reduce(%s init: %s) applies stablehlo.%s across dimensions = %s"
                       % (name, zero, kind, _list(sorted(axes))), out, dtype,
                       [self.type(shape, dtype), self.type((), dtype)])

    def reshape(self, name, shape, dtype, to):
        if tuple(shape) == tuple(to):
            return name
        return self.op("stablehlo.reshape %s" % name, to, dtype, [self.type(shape, dtype)])


def _elementwise(kind):
    def rule(em, args, out):
        names = [em.operand(v, out.shape, out.dtype) for v in args]
        return em.op("stablehlo.%s %s" % (kind, ", ".join(names)), out.shape, out.dtype)
    return rule


_DIRECTIONS = {np.greater: "GT", np.greater_equal: "GE", np.equal: "EQ", np.not_equal: "NE",
               np.less: "LT", np.less_equal: "LE", ops.real_greater_equal: "GE"}


def _compare(em, args, out):
    ufunc, a, b = args
    if ufunc is np.logical_and:
        return em.op("stablehlo.and %s, %s" % (em.operand(a, out.shape, bool),
                                                em.operand(b, out.shape, bool)), out.shape, bool)
    # In the dtype eager compares in (torch's promotion: float32 [n] == a 0-d float64 0.1 in
    # float32; NumPy's result_type found them unequal in float64)
    dtype = np.result_type(*_operands(a, b))
    names = [em.operand(v, out.shape, dtype) for v in (a, b)]
    return em.op("stablehlo.compare %s, %s" % (_DIRECTIONS[ufunc], ", ".join(names)), out.shape,
                 bool, [em.type(out.shape, dtype)] * 2)


def _pow(em, args, out):
    a, b = args
    if out.dtype.kind in "iu" and isinstance(b, Tensor) and id(b) in em.names:
        # eager refuses a negative integer exponent on every call (Pow.forward); a program
        # would give 0 for one that the trace did not have
        raise NotImplementedError(
            "hlo: an integer power whose exponent comes from f's inputs is not exported: eager "
            "refuses a negative exponent on each call, which the program cannot; use a float "
            "base (x * 1.0), or pass the exponent as a Python number")
    return _elementwise("power")(em, args, out)


def _where(em, args, out):
    cond, a, b = args
    names = [em.operand(cond, out.shape, bool)] + [em.operand(v, out.shape, out.dtype) for v in (a, b)]
    return em.op("stablehlo.select %s" % ", ".join(names), out.shape, out.dtype,
                 [em.type(out.shape, bool)] + [em.type(out.shape, out.dtype)] * 2)


def _unary(kind):
    def rule(em, args, out):
        name = em.operand(args[0], out.shape, out.dtype)
        return em.op("stablehlo.%s %s" % (kind, name), out.shape, out.dtype)
    return rule


def _sign(em, args, out):
    """(x > 0) - (x < 0), as eager's Sign: stablehlo.sign gives NaN at NaN and -0.0 at -0.0,
    torch's sign 0 at both. A bool is its own sign (XLA subtracts no bools)."""
    shape, dtype = out.shape, out.dtype
    if dtype == bool:
        return em.value(args[0])
    x, zero = em.operand(args[0], shape, dtype), em.operand(0, shape, dtype)
    pos, neg = (em.cast(em.op("stablehlo.compare %s, %s, %s" % (direction, x, zero), shape, bool,
                              [em.type(shape, dtype)] * 2), shape, bool, dtype)
                for direction in ("GT", "LT"))
    return em.op("stablehlo.subtract %s, %s" % (pos, neg), shape, dtype)


def _relu(em, args, out):
    zero = em.operand(np.zeros((), out.dtype), out.shape, out.dtype)
    return em.op("stablehlo.maximum %s, %s" % (em.operand(args[0], out.shape, out.dtype), zero),
                 out.shape, out.dtype)


def _dot(em, a, sa, b, sb, dtype, contract_a, contract_b, batch=0):
    """dot_general of values a, b (names, shapes sa, sb) over their first `batch` dims,
    contracting one dim of each; returns (name, shape)."""
    out = sa[:batch] + tuple(n for i, n in enumerate(sa) if i >= batch and i != contract_a) + tuple(
        n for i, n in enumerate(sb) if i >= batch and i != contract_b)
    batching = "batching_dims = %s x %s, " % (_list(range(batch)), _list(range(batch))) if batch else ""
    return em.op("stablehlo.dot_general %s, %s, %scontracting_dims = [%d] x [%d]"
                 % (a, b, batching, contract_a, contract_b), out, dtype,
                 [em.type(sa, dtype), em.type(sb, dtype)]), out


def _matmul(em, args, out):
    a, b = (v if isinstance(v, Tensor) else Tensor._wrap(np.asarray(v)) for v in args)
    dtype = out.dtype
    sa = a.shape if a.ndim > 1 else (1,) + a.shape  # vectors as one-row / one-column matrices
    sb = b.shape if b.ndim > 1 else b.shape + (1,)
    lead = np.broadcast_shapes(sa[:-2], sb[:-2])
    names = []
    for v, s in ((a, sa), (b, sb)):
        name = em.reshape(em.operand(v, v.shape, dtype), v.shape, dtype, s)
        names.append(em.broadcast(name, s, dtype, lead + s[-2:]))
    name, shape = _dot(em, names[0], lead + sa[-2:], names[1], lead + sb[-2:], dtype,
                       len(lead) + 1, len(lead), batch=len(lead))
    return em.reshape(name, shape, dtype, out.shape)


def _reduced(em, args, out, kind):
    a, dim, keepdim = tuple(args) + (None, False)[len(args) - 1:]
    axes = ops._axes("reduce", dim, a.shape)
    axes = tuple(range(a.ndim)) if axes is None else axes
    name = em.reduce(em.operand(a, a.shape, out.dtype), a.shape, out.dtype, axes, kind)
    shape = tuple(n for i, n in enumerate(a.shape) if i not in axes)
    return em.reshape(name, shape, out.dtype, out.shape), axes


def _sum(em, args, out):
    return _reduced(em, args, out, "add")[0]


def _mean(em, args, out):
    name, axes = _reduced(em, args, out, "add")
    count = int(np.prod([args[0].shape[i] for i in axes]))
    return em.op("stablehlo.divide %s, %s" % (name, em.operand(np.array(count, out.dtype), out.shape,
                                                                 out.dtype)), out.shape, out.dtype)


def _max(em, args, out):
    return _reduced(em, args, out, "maximum")[0]


def _argmax(em, args, out):
    """max(dim)'s indices: the least index along the dim where x equals its maximum or is NaN
    (the maximum is NaN then: stablehlo.maximum propagates it), as eager's argmax."""
    a, dim, keepdim = args
    axes = ops._axes("max", dim, a.shape)
    if axes is None:  # a 0-d tensor: its only element
        return em.value(np.zeros((), np.int64))
    (axis,), shape, x = axes, a.shape, em.value(a)
    reduced = tuple(n for i, n in enumerate(shape) if i != axis)
    kept = tuple(1 if i == axis else n for i, n in enumerate(shape))
    top = em.reduce(x, shape, a.dtype, axes, "maximum")
    top = em.broadcast(em.reshape(top, reduced, a.dtype, kept), kept, a.dtype, shape)
    pair = [em.type(shape, a.dtype)] * 2
    hit = em.op("stablehlo.or %s, %s" % (em.op("stablehlo.compare EQ, %s, %s" % (x, top), shape,
                                                bool, pair),
                                          em.op("stablehlo.compare NE, %s, %s" % (x, x), shape,
                                                bool, pair)), shape, bool)
    iota = em.op("stablehlo.iota dim = %d" % axis, shape, np.int64)
    past = em.broadcast(em.value(np.array(shape[axis], np.int64)), (), np.int64, shape)
    index = em.op("stablehlo.select %s, %s, %s" % (hit, iota, past), shape, np.int64,
                  [em.type(shape, bool)] + [em.type(shape, np.int64)] * 2)
    index = em.reduce(index, shape, np.int64, axes, "minimum")
    return em.reshape(index, reduced, np.int64, out.shape)


def _permute(em, args, out):
    a, axes = args
    return em.op("stablehlo.transpose %s, dims = %s" % (em.value(a), _list(axes)), out.shape,
                 out.dtype, [em.type(a.shape, a.dtype)])


def _sum_to(em, args, out):
    a, shape = args
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and a.shape[lead + i] != 1)
    name = em.reduce(em.value(a), a.shape, a.dtype, axes, "add") if axes else em.value(a)
    kept = tuple(n for i, n in enumerate(a.shape) if i not in axes)
    return em.reshape(name, kept, out.dtype, out.shape)


def _basic_index(index, shape):
    """(start, limit, stride) per dim, the sliced shape before ints are dropped; or None for
    advanced or reversed indexing (not exported)."""
    index = index if isinstance(index, tuple) else (index,)
    # (a bool is a mask, an advanced index, as NumPy and torch read it: not the int 1)
    if any(isinstance(i, (np.ndarray, list, Tensor, bool, np.bool_)) for i in index):
        return None
    explicit = [i for i in index if i is not None and i is not Ellipsis]
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (len(shape) - len(explicit)) + index[k + 1:]
    index = [i for i in index if i is not None] + [slice(None)] * (len(shape) - len(explicit))
    limits = []
    for i, n in zip(index, shape):
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step < 0:
                return None
            stop = max(stop, start)
            limits.append((start, start + max(0, -(-(stop - start) // step) - 1) * step + (stop > start), step))
        else:
            i = int(i) % n
            limits.append((i, i + 1, 1))
    return limits


def _describe(index):
    """An index as an error names it: arrays by shape and dtype, not their values (vmap's
    cross_entropy indexes by a batch of targets, which printed in full)."""
    def one(i):
        if isinstance(i, (np.ndarray, Tensor)):
            return "an array of shape %s and dtype %s" % (tuple(i.shape), i.dtype)
        return "a list" if isinstance(i, list) else repr(i)
    index = index if isinstance(index, tuple) else (index,)
    return "[%s]" % ", ".join(one(i) for i in index)


def _index(em, args, out):
    a, index = args
    limits = _basic_index(index, a.shape)
    if limits is None:
        raise NotImplementedError("hlo: only basic indexing (ints, slices with positive steps, "
                                  "None, ...) is exported, not %s" % _describe(index))
    sliced = tuple(len(range(s, l, st)) for s, l, st in limits)
    text = "stablehlo.slice %s [%s]" % (em.value(a), ", ".join("%d:%d:%d" % x for x in limits))
    name = em.op(text, sliced, out.dtype, [em.type(a.shape, a.dtype)])
    return em.reshape(name, sliced, out.dtype, out.shape)


def _index_add(em, args, out):
    a, index, shape = args
    limits = _basic_index(index, shape)
    if limits is None:  # (a basic index selects each element once: its gradient is a pad)
        raise NotImplementedError("hlo: the gradient of indexing is exported for basic "
                                  "indexing only, not %s" % _describe(index))
    sliced = tuple(len(range(s, l, st)) for s, l, st in limits)
    name = em.reshape(em.operand(a, a.shape, out.dtype), a.shape, out.dtype, sliced)
    low = [s for s, _, _ in limits]
    interior = [st - 1 for _, _, st in limits]
    high = [n - (s + (k - 1) * st + 1) if k else n - s for (s, _, st), k, n in zip(limits, sliced, shape)]
    zero = em.value(np.zeros((), out.dtype))
    return em.op("stablehlo.pad %s, %s, low = %s, high = %s, interior = %s"
                 % (name, zero, _list(low), _list(high), _list(interior)), out.shape, out.dtype,
                 [em.type(sliced, out.dtype), em.type((), out.dtype)])


def _softmax_parts(em, x, shape, dtype, axis):
    """(x - max, sum(exp(x - max))) along axis, both broadcast back to shape."""
    kept = [i for i in range(len(shape)) if i != axis]
    back = lambda name: em.broadcast(name, [shape[i] for i in kept], dtype, shape, kept)
    m = back(em.reduce(x, shape, dtype, (axis,), "maximum"))
    shifted = em.op("stablehlo.subtract %s, %s" % (x, m), shape, dtype)
    e = em.op("stablehlo.exponential %s" % shifted, shape, dtype)
    return shifted, e, back(em.reduce(e, shape, dtype, (axis,), "add"))


def _softmax(log):
    def rule(em, args, out):
        x, dim = args
        shape = out.shape if out.ndim else (1,)
        name = em.reshape(em.operand(x, x.shape, out.dtype), x.shape, out.dtype, shape)
        shifted, e, total = _softmax_parts(em, name, shape, out.dtype, F._dim("softmax", out.shape, dim))
        if log:
            result = em.op("stablehlo.subtract %s, %s" % (
                shifted, em.op("stablehlo.log %s" % total, shape, out.dtype)), shape, out.dtype)
        else:
            result = em.op("stablehlo.divide %s, %s" % (e, total), shape, out.dtype)
        return em.reshape(result, shape, out.dtype, out.shape)
    return rule


def _hits(em, target, shape):
    """(n, classes) of bool: True at each row's target."""
    t = target if isinstance(target, Tensor) else Tensor._wrap(np.asarray(target))
    if id(t) in em.names:  # an input or computed from one: checked on each run, as eager checks
        # it (a constant passed eager's check at the trace)
        em.target_checks.append((em.names[id(t)][0], t.shape, t.dtype, shape))
    name = em.value(t)
    index = em.broadcast(name, t.shape, t.dtype, shape, [0])
    iota = em.op("stablehlo.iota dim = 1", shape, t.dtype)
    return em.op("stablehlo.compare EQ, %s, %s" % (index, iota), shape, bool, [em.type(shape, t.dtype)] * 2)


def _onehot(em, target, shape, dtype):
    """(n, classes) of dtype: 1 at each row's target, else 0."""
    return em.cast(_hits(em, target, shape), shape, bool, dtype)


def _picked(em, name, target, shape, dtype):
    """The (n, classes) value `name` at each row's target, 0 elsewhere: a select (a product
    with a one-hot would make a -inf log-probability elsewhere in the row NaN)."""
    return em.op("stablehlo.select %s, %s, %s" % (_hits(em, target, shape), name,
                                                 em.operand(0, shape, dtype)),
                 shape, dtype, [em.type(shape, bool)] + [em.type(shape, dtype)] * 2)


def targets_out_of_range(em, checks):
    """A tensor<i1>: whether any class-index target among `checks` (entries of
    Emitter.target_checks) holds a value outside [0, classes). jit's programs return it, so
    that a call checks its targets by reading one flag rather than running out_of_range on
    each."""
    flag = None
    for name, t_shape, t_dtype, shape in checks:
        types = [em.type(t_shape, t_dtype)] * 2
        bad = em.op("stablehlo.compare LT, %s, %s" % (name, em.operand(0, t_shape, t_dtype)),
                    t_shape, bool, types)
        if shape[1] <= np.iinfo(t_dtype).max:  # (else no value of the dtype reaches classes)
            high = em.op("stablehlo.compare GE, %s, %s"
                         % (name, em.operand(shape[1], t_shape, t_dtype)), t_shape, bool, types)
            bad = em.op("stablehlo.or %s, %s" % (bad, high), t_shape, bool)
        bad = em.reduce(bad, t_shape, bool, (0,), "or")
        flag = bad if flag is None else em.op("stablehlo.or %s, %s" % (flag, bad), (), bool)
    return flag


def _cross_entropy(em, args, out):
    logits, target = args
    shape, dtype = logits.shape, out.dtype
    x = em.operand(logits, shape, dtype)
    shifted, _, total = _softmax_parts(em, x, shape, dtype, 1)
    logp = em.op("stablehlo.subtract %s, %s" % (shifted, em.op("stablehlo.log %s" % total, shape, dtype)),
                 shape, dtype)
    total = em.reduce(_picked(em, logp, target, shape, dtype), shape, dtype, (0, 1), "add")
    return em.op("stablehlo.divide %s, %s" % (em.op("stablehlo.negate %s" % total, (), dtype),
                                               em.value(np.array(shape[0], dtype))), (), dtype)


def _cross_entropy_grad(em, args, out):
    logits, target, grad = args[:3]
    shape, dtype = logits.shape, out.dtype
    _, e, total = _softmax_parts(em, em.operand(logits, shape, dtype), shape, dtype, 1)
    diff = em.op("stablehlo.subtract %s, %s" % (em.op("stablehlo.divide %s, %s" % (e, total), shape, dtype),
                                                 _onehot(em, target, shape, dtype)), shape, dtype)
    scale = em.op("stablehlo.divide %s, %s" % (em.operand(grad, (), dtype),
                                                em.value(np.array(shape[0], dtype))), (), dtype)
    return em.op("stablehlo.multiply %s, %s" % (diff, em.broadcast(scale, (), dtype, shape)), shape, dtype)


def _pick(em, args, out):
    x, target = args
    shape = x.shape
    return em.reduce(_picked(em, em.operand(x, shape, out.dtype), target, shape, out.dtype), shape,
                     out.dtype, (1,), "add")


def _pick_grad(em, args, out):
    g, target, _ = args
    shape = out.shape
    spread = em.broadcast(em.operand(g, g.shape, out.dtype), g.shape, out.dtype, shape, [0])
    return _picked(em, spread, target, shape, out.dtype)


def _linear(em, args, out):
    x, w, b = args
    name, shape = _dot(em, em.operand(x, x.shape, out.dtype), x.shape, em.operand(w, w.shape, out.dtype),
                       w.shape, out.dtype, x.ndim - 1, 1)
    if b is None:
        return name
    return em.op("stablehlo.add %s, %s" % (name, em.operand(b, out.shape, out.dtype)), out.shape, out.dtype)


EMIT = {
    ops.Add: _elementwise("add"), ops.Sub: _elementwise("subtract"),
    ops.Mul: _elementwise("multiply"), ops.Div: _elementwise("divide"),
    ops.Pow: _pow, ops.Where: _where, ops.Compare: _compare,
    ops.Neg: _unary("negate"), ops.Exp: _unary("exponential"), ops.Log: _unary("log"),
    ops.Tanh: _unary("tanh"), ops.Sigmoid: _unary("logistic"), ops.ReLU: _relu,
    # (an unsigned integer is its own abs: stablehlo.abs takes signed ones only)
    ops.Abs: lambda em, args, out: (em.value(args[0]) if out.dtype.kind == "u"
                                    else _unary("abs")(em, args, out)),
    ops.Sign: _sign,
    ops.Alias: lambda em, args, out: em.value(args[0]),
    ops.Detach: lambda em, args, out: em.value(args[0]),
    ops.Cast: lambda em, args, out: em.cast(em.value(args[0]), out.shape, args[0].dtype, out.dtype),
    ops.MatMul: _matmul, ops.Sum: _sum, ops.Mean: _mean, ops.Max: _max, ops.Argmax: _argmax,
    ops.Reshape: lambda em, args, out: em.reshape(em.value(args[0]), args[0].shape, out.dtype, out.shape),
    ops.Permute: _permute,
    ops.Expand: lambda em, args, out: em.broadcast(em.value(args[0]), args[0].shape, out.dtype, out.shape),
    ops.SumTo: _sum_to, ops.Index: _index, ops.IndexAdd: _index_add,
    F.Softmax: _softmax(False), F.LogSoftmax: _softmax(True),
    F.CrossEntropy: _cross_entropy, F.CrossEntropyGrad: _cross_entropy_grad, F.Linear: _linear,
    F.Pick: _pick, F.PickGrad: _pick_grad,
}
