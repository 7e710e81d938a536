"""The machinery under minigrad.func: pytrees, and the stack of transform levels.

jvp and vmap push a level onto grad_mode._State.transforms; Function.apply hands
every operation to the innermost level's process(), which computes it with that
level taken off the stack (so the levels below see the primal computation) and
adds its own part: a tangent (forward mode) or the batched rewrite (vmap).
"""

import contextlib

import numpy as np

from minigrad import batching, ops, tangents
from minigrad.grad_mode import _State
from minigrad.tensor import Tensor


# -- pytrees: nested lists, tuples and dicts -------------------------------------------------

def flatten(tree):
    if isinstance(tree, (list, tuple)):
        parts = [flatten(t) for t in tree]
        return [x for leaves, _ in parts for x in leaves], (type(tree), [s for _, s in parts])
    if isinstance(tree, dict):
        keys = list(tree)
        leaves, spec = flatten([tree[k] for k in keys])
        return leaves, (dict, keys, spec)
    return [tree], None


def unflatten(spec, leaves):
    return _build(spec, iter(leaves))


def _build(spec, leaves):
    # A module function, not a closure over itself: a self-referencing closure is a reference
    # cycle that would keep every leaf (a jit call's output buffers) alive until the next GC.
    if spec is None:
        return next(leaves)
    if spec[0] is dict:
        return dict(zip(spec[1], _build(spec[2], leaves)))
    children = [_build(child, leaves) for child in spec[1]]  # (a list: faster than a generator)
    return children if spec[0] is list else sequence(spec[0], children)


class _Leaf:
    def __repr__(self):
        return "*"


def structure(spec, count):
    """A tree of `spec`'s shape with `count` leaves written *, for error messages."""
    return repr(unflatten(spec, [_Leaf()] * count))


def sequence(kind, items):
    """A list or tuple of type `kind` (or a subclass) holding `items`: a namedtuple takes them
    one argument each."""
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def as_tensor(value):
    return value if isinstance(value, Tensor) else Tensor._wrap(np.asarray(value))


# -- levels ---------------------------------------------------------------------------------

class Level:
    batched = False
    forward = False  # a jvp's (ForwardLevel)

    def tangent(self, t):
        """t's tangent at this level: only a jvp's (ForwardLevel) has tangents."""
        return None

    def unreadable(self, t):
        """(this transform's name, what t is to it, the peer that raises too) if Python code
        must not read t's value here (Tensor.item, float, bool, numpy): None but for vmap's
        batched tensors and hlo's traced ones."""
        return None

    def __enter__(self):
        _State.transforms.append(self)
        return self

    def __exit__(self, *exc):
        assert _State.transforms.pop() is self


class Suspend:
    """Runs a block with `level` taken off the stack (and put back where it was)."""

    def __init__(self, level):
        self.level = level

    def __enter__(self):
        if self.level is not None:
            stack = _State.transforms
            self.at = next(i for i in range(len(stack) - 1, -1, -1) if stack[i] is self.level)
            del stack[self.at]

    def __exit__(self, *exc):
        if self.level is not None:
            _State.transforms.insert(self.at, self.level)


_resting = []  # the jvp levels whose process() is handing an operation to the levels below


def mark_batched(t, level, args=()):
    """Marks `t`, computed with the batch in dim 0 while vmap's `level` was off the stack, as
    batched by it, and its tangents, computed the same way, too (and theirs, under nested
    jvps: jacfwd(jacfwd(jacrev))). A tangent that is an argument's of the operation that made
    t (`args`: Alias's rule hands it on) is left as it is: it may be the caller's, or live on
    after this vmap, and a mark of a finished level would read as batched."""
    t._batch = level
    todo = [t] if level is not None else []
    while todo:
        t = todo.pop()
        for outer in _State.transforms:
            tangent = outer.tangent(t)
            if (tangent is not None and tangent._batch is not level
                    and tangent.data.shape == t.data.shape
                    and not any(tangent is outer.tangent(a) for a in args
                                if a.__class__ is Tensor)):
                tangent._batch = level
                todo.append(tangent)


