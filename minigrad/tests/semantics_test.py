"""PyTorch-exact semantics where minigrad used to differ: each test is named for the point."""

import itertools
import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import minigrad
from minigrad import functional as F
from minigrad import func, hlo, optim
from minigrad.tensor import from_numpy
from minigrad.tests.torch_compare import assert_matches_torch

torch.set_default_dtype(torch.float64)  # minigrad's default float dtype is float64


def test_tensor_copies_its_ndarray_like_torch_tensor():
    w0 = np.ones(3)
    w = minigrad.Tensor(w0, requires_grad=True)
    (w * 2.0).sum().backward()
    optim.SGD([w], lr=0.1).step()
    np.testing.assert_array_equal(w0, np.ones(3))  # the caller's array is untouched
    np.testing.assert_allclose(w.data, 0.8)
    t0 = np.ones(3)
    torch.tensor(t0).add_(1)
    np.testing.assert_array_equal(t0, 1.0)


def test_from_numpy_shares_memory_like_torch_from_numpy():
    a = np.zeros(3)
    t = from_numpy(a)
    with minigrad.no_grad():
        t.add_(1.0)
    np.testing.assert_array_equal(a, 1.0)
    b = np.zeros(3)
    torch.from_numpy(b).add_(1.0)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="expects an np.ndarray"):
        from_numpy([1.0, 2.0])


@pytest.mark.parametrize("alias", ["detach", "reshape", "transpose"])
def test_in_place_change_through_an_alias_is_caught_like_torch_version_counter(alias):
    def run(lib_tensor, no_grad):
        x = lib_tensor(np.array([[1.0, 2.0], [3.0, 4.0]]))
        y = (x * x).sum()
        with no_grad():
            view = {"detach": lambda: x.detach(), "reshape": lambda: x.detach().reshape(4),
                    "transpose": lambda: x.detach().transpose(0, 1)}[alias]()
            view[0] = 10.0
        y.backward()

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        run(lambda a: torch.tensor(a, requires_grad=True), torch.no_grad)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        run(lambda a: minigrad.Tensor(a, requires_grad=True), minigrad.no_grad)


# Each op saves only the operands its gradient reads, as torch does: an in-place change to
# another (here x, whose gradient needs only the constant) leaves the gradient right.
SAVES_ONLY_WHAT_IT_READS = {
    "x * 2": lambda L, x, c: x * 2.0, "x / 2": lambda L, x, c: x / 2.0,
    "x * c": lambda L, x, c: x * c, "x / c": lambda L, x, c: x / c, "x + c": lambda L, x, c: x + c,
    "x @ c": lambda L, x, c: x @ c, "linear": lambda L, x, c: L.linear(c, x.reshape(1, 2)),
    "c / x": lambda L, x, c: c / x, "x * x": lambda L, x, c: x * x, "x ** 2": lambda L, x, c: x ** 2,
}


@pytest.mark.parametrize("name", sorted(SAVES_ONLY_WHAT_IT_READS))
def test_in_place_change_to_an_operand_the_gradient_does_not_read_is_no_error_like_torch(name):
    fn = SAVES_ONLY_WHAT_IT_READS[name]
    results = []
    for lib, T, L, no_grad in ((minigrad, minigrad.Tensor, F, minigrad.no_grad),
                               (torch, torch.tensor, torch.nn.functional, torch.no_grad)):
        x, c = T([1.0, 2.0], requires_grad=True), T([3.0, 4.0])
        y = fn(L, x, c).sum()
        with no_grad():
            x.detach().add_(1.0)
        try:
            y.backward()
            results.append(x.grad.numpy().tolist())
        except RuntimeError as e:
            assert "in-place" in str(e) or "inplace" in str(e)
            results.append("modified in place")
    assert results[0] == results[1]


def test_gradcheck_catches_a_nan_backward():
    class NanGrad(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            return minigrad.Tensor(x.data * 2)

        @staticmethod
        def backward(ctx, grad):
            return grad * float("nan")

    x = minigrad.Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(minigrad.GradcheckError, match="analytical nan"):
        minigrad.gradcheck(NanGrad.apply, x)


def test_gradcheck_catches_an_output_cut_from_the_graph():
    x = minigrad.Tensor(np.array([0.5, 1.5]), requires_grad=True)
    with pytest.raises(minigrad.GradcheckError, match="analytical 0, numerical 1"):
        minigrad.gradcheck(lambda t: minigrad.Tensor(t.data ** 2), x)


def test_gradcheck_names_the_input_whose_gradient_is_wrong():
    class WrongSecond(minigrad.Function):
        @staticmethod
        def forward(ctx, a, b):
            return minigrad.Tensor(a.data * b.data)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.inputs
            return grad * b, grad * 2.0

    a, b = (minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True) for _ in range(2))
    with pytest.raises(minigrad.GradcheckError, match="with respect to input 1"):
        minigrad.gradcheck(WrongSecond.apply, (a, b))


def test_gradcheck_passes_outputs_that_view_the_input_as_torch_does():
    """An output viewing the input moved with each perturbation: finite differences of 0, and
    correct functions (reshape, an index, the identity) failed."""
    for f in (lambda t: t.reshape(-1), lambda t: t[0], lambda t: t, lambda t: (t.reshape(-1), t.sum())):
        x = minigrad.Tensor(np.ones((2, 2)), requires_grad=True)
        assert minigrad.gradcheck(f, x)
        assert torch.autograd.gradcheck(f, torch.ones(2, 2, dtype=torch.float64, requires_grad=True))


def test_gradcheck_checks_a_complex_outputs_imaginary_part():
    """Only real directions were tried and the differences' imaginary parts were dropped: a
    backward of zeros for x * 1j passed."""
    class ZeroBackward(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            return minigrad.Tensor(x.data * 1j)

        @staticmethod
        def backward(ctx, grad):
            return minigrad.Tensor(np.zeros(grad.shape))

    x = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.raises(minigrad.GradcheckError, match=r"output 0 \(its imaginary part\)"):
        minigrad.gradcheck(ZeroBackward.apply, x)
    assert minigrad.gradcheck(lambda t: t * (1 + 2j) + (t * t).exp() * 1j, x)
    with pytest.raises(ValueError, match="input 0 is complex"):
        minigrad.gradcheck(lambda z: z * z, minigrad.Tensor([1 + 1j], requires_grad=True))


def test_gradcheck_checks_the_outputs_that_require_grad_and_can_return_false():
    """As torch's: an output that does not require grad beside one that does is not checked
    (it failed); with none that does, the function fails; raise_exception=False returns
    False; an expanded or read-only input is a clear error, not a false mismatch."""
    x = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    assert minigrad.gradcheck(lambda t: (t * t, (t * 3).detach(), t.max(0)[1]), x)
    assert minigrad.gradcheck(lambda t: (t * 3).detach(), x, raise_exception=False) is False
    with pytest.raises(minigrad.GradcheckError):
        minigrad.gradcheck(lambda t: (t * 3).detach(), x)
    expanded = minigrad.tensor.from_numpy(np.broadcast_to(np.ones(1), (3,)))
    expanded.requires_grad = True
    with pytest.raises(ValueError, match="stride 0"):
        minigrad.gradcheck(lambda t: t * t, expanded)
    frozen = np.ones(3)
    frozen.flags.writeable = False
    read_only = minigrad.tensor.from_numpy(frozen)
    read_only.requires_grad = True
    with pytest.raises(ValueError, match="read-only"):
        minigrad.gradcheck(lambda t: t * t, read_only)


def test_gradcheck_works_on_a_non_contiguous_input():
    base = np.random.default_rng(0).normal(size=(4, 6))
    x = minigrad.tensor.from_numpy(base[:, ::2].T)  # a strided view, not a copy
    x.requires_grad = True
    assert not x.data.flags.c_contiguous
    assert minigrad.gradcheck(lambda t: (t * t).tanh() @ t.T, x)
    assert torch.autograd.gradcheck(lambda t: (t * t).tanh() @ t.T,
                                    torch.from_numpy(base[:, ::2].T).requires_grad_())


def test_integer_logits_promote_to_float_like_torch():
    loss = F.cross_entropy(minigrad.Tensor([[1, 2, 3]]), [0])
    expected = torch.nn.functional.cross_entropy(torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([0]))
    assert loss.dtype == np.float64
    assert loss.item() == pytest.approx(expected.item(), rel=1e-12)  # 2.4076, not 2
    np.testing.assert_allclose(F.softmax(minigrad.Tensor([1, 2, 3])).data,
                               torch.softmax(torch.tensor([1.0, 2.0, 3.0]), -1))
    np.testing.assert_allclose(F.log_softmax(minigrad.Tensor([[1, 2], [3, 5]]), 0).data,
                               torch.log_softmax(torch.tensor([[1.0, 2.0], [3.0, 5.0]]), 0))


def _grad_of(fn, a, lib):
    if lib == "torch":
        x = torch.tensor(a, requires_grad=True)
        fn(x).backward()
        return x.grad.numpy()
    x = minigrad.Tensor(a, requires_grad=True)
    fn(x).backward()
    return x.grad.data


def test_cross_entropy_of_an_empty_batch_is_nan_with_an_empty_gradient_like_torch():
    x = minigrad.Tensor(np.zeros((0, 3)), requires_grad=True)
    tx = torch.zeros((0, 3), requires_grad=True)
    loss, tloss = F.cross_entropy(x, np.zeros(0, int)), torch.nn.functional.cross_entropy(
        tx, torch.zeros(0, dtype=torch.long))
    assert np.isnan(loss.item()) and np.isnan(tloss.item())
    loss.backward()
    tloss.backward()
    assert x.grad.shape == tuple(tx.grad.shape) == (0, 3)


def test_pow_zero_gradient_at_zero_is_zero_like_torch():
    a = np.array([0.0, 2.0, -1.0])
    for fn in (lambda x: (x ** 0).sum(), lambda x: (x ** 0.0).sum()):
        np.testing.assert_array_equal(_grad_of(fn, a, "mg"), _grad_of(fn, a, "torch"))
    # A tensor exponent: d/da is 0 where b == 0, d/db is 0 where a == 0 and b >= 0.
    base, expo = np.array([0.0, 0.0, 2.0, 0.0]), np.array([0.0, 2.0, 0.0, 1.0])
    grads = []
    for lib in (minigrad.Tensor, torch.tensor):
        x, y = lib(base, requires_grad=True), lib(expo, requires_grad=True)
        (x ** y).sum().backward()
        grads.append([np.asarray(x.grad.data if lib is minigrad.Tensor else x.grad),
                      np.asarray(y.grad.data if lib is minigrad.Tensor else y.grad)])
    for m, t in zip(*grads):
        np.testing.assert_array_equal(m, t)


def test_max_with_nan_routes_the_gradient_to_the_nan_like_torch():
    a = np.array([[1.0, np.nan, 3.0], [np.nan, 0.0, np.nan]])
    np.testing.assert_array_equal(_grad_of(lambda x: x.max(), a, "mg"),
                                  _grad_of(lambda x: x.max(), a, "torch"))
    for dim in (0, 1):
        np.testing.assert_array_equal(_grad_of(lambda x: x.max(dim=dim).values.sum(), a, "mg"),
                                      _grad_of(lambda x: x.max(dim=dim).values.sum(), a, "torch"))


def test_relu_gradient_and_tangent_with_nan_and_inf_are_torchs():
    # torch's threshold_backward: 0 where x <= 0 whatever the incoming NaN or inf, and the
    # incoming value where x is NaN. First order, under create_graph (recorded), and forward mode.
    x = np.array([-1.0, 0.0, 2.0, np.nan, -3.0, 1.0])
    g = np.array([np.nan, np.inf, np.nan, 3.0, -np.inf, 2.0])
    xt = torch.tensor(x, requires_grad=True)
    (want,) = torch.autograd.grad(torch.relu(xt), xt, torch.tensor(g))
    for create_graph in (False, True):
        xm = minigrad.Tensor(x, requires_grad=True)
        (got,) = minigrad.grad(F.relu(xm), xm, minigrad.Tensor(g), create_graph=create_graph)
        np.testing.assert_array_equal(got.data, want.numpy())
    _, tangent = minigrad.func.jvp(F.relu, (minigrad.Tensor(x),), (minigrad.Tensor(g),))
    _, want_tangent = torch.func.jvp(torch.relu, (torch.tensor(x),), (torch.tensor(g),))
    np.testing.assert_array_equal(tangent.data, want_tangent.numpy())
    # float32 and float16 too (the first-order rule works on their bits), and a broadcast grad.
    for dtype in (np.float32, np.float16):
        xm = minigrad.Tensor(x.astype(dtype), requires_grad=True)
        (got,) = minigrad.grad(F.relu(xm), xm, minigrad.Tensor(g.astype(dtype)))
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.data, want.numpy().astype(dtype))
    xm = minigrad.Tensor(x, requires_grad=True)
    F.relu(xm).sum().backward()
    np.testing.assert_array_equal(xm.grad.data, [0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    with pytest.raises(TypeError, match="relu: complex tensors are not ordered"):
        F.relu(minigrad.Tensor(np.array([1 + 1j])))


def test_max_with_ties_splits_the_gradient_like_torch():
    a = np.array([[3.0, 1.0, 3.0], [0.0, 3.0, 2.0]])
    mine = _grad_of(lambda x: x.max(), a, "mg")
    np.testing.assert_array_equal(mine, _grad_of(lambda x: x.max(), a, "torch"))
    np.testing.assert_allclose(mine, [[1 / 3, 0, 1 / 3], [0, 1 / 3, 0]])
    # Over one dim the gradient goes to the index max returns (the first), as in torch.
    np.testing.assert_array_equal(_grad_of(lambda x: x.max(dim=1).values.sum(), a, "mg"),
                                  _grad_of(lambda x: x.max(dim=1).values.sum(), a, "torch"))


COMPLEX_CASES = {
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "pow": lambda x, y: x ** y,
    "matmul": lambda x, y: x @ y,
    "exp_tanh_sigmoid": lambda x, y: x.exp() * y.tanh() + x.sigmoid(),
    "log": lambda x, y: (x * y).log(),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_CASES))
def test_complex_vector_jacobian_products_are_conjugated_like_torch(name):
    fn = COMPLEX_CASES[name]
    rng = np.random.default_rng(1)
    a, b = (rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3)) for _ in range(2))
    g = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    results = []
    for lib, get in ((minigrad.Tensor, lambda t: t.data), (torch.tensor, lambda t: t.numpy())):
        x, y = lib(a, requires_grad=True), lib(b, requires_grad=True)
        out = fn(x, y)
        out.backward(lib(g))
        results.append((get(out.detach()), get(x.grad), get(y.grad)))
    for m, t in zip(*results):
        np.testing.assert_allclose(m, t, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("complex_ones", ["all", "input", "weight"])
@pytest.mark.parametrize("create_graph", [False, True], ids=["on arrays", "recorded"])
def test_complex_linear_gradients_are_conjugated_like_torch(create_graph, complex_ones):
    # linear's rule runs on arrays in a plain backward and on Tensors under create_graph.
    # torch's linear takes one dtype: a real operand among complex ones is cast first (.to),
    # and its gradient is the real part of the complex one (the cast's backward).
    rng = np.random.default_rng(3)
    real = {"all": (), "input": ("w", "b"), "weight": ("x", "b")}[complex_ones]
    shapes = {"x": (4, 3), "w": (2, 3), "b": (2,)}
    values = {k: rng.normal(size=shape) + (0 if k in real else 1j * rng.normal(size=shape))
              for k, shape in shapes.items()}
    g = rng.normal(size=(4, 2)) + 1j * rng.normal(size=(4, 2))
    mine = [minigrad.Tensor(values[k], requires_grad=True) for k in "xwb"]
    theirs = [torch.tensor(values[k], requires_grad=True) for k in "xwb"]
    if real:
        for lib, f, args in (("minigrad", F.linear, mine), ("torch", torch.nn.functional.linear, theirs)):
            with pytest.raises(RuntimeError, match="dtype"):
                f(*args)
    F.linear(*[t.to(np.complex128) for t in mine]).backward(minigrad.Tensor(g), create_graph=create_graph)
    torch.nn.functional.linear(*[t.to(torch.complex128) for t in theirs]).backward(torch.tensor(g))
    for k, m, t in zip("xwb", mine, theirs):
        assert m.grad.dtype == values[k].dtype and str(t.grad.dtype) == "torch." + str(values[k].dtype)
        np.testing.assert_allclose(m.grad.data, t.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name,constant", [
    (name, constant) for name in ("mul", "div", "pow", "matmul")
    for constant in ("array", "complex64 scalar", "python complex")
    if name != "matmul" or constant == "array"])  # matmul needs dimensions on both sides
