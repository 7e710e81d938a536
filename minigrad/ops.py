"""Every differentiable operation: a forward on arrays and a gradient rule on Tensors.

(Over 350 lines: it is the whole op table, one short class per operation, kept in one
file so that the rules can be read side by side, as tinygrad keeps its table.)

Gradient rules are written with Tensor operations, so under create_graph they
are recorded themselves and gradients of any order come for free. Binary
operations take a Tensor or a plain number on either side (a number keeps the
Tensor's dtype, as in NumPy); broadcasting is NumPy's, and each gradient is
summed back to its input's shape (SumTo).

Two operands of different dtypes promote as in torch (_result_dtype); complex
gradients are conjugated as torch's are (the vector-Jacobian product is
grad * conj(df/dx)).
"""

import copy
import numbers

import numpy as np

from kernels.dims import normalize as normalize_dim
from minigrad.dtypes import _operands, division_operands, floating, wrapped_ints
from minigrad.function import Function
from minigrad.grad_mode import _State, tracing
from minigrad.tensor import Tensor

_wrap = Tensor._wrap


def _data(value):
    return value.data if value.__class__ is Tensor else value


def _shape(value):
    return value.data.shape if value.__class__ is Tensor else np.shape(value)


def _needs(value):
    return value.__class__ is Tensor and value._requires_grad is not False  # (a leaf: its stamp)


def _sum_to(grad, shape):
    return grad if grad.data.shape == shape else SumTo.apply(grad, shape)


def _conj(value):
    """conj(value), recorded (for complex gradients); real values are returned as they are."""
    if value.__class__ is Tensor:
        return Conj.apply(value) if value.data.dtype.kind == "c" else value
    if value.__class__ is np.ndarray:  # (array-level gradient rules: no Python-level call)
        return value.conj() if value.dtype.kind == "c" else value
    return np.conj(value) if np.iscomplexobj(value) else value


def each_reads_other(a, b):
    """The operands a product's gradient reads (Mul, MatMul, Linear): d/da reads b and d/db
    reads a, so x * 2.0 saves nothing of x (as torch saves no more)."""
    return (b,) * _needs(a) + (a,) * _needs(b)


class _Binary(Function):
    """Elementwise with broadcasting: one NumPy ufunc forward, a gradient rule per subclass."""

    ufunc = None
    operands = staticmethod(_operands)
    wraps_ints = True  # (pow refuses an exponent out of range, as torch's)

    @staticmethod
    def saved(a, b):
        """The operands whose values the gradient reads: saved, so that an in-place change to
        one is caught. As in torch, no others: a change to those cannot alter the gradient."""
        return a, b

    @classmethod
    def forward(cls, ctx, a, b):
        ctx.save_for_backward(*[v for v in cls.saved(a, b) if v.__class__ is Tensor])
        x, y = cls.operands(a, b)
        try:
            try:
                return _wrap(cls.ufunc(x, y))
            except OverflowError:  # a Python int out of an integer tensor's range
                if not cls.wraps_ints:
                    raise
                return _wrap(cls.ufunc(*wrapped_ints(x, y)))
        except ValueError:
            raise ValueError("%s: shapes %s and %s cannot be broadcast together"
                             % (cls.ufunc.__name__, tuple(_shape(a)), tuple(_shape(b)))) from None
        except TypeError:
            _check_operands(cls.ufunc.__name__, a, b)
            raise


def _check_operands(name, a, b):
    """Raises torch's TypeError for an operand that is no tensor, number or array (NumPy's
    names a loop signature, or a float beside a NoneType)."""
    for v in (a, b):
        if not isinstance(v, (Tensor, numbers.Number, np.ndarray, np.generic, list, tuple)):
            raise TypeError("%s: unsupported operand type %s (as in torch); an operand is a tensor, "
                            "a number or an array" % (name, type(v).__name__)) from None


class Add(_Binary):
    ufunc, saved = np.add, staticmethod(lambda a, b: ())

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.inputs
        return (_sum_to(grad, _shape(a)) if _needs(a) else None,
                _sum_to(grad, _shape(b)) if _needs(b) else None)