def release(t, level):
    """After vmap `level` is done: t's tangents (and theirs) that carry its mark take t's.
    An output's tangent is often the very tensor its last operation's tangent was (Alias hands
    it on), marked as batched while the vmap ran; kept, the mark of a finished level made a
    later transform read that tangent as batched (a vmap sharing it, a jvp given it)."""
    todo = [t]
    while todo:
        t = todo.pop()
        for outer in _State.transforms:
            tangent = outer.tangent(t)
            if tangent is not None and tangent._batch is level:
                tangent._batch = t._batch
                todo.append(tangent)


def promote(t, batch):
    """t, not batched by vmap level `batch`, repeated along its batch dim as a batched tensor,
    for a backward pass that reads it: grad's unbatched inputs, and a batching rule's unbatched
    operands under jvps that hold a per-example tangent of them (vmap(jvp(grad)) at one point).
    Each jvp's tangent of t is given to the copy: a per-example one as it is, an unbatched one
    promoted too (recursively, so that its own tangents under the jvps outside it come along).
    A jvp that saw the copy made would derive that tangent with the others off the stack, and
    they would lose their tangent of it (jacfwd of a jvp of a grad). Under a nested vmap, t is
    lifted (FoldLevel.lift, which does the same)."""
    if batch.ancestors:
        return batch.lift(t)
    own = _jvp_tangents(t)
    with suspended((batch,) + tuple(own)):
        copy = batching.repeated(t, batch.size)
    mark_batched(copy, batch)
    for level, tangent in own.items():
        level.tangents[id(copy)] = (copy, promote(tangent, batch) if tangent._batch is None
                                    else tangent)  # (per example, or a nested vmap's)
    return copy


def _jvp_tangents(t):
    """{jvp level: its tangent of t}, for the jvp levels on the stack and those resting."""
    found = {}
    for level in [lv for lv in _State.transforms if not lv.batched] + _resting:
        tangent = level.tangent(t)
        if tangent is not None:
            found[level] = tangent
    return found


class ForwardLevel(Level):
    """jvp: tangents by tensor; each operation's tangent comes from its rule."""

    forward = True

    def __init__(self):
        self.tangents = {}  # id(tensor) -> (tensor, tangent); the tensor is kept alive
        self.given = []  # ids of the tangents jvp was given (func._batches_only_tangents)
        # id(tensor) -> (tensor, class, args): what made each tensor of a vmap batching rule
        # run inside this jvp (_Origins)
        self.origins = {}

    def tangent(self, t):
        entry = self.tangents.get(id(t))
        if entry is not None and entry[0] is t:
            return entry[1]
        origin = self.origins.get(id(t))
        return self._derived(t, origin[1], origin[2]) if origin and origin[0] is t else None

    def _derived(self, t, cls, args):
        """The tangent of `t`, made by an operation this level did not see: one a vmap
        batching rule ran while the levels inside vmap were off the stack (the Reshape that
        makes a batch of vectors a batch of matrices for matmul). A grad inside jvp inside vmap
        differentiates those operations, and without their tangents took them for constants:
        vmap(jvp(grad(x @ x))) gave 0 for 2. Derived once, by the operation's tangent rule on
        the whole batch (as the backward pass that reads it runs), from its inputs' tangents,
        a shared one given the batch dim first."""
        tans = []
        for a in args:
            d = self.tangent(a) if a.__class__ is Tensor else None
            if d is not None and d.data.shape != a.data.shape:  # (never a per-example
                # tangent of a shared tensor: a batching rule's are promoted, BatchLevel)
                with Suspend(self):
                    d = batching.repeated(d, a.data.shape[0])
            tans.append(d)
        out = None
        if any(x is not None for x in tans):
            with Suspend(self):
                out = tangents.tangent(cls, args, t, tans)
        self.tangents[id(t)] = (t, out)
        return out

    def process(self, cls, args):
        tans = [self.tangent(a) if a.__class__ is Tensor else None for a in args]
        _resting.append(self)
        try:
            with Suspend(self):  # primal and tangent are computed by the levels below
                out = cls.apply(*args)
                t = None if all(x is None for x in tans) else tangents.tangent(cls, args, out, tans)
        finally:
            _resting.pop()
        if t is not None:
            self.tangents[id(out)] = (out, t)
        return out