def test_complex_constants_are_conjugated_in_gradients_like_torch(name, constant):
    # A plain array or number on one side (not a Tensor) still enters the gradient conjugated.
    fn = COMPLEX_CASES[name]
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    b = {"array": rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3)),
         "complex64 scalar": np.complex64(0.5 - 1.5j), "python complex": 0.5 - 1.5j}[constant]
    g = rng.normal(size=(3, 3)) + 1j * rng.normal(size=(3, 3))
    x, tx = minigrad.Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    fn(x, b).backward(minigrad.Tensor(g))
    fn(tx, torch.tensor(b) if np.ndim(b) else complex(b)).backward(torch.tensor(g))
    np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_complex_loss_needs_an_explicit_gradient_like_torch():
    x = minigrad.Tensor(np.array([1 + 1j]), requires_grad=True)
    with pytest.raises(RuntimeError, match="real scalar outputs"):
        (x * x).sum().backward()


def test_softmax_of_a_0d_tensor_is_one_like_torch():
    x = minigrad.Tensor(3.0, requires_grad=True)
    y = F.softmax(x)
    assert y.shape == () and y.item() == torch.softmax(torch.tensor(3.0), -1).item() == 1.0
    assert F.log_softmax(x, 0).item() == 0.0
    (g,) = minigrad.grad(y, x)
    assert g.item() == 0.0
    # 0-d reductions take dim 0 or -1, as in torch.
    assert x.sum(0).item() == 3.0 and x.max(-1, keepdim=True).values.shape == ()
    with pytest.raises(IndexError, match=r"softmax: dim 1 is out of range for a tensor of shape \(\)"):
        F.softmax(x, 1)


def test_sum_and_mean_over_an_empty_dim_tuple_reduce_everything_like_torch():
    a = np.arange(6.0).reshape(2, 3)
    for name in ("sum", "mean"):
        for keepdim in (False, True):
            x, tx = minigrad.Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
            y, ty = getattr(x, name)((), keepdim), getattr(tx, name)((), keepdim)
            assert y.shape == tuple(ty.shape)
            np.testing.assert_allclose(y.data, ty.detach().numpy())
            y.sum().backward()
            ty.sum().backward()
            np.testing.assert_allclose(x.grad.data, tx.grad.numpy())
    both = minigrad.func.vmap(lambda e: e.sum(()))(minigrad.Tensor(a))  # per example, as torch.vmap
    np.testing.assert_allclose(both.data, torch.vmap(lambda e: e.sum(()))(torch.tensor(a)).numpy())


def test_basic_indexing_gives_a_view_and_advanced_indexing_a_copy_like_torch():
    results = []
    for lib, tensor in ((minigrad, minigrad.Tensor), (torch, torch.tensor)):
        x = tensor(np.zeros((2, 3)))
        x[0].add_(1.0)  # a row
        x[1, 2].add_(5.0)  # one element: a 0-d view
        x[:, 1].mul_(3.0)  # a strided column
        x[[0, 1], [0, 0]].add_(100.0)  # advanced: a copy, x unchanged
        results.append(np.array(x.data if lib is minigrad else x.numpy()))
    np.testing.assert_array_equal(results[0], results[1])
    w = minigrad.Tensor(np.ones(3), requires_grad=True)
    y = (w * w).sum()  # saves w
    with minigrad.no_grad():
        w[0].zero_()  # through the view: w's version moves
    assert w.data[0] == 0
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


def test_pow_with_an_array_exponent_has_torchs_gradient():
    base = np.array([0.0, 2.0, 3.0, 0.5])
    exponent = np.array([0.0, 2.0, 0.0, -1.5])  # b == 0 entries: gradient 0, even at a == 0
    x, tx = minigrad.Tensor(base, requires_grad=True), torch.tensor(base, requires_grad=True)
    (x ** exponent).sum().backward()
    (tx ** torch.tensor(exponent)).sum().backward()
    np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), rtol=1e-12)


def test_integer_to_negative_power_is_a_clear_error_like_torch():
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.tensor([2, 3]) ** -1
    with pytest.raises(ValueError, match=r"pow: integers to negative integer powers are not "
                                         r"allowed \(base int64 of shape \(2,\).*x \* 1.0"):
        minigrad.Tensor([2, 3]) ** -1
    np.testing.assert_allclose((minigrad.Tensor([2, 3]) * 1.0 ** -1).data, [2, 3])
    np.testing.assert_allclose(((minigrad.Tensor([2, 3]) * 1.0) ** -1).data, [0.5, 1 / 3])
    # Only negative powers: x ** 0 of integers is ones, as in torch.
    for exponent in (0, np.array([0, 1])):
        ours = minigrad.Tensor([2, 3]) ** exponent
        theirs = torch.tensor([2, 3]) ** torch.tensor(exponent)
        np.testing.assert_array_equal(ours.data, theirs.numpy())
        assert ours.dtype == np.int64


def test_matmul_of_shapes_that_do_not_align_is_an_error_like_torch():
    # Shapes the outer-product fast path ((n, 1) @ (1, m), a broadcast multiply) must not take:
    # these would broadcast there and give a silently wrong product.
    for a, b in [((2, 1), (2, 3)), ((3, 1), (2, 3)), ((4, 2, 1), (4, 2, 3)), ((3, 2), (1, 2)),
                 ((1, 2), (1, 2))]:
        with pytest.raises(RuntimeError):
            torch.ones(a) @ torch.ones(b)
        with pytest.raises(ValueError, match="matmul: shapes .* are not aligned"):
            minigrad.Tensor(np.ones(a)) @ minigrad.Tensor(np.ones(b))


