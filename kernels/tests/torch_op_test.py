"""kernels::warp_softmax as a PyTorch operator on the CPU: values, gradients, opcheck, compile."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernels

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


SHAPES = [(1,), (7,), (5, 3), (4, 1024), (3, 4097), (2, 32768), (2, 3, 5, 7), (64, 17)]


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_torch_in_float32_over_shapes_and_dims(name, shape):
    x = inputs(shape)
    for dim in range(-len(shape), len(shape)):
        y = OPS[name][0](x, dim)
        assert y.shape == x.shape and y.dtype == torch.float32
        torch.testing.assert_close(y.double(), reference(name, x, dim), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(OPS))
def test_any_strides(name):
    base = inputs((6, 10, 12))
    for x in (base.transpose(0, 2), base[:, ::3, 1::2], base.permute(1, 2, 0)[..., :4],
              torch.as_strided(base, (5, 7), (3, 17))):
        assert not x.is_contiguous()
        for dim in range(x.dim()):
            y = OPS[name][0](x, dim)
            torch.testing.assert_close(y.double(), reference(name, x, dim), atol=1e-6, rtol=1e-6)
            assert y.stride() == torch.empty_like(x).stride()  # laid out like the input


@pytest.mark.parametrize("dtype,atol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2), (torch.float64, 1e-12)])
@pytest.mark.parametrize("name", sorted(OPS))
def test_other_dtypes(name, dtype, atol):
    x = inputs((8, 300), dtype=dtype, scale=2.0)
    y = OPS[name][0](x, -1)
    assert y.dtype == dtype
    torch.testing.assert_close(y.double(), reference(name, x, -1), atol=atol * (10 if "log" in name else 1), rtol=atol)


def test_edge_values_match_torch():
    x = torch.tensor([[float("-inf")] * 4,                    # all -inf: NaN, as torch
                      [0.0, float("-inf"), 1.0, float("-inf")],  # masked entries: exactly 0
                      [1e30, -1e30, 3e4, 0.0],                 # large magnitudes, no overflow
                      [float("nan"), 1.0, 2.0, 3.0]])
    for name, (ours, theirs) in OPS.items():
        torch.testing.assert_close(ours(x, -1), theirs(x, -1), equal_nan=True, atol=1e-6, rtol=0)
    assert kernels.warp_softmax(x, -1)[1, 1].item() == 0.0


def test_empty_and_zero_dim_tensors():
    for shape in [(0,), (0, 5), (5, 0), (2, 0, 3)]:
        x = torch.empty(shape)
        assert kernels.warp_softmax(x, -1).shape == shape
    torch.testing.assert_close(kernels.warp_softmax(torch.tensor(3.0), 0), torch.softmax(torch.tensor(3.0), 0))


def test_bad_input_is_a_clear_error_never_a_crash():
    with pytest.raises(RuntimeError, match="must be a floating point tensor"):
        kernels.warp_softmax(torch.arange(6).reshape(2, 3))
    with pytest.raises((IndexError, RuntimeError), match="out of range"):
        kernels.warp_softmax(torch.ones(2, 3), 2)
    with pytest.raises((NotImplementedError, RuntimeError), match="SparseCPU"):
        kernels.warp_softmax(torch.ones(2, 3).to_sparse())
    with pytest.raises(RuntimeError, match="does not match"):
        torch.ops.kernels.warp_softmax_backward(torch.ones(2, 3), torch.ones(3, 2), -1)


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradcheck_and_gradgradcheck_in_float64(name):
    op = OPS[name][0]
    for shape, dim in [((3, 5), -1), ((4, 3, 2), 1)]:
        x = inputs(shape, dtype=torch.float64, scale=1.0).requires_grad_()
        assert torch.autograd.gradcheck(lambda t: op(t, dim), (x,))
        assert torch.autograd.gradgradcheck(lambda t: op(t, dim), (x,))


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradient_matches_torch(name):
    x = inputs((6, 50)).requires_grad_()
    xt = x.detach().clone().requires_grad_()
    w = inputs((6, 50), seed=1)
    (OPS[name][0](x, -1) * w).sum().backward()
    (OPS[name][1](xt, -1) * w).sum().backward()
    torch.testing.assert_close(x.grad, xt.grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("op", ["warp_softmax", "warp_log_softmax"])
def test_opcheck_passes_all_default_tests(op):
    samples = [
        (inputs((4, 8)), -1),
        (inputs((3, 5, 7)), 1),
        (inputs((4, 8), dtype=torch.float64).requires_grad_(), 0),
        (inputs((2, 3, 6)).transpose(0, 2).requires_grad_(), -1),
    ]
    for x, dim in samples:
        torch.library.opcheck(getattr(torch.ops.kernels, op).default, (x, dim))


@pytest.mark.parametrize("op", ["warp_softmax_backward", "warp_log_softmax_backward"])
def test_opcheck_on_the_backward_ops(op):
    y = torch.softmax(inputs((4, 8), dtype=torch.float64), -1).requires_grad_()
    g = inputs((4, 8), dtype=torch.float64, seed=2).requires_grad_()
    torch.library.opcheck(getattr(torch.ops.kernels, op).default, (g, y, -1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_without_graph_breaks(dynamic):
    def model(x, w):
        return kernels.warp_softmax(x @ w, -1).sum(-1) + kernels.warp_log_softmax(x, 0).mean()

    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)  # inductor
    for rows in (4, 9):  # a second shape exercises dynamic shapes
        x, w = inputs((rows, 6)), inputs((6, 6), seed=3).requires_grad_()
        torch.testing.assert_close(compiled(x, w), model(x, w))
        (grad,) = torch.autograd.grad(compiled(x, w).sum(), w)  # autograd through the compiled graph
        torch.testing.assert_close(grad, torch.autograd.grad(model(x, w).sum(), w)[0])
    explanation = torch._dynamo.explain(model)(inputs((4, 6)), inputs((6, 6)))
    assert explanation.graph_break_count == 0


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_property_matches_torch_softmax(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=40))
    values = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-80, 80, width=32)))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = torch.from_numpy(values)
    for name, (ours, _) in OPS.items():
        torch.testing.assert_close(ours(x, dim).double(), reference(name, x, dim), atol=1e-6, rtol=1e-5)


def test_vmap_matches_torch():
    x = inputs((5, 3, 7))
    for in_dims, dim in [(0, -1), (1, 0), (2, 1)]:
        for name, (ours, theirs) in OPS.items():
            got = torch.vmap(lambda t: ours(t, dim), in_dims=in_dims)(x)
            want = torch.vmap(lambda t: theirs(t, dim), in_dims=in_dims)(x)
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    # The backward operator too, with one argument batched and one shared.
    y = torch.softmax(inputs((3, 7)), -1)
    g = inputs((5, 3, 7), seed=5)
    got = torch.vmap(lambda gi: torch.ops.kernels.warp_softmax_backward(gi, y, -1))(g)
    want = torch.stack([torch._softmax_backward_data(gi, y, -1, torch.float32) for gi in g])
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_autocast_runs_in_bfloat16_with_float32_accumulation():
    x = inputs((4, 2000))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = kernels.warp_softmax(x, -1)
    assert y.dtype == torch.bfloat16
    # Row sums stay 1 to bfloat16 precision: the sum is accumulated in float32.
    torch.testing.assert_close(y.float().sum(-1), torch.ones(4), atol=2e-2, rtol=0)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=2e-3, rtol=2e-2)
