"""kernels::warp_softmax built with CUDA: its registration, and on a CUDA device every kernel
tier, dtypes, masked rows, streams, opcheck, compile.

Two targets run this file. torch_op_cuda_test (tag cuda, under --config=cuda, no GPU needed)
runs the `cuda_build` tests: the operator has a CUDA kernel and torch was built with the CUDA
the hermetic toolkit is. torch_op_gpu_test (tag gpu, --config=gpu) runs all of them; the
device tests skip, saying why, where torch sees no CUDA device.
"""

import importlib.util
import os

import pytest
import torch

import kernels
from kernels.tests.torch_cases import recorded_in_cpp

on_the_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_cuda_build_registers_a_cuda_kernel_for_each_operator():
    kernels.warp_softmax(torch.ones(2, 3))  # loads the library
    for op in ("warp_softmax", "warp_softmax_backward", "warp_log_softmax", "warp_log_softmax_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key("kernels::" + op, "CUDA"), op
        assert torch._C._dispatch_has_kernel_for_dispatch_key("kernels::" + op, "CPU"), op


def test_cuda_build_torch_is_built_with_the_toolkits_cuda():
    # WARP_SOFTMAX_CUDA_TOOLKIT: nvcc's release (@local_cuda's CUDA_VERSION), set by the target.
    assert torch.version.cuda is not None, "torch %s is a CPU-only build" % torch.__version__
    assert torch.version.cuda == os.environ["WARP_SOFTMAX_CUDA_TOOLKIT"]


# Row lengths that reach each tier: warp per row, the row cached in one block, in a
# cluster of 3 and of 8 blocks (16 for the float32 backward at 131072), online block
# (float32; 16-bit rows split differently).
# 6144 and 12288 float32 columns fill exactly 48 KiB of shared memory (backward's two rows,
# forward's one), where the kernels' own static shared memory tips them past the default limit.
SIZES = [(4096, 7), (1024, 1000), (16, 6144), (8, 12288), (64, 4096), (32, 32768), (4, 131072),
         (2, 1 << 20)]


@on_the_gpu
@pytest.mark.parametrize("rows,cols", SIZES)
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_matches_torch_softmax_on_the_gpu(rows, cols, dtype, atol):
    x = (torch.randn(rows, cols, device="cuda") * 3).to(dtype)
    for ours, theirs in ((kernels.warp_softmax, torch.softmax), (kernels.warp_log_softmax, torch.log_softmax)):
        y = ours(x, -1)
        ref = theirs(x.double(), -1)
        torch.testing.assert_close(y.double(), ref, atol=atol * (20 if ours is kernels.warp_log_softmax else 1), rtol=atol)
    g = torch.randn_like(x)
    for log in (False, True):
        y = (torch.log_softmax if log else torch.softmax)(x.double(), -1).to(dtype)
        grad = (kernels.warp_log_softmax_backward if log else kernels.warp_softmax_backward)(g, y, -1)
        assert_backward_close(grad, g, y, log, atol)


def assert_backward_close(grad, g, y, log, atol):
    """grad (a backward kernel's result for dy = g and output y) against the float64 one.
    dx = y * (g - S), S = sum(g * y), or dx = g - exp(y) * S, S = sum(g): besides the
    format's own rounding (atol * 20, atol * 10 relative), S is a float32 sum of `cols`
    terms, good to about eps * sqrt(cols) * the terms' 2-norm (rounding errors add up
    like a random walk), and each dx carries that error times y or exp(y). On a 2 x 2^20
    float32 row the sum's error alone moved a dx of 16 by 1.9e-4 on an H200."""
    g, y = g.double(), y.double()
    ref = (torch._log_softmax_backward_data if log else torch._softmax_backward_data)(g, y, -1, torch.float64)
    terms = g if log else g * y
    weight = y.exp() if log else y
    sum_error = torch.finfo(torch.float32).eps * terms.shape[-1] ** 0.5 * terms.norm(dim=-1, keepdim=True)
    allowed = atol * 20 + atol * 10 * ref.abs() + weight.abs() * sum_error
    error = (grad.double() - ref).abs()
    bad = ~(error <= allowed)
    assert not bad.any(), "%d of %d gradients off: worst %s, allowed %s" % (
        bad.sum(), bad.numel(), error[bad].max().item(), allowed[bad][error[bad].argmax()].item())


@on_the_gpu
@pytest.mark.parametrize("cols", [64, 1024, 4096, 32768, 131072])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_not_16_byte_aligned_on_the_gpu(cols, dtype):
    # A view one element into its storage: rows whose length is a multiple of
    # the kernels' vector access but that start off its alignment take the
    # element-wise loads (every tier), and give the same values.
    rows = 8
    x = (torch.randn(rows * cols + 1, device="cuda") * 3).to(dtype)[1:].view(rows, cols)
    g = torch.randn(rows * cols + 1, device="cuda").to(dtype)[1:].view(rows, cols)
    tol = dict(atol=1e-6, rtol=1e-6) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    y = kernels.warp_softmax(x, -1)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), **tol)
    ref = torch._softmax_backward_data(g.double(), y.double(), -1, torch.float64)
    torch.testing.assert_close(kernels.warp_softmax_backward(g, y, -1).double(), ref,
                               atol=tol["atol"] * 20, rtol=tol["rtol"] * 10)


