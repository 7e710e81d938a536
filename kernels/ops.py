"""The kernels::warp_softmax operators: loading, fake kernels, autograd, Python API.

    import kernels
    y = kernels.warp_softmax(x, dim=-1)        # softmax, CPU or CUDA
    z = kernels.warp_log_softmax(x, dim=-1)    # log-softmax, the same kernels
    a = kernels.warp_softmax_masked(scores, mask, scale=0.125)   # softmax(scores * 0.125 + mask)
    dx = kernels.warp_softmax_backward(dy, y, dim=-1)            # the backward, as torch._softmax_backward_data

The C++ library (torch_op.cc) defines the schemas and the CPU/CUDA kernels, and
the entry module (torch_entry.cc) calls them for the functions below without
torch.ops' boxed call. This file registers what torch.library lets Python
provide: a fake kernel (shapes for torch.compile and meta tensors), autograd in
both modes through the backward operators, which have autograd too (double
backward, hessian), so every torch.func transform works on them, torch.vmap
rules, and autocast (the operators run in the context's autocast dtype,
accumulating in float32).

    kernels.cpu_isa()              # "avx512_bf16", "avx512", "avx2" or "baseline": the CPU kernels in use
    kernels.set_cpu_isa("avx2")    # switch (WARP_SOFTMAX_ISA=avx2 does it at start-up)
"""

import torch
import torch.autograd.forward_ad as fwAD
from torch._functorch.utils import enable_single_level_autograd_function

from kernels import dims
from kernels.isa import CpuIsa
from kernels.library import find

# The C++ schemas must exist before the registrations below (and the entry
# module, which looks them up) refer to them.
torch.ops.load_library(find("warp_softmax.so"))
_ops = torch.ops.kernels
from kernels import warp_softmax_entry as _entry  # noqa: E402
_isa = CpuIsa(find("warp_softmax.so"))
cpu_isa, set_cpu_isa, cpu_isas_supported = _isa.current, _isa.set, _isa.supported


def _fake(x, dim=-1):
    if not x.dtype.is_floating_point:
        raise RuntimeError("warp_softmax: input must be a floating point tensor, got %s" % x.dtype)
    dims.normalize(dim, x.dim(), "warp_softmax")  # the eager kernel's IndexError, under compile too
    return torch.empty_like(x)


def _fake_backward(grad_output, output, dim):
    torch._check(grad_output.shape == output.shape,
                 lambda: "warp_softmax_backward: grad_output and output shapes differ")
    return torch.empty_like(output)


for _name in ("warp_softmax", "warp_log_softmax"):
    torch.library.register_fake("kernels::" + _name)(_fake)
    torch.library.register_fake("kernels::%s_backward" % _name)(_fake_backward)


def _check_mask(shape, mask_shape, mask_dtype):
    """The masked operator's checks on a mask of `mask_shape` and `mask_dtype` for an input
    of `shape` (its C++ kernel makes the same; the vmap rule, on each example's shapes)."""
    if mask_dtype != torch.bool and not mask_dtype.is_floating_point:
        raise RuntimeError("warp_softmax_masked: mask must be a bool or floating point tensor, got %s"
                           % mask_dtype)
    shape, mask_shape = list(shape), list(mask_shape)  # the result's: a mask with more dims is refused
    torch._check(len(mask_shape) <= len(shape) and all(
        m == 1 or m == s for m, s in zip(reversed(mask_shape), reversed(shape))),
        lambda: "warp_softmax_masked: mask of shape %s does not broadcast to the input's shape %s"
        % (mask_shape, shape))


@torch.library.register_fake("kernels::warp_softmax_masked")
def _fake_masked(x, mask=None, scale=1.0, dim=-1):
    _fake(x, dim)
    dtype = x.dtype
    if mask is not None:
        _check_mask(x.shape, mask.shape, mask.dtype)
        if mask.dtype.is_floating_point:
            dtype = torch.result_type(x, mask)  # as x * scale + mask has
    return torch.empty_like(x, dtype=dtype)


@torch.library.register_fake("kernels::warp_softmax_masked_")
def _fake_masked_(x, mask=None, scale=1.0, dim=-1):
    dtype = _fake_masked(x, mask, scale, dim).dtype
    torch._check(dtype == x.dtype, lambda: "warp_softmax_masked_: the result's dtype %s (the input's "
                 "and the mask's promoted) cannot be written over the input's %s" % (dtype, x.dtype))