class Sub(_Binary):
    ufunc, saved = np.subtract, staticmethod(lambda a, b: ())

    @classmethod
    def forward(cls, ctx, a, b):
        if "b" in (np.asarray(_data(a)).dtype.kind, np.asarray(_data(b)).dtype.kind):
            raise TypeError("sub: subtraction with a bool tensor is not supported (as in torch); "
                            "to invert a mask use ~mask")
        return super().forward(ctx, a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.inputs
        return (_sum_to(grad, _shape(a)) if _needs(a) else None,
                _sum_to(-grad, _shape(b)) if _needs(b) else None)


class Mul(_Binary):
    ufunc = np.multiply
    saved = staticmethod(each_reads_other)

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # raises if freed or modified in place
        a, b = ctx.inputs
        return (_sum_to(grad * _conj(b), _shape(a)) if _needs(a) else None,
                _sum_to(grad * _conj(a), _shape(b)) if _needs(b) else None)


class Div(_Binary):
    ufunc = np.true_divide
    operands = staticmethod(division_operands)
    # d/da reads b, d/db reads a and b
    saved = staticmethod(lambda a, b: (b,) * (_needs(a) or _needs(b)) + (a,) * _needs(b))

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors
        a, b = ctx.inputs
        return (_sum_to(grad / _conj(b), _shape(a)) if _needs(a) else None,
                # (a / b / b, as torch: b * b overflowed first, a float16 b of 300 gave -0)
                _sum_to(-grad * _conj(a / b / b), _shape(b)) if _needs(b) else None)


class Pow(_Binary):
    """a ** b. As in torch, d/da is 0 where b == 0 (even at a == 0, where b * a**(b-1) is
    nan), and d/db is 0 where a == 0 and b >= 0 (a**b * log(a) would be nan)."""

    ufunc, wraps_ints = np.power, False

    @classmethod
    def forward(cls, ctx, a, b):
        x, y = _operands(a, b)
        try:  # (a list operand as an array: result_type would read it as a dtype's fields)
            kind = np.result_type(*(np.asarray(v) if isinstance(v, (list, tuple)) else v for v in (x, y))).kind
        except TypeError:  # (result_type read a str as a dtype)
            _check_operands("power", a, b)
            raise
        if kind in "iu" and np.any(np.asarray(y) < 0):
            raise ValueError(
                "pow: integers to negative integer powers are not allowed (base %s of shape %s, "
                "exponent of shape %s); use a float base: x * 1.0, or Tensor(data, dtype=np.float64)"
                % (np.result_type(x), tuple(_shape(a)), tuple(_shape(b))))
        return super().forward(ctx, a, b)

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors
        a, b = ctx.inputs
        return (_sum_to(pow_da(grad, a, b, _conj), _shape(a)) if _needs(a) else None,
                _sum_to(grad * _conj(pow_db(a, b)), _shape(b)) if _needs(b) else None)


def pow_da(d, a, b, conj=None):
    """d * d(a**b)/da (its derivative conjugated by `conj` first: the backward's): b * a**(b-1),
    and 0 where b == 0 whatever a and d are (0, inf or NaN), as torch's zeros_like(self) for a
    number b and where(b == 0, 0, ...) for a tensor: 0 * d would be NaN at an inf or NaN d."""
    if b.__class__ is not Tensor and np.ndim(b) == 0:
        if b == 0:  # (zeros shaped and batched as d, and no derivative through a)
            return Where.apply(False, d, 0)
        da = b * a ** (b - 1)
        return d * (conj(da) if conj else da)
    da = b * a ** (b - 1)
    return Where.apply(Compare.apply(np.not_equal, b, 0), d * (conj(da) if conj else da), 0)


def pow_db(a, b):
    """d(a**b)/db: a**b * log(a), and 0 where a == 0 and b >= 0. A tensor a's log is taken in
    the result's dtype, as torch's (in a float16 base's own, a float64 exponent's gradient
    was 2e-5 off)."""
    power = a ** b
    if a.__class__ is Tensor:
        log = Log.apply(a if a.dtype == power.dtype else Cast.apply(a, power.dtype))
    else:
        log = np.log(a)
    zero_base = Compare.apply(np.logical_and, Compare.apply(np.equal, a, 0),
                              Compare.apply(real_greater_equal, b, 0))
    return Where.apply(zero_base, 0, power * log)


def real_greater_equal(x, y):
    return np.greater_equal(np.real(x), y)


class _Untracked(Function):
    """An operation with no gradient: never recorded, but seen by the transforms (a trace
    (minigrad.hlo) or a batch (vmap) must see how its result depends on the data)."""

    @classmethod
    def apply(cls, *args):
        if _State.transforms:
            return _State.transforms[-1].process(cls, args)
        return cls.forward(None, *args)


class Detach(_Untracked):
    """Tensor.detach: the same data and version counter, cut from the graph."""

    @staticmethod
    def forward(ctx, a):
        return _wrap(a.data, a._version)


_ORDERED = frozenset((np.greater, np.greater_equal, np.less, np.less_equal))


def _is_complex(value):
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.kind == "c"
    return isinstance(value, complex)


class Compare(_Untracked):
    """ufunc(a, b) for a comparison or logical ufunc: a boolean tensor without gradient. Gradient
    rules build their masks with it (not from saved arrays), so that a trace or a batch sees
    how a mask depends on the data."""

    @staticmethod
    def forward(ctx, ufunc, a, b):
        # In the operands' common dtype by torch's promotion: float32 x == a 0-d float64 0.1
        # compares in float32, as torch does (NumPy's float64 would find no float32 0.1 equal).
        x, y = _operands(a, b)
        if ufunc in _ORDERED and (_is_complex(x) or _is_complex(y)):
            raise TypeError("%s: complex numbers are not ordered (as in torch; NumPy orders them "
                            "by real, then imaginary part); compare their real parts or abs()"
                            % ufunc.__name__)
        try:
            return _wrap(ufunc(x, y))
        except ValueError:
            raise ValueError("%s: shapes %s and %s cannot be broadcast together"
                             % (ufunc.__name__, tuple(_shape(a)), tuple(_shape(b)))) from None


class Argmax(_Untracked):
    """The index of the maximum along one dim, as torch.max(x, dim)'s indices: the first
    maximal element, or the first NaN (int64, without gradient). An operation, so that vmap
    batches it and hlo.jit traces it."""

    @staticmethod
    def forward(ctx, a, dim, keepdim=False):
        axes = _axes("max", dim, a.shape)  # (checked by Max first: None for a 0-d tensor)
        index = a.data.argmax(axis=None if axes is None else axes[0], keepdims=keepdim)
        return _wrap(np.asarray(index, dtype=np.int64))


class Where(Function):
    """where(cond, a, b) for a fixed boolean array `cond` (which has no gradient). A tensor
    cond is saved: changed in place before backward, it moved the gradient (torch raises)."""

    @staticmethod
    def forward(ctx, cond, a, b):
        if cond.__class__ is Tensor:
            ctx.save_for_backward(cond)
        x, y = _operands(a, b)
        try:
            return _wrap(np.where(_data(cond), x, y))
        except ValueError:
            raise ValueError("where: shapes %s (the condition), %s and %s cannot be broadcast together"
                             % (tuple(_shape(cond)), tuple(_shape(a)), tuple(_shape(b)))) from None

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # raises if cond was changed in place
        cond, a, b = ctx.inputs
        return (None, _sum_to(Where.apply(cond, grad, 0), _shape(a)) if _needs(a) else None,
                _sum_to(Where.apply(cond, 0, grad), _shape(b)) if _needs(b) else None)


class Conj(Function):
    @staticmethod
    def forward(ctx, a):
        return _wrap(np.conj(a.data))

    @staticmethod
    def backward(ctx, grad):
        return Conj.apply(grad)


class Imag(Function):
    """The imaginary part of a complex `a` (a copy; torch's is a view); its gradient g * 1j, as
    torch's. (As the real part of -1j * a it was NaN where a's real part is inf or NaN.)"""

    @staticmethod
    def forward(ctx, a):
        ctx.dtype = a.dtype
        return _wrap(a.data.imag.copy())

    @staticmethod
    def backward(ctx, grad):
        return Cast.apply(grad, ctx.dtype) * 1j


class Cast(Function):
    """`a` as `dtype`, the real part if a is complex and dtype is not: the cast autograd gives
    each gradient to its input's dtype (as torch's validate_outputs does)."""

    @staticmethod
    def forward(ctx, a, dtype):
        ctx.dtype = a.dtype
        data = a.data if np.dtype(dtype).kind == "c" else a.data.real
        return _wrap(data.astype(dtype))

    @staticmethod
    def backward(ctx, grad):
        return Cast.apply(grad, ctx.dtype)


class Alias(Function):
    """The same tensor as a new node (a fresh input for a minigrad.func transform)."""

    @staticmethod
    def forward(ctx, a):
        return _wrap(a.data, a._version)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Neg(Function):
    @staticmethod
    def forward(ctx, a):
        if a.dtype.kind == "b":  # (NumPy's own error names NumPy's operator)
            raise TypeError("neg: negation of a bool tensor is not supported (as in torch); to "
                            "invert a mask use ~mask")
        return _wrap(np.negative(a.data))

    @staticmethod
    def backward(ctx, grad):
        return -grad


def dtypes_error(op, *tensors):
    """torch's error for a matrix product of operands of two dtypes. (No promotion: it would run
    a float32 model fed float64 inputs, a Tensor of a list or NumPy's default, in float64.)"""
    dtypes = [str(t.data.dtype) for t in tensors if t is not None]
    return RuntimeError("%s: expected operands of one dtype (as in torch), got %s; cast one with "
                        ".to(), e.g. x.to(np.%s)" % (op, " and ".join(dtypes), dtypes[-1]))


class MatMul(Function):
    """np.matmul: 1-D operands are promoted as NumPy does, batch dimensions broadcast."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(*each_reads_other(a, b))
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("matmul: both operands need at least one dimension, got shapes %s "
                             "and %s; multiply by a 0-d tensor with *" % (a.shape, b.shape))
        if "b" in (a.dtype.kind, b.dtype.kind):  # (NumPy's is a logical or of ands)
            raise TypeError("matmul: boolean tensors are not supported (as in torch); convert to "
                            "a number dtype first")
        if a.data.dtype != b.data.dtype:
            raise dtypes_error("matmul", a, b)
        try:
            return _wrap(_matmul(a.data, b.data))
        except ValueError:
            raise ValueError("matmul: shapes %s and %s are not aligned"
                             % (tuple(a.shape), tuple(b.shape))) from None

    @staticmethod
    def backward(ctx, grad):
        ctx.saved_tensors  # raises if freed or modified in place
        a, b = ctx.inputs
        # Where torch's backward multiplies, so does this one: a -0. product stays -0. there,
        # where _matmul's batched outer products (vmap's) sum into 0., as torch's bmm does.
        if a.ndim == 1 and b.ndim == 1:  # dot
            return (grad * _conj(b) if a.requires_grad else None,
                    grad * _conj(a) if b.requires_grad else None)
        # A 1-D operand was promoted to a matrix: give the gradient that dim back.
        g = grad
        if a.ndim == 1:
            g = Reshape.apply(grad, grad.shape[:-1] + (1, grad.shape[-1]))
        elif b.ndim == 1:
            g = Reshape.apply(grad, grad.shape + (1,))
        ga = gb = None
        if a.requires_grad:
            if b.ndim == 1:  # mv: a's gradient is an outer product (torch's ger)
                ga = g * _conj(b)
            else:
                ga = _sum_to(MatMul.apply(g, _conj(Permute.apply(b, _swap_last(b.ndim)))),
                             (1,) * (a.ndim == 1) + a.shape)
                ga = Reshape.apply(ga, a.shape) if ga.shape != a.shape else ga
        if b.requires_grad:
            a2 = a if a.ndim > 1 else Reshape.apply(a, (1,) + a.shape)
            gb = _sum_to(MatMul.apply(_conj(Permute.apply(a2, _swap_last(a2.ndim))), g),
                         b.shape + (1,) * (b.ndim == 1))
            gb = Reshape.apply(gb, b.shape) if gb.shape != b.shape else gb
        return ga, gb


def _matmul(x, y):
    """np.matmul, with two shapes that vmap's per-example gradients produce done faster:
    a stack over one matrix repeated with stride 0 (an unbatched weight) is one 2-D product,
    and an inner dimension of 1 (outer products) is one product per element, with the longer
    side made the contiguous one (NumPy's inner loop runs along it).

    Those products keep torch's signs of zero. Its mm (where one operand is a matrix, torch
    folds the other's stack into one) multiplies, so a -0. product stays -0.; its bmm (both
    stacks of matrices: vmap's per-example products) sums each product into a zero, which
    makes it 0. Here a multiply and an einsum (whose sums start from zero too) do the same,
    the einsum only where both sides are longer than 1: under vmap a side of 1 is a vector's,
    and torch's dot and mv backward multiply those (MatMul.backward). One case differs: under
    vmap, a matrix's gradient in mv with a batched vector is 0. where torch.func's is -0.
    The einsum is also faster: 0.65x the multiply's time for the digits MLP's per-example
    weight gradients (64x128x64 float32: 128 against 197 us, Intel Xeon family 6 model 167)."""
    if x.ndim >= 2 and y.ndim >= 2 and x.shape[-1] == 1 and y.shape[-2] == 1:
        n, m = x.shape[-2], y.shape[-1]
        if x.ndim >= 3 and y.ndim >= 3 and n > 1 and m > 1:
            if n > m:  # computed as (m, n), transposed
                return np.einsum("...i,...j->...ij", y[..., 0, :], x[..., 0]).swapaxes(-1, -2)
            return np.einsum("...i,...j->...ij", x[..., 0], y[..., 0, :])
        if n > m:
            return np.multiply(np.swapaxes(y, -1, -2), np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
        return np.multiply(x, y)
    # (an empty y has a stride of 0 too, and no y[0])
    if x.ndim == 3 and y.ndim == 3 and y.strides[0] == 0 and y.size and x.shape[0] == y.shape[0]:
        return (np.ascontiguousarray(x).reshape(-1, x.shape[2]) @ y[0]).reshape(
            x.shape[:2] + y.shape[2:])
    return np.matmul(x, y)


def _swap_last(ndim):
    axes = list(range(ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return tuple(axes)


def _axes(op, dim, shape):
    """`dim` (an int, a tuple of ints or None) as a tuple of axes, or None for all. A 0-d
    tensor takes dim 0 or -1, as in torch, and reducing it over that dim is reducing it all."""
    if dim is None:
        return None
    ndim = len(shape)
    dims = tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool):
            raise TypeError("%s: dim must be an int or a tuple of ints, got %r" % (op, dim))
    axes = tuple(normalize_dim(d, ndim, op, shape=shape) for d in dims)
    if len(set(axes)) != len(axes):
        raise ValueError("%s: dim %r names a dimension twice" % (op, dim))
    return axes if ndim else None


def _keepdim_shape(shape, axes):
    if axes is None:
        return (1,) * len(shape)
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _reduced_shape(shape, axes):
    return () if axes is None else tuple(n for i, n in enumerate(shape) if i not in axes)


def _unreduce(ctx, grad):
    """A reduction's incoming gradient with the reduced dims back (as size 1)."""
    return grad if ctx.keepdim else Reshape.apply(grad, _keepdim_shape(ctx.shape, ctx.axes))


class Sum(Function):
    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        axes = _axes("sum", dim, a.shape)
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        # torch sums every integer and boolean dtype as int64 (NumPy: unsigned as uint64)
        dtype = np.int64 if a.data.dtype.kind in "bu" else None
        return _wrap(a.data.sum(axis=axes, dtype=dtype, keepdims=keepdim))

    @staticmethod
    def backward(ctx, grad):
        return Expand.apply(_unreduce(ctx, grad), ctx.shape)


class Mean(Function):
    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        if a.dtype.kind not in "fc":
            raise TypeError("mean: input dtype %s is not floating point or complex (as in torch); "
                            "convert it first: (x * 1.0).mean()" % a.dtype)
        axes = _axes("mean", dim, a.shape)
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        ctx.count = a.data.size if axes is None else int(np.prod([a.shape[i] for i in axes]))
        return _wrap(a.data.mean(axis=axes, keepdims=keepdim))

    @staticmethod
    def backward(ctx, grad):
        return Expand.apply(_unreduce(ctx, grad) / ctx.count, ctx.shape)


def _max_mask(x, dim):
    """max of array x over one int dim (keepdims) and the mask that routes its gradient: to
    the element argmax picks, the first maximal one or the first NaN (as torch.max(dim)); or,
    with dim a tuple of axes or None, shared evenly between ties, or between the NaNs if there
    are any (as torch.max())."""
    if isinstance(dim, (int, np.integer)):
        index = np.expand_dims(x.argmax(axis=dim), dim)
        mask = np.zeros(x.shape, dtype=x.dtype)
        np.put_along_axis(mask, index, 1, axis=dim)
        return np.take_along_axis(x, index, axis=dim), mask
    out = x.max(axis=dim, keepdims=True)
    nan = np.isnan(out)
    mask = np.where(nan, np.isnan(x), x == out) if nan.any() else x == out
    return out, mask / mask.sum(axis=dim, keepdims=True)


class Max(Function):
    """max over one int dim, or over a tuple of dims / all (None); see _max_mask."""

    _kept_arrays = ("mask",)

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        if a.dtype.kind == "c":
            raise TypeError("max: complex tensors are not ordered (as in torch); take max of "
                            "their abs or real part")
        axes = _axes("max", dim, a.shape)
        # (an empty tensor whose reduced dims are not empty has an empty max, as in torch)
        if a.data.size == 0 and (axes is None or 0 in [a.shape[i] for i in axes]):
            raise RuntimeError("max: the tensor of shape %s is empty along the reduced dims; max "
                               "of no elements is undefined" % (tuple(a.shape),))
        out, ctx.mask = _max_mask(a.data, axes[0] if isinstance(dim, (int, np.integer)) and axes
                                  else axes)
        ctx.shape, ctx.axes, ctx.keepdim = a.shape, axes, keepdim
        return _wrap(out if keepdim else out.reshape(_reduced_shape(a.shape, axes)))

    @staticmethod
    def backward(ctx, grad):
        mask = ctx.mask
        if tracing():
            mask = routing(ctx.inputs[0], ctx.inputs[1] if len(ctx.inputs) > 1 else None, ctx.axes)
        return route(_unreduce(ctx, grad), mask)


def route(values, mask):
    """values * mask where the mask is nonzero, 0 elsewhere: a select, as torch routes max's
    gradient (and torch.func its tangent over a dim): an inf or NaN elsewhere times 0 was NaN."""
    hit = Compare.apply(np.not_equal, mask, 0) if mask.__class__ is Tensor else mask != 0
    return Where.apply(hit, values * mask, 0)


def routing(a, dim, axes):
    """_max_mask's mask in recorded operations, for a trace (hlo) to compile: as an array it
    holds the traced values' maxima, and the program would route every call's gradient there.
    `axes`: _axes of dim."""
    if isinstance(dim, (int, np.integer)) and axes:  # to the index argmax picks
        k = axes[0]
        positions = np.arange(a.shape[k]).reshape([-1 if i == k else 1 for i in range(a.ndim)])
        return Cast.apply(Compare.apply(np.equal, _wrap(positions), Argmax.apply(a, dim, True)),
                          a.dtype)
    top = Max.apply(a, axes, True)  # shared between ties, or between the NaNs if any
    hit = Where.apply(Compare.apply(np.not_equal, top, top), Compare.apply(np.not_equal, a, a),
                      Compare.apply(np.equal, a, top))
    # (counted in float32 at least: float16 overflows past 65504 ties, and the share is 0)
    hits = Cast.apply(hit, np.promote_types(a.dtype, np.float32))
    return Cast.apply(hits / Sum.apply(hits, axes, True), a.dtype)


class _OfOutput(Function):
    """y = fn(x) whose gradient is a function of y: the output is saved, and under
    create_graph it carries the graph back to the input."""

    fn = None
    to_float = True  # whether integer and boolean inputs are computed as float64 (not relu)
    _forward_on_arrays = True

    @classmethod
    def forward(cls, ctx, a):
        out = _wrap(cls.fn(floating(a.data) if cls.to_float else a.data))
        ctx.save_for_backward(out)
        return out


def _sigmoid(x):
    if x.dtype == np.float16:
        # In float32, rounded once, as torch computes half precision: four float16 roundings
        # gave errors of up to 3 units in the last place.
        return _sigmoid(x.astype(np.float32)).astype(np.float16)
    if x.dtype.kind == "c":  # not ordered: the plain formula
        return 1 / (1 + np.exp(-x))
    # exp of a non-positive number only: no overflow for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


class Exp(_OfOutput):
    fn = staticmethod(np.exp)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * _conj(y)


class Tanh(_OfOutput):
    fn = staticmethod(np.tanh)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * _conj(1 - y * y)


class Sigmoid(_OfOutput):
    fn = staticmethod(_sigmoid)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * _conj(y * (1 - y))


class Sign(Function):
    """-1, 0 or 1, as torch.sign (0 at NaN, where NumPy's sign gives NaN): piecewise constant,
    its gradient zero."""

    @staticmethod
    def forward(ctx, a):
        kind = a.dtype.kind
        if kind == "c":
            raise TypeError("sign: complex tensors are not ordered (as in torch, whose sgn is "
                            "z / |z|); take the sign of their real part")
        if kind == "b":
            return _wrap(a.data.copy())  # (True's sign: True)
        return _wrap(np.subtract(a.data > 0, a.data < 0, dtype=a.dtype))

    @staticmethod
    def backward(ctx, grad):
        return Where.apply(False, grad, 0)  # zeros, also where grad is inf or NaN (as torch's)


class Abs(Function):
    @staticmethod
    def forward(ctx, a):
        kind = a.dtype.kind
        if kind in "bc":
            raise TypeError("abs: %s tensors are not supported (%s)" % (
                ("boolean", "as in torch") if kind == "b" else
                ("complex", "minigrad defines no gradient of the modulus; take "
                 "(z.real ** 2 + z.imag ** 2) ** 0.5 of the parts")))
        ctx.save_for_backward(a)
        return _wrap(np.abs(a.data))

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad * Sign.apply(a)  # (0 at 0, as torch's)


class Log(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return _wrap(np.log(floating(a.data)))

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return grad / _conj(a)


def _relu(x):
    kind = x.dtype.kind
    if kind == "c":
        raise TypeError("relu: complex tensors are not ordered (as in torch); take relu of their "
                        "real part")
    if kind == "b":
        raise TypeError("relu: boolean tensors are not supported (as in torch); convert to a "
                        "number dtype first")
    # A zero of x's dtype: NumPy's conversion of a Python 0 added 3.5 us a call, two thirds
    # of the maximum's own time at a batch of 64 (8.9 against 5.4 us for 64x128 float32).
    return np.maximum(x, x.dtype.type(0))


class ReLU(_OfOutput):
    fn = staticmethod(_relu)
    to_float = False  # (as torch's relu: an integer tensor stays one)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors  # the output, as torch saves it
        return relu_mask(grad, y)


_SAME_SIZE_INT = {n: np.dtype("i%d" % n) for n in (1, 2, 4, 8)}  # (made per call: 0.2 us)


def relu_mask(grad, y):
    """grad where relu's output y is > 0 or NaN, else 0: torch's threshold_backward(grad, y, 0)
    for both relu's gradient and its tangent. A product with the mask (y > 0) would make a
    NaN or inf grad NaN where x <= 0 and drop the grad where x is NaN; torch gives 0 and grad."""
    if _State.enabled or _State.transforms:  # recorded, or seen by a transform: on Tensors
        # Recorded with y in the graph (create_graph): the zeros are y's, with a zero
        # derivative, so that the gradient depends on y as torch's threshold_backward(grad, y)
        # does; a second gradient through it is then zero, as torch's, not 'does not require
        # grad'.
        zeros = Where.apply(False, y, 0) if _State.enabled and y._requires_grad else 0
        return Where.apply(Compare.apply(np.less_equal, y, 0), zeros, grad)
    # A first-order backward (nothing records): on the arrays, without two operations'
    # bookkeeping (half this rule's time at a batch of 64). The select as a bit mask, all ones
    # or zero, built in place: as fast as a product with (y > 0) (64x128 float32: 4.3 us;
    # np.where took 10.4 us), and a product cannot select (NaN * 0 is NaN).
    bits = _SAME_SIZE_INT[grad.data.itemsize]
    keep = (y.data <= 0).astype(bits)
    keep -= 1  # 0 where y <= 0, else -1: every bit set
    keep &= grad.data.view(bits)
    return _wrap(keep.view(grad.data.dtype))


class Reshape(Function):
    @staticmethod
    def forward(ctx, a, shape):
        ctx.shape = a.shape
        try:
            out = a.data.reshape(shape)
        except ValueError:
            raise ValueError("reshape: cannot reshape a tensor of shape %s (%d elements) into %s"
                             % (tuple(a.shape), a.data.size, tuple(shape))) from None
        # A view shares the version counter: an in-place change through it is seen (as in torch).
        return _wrap(out, a._version if np.may_share_memory(out, a.data) else None)

    @staticmethod
    def backward(ctx, grad):
        return Reshape.apply(grad, ctx.shape)


class Permute(Function):
    @staticmethod
    def forward(ctx, a, axes):
        ctx.axes = axes
        return _wrap(a.data.transpose(axes), a._version)

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
        return _wrap(out.reshape(shape))

    @staticmethod
    def backward(ctx, grad):
        return Expand.apply(grad, ctx.shape)


class Index(Function):
    """x[index]: basic and advanced NumPy indexing. As in torch, basic indexing gives a view
    that shares x's memory and version counter (under minigrad.no_grad(), w[0].zero_()
    changes w), advanced indexing a copy."""

    _kept_arrays = ("index",)  # (freed when an array: a basic index is no tensor in torch)

    @staticmethod
    def forward(ctx, a, index):
        if ctx._recording:  # its arrays as they are now (_own_arrays)
            index = _own_arrays(index)
        ctx.shape, ctx.index = a.shape, index
        try:
            out = a.data[index]
            if out.__class__ is not np.ndarray:  # one element: NumPy copies it out as a scalar,
                # while with an Ellipsis after the ints it gives a 0-d view, as torch's x[i]
                out = a.data[(*(index if isinstance(index, tuple) else (index,)), Ellipsis)]
        except IndexError as e:
            raise IndexError("index %r into a tensor of shape %s: %s" % (index, tuple(a.shape), e)) from None
        return _wrap(out, a._version if np.may_share_memory(out, a.data) else None)

    @staticmethod
    def backward(ctx, grad):
        return IndexAdd.apply(grad, ctx.index, ctx.shape)


def broadcasts_to(shape, to):
    """Whether an array of `shape` broadcasts to `to` by NumPy's rules."""
    try:
        return np.broadcast_shapes(shape, to) == tuple(to)
    except ValueError:
        return False


def _own_arrays(index):
    """`index` with copies of its index arrays and lists, for the backward to read: the
    caller's (a tensor's, NumPy's or a list) changed in place after the forward moved the
    gradient to the new positions, silently (torch holds index tensors of its own)."""
    parts = index if index.__class__ is tuple else (index,)
    if not any(p.__class__ is list or p.__class__ is np.ndarray and p.ndim for p in parts):
        return index
    owned = tuple([copy.deepcopy(p) if p.__class__ is list else
                   p.copy() if p.__class__ is np.ndarray and p.ndim else p for p in parts])
    return owned if index.__class__ is tuple else owned[0]


class IndexAdd(Function):
    """zeros(shape) with `a` added at `index` (repeated indices accumulate)."""

    _kept_arrays = ("index",)

    @staticmethod
    def forward(ctx, a, index, shape):
        ctx.index = index
        out = np.zeros(shape, dtype=a.dtype)
        parts = index if isinstance(index, tuple) else (index,)
        if all(isinstance(i, (int, np.integer, slice, type(None), type(...))) for i in parts):
            out[index] = a.data  # a basic index repeats no element: 25-33x faster than add.at
        else:
            np.add.at(out, index, a.data)
        return _wrap(out)

    @staticmethod
    def backward(ctx, grad):
        return Index.apply(grad, ctx.index)