@on_the_gpu
def test_edge_values_and_layouts_on_the_gpu():
    x = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, 2.0]], device="cuda")
    torch.testing.assert_close(kernels.warp_softmax(x, -1), torch.softmax(x, -1), equal_nan=True)
    x = torch.randn(5, 6, 7, device="cuda").transpose(0, 2)
    for dim in range(3):
        torch.testing.assert_close(kernels.warp_softmax(x, dim), torch.softmax(x, dim), atol=1e-6, rtol=1e-5)
    with pytest.raises(RuntimeError, match="CPU only"):
        kernels.warp_softmax(torch.ones(2, 3, device="cuda", dtype=torch.float64))


@on_the_gpu
def test_runs_on_the_current_stream_and_under_cuda_graphs():
    x = torch.randn(256, 4096, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = kernels.warp_softmax(x, -1)
    stream.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, -1), atol=1e-6, rtol=1e-5)
    static = torch.randn(64, 2048, device="cuda")
    kernels.warp_softmax(static)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kernels.warp_softmax(static)
    static.copy_(torch.randn(64, 2048, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.softmax(static, -1), atol=1e-6, rtol=1e-5)


@on_the_gpu
def test_opcheck_gradcheck_and_compile_on_the_gpu():
    x = torch.randn(8, 300, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.kernels.warp_softmax.default, (x, -1))
    if importlib.util.find_spec("triton") is None:
        pytest.skip("torch.compile for CUDA needs triton, which the workspace's environment "
                    "leaves out (it segfaults beside TensorFlow; tools/update_lock.sh)")
    xs = torch.randn(3, 40, device="cuda", dtype=torch.float32, requires_grad=True)
    compiled = torch.compile(lambda t: kernels.warp_softmax(t * 2, -1).sum(), fullgraph=True)
    compiled(xs).backward()
    ref = xs.detach().clone().requires_grad_()
    torch.softmax(ref * 2, -1).sum().backward()
    torch.testing.assert_close(xs.grad, ref.grad, atol=1e-6, rtol=1e-5)


@on_the_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_training_records_the_cpp_nodes_on_the_gpu(dtype):
    """AutogradCUDA's kernels (torch_autograd.cc) record the C++ node in plain eager training,
    the masked form's too, and its gradients are torch's (second order too in float32: a
    bfloat16 dx squared loses too much to compare)."""
    x = (torch.randn(4, 6, 300, device="cuda") * 3).to(dtype)
    mask = torch.where(torch.rand(4, 1, 300, device="cuda") < 0.3, float("-inf"), 0.0).to(dtype)
    cases = ((kernels.warp_softmax, lambda t: torch.softmax(t, -1)),
             (kernels.warp_log_softmax, lambda t: torch.log_softmax(t, -1)),
             (lambda t: torch.ops.kernels.warp_softmax_masked(t, mask, 0.5), lambda t: torch.softmax(t * 0.5 + mask, -1)))
    g = torch.randn_like(x)
    for ours, theirs in cases:
        grads = []
        for f in (ours, theirs):
            leaf = x.detach().double().requires_grad_() if f is theirs else x.detach().requires_grad_()
            out = f(leaf)
            assert recorded_in_cpp(out) == (f is ours)
            (dx,) = torch.autograd.grad(out, leaf, g.to(out.dtype), create_graph=True)
            if dtype == torch.float32:  # double backward, through the backward operator's autograd
                grads.append([dx, *torch.autograd.grad((dx * dx).sum(), leaf)])
            else:
                grads.append([dx])
        tol = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 0.02, "rtol": 0.02}
        torch.testing.assert_close([t.double() for t in grads[0]], [t.double() for t in grads[1]], **tol)


# The sweep gpu_check.sh reports: every power-of-two row length from 32 to 262144 and a ragged
# one beside each, in the three formats, with masked rows (long -inf runs, fully masked rows).
SWEEP_COLS = [c for p in range(5, 19) for c in (1 << p, (1 << p) + 3)]


@on_the_gpu
@pytest.mark.parametrize("cols", SWEEP_COLS)
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_sweep_with_masked_rows_on_the_gpu(cols, dtype, atol):
    rows = max(4, min(64, (1 << 22) // cols))
    g = torch.Generator(device="cuda").manual_seed(cols)
    x = torch.randn(rows, cols, device="cuda", generator=g) * 3
    x[0, : cols - 1] = float("-inf")  # one finite value at the end of a long -inf run
    x[1, cols // 3 :] = float("-inf")  # the tail masked
    x[2] = float("-inf")  # fully masked: torch gives NaN
    x = x.to(dtype)
    for ours, theirs, tol in ((kernels.warp_softmax, torch.softmax, atol),
                              (kernels.warp_log_softmax, torch.log_softmax, atol * 20)):
        torch.testing.assert_close(ours(x, -1).double(), theirs(x.double(), -1), atol=tol, rtol=atol,
                                   equal_nan=True)
