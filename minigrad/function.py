"""Function: one differentiable operation, and the graph node that records it.

    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return Tensor(x.data ** 2)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2 * x

    y = Square.apply(x)

As in PyTorch: forward takes and returns Tensors and runs with recording off;
backward returns one gradient (or None) per forward argument and is itself
recorded only under create_graph. The `ctx` is the graph node: an instance of
the Function subclass that becomes the output's `grad_fn`.
"""

import itertools
import weakref

import numpy as np

from minigrad.grad_mode import _State
from minigrad.tensor import Tensor

FREED_MESSAGE = ("Trying to backward through the graph a second time (or to read saved tensors after "
          "they were freed). Saved values are freed by backward() and minigrad.grad(); pass "
          "retain_graph=True to the first call to backward through the graph again.")

# Numbers each recorded node in order of creation: backward runs nodes in the reverse order,
# which puts every node after all the nodes that use its output (autograd.py).
_sequence = itertools.count()


class Function:
    """Base class of every operation; see the module docstring."""

    # Defaults of the node's state; the instance sets what differs.
    inputs = ()
    _saved = ()
    _versions = ()
    _freed = False
    _output_saved = False  # whether _saved holds the node's own output (a _SavedOutput)
    _recording = False
    _retains = None  # a weak reference to the output, once it asked for its .grad (retain_grad)
    # Attributes of ctx that hold arrays backward reads (cross_entropy's log-probabilities,
    # max's mask): freed with the saved tensors, as torch frees what its nodes save. Named, not
    # found by a scan of the instance's __dict__ (reading __dict__ turns CPython's inline
    # attribute values into a dict object); a Function of the user's keeps its attributes, as
    # torch keeps ctx's.
    _kept_arrays = ()
    # Whether forward computes on arrays alone, applying no Function (Linear, ReLU,
    # cross_entropy): apply then need not turn recording off around it (0.6% of the digits
    # MLP step's instructions, counted by callgrind), which a forward written in Tensor
    # operations needs (the default, as in torch).
    _forward_on_arrays = False

    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args):
        if _State.transforms:  # inside minigrad.func's jvp or vmap: the level handles it
            return _State.transforms[-1].process(cls, args)
        if not _State.enabled:
            # Nothing will be recorded (no_grad, or a backward pass without create_graph):
            # forward gets a context that records nothing, and no bookkeeping. This is most
            # calls in backward, where per-call overhead is what counts.
            return cls.forward(cls.__new__(cls), *args)
        ctx = cls.__new__(cls)
        track = False  # whether any input needs a gradient
        for arg in args:
            if arg.__class__ is Tensor and arg._requires_grad:
                track = True
                break
        ctx._recording = track
        if cls._forward_on_arrays:
            out = cls.forward(ctx, *args)
        else:
            prev = _State.enabled
            _State.enabled = False
            try:
                out = cls.forward(ctx, *args)
            finally:
                _State.enabled = prev
        # (an integer or boolean output, a user's Function's, is not differentiable: as torch's,
        # it is a constant to what uses it, and its Function's backward never runs)
        if track and out.data.dtype.kind in "fc":
            ctx.inputs = args
            ctx._sequence = next(_sequence)
            out._requires_grad = True
            out.grad_fn = ctx
            saved = ctx._saved
            for t in saved:
                if t is out:
                    held = _SavedOutput(out)
                    ctx._saved = tuple([held if t is out else t for t in saved])
                    ctx._output_saved = True
                    break
        return out

    def save_for_backward(self, *tensors):
        if not self._recording:  # no backward will read them
            return
        self._saved = tensors
        # Checked when backward reads them: an in-place change since would give a wrong gradient.
        self._versions = versions = []  # (a loop: a comprehension is a call of its own)
        for t in tensors:
            versions.append(t._version[0])

    @property
    def saved_tensors(self):
        if self._freed:
            raise RuntimeError(FREED_MESSAGE)
        saved = self._saved
        if self._output_saved:
            saved = tuple([t.unpack(self) if t.__class__ is _SavedOutput else t for t in saved])
        for t, version in zip(saved, self._versions):
            if t._version[0] != version:
                raise RuntimeError(
                    "one of the tensors needed for gradient computation was modified by an in-place "
                    "operation: a saved tensor of shape %s used by %s is at version %d, expected "
                    "version %d. Make the change out of place, or after backward()."
                    % (tuple(t.shape), type(self).__name__, t._version[0], version))
        return saved

    @property
    def needs_input_grad(self):
        return tuple(a.__class__ is Tensor and a.requires_grad for a in self.inputs)

    def _free(self):
        """Drops what forward kept for backward: saved tensors, and the arrays named in
        _kept_arrays. As torch frees its saved tensors and keeps sizes, a node that kept
        neither (Add, Sum) can run its backward again."""
        if self._saved:
            self._saved = ()
            self._freed = True
        for name in self._kept_arrays:
            if getattr(self, name).__class__ is np.ndarray:  # (an index may be a slice)
                setattr(self, name, None)
                self._freed = True

    def __repr__(self):
        return "<%sBackward>" % type(self).__name__


class _SavedOutput:
    """A node's own output, saved for its backward. Held strongly it would close a cycle
    (output -> grad_fn -> node -> output) that only the garbage collector frees: under a
    retained graph (func.grad, vjp, vmap) every call's arrays would wait for a collection.
    As torch's SavedVariable does, the node holds it weakly, and its data to rebuild it."""

    __slots__ = ("ref", "data", "version")

    def __init__(self, out):
        self.ref = weakref.ref(out)
        self.data, self.version = out.data, out._version

    def unpack(self, node):
        out = self.ref()
        if out is None:  # dropped by everything else: only the node can still reach its output
            out = Tensor._wrap(self.data, self.version)
            out._requires_grad = True
            out.grad_fn = node
        return out