# Autograd: one autograd.Function per operator, registered as its Autograd
# kernel (behind torch_autograd.cc's C++ kernels for CPU and CUDA tensors, which
# take calls that need no autograd, and plain eager reverse mode, out of Python).
# torch.library.register_autograd builds the same kind of kernel but with no
# forward derivative (a dual input's tangent was silently dropped) and
# a ctx-in-forward Function that torch.func.grad/jacrev refuse; these have
# setup_context, backward and jvp, so torch.autograd, forward_ad and every
# torch.func transform work on the raw torch.ops.kernels operators. Each
# forward calls the operator below the autograd keys (its CPU/CUDA kernel).
def _sum(t, dim):
    return t.sum(dim, keepdim=True)


def _scaled(t, scale):
    # A SymFloat scale (under torch.compile) is never compared: that would guard on it.
    return t if isinstance(scale, (int, float)) and scale == 1 else t * scale


# With dx(g, y) = y * (g - sum(g * y)) the softmax's backward and
# dx(g, y) = g - exp(y) * sum(g) the log-softmax's, per operator: the
# vector-Jacobian products of its tensor inputs (v: the output's gradient),
# then the Jacobian-vector products (t: the input's tangent). Each rule takes
# (v or t, the saved tensors, the operator's other arguments: dim, or scale
# and dim).
_RULES = {
    "warp_softmax": (
        [lambda v, y, d: _ops.warp_softmax_backward(v, y, d)],
        [lambda t, y, d: y * (t - _sum(t * y, d))]),
    "warp_log_softmax": (
        [lambda v, y, d: _ops.warp_log_softmax_backward(v, y, d)],
        [lambda t, y, d: t - _sum(t * y.exp(), d)]),
    "warp_softmax_backward": (  # inputs (g, y); the Jacobian in g is symmetric
        [lambda v, g, y, d: _ops.warp_softmax_backward(v, y, d),
         lambda v, g, y, d: v * (g - _sum(g * y, d)) - g * _sum(v * y, d)],
        [lambda t, g, y, d: _ops.warp_softmax_backward(t, y, d),
         lambda t, g, y, d: t * (g - _sum(g * y, d)) - y * _sum(g * t, d)]),
    "warp_log_softmax_backward": (
        [lambda v, g, y, d: v - _sum(v * y.exp(), d),
         lambda v, g, y, d: -v * y.exp() * _sum(g, d)],
        [lambda t, g, y, d: t - y.exp() * _sum(t, d),
         lambda t, g, y, d: -t * y.exp() * _sum(g, d)]),
    # softmax(z), z = x * scale + mask: dz as softmax's, then dx = scale * dz and
    # dmask = dz summed over the dims the mask was broadcast along. A bool mask
    # never requires grad.
    "warp_softmax_masked": (  # saved: y and the mask
        [lambda v, y, m, s, d: _scaled(_ops.warp_softmax_backward(v, y, d), s),
         lambda v, y, m, s, d: _ops.warp_softmax_backward(v, y, d).sum_to_size(m.shape)],
        [lambda t, y, m, s, d: y * (_scaled(t, s) - _sum(_scaled(t, s) * y, d)),
         lambda t, y, m, s, d: y * (t - _sum(t * y, d))]),
}


def _below_autograd(op, *args):
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def _refuse_nested_jvp(name):
    # torch.func gives every autograd.Function a zero outer tangent under two
    # forward-mode transforms (a plain Function computing exp does the same in
    # torch 2.13): refuse rather than return zeros.
    stack = torch._C._functorch.get_interpreter_stack() or []
    if sum(i.key() == torch._C._functorch.TransformType.Jvp for i in stack) > 1:
        raise NotImplementedError(
            "kernels::%s: forward-over-forward AD (jvp of jvp, jacfwd(jacfwd(f))) is not supported: "
            "torch.func drops the outer tangent of custom autograd functions. Use reverse mode for "
            "one of the two (torch.func.hessian, jacfwd(jacrev(f))) or torch.softmax." % name)


