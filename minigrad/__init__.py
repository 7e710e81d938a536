"""minigrad: a reverse-mode autodiff engine on NumPy, with PyTorch's semantics.

    import minigrad
    from minigrad import functional as F

    x = minigrad.Tensor([[1.0, 2.0]], requires_grad=True)
    loss = F.log_softmax(x @ x.T).sum()
    loss.backward()
    x.grad

Tensor (tensor.py) records Functions (function.py, gradient rules in ops.py
and functional.py); autograd.py runs them backwards. minigrad.func has torch.func's
transforms (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap).
"""

from minigrad.tensor import Tensor, from_numpy
from minigrad.function import Function
from minigrad.grad_mode import enable_grad, is_grad_enabled, no_grad
from minigrad.autograd import grad
from minigrad.gradcheck import GradcheckError, gradcheck
from minigrad.graphviz import draw_graph
from minigrad import func, functional, nn, optim
from minigrad.functional import where

__all__ = ["Function", "GradcheckError", "Tensor", "draw_graph", "enable_grad", "from_numpy",
           "func", "functional", "grad", "gradcheck", "is_grad_enabled", "nn", "no_grad", "optim",
           "where"]
