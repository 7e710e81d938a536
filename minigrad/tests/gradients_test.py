"""One gradient check per operation: against finite differences and against PyTorch (float64)."""

import numpy as np
import pytest
import torch

import minigrad
from minigrad.tests.op_table import CASES, arr
from minigrad.tests.torch_compare import MinigradLib, TorchLib, assert_matches_torch


# detach's gradient leaves out what finite differences see, by definition.
@pytest.mark.parametrize("name", sorted(name for name in CASES if name != "detach"))
def test_gradients_match_finite_differences(name):
    fn, arrays = CASES[name]
    inputs = [minigrad.Tensor(a, requires_grad=True) for a in arrays]
    assert minigrad.gradcheck(lambda *xs: fn(MinigradLib, *xs), inputs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_gradients_match_torch(name):
    fn, arrays = CASES[name]
    assert_matches_torch(fn, arrays)


def test_gradcheck_catches_a_wrong_rule():
    class BadSquare(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return minigrad.Tensor(x.data ** 2)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x  # should be 2 * x

    with pytest.raises(minigrad.GradcheckError, match="Jacobian mismatch"):
        minigrad.gradcheck(BadSquare.apply, minigrad.Tensor(arr(3), requires_grad=True))


def test_gradcheck_refuses_float32():
    with pytest.raises(ValueError, match="float64"):
        minigrad.gradcheck(lambda x: x * 2, minigrad.Tensor(arr(3).astype(np.float32), requires_grad=True))


def test_gradients_accumulate_across_two_backward_calls():
    a = arr(3, 4)
    x = minigrad.Tensor(a, requires_grad=True)
    xt = torch.tensor(a, requires_grad=True)
    for _ in range(2):
        (x * x).sum().backward()
        (xt * xt).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.data, 4 * a, rtol=1e-12)


SECOND_ORDER = {
    "tanh_product": (lambda L, x, y: (x * y).tanh().sum(), [arr(3), arr(3)]),
    "log_softmax_matmul": (lambda L, x, w: L.log_softmax(x @ w, dim=-1)[:, 0].sum(), [arr(2, 3), arr(3, 4)]),
    "cross_entropy_mlp": (lambda L, x, w: L.cross_entropy(L.relu(x) @ w, np.array([0, 2])),
                          [arr(2, 3), arr(3, 4)]),
    "sigmoid_pow_div": (lambda L, x, y: ((x.sigmoid() ** 2) / (1 + y * y)).mean(), [arr(4), arr(4)]),
    # piecewise linear: the gradient still depends on x (torch's threshold_backward), and the
    # second derivative is zero, not an error
    "relu_alone": (lambda L, x: (L.relu(x) * 3.0).sum(), [arr(2, 3)]),
}


def _double_backward(lib, fn, arrays, seed=1):
    """Gradient of <grad f(inputs), v> with respect to each input: Hessian-vector products."""
    inputs = [lib.tensor(a) for a in arrays]
    grads = lib.grad(fn(lib, *inputs), inputs, create_graph=True)
    rs = np.random.default_rng(seed)
    total = sum((g * lib.tensor(rs.normal(size=g.shape), requires_grad=False)).sum() for g in grads)
    return [h.detach().numpy() for h in lib.grad(total, inputs)]


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_order_gradients_match_torch_double_backward(name):
    fn, arrays = SECOND_ORDER[name]
    mine = _double_backward(MinigradLib, fn, arrays)
    theirs = _double_backward(TorchLib, fn, arrays)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t, rtol=1e-5, atol=1e-10)


def test_third_derivative_of_a_scalar_function():
    x = minigrad.Tensor(0.7, requires_grad=True)
    y = x.tanh()
    (d1,) = minigrad.grad(y, x, create_graph=True)
    (d2,) = minigrad.grad(d1, x, create_graph=True)
    (d3,) = minigrad.grad(d2, x)
    t = np.tanh(0.7)
    assert d1.item() == pytest.approx(1 - t**2)
    assert d2.item() == pytest.approx(-2 * t * (1 - t**2))
    assert d3.item() == pytest.approx(-2 * (1 - t**2) ** 2 + 4 * t**2 * (1 - t**2))


# A loss whose upstream gradient depends on the inputs: cross_entropy's double-backward rule
# for that gradient (CrossEntropyGrad's d/dgrad) counts here, and a sign error in it shows.
@pytest.mark.parametrize("outer", ["square", "exp"])
def test_cross_entropy_double_backward_through_its_incoming_gradient_matches_torch(outer):
    def fn(L, x, w):
        ce = L.cross_entropy(x @ w, np.array([0, 2, 1]))
        return ce * ce if outer == "square" else (ce * 0.5).exp()
    arrays = [arr(3, 4), arr(4, 3)]
    mine = _double_backward(MinigradLib, fn, arrays)
    theirs = _double_backward(TorchLib, fn, arrays)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t, rtol=1e-10, atol=1e-12)


def test_log_softmax_backward_matches_torch_where_it_is_not_constant():
    """sum(log_softmax(x)) has gradient 1 - n * softmax(x): a wrong rule cannot hide in it."""
    a = arr(4, 6)
    assert_matches_torch(lambda L, x: L.log_softmax(x, dim=-1).sum(), [a], rtol=1e-12)
    assert_matches_torch(lambda L, x: (L.log_softmax(x, dim=0) * x).sum(), [a], rtol=1e-12)


def test_where_gradients_reach_both_branches_like_torch_where():
    cond = arr(3, 4) > 0
    mine = [minigrad.Tensor(a, requires_grad=True) for a in (arr(3, 4), arr(4))]
    theirs = [torch.tensor(t.data, requires_grad=True) for t in mine]
    r = arr(3, 4)
    (minigrad.ops.Where.apply(cond, *mine) * minigrad.Tensor(r)).sum().backward()
    (torch.where(torch.from_numpy(cond), *theirs) * torch.from_numpy(r)).sum().backward()
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m.grad.data, t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "float16"])
@pytest.mark.parametrize("batch", [0, 1, 64])
def test_linear_gradients_match_torch_in_each_dtype_and_batch(dtype, batch):
    # A plain backward takes linear's rule on arrays, where a BLAS dtype's bias gradient is a
    # product with a vector of ones (others: ndarray.sum); an empty batch gives zeros.
    rng = np.random.default_rng(batch)
    arrays = [rng.standard_normal(shape).astype(dtype) for shape in ((batch, 6), (5, 6), (5,))]
    grad = rng.standard_normal((batch, 5)).astype(dtype)
    mine = [minigrad.Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    minigrad.functional.linear(*mine).backward(minigrad.Tensor(grad))
    torch.nn.functional.linear(*theirs).backward(torch.tensor(grad))
    tol = {"float16": 2e-2, "float32": 1e-5, "complex64": 1e-5}.get(dtype, 1e-12)
    for m, t in zip(mine, theirs):
        assert m.grad.dtype == t.grad.numpy().dtype
        np.testing.assert_allclose(m.grad.data, t.grad.numpy(), rtol=tol, atol=tol)