def _function(name):
    """The operator's autograd.Function. It saves what its rules read: the
    output y for softmax/log_softmax (and the mask for the masked one), the
    inputs (g, y) for the backward ops."""
    op = getattr(_ops, name).default
    vjps, jvps = _RULES[name]
    backward_op = name.endswith("_backward")
    defaults = tuple(a.default_value for a in op._schema.arguments)

    def full(args):  # the dispatcher drops trailing arguments left at their defaults
        return tuple(args) + defaults[len(args):]

    def forward(*args):
        # Grad modes back on (autograd.Function turned them off), as functorch's
        # own Function rule does: under nested transforms (jacrev(grad(f)),
        # hessian) the call next reaches the outer transform's autograd kernel,
        # which must record it too.
        with torch.enable_grad(), fwAD._set_fwd_grad_enabled(True):
            return _below_autograd(op, *full(args))

    def setup_context(ctx, inputs, output):
        inputs = full(inputs)
        ctx.params = inputs[len(vjps):]
        saved = inputs[:2] if backward_op else (output, *inputs[1:len(vjps)])
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)

    def backward(ctx, v):
        saved = ctx.saved_tensors
        grads = [rule(v, *saved, *ctx.params) if need else None
                 for rule, need in zip(vjps, ctx.needs_input_grad)]
        return (*grads, *(None for _ in ctx.params))

    def jvp(ctx, *tangents):
        saved = ctx.saved_tensors
        terms = [rule(t, *saved, *ctx.params) for rule, t in zip(jvps, tangents) if t is not None]
        return sum(terms[1:], terms[0])

    # Named after the operator: its nodes show as grad_fn=<warp_softmaxBackward>.
    Function = type(name, (torch.autograd.Function,), {
        f.__name__: staticmethod(f) for f in (forward, setup_context, backward, jvp)})

    def kernel(*args):
        # Outside autograd (no input requires grad, no forward-AD context) the
        # Function's bookkeeping is skipped. CPU and CUDA tensors reach this
        # kernel only under forward mode, torch.func transforms, dispatch modes
        # and tensor subclasses (torch.compile's among them), and for the backward
        # operators' recorded calls: torch_autograd.cc's C++ kernel takes the rest.
        if fwAD._current_level >= 0:
            _refuse_nested_jvp(name)
        if fwAD._current_level >= 0 or (torch.is_grad_enabled() and torch._C._any_requires_grad(*args)):
            # Function.apply would hand the call to functorch whenever a
            # torch.func transform is active, but this kernel already runs at
            # that transform's autograd level: record the node here, as a C++
            # autograd kernel would, the way functorch's own grad rule does.
            with enable_single_level_autograd_function():
                return super(torch.autograd.Function, Function).apply(*args)
        return _below_autograd(op, *args)
    return kernel


_autograd_lib = torch.library.Library("kernels", "IMPL")
for _name in _RULES:
    _autograd_lib.impl(_name, _function(_name), "Autograd")


# torch.vmap: the operators are already batched over every dim but `dim`; move
# the vmapped dim to the front and shift `dim` past it. A per-example 0-d
# input is a row of one element (softmax 1, gradient 0), as torch treats it.
def _batched(op, tensors, dim):
    """op(*tensors, dim) per example, for tensors batched in their dim 0."""
    rank = tensors[0].dim() - 1  # of each example
    dim = dims.normalize(dim, rank, "warp_softmax")
    if rank == 0:
        return op(*(t.unsqueeze(-1) for t in tensors), -1).squeeze(-1)
    return op(*tensors, dim + 1)


def _vmap_rule(op):
    def rule(info, in_dims, x, dim=-1):
        if in_dims[0] is None:  # one entry per argument given; dim's is None
            return op(x, dim), None
        return _batched(op, [x.movedim(in_dims[0], 0)], dim), 0
    return rule


def _vmap_backward_rule(op):
    def rule(info, in_dims, grad_output, output, dim):
        front = [t.movedim(d, 0) if d is not None else t.expand(info.batch_size, *t.shape)
                 for t, d in zip((grad_output, output), in_dims)]
        return _batched(op, front, dim), 0
    return rule


