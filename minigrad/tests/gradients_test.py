"""One gradient check per operation: against finite differences and against PyTorch (float64)."""

import numpy as np
import pytest
import torch

import minigrad
from minigrad.tests.torch_compare import MinigradLib, TorchLib, assert_matches_torch

rng = np.random.default_rng(0)


def arr(*shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, shape)


# name -> (expression over a library and tensors, input arrays)
CASES = {
    "add_broadcast": (lambda L, a, b: a + b, [arr(3, 4), arr(4)]),
    "sub_broadcast": (lambda L, a, b: a - b, [arr(2, 1, 4), arr(3, 1)]),
    "mul_broadcast_and_scalar": (lambda L, a, b: 3.0 * a * b, [arr(3, 4), arr(3, 1)]),
    "div": (lambda L, a, b: a / b, [arr(3, 4), arr(3, 4, low=0.5, high=2.0)]),
    "pow_scalar_exponent": (lambda L, a: a ** 3, [arr(5)]),
    "pow_tensor_exponent": (lambda L, a, b: a ** b, [arr(4, low=0.5, high=2.0), arr(4)]),
    "neg": (lambda L, a: -a, [arr(2, 3)]),
    "matmul_2d": (lambda L, a, b: a @ b, [arr(3, 4), arr(4, 5)]),
    "matmul_batched_broadcast": (lambda L, a, b: a @ b, [arr(2, 3, 4), arr(4, 2)]),
    "matmul_vector": (lambda L, a, b: a @ b, [arr(4), arr(2, 4, 3)]),
    "sum_dim": (lambda L, a: a.sum(dim=1), [arr(3, 4, 2)]),
    "sum_keepdim_all": (lambda L, a: a.sum() + a.sum(dim=0, keepdim=True), [arr(3, 4)]),
    "mean": (lambda L, a: a.mean(dim=-1) * a.mean(), [arr(3, 4)]),
    "max_dim": (lambda L, a: L.max_dim(a, 1), [arr(4, 5)]),
    "max_all": (lambda L, a: a.max(), [arr(4, 5)]),
    "exp": (lambda L, a: a.exp(), [arr(3, 4)]),
    "log": (lambda L, a: a.log(), [arr(3, 4, low=0.1, high=3.0)]),
    "relu": (lambda L, a: L.relu(a), [arr(4, 5)]),
    "tanh": (lambda L, a: a.tanh(), [arr(3, 4)]),
    "sigmoid": (lambda L, a: a.sigmoid(), [arr(3, 4, low=-8, high=8)]),
    "reshape": (lambda L, a: a.reshape(4, 3) * a.reshape(-1)[:12].reshape(4, 3), [arr(2, 6)]),
    "transpose": (lambda L, a: a.transpose(0, 2) * a, [arr(2, 3, 2)]),
    "T": (lambda L, a: a.T @ a, [arr(3, 2)]),
    "index_slice": (lambda L, a: a[1:, ::2], [arr(3, 5)]),
    "index_repeated": (lambda L, a: a[np.array([0, 2, 0, 0])], [arr(3, 4)]),
    "softmax": (lambda L, a: L.softmax(a, dim=0), [arr(4, 3)]),
    "log_softmax": (lambda L, a: L.log_softmax(a, dim=-1), [arr(3, 5)]),
    "cross_entropy": (lambda L, a: L.cross_entropy(a, np.array([1, 0, 4])), [arr(3, 5)]),
    "linear": (lambda L, x, w, b: L.linear(x, w, b), [arr(3, 4), arr(5, 4), arr(5)]),
    # A shared subexpression: d reaches the output along two paths.
    "diamond": (lambda L, a, b: (lambda d: d.exp() * d + d.tanh())(a * b + a), [arr(3, 4), arr(3, 4)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
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
