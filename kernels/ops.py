"""The kernels::warp_softmax operators: loading, fake kernels, autograd, Python API.

    import kernels
    y = kernels.warp_softmax(x, dim=-1)        # softmax, CPU or CUDA
    z = kernels.warp_log_softmax(x, dim=-1)    # log-softmax, the same kernels

The C++ library (torch_op.cc) defines the schemas and the CPU/CUDA kernels;
this file registers what torch.library lets Python provide: a fake kernel
(shapes for torch.compile and meta tensors), autograd through the backward
operators, which have autograd too (double backward), torch.vmap rules and
autocast (the operators run in the autocast dtype, accumulating in float32).
"""

import torch

from kernels.library import find

# The C++ schemas must exist before the registrations below refer to them.
torch.ops.load_library(find("warp_softmax.so"))
_ops = torch.ops.kernels


def _fake(x, dim=-1):
    if not x.dtype.is_floating_point:
        raise RuntimeError("warp_softmax: input must be a floating point tensor, got %s" % x.dtype)
    torch._check(-max(x.dim(), 1) <= dim < max(x.dim(), 1),
                 lambda: "warp_softmax: dim %d is out of range for %d dimensions" % (dim, x.dim()))
    return torch.empty_like(x)


def _fake_backward(grad_output, output, dim):
    torch._check(grad_output.shape == output.shape,
                 lambda: "warp_softmax_backward: grad_output and output shapes differ")
    return torch.empty_like(output)


for _name in ("warp_softmax", "warp_log_softmax"):
    torch.library.register_fake("kernels::" + _name)(_fake)
    torch.library.register_fake("kernels::%s_backward" % _name)(_fake_backward)


def _setup(ctx, inputs, output):
    ctx.dim = inputs[1] if len(inputs) > 1 else -1
    ctx.save_for_backward(output)


def _softmax_grad(ctx, grad):
    (y,) = ctx.saved_tensors
    return _ops.warp_softmax_backward(grad, y, ctx.dim), None


def _log_softmax_grad(ctx, grad):
    (y,) = ctx.saved_tensors
    return _ops.warp_log_softmax_backward(grad, y, ctx.dim), None


torch.library.register_autograd("kernels::warp_softmax", _softmax_grad, setup_context=_setup)
torch.library.register_autograd("kernels::warp_log_softmax", _log_softmax_grad, setup_context=_setup)


# The backward operators' own derivatives, for double backward. With
# dx = y * (g - sum(g * y)):   d/dg: v -> softmax_backward(v, y)
#                              d/dy: v -> v * (g - sum(g * y)) - g * sum(v * y)
# With dx = g - exp(y) * sum(g): d/dg: v -> v - sum(v * exp(y))
#                                d/dy: v -> -v * exp(y) * sum(g)
def _setup_backward(ctx, inputs, output):
    grad_output, y, dim = inputs
    ctx.dim = dim
    ctx.save_for_backward(grad_output, y)


def _softmax_backward_grad(ctx, v):
    g, y = ctx.saved_tensors
    d = ctx.dim
    dg = _ops.warp_softmax_backward(v, y, d)
    dy = v * (g - (g * y).sum(d, keepdim=True)) - g * (v * y).sum(d, keepdim=True)
    return dg, dy, None


def _log_softmax_backward_grad(ctx, v):
    g, y = ctx.saved_tensors
    d = ctx.dim
    e = y.exp()
    dg = v - (v * e).sum(d, keepdim=True)
    dy = -v * e * g.sum(d, keepdim=True)
    return dg, dy, None


torch.library.register_autograd("kernels::warp_softmax_backward", _softmax_backward_grad,
                                setup_context=_setup_backward)
torch.library.register_autograd("kernels::warp_log_softmax_backward", _log_softmax_backward_grad,
                                setup_context=_setup_backward)


# torch.vmap: the operators are already batched over every dim but `dim`; move
# the vmapped dim to the front and shift `dim` past it.
def _vmap_rule(op):
    def rule(info, in_dims, x, dim=-1):
        x_dim = in_dims[0]  # one entry per argument given; dim's is None
        if x_dim is None:
            return op(x, dim), None
        x = x.movedim(x_dim, 0)
        return op(x, dim if dim < 0 else dim + 1), 0
    return rule


def _vmap_backward_rule(op):
    def rule(info, in_dims, grad_output, output, dim):
        g_dim, y_dim = in_dims[:2]
        size = info.batch_size
        g = grad_output.movedim(g_dim, 0) if g_dim is not None else grad_output.expand(size, *grad_output.shape)
        y = output.movedim(y_dim, 0) if y_dim is not None else output.expand(size, *output.shape)
        return op(g, y, dim if dim < 0 else dim + 1), 0
    return rule


for _name in ("warp_softmax", "warp_log_softmax"):
    torch.library.register_vmap("kernels::" + _name, _vmap_rule(getattr(_ops, _name)))
    torch.library.register_vmap("kernels::%s_backward" % _name,
                                _vmap_backward_rule(getattr(_ops, _name + "_backward")))
    # torch.autocast: run in the autocast dtype (the kernels accumulate in float32).
    for _device in ("cpu", "cuda"):
        torch.library.register_autocast("kernels::" + _name, _device, torch.get_autocast_dtype(_device))


def warp_softmax(x, dim=-1):
    """softmax(x) along `dim`, as torch.softmax; differentiable, compilable."""
    return _ops.warp_softmax(x, dim)


def warp_log_softmax(x, dim=-1):
    """log_softmax(x) along `dim`, as torch.log_softmax; shares warp_softmax's kernels."""
    return _ops.warp_log_softmax(x, dim)
