"""Optimizers: SGD (with optional momentum and weight decay), updating in place."""

import numpy as np

from minigrad.grad_mode import tracing
from minigrad.tensor import Tensor


def _parameters(params):
    """The tensors to optimize, checked as torch's optimizers check them (a single Tensor
    passed where a list belongs was iterated by rows: tensors of its own whose .grad stays
    None, so step() trained nothing)."""
    if isinstance(params, Tensor):
        raise TypeError("params must be an iterable of Tensors, got a Tensor; pass [tensor]")
    tensors = []
    for p in params:
        if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str):
            p = p[1]  # (name, tensor), from named_parameters()
        if isinstance(p, dict):
            raise TypeError("parameter groups (dicts) are not supported; pass the tensors")
        if not isinstance(p, Tensor):
            raise TypeError("an optimizer optimizes Tensors, but one of the params is %s"
                            % type(p).__name__)
        if p.grad_fn is not None:
            raise ValueError("can't optimize a non-leaf Tensor (one computed by an operation)")
        tensors.append(p)
    return tensors


class SGD:
    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        self.params = _parameters(params)
        if not self.params:
            raise ValueError("SGD got an empty parameter list")
        # (0 is allowed, as torch's: a schedule may start there; NaN is refused, where torch
        # takes it and trains to NaN)
        for name, value in (("learning rate", lr), ("momentum", momentum),
                            ("weight_decay", weight_decay)):
            if not value >= 0:
                raise ValueError("SGD: %s must not be negative or NaN, got %r" % (name, value))
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.velocity = [None] * len(self.params)

    def step(self):
        if tracing():  # (its writes into .data would happen once, at the trace)
            raise RuntimeError("hlo.jit: an optimizer step inside a jitted function is not "
                               "compiled; step outside it, or return the new parameters "
                               "(p - lr * g) and pass them back (donate_argnums)")
        for i, p in enumerate(self.params):
            if p._grad is None:
                continue
            g = p._grad.data
            if self.weight_decay:
                g = g + self.weight_decay * p.data
            if self.momentum:
                v = self.velocity[i]
                # (np.array: a 0-d sum above is a NumPy scalar, which out= cannot write into)
                self.velocity[i] = v = np.array(g) if v is None else np.add(self.momentum * v, g, out=v)
                g = v
            # In place, as Tensor.sub_ under no_grad would, without its per-call checks.
            p.data -= self.lr * g
            p._version[0] += 1

    def zero_grad(self):
        for p in self.params:
            p._grad = None
