"""Tensor: an np.ndarray with a gradient and a link to the operation that made it.

Every operator and method here is a thin call of a Function in ops.py; the
gradient rules live there, and autograd.py walks the graph they record.
"""

import collections
import numbers
import threading
import warnings
import weakref

import numpy as np

from minigrad.grad_mode import _State

_ndarray = np.ndarray
# id(leaf) -> (a weak reference to it, the spans in which it required grad) for each leaf
# made not to require grad: see the requires_grad setter.
_lapsed = {}


class _Spans:
    """A leaf's stamp once it was made not to require grad and back: the spans of node numbers
    [first, end) in which it required grad, the last open (end None)."""

    __slots__ = ("spans",)

    def __init__(self, spans):
        self.spans = spans

    def covers(self, sequence):
        for first, end in reversed(self.spans):  # (the newest first: most nodes are recent)
            if first <= sequence:
                return end is None or sequence < end
        return False


# A leaf frozen and unfrozen at every step (a GAN's discriminator) would gather a span a step:
# past this many, the oldest gap is closed, so a node recorded in it, if a graph still held it
# this many freezes later, would give the leaf a gradient where torch's would not.
_MAX_SPANS = 8


def _spans(stamp, end):
    """The closed spans of a leaf's stamp (True: from the first node) made not to require grad
    when `end` was the next node's number."""
    if stamp.__class__ is _Spans:
        closed, first = stamp.spans[:-1], stamp.spans[-1][0]
    else:
        closed, first = (), 0 if stamp is True else stamp
    spans = closed + (((first, end),) if first < end else ())  # (no node since: no span)
    if len(spans) > _MAX_SPANS:
        spans = ((spans[0][0], spans[1][1]),) + spans[2:]
    return spans


def records_edge(node, leaf):
    """Whether `node` holds an edge to `leaf`, a tensor that requires grad and has no grad_fn:
    whether it required grad when the node was recorded, as torch's nodes fix their edges."""
    stamp = leaf._requires_grad
    if stamp is True:
        return True
    sequence = node._sequence
    return stamp <= sequence if stamp.__class__ is int else stamp.covers(sequence)


def _as_array(value):
    """A NumPy scalar as a 0-d array; an ndarray subclass as it is."""
    return value if isinstance(value, np.ndarray) else np.asarray(value)