@pytest.mark.parametrize("x_shape, y_base, y_shape", [
    ((3, 3, 4, 5), (5, 6), (3, 5, 6)),  # 4-D @ a weight repeated over 3 (stride 0)
    ((3, 2, 3), (1, 4), (3, 4)),        # 3-D @ a 2-D matrix of one repeated row
    ((1, 2, 3), (3, 4), (5, 3, 4)),     # a batch of 1 broadcast against 5 repeats
    ((5, 2, 3), (3, 4), (5, 3, 4)),     # the case the stride-0 fast path is for
    ((1, 2, 3), (3, 4), (1, 3, 4)),     # and its batch of one
])
def test_matmul_of_broadcast_views_equals_torchs(x_shape, y_base, y_shape):
    # vmap and expand give operands whose repeats share memory (stride 0); matmul's fast path
    # for them must take only the shapes it is exact for.
    rng = np.random.default_rng(0)
    x, base = rng.normal(size=x_shape), rng.normal(size=y_base)
    y = np.broadcast_to(base, y_shape)
    assert y.strides[0] == 0
    ours = (minigrad.Tensor(x) @ from_numpy(y)).data
    np.testing.assert_allclose(ours, (torch.tensor(x) @ torch.tensor(y)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("x_shape, y_shape", [
    ((2, 1, 0), (2, 0, 1)), ((3, 1), (0, 1, 4)), ((2, 0, 1), (1, 3)), ((0, 3), (3,)),
    ((0,), (0,)), ((2, 3, 0), (0, 4)),
])
def test_matmul_of_empty_operands_and_its_gradients_like_torch(x_shape, y_shape):
    # An empty stack has a stride of 0, which the fast path for repeated weights took for one.
    assert_matches_torch(lambda L, x, y: x @ y, [np.ones(x_shape), np.ones(y_shape)])


def _zeros_and_negatives(shape, seed):
    """Every other entry +0., the rest negative: each zero product of it with a negative
    number is -0. as a product, 0. once summed into a zero (torch's bmm)."""
    a = -np.random.default_rng(seed).uniform(0.5, 2.0, shape)
    a.reshape(-1)[::2] = 0.0
    return a


def _vmap_grad(lib, argnum, shapes, in_dims):
    """Per-example gradients of sum((x @ y) * w) for x or y (argnum), by lib's vmap(grad);
    `shapes`: x's, y's and one example's product's (w's)."""
    f = lambda x, y, w: ((x @ y) * w).sum()
    x, y = (_zeros_and_negatives(s, k) for k, s in enumerate(shapes[:2]))
    w = -np.random.default_rng(2).uniform(0.5, 2.0, shapes[2])
    tensor, transforms = (minigrad.Tensor, minigrad.func) if lib is minigrad else (torch.tensor,
                                                                                 torch.func)
    out = transforms.vmap(transforms.grad(f, argnums=argnum), in_dims=in_dims + (None,))(
        tensor(x), tensor(y), tensor(w))
    return out.data if lib is minigrad else out.numpy()


def _eager(lib, what, shapes):
    x, y = (_zeros_and_negatives(s, k) for k, s in enumerate(shapes))
    tensor = minigrad.Tensor if lib is minigrad else torch.tensor
    x, y = tensor(x, requires_grad=True), tensor(y, requires_grad=True)
    out = x @ y
    if what == "product":
        return out.data if lib is minigrad else out.detach().numpy()
    out.backward(tensor(-np.ones(out.shape)))
    grad = (x if what == "grad x" else y).grad
    return grad.data if lib is minigrad else grad.numpy()


@pytest.mark.parametrize("case, run", [
    ("2-D outer product (torch's mm: -0.)", lambda lib: _eager(lib, "product", [(6, 1), (1, 5)])),
    ("batched, folded into mm (-0.)", lambda lib: _eager(lib, "product", [(3, 6, 1), (1, 5)])),
    ("batched outer products (bmm: 0.)",
     lambda lib: _eager(lib, "product", [(3, 6, 1), (3, 1, 5)])),
    ("dot's gradient (a product: -0.)", lambda lib: _eager(lib, "grad y", [(4,), (4,)])),
    ("mv's matrix gradient (ger: -0.)", lambda lib: _eager(lib, "grad x", [(6, 4), (4,)])),
    ("vm's matrix gradient (mm: -0.)", lambda lib: _eager(lib, "grad y", [(4,), (4, 5)])),
    ("a vector's partner stack's gradient (folded into mm: -0.)",
     lambda lib: _eager(lib, "grad y", [(4,), (2, 4, 3)])),
    ("a stack's gradient against a stack of columns (bmm: 0.)",
     lambda lib: _eager(lib, "grad x", [(2, 3, 4), (2, 4, 1)])),
    ("per-example weight gradients (bmm: 0.)",
     lambda lib: _vmap_grad(lib, 1, [(3, 1, 4), (4, 5), (1, 5)], (0, None))),
    ("per-example gradients of a dot (a product: -0.)",
     lambda lib: _vmap_grad(lib, 1, [(3, 4), (4,), ()], (0, None))),
    ("per-example matrix gradient of mv (ger: -0.)",
     lambda lib: _vmap_grad(lib, 0, [(3, 6, 4), (4,), (6,)], (0, None))),
])
def test_matmul_products_and_gradients_keep_torchs_signs_of_zero(case, run):
    """A zero product of +0. and a negative number is -0. where torch multiplies (mm, dot's and
    mv's backward) and 0. where it sums products into zeros (bmm, which torch.func's vmap of a
    matrix product runs). The per-example weight gradients of vmap(grad) had -0. where
    torch.func has 0. (162,065 of the digits MLP's 277,808 zeros)."""
    ours, theirs = run(minigrad), run(torch)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    zero = theirs == 0
    assert zero.any() and np.array_equal(ours == 0, zero)
    np.testing.assert_array_equal(np.signbit(ours[zero]), np.signbit(theirs[zero]))


@pytest.mark.parametrize("classes", [3, 200, 300])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                   np.int64])
def test_cross_entropy_takes_class_indices_of_every_integer_dtype(dtype, classes):
    """...and refuses those out of range, eagerly and through hlo.jit. Read as unsigned (one
    reduction checks both bounds), a negative index must still be out of range: int8's -1
    reads as 255, below 300 classes (it picked class 255 once)."""
    logits = np.random.default_rng(0).normal(size=(3, classes))
    top = min(classes, np.iinfo(dtype).max + 1) - 1
    good = np.array([top, 1, 0])
    expected = torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(good)).item()
    ours = F.cross_entropy(minigrad.Tensor(logits), good.astype(dtype)).item()
    assert ours == pytest.approx(expected, rel=1e-12)
    bad = [[2, 1, -1]] if np.issubdtype(dtype, np.signedinteger) else []
    bad += [[2, classes, 0]] if np.iinfo(dtype).max >= classes else []
    jit = hlo.jit(lambda x, t: F.cross_entropy(x, t))
    for target in bad:
        for f in (lambda x, t: F.cross_entropy(minigrad.Tensor(x), t), jit):
            with pytest.raises(IndexError, match=r"target values must be in \[0, %d\)" % classes):
                f(logits, np.array(target).astype(dtype))


def test_bad_dims_are_clear_errors_naming_the_op_shape_and_fix():
    x = minigrad.Tensor(np.ones((2, 3)))
    with pytest.raises(TypeError, match=r"max: dim must be one int, got \(0, 1\).*max\(\)"):
        x.max(dim=(0, 1))
    with pytest.raises(IndexError, match=r"sum: dim 2 is out of range for a tensor of shape "
                                         r"\(2, 3\) \(valid: -2 to 1\)"):
        x.sum(2)
    with pytest.raises(ValueError, match="mean: dim .* names a dimension twice"):
        x.mean((1, -1))
    with pytest.raises(TypeError, match="mean: input dtype int64 is not floating point"):
        minigrad.Tensor([1, 2]).mean()
    with pytest.raises(IndexError, match=r"log_softmax: dim -3 is out of range"):
        F.log_softmax(x, -3)
    with pytest.raises(TypeError, match="max: complex tensors are not ordered"):
        minigrad.Tensor([1j]).max()
    with pytest.raises(IndexError, match=r"transpose: dim 2 is out of range for a tensor of "
                                         r"shape \(2, 3\) \(valid: -2 to 1\)"):
        x.transpose(0, 2)  # (a bare "list index out of range" before)
    with pytest.raises(IndexError):
        torch.ones(2, 3).transpose(0, 2)
    # a 0-d tensor's dim is 0 or -1, and transposing it is itself (it raised), as in torch
    assert minigrad.Tensor(3.0).transpose(0, -1).item() == torch.tensor(3.0).transpose(0, -1).item()
    # SGD takes a learning rate of 0, as torch's (it raised), and refuses a negative one
    optim.SGD([minigrad.Tensor([1.0], requires_grad=True)], lr=0.0)
    with pytest.raises(ValueError, match="must not be negative"):
        optim.SGD([minigrad.Tensor([1.0], requires_grad=True)], lr=-0.1)


@pytest.mark.parametrize("op,arg,call", [
    ("relu", "input", lambda a, w: F.relu(a)),
    ("softmax", "input", lambda a, w: F.softmax(a)),
    ("log_softmax", "input", lambda a, w: F.log_softmax(a)),
    ("cross_entropy", "input", lambda a, w: F.cross_entropy(a, [0, 1])),
    ("linear", "input", lambda a, w: F.linear(a, w)),
    ("linear", "weight", lambda a, w: F.linear(w, a)),
    ("linear", "bias", lambda a, w: F.linear(w, w, a[0]))])
def test_an_ndarray_given_to_a_functional_is_a_clear_type_error(op, arg, call):
    """torch.nn.functional takes Tensors only (relu and linear raise TypeError; softmax an
    AttributeError); minigrad's used to fail inside the operation, on ndarray.data."""
    a, w = np.ones((2, 2)), minigrad.Tensor(np.ones((2, 2)), requires_grad=True)
    with pytest.raises(TypeError, match=r"^%s: %s must be a minigrad Tensor, got numpy.ndarray; "
                                        r"wrap it: minigrad.Tensor\(...\)$" % (op, arg)):
        call(a, w)


