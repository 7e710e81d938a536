"""kernels::warp_softmax on a CUDA device: every kernel tier, dtypes, streams, opcheck, compile.

Tagged gpu: runs with --config=gpu, and skips where torch sees no CUDA device.
"""

import pytest
import torch

import kernels

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

# Row lengths that reach each tier: warp per row, cached block, online block.
SIZES = [(4096, 7), (1024, 1000), (64, 4096), (32, 32768), (4, 131072), (2, 1 << 20)]


@pytest.mark.parametrize("rows,cols", SIZES)
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_matches_torch_softmax_on_the_gpu(rows, cols, dtype, atol):
    x = (torch.randn(rows, cols, device="cuda") * 3).to(dtype)
    for ours, theirs in ((kernels.warp_softmax, torch.softmax), (kernels.warp_log_softmax, torch.log_softmax)):
        y = ours(x, -1)
        ref = theirs(x.double(), -1)
        torch.testing.assert_close(y.double(), ref, atol=atol * (20 if ours is kernels.warp_log_softmax else 1), rtol=atol)
        g = torch.randn_like(x)
        grad = torch.ops.kernels.warp_softmax_backward(g, kernels.warp_softmax(x, -1), -1)
        ref_grad = torch._softmax_backward_data(g.double(), torch.softmax(x.double(), -1), -1, torch.float64)
        torch.testing.assert_close(grad.double(), ref_grad, atol=atol * 20, rtol=atol * 10)


def test_edge_values_and_layouts_on_the_gpu():
    x = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, 2.0]], device="cuda")
    torch.testing.assert_close(kernels.warp_softmax(x, -1), torch.softmax(x, -1), equal_nan=True)
    x = torch.randn(5, 6, 7, device="cuda").transpose(0, 2)
    for dim in range(3):
        torch.testing.assert_close(kernels.warp_softmax(x, dim), torch.softmax(x, dim), atol=1e-6, rtol=1e-5)
    with pytest.raises(RuntimeError, match="CPU only"):
        kernels.warp_softmax(torch.ones(2, 3, device="cuda", dtype=torch.float64))


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


def test_opcheck_gradcheck_and_compile_on_the_gpu():
    x = torch.randn(8, 300, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.kernels.warp_softmax.default, (x, -1))
    xs = torch.randn(3, 40, device="cuda", dtype=torch.float32, requires_grad=True)
    compiled = torch.compile(lambda t: kernels.warp_softmax(t * 2, -1).sum(), fullgraph=True)
    compiled(xs).backward()
    ref = xs.detach().clone().requires_grad_()
    torch.softmax(ref * 2, -1).sum().backward()
    torch.testing.assert_close(xs.grad, ref.grad, atol=1e-6, rtol=1e-5)
