"""Runs the same expression in minigrad and PyTorch (float64) and returns both results.

An expression is `fn(lib, *tensors)`, where `lib` offers the few calls whose
spelling differs between the two libraries.
"""

import numpy as np
import torch

import minigrad
from minigrad import functional as F


class MinigradLib:
    tensor = staticmethod(lambda a, requires_grad=True: minigrad.Tensor(a, requires_grad=requires_grad))
    softmax = staticmethod(F.softmax)
    log_softmax = staticmethod(F.log_softmax)
    cross_entropy = staticmethod(F.cross_entropy)
    relu = staticmethod(F.relu)
    linear = staticmethod(F.linear)
    grad = staticmethod(minigrad.grad)
    where = staticmethod(F.where)


class TorchLib:
    tensor = staticmethod(lambda a, requires_grad=True: torch.tensor(a, requires_grad=requires_grad))
    softmax = staticmethod(lambda x, dim=-1: torch.softmax(x, dim))
    log_softmax = staticmethod(lambda x, dim=-1: torch.log_softmax(x, dim))
    cross_entropy = staticmethod(lambda x, t: torch.nn.functional.cross_entropy(x, torch.as_tensor(t)))
    relu = staticmethod(torch.relu)
    linear = staticmethod(torch.nn.functional.linear)
    grad = staticmethod(torch.autograd.grad)
    where = staticmethod(torch.where)


def forward_backward(lib, fn, arrays, seed=0):
    """fn's output and the gradient of sum(output * r) for each input (r random, fixed)."""
    inputs = [lib.tensor(a) for a in arrays]
    out = fn(lib, *inputs)
    r = np.random.default_rng(seed).normal(size=np.shape(_numpy(out)))
    (out * lib.tensor(r, requires_grad=False)).sum().backward()
    return _numpy(out), [_numpy(t.grad) for t in inputs]


def _numpy(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


def assert_matches_torch(fn, arrays, rtol=1e-5, atol=1e-10):
    mg_out, mg_grads = forward_backward(MinigradLib, fn, arrays)
    th_out, th_grads = forward_backward(TorchLib, fn, arrays)
    np.testing.assert_allclose(mg_out, th_out, rtol=rtol, atol=atol, err_msg="forward")
    for i, (g, h) in enumerate(zip(mg_grads, th_grads)):
        np.testing.assert_allclose(g, h, rtol=rtol, atol=atol, err_msg="gradient of input %d" % i)