def test_masked_prefix_softmax_matches_torch():
    """Rows of 2048 whose first 1024 (and other long runs) are -inf, as attention masks make."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(6, 2048)) * 3
    x[0, :1024] = -np.inf
    x[1, 1024:] = -np.inf
    x[2, 1:] = -np.inf
    x[3, 100:1900] = -np.inf
    x[4, :2047] = -np.inf
    x[5, ::2] = -np.inf
    for dtype, tol in ((np.float32, 1e-6), (np.float64, 1e-13)):
        for dim, data in ((-1, x), (0, x.T.copy())):
            ours, theirs = [], []
            for fn, tfn in ((F.softmax, torch.softmax), (F.log_softmax, torch.log_softmax)):
                m = minigrad.Tensor(data.astype(dtype), requires_grad=True)
                t = torch.tensor(data.astype(dtype), requires_grad=True)
                y, yt = fn(m, dim), tfn(t, dim)
                g = np.where(np.isfinite(data), 1.0, 0.0).astype(dtype)
                y.backward(g)
                yt.backward(torch.tensor(g))
                assert not np.isnan(y.data).any() and not np.isnan(m.grad.data).any()
                np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=tol, atol=tol)
                np.testing.assert_allclose(m.grad.data, t.grad.numpy(), rtol=tol, atol=tol)


def test_equality_is_elementwise_like_torch():
    x = np.array([[0.0, 1.0], [2.0, 1.0]])
    m, t = minigrad.Tensor(x), torch.tensor(x)
    for mine, theirs in ((m == 1, t == 1), (m != 1, t != 1), (m == m, t == t),
                         (1.0 == m, 1.0 == t)):
        assert mine.dtype == np.bool_
        np.testing.assert_array_equal(mine.data, theirs.numpy())
    assert (m == None) is False and (m != None) is True  # noqa: E711 (as torch's)
    assert {m: 1}[m] == 1  # hashed by identity, as torch's


@pytest.mark.parametrize("update", ["add_", "mul_", "setitem"])
def test_an_in_place_update_by_a_tensor_that_requires_grad_is_an_error_not_a_lost_gradient(update):
    # torch records z.add_(w) (w gets a gradient); minigrad does not, so it refuses.
    w = minigrad.Tensor(np.ones(2), requires_grad=True)
    z = minigrad.Tensor(np.zeros(2))
    apply = {"add_": lambda: z.add_(w * 2), "mul_": lambda: z.mul_(w * 2),
             "setitem": lambda: z.__setitem__(slice(None), w * 2)}[update]
    with pytest.raises(RuntimeError, match="operand that requires grad is not recorded"):
        apply()
    with minigrad.no_grad():
        apply()  # nothing to record
    z.add_(w.detach())
    with pytest.raises(RuntimeError, match="operand that requires grad is not recorded"):
        z.sub_(w * 2, alpha=0.5)  # (checked before alpha scales it)


def test_iteration_goes_over_dim_0_and_a_0d_tensor_is_not_iterable_like_torch():
    x = np.arange(6.0).reshape(2, 3)
    assert [r.data.tolist() for r in minigrad.Tensor(x)] == [r.tolist() for r in torch.tensor(x)]
    for t in (minigrad.Tensor(3.0), torch.tensor(3.0)):
        with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
            list(t)


def test_in_place_operators_update_the_tensor_like_torch():
    # The manual SGD step: `p -= lr * p.grad` bound p to a new tensor, so the parameter that
    # the list (and the model) holds never changed.
    results = []
    for tensor, no_grad in ((minigrad.Tensor, minigrad.no_grad), (torch.tensor, torch.no_grad)):
        w = tensor(np.array([1.0, -2.0]), requires_grad=True)
        params = [w]
        (w * w).sum().backward()
        with no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p *= 2.0
                p /= 4.0
                p += 1.0
        plain = tensor(np.array([1.0, 2.0]))
        alias = plain  # another name for the same tensor sees the change, as torch's
        plain += plain
        plain.add_(tensor(np.array([2.0, 4.0])), alpha=2).sub_(tensor(np.array([1.0, 1.0])), alpha=4)
        results.append((np.asarray(w.detach().numpy()), np.asarray(alias.numpy())))
    (mine, mine_alias), (theirs, theirs_alias) = results
    np.testing.assert_allclose(mine, theirs)
    np.testing.assert_array_equal(mine_alias, theirs_alias)
    assert mine_alias.tolist() == [2.0, 8.0]


def test_an_in_place_operator_keeps_the_dtype_or_raises_like_torch():
    cases = [("int64", "/=", 2), ("int64", "+=", 0.5), ("int64", "*=", 1.5), ("float64", "+=", 1j),
             ("bool", "+=", 1), ("int64", "-=", np.array([0.5])),
             ("float32", "*=", np.array([2.0])), ("int32", "+=", 3), ("float32", "/=", 3),
             ("int64", "-=", 1), ("uint8", "-=", np.array([1], np.uint8))]
    for dtype, op, other in cases:
        outcomes = []
        for tensor, convert in ((lambda a: minigrad.Tensor(a), lambda v: v),
                                (lambda a: torch.from_numpy(a), lambda v: torch.as_tensor(v)
                                 if isinstance(v, np.ndarray) else v)):
            x = tensor(np.array([1, 2], dtype=dtype))
            try:
                exec("x %s other" % op, {}, {"x": x, "other": convert(other)})
            except RuntimeError as e:
                assert "can't be cast to the desired output type" in str(e)
                outcomes.append("raises")
            else:
                outcomes.append((str(x.dtype).replace("torch.", ""), x.numpy().tolist()))
        assert outcomes[0] == outcomes[1], (dtype, op, other, outcomes)


def test_an_in_place_operator_with_a_wider_operand_raises_like_torch():
    for tensor in (minigrad.Tensor, torch.tensor):
        x = tensor(np.zeros(2))
        with pytest.raises(RuntimeError, match=r"output with shape \[2\] doesn't match the "
                                               r"broadcast shape \[1, 2\]"):
            x += tensor(np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"add: shapes \(2,\) and \(3,\) cannot be broadcast"):
        x = minigrad.Tensor(np.zeros(2))
        x += np.ones(3)


def test_an_in_place_operator_on_a_leaf_that_requires_grad_raises_like_torch():
    for tensor in (minigrad.Tensor, torch.tensor):
        w = tensor(np.ones(2), requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf"):
            w += 1.0
        with pytest.raises(RuntimeError, match="leaf"):
            w *= tensor(np.ones(2), requires_grad=True)


def test_an_in_place_operator_where_torch_records_it_gives_torchs_gradients():
    # Recorded (x tracked, or y tracked into an untracked x): minigrad binds x to the
    # out-of-place result, whose values and gradients are torch's in-place ones.
    def residual(lib, a, b):
        out = a * 3.0
        kept = out * 1.0  # used before the change: its gradient flows through the old value
        out += b
        out *= a
        return out + kept

    assert_matches_torch(residual, [np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.1, -4.0])])

    def accumulate(lib, w):
        total = lib.tensor(np.zeros(3), requires_grad=False)
        total += w * w
        total -= w
        total /= 2.0
        return total

    assert_matches_torch(accumulate, [np.array([1.0, -2.0, 0.5])])


@pytest.mark.parametrize("case", ["float32 += float64", "(3,) += (2, 3)", "float64 += 1j",
                                  "int64 += requires grad", "float32 *= 2.5"])
def test_a_recorded_in_place_operator_keeps_the_dtype_and_shape_or_raises_like_torch(case):
    # Where torch records x op= y, minigrad binds x to the out-of-place result: it took that
    # result's dtype and shape (float32 += float64 gave float64, (3,) += (2, 3) gave (2, 3)).
    def run(lib, tensor):
        x = tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
        h = x * 1.0  # (a non-leaf: torch records its in-place update)
        y = tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
        if case == "float32 += float64":
            h += y
        elif case == "(3,) += (2, 3)":
            h = tensor(np.ones(3), requires_grad=True) * 1.0
            h += tensor(np.ones((2, 3)))
        elif case == "float64 += 1j":
            h = y * 1.0
            h += 1j
        elif case == "int64 += requires grad":
            h = tensor(np.array([1, 2, 3]))
            h += y
        else:
            h *= 2.5
        h.sum().backward()
        return str(h.dtype).replace("torch.", ""), h.detach().numpy().tolist(), [
            (str(t.grad.dtype).replace("torch.", ""), t.grad.numpy().tolist()) for t in (x, y)
            if t.grad is not None]

    outcomes = []
    for lib, tensor in (("minigrad", minigrad.Tensor), ("torch", torch.tensor)):
        try:
            outcomes.append(run(lib, tensor))
        except RuntimeError as e:
            message = str(e)
            assert ("can't be cast to the desired output type" in message
                    or "doesn't match the broadcast shape" in message), (lib, message)
            outcomes.append("raises")
    assert outcomes[0] == outcomes[1], outcomes
    if case == "float32 += float64":  # and inside transforms, where every x op= y is recorded
        def f(x):
            h = x * 1.0
            h += minigrad.Tensor(np.ones(3))
            return h
        assert func.vmap(f)(minigrad.Tensor(np.ones((2, 3), np.float32))).dtype == np.float32
        assert func.jacrev(f)(minigrad.Tensor(np.ones(3, np.float32))).dtype == np.float32


def test_a_complex_gradient_for_a_real_output_is_an_error_like_torch():
    # (it was cast to the output's dtype, its imaginary part dropped silently)
    for lib, tensor, grad in (("minigrad", minigrad.Tensor, minigrad.grad),
                              ("torch", torch.tensor, torch.autograd.grad)):
        x = tensor(np.ones(3), requires_grad=True)
        with pytest.raises(RuntimeError, match="(?i)for complex tensors, both"):
            (x * 2).sum().backward(tensor(1 + 5j))
        with pytest.raises(RuntimeError, match="(?i)for complex tensors, both"):
            grad([(x * 1j).sum()], [x], [tensor(1.0)])
        (x * 2).sum().backward(tensor(np.float32(3.0)))  # a real one of another dtype is cast
        assert x.grad.numpy().tolist() == [6.0] * 3, lib
        z = tensor(np.ones(2, np.complex128), requires_grad=True)  # and a complex one
        (z * 2).backward(tensor(np.array([1j, 2], np.complex64)))
        assert z.grad.numpy().tolist() == [2j, 4], lib


def test_grad_runs_only_the_nodes_that_lead_to_its_inputs_like_torch():
    """minigrad.grad ran (and freed) the whole graph: a later backward through a branch that
    did not lead to its inputs raised, and a retained .grad there was written."""
    for lib, tensor, grad in (("minigrad", minigrad.Tensor, minigrad.grad),
                              ("torch", torch.tensor, torch.autograd.grad)):
        x = tensor(np.array([1.0, 2.0]), requires_grad=True)
        w = tensor(np.array([3.0]), requires_grad=True)
        a = w.exp()
        y = w * 2
        y.retain_grad()
        (gx,) = grad((x * x).sum() + a.sum() + (y * y).sum(), [x])
        assert gx.tolist() == [2.0, 4.0] and y.grad is None and w.grad is None, lib
        a.sum().backward()  # (its node was not run, so not freed)
        np.testing.assert_allclose(w.grad.numpy(), np.exp([3.0]), err_msg=lib)
        h = x * 3  # an input behind another input: the pass goes on through it
        gh, gx = grad((h * h).sum() + (x * 2).sum(), [h, x])
        assert gh.tolist() == [6.0, 12.0] and gx.tolist() == [20.0, 38.0], lib
        y = x.exp()  # and stops at one that leads to no other: its node is not run (nor freed)
        grad(y.sum(), [y])
        y.sum().backward()


def test_setitem_errors_name_the_tensor_and_an_unsigned_tensor_takes_a_negative_int_like_torch():
    T = minigrad.Tensor
    for index, value, error, message in (
            (0, T(np.ones(4)), ValueError, r"could not broadcast .* \(a tensor of shape \(2, 3\) and "
                                           r"dtype float64, index 0, a value of shape \(4,\)\)"),
            (5, 1.0, IndexError, r"setitem: index 5 is out of bounds .* shape \(2, 3\)"),
            (0, "a", ValueError, r"setitem: .* a value of str"),
            (0, 1j, TypeError, r"setitem: .* a value of complex")):
        with pytest.raises(error, match=message):
            T(np.zeros((2, 3)))[index] = value
    # torch's c10::overflows: uint8 takes -1 as 255 and down to -255, nothing past its range
    for tensor in (T, torch.tensor):
        t = tensor(np.array([1, 2, 3], np.uint8))
        t[0], t[1] = -1, -255
        assert t.tolist() == [255, 1, 3]
        grid = tensor(np.zeros((2, 3), np.uint8))
        grid[1, [0, 2]] = -1  # an index of several keys
        assert grid.tolist() == [[0, 0, 0], [255, 0, 255]]
        for dtype, bad in ((np.uint8, -256), (np.uint8, 300), (np.int8, 128), (np.int8, -129)):
            with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
                tensor(np.zeros(2, dtype))[0] = bad


def test_a_tensor_made_to_require_grad_after_its_use_gets_no_gradient_from_it_like_torch():
    # torch fixes a node's edges when it records it; minigrad's engine asked at backward time.
    for tensor, grad in ((minigrad.Tensor, minigrad.grad), (torch.tensor, torch.autograd.grad)):
        x = tensor(np.array([1.0, 2.0]), requires_grad=True)
        c = tensor(np.array([3.0, 4.0]))
        y = (x * c).sum()
        c.requires_grad_(True)
        assert c.requires_grad is True
        with pytest.raises(RuntimeError, match="not (have been )?used"):
            grad(y, [c])
        assert grad(y, [c], allow_unused=True) == (None,)
        y.backward()  # (grad ran no node for c: the graph is not freed)
        assert c.grad is None and x.grad.tolist() == [3.0, 4.0]
        d = x.detach()
        y = (x * d).sum()
        d.requires_grad_(True)
        y.backward()
        assert d.grad is None
        (x * c).sum().backward()  # a node recorded since: c's gradient, as usual
        assert c.grad.tolist() == [1.0, 2.0]


def test_a_tensor_made_not_to_require_grad_and_back_keeps_its_edges_like_torch():
    for tensor in (minigrad.Tensor, torch.tensor):
        w = tensor(np.array([1.0, 2.0]), requires_grad=True)
        y = (w * 3).sum()
        w.requires_grad_(False)
        assert w.requires_grad is False
        w.requires_grad_(True)
        y.backward()
        assert w.grad.tolist() == [3.0, 3.0]
        # Frozen while a node was recorded (a GAN's discriminator in the generator's step),
        # unfrozen before the backward: that node holds no edge to it; the others keep theirs.
        x = tensor(np.array([3.0, 4.0]), requires_grad=True)
        w.grad = None
        y = (w * 3).sum()
        w.requires_grad_(False)
        y = y + (w * x).sum()
        w.requires_grad_(True)
        y = y + (w * 2).sum()
        y.backward()
        assert w.grad.tolist() == [5.0, 5.0] and x.grad.tolist() == [1.0, 2.0]
        w.grad = None
        v = tensor(np.array([1.0, 2.0]), requires_grad=True)
        z = (v * w).sum()
        v.requires_grad_(False)  # (at backward time, as torch's AccumulateGrad asks)
        z.backward()
        assert v.grad is None and w.grad.tolist() == [1.0, 2.0]


def test_a_product_saves_each_operand_once_whenever_its_leaves_came_to_require_grad():
    # A leaf's stamp is a number: a product's (b,) * needs(a) once saved it thousands of times,
    # and the per-example loop of grad calls ran 100 times slower.
    for _ in range(50):
        (minigrad.Tensor(np.ones(2), requires_grad=True) * 2).sum()
    x = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    w = minigrad.Tensor(np.array([3.0, 4.0]), requires_grad=True)
    assert len((x * w).grad_fn.saved_tensors) == 2
    assert len((x * 2.0).grad_fn.saved_tensors) == 0
    assert len(F.linear(minigrad.Tensor(np.ones((1, 2))), x.reshape(1, 2)).grad_fn.saved_tensors) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["freeze", "unfreeze", "use w", "use w and x"]), max_size=12),
       st.booleans())
@example(["freeze", "use w and x", "unfreeze"], False)
def test_freezing_and_unfreezing_between_uses_gives_torchs_gradients(steps, start_frozen):
    """Any order of requires_grad_(False/True) and uses, then one backward: the same .grad as
    torch's, whose nodes hold an edge to a leaf only if it required grad when they were made."""
    grads = []
    for tensor in (minigrad.Tensor, torch.tensor):
        w = tensor(np.array([1.0, 2.0]), requires_grad=not start_frozen)
        x = tensor(np.array([3.0, 5.0]), requires_grad=True)
        y = (x * 0.0).sum()
        for k, step in enumerate(steps):
            if step == "freeze":
                w.requires_grad_(False)
            elif step == "unfreeze":
                w.requires_grad_(True)
            else:  # a use weighted by its place, so that which uses gave a gradient shows
                y = y + (w * x if step == "use w and x" else w).sum() * (k + 1.0)
        y.backward()
        grads.append([None if t.grad is None else t.grad.tolist() for t in (w, x)])
    assert grads[0] == grads[1]


def test_a_leaf_frozen_and_unfrozen_at_every_step_trains_like_torch_in_bounded_memory():
    # A GAN's discriminator: frozen for the generator's step, unfrozen for its own.
    ws, xs = [], []
    for tensor in (torch.tensor, minigrad.Tensor):
        w = tensor(np.array([1.0, 2.0]), requires_grad=True)
        x = tensor(np.array([3.0, 5.0]), requires_grad=True)
        for step in range(40):
            w.requires_grad_(False)
            (w * x).sum().backward()  # the generator's step: x's gradient only
            w.requires_grad_(True)
            ((w * x).sum() * step).backward()
        ws.append(w.grad.tolist())
        xs.append(x.grad.tolist())
    assert ws[0] == ws[1] and xs[0] == xs[1]
    # minigrad's w: the spans it required grad in, not one a step (tensor._MAX_SPANS closed
    # ones, 8, and the open one)
    assert len(w._requires_grad.spans) <= 9


