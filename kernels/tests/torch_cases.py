"""What the torch operator's tests share: the dtypes, the operators beside torch's, inputs."""

import torch

import kernels

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64}

OPS = {
    "softmax": (kernels.warp_softmax, torch.softmax),
    "log_softmax": (kernels.warp_log_softmax, torch.log_softmax),
}


def reference(name, x, dim):
    """torch's own result, computed in float64 (the error then is ours, not torch's)."""
    return OPS[name][1](x.double(), dim)


def inputs(shape, dtype=torch.float32, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# The Python API and the raw operators (one Autograd kernel serves both).
RAW = {"softmax": lambda t, dim=-1: torch.ops.kernels.warp_softmax(t, dim),
       "log_softmax": lambda t, dim=-1: torch.ops.kernels.warp_log_softmax(t, dim)}
BACKWARD = {"softmax": (torch.ops.kernels.warp_softmax_backward, torch._softmax_backward_data),
            "log_softmax": (torch.ops.kernels.warp_log_softmax_backward, torch._log_softmax_backward_data)}


def recorded_in_cpp(out):
    """Whether torch_autograd.cc's C++ node recorded `out` (not the Python Function, nor torch)."""
    return out.grad_fn.name().startswith("warp_") and not isinstance(
        out.grad_fn, torch.autograd.function.BackwardCFunction)