class Tensor:
    """A NumPy array that records the operations applied to it.

    Tensor(data, requires_grad=False): `data` is anything np.array takes, copied (as
    torch.tensor copies; from_numpy shares); its dtype is kept (Python floats become
    float64, minigrad's default float dtype).

    `_version` is a one-element list shared by every Tensor that views the same
    memory (detach(), reshape, permute): an in-place change through any of them
    bumps it, so a gradient rule that saved one of them sees the change (torch's
    version counter).
    """

    # _batch: the vmap level whose batch dimension (dim 0 of data) this tensor carries.
    # _buffer: an hlo.jit output's XLA device buffer (OnDevice below), set on those alone.
    __slots__ = ("data", "_grad", "grad_fn", "_requires_grad", "_version", "_batch", "_buffer",
                 "__weakref__")
    # NumPy defers to Tensor's reflected operators (ndarray + Tensor -> Tensor.__radd__).
    __array_ufunc__ = None

    def __init__(self, data, requires_grad=False, dtype=None):
        if isinstance(data, Tensor):
            data._refuse_unreadable("Tensor()", "copy it by a tensor operation, which the "
                                 "transform sees: t.detach() * 1")  # (Tensor reads the value)
            data = data.data
        if isinstance(data, (list, tuple)):
            self.data = _array_of_list(data, dtype)
        else:
            self.data = np.array(data, dtype=dtype)
        _check_dtype(self.data.dtype, data)
        self._grad = None
        self.grad_fn = None
        self._batch = None
        self._version = [0]
        self._requires_grad = False
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _wrap(cls, array, version=None):
        """A Tensor around an ndarray that an operation just produced (no checks, no copy);
        `version`: the counter of the tensor whose memory `array` views."""
        t = cls.__new__(cls)
        # NumPy's operations on 0-d arrays return scalars, which in-place updates, item
        # assignment and .grad accumulation cannot write into: a 0-d array instead, as torch's.
        t.data = array if array.__class__ is _ndarray else _as_array(array)
        t._grad = None
        t.grad_fn = None
        t._requires_grad = False
        t._batch = None
        t._version = [0] if version is None else version
        return t

    # -- autograd state -------------------------------------------------------------------

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        # Checked here, as torch checks it: a (1,) gradient assigned to a (3,) parameter was
        # broadcast by SGD's step and added into by backward. (minigrad's own code sets _grad.)
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError("assigned grad expected to be a Tensor or None, got %s"
                                % type(value).__name__)
            if value.data.shape != self.data.shape or value.data.dtype != self.data.dtype:
                raise RuntimeError("assigned grad of shape %s and dtype %s does not match the "
                                   "tensor's, %s and %s" % (tuple(value.data.shape), value.data.dtype,
                                                            tuple(self.data.shape), self.data.dtype))
        self._grad = value

    @grad.deleter
    def grad(self):  # (`del p.grad`, as torch's: None)
        self._grad = None

    @property
    def requires_grad(self):
        return self._requires_grad is not False  # (True, or a leaf's stamp: the setter's)

    @requires_grad.setter
    def requires_grad(self, value):
        if value and self.data.dtype.kind not in "fc":
            raise RuntimeError("only tensors of floating point dtype can require gradients, got %s"
                               % self.data.dtype)
        if not value and self.grad_fn is not None:
            raise RuntimeError("requires_grad can be changed only on leaf tensors; use detach()")
        if not value:
            if self._requires_grad:  # the spans it required grad in, kept for its edges
                key, end = id(self), next(_function._sequence)
                _lapsed[key] = (weakref.ref(self, lambda _, key=key: _lapsed.pop(key, None)),
                                _spans(self._requires_grad, end))
            self._requires_grad = False
        elif not self._requires_grad:
            # A leaf holds, in place of True, a stamp: a number above every node recorded so
            # far. torch fixes a node's edges when it records it, so a leaf made to require grad
            # after a node used it gets no gradient from that node (y = (x * c).sum();
            # c.requires_grad_(); y.backward() leaves c.grad None): the engine asks
            # records_edge. Made not to require grad and back, a leaf holds the spans of node
            # numbers in which it required grad (torch keeps those nodes' edges, and the nodes
            # recorded in between hold none).
            start = next(_function._sequence) + 1  # (>= 1: truthy)
            lapsed = _lapsed.pop(id(self), None)
            self._requires_grad = (_Spans(lapsed[1] + ((start, None),))
                                   if lapsed is not None and lapsed[0]() is self else start)

    def requires_grad_(self, requires_grad=True):
        """Sets requires_grad in place and returns the tensor, as torch's."""
        self.requires_grad = requires_grad
        return self

    def retain_grad(self):
        """Keeps this non-leaf tensor's gradient in its .grad at each backward (and
        minigrad.grad), as torch's; a leaf's .grad is kept anyway."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on a tensor that does not require grad")
        if self.grad_fn is not None:
            self.grad_fn._retains = weakref.ref(self)

    @property
    def retains_grad(self):
        node = self.grad_fn
        return node is not None and node._retains is not None and node._retains() is self

    @property
    def is_leaf(self):
        return self.grad_fn is None

    def detach(self):
        """The same data, cut from the graph (shares memory, like torch)."""
        return _ops.Detach.apply(self)

    def to(self, dtype):
        """This tensor as `dtype` (a NumPy dtype, its name, or a tensor's), as torch's .to(dtype):
        itself if it has it already, else a recorded cast (its gradient cast back), cut from the
        graph where the dtype cannot carry gradients (an integer or bool one, as torch's)."""
        try:
            dtype = dtype.dtype if isinstance(dtype, Tensor) else np.dtype(dtype)
        except TypeError:
            raise TypeError("to: expected a dtype (np.float32, 'float64') or a tensor, got %r "
                            "(minigrad computes on the CPU, in NumPy)" % (dtype,)) from None
        if dtype == self.dtype:
            return self
        if self.dtype.kind == "c" and dtype.kind != "c":
            warnings.warn("Casting complex values to real discards the imaginary part (as in torch)",
                          UserWarning, stacklevel=2)
        return _ops.Cast.apply(self if dtype.kind in "fc" else self.detach(), dtype)

    def float(self):
        """float32, as torch's .float()."""
        return self.to(np.float32)

    def double(self):
        """float64, as torch's .double()."""
        return self.to(np.float64)

    def backward(self, gradient=None, retain_graph=None, create_graph=False):
        """Accumulates d(self)/d(leaf) into the .grad of every leaf that requires grad.

        retain_graph defaults to create_graph, as in PyTorch.
        """
        _autograd.backward(self, gradient, retain_graph, create_graph)

    # -- NumPy-like attributes --------------------------------------------------------------

    @property
    def shape(self):
        """The shape; inside vmap, one example's (the batch dim is hidden, as in torch)."""
        if self._batch is not None and self._batch in _State.transforms:
            return self.data.shape[1:]
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return len(self.shape)

    def numel(self):
        return int(np.prod(self.shape))

    def size(self, dim=None):
        """The shape, or one dim's length, as torch's."""
        if dim is None:
            return self.shape
        if not -len(self.shape) <= dim < len(self.shape):
            raise IndexError("size: dim %d is out of range for a tensor of %d dimensions"
                             % (dim, len(self.shape)))
        return self.shape[dim]

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        # (without it, Python iterates by x[0], x[1], ... up to an IndexError: a 0-d tensor
        # gave no items instead of torch's error)
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[k] for k in range(self.shape[0]))

    def numpy(self):
        self._refuse_unreadable("numpy()")
        if self._requires_grad:
            raise RuntimeError("can't call numpy() on a tensor that requires grad; "
                               "use tensor.detach().numpy()")
        return self.data

    def __array__(self, dtype=None, copy=None):
        """np.asarray(t), and NumPy, matplotlib and the like reading a tensor: numpy()'s
        array (refused where numpy() is), converted to dtype, copied as NumPy's copy asks."""
        if _listing.on:
            raise _TensorInList
        array = self.numpy()
        if dtype is not None and array.dtype != dtype:
            if copy is False:
                raise ValueError("converting a %s tensor to %s needs a copy" % (array.dtype, np.dtype(dtype)))
            return array.astype(dtype)
        return array.copy() if copy else array

    def tolist(self):
        """The values as (nested lists of) Python numbers; a 0-d tensor's as one number."""
        self._refuse_unreadable("tolist()")
        return self.data.tolist()

    def item(self):
        self._refuse_unreadable("item()")
        if self.data.size != 1:
            raise RuntimeError("a Tensor with %d elements cannot be converted to Scalar (item() "
                               "needs one element, as in torch)" % self.data.size)
        return self.data.item()

    def __format__(self, spec):
        # f"{loss:.4f}": a 0-d tensor formats as its number, as torch's (it raised TypeError)
        if self.data.ndim == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)

    def __contains__(self, element):
        """`element in t`: whether any element equals it, as torch's."""
        if not isinstance(element, (Tensor, numbers.Number, np.generic)):
            raise RuntimeError("Tensor.__contains__ only supports Tensor or scalar, but you passed "
                               "in a %s" % type(element).__name__)
        self._refuse_unreadable("`in`")
        return bool((self == element).data.any())

    # float(t), int(t), complex(t), and t as an index (range(t), xs[t]) for one element, with
    # torch's errors: a complex value is not a float or an int, and only an integer (or bool)
    # tensor is an index.
    def _scalar(self, kind=None):
        """The one element as a Python number of type `kind` (None: as it is)."""
        self._refuse_unreadable("%s()" % getattr(kind, "__name__", "Tensor"))
        if self.data.size != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        value = self.data.item()
        if kind is None:
            return value
        if isinstance(value, complex) and kind is not complex:
            raise RuntimeError("value cannot be converted to type %s without overflow (as in "
                               "torch); take .real first" % ("double" if kind is float else "int64_t"))
        return kind(value)

    def __float__(self):
        return self._scalar(float)

    def __int__(self):
        return self._scalar(int)

    def __complex__(self):
        return self._scalar(complex)

    def __index__(self):
        if self.data.size != 1 or self.data.dtype.kind not in "iub":
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return self._scalar(int)

    def _refuse_unreadable(self, what, fix=None):
        """Inside vmap, a batched tensor holds one value per example, and inside hlo.jit's trace a
        tensor computed from the inputs stands for every call's value: Python code that reads
        one (to branch, or to compute apart from the tensor operations) would read neither, and
        jit would keep the trace's value for every later call. torch and jax raise too."""
        for level in _State.transforms:  # (empty outside minigrad.func and hlo)
            reason = level.unreadable(self)
            if reason:
                raise RuntimeError("%s: %s of %s; %s" % (
                    reason[0], what, reason[1], fix or "use tensor operations (Tensor methods, "
                    "minigrad.functional, where), or read it outside (%s raises too)" % reason[2]))

    def __repr__(self):
        extra = ""
        if self.grad_fn is not None:
            extra = ", grad_fn=%r" % (self.grad_fn,)
        elif self._requires_grad:
            extra = ", requires_grad=True"
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        if self.data.size == 0 and self.data.ndim > 1:  # ([] alone hides the shape, as in torch)
            body += ", size=%s" % (tuple(self.data.shape),)
        return "tensor(%s%s)" % (body, extra)

    def __bool__(self):
        self._refuse_unreadable("bool()")
        if self.data.size != 1:
            raise RuntimeError("Boolean value of Tensor with %s is ambiguous" % (
                "no values" if self.data.size == 0 else "more than one value (%d)" % self.data.size))
        return bool(self.data)

    __hash__ = object.__hash__

    def __getstate__(self):
        # A leaf's stamp (requires_grad's setter) numbers this process's nodes: unpickled in
        # another, whose nodes count from 0, it would refuse their gradients.
        state = {name: getattr(self, name) for name in self.__slots__ if name != "__weakref__"
                 and hasattr(self, name)}
        state["_requires_grad"] = self.requires_grad
        return None, state

    # -- operations (gradient rules in ops.py) ----------------------------------------------

    def __add__(self, other):
        return _ops.Add.apply(self, other)

    def __radd__(self, other):
        return _ops.Add.apply(other, self)

    def __sub__(self, other):
        return _ops.Sub.apply(self, other)

    def __rsub__(self, other):
        return _ops.Sub.apply(other, self)

    def __mul__(self, other):
        return _ops.Mul.apply(self, other)

    def __rmul__(self, other):
        return _ops.Mul.apply(other, self)

    def __truediv__(self, other):
        return _ops.Div.apply(self, other)

    def __rtruediv__(self, other):
        return _ops.Div.apply(other, self)

    def __pow__(self, other):
        return _ops.Pow.apply(self, other)

    def __rpow__(self, other):
        return _ops.Pow.apply(other, self)

    def __matmul__(self, other):
        return _ops.MatMul.apply(self, _tensor(other))

    def __rmatmul__(self, other):
        return _ops.MatMul.apply(_tensor(other), self)

    def __neg__(self):
        return _ops.Neg.apply(self)

    def __invert__(self):
        """~mask: the logical not of a bool tensor (torch's ~ of an integer tensor, its bitwise
        not, is not in minigrad's op table)."""
        if self.dtype.kind != "b":
            raise TypeError("invert: ~ takes a bool tensor (a mask), got dtype %s; minigrad has no "
                            "bitwise operations" % self.dtype)
        return _ops.Compare.apply(np.equal, self, False)

    # Comparisons give boolean tensors without gradient, elementwise as in torch (== too). They
    # are operations (Compare), so that vmap batches them and hlo.jit traces them: on the
    # arrays, a mask would be the whole batch's, or a constant baked into the program.
    def __gt__(self, other):
        return _ops.Compare.apply(np.greater, self, other)

    def __ge__(self, other):
        return _ops.Compare.apply(np.greater_equal, self, other)

    def __lt__(self, other):
        return _ops.Compare.apply(np.less, self, other)

    def __le__(self, other):
        return _ops.Compare.apply(np.less_equal, self, other)

    def __eq__(self, other):
        if other is None:  # (torch: t == None is False)
            return NotImplemented
        return _ops.Compare.apply(np.equal, self, other)

    def __ne__(self, other):
        if other is None:
            return NotImplemented
        return _ops.Compare.apply(np.not_equal, self, other)

    def __getitem__(self, index):
        if _State.transforms:  # (refused here: _index would hand vmap the whole batch's array)
            from minigrad.batching import refuse_batched_index
            refuse_batched_index(index)
        keys = _index(index)
        out = _ops.Index.apply(self, keys[0])
        return out if len(keys) == 1 else _ops.Index.apply(out, keys[1])

    def sum(self, dim=None, keepdim=False):
        return _ops.Sum.apply(self, _all_if_empty(dim), keepdim)

    def mean(self, dim=None, keepdim=False):
        return _ops.Mean.apply(self, _all_if_empty(dim), keepdim)

    def max(self, dim=None, keepdim=False):
        """max over all elements (ties share the gradient); over one dim, (values, indices)
        as torch.max(x, dim): a named tuple, the gradient going to each index's element."""
        if isinstance(dim, (tuple, list)):
            raise TypeError("max: dim must be one int, got %r (as in torch); reshape the dims "
                            "into one first, or call max() over all elements" % (dim,))
        values = _ops.Max.apply(self, dim, keepdim)
        if dim is None:
            return values
        return MaxResult(values, _ops.Argmax.apply(self, dim, keepdim))

    def exp(self):
        return _ops.Exp.apply(self)

    def abs(self):
        return _ops.Abs.apply(self)

    __abs__ = abs

    def sign(self):
        return _ops.Sign.apply(self)

    def log(self):
        return _ops.Log.apply(self)

    def relu(self):
        return _ops.ReLU.apply(self)

    def tanh(self):
        return _ops.Tanh.apply(self)

    def sigmoid(self):
        return _ops.Sigmoid.apply(self)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return _ops.Reshape.apply(self, tuple(shape))

    def transpose(self, dim0=-2, dim1=-1):
        """Swaps two dimensions (the last two by default); a 0-d tensor's dim is 0 or -1, as
        in torch (transposing it is itself)."""
        d0, d1 = (_ops.normalize_dim(d, self.ndim, "transpose", shape=self.shape)
                  for d in (dim0, dim1))
        axes = list(range(self.ndim))
        if axes:
            axes[d0], axes[d1] = axes[d1], axes[d0]
        return _ops.Permute.apply(self, tuple(axes))

    def permute(self, *dims):
        """The dims reordered, as torch's: permute(2, 0, 1) or permute((2, 0, 1))."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = dims[0]
        axes = tuple(_ops.normalize_dim(d, self.ndim, "permute", shape=self.shape) for d in dims)
        if len(axes) != self.ndim or len(set(axes)) != len(axes):
            raise RuntimeError("permute: %s is not an order of the %d dims of a tensor of shape %s"
                               % (tuple(dims), self.ndim, tuple(self.shape)))
        return _ops.Permute.apply(self, axes)

    def unsqueeze(self, dim):
        """A dim of size 1 inserted at `dim` (-ndim - 1 to ndim), as torch's."""
        d = _ops.normalize_dim(dim, self.ndim + 1, "unsqueeze", shape=self.shape + (1,))
        return _ops.Reshape.apply(self, self.shape[:d] + (1,) + self.shape[d:])

    def sqrt(self):
        return self ** 0.5

    def masked_fill(self, mask, value):
        """`value` where the boolean `mask` (broadcast to this tensor's shape) is True, else this
        tensor's elements, in its dtype, as torch's: attention's masking, out of place.
        `value` is a number or a 0-d tensor (which then gets a gradient)."""
        if not isinstance(mask, Tensor):  # (a copy: the backward reads it)
            mask = Tensor(mask)
        if mask.dtype != bool:
            raise TypeError("masked_fill: mask must be a boolean tensor, got %s (as in torch)" % mask.dtype)
        if isinstance(value, Tensor) and value.ndim:
            raise RuntimeError("masked_fill only supports a 0-dimensional value tensor, got shape "
                               "%s (as in torch); use where(mask, value, x)" % (tuple(value.shape),))
        if self.dtype.kind in "biu" and not np.isfinite(_data(value)):  # (the cast would wrap it)
            raise RuntimeError("masked_fill: value %s cannot be converted to type %s without "
                               "overflow (as in torch)" % (_data(value), self.dtype))
        out = _ops.Where.apply(mask, value, self)  # (of the shapes broadcast, as torch's)
        return out if out.dtype == self.dtype else out.to(self.dtype)

    def clamp(self, min=None, max=None):
        """min(max(x, min), max) elementwise, as torch's: NaN stays NaN, a NaN bound makes every
        element NaN, min > max gives max; the gradient passes where min <= x <= max (the bounds
        included) and is 0 elsewhere, at NaN too. Bounds are numbers here (torch's also takes
        tensors: where(x < m, m, x) gives a tensor bound its gradient). Built from Compare and
        Where, whose rules serve every transform and hlo."""
        if min is None and max is None:
            raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None (as in torch)")
        for name, bound in (("min", min), ("max", max)):
            if bound is not None and not isinstance(bound, (bool, int, float, np.number)):
                raise TypeError("clamp: %s must be a number, got %s; for a tensor bound use "
                                "where(x < m, m, x)" % (name, type(bound).__name__))
        if self.dtype.kind == "c":
            raise TypeError("clamp is not supported for complex types (as in torch)")
        # The value, from the detached input: max(x, min), then min(that, max), NaN propagating.
        value = self.detach()
        if min is not None:
            value = _ops.Where.apply(value < min if min == min else True, min, value)
        if max is not None:
            value = _ops.Where.apply(value > max if max == max else True, max, value)
        inside = (self >= min if max is None else self <= max if min is None
                  else _ops.Where.apply(self >= min, self <= max, False))
        return _ops.Where.apply(inside, self, value)

    @property
    def T(self):
        return _ops.Permute.apply(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def real(self):
        """The real part, as torch's (a real tensor is its own), differentiable; a copy, not
        torch's view: a recorded cast to the real dtype, which every transform knows."""
        if self.data.dtype.kind != "c":
            return self
        return _ops.Cast.apply(self, self.data.real.dtype)

    @property
    def imag(self):
        """The imaginary part, as torch's, differentiable; a copy, not torch's view."""
        if self.data.dtype.kind != "c":
            raise RuntimeError("imag is not implemented for tensors with non-complex dtypes (as in "
                               "torch)")
        return _ops.Imag.apply(self)

    # -- in-place updates (for optimizers; versioned, so stale saved values are caught) -----

    def _check_inplace(self, other=None):
        """Refuses the in-place changes that minigrad would not record: each would give a wrong
        result silently (torch records them)."""
        if _State.transforms:  # a trace, batch or tangent would not see the change
            raise RuntimeError("in-place operations inside minigrad.func transforms and hlo.jit "
                               "are not supported (the transform would not see the change); use "
                               "the out-of-place operation" + _OUT_OF_PLACE)
        if _State.enabled and self._requires_grad:
            if self.grad_fn is None:
                raise RuntimeError("a leaf tensor that requires grad is being used in an in-place "
                                   "operation; wrap the update in minigrad.no_grad()")
            raise RuntimeError("in-place operations on tensors recorded in a graph are not "
                               "supported; use the out-of-place operation" + _OUT_OF_PLACE)
        if _State.enabled and other.__class__ is Tensor and other._requires_grad:
            raise RuntimeError("an in-place operation with an operand that requires grad is not "
                               "recorded (its gradient would be lost); use the out-of-place "
                               "operation: z = z + w")

    def _update(self, name, op, other, alpha=1):
        """self = op(self, alpha * other) in self's memory, with torch's rules: the operation's
        own (promotion, a Python int wrapped, bool subtraction refused), then a result that
        keeps self's shape and casts to its dtype as torch's canCast allows (no float into an
        integer tensor, no complex into a real one, nothing but bool into bool)."""
        self._check_inplace(other)  # (so nothing below records: op.apply only computes)
        result = self._fits(name, op.apply(self, other if alpha == 1 else other * alpha))
        np.copyto(self.data, result.data, casting="unsafe")
        self._version[0] += 1
        return self

    def _fits(self, name, result):
        """`result` of an in-place operation on self, checked as torch checks one."""
        if not _dtypes.can_cast(result.dtype, self.dtype):
            raise RuntimeError("%s: result type %s can't be cast to the desired output type %s "
                               "(as in torch); use the out-of-place operation"
                               % (name, result.dtype, self.dtype))
        if result.shape != self.shape:
            raise RuntimeError("%s: output with shape %s doesn't match the broadcast shape %s "
                               "(as in torch)" % (name, list(self.shape), list(result.shape)))
        return result

    def add_(self, other, alpha=1):
        return self._update("add_", _ops.Add, other, alpha)

    def sub_(self, other, alpha=1):
        return self._update("sub_", _ops.Sub, other, alpha)

    def mul_(self, other):
        return self._update("mul_", _ops.Mul, other)

    def div_(self, other):
        return self._update("div_", _ops.Div, other)

    # `x += y` changes x in place, as in torch (w -= lr * w.grad under no_grad updates the
    # parameter that w names). Where torch would record the change in the graph (x or y
    # tracked, or inside a transform), minigrad, which records no in-place operation, binds x
    # to the out-of-place result instead, checked and cast as add_ would leave x (its shape
    # and dtype): the same values and gradients for x, and residual code (out += identity)
    # keeps working; only another name for x's old tensor differs.
    def _records(self, other):
        if _State.transforms:
            return True
        if not _State.enabled:
            return False
        if self._requires_grad:  # (a leaf that requires grad: add_ refuses it, as torch)
            return self.grad_fn is not None
        return other.__class__ is Tensor and other._requires_grad

    def _rebound(self, name, result):
        result = self._fits(name, result)
        return result if result.dtype == self.dtype else _ops.Cast.apply(result, self.dtype)

    def __iadd__(self, other):
        return self._rebound("add_", self + other) if self._records(other) else self.add_(other)

    def __isub__(self, other):
        return self._rebound("sub_", self - other) if self._records(other) else self.sub_(other)

    def __imul__(self, other):
        return self._rebound("mul_", self * other) if self._records(other) else self.mul_(other)

    def __itruediv__(self, other):
        return self._rebound("div_", self / other) if self._records(other) else self.div_(other)

    def zero_(self):
        self._check_inplace()
        self.data[...] = 0
        self._version[0] += 1
        return self

    def __setitem__(self, index, value):
        self._check_inplace(value)
        keys = _index(index)
        target = self.data if len(keys) == 1 else self.data[keys[0]]  # (a view: basic keys)
        value = _data(value)
        try:
            try:
                target[keys[-1]] = value
            except OverflowError:
                # torch's check (c10::overflows): an unsigned dtype takes a negative int down to
                # -max as its two's complement (uint8 -1 is 255); any other is out of range
                info = np.iinfo(target.dtype) if target.dtype.kind in "iu" else None
                if value.__class__ is not int or info is None or info.min < 0 or not -info.max <= value < 0:
                    raise RuntimeError("setitem: value %s cannot be converted to type %s without "
                                       "overflow (as in torch)" % (value, target.dtype)) from None
                target[keys[-1]] = value % (info.max + 1)
        except (ValueError, TypeError, IndexError, OverflowError) as e:
            # NumPy's message names neither the operation nor the tensor
            raise type(e)("setitem: %s (a tensor of shape %s and dtype %s, index %r, a value of %s)"
                          % (e, tuple(self.shape), self.dtype, index,
                             "shape %s" % (np.shape(value),) if np.ndim(value) else type(value).__name__)) from None
        self._version[0] += 1


# torch.return_types.max: x.max(1)[0] and `values, indices = x.max(1)` mean what they do in torch
MaxResult = collections.namedtuple("max", ("values", "indices"))


class OnDevice(Tensor):
    """An hlo.jit output not read yet: only its XLA device buffer is set. Its first attribute
    read or write of any kind (the engine's `__class__ is Tensor` checks among them) makes it
    a plain Tensor whose `data` is a read-only view of the buffer (_settle); until then jit
    passes it back as the buffer, so a training loop that feeds its parameters back never
    reads them on the host (reading the digits MLP step's five outputs on every call cost 12
    of its 82 us, Intel Xeon family 6 model 167).
    A subclass, not a Tensor.__getattr__: any hook on Tensor itself made every attribute read
    of every tensor slower (CPython specialises attribute reads of plain lookups only), and the
    eager step 3.4% slower (15 interleaved rounds, the same Intel)."""

    __slots__ = ()

    def __getattribute__(self, name):
        _settle(self)
        return object.__getattribute__(self, name)

    def __setattr__(self, name, value):
        _settle(self)
        object.__setattr__(self, name, value)


_get_buffer = Tensor._buffer.__get__
_set_buffer = Tensor._buffer.__set__


def on_device(buffer):
    """A tensor over an XLA device buffer (an hlo.jit output), read on the host when used."""
    t = OnDevice.__new__(OnDevice)
    _set_buffer(t, buffer)
    return t


def unread_buffer(t):
    """The device buffer of an hlo.jit output not read yet, else None (never reads it)."""
    return _get_buffer(t) if type(t) is OnDevice else None


def host_view(buffer):
    """An XLA buffer's memory as a read-only array, through the buffer protocol (cheaper than
    np.asarray's layers); its .base is the memoryview, whose .obj is the buffer."""
    return np.asarray(memoryview(buffer))


def _settle(t):
    try:
        view = host_view(_get_buffer(t))
    except BufferError:  # (PJRT's "Buffer has been deleted or donated")
        raise RuntimeError("this tensor was donated to an hlo.jit call (donate_argnums), which "
                           "reused its memory: use that call's outputs instead") from None
    object.__setattr__(t, "__class__", Tensor)  # first: every access below is a plain one
    t.data = view
    t._buffer = view.base  # (NumPy's memoryview of the buffer: hlo.jit passes its .obj back)
    t._grad = None
    t.grad_fn = None
    t._requires_grad = False
    t._batch = None
    t._version = [0]


def from_numpy(array):
    """A Tensor that shares `array`'s memory (torch.from_numpy): changes show on both sides."""
    if not isinstance(array, np.ndarray):
        raise TypeError("from_numpy expects an np.ndarray, got %s" % type(array).__name__)
    _check_dtype(array.dtype, array)
    return Tensor._wrap(array)


def _check_dtype(dtype, data):
    """Refuses what torch has no dtype for: objects, strings, bytes, dates and times, and x86's
    80-bit long doubles (NumPy's float128 and complex256)."""
    if dtype.kind in "OSUVMm" or dtype.kind in "fc" and dtype.itemsize > (16 if dtype.kind == "c" else 8):
        raise TypeError("Tensor data must be numeric, of a dtype torch has: got %s, %r" % (dtype, data))


def _all_if_empty(dim):
    """torch's sum and mean reduce every dim for dim=() (NumPy's axis=() reduces none); the
    ops themselves keep NumPy's meaning, which vmap's rules rely on for 0-d examples."""
    return None if isinstance(dim, (tuple, list)) and not dim else dim


def _data(value):
    return value.data if isinstance(value, Tensor) else value


def _tensor(value):
    return value if isinstance(value, Tensor) else Tensor._wrap(np.asarray(value))


def _index(index):
    """The index as NumPy keys applied in turn (one, or two), read by torch's rules where NumPy's
    differ. Tensors in it become their arrays. A list that holds sequences, slices, None or
    Ellipsis is a tuple of indices (torch keeps this rule, which NumPy 2 dropped: x[[[0, 1],
    [1, 2]]] is x[[0, 1], [1, 2]]). Integers beside advanced indices (arrays, lists, masks)
    select first, as torch's plain selects: NumPy indexes with them as arrays, and where a
    slice stands between, puts the indexed dims first (x[0, :, [0, 2]] came out transposed)."""
    if index.__class__ is list and len(index) < 32 and any(
            isinstance(e, (list, tuple, Tensor, np.ndarray, slice)) or e is None or e is Ellipsis
            for e in index):
        warnings.warn("Using a non-tuple sequence for multidimensional indexing is deprecated in "
                      "torch (as it reads it still, so does minigrad); use x[tuple(seq)] instead "
                      "of x[seq]", UserWarning, stacklevel=3)
        index = tuple(index)
    if index.__class__ is not tuple:
        return (_data(index),)
    key = tuple([_data(i) for i in index])
    if not any(_is_int(e) for e in key) or not any(
            isinstance(e, (list, tuple)) or e.__class__ is np.ndarray and e.ndim for e in key):
        return (key,)
    select, rest = [], []  # the integers with every other dim kept, then the rest
    for e in key:
        if _is_int(e):
            select.append(int(e))  # (a 0-d array among slices would index as an array: a copy)
        elif e is None:
            rest.append(e)
        elif e is Ellipsis:
            select.append(e)
            rest.append(e)
        else:
            mask = np.asarray(e) if isinstance(e, list) else e
            dims = mask.ndim if getattr(mask, "dtype", None) == bool else 1
            select.extend([slice(None)] * dims)
            rest.append(e)
    return tuple(select), tuple(rest)


_OUT_OF_PLACE = " (for x[mask] = v: x = x.masked_fill(mask, v), or minigrad.where(mask, v, x))"


class _TensorInList(Exception):
    pass


class _Listing(threading.local):
    on = False  # np.array is reading a list for Tensor() (_array_of_list), in this thread


_listing = _Listing()


def _array_of_list(data, dtype):
    """torch.tensor's array of a (nested) list: a tensor in it is its one number (torch's error
    for others). NumPy would read a tensor by __array__, a (2,) tensor as a row: while it
    reads the list, __array__ stops it, and the list is read again through _numbers (only
    then: a list of plain numbers goes at NumPy's speed)."""
    _listing.on = True
    try:
        return np.array(data, dtype=dtype)
    except _TensorInList:
        pass
    finally:
        _listing.on = False
    return np.array(_numbers(data), dtype=dtype)


def _numbers(data):
    """A nested list with each tensor in it as its one number (torch's error for others)."""
    if isinstance(data, Tensor):
        return data._scalar()
    if isinstance(data, (list, tuple)):
        return [_numbers(d) for d in data]
    return data


def _is_int(e):
    """An index that torch selects with: an integer, or a 0-d integer array (tensor)."""
    if e.__class__ is np.ndarray:
        return e.ndim == 0 and e.dtype.kind in "iu"
    return isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_))


# ops.py and autograd.py build on Tensor, so they are imported once Tensor exists.
from minigrad import (autograd as _autograd, dtypes as _dtypes, function as _function,  # noqa: E402
                      ops as _ops)