def test_an_unpickled_tensor_gets_its_gradient_in_a_process_of_its_own(monkeypatch):
    # Nodes are numbered from 0 in each process (function._sequence, replaced here as a new
    # process has it): a leaf pickled with this process's stamp got no gradient there.
    from minigrad import function
    for _ in range(3):
        (minigrad.Tensor(np.ones(2), requires_grad=True) * 2).sum()
    x = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    monkeypatch.setattr(function, "_sequence", itertools.count())
    y = pickle.loads(pickle.dumps(x))
    assert y.requires_grad is True and y.grad_fn is None
    (y * y).sum().backward()
    assert y.grad.tolist() == [2.0, 4.0]


def test_a_tensor_made_to_require_grad_before_its_use_gets_every_gradient_like_torch():
    # (a stamp tried before for the case after its use shadowed the engine's own `since`:
    # x.grad was None here, and nested func.grad gave zeros)
    for tensor, grad_fn in ((minigrad.Tensor, func.grad), (torch.tensor, torch.func.grad)):
        x = tensor(np.array([1.0, 2.0]), requires_grad=True)
        a = x * 2
        w = tensor(np.array([3.0, 4.0]))
        w.requires_grad_(True)
        (w * a).sum().backward()
        assert x.grad.tolist() == [6.0, 8.0] and w.grad.tolist() == [2.0, 4.0]
        f = lambda p, q: grad_fn(lambda u, v: (u * u * v).sum(), argnums=(0, 1))(p, q)[0].sum()
        got = grad_fn(f, argnums=(0, 1))(tensor(np.array([1.0, 2.0])), tensor(np.array([3.0, 5.0])))
        assert [g.tolist() for g in got] == [[6.0, 10.0], [2.0, 4.0]]