class _Origins(Level):
    """Records, for the jvp levels resting above a vmap level, what made each tensor of the
    batching rule it runs (ForwardLevel._derived)."""

    def __init__(self, levels):
        self.levels = levels

    def process(self, cls, args):
        with Suspend(self):
            out = cls.apply(*args)
        for level in self.levels:
            level.origins[id(out)] = (out, cls, args)
        return out


class BatchLevel(Level):
    """vmap: a tensor marked with this level holds the batch in its dim 0."""

    batched = True
    ancestors = ()  # the enclosing vmap levels (FoldLevel)

    def unreadable(self, t):
        if t._batch is self:
            return "vmap", "a batched tensor: its value differs per example", "torch.func's"
        return None

    def __init__(self, size):
        self.size = size
        # ids of the tensors vmap batched (func._batches_only_tangents; alive while it runs, and
        # not held: a tensor holds its level)
        self.inputs = []

    def process(self, cls, args):
        flags = [a.__class__ is Tensor and a._batch is self for a in args]
        # Suspend(self) without its search: Function.apply hands each operation to the
        # innermost level, so this level is the stack's last (this runs once per operation).
        stack = _State.transforms
        stack.pop()
        try:
            if True not in flags:
                if cls is ops.Index:
                    batching._batched_index(args[1])  # refuses batched index tensors
                return cls.apply(*args)
            rule = batching.batch_rule(cls)
            if _resting:  # jvp levels inside this vmap: they may need to see the rule's work
                inner = list(_resting)
                args = [a if flag or a.__class__ is not Tensor or not any(
                            _per_example(level.tangent(a), self) for level in inner)
                        else promote(a, self) for a, flag in zip(args, flags)]
                flags = [a.__class__ is Tensor and a._batch is self for a in args]
                with _Origins(inner):
                    out = rule(cls, args, flags)
                for level in inner:  # the result's tangent is the operation's (their process)
                    level.origins.pop(id(out), None)
            else:
                out = rule(cls, args, flags)
        finally:
            stack.append(self)
        if len(stack) > 1:  # the jvps outside took out's tangents on the whole batch: they
            # are batched too (a nested vmap lifts them as such: jacfwd of a vmap(jacfwd))
            mark_batched(out, self, args)
        else:
            out._batch = self
        return out


