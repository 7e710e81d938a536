"""Layers: Module (parameters() by attribute), Linear, MLP."""

import numpy as np

from minigrad import functional as F
from minigrad.tensor import Tensor


class Module:
    """Collects the Tensors that require grad, and sub-Modules, from its attributes."""

    def parameters(self):
        params = []
        for value in vars(self).values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, Module):
                    params.extend(item.parameters())
                elif isinstance(item, Tensor) and item.requires_grad:
                    params.append(item)
        return params

    def zero_grad(self):
        for p in self.parameters():
            p.grad = None

    def __call__(self, *args):
        return self.forward(*args)

    def forward(self, *args):
        raise NotImplementedError


class Linear(Module):
    """y = x @ weight.T + bias, with torch's layout (weight is (out, in)) and init."""

    def __init__(self, in_features, out_features, bias=True, dtype=np.float32, rng=None):
        rng = np.random.default_rng() if rng is None else rng
        bound = 1.0 / np.sqrt(in_features)
        self.weight = Tensor(rng.uniform(-bound, bound, (out_features, in_features)).astype(dtype),
                             requires_grad=True)
        self.bias = (Tensor(rng.uniform(-bound, bound, out_features).astype(dtype), requires_grad=True)
                     if bias else None)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class MLP(Module):
    """Linear layers of the given sizes with ReLU between them: MLP([64, 128, 10])."""

    def __init__(self, sizes, dtype=np.float32, rng=None):
        if len(sizes) < 2:
            raise ValueError("MLP needs at least an input and an output size, got %r" % (sizes,))
        rng = np.random.default_rng() if rng is None else rng
        self.layers = [Linear(a, b, dtype=dtype, rng=rng) for a, b in zip(sizes, sizes[1:])]

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)