def test_an_index_or_target_changed_in_place_after_use_moves_no_gradient():
    """The backward read the caller's index array and cross_entropy's target tensor as they
    were at backward time: changed in place after the forward, they sent the gradient to the
    new positions and classes, silently. torch raises for both (it saves them); minigrad
    raises for a target tensor and keeps its own copy of an index."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4))
    for tensor, cross_entropy in ((minigrad.Tensor, F.cross_entropy),
                                  (torch.tensor, torch.nn.functional.cross_entropy)):
        x = tensor(logits, requires_grad=True)
        target = tensor(np.array([0, 1, 2]))
        loss = cross_entropy(x, target)
        target[0] = 3
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            loss.backward()
    for index in (minigrad.Tensor(np.array([0, 1])), np.array([0, 1]), [0, 1]):
        x = minigrad.Tensor(np.arange(5.0), requires_grad=True)
        y = x[index]
        index[0] = 4
        y.sum().backward()
        assert x.grad.tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_operands_and_data_torch_has_no_dtype_for_are_clear_type_errors():
    # (NumPy's messages named a ufunc loop signature, a float beside a NoneType, or read the
    # str exponent as a dtype; dates, times and long doubles made tensors no op could use)
    T = minigrad.Tensor
    for f, name in ((lambda: T([1.0]) + "a", "add: unsupported operand type str"),
                    (lambda: None * T([1.0]), "multiply: unsupported operand type NoneType"),
                    (lambda: T([1.0]) ** "x", "power: unsupported operand type str"),
                    (lambda: T([1.0]) / object(), "divide: unsupported operand type object")):
        with pytest.raises(TypeError, match=name):
            f()
    for array in (np.array(["2020-01-01"], "datetime64[D]"), np.array([1], "timedelta64[s]"),
                  np.ones(2, np.longdouble), np.ones(2, np.clongdouble), np.array([None])):
        for make in (T, from_numpy):
            with pytest.raises(TypeError, match=re.escape("must be numeric, of a dtype torch has: got %s," % array.dtype)):
                make(array)
    assert T(np.ones(2, np.float16)).dtype == np.float16 and T(np.ones(2, np.complex128)).dtype == np.complex128


def test_attention_masking_and_shapes_are_torchs():
    """where, masked_fill, permute, unsqueeze and sqrt, which a helper writing attention found
    missing (x[mask] = -inf on scores in the graph is refused, and its message named no
    out-of-place way); the op table checks their values and transforms against torch.func."""
    rng = np.random.default_rng(0)
    scores, keep = rng.normal(size=(2, 3, 5)), rng.random((2, 1, 5)) > 0.4
    keep[..., 0] = True
    upstream = rng.normal(size=(1, 5, 2, 3))
    outs = []
    for tensor, where, softmax in ((minigrad.Tensor, minigrad.where, F.softmax),
                                   (torch.tensor, torch.where, torch.softmax)):
        s = tensor(scores, requires_grad=True)
        bias = tensor(np.array(0.5), requires_grad=True)
        mask = tensor(~keep)
        p = softmax(s.masked_fill(mask, float("-inf")), -1)
        q = where(tensor(keep), p, bias).permute(2, 0, 1).unsqueeze(0).sqrt()
        (q * tensor(upstream)).sum().backward()
        outs.append([q.detach().numpy(), s.grad.numpy(), bias.grad.numpy()])
        with pytest.raises((RuntimeError, ValueError), match="broadcast|must match"):
            s.masked_fill(tensor(np.ones((3, 3, 5), bool)), 0.0)
        # a mask of more dims: the broadcast shape, as torch's out-of-place masked_fill
        assert tuple(tensor(np.zeros(3)).masked_fill(tensor(np.ones((2, 3), bool)), 1.0).shape) == (2, 3)
        with pytest.raises(RuntimeError, match="cannot be converted to type int64.* without overflow"):
            tensor(np.zeros(3, np.int64)).masked_fill(tensor(np.ones(3, bool)), float("-inf"))
        x = tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
        cond = tensor(np.array([True, False, False]))
        y = x.masked_fill(cond, 0.0) + where(cond, x, 0.0)
        cond[1] = True  # (the gradient read the changed mask: [0, 0, 100] for torch's error)
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            y.sum().backward()
        with pytest.raises(RuntimeError, match="0-dimensional value"):
            s.masked_fill(mask, tensor(np.ones(5)))
        with pytest.raises((RuntimeError, TypeError), match="(?i)bool"):
            s.masked_fill(tensor(np.ones((2, 1, 5))), 0.0)
        with pytest.raises((RuntimeError, TypeError), match="(?i)condition .*bool"):
            where(tensor(np.ones(5)), s, 0.0)
        with pytest.raises(RuntimeError):
            s.permute(0, 1)
        with pytest.raises(IndexError):
            s.unsqueeze(4)
        assert tensor(np.array([1, 2])).masked_fill(tensor(np.array([True, False])), 2.5).tolist() == [2, 2]
    for mine, theirs in zip(*outs):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
    with pytest.raises(RuntimeError, match=r"x = x\.masked_fill\(mask, v\)"):
        h = minigrad.Tensor(scores, requires_grad=True) * 1.0
        h[minigrad.Tensor(~np.broadcast_to(keep, scores.shape))] = float("-inf")


def test_a_numpy_mask_changed_after_the_forward_moves_no_gradient():
    # torch.tensor copies the array; where and masked_fill keep their own copy of one.
    cond = np.array([True, False, True])
    grads = []
    for tensor, where in ((minigrad.Tensor, minigrad.where), (torch.tensor, torch.where)):
        x = tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
        mine = tensor is minigrad.Tensor
        c = cond.copy()
        y = where(c if mine else tensor(c), x, 0.0) + x.masked_fill(c if mine else tensor(c), 0.0) * 10
        c[:] = ~c
        y.sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [1.0, 10.0, 1.0]


def test_permute_takes_dims_or_one_sequence_of_them_and_refuses_repeats_like_torch():
    for tensor in (minigrad.Tensor, torch.tensor):
        assert tuple(tensor(np.zeros(2)).permute(0).shape) == (2,)
        m = tensor(np.arange(6.0).reshape(2, 3))
        for dims in ((1, 0), [1, 0]):
            assert m.permute(dims).tolist() == m.permute(*dims).tolist() == np.arange(6.0).reshape(2, 3).T.tolist()
        with pytest.raises(RuntimeError):
            m.permute(1, 1)


def test_reshape_takes_a_shape_or_its_sizes_like_torch():
    for tensor in (minigrad.Tensor, torch.tensor):
        x = tensor(np.arange(6.0))
        want = np.arange(6.0).reshape(2, 3).tolist()
        assert x.reshape(2, 3).tolist() == x.reshape((2, 3)).tolist() == x.reshape([2, -1]).tolist() == want


def test_real_and_imag_are_torchs_and_differentiable():
    """The refusals of complex max, comparisons, abs and float() point to .real and .imag,
    which Tensor did not have."""
    z0 = np.array([1 + 2j, -3 + 0.5j])
    outs = []
    for lib, tensor in (("minigrad", minigrad.Tensor), ("torch", torch.tensor)):
        z = tensor(z0, requires_grad=True)
        modulus = (z.real ** 2 + z.imag ** 2) ** 0.5  # (abs's message offers this)
        (modulus * tensor(np.array([1.0, 2.0]))).sum().backward()
        r = tensor(np.ones(2))
        assert r.real is r, lib
        with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex"):
            r.imag
        small = tensor(z0.astype(np.complex64))
        outs.append((z.real.tolist(), z.imag.tolist(), z.grad.numpy(), str(small.imag.dtype)[-7:]))
    (re1, im1, g1, d1), (re2, im2, g2, d2) = outs
    assert re1 == re2 and im1 == im2 and d1 == d2 == "float32"
    np.testing.assert_allclose(g1, g2, rtol=1e-12)
    with pytest.raises(TypeError, match=r"z\.real \*\* 2 \+ z\.imag \*\* 2"):
        minigrad.Tensor(z0).abs()
    f = lambda z: z.real * z.imag
    tangent, cotangent = np.array([1j, 2 + 1j]), np.array([1.0, 2.0])
    got = func.jvp(f, (minigrad.Tensor(z0),), (minigrad.Tensor(tangent),))[1].numpy()
    want = torch.func.jvp(f, (torch.tensor(z0),), (torch.tensor(tangent),))[1].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    got = func.vjp(f, minigrad.Tensor(z0))[1](minigrad.Tensor(cotangent))[0].numpy()
    want = torch.func.vjp(f, torch.tensor(z0))[1](torch.tensor(cotangent))[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert func.vmap(lambda z: z.imag)(minigrad.Tensor(z0)).tolist() == [2.0, 0.5]
    special = np.array([np.inf + 1j, np.nan + 2j])  # (as the real part of -1j * z: NaN)
    assert minigrad.Tensor(special).imag.tolist() == torch.tensor(special).imag.tolist() == [1.0, 2.0]


def test_a_matrix_product_of_two_dtypes_is_an_error_like_torch():
    """matmul and linear promoted: a float32 model fed float64 inputs (a Tensor of a list,
    NumPy's default) ran in float64 silently, and F.linear cast a float64 bias down."""
    x64, x32 = np.ones((2, 3)), np.ones((2, 3), np.float32)
    w32, b32, b64 = np.ones((4, 3), np.float32), np.ones(4, np.float32), np.ones(4)
    for tensor, linear in ((minigrad.Tensor, F.linear), (torch.tensor, torch.nn.functional.linear)):
        for f in (lambda: tensor(x64) @ tensor(w32).T, lambda: linear(tensor(x64), tensor(w32)),
                  lambda: linear(tensor(x32), tensor(w32), tensor(b64)),
                  lambda: tensor(np.ones((2, 3), np.int64)) @ tensor(w32).T):
            with pytest.raises(RuntimeError, match="dtype"):
                f()
        assert str(linear(tensor(x64).double(), tensor(w32).double()).dtype).endswith("float64")
    with pytest.raises(RuntimeError, match=r"matmul: .*got float64 and float32; cast one with \.to\(\)"):
        minigrad.Tensor(x64) @ minigrad.Tensor(w32).T
    with pytest.raises(ValueError, match=r"linear: a bias of shape \(5,\) does not fit .* \(4,\)"):
        F.linear(minigrad.Tensor(x32), minigrad.Tensor(w32), minigrad.Tensor(np.ones(5, np.float32)))


def test_to_float_and_double_cast_as_torchs():
    for lib, tensor, dtypes in (("minigrad", minigrad.Tensor, (np.float32, np.float64, np.int64)),
                                ("torch", torch.tensor, (torch.float32, torch.float64, torch.int64))):
        x = tensor(np.array([1.5, -2.25]), requires_grad=True)
        assert x.to(x) is x and x.double() is x, lib  # (its own dtype: itself)
        y = x.float()
        assert str(y.dtype).endswith("float32") and y.requires_grad and not y.is_leaf, lib
        (y * tensor(np.array([2.0, 3.0], np.float32))).sum().backward()
        assert str(x.grad.dtype).endswith("float64") and x.grad.tolist() == [2.0, 3.0], lib
        z = x.to(dtypes[2])  # an integer dtype carries no gradient
        assert z.tolist() == [1, -2] and not z.requires_grad, lib
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (the complex-to-real warning is for complex tensors)
            x.float()
    # nor a tangent, nor a second derivative
    for lib, fn, tensor, int64 in (("minigrad", func, minigrad.Tensor, np.int64),
                                   ("torch", torch.func, torch.tensor, torch.int64)):
        f = lambda t: (t * t.to(int64)).sum()  # noqa: E731
        at = tensor(np.array([1.5, 2.5]))
        assert float(fn.jvp(f, (at,), (tensor(np.ones(2)),))[1]) == 3.0, lib
        assert fn.hessian(f)(at).tolist() == [[0.0, 0.0], [0.0, 0.0]], lib
    assert minigrad.Tensor([1.0]).to("float16").dtype == np.float16
    with pytest.raises(TypeError, match="to: expected a dtype"):
        minigrad.Tensor([1.0]).to("cuda")
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        assert minigrad.Tensor([1 + 2j]).to(np.float64).tolist() == [1.0]
    jac = func.jacrev(lambda t: t.float() * 3)(minigrad.Tensor([1.0, 2.0]))
    want = torch.func.jacrev(lambda t: t.float() * 3)(torch.tensor([1.0, 2.0], dtype=torch.float64))
    assert str(jac.dtype) == str(want.dtype).replace("torch.", "") and jac.tolist() == want.tolist()


def test_pow_takes_a_list_operand_as_the_other_operators_do():
    # (it raised "Field elements must be 2- or 3-tuples": NumPy read the list as a dtype)
    T = minigrad.Tensor
    assert (T([2.0, 3.0]) ** [1.0, 2.0]).tolist() == (T([2.0, 3.0]) * [1.0, 3.0]).tolist() == [2.0, 9.0]
    assert ([2, 3] ** T([2, 1])).tolist() == [4, 3]
    with pytest.raises(ValueError, match="integers to negative integer powers"):
        T([2, 3]) ** [1, -2]


def test_mixed_precision_gradients_of_div_and_pow_are_torchs():
    """Div's divisor gradient squared b first (b * b overflowed: a float16 b of 300 gave -0),
    pow's exponent gradient took log(a) in a float16 base's precision (2e-5 off)."""
    def grads(tensor):
        a = tensor(np.ones(2, np.float16), requires_grad=True)
        b = tensor(np.array([300.0, 1000.0], np.float16), requires_grad=True)
        (a / b).sum().backward()
        big = tensor(np.array([1e20, 3e19], np.float32), requires_grad=True)
        (tensor(np.ones(2, np.float32)) / big).sum().backward()
        x = tensor(np.array([0.5, 1.5]), requires_grad=True)
        (tensor(np.array([3.0, 10.0], np.float16)) ** x).sum().backward()
        return [t.grad.numpy().astype(np.float64) for t in (b, big, x)]

    for got, want, rtol in zip(grads(minigrad.Tensor), grads(torch.tensor), (1e-3, 1e-6, 1e-12)):
        assert np.all(got != 0)
        np.testing.assert_allclose(got, want, rtol=rtol)


def test_a_saved_tensor_changed_by_an_in_place_operator_is_caught_like_torch():
    for tensor, no_grad in ((minigrad.Tensor, minigrad.no_grad), (torch.tensor, torch.no_grad)):
        x = tensor(np.array([0.5, 1.0]), requires_grad=True)
        y = x.exp()  # saves its output
        with no_grad():
            y += 1.0
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            y.sum().backward()


MAX_INPUTS = {
    "ties": np.array([[1.0, 3.0, 3.0, 0.0], [-1.0, -1.0, -2.0, -3.0], [2.0, 2.0, 2.0, 2.0]]),
    "nans": np.array([[np.nan, 2.0, np.nan, 5.0], [1.0, np.nan, 0.0, np.inf], [-np.inf] * 4]),
    "ints": np.array([[3, 1, 3], [0, -7, 2]]),
    "0-d": np.array(4.0),
}


@pytest.mark.parametrize("name", sorted(MAX_INPUTS))
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_over_a_dim_returns_values_and_indices_like_torch(name, keepdim):
    # (it returned the values alone: x.max(1)[0] was the first row, and `values, indices =
    # x.max(1)` unpacked the values of a two-row x without a word)
    x = MAX_INPUTS[name]
    for dim in range(-max(x.ndim, 1), max(x.ndim, 1)):
        theirs = torch.from_numpy(x).max(dim, keepdim=keepdim)
        runs = {"eager": lambda a: minigrad.Tensor(a).max(dim, keepdim=keepdim),
                "jit": hlo.jit(lambda t: t.max(dim, keepdim=keepdim)),
                "vmap": lambda a: minigrad.func.vmap(lambda t: t.max(dim, keepdim=keepdim))(
                    np.stack([a, a]))}
        for run, f in runs.items():
            values, indices = f(x)
            if run == "vmap":
                values, indices = values[1], indices[1]
            assert indices.dtype == np.int64 and not indices.requires_grad, run
            np.testing.assert_array_equal(indices.data, theirs.indices.numpy(), err_msg=run)
            np.testing.assert_array_equal(values.data, theirs.values.numpy(), err_msg=run)
        mine = minigrad.Tensor(x).max(dim, keepdim=keepdim)
        assert mine[0] is mine.values and mine[1] is mine.indices and len(mine) == 2


def test_max_over_a_dim_sends_the_gradient_to_its_indices_like_torch():
    x = MAX_INPUTS["ties"]
    w, tw = minigrad.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    values, indices = w.max(0)
    (values * values).sum().backward()
    tvalues, tindices = tw.max(0)
    (tvalues * tvalues).sum().backward()
    np.testing.assert_array_equal(w.grad.data, tw.grad.numpy())
    np.testing.assert_array_equal(indices.data, tindices.numpy())


def test_max_of_an_empty_tensor_is_empty_unless_a_reduced_dim_is_empty_like_torch():
    # (every empty tensor raised, (2, 0).max(0) among them, whose max is empty in torch)
    for shape, dim in (((2, 0), 0), ((1, 0, 3), 0), ((0, 3), 1)):
        mine, theirs = minigrad.Tensor(np.zeros(shape)).max(dim), torch.zeros(shape).max(dim)
        assert mine.values.shape == tuple(theirs.values.shape) == mine.indices.shape
    for shape, dim in (((0, 3), 0), ((2, 0), 1), ((0,), 0), ((2, 0), None)):
        with pytest.raises(RuntimeError, match="empty along the reduced dims"):
            minigrad.Tensor(np.zeros(shape)).max(dim)
        with pytest.raises((IndexError, RuntimeError), match="non-zero size|numel\\(\\) == 0"):
            torch.zeros(shape).max() if dim is None else torch.zeros(shape).max(dim)


def test_a_mask_inverts_with_tilde_and_bool_negation_or_subtraction_is_refused_like_torch():
    # (the refusals advised ~mask, which minigrad lacked; -mask raised NumPy's own error)
    m = np.array([True, False, True])
    for tensor in (minigrad.Tensor, torch.from_numpy):
        np.testing.assert_array_equal(np.asarray((~tensor(m)).data if tensor is minigrad.Tensor
                                                 else (~tensor(m)).numpy()), ~m)
    x = np.array([1.0, -2.0, 3.0])
    masked = minigrad.func.vmap(lambda r, k: r * ~k)(minigrad.Tensor(np.stack([x, x])),
                                                       minigrad.Tensor(np.stack([m, ~m])))
    np.testing.assert_array_equal(masked.data, [x * ~m, x * m])
    np.testing.assert_array_equal(hlo.jit(lambda k: ~k)(m).data, ~m)
    for op in (lambda t: -t, lambda t: 1 - t):
        with pytest.raises(TypeError, match="bool tensor is not supported .* use ~mask"):
            op(minigrad.Tensor(m))
        with pytest.raises(RuntimeError, match="bool tensor is not supported"):
            op(torch.from_numpy(m))
    with pytest.raises(TypeError, match="~ takes a bool tensor"):
        ~minigrad.Tensor(np.array([1, 2]))


_SCALARS = [(3.7, None), (-3.7, None), (2, None), (True, None), (1 + 2j, None), ([1.0, 2.0], None),
            ([5], None), ([], None), (float("nan"), None), (float("inf"), None), (2.5, "float32")]


@pytest.mark.parametrize("value, dtype", _SCALARS, ids=repr)
def test_float_int_complex_and_index_of_a_tensor_are_torchs(value, dtype):
    import operator

    def outcome(convert, t):
        try:
            return convert(t)
        except Exception as e:  # (the error's type is part of torch's behaviour)
            return type(e)
    mine = minigrad.Tensor(value, dtype=dtype)
    theirs = torch.tensor(value, dtype=getattr(torch, dtype) if dtype else None)
    for convert in (float, int, complex, operator.index):
        got, want = outcome(convert, mine), outcome(convert, theirs)
        assert type(got) is type(want), (convert, value, got, want)
        if isinstance(want, type):
            assert got is want, (convert, value)
        else:
            np.testing.assert_equal(got, want)  # (nan equal to nan)
    np.testing.assert_equal(mine.tolist(), theirs.tolist())
    assert ["ab", "cd", "ef"][minigrad.Tensor(1)] == "cd"  # (an index: list subscripts, range)
    assert list(range(minigrad.Tensor(np.int8(3)))) == [0, 1, 2]


@pytest.mark.parametrize("read", ["item", "float", "int", "bool", "numpy", "tolist"])
def test_reading_a_batched_tensors_value_inside_vmap_raises_like_torch(read):
    """Python code reading a value inside vmap read the whole batch's (item() of a sum over
    one example raised about 3 elements; numpy() returned the batch): torch raises."""
    from minigrad import func
    calls = {"item": lambda t: t.sum().item(), "float": lambda t: float(t.sum()),
             "int": lambda t: int(t.sum()), "bool": lambda t: bool(t.sum() > 0),
             "numpy": lambda t: t.numpy(), "tolist": lambda t: t.tolist()}
    x = np.arange(6.0).reshape(3, 2)
    with pytest.raises(RuntimeError):  # ("vmap: ..." or "Cannot access data pointer ...")
        torch.func.vmap(calls[read])(torch.tensor(x))
    with pytest.raises(RuntimeError, match="vmap: .* of a batched tensor"):
        func.vmap(calls[read])(minigrad.Tensor(x))
    # an unbatched tensor inside vmap, and a batched one's value after vmap, read as outside
    w = minigrad.Tensor([1.5])
    out = func.vmap(lambda t: t * float(w))(minigrad.Tensor(x))
    assert out.tolist() == (x * 1.5).tolist() and float(out.sum()) == 22.5


_S = slice(None)
# Mixed basic and advanced indices (lists, arrays, masks, index tensors), each as torch reads it.
_INDEXES = [
    (0, _S, [1, 2]), (0, _S, _S, [1, 2]), (_S, 0, _S, [1, 2]), (-1, _S, [0, 2], _S), (0, [1, 2]),
    ([0, 1], _S, 0), ([0, 1], _S, [1, 2]), (0, _S, np.array([1, 2])), (0, Ellipsis, [1, 2]),
    (Ellipsis, 0, _S, [1, 3]), (0, None, _S, [1, 2]), (_S, [0, 2], 1, _S),
    (0, _S, np.array([True, False, True, True])), (np.array([False, True]), _S, [1, 2]),
    (1, np.array([True, False, True]), _S, 2), ("0-d index tensor", _S, [1, 2]),
    (0, _S, "index tensor"), (np.int64(0), _S, [1, 2]), (0, _S, [1, 2], 3), (_S, _S, [1, 2], 0),
    (_S, 0, [1, 2]), ([1, 0], 0, _S, _S),
    [[0, 1], [1, 2]], [[0, 1]], [[1, 0], _S, [2, 3]],  # (a list holding sequences: a tuple)
]


@pytest.mark.parametrize("index", _INDEXES, ids=repr)
def test_integers_beside_advanced_indices_select_first_like_torch(index):
    """NumPy indexes with an integer beside an advanced index as an array too, and with a slice
    between them moves the indexed dims first: x[0, :, [0, 2, 1]] came out transposed
    (silently, for square dims), and x[0, :, [0, 1, 2]] = w wrote w transposed. Torch selects
    with the integer first; a list that holds sequences is a tuple of indices there too."""
    a = np.arange(120.0).reshape(2, 3, 4, 5)

    def key(tensor):
        named = {"0-d index tensor": np.array(1), "index tensor": np.array([3, 0])}
        parts = index if isinstance(index, tuple) else (index,)
        parts = [tensor(named[p]) if isinstance(p, str) else p for p in parts]
        return tuple(parts) if isinstance(index, tuple) else parts[0]
    x, xt = minigrad.Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:  # (torch's deprecation, and ours)
        warnings.simplefilter("always")
        mine, theirs = x[key(minigrad.Tensor)], xt[key(torch.tensor)]
    assert len(caught) == (2 if isinstance(index, list) else 0)
    np.testing.assert_array_equal(mine.data, theirs.detach().numpy())
    w = np.random.default_rng(0).normal(size=theirs.shape)
    (mine * minigrad.Tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
    y, yt = minigrad.Tensor(a), torch.tensor(a)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y[key(minigrad.Tensor)] = minigrad.Tensor(w)
        yt[key(torch.tensor)] = torch.tensor(w)
    np.testing.assert_array_equal(y.data, yt.numpy())


def test_a_second_backward_accumulates_into_the_same_grad_tensor_like_torch():
    """.grad was replaced by a new tensor on each later backward: a reference taken between two
    (gradient accumulation, clipping, logging) kept the first values, and one zeroed in place
    with zero_() stayed 0. Torch adds into it in place (out of place under create_graph)."""
    for lib, make in ((minigrad, lambda: minigrad.Tensor([1.0, 2.0], requires_grad=True)),
                      (torch, lambda: torch.tensor([1.0, 2.0], requires_grad=True))):
        x = make()
        (x * x).sum().backward()
        held = x.grad
        (x * x).sum().backward()
        assert held is x.grad and held.tolist() == [4.0, 8.0], lib
        x.grad.zero_()
        (x * 3).sum().backward()
        assert held.tolist() == [3.0, 3.0], lib
        (x * x).sum().backward(create_graph=True)
        assert held is not x.grad and held.tolist() == [3.0, 3.0], lib
        assert x.grad.tolist() == [5.0, 7.0], lib


def test_abs_and_sign_as_torchs_at_zero_nan_and_for_integers():
    """abs and sign were missing. torch's sign is 0 at NaN and -0.0 (NumPy's: NaN, -0.0), so
    abs's gradient (grad * sign) is 0 there; sign's gradient is 0 even under an inf upstream
    gradient; integers keep their dtype; jit computes the same."""
    values = [0.0, -0.0, np.nan, -2.0, 3.0]
    results = []
    for lib, make in ((minigrad, minigrad.Tensor), (torch, torch.tensor)):
        x = make(values, requires_grad=True)
        x.abs().sum().backward()
        y = make(values, requires_grad=True)
        (y.sign() * float("inf")).sum().backward()
        ints = make(np.array([-3, 0, 5], np.int32))
        results.append((x.grad.tolist(), y.grad.tolist(), make(values).sign().tolist(),
                        abs(ints).tolist(), ints.sign().tolist(), str(ints.abs().dtype)[-5:]))
    np.testing.assert_equal(results[0], results[1])
    np.testing.assert_array_equal(hlo.jit(lambda t: t.sign())(np.array(values)).data, results[1][2])
    np.testing.assert_array_equal(hlo.jit(func.grad(lambda t: t.abs().sum()))(np.array(values)).data,
                                  results[1][0])
    for bad in (lambda: minigrad.Tensor([True]).abs(), lambda: minigrad.Tensor([1j]).abs(),
                lambda: minigrad.Tensor([1j]).sign()):
        with pytest.raises(TypeError):
            bad()


def test_retain_grad_keeps_a_non_leafs_gradient_as_torch():
    """retain_grad was missing: an intermediate's gradient could not be read. As torch's, it
    accumulates over backward passes, is filled by autograd.grad too, carries the graph under
    create_graph, and is refused for a tensor that does not require grad."""
    results = []
    for lib, grad in ((minigrad, minigrad.grad), (torch, torch.autograd.grad)):
        make = minigrad.Tensor if lib is minigrad else torch.tensor
        x = make([1.0, 2.0], requires_grad=True)
        y = x * 3
        y.retain_grad()
        z = (y * y).sum()
        z.backward(retain_graph=True)
        first = y.grad.tolist()
        z.backward()
        x2 = make([1.0, 2.0], requires_grad=True)
        y2 = x2 * 3
        y2.retain_grad()
        grad((y2 * y2).sum(), x2)
        y3 = x2 * 3
        y3.retain_grad()
        (y3 * y3).sum().backward(create_graph=True)
        x.retain_grad()  # (a leaf: no change)
        results.append((first, y.grad.tolist(), y2.grad.tolist(), y3.grad.requires_grad,
                        y.retains_grad, x.retains_grad))
        with pytest.raises(RuntimeError, match="retain_grad"):
            make([1.0]).retain_grad()
    assert results[0] == results[1] == (
        [6.0, 12.0], [12.0, 24.0], [6.0, 12.0], True, True, False)


def test_grads_under_create_graph_are_each_leafs_own_and_a_retained_sum_is_out_of_place():
    """Under create_graph two leaves of (a + b) * 1 (or a leaf and a retained tensor) were
    handed one tensor, and a later backward added into it twice ([3, 3] for torch's [2, 2]);
    a retained .grad was added into in place, changing a reference taken before (torch's
    retain_grad sums out of place)."""
    results = []
    for make in (minigrad.Tensor, torch.tensor):
        x = make([1.0, 2.0], requires_grad=True)
        y = x + 0
        y.retain_grad()
        z = (y + 0) * 1
        z.backward(make([1.0, 1.0]), create_graph=True)
        z.backward(make([1.0, 1.0]))
        a, b = make([1.0], requires_grad=True), make([1.0], requires_grad=True)
        w = (a + b) * 1
        w.backward(make([1.0]), create_graph=True)
        w.backward(make([1.0]))
        v = x * 3
        v.retain_grad()
        loss = (v * v).sum()
        loss.backward(retain_graph=True)
        held = v.grad
        loss.backward()
        results.append((y.grad.tolist(), a.grad.tolist(), b.grad.tolist(), held.tolist(),
                        held is v.grad, x.grad is y.grad))
    assert results[0] == results[1]


def test_an_assigned_grad_must_match_the_tensor_as_in_torch():
    """p.grad = a (1,) tensor on a (3,) parameter was taken: SGD's step broadcast it and
    backward added into it. As torch's, a grad of another shape or dtype, or not a tensor, is
    refused at the assignment."""
    for make in (minigrad.Tensor, torch.tensor):
        p = make([1.0, 2.0, 3.0], requires_grad=True)
        p.grad = make([0.0, 0.0, 0.0])  # (a matching one is taken)
        p.grad = None
        for bad, error in ((make([1.0]), RuntimeError), (make([1, 2, 3]), RuntimeError),
                           (np.ones(3), TypeError)):
            with pytest.raises(error):
                p.grad = bad
        assert p.grad is None


def test_max_routes_an_inf_or_nan_gradient_to_the_maximum_alone_as_torch():
    """max's gradient was the upstream gradient times a mask: inf * 0 made the other elements
    NaN; torch routes it, leaving them 0."""
    x = np.array([[np.nan, 1.0, 1.0], [2.0, np.nan, np.nan]])
    results = []
    for make in (minigrad.Tensor, torch.tensor):
        grads = []
        for f in (lambda t: t.max() * float("inf"), lambda t: (t.max(1)[0] * float("inf")).sum(),
                  lambda t: (t.max(0, keepdim=True)[0] ** 2).sum()):
            for value in (np.array([[1.0, 5.0, 2.0], [0.0, 3.0, 3.0]]), x):
                t = make(value, requires_grad=True)
                f(t).backward()
                grads.append(t.grad.tolist())
        results.append(grads)
    np.testing.assert_equal(results[0], results[1])


def test_a_leafs_second_gradient_in_a_pass_leaves_a_siblings_pending_gradient_alone():
    """Add's backward hands one array to both inputs: the leaf kept it as its .grad, and its
    second gradient in the same pass was added into it in place, changing the other input's
    gradient still waiting to run (y.grad 18 where torch gives 3; found by review)."""
    results = []
    for make in (minigrad.Tensor, torch.tensor):
        # (made in this order, the other terms' nodes run between the Add and y * 3's node)
        x, y = make([0.5, -0.5], requires_grad=True), make([1.0, 2.0], requires_grad=True)
        w = y * 3
        reg = (x * x).sum()
        ((x + w).tanh().sum() + reg).backward()
        x2, y2 = make([0.5, -0.5], requires_grad=True), make([1.0, 2.0], requires_grad=True)
        w2, u = y2 * 3, x2 * 5
        ((x2 + w2) * 1 + u).sum().backward()
        results.append((x.grad.tolist(), y.grad.tolist(), x2.grad.tolist(), y2.grad.tolist()))
    np.testing.assert_allclose(np.concatenate([np.ravel(r) for r in results[0]]),
                               np.concatenate([np.ravel(r) for r in results[1]]), rtol=1e-12)


def test_formatting_membership_and_conversion_errors_as_torch():
    """f"{loss:.4f}" raised TypeError, `2 in t` raised (truth value of a tensor), item() and
    bool() of several elements raised ValueError, an empty tensor's repr hid its shape, and
    Tensor("1.5") made a string tensor; requires_grad_() and size() were missing."""
    T = minigrad.Tensor
    for lib, make in ((minigrad, T), (torch, torch.tensor)):
        assert f"{make(1.5):.2f}" == "1.50", lib
        with pytest.raises(TypeError):
            f"{make([1.5]):.2f}"
        assert 2 in make([[1, 2], [3, 4]]) and 5 not in make([[1, 2], [3, 4]]), lib
        assert 0.1 in make(np.float32([0.1])) and make(1.0) in make([1.0, 2.0]), lib
        with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
            "a" in make([1.0])
        for f in (lambda t: t.item(), bool):
            with pytest.raises(RuntimeError):
                f(make([1.0, 2.0]))
        assert make(np.zeros(3)).requires_grad_().requires_grad, lib
        assert make(np.zeros((2, 3))).size() == (2, 3) and make(np.zeros((2, 3))).size(-1) == 3
        with pytest.raises(IndexError):
            make(np.zeros((2, 3))).size(2)
        with pytest.raises(TypeError):
            make("1.5")
    assert repr(T(np.zeros((0, 3)))) == "tensor([], size=(0, 3))"
    assert repr(T(np.zeros(0))) == "tensor([])"


def test_a_list_of_one_element_tensors_makes_a_tensor_like_torch():
    T = minigrad.Tensor  # (it raised "Tensor data must be numeric")
    assert T([T(1.0), T(2.0)]).tolist() == torch.tensor([torch.tensor(1.0), 2.0]).tolist()
    assert T([[T(1), 2], [3, T(np.int8(4))]]).tolist() == [[1, 2], [3, 4]]
    assert T([T(1j), T(2.0)]).tolist() == torch.tensor([torch.tensor(1j), 2.0]).tolist()
    for bad in ([T([1.0, 2.0])], [[T(np.ones((2, 2)))]]):
        with pytest.raises(ValueError, match="only one element tensors"):
            T(bad)
    with pytest.raises(ValueError, match="only one element tensors"):
        torch.tensor([torch.tensor([1.0, 2.0])])
    # a leaf that requires grad is read for its number, as torch.tensor reads it
    assert T([T(1.5, requires_grad=True)]).tolist() == [1.5]  # (torch: the same, and a warning)
    # ... in any thread (the list's reading is marked per thread)
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(lambda: T([T(1.0), 2.0]).tolist()).result() == [1.0, 2.0]


@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy")  # (torch's)
def test_numpy_reads_a_tensor_as_torchs_numpy():
    """np.asarray(t) (and what calls it: np.testing, matplotlib) gave a 0-d object array
    holding the tensor; torch's __array__ gives the values."""
    T = minigrad.Tensor
    for lib, make in (("minigrad", T), ("torch", torch.tensor)):
        t = make(np.array([1.0, 2.0]))
        a = np.asarray(t)
        assert a.dtype == np.float64 and a.tolist() == [1.0, 2.0], lib
        a[0] = 5.0  # a view of the tensor's memory, as t.numpy()
        assert t.tolist() == [5.0, 2.0], lib
        b = np.array(t)  # copies
        b[1] = 7.0
        assert t.tolist() == [5.0, 2.0], lib
        assert np.asarray(t, dtype=np.float32).dtype == np.float32, lib
        np.testing.assert_allclose(t, [5.0, 2.0])
        assert np.asarray(make(3.0)).shape == () and float(np.asarray(make(3.0))) == 3.0, lib
        assert np.asarray([make(np.ones(2)), make(np.ones(2))]).shape == (2, 2), lib
        with pytest.raises(RuntimeError, match="(?i)can't call numpy\\(\\) on (a )?tensor that requires grad"):
            np.asarray(make(np.ones(2)).requires_grad_())
    with pytest.raises(ValueError, match="float64 tensor to float32 needs a copy"):
        np.array(T(np.ones(2)), dtype=np.float32, copy=False)
    with pytest.raises(RuntimeError, match="numpy\\(\\) of a batched tensor"):
        func.vmap(lambda x: T(np.asarray(x)))(T(np.ones((2, 3))))



@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "numpy"])
@pytest.mark.parametrize("view", ["transposed", "strided"])
def test_cross_entropy_of_non_contiguous_logits_matches_torch(view, kernel, monkeypatch):
    """The backward writes each row's -1 through a flat view of the probabilities: NumPy's
    softmax of a transposed array comes out in Fortran order, whose flat view is a copy."""
    if not kernel:
        monkeypatch.setattr(F, "_kernel", None)
    rng = np.random.default_rng(0)
    target = rng.integers(0, 4, 15)

    def fn(lib, x):
        x = x.T if view == "transposed" else x[::2, ::3]
        return lib.cross_entropy(x, target[:x.shape[0]])
    assert_matches_torch(fn, [rng.standard_normal((12, 15) if view == "transposed" else (30, 12))],
                         rtol=1e-12)