class FoldLevel(BatchLevel):
    """vmap inside vmap: the inner batch of `factor` examples folded into the enclosing
    level's dim 0, row b * factor + j holding outer example b's inner example j, so that
    every operation still runs once, over both batches, by the one-level rules. A tensor
    batched by an enclosing level only is repeated along dim 0 (each row `factor` times, an
    ancestor's by the product of the factors between) where it meets a folded one, as
    torch.func's nested vmap broadcasts it; an operation on such tensors alone is the
    enclosing level's, or, with that level off the stack (vjp_fn's backward of a graph
    batched by it), computed on the whole batch and marked as batched by it."""

    def __init__(self, outer, factor):
        super().__init__(outer.size * factor)
        self.outer, self.factor = outer, factor
        self.ancestors = (outer,) + outer.ancestors

    def rows_per(self, level):
        """How many of this level's rows each row of `level` (an enclosing level) becomes: the
        product of the factors between (counted: a quotient of sizes fails for an empty
        batch); for None (an unbatched tensor), every row."""
        if level is None:
            return self.size
        count, inner = 1, self
        while inner is not level:
            count *= inner.factor
            inner = inner.outer
        return count

    def process(self, cls, args):
        if not any(a.__class__ is Tensor and a._batch is self for a in args):
            return self._outer_op(cls, args)
        # Repeated for this level: the tensors an enclosing level batches, and the ones whose
        # tangent it batches, for a jvp between (vmap(jvp(vmap)), jacfwd of a function that
        # calls vmap), whose rule would otherwise meet this level's rows with that level's.
        jvps = [level for level in _State.transforms if not level.batched]

        def outer(a):
            if a._batch in self.ancestors:
                return True
            tangents = [level.tangent(a) for level in jvps]
            return any(d is not None and d._batch in self.ancestors for d in tangents)
        return super().process(cls, [self.lift(a) if a.__class__ is Tensor and a._batch is not
                                     self and outer(a) else a for a in args])

    def _outer_op(self, cls, args):
        stack = _State.transforms
        stack.pop()  # (this level is the stack's last: see BatchLevel.process)
        try:
            out = cls.apply(*args)
        finally:
            stack.append(self)
        if out.__class__ is Tensor and out._batch is None:
            owner = next((a._batch for a in args if a.__class__ is Tensor and a._batch in
                          self.ancestors and a._batch not in stack), None)
            if owner is not None:
                out._batch = owner
        return out

    def lift(self, t):
        """t, batched by an enclosing level (or by none), as batched by this one: each row
        repeated (or t, for every row)."""
        count = self.rows_per(t._batch)
        # Each jvp's tangent of t is lifted too (recursively, so that a tangent's own
        # tangents under the jvps outside it come along: jacfwd of a jvp of a vmap), and given
        # to the copy: a jvp that saw the copy made would derive its tangent with the jvps
        # outside it off the stack, and they would lose their tangent of that tangent.
        # (A tangent batched otherwise than t - jacfwd's basis inside a vmap: the primal per
        # example, its tangents per example and direction - could not be derived at all.)
        own = _jvp_tangents(t)
        with suspended((self,) + self.ancestors + tuple(own)):
            shape = t.data.shape
            if t._batch is None:
                copy = ops.Expand.apply(ops.Reshape.apply(t, (1,) + shape), (count,) + shape)
            else:
                copy = ops.Reshape.apply(ops.Expand.apply(
                    ops.Reshape.apply(t, shape[:1] + (1,) + shape[1:]),
                    shape[:1] + (count,) + shape[1:]), (self.size,) + shape[1:])
        mark_batched(copy, self)
        for level, tangent in own.items():
            if tangent._batch is None or tangent._batch in self.ancestors:
                tangent = self.lift(tangent)  # (one batched by this level or a vmap nested
                # in it is the copy's as it is: FoldLevel.process lifts the copy to it)
            level.tangents[id(copy)] = (copy, tangent)
        return copy

    def adopt(self, t):
        """An argument of the inner vmap, its batch dim first in each example, as batched by
        this level: one batched by the enclosing level is folded, one batched further out
        lifted to it first, an unbatched one repeated for every outer example (with the
        tangents the jvps inside the enclosing level hold: promote)."""
        if t._batch not in self.ancestors:
            t = promote(t, self.outer)
        return self.fold(t if t._batch is self.outer else self.outer.lift(t))

    def fold(self, t):
        """t, batched by the enclosing level with this level's batch first in each example
        (outer, factor, ...), as batched by this one: a reshape."""
        with suspended((self,) + self.ancestors):
            copy = ops.Reshape.apply(t, (self.size,) + t.data.shape[2:])
        mark_batched(copy, self)
        return copy

    def unfold(self, t):
        """The inverse of fold: t as batched by the enclosing level, this batch first."""
        with suspended((self,) + self.ancestors):
            copy = ops.Reshape.apply(t, (self.outer.size, self.factor)
                                     + t.data.shape[1:])
        mark_batched(copy, self.outer)
        return copy


@contextlib.contextmanager
def suspended(levels):
    """Runs a block with each of `levels` that is on the stack taken off it (an ExitStack the
    block may add to)."""
    with contextlib.ExitStack() as scope:
        for level in levels:
            if level in _State.transforms:
                scope.enter_context(Suspend(level))
        yield scope


def enclosing(tensor_or_level):
    """The vmap levels enclosing a tensor's batch level (or a level): a nested vmap's; none
    for an outermost level, or an unbatched tensor."""
    level = getattr(tensor_or_level, "_batch", tensor_or_level)
    return () if level is None else level.ancestors


def _per_example(tangent, batch):
    return tangent is not None and tangent._batch is batch


def innermost_batch():
    """The innermost vmap level on the stack, if any."""
    for level in reversed(_State.transforms):
        if level.batched:
            return level
    return None
