"""Optimizers: SGD (with optional momentum and weight decay), updating in place."""

import numpy as np


class SGD:
    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0):
        self.params = list(params)
        if not self.params:
            raise ValueError("SGD got an empty parameter list")
        if lr < 0:  # (0 is allowed, as torch's: a schedule may start there)
            raise ValueError("SGD: learning rate must not be negative, got %r" % (lr,))
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.velocity = [None] * len(self.params)

    def step(self):
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.data
            if self.weight_decay:
                g = g + self.weight_decay * p.data
            if self.momentum:
                v = self.velocity[i]
                self.velocity[i] = v = g.copy() if v is None else np.add(self.momentum * v, g, out=v)
                g = v
            # In place, as Tensor.sub_ under no_grad would, without its per-call checks.
            p.data -= self.lr * g
            p._version[0] += 1

    def zero_grad(self):
        for p in self.params:
            p.grad = None