def test_0d_results_of_operations_update_in_place_and_accumulate_like_torch():
    """NumPy returns a scalar for an operation on 0-d arrays, and minigrad held it as the
    tensor's data: `y += 1`, `y[...] = 0` and SGD's momentum raised TypeError, and a second
    backward replaced a 0-d .grad instead of adding into it (a held reference kept 2, not 5)."""
    for lib in (minigrad, torch):
        y = lib.tensor(3.0) * 2 if lib is torch else minigrad.Tensor(3.0) * 2
        y += 1
        assert y.item() == 7.0, lib
        y[...] = 0
        assert y.item() == 0.0, lib
    results = []
    for lib, sgd in ((minigrad, optim.SGD), (torch, torch.optim.SGD)):
        w = (minigrad.Tensor if lib is minigrad else torch.tensor)(1.0, requires_grad=True)
        opt = sgd([w], lr=0.1, momentum=0.9)
        for _ in range(3):
            opt.zero_grad()
            (w * 2.0).backward()
            opt.step()
        opt.zero_grad()
        (w * 2.0).backward()
        held = w.grad
        (w * 3.0).backward()
        results.append((w.item(), held.item(), held is w.grad))
    assert results[0][1:] == results[1][1:] == (5.0, True)
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-15)


def test_sgd_checks_its_params_and_steps_a_0d_parameter_with_momentum_and_decay_as_torch():
    """SGD(w) of one tensor iterated its rows (tensors of their own, .grad always None): step()
    trained nothing, silently. Non-tensors failed only in step(), non-leaves and negative
    momentum or weight decay were taken; a 0-d parameter with both momentum and weight decay
    raised TypeError on the second step."""
    w = minigrad.Tensor(np.ones(3), requires_grad=True)
    for lib, make in ((minigrad, lambda: w), (torch, lambda: torch.ones(3, requires_grad=True))):
        sgd = optim.SGD if lib is minigrad else torch.optim.SGD
        with pytest.raises(TypeError):
            sgd(make(), lr=0.1)
        with pytest.raises(TypeError):
            sgd([make(), 1.0], lr=0.1)
        with pytest.raises(ValueError, match="non-leaf"):
            sgd([make() * 2], lr=0.1)
        for bad in ({"momentum": -1}, {"weight_decay": -1}):
            with pytest.raises(ValueError):
                sgd([make()], lr=0.1, **bad)
    model = minigrad.nn.MLP([2, 3, 1], rng=np.random.default_rng(0))
    assert optim.SGD(model.named_parameters(), lr=0.1).params == model.parameters()
    with pytest.raises(ValueError, match="NaN"):
        optim.SGD([w], lr=float("nan"))
    results = []
    for lib, sgd in ((minigrad, optim.SGD), (torch, torch.optim.SGD)):
        b = (minigrad.Tensor if lib is minigrad else torch.tensor)(1.0, requires_grad=True)
        opt = sgd([b], lr=0.1, momentum=0.9, weight_decay=0.1)
        for _ in range(3):
            opt.zero_grad()
            (b * b).backward()
            opt.step()
        results.append(b.item())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-15)