@torch.library.register_vmap("kernels::warp_softmax_masked")
def _vmap_masked(info, in_dims, x, mask=None, scale=1.0, dim=-1):
    x_dim, mask_dim = (tuple(in_dims) + (None, None))[:2]
    rank = x.dim() - (x_dim is not None)  # of each example
    dim = dims.normalize(dim, rank, "warp_softmax_masked")
    x = x.movedim(x_dim, 0) if x_dim is not None else x.expand(info.batch_size, *x.shape)
    if mask is not None:
        mask = mask.movedim(mask_dim, 0) if mask_dim is not None else mask
        # Each example's shapes, as eager checks them: an unbatched mask with more dims than an
        # example would otherwise broadcast against the batch dim (mask[b] masking x[b]).
        _check_mask(x.shape[1:], mask.shape[mask_dim is not None:], mask.dtype)
        if mask_dim is not None:  # align each example's mask to x's example rank
            mask = mask.reshape(mask.shape[:1] + (1,) * max(0, rank - mask.dim() + 1) + mask.shape[1:])
    if rank == 0:  # rows of one element, as torch treats a 0-d input
        return _ops.warp_softmax_masked(x.unsqueeze(-1), mask if mask is None else mask.reshape(
            mask.shape + (1,) * (mask_dim is not None)), scale, -1).squeeze(-1), 0
    return _ops.warp_softmax_masked(x, mask, scale, dim + 1), 0


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


# Each function below is one Python frame into the entry module (torch_entry.cc), which
# calls the operator unboxed where it can and torch.ops.kernels.<name> otherwise; torch.ops'
# boxed call costs about 0.8 us more (at 64x64 a third of the backward's time). While Dynamo
# traces they call torch.ops directly, which it must see (it cannot look into a C function).
_compiling = torch.compiler.is_dynamo_compiling  # 35 ns a call, is_compiling 50-90


def _int_dim(dim, op):
    """dim, refused if a bool, as torch.softmax and the entry module refuse one (torch.ops would
    take it as 0 or 1): where the calls go to torch.ops (masked, and while Dynamo traces)."""
    if isinstance(dim, bool):
        raise TypeError("%s(): argument 'dim' must be int, not bool" % op)
    return dim


def warp_softmax(x, dim=-1):
    """softmax(x) along `dim`, as torch.softmax; differentiable (also forward mode), compilable."""
    if _compiling():
        return _ops.warp_softmax(x, _int_dim(dim, "warp_softmax"))
    return _entry.warp_softmax(x, dim)


def warp_log_softmax(x, dim=-1):
    """log_softmax(x) along `dim`, as torch.log_softmax; shares warp_softmax's kernels."""
    if _compiling():
        return _ops.warp_log_softmax(x, _int_dim(dim, "warp_log_softmax"))
    return _entry.warp_log_softmax(x, dim)


def warp_softmax_backward(grad_output, output, dim=-1):
    """The input's gradient of warp_softmax from the output's (grad_output) and
    its output, as torch._softmax_backward_data; differentiable (double backward)."""
    if _compiling():
        return _ops.warp_softmax_backward(grad_output, output, _int_dim(dim, "warp_softmax_backward"))
    return _entry.warp_softmax_backward(grad_output, output, dim)


def warp_log_softmax_backward(grad_output, output, dim=-1):
    """warp_log_softmax's backward, as torch._log_softmax_backward_data."""
    if _compiling():
        return _ops.warp_log_softmax_backward(grad_output, output,
                                              _int_dim(dim, "warp_log_softmax_backward"))
    return _entry.warp_log_softmax_backward(grad_output, output, dim)


def warp_softmax_masked_(x, mask=None, scale=1.0, dim=-1):
    """warp_softmax_masked written over x, which it returns: for scores nothing else
    reads (attention's), it saves allocating the result. No autograd (x's old values
    are gone); the dtype must stay x's."""
    _ops.warp_softmax_masked_(x, mask, scale, _int_dim(dim, "warp_softmax_masked_"))
    return x


def warp_softmax_masked(x, mask=None, scale=1.0, dim=-1):
    """softmax(x * scale + mask) along `dim` in one pass over x (attention's
    masked, scaled scores), as torch computes it but with the sum formed in
    float32 (float64 for float64). `mask` broadcasts to x: floating (added; the
    result takes torch's promoted dtype) or bool (True keeps an element, False
    makes it -inf, as F.scaled_dot_product_attention's attn_mask).
    Differentiable in x and a floating mask (also forward mode), compilable.
    On CUDA tensors the forward is two passes: x * scale + mask, rounded to the
    result's format as in torch, then the softmax kernel (the CUDA kernels take no
    mask)."""
    return _ops.warp_softmax_masked(x, mask, scale, _int_dim(dim, "warp_softmax_masked"))
