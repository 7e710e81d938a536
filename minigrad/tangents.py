"""Forward mode: one tangent rule per operation, the jvp counterpart of ops.py's gradient rules.

A rule takes the operation's arguments, its output and one tangent per
argument (None where the argument has none; at least one is set) and returns
the output's tangent. Rules are written in Tensor operations, so they are
differentiated again by any transform outside (reverse or forward).
"""

import numpy as np

from minigrad import functional as F
from minigrad import ops
from minigrad.grad_mode import tracing
from minigrad.tensor import Tensor


def _total(out, *terms):
    """The sum of the terms that are there, broadcast to the output's shape."""
    total = None
    for term in terms:
        if term is not None:
            total = term if total is None else total + term
    return total if total.shape == out.shape else ops.Expand.apply(total, out.shape)


def _binary(da_rule, db_rule):
    def rule(args, out, tangents):
        a, b = args[:2]
        da, db = tangents[:2]
        return _total(out, None if da is None else da_rule(a, b, out, da),
                      None if db is None else db_rule(a, b, out, db))
    return rule


def _linear(fn):
    """An operation linear in its first argument: the tangent goes through it unchanged."""
    return lambda args, out, t: fn(t[0], *args[1:])


def _softmax_grad(logits, target, grad, dlogits, dgrad):
    n = logits.shape[0]
    terms = []
    if dlogits is not None:
        probs = F.Softmax.apply(logits, 1)
        terms.append(F.Softmax.backward_of(probs, dlogits, 1) * (grad / n))
    if dgrad is not None:
        terms.append(F.CrossEntropyGrad.apply(logits, target, dgrad))
    return terms


RULES = {
    ops.Add: _binary(lambda a, b, y, d: d, lambda a, b, y, d: d),
    ops.Sub: _binary(lambda a, b, y, d: d, lambda a, b, y, d: -d),
    ops.Mul: _binary(lambda a, b, y, d: d * b, lambda a, b, y, d: a * d),
    ops.Div: _binary(lambda a, b, y, d: d / b, lambda a, b, y, d: -d * y / b),
    ops.Pow: _binary(lambda a, b, y, d: ops.pow_da(d, a, b), lambda a, b, y, d: d * ops.pow_db(a, b)),
    ops.Where: lambda args, out, t: _total(out, ops.Where.apply(
        args[0], 0 if t[1] is None else t[1], 0 if t[2] is None else t[2])),
    ops.MatMul: _binary(lambda a, b, y, d: d @ b, lambda a, b, y, d: a @ d),
    ops.Alias: lambda args, out, t: t[0],
    ops.Compare: lambda args, out, t: None,  # piecewise constant: no tangent
    ops.Detach: lambda args, out, t: None,  # cut from differentiation
    ops.Argmax: lambda args, out, t: None,  # an index: no tangent
    ops.Neg: lambda args, out, t: -t[0],
    ops.Abs: lambda args, out, t: t[0] * ops.Sign.apply(args[0]),
    ops.Sign: lambda args, out, t: None,  # piecewise constant: no tangent
    ops.Conj: _linear(ops.Conj.apply),
    ops.Imag: _linear(ops.Imag.apply),
    ops.Cast: _linear(ops.Cast.apply),
    ops.Exp: lambda args, out, t: t[0] * out,
    ops.Tanh: lambda args, out, t: t[0] * (1 - out * out),
    ops.Sigmoid: lambda args, out, t: t[0] * out * (1 - out),
    ops.Log: lambda args, out, t: t[0] / args[0],
    ops.ReLU: lambda args, out, t: ops.relu_mask(t[0], out),
    ops.Sum: _linear(ops.Sum.apply),
    ops.Mean: _linear(ops.Mean.apply),
    ops.Max: lambda args, out, t: _max_tangent(*args, t[0]),
    ops.Reshape: _linear(ops.Reshape.apply),
    ops.Permute: _linear(ops.Permute.apply),
    ops.Expand: _linear(ops.Expand.apply),
    ops.SumTo: _linear(ops.SumTo.apply),
    ops.Index: _linear(ops.Index.apply),
    ops.IndexAdd: _linear(ops.IndexAdd.apply),
    F.Softmax: lambda args, out, t: F.Softmax.backward_of(out, t[0], args[1]),
    F.LogSoftmax: lambda args, out, t: t[0] - (out.exp() * t[0]).sum(args[1], keepdim=True),
    # (the target as it came: a Tensor stays one, so that vmap sees whether it is batched)
    F.CrossEntropy: lambda args, out, t: (F.CrossEntropyGrad.apply(
        args[0], args[1], Tensor._wrap(np.ones((), args[0].dtype))) * t[0]).sum(),
    F.CrossEntropyGrad: lambda args, out, t: _total(out, *_softmax_grad(
        args[0], args[1], args[2], t[0], t[2])),
    F.Pick: _linear(F.Pick.apply),
    F.PickGrad: _linear(F.PickGrad.apply),
    F.Linear: lambda args, out, t: _total(out, *[
        None if t[0] is None else F.Linear.apply(t[0], args[1], None),
        None if t[1] is None else F.Linear.apply(args[0], t[1], None),
        t[2]]),
}


def _max_tangent(a, dim=None, keepdim=False, da=None):
    """The tangent at the element(s) max routes its gradient to (ties: their average)."""
    axes = ops._axes("max", dim, a.shape)
    single = isinstance(dim, (int, np.integer)) and axes
    if tracing():  # (the mask below, an array, would be compiled in: the first call's maxima)
        return _routed(da, ops.routing(a, dim, axes), single, axes, keepdim)
    # Under vmap, a.shape is one example's and a.data the whole batch (in dim 0): the mask is
    # taken over the example's axes, one further, and is batched as a is.
    lead = a.data.ndim - a.ndim
    data_axes = tuple(range(lead, a.data.ndim)) if axes is None else tuple(i + lead for i in axes)
    _, mask = ops._max_mask(a.data, data_axes[0] if single else data_axes)
    mask = Tensor._wrap(mask)
    mask._batch = a._batch if lead else None
    return _routed(da, mask, single, axes, keepdim)


def _routed(da, mask, single, axes, keepdim):
    """The tangent at the maxima: over one dim the argmax's alone, as torch.func's; over all,
    the tie-weighted sum (an inf elsewhere makes it NaN, as torch.func's)."""
    return ops.Sum.apply(ops.route(da, mask) if single else da * mask, axes, keepdim)


def tangent(cls, args, out, tangents):
    rule = RULES.get(cls)
    if rule is None:
        raise NotImplementedError(
            "jvp: %s has no tangent rule; add one to minigrad/tangents.py's RULES, or "
            "differentiate it in reverse mode (minigrad.func.vjp / jacrev)" % cls.__name__)
    return rule(args, out, tangents)