@pytest.mark.parametrize("x_shape, w_shape", [
    ((2, 3, 4), (0, 4)), ((2, 3, 0), (5, 0)), ((4,), (0, 4)), ((0,), (5, 0)), ((2, 0, 4), (5, 4)),
    ((4, 3), (3,)), ((3,), (3,)), ((2, 5, 3), (3,))], ids=str)
def test_linear_with_no_features_or_a_1d_weight_has_torchs_gradients(x_shape, w_shape):
    """Its backward raised where the forward worked: reshape(-1, 0) of an empty gradient, and
    a 1-D weight (one output feature, its dim dropped) that the 2-D rule did not fit."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    bias = rng.standard_normal(w_shape[:1]) if len(w_shape) == 2 else None
    assert_matches_torch(lambda lib, x, w, *b: lib.linear(x, w, *b),
                         [x, w] + ([bias] if bias is not None else []))
    if len(w_shape) == 1:  # x @ w under the transforms and jit too (Linear's rules take 2-D)
        def loss(w, x):
            return (F.linear(x, w) ** 2).sum()
        expected = torch.func.grad(lambda w, x: (torch.nn.functional.linear(x, w) ** 2).sum())(
            torch.tensor(w), torch.tensor(x))
        for fn in (minigrad.func.grad(loss), hlo.jit(minigrad.func.grad(loss)),
                   lambda w, x: minigrad.func.vmap(minigrad.func.grad(loss), (None, 0))(
                       w, x.reshape((1,) + x.shape))[0]):
            np.testing.assert_allclose(fn(minigrad.Tensor(w), minigrad.Tensor(x)).data,
                                       expected.numpy(), rtol=1e-12)


def test_a_linear_layer_with_no_inputs_builds_as_torchs():
    """nn.Linear(0, 3) raised OverflowError (an init bound of 1/sqrt(0)); torch's builds, its
    bias 0. Negative sizes are a clear error."""
    for lib, make in ((minigrad, minigrad.nn.Linear), (torch, torch.nn.Linear)):
        layer = make(0, 3)
        assert tuple(layer.weight.shape) == (3, 0), lib
        np.testing.assert_array_equal(np.asarray(layer.bias.data), np.zeros(3))
    with pytest.raises(ValueError, match="must not be negative"):
        minigrad.nn.Linear(-1, 3)


@pytest.mark.parametrize("x_shape", [(4,), (2, 3, 4)], ids=str)
def test_linear_with_a_1d_weight_and_a_0d_bias_like_torch(x_shape):
    """torch takes a 0-d bias beside a 1-D weight (not for a 2-D input, where addmm refuses
    it; minigrad computes that one too)."""
    rng = np.random.default_rng(0)
    assert_matches_torch(lambda lib, x, w, b: lib.linear(x, w, b),
                         [rng.standard_normal(x_shape), rng.standard_normal(4),
                          np.array(rng.standard_normal())], rtol=1e-12)


@pytest.mark.parametrize("exponent", [0, 0.0, "tensor"])
def test_pow_zero_gradient_is_zero_at_inf_and_nan_and_under_inf_gradients_like_torch(exponent):
    """x ** 0 had gradient a * 0 times the upstream gradient: NaN at x = inf or NaN, and for an
    inf or NaN upstream gradient or tangent; torch gives zeros_like(x) (a number exponent) and
    where(b == 0, 0, ...) applied after the upstream gradient (a tensor one)."""
    a = np.array([np.inf, np.nan, -np.inf, 0.0, 2.0, -3.0])
    b = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 0.0])
    g = np.array([1.0, 1.0, np.inf, np.nan, np.inf, -np.inf])  # upstream gradient, and tangent
    found = []
    for lib in (minigrad, torch):
        T = minigrad.Tensor if lib is minigrad else torch.tensor
        f = (lambda x: x ** T(b)) if exponent == "tensor" else (lambda x: x ** exponent)
        x = T(a, requires_grad=True)
        f(x).backward(T(g))
        grad_of_sum = lib.func.grad(lambda x: f(x).sum())(T(a))
        tangent = lib.func.jvp(f, (T(a),), (T(g),))[1]
        found.append([np.asarray(t.data if lib is minigrad else t.detach())
                      for t in (x.grad, grad_of_sum, tangent)])
    for mine, theirs in zip(*found):
        np.testing.assert_array_equal(mine, theirs)


def test_cross_entropy_of_one_examples_logits_like_torch():
    """Logits of shape (classes,) with a 0-d target, torch's unbatched form and vmap's
    per-example loss, raised "logits must be (batch, classes)"."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(5)
    assert_matches_torch(lambda lib, x: lib.cross_entropy(x, np.array(3)), [x], rtol=1e-12)
    # A one-element target too: torch's forward takes it (its backward raises a size mismatch)
    loss = F.cross_entropy(minigrad.Tensor(x), [3])
    np.testing.assert_allclose(loss.data, torch.nn.functional.cross_entropy(
        torch.tensor(x), torch.tensor([3])).numpy(), rtol=1e-12)
    w, x, y = rng.standard_normal((4, 6)), rng.standard_normal((8, 6)), rng.integers(0, 4, 8)
    mine = minigrad.func.vmap(minigrad.func.grad(lambda w, x, y: F.cross_entropy(F.linear(x, w), y)),
                              (None, 0, 0))(*map(minigrad.Tensor, (w, x, y)))
    theirs = torch.func.vmap(torch.func.grad(lambda w, x, y: torch.nn.functional.cross_entropy(
        torch.nn.functional.linear(x, w), y)), (None, 0, 0))(*map(torch.tensor, (w, x, y)))
    np.testing.assert_allclose(mine.data, theirs.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="0-d target"):
        F.cross_entropy(minigrad.Tensor(np.ones(5)), [1, 2])


_SPECIAL = [float("nan"), float("inf"), float("-inf"), -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_SPECIAL) | st.floats(-4, 4), min_size=0, max_size=8),
       st.sampled_from([None, float("nan"), -1.0, 0.0, 0.5, 1.0]),
       st.sampled_from([None, float("nan"), -1.0, 0.0, 0.5, 1.0]))
@example([float("nan"), 0.0, 1.0, 2.0], 2.0, 1.0)  # min > max: every element max
def test_clamp_values_and_gradients_match_torch(values, low, high):
    """clamp at its bounds (the gradient passes there), at NaN (stays NaN, gradient 0), with a
    NaN bound (every element NaN), with min > max (every element max), one bound or both."""
    if low is None and high is None:
        with pytest.raises(RuntimeError, match="at least one of 'min' or 'max'"):
            minigrad.Tensor(np.array(values)).clamp()
        return
    x = minigrad.Tensor(np.array(values, dtype=np.float64), requires_grad=True)
    t = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    seed = np.arange(1.0, len(values) + 1)
    y, u = x.clamp(low, high), t.clamp(low, high)
    (y * minigrad.Tensor(seed)).sum().backward()
    (u * torch.tensor(seed)).sum().backward()
    np.testing.assert_array_equal(y.data, u.detach().numpy())
    np.testing.assert_array_equal(x.grad.data, t.grad.numpy())


def test_clamp_dtypes_views_and_errors_like_torch():
    for data, low, high in [([1, 5], 0, 2), ([True, False], 0, 1), ([1, 5], 0.5, 2)]:
        got = minigrad.Tensor(np.array(data)).clamp(low, high)
        want = torch.tensor(data).clamp(low, high)
        np.testing.assert_array_equal(got.data, want.numpy())
        # int bounds keep an integer tensor's dtype; a float bound gives the default float
        # (float64 in minigrad, float32 in torch: see dtypes.py)
        assert got.dtype == (np.float64 if isinstance(low, float) else want.numpy().dtype)
    assert minigrad.Tensor(np.float32([1, 5])).clamp(0.5, 2.0).dtype == np.float32
    assert minigrad.Tensor(3.0).clamp(0, 1).shape == ()
    assert minigrad.Tensor(np.zeros((0, 3))).clamp(0, 1).shape == (0, 3)
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(minigrad.Tensor(a).T[:, ::2].clamp(2, 9).data,
                                  torch.tensor(a).T[:, ::2].clamp(2, 9).numpy())
    with pytest.raises(TypeError, match="not supported for complex"):
        minigrad.Tensor(np.array([1 + 1j])).clamp(0, 1)
    with pytest.raises(TypeError, match="min must be a number.*where"):
        minigrad.Tensor([1.0]).clamp(minigrad.Tensor(0.0), 1)
    with pytest.raises(TypeError, match="max must be a number"):
        minigrad.Tensor([1.0]).clamp(0, "1")
