"""The kernels::warp_softmax operators: loading, fake kernels, autograd, Python API.

    import kernels
    y = kernels.warp_softmax(x, dim=-1)        # softmax, CPU or CUDA
    z = kernels.warp_log_softmax(x, dim=-1)    # log-softmax, the same kernels

The C++ library (torch_op.cc) defines the schemas and the CPU/CUDA kernels;
this file registers what torch.library lets Python provide: a fake kernel
(shapes for torch.compile and meta tensors), autograd through the backward
operators, which have autograd too (double backward), torch.vmap rules,
autocast (the operators run in the context's autocast dtype, accumulating in
float32) and forward-mode AD for warp_softmax / warp_log_softmax
(torch.func.jvp, jacfwd, hessian; the raw torch.ops.kernels operators drop
tangents: torch.library has no forward-derivative registration).

    kernels.cpu_isa()              # "avx512_bf16", "avx512", "avx2" or "baseline": the CPU kernels in use
    kernels.set_cpu_isa("avx2")    # switch (WARP_SOFTMAX_ISA=avx2 does it at start-up)
"""

import torch
import torch.autograd.forward_ad as fwAD

from kernels.isa import CpuIsa
from kernels.library import find

# The C++ schemas must exist before the registrations below refer to them.
torch.ops.load_library(find("warp_softmax.so"))
_ops = torch.ops.kernels
_isa = CpuIsa(find("warp_softmax.so"))
cpu_isa, set_cpu_isa, cpu_isas_supported = _isa.current, _isa.set, _isa.supported


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
# the vmapped dim to the front and shift `dim` past it. A per-example 0-d
# input is a row of one element (softmax 1), as torch.softmax treats it.
def _vmap_rule(op):
    def rule(info, in_dims, x, dim=-1):
        x_dim = in_dims[0]  # one entry per argument given; dim's is None
        if x_dim is None:
            return op(x, dim), None
        x = x.movedim(x_dim, 0)
        rank = x.dim() - 1  # of each example
        if not -max(rank, 1) <= dim < max(rank, 1):
            raise IndexError("warp_softmax: dim %d is out of range for %d dimensions" % (dim, rank))
        if rank == 0:
            return op(x.unsqueeze(-1), -1).squeeze(-1), 0
        return op(x, dim % rank + 1), 0
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


# torch.autocast: run in the dtype of the autocast context in effect at the
# call (torch.library.register_autocast fixes one dtype when registered), with
# the kernels accumulating in float32. float64 and other devices' tensors stay.
def _autocast_kernel(op, device):
    key = getattr(torch._C.DispatchKey, "Autocast" + device.upper())

    def kernel(keyset, x, dim=-1):
        dtype = torch.get_autocast_dtype(device)
        if x.is_floating_point() and x.device.type == device and x.dtype != torch.float64:
            x = x.to(dtype)
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return op(x, dim)
    return kernel


_autocast_lib = torch.library.Library("kernels", "IMPL")
for _name in ("warp_softmax", "warp_log_softmax"):
    for _device in ("cpu", "cuda"):
        _autocast_lib.impl(_name, _autocast_kernel(getattr(_ops, _name).default, _device),
                           "Autocast" + _device.upper(), with_keyset=True)


# Forward-mode AD: torch.library has no forward-derivative registration for
# custom operators (their tangents would silently drop), so inside a
# forward-AD context (torch.func.jvp, jacfwd, hessian, forward_ad.dual_level)
# the Python API goes through this autograd.Function, whose jvp is the
# softmax's: y * (t - sum(t * y)), or t - sum(t * exp(y)) for log-softmax.
# Outside one it calls the operator directly (what torch.compile traces). The
# raw torch.ops.kernels operators have no forward-mode AD.
def _op(log):
    return _ops.warp_log_softmax if log else _ops.warp_softmax


class _ForwardAD(torch.autograd.Function):
    generate_vmap_rule = True  # jacfwd is vmap over jvp; the ops have vmap rules

    @staticmethod
    def forward(x, dim, log):
        return _op(log)(x, dim)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.dim, ctx.log = inputs[1], inputs[2]
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad):
        # In torch ops, not the backward operators: inside a forward-AD context
        # (hessian = jacfwd(jacrev(f))) tangents must flow through the backward too.
        (y,) = ctx.saved_tensors
        if ctx.log:
            return grad - y.exp() * grad.sum(ctx.dim, keepdim=True), None, None
        return y * (grad - (grad * y).sum(ctx.dim, keepdim=True)), None, None

    @staticmethod
    def jvp(ctx, tangent, _dim, _log):
        (y,) = ctx.saved_tensors
        if ctx.log:
            return tangent - (tangent * y.exp()).sum(ctx.dim, keepdim=True)
        return y * (tangent - (tangent * y).sum(ctx.dim, keepdim=True))


def _apply(x, dim, log):
    if fwAD._current_level >= 0:  # a forward-AD context is open (torch.func.jvp opens one)
        return _ForwardAD.apply(x, dim, log)
    return _op(log)(x, dim)


def warp_softmax(x, dim=-1):
    """softmax(x) along `dim`, as torch.softmax; differentiable (also forward mode), compilable."""
    return _apply(x, dim, False)


def warp_log_softmax(x, dim=-1):
    """log_softmax(x) along `dim`, as torch.log_softmax; shares warp_softmax's kernels."""
    return _apply(x, dim, True)
