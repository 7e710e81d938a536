"""minigrad.func against torch.func, in float64 to 1e-10: every transform on every op of the op
table, per-example gradients of the digits MLP, the Hessian of a small net, and compositions."""

import collections
import contextlib
import gc
import re

import numpy as np
import pytest
import torch
import torch.func as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minigrad
from minigrad import func
from minigrad import functional as F
from minigrad.tests.op_table import CASES
from minigrad.tests.torch_compare import MinigradLib, TorchLib

torch.set_default_dtype(torch.float64)
TOL = dict(rtol=1e-10, atol=1e-10)
OPS = sorted(CASES)


def _np(t):
    return t.data if isinstance(t, minigrad.Tensor) else t.detach().numpy()


def _close(mine, theirs):
    mine = mine if isinstance(mine, (tuple, list)) else (mine,)
    theirs = theirs if isinstance(theirs, (tuple, list)) else (theirs,)
    assert len(mine) == len(theirs)
    for m, t in zip(mine, theirs):
        assert _np(m).shape == tuple(t.shape)
        np.testing.assert_allclose(_np(m), _np(t), **TOL)


def _setup(name, seed=0):
    """The case's function for each library, its minigrad and torch inputs, and a fixed random
    weighting `r` of its output (so that the scalar sum(f * r) exercises every output)."""
    fn, arrays = CASES[name]
    out_shape = np.shape(fn(MinigradLib, *[minigrad.Tensor(a) for a in arrays]).data)
    r = np.random.default_rng(seed).normal(size=out_shape)
    return (lambda *xs: fn(MinigradLib, *xs), lambda *xs: fn(TorchLib, *xs),
            [minigrad.Tensor(a) for a in arrays], [torch.tensor(a) for a in arrays], r)


def _scalar(f, r, lib):
    return lambda *xs: (f(*xs) * lib(r)).sum()


@pytest.mark.parametrize("name", OPS)
def test_grad_matches_torch_func(name):
    f, g, xs, ts, r = _setup(name)
    nums = tuple(range(len(xs)))
    _close(func.grad(_scalar(f, r, minigrad.Tensor), argnums=nums)(*xs),
           tf.grad(_scalar(g, r, torch.tensor), argnums=nums)(*ts))


@pytest.mark.parametrize("name", OPS)
def test_vjp_matches_torch_func(name):
    f, g, xs, ts, r = _setup(name)
    out, fn = func.vjp(f, *xs)
    out_t, fn_t = tf.vjp(g, *ts)
    _close(out, out_t)
    _close(fn(minigrad.Tensor(r)), fn_t(torch.tensor(r)))


@pytest.mark.parametrize("name", OPS)
def test_jvp_is_forward_mode_and_matches_torch_func(name):
    f, g, xs, ts, _ = _setup(name)
    rng = np.random.default_rng(1)
    tangents = [rng.normal(size=x.shape) for x in xs]
    out, tan = func.jvp(f, tuple(xs), tuple(minigrad.Tensor(t) for t in tangents))
    out_t, tan_t = tf.jvp(g, tuple(ts), tuple(torch.tensor(t) for t in tangents))
    _close([out, tan], [out_t, tan_t])


@pytest.mark.parametrize("name", OPS)
def test_jacrev_and_jacfwd_match_torch_func(name):
    f, g, xs, ts, _ = _setup(name)
    nums = tuple(range(len(xs)))
    expected = tf.jacrev(g, argnums=nums)(*ts)
    _close(func.jacrev(f, argnums=nums)(*xs), expected)
    _close(func.jacfwd(f, argnums=nums)(*xs), expected)


@pytest.mark.parametrize("name", OPS)
def test_hessian_matches_torch_func(name):
    f, g, xs, ts, r = _setup(name)
    _close(func.hessian(_scalar(f, r, minigrad.Tensor))(*xs),
           tf.hessian(_scalar(g, r, torch.tensor))(*ts))


def _batch(arrays, size=3, seed=2):
    rng = np.random.default_rng(seed)
    return [a + 0.1 * rng.normal(size=(size,) + a.shape) for a in arrays]


@pytest.mark.parametrize("which", ["all", "first", "last"])
@pytest.mark.parametrize("name", OPS)
def test_vmap_matches_torch_func(name, which):
    """All arguments batched, or only the first, or only the last (a bias: linear's rule raised
    for it)."""
    f, g, xs, _, _ = _setup(name)
    batch = _batch([x.data for x in xs])
    chosen = {"all": range(len(xs)), "first": [0], "last": [len(xs) - 1]}[which]
    args = [b if i in chosen else x.data for i, (b, x) in enumerate(zip(batch, xs))]
    dims = tuple(0 if i in chosen else None for i in range(len(xs)))
    _close(func.vmap(f, in_dims=dims)(*[minigrad.Tensor(a) for a in args]),
           tf.vmap(g, in_dims=dims)(*[torch.tensor(a) for a in args]))


@pytest.mark.parametrize("name", OPS)
def test_vmap_of_grad_matches_torch_func(name):
    f, g, xs, _, r = _setup(name)
    batch = _batch([x.data for x in xs], seed=3)
    nums = tuple(range(len(xs)))
    _close(func.vmap(func.grad(_scalar(f, r, minigrad.Tensor), argnums=nums))(
               *[minigrad.Tensor(b) for b in batch]),
           tf.vmap(tf.grad(_scalar(g, r, torch.tensor), argnums=nums))(
               *[torch.tensor(b) for b in batch]))


@pytest.mark.parametrize("which", ["all", "outer only", "inner only"])
@pytest.mark.parametrize("name", OPS)
def test_vmap_of_vmap_matches_torch_func(name, which):
    """Nested vmap (the inner batch folded into the outer's dim 0: levels.FoldLevel): every
    argument batched by both, the first by the outer vmap only (shared by the inner one), or
    by the inner one only (shared by the outer)."""
    f, g, xs, _, _ = _setup(name)
    if which != "all" and len(xs) == 1:
        pytest.skip("one argument: a vmap that batches none is an error")
    both = [b + 0.1 * np.random.default_rng(4).normal(size=(2,) + b.shape)
            for b in _batch([x.data for x in xs])]  # (2, 3, ...): outer 2, inner 3
    args = [a[:, 0] if (which == "outer only" and i == 0) else
            a[0] if (which == "inner only" and i == 0) else a for i, a in enumerate(both)]
    outer = tuple(None if (which == "inner only" and i == 0) else 0 for i in range(len(xs)))
    inner = tuple(None if (which == "outer only" and i == 0) else 0 for i in range(len(xs)))
    run = lambda lib, h, tensor: lib.vmap(lib.vmap(h, in_dims=inner), in_dims=outer)(
        *[tensor(a) for a in args])
    _close(run(func, f, minigrad.Tensor), run(tf, g, torch.tensor))


@pytest.mark.parametrize("name", OPS)
def test_vmap_of_vmap_of_grad_and_of_jvp_matches_torch_func(name):
    f, g, xs, _, r = _setup(name)
    both = [np.stack([b, b[::-1] * 0.5]) for b in _batch([x.data for x in xs], seed=5)]
    nums = tuple(range(len(xs)))
    tangents = [np.random.default_rng(6).normal(size=a.shape) for a in both]
    for lib, h, tensor in ((func, f, minigrad.Tensor), (tf, g, torch.tensor)):
        scalar = _scalar(h, r, tensor)
        grads = lib.vmap(lib.vmap(lib.grad(scalar, argnums=nums)))(*[tensor(a) for a in both])
        jvps = lib.vmap(lib.vmap(lambda *ab: lib.jvp(h, ab[:len(xs)], ab[len(xs):])[1]))(
            *[tensor(a) for a in both + tangents])
        if lib is func:
            mine = list(grads) + [jvps]
    _close(mine, list(grads) + [jvps])


def test_vmap_of_vmap_takes_in_dims_and_out_dims_and_nests_deeper_like_torch_func():
    rng = np.random.default_rng(8)
    x, y, w = rng.normal(size=(4, 2, 3)), rng.normal(size=(3, 4)), rng.normal(size=(5, 3))
    cases = [
        lambda lib, L: lib.vmap(lib.vmap(lambda a, b: (a * b).sum() + b, in_dims=(0, None)),
                                in_dims=(0, 1), out_dims=1),
        lambda lib, L: lib.vmap(lib.vmap(lambda a, b: L.linear(a, b).tanh(), in_dims=(0, None),
                                         out_dims=1), in_dims=(0, None)),
        lambda lib, L: lib.vmap(lib.vmap(lib.vmap(lambda a, b: a * b.sum())), in_dims=(0, None)),
    ]
    args = [(x, y), (x, w), (x, x[0])]
    for case, (a, b) in zip(cases, args):
        mine = case(func, MinigradLib)(minigrad.Tensor(a), minigrad.Tensor(b))
        theirs = case(tf, TorchLib)(torch.tensor(a), torch.tensor(b))
        _close(mine, theirs)
    # differentiated from outside, as torch's nested vmap is
    loss = lambda lib, L, t: lib.vmap(lib.vmap(lambda r: (r * r).tanh().sum()))(t).sum()
    xm, xt = minigrad.Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    loss(func, MinigradLib, xm).backward()
    loss(tf, TorchLib, xt).backward()
    _close(xm.grad, xt.grad)


NESTED = {  # compositions with a vmap inside or around another transform's own vmap
    "jacfwd(vmap)": lambda lib, L, x, w, y: lib.jacfwd(
        lambda v: lib.vmap(lambda r: (r * v).tanh().sum())(x))(w[0]),
    "vmap(jvp(vmap))": lambda lib, L, x, w, y: lib.vmap(lambda d: lib.jvp(
        lambda v: lib.vmap(lambda r: (r * v).sum())(x), (w[0],), (d,))[1])(w),
    "hessian(vmap)": lambda lib, L, x, w, y: lib.hessian(
        lambda v: lib.vmap(lambda r: L.linear(r, v).tanh().sum())(x).sum())(w),
    "jacrev(vmap)": lambda lib, L, x, w, y: lib.jacrev(
        lambda v: lib.vmap(lambda r: L.linear(r, v).tanh())(x))(w),
    "vmap(vmap(jacrev))": lambda lib, L, x, w, y: lib.vmap(lib.vmap(lib.jacrev(
        lambda r: (r * r).exp())))(x.reshape(2, 3, 4)),
    "vmap(hessian) shared w, targets": lambda lib, L, x, w, y: lib.vmap(lib.hessian(
        lambda v, r, t: L.cross_entropy(L.linear(r[None], v), t[None])),
        in_dims=(None, 0, 0))(w, x, y),
    "vmap(vmap(grad)) shared w": lambda lib, L, x, w, y: lib.vmap(lib.vmap(lib.grad(
        lambda v, r: (L.linear(r, v) ** 2).sum()), in_dims=(None, 0)), in_dims=(None, 0))(
        w, x.reshape(2, 3, 4)),
    "vmap(jacfwd(grad)) of max": lambda lib, L, x, w, y: lib.vmap(lib.jacfwd(lib.grad(
        lambda r: (r.max(0).values * r).sum())))(x.reshape(3, 2, 4)),
    # found by a review of nested vmap: a tangent or cotangent only the outer vmap batches,
    # the differentiated input and an operand of different levels, jacfwd twice inside vmap,
    # and jacfwd of a function calling vmap(jacfwd) of a closure over the outer input
    "vmap(vmap(jvp)) outer tangent": lambda lib, L, x, w, y: lib.vmap(
        lambda xs, d: lib.vmap(lambda a: lib.jvp(lambda r: r * r, (a,), (d,))[1])(xs))(
        x.reshape(2, 3, 4), w[:2]),
    "vmap(vmap(vjp)) outer cotangent": lambda lib, L, x, w, y: lib.vmap(
        lambda c: lib.vmap(lambda a: lib.vjp(lambda r: r * r, a)[1](c)[0])(w))(x[:2]),
    "vmap(vmap(jacfwd)) mixed levels": lambda lib, L, x, w, y: lib.vmap(
        lambda p: lib.vmap(lambda q: lib.jacfwd(lambda r: r * q)(p))(w))(x[:2]),
    "vmap(jacfwd(jacfwd))": lambda lib, L, x, w, y: lib.vmap(lib.jacfwd(lib.jacfwd(
        lambda r: r * r.sum())))(x[:3, :2]),
    "jacfwd(vmap(jacfwd))": lambda lib, L, x, w, y: lib.jacfwd(lambda v: lib.vmap(lib.jacfwd(
        lambda r: (r * v).tanh()))(x[:3, :2]))(w[0, :2]),
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_transforms_nested_around_vmap_match_torch_func(name):
    rng = np.random.default_rng(10)
    x, w, y = rng.normal(size=(6, 4)), rng.normal(size=(3, 4)), rng.integers(0, 3, 6)
    _close(NESTED[name](func, MinigradLib, *map(minigrad.Tensor, (x, w, y))),
           NESTED[name](tf, TorchLib, *map(torch.tensor, (x, w, y))))


def test_indexing_with_a_batched_index_tensor_inside_vmap_is_refused_not_misread():
    # (documented as refused, it indexed with the whole batch's array: shape (3, 3) for (3,))
    x = minigrad.Tensor(np.arange(12.0).reshape(3, 4))
    k = minigrad.Tensor(np.array([0, 1, 2]))
    for call in (lambda: func.vmap(lambda a, i: a[i])(x, k),
                 lambda: func.vmap(lambda i: x[0][i])(k),
                 lambda: func.vmap(lambda xs: func.vmap(lambda i: xs[i])(k))(
                     minigrad.Tensor(np.ones((2, 4))))):
        with pytest.raises(NotImplementedError, match="batched index tensor"):
            call()


def test_jacobians_and_hessian_inside_vmap_take_one_pass_over_the_basis():
    """Inside vmap, jacrev, jacfwd and hessian vmap over their basis too (nested vmap), as
    outside: each operation runs a bounded number of times, not once per row or column (they
    took a pass per row or column: vmap(hessian) of an MLP-like f 4.5x torch.func's time)."""
    x = minigrad.Tensor(np.random.default_rng(9).normal(size=(4, 12)))
    for transform in (func.jacrev, func.jacfwd, func.hessian):
        f = (lambda v: (v * 0.1).exp().sum()) if transform is func.hessian else (
            lambda v: (v * 0.1).exp())
        with _exp_calls() as calls:
            func.vmap(transform(f))(x)
        assert 1 <= len(calls) <= 3, (transform.__name__, calls)


@contextlib.contextmanager
def _exp_calls():
    """The shapes of the arrays Exp.forward computes on while the block runs."""
    calls = []
    original = minigrad.ops.Exp.forward

    def counting(ctx, a):
        calls.append(a.shape)
        return original(ctx, a)
    minigrad.ops.Exp.forward = staticmethod(counting)
    try:
        yield calls
    finally:
        minigrad.ops.Exp.forward = staticmethod(original)


# -- the digits MLP ---------------------------------------------------------------------------

def _mlp_loss(F_linear, F_relu, F_ce):
    def loss(params, x, y):
        w1, b1, w2, b2 = params
        return F_ce(F_linear(F_relu(F_linear(x[None], w1, b1)), w2, b2), y[None])
    return loss


mg_loss = _mlp_loss(F.linear, F.relu, F.cross_entropy)
torch_loss = _mlp_loss(torch.nn.functional.linear, torch.relu, torch.nn.functional.cross_entropy)


def _mlp_params(sizes=(64, 32, 10), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) * 0.3 for s in ((sizes[1], sizes[0]), (sizes[1],),
                                               (sizes[2], sizes[1]), (sizes[2],))]


def test_per_example_gradients_of_the_digits_mlp_match_torch_func():
    from minigrad.train import load_digits_split
    x, y, _, _ = load_digits_split(seed=0, dtype=np.float64)
    x, y = x[:64], y[:64]
    params = _mlp_params()
    mine = func.vmap(func.grad(mg_loss), in_dims=(None, 0, 0))(
        [minigrad.Tensor(p) for p in params], minigrad.Tensor(x), minigrad.Tensor(y))
    theirs = tf.vmap(tf.grad(torch_loss), in_dims=(None, 0, 0))(
        [torch.tensor(p) for p in params], torch.tensor(x), torch.tensor(y))
    assert isinstance(mine, list) and [m.shape for m in mine] == [(64,) + p.shape for p in params]
    _close(mine, theirs)
    # The per-example gradients average to the batch gradient.
    batch = func.grad(lambda ps: F.cross_entropy(F.linear(F.relu(F.linear(
        minigrad.Tensor(x), ps[0], ps[1])), ps[2], ps[3]), y))([minigrad.Tensor(p) for p in params])
    for m, b in zip(mine, batch):
        np.testing.assert_allclose(m.data.mean(axis=0), b.data, **TOL)


def test_hessian_of_a_small_net_matches_torch_func():
    params = _mlp_params((4, 3, 2), seed=1)
    x, y = np.random.default_rng(2).normal(size=4), np.array(1)
    for argnum in range(4):
        def f(p, lib_loss=mg_loss):
            ps = [minigrad.Tensor(q) for q in params]
            ps[argnum] = p
            return lib_loss(ps, minigrad.Tensor(x), minigrad.Tensor(y))

        def g(p):
            ps = [torch.tensor(q) for q in params]
            ps[argnum] = p
            return torch_loss(ps, torch.tensor(x), torch.tensor(y))
        _close(func.hessian(f)(minigrad.Tensor(params[argnum])), tf.hessian(g)(torch.tensor(params[argnum])))


# -- semantics of the API ---------------------------------------------------------------------

def test_grad_argnums_and_has_aux_like_torch_func():
    def f(a, b):  # the same code runs on minigrad and torch tensors
        return (a * b.exp()).sum(), {"aux": a * 2}
    a, b = np.arange(3.0), np.ones(3)
    (ga, gb), aux = func.grad(f, argnums=(0, 1), has_aux=True)(minigrad.Tensor(a), minigrad.Tensor(b))
    (ta, tb), taux = tf.grad(f, argnums=(0, 1), has_aux=True)(torch.tensor(a), torch.tensor(b))
    _close([ga, gb, aux["aux"]], [ta, tb, taux["aux"]])
    assert func.grad(lambda x: (x * x).sum(), argnums=0)(minigrad.Tensor(a)).shape == (3,)


def test_grad_of_a_non_scalar_is_an_error_like_torch_func():
    with pytest.raises(RuntimeError, match="grad: f must return a scalar"):
        func.grad(lambda x: x * 2)(minigrad.Tensor(np.ones(3)))


@pytest.mark.parametrize("f", [lambda x: (x * (1 + 2j)).sum(), lambda x: (x * x).sum()])
def test_grad_of_a_complex_output_is_an_error_like_torch_func(f):
    # (it returned the gradient of the output's real part)
    for lib, x in ((func, minigrad.Tensor(np.array([1.0, 2.0]))),
                   (tf, torch.tensor([1.0, 2.0], dtype=torch.float64))):
        arg = x if f(x).dtype != x.dtype else x * (1 + 0j)  # (the second: a complex input)
        with pytest.raises(RuntimeError, match="only for real scalar outputs but got "
                                               "(torch.)?complex128"):
            lib.grad(f)(arg)


@pytest.mark.parametrize("transform", ["vjp", "jvp", "jacrev", "jacfwd", "hessian"])
@pytest.mark.parametrize("output", ["number", "array", "tuple"])
def test_a_non_tensor_output_is_an_error_like_torch_func(transform, output):
    # (vjp returned the number and a vjp_fn that failed when called; jvp, jacrev and jacfwd
    # raised AttributeError)
    make = {"number": lambda x: 3.0, "array": lambda x: np.ones(2),
            "tuple": lambda x: (x * 2, 3.0)}[output]
    for lib, x, convert in ((func, minigrad.Tensor(np.array([1.0, 2.0])), lambda v: v),
                            (tf, torch.tensor([1.0, 2.0], dtype=torch.float64),
                             lambda v: torch.as_tensor(v) if output == "array" else v)):
        f = lambda t: convert(make(t))
        call = {"vjp": lambda: lib.vjp(f, x), "jvp": lambda: lib.jvp(f, (x,), (x,))}.get(
            transform, lambda: getattr(lib, transform)(f)(x))
        if output == "array" and lib is tf:
            call()  # (torch's array is a tensor)
            continue
        name = "jvp(f, primals, tangents)" if transform in ("jvp", "jacfwd") else "vjp(f, *primals)"
        with pytest.raises(RuntimeError, match=re.escape(name) + ": expected f\\(\\*primals\\) "
                                               "to return only tensors, got unsupported type"):
            call()


def test_grad_leaves_inputs_and_their_grad_alone_and_composes_with_backward():
    x = minigrad.Tensor(np.array([0.5, -1.0]), requires_grad=True)
    g = func.grad(lambda t: (t.tanh() ** 2).sum())(x)
    assert x.grad is None
    g.sum().backward()  # differentiable, as torch.func.grad under torch.autograd
    xt = torch.tensor([0.5, -1.0], requires_grad=True)
    tf.grad(lambda t: (t.tanh() ** 2).sum())(xt).sum().backward()
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), **TOL)


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev", "hessian", "vmap(grad)"])
def test_transforms_ignore_an_outer_no_grad_like_torch_func(transform):
    """A transform's result does not depend on a no_grad around it; the graph outside is still
    cut (the result does not require grad)."""
    def apply(lib, tensor):
        f = lambda x: (x ** 3).sum()
        x = tensor(np.array([[1.0, 2.0], [3.0, -1.0]]), requires_grad=True)
        return {"grad": lambda: lib.grad(f)(x),
                "vjp": lambda: lib.vjp(lambda x: x ** 3, x)[1](x * 0 + 1)[0],
                "jacrev": lambda: lib.jacrev(lambda x: x ** 3)(x),
                "hessian": lambda: lib.hessian(f)(x),
                "vmap(grad)": lambda: lib.vmap(lib.grad(f))(x)}[transform]()
    with minigrad.no_grad():
        mine = apply(func, minigrad.Tensor)
    with torch.no_grad():
        theirs = apply(tf, torch.tensor)
    _close(mine, theirs)
    assert not mine.requires_grad and minigrad.is_grad_enabled()


def test_a_no_grad_inside_f_is_respected_like_torch_func():
    def outer(lib, tensor, no_grad):
        def f(x):
            with no_grad():
                inner = lib.grad(lambda y: (y * x).sum())(tensor(np.ones(3)))
            return (inner * x).sum()
        return lib.grad(f)(tensor(np.array([1.0, 2.0, 3.0])))
    _close(outer(func, minigrad.Tensor, minigrad.no_grad), outer(tf, torch.tensor, torch.no_grad))


def test_nested_transforms_differentiate_through_a_closed_over_outer_variable_like_torch_func():
    w = np.array([1.0, 2.0, 3.0])

    def run(lib, tensor):
        inner = lambda x: lib.grad(lambda y: (y * x * x).sum())(tensor(w))
        return lib.grad(lambda x: inner(x).sum())(tensor(w)), lib.jacrev(inner)(tensor(w))
    _close(run(func, minigrad.Tensor), run(tf, torch.tensor))


def test_grad_is_recorded_only_when_something_outside_can_differentiate_it():
    w = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)  # a parameter f closes over
    g = func.grad(lambda y: (y * w).sum() ** 2)(minigrad.Tensor(np.ones(2)))
    g.sum().backward()
    wt = torch.tensor([1.0, 2.0], requires_grad=True)
    tf.grad(lambda y: (y * wt).sum() ** 2)(torch.ones(2)).sum().backward()
    _close(w.grad, wt.grad)
    assert not func.grad(lambda y: (y * 2).sum() ** 2)(minigrad.Tensor(np.ones(2))).requires_grad


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_vmap_of_jvp_of_max_takes_each_examples_maximum_like_torch_func(dim):
    rng = np.random.default_rng(6)
    x, v = rng.normal(size=(3, 2, 4)), rng.normal(size=(3, 2, 4))
    f = lambda a: a.max() if dim is None else a.max(dim, keepdim=dim == -1).values
    mine = func.vmap(lambda x, v: func.jvp(f, (x,), (v,))[1])(minigrad.Tensor(x), minigrad.Tensor(v))
    theirs = tf.vmap(lambda x, v: tf.jvp(f, (x,), (v,))[1])(torch.tensor(x), torch.tensor(v))
    _close(mine, theirs)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "vmap(jacrev)"])
@pytest.mark.parametrize("argnums", [1, (0, 1)])
def test_jacobians_of_several_outputs_give_one_per_output_like_torch_func(transform, argnums):
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(2, 3)), rng.normal(size=(2, 2))

    def run(lib, tensor):
        f = lambda a, b: (a * 2, {"t": (a.sum() * b).tanh()})
        jac = getattr(lib, transform.replace("vmap(", "").rstrip(")"))(f, argnums=argnums)
        if transform.startswith("vmap"):
            return lib.vmap(jac)(tensor(x), tensor(y))
        return jac(tensor(x[0]), tensor(y[0]))
    mine, theirs = run(func, minigrad.Tensor), run(tf, torch.tensor)
    assert isinstance(mine, tuple) and isinstance(mine[1], dict)
    _close(minigrad.levels.flatten(mine)[0], torch.utils._pytree.tree_leaves(theirs))


def test_hessian_over_several_arguments_gives_the_blocks_like_torch_func():
    rng = np.random.default_rng(8)
    x, y = rng.normal(size=3), rng.normal(size=2)
    f = lambda a, b: ((a * a).sum() * b).tanh().sum()
    mine = func.hessian(f, argnums=(0, 1))(minigrad.Tensor(x), minigrad.Tensor(y))
    theirs = tf.hessian(f, argnums=(0, 1))(torch.tensor(x), torch.tensor(y))
    assert len(mine) == 2 and all(len(row) == 2 for row in mine)
    for row, expected in zip(mine, theirs):
        _close(row, expected)


def test_vmap_of_grad_takes_and_returns_namedtuples_like_torch_func():
    P = collections.namedtuple("P", "w b")
    f = lambda p, x: (p.w * x + p.b).sum()
    w, b, x = np.array([1.0, -2.0]), np.zeros(2), np.arange(6.0).reshape(3, 2)
    ours = func.vmap(func.grad(f), in_dims=(None, 0))(P(minigrad.Tensor(w), minigrad.Tensor(b)),
                                                       minigrad.Tensor(x))
    theirs = tf.vmap(tf.grad(f), in_dims=(None, 0))(P(torch.tensor(w), torch.tensor(b)),
                                                     torch.tensor(x))
    assert type(ours) is P
    for o, t in zip(ours, theirs):
        _close(o, t)


def test_vmap_takes_in_dims_shaped_as_its_arguments_like_torch_func():
    rng = np.random.default_rng(9)
    x, y, w = rng.normal(size=(4, 3)), rng.normal(size=(3, 4)), rng.normal(size=3)
    f = lambda p, d: p[0] * p[1] + d["w"]
    in_dims = ((0, 1), {"w": None})
    mine = func.vmap(f, in_dims=in_dims)((minigrad.Tensor(x), minigrad.Tensor(y)),
                                         {"w": minigrad.Tensor(w)})
    theirs = tf.vmap(f, in_dims=in_dims)((torch.tensor(x), torch.tensor(y)), {"w": torch.tensor(w)})
    _close(mine, theirs)
    with pytest.raises(ValueError, match="does not match the structure of its argument"):
        func.vmap(lambda p: p[0], in_dims=((0,),))((minigrad.Tensor(x), minigrad.Tensor(y)))


def test_vmap_in_dims_out_dims_and_unbatched_outputs_like_torch_func():
    a = np.random.default_rng(0).normal(size=(4, 3, 2))
    w = np.random.default_rng(1).normal(size=(3,))
    mine = func.vmap(lambda x, v: (x @ v, v * 2), in_dims=(2, None), out_dims=(1, 0))(
        minigrad.Tensor(a), minigrad.Tensor(w))
    theirs = tf.vmap(lambda x, v: (x @ v, v * 2), in_dims=(2, None), out_dims=(1, 0))(
        torch.tensor(a), torch.tensor(w))
    _close(mine, theirs)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian", "vmap(jacrev)",
                                       "vmap(hessian)"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jacobians_of_tree_arguments_are_trees_of_jacobians_like_torch_func(transform, argnums):
    # Output structure, then argnums, then each argument's own structure (dict, list,
    # namedtuple), as torch.func nests them.
    P = collections.namedtuple("P", "w b")
    rng = np.random.default_rng(10)
    p = {"a": rng.normal(size=(4, 3)), "ab": [rng.normal(size=(4, 2, 2)), rng.normal(size=(4, 3))]}
    w, b = rng.normal(size=(4, 3)), rng.normal(size=(4,))

    def run(lib, tensor):
        def f(p, q):
            s = ((p["a"] * q.w).sum() + (p["ab"][0] ** 2).sum() * p["ab"][1] + q.b).tanh()
            return s.sum() if "hessian" in transform else (s, {"t": p["a"] * s.sum()})
        jac = getattr(lib, transform.replace("vmap(", "").rstrip(")"))(f, argnums=argnums)
        args = ({"a": tensor(p["a"]), "ab": [tensor(x) for x in p["ab"]]},
                P(tensor(w), tensor(b)))
        if transform.startswith("vmap"):
            return lib.vmap(jac, in_dims=({"a": 0, "ab": [0, None]}, P(None, 0)))(*args)
        firsts = [minigrad.levels.flatten(a) for a in args]  # one example of each
        return jac(*[minigrad.levels.unflatten(spec, [x[0] for x in xs]) for xs, spec in firsts])
    mine, theirs = run(func, minigrad.Tensor), run(tf, torch.tensor)
    assert minigrad.levels.flatten(mine)[1] == minigrad.levels.flatten(
        torch.utils._pytree.tree_map(lambda x: 0, theirs))[1]
    _close(minigrad.levels.flatten(mine)[0], torch.utils._pytree.tree_leaves(theirs))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
@pytest.mark.parametrize("case", ["mask", "if", "item", "calls vmap"])
def test_jacobians_of_f_that_reads_values_or_calls_vmap_match_torch_func(transform, case):
    """f runs once, unbatched (a mask from x, an if on a value, .item()); f may call vmap
    (a vmap nested in the Jacobian's own). One-pass Jacobians that re-ran f over the basis
    raised on each (found by a review)."""
    fs = {"mask": lambda lib: lambda a: (a[a > 0] * 2).exp(),
          "if": lambda lib: lambda a: (a * 2 if a.sum() > 0 else a * 3).tanh(),
          "item": lambda lib: lambda a: a * a.sum().item() * a,
          "calls vmap": lambda lib: lambda a: lib.vmap(lambda r: (r * r).exp().sum())(
              a.reshape(2, 3))}
    x = np.array([0.5, -1.0, 2.0, 3.0, -0.2, 0.7])

    def run(lib, tensor):
        f = fs[case](lib)
        g = (lambda a: f(a).sum()) if transform == "hessian" else f
        return getattr(lib, transform)(g)(tensor(x))
    _close(run(func, minigrad.Tensor), run(tf, torch.tensor))


def test_an_integer_output_of_a_function_is_a_constant_like_torch():
    """An operation's output of an integer dtype required grad, so gradients flowed through a
    user's Function that floors (a review): torch's is a constant to what uses it."""
    class Floor(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            return minigrad.Tensor(np.floor(x.data).astype(np.int64))

        @staticmethod
        def backward(ctx, grad):
            return grad * 1.0

    class TorchFloor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.floor(x).long()

        @staticmethod
        def backward(ctx, grad):
            return grad * 1.0
    x = np.array([0.5, 2.0, 3.0])
    y = Floor.apply(minigrad.Tensor(x, requires_grad=True))
    t = TorchFloor.apply(torch.tensor(x, requires_grad=True))
    assert not y.requires_grad and y.grad_fn is None and not t.requires_grad
    np.testing.assert_array_equal(func.grad(lambda v: Floor.apply(v).sum())(
        minigrad.Tensor(x)).data, np.zeros(3))  # (torch.func's grad gives zeros too)
    xt = torch.tensor(x, requires_grad=True)
    (TorchFloor.apply(xt) * xt).sum().backward()
    _close(func.grad(lambda v: (Floor.apply(v) * v).sum())(minigrad.Tensor(x)), xt.grad)


def test_jacrev_of_a_function_whose_backward_computes_on_arrays_takes_a_pass_per_row():
    """A batched backward (vmap of vjp_fn) cannot see the batch dim of a user's Function whose
    backward computes on arrays: each row got the summed gradient. vjp_fn under vmap refuses
    such a graph, and jacrev falls back to a pass per row."""
    class Cube(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return minigrad.Tensor(x.data ** 3)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return minigrad.Tensor(grad.data * 3 * x.data ** 2)
    x = np.array([1.0, 2.0, 3.0])
    mine = func.jacrev(lambda a: Cube.apply(a) * 2)(minigrad.Tensor(x))
    np.testing.assert_array_equal(mine.data, np.diag(6 * x ** 2))
    _, fn = func.vjp(lambda a: Cube.apply(a) * 2, minigrad.Tensor(x))
    with pytest.raises(NotImplementedError, match="vjp_fn under vmap: Cube has no batching rule"):
        func.vmap(fn)(minigrad.Tensor(np.eye(3)))


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev"])
def test_a_transforms_backward_stops_at_its_inputs_like_torch_func(transform):
    """It ran on into the graph that made a non-leaf input: once freed by a backward(), that
    raised 'backward through the graph a second time' (found by a review)."""
    def run(lib, tensor):
        x0 = tensor(np.array([1.0, 2.0]), requires_grad=True)
        x = x0 * x0
        (x * 3).sum().backward()  # frees x's graph
        f = lambda a: a.exp().sum() if transform == "grad" else a.exp()
        if transform == "vjp":
            return lib.vjp(f, x)[1](tensor(np.ones(2)))
        return getattr(lib, transform)(f)(x)
    _close(run(func, minigrad.Tensor), run(tf, torch.tensor))


@pytest.mark.parametrize("grad", [False, True])
def test_vmap_of_jvp_at_one_point_gives_the_primal_output_unbatched_like_torch_func(grad):
    """(A copy of the primal per tangent made f(w) batched: out_dims=None raised. A copy of
    grad's input per tangent did the same for jvp(grad(f)), and f reading x.data saw all the
    copies: hessian was silently off by the batch size; found by two reviews.)"""
    w, vs = np.array([1.0, 2.0]), np.random.default_rng(13).normal(size=(4, 2))
    f = lambda a: (a * a * a).sum() * float(a.data.sum()) if grad else (a * a).exp()

    def run(lib, tensor):
        g = lib.grad(f) if grad else f
        return lib.vmap(lambda v: lib.jvp(g, (tensor(w),), (v,)), out_dims=(None, 0))(tensor(vs))
    mine, theirs = run(func, minigrad.Tensor), run(tf, torch.tensor)
    assert mine[0].shape == (2,)
    _close(mine, theirs)
    if grad:
        _close(func.hessian(f)(minigrad.Tensor(w)), tf.hessian(f)(torch.tensor(w)))


def test_per_example_hessian_vector_products_match_torch_func():
    """vmap over (tangent, example) pairs at shared parameters: the vmap batches data as well
    as tangents, so the gradient's shared input is copied along the batch before f runs (each
    example's gradient its own), and f runs once, as torch.func's (a review found it run
    twice). A tangent also used as a value batches f's output after all: vjp then runs f again
    with copies."""
    rng = np.random.default_rng(15)
    w, vs, xs = rng.normal(size=3), rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    loss = lambda w, x: ((w * x).sum().tanh() + (w * w).sum()) * 2
    calls = []

    def run(lib, tensor):
        def f(w, x):
            calls.append(lib)
            return loss(w, x)
        hvp = lambda v, x: lib.jvp(lib.grad(lambda w: f(w, x)), (tensor(w),), (v,))[1]
        per_example = lib.vmap(hvp)(tensor(vs), tensor(xs))
        value_too = lib.vmap(lambda v: lib.jvp(lib.grad(lambda u: loss(u, v)), (tensor(w),),
                                               (v,))[1])(tensor(vs))
        return per_example, value_too
    _close(run(func, minigrad.Tensor), run(tf, torch.tensor))
    assert calls == [func, tf]


def test_jacfwd_and_hessian_over_a_tree_run_f_once_like_torch_func():
    """One vmap over the block basis of every input tensor (it was a vmap per tensor: f ran
    once for each)."""
    rng = np.random.default_rng(16)
    p = {"w": rng.normal(size=(2, 3)), "b": rng.normal(size=2)}
    x = rng.normal(size=3)
    calls = []

    def run(lib, tensor):
        def f(q):
            calls.append(lib)
            return ((q["w"] @ tensor(x) + q["b"]).tanh() ** 2).sum()
        params = {k: tensor(v) for k, v in p.items()}
        return lib.hessian(f)(params), lib.jacfwd(lambda q: (q["w"] * 2, q["b"].exp()))(params)
    mine, theirs = run(func, minigrad.Tensor), run(tf, torch.tensor)
    assert calls == [func, tf]
    _close(minigrad.levels.flatten(mine)[0], torch.utils._pytree.tree_leaves(theirs))


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 9])
def test_jacrev_in_chunks_of_rows_over_trees_matches_torch_func(chunk_size):
    rng = np.random.default_rng(12)
    x, y = rng.normal(size=3), rng.normal(size=(2, 3))
    f = lambda p: ((p["a"] * p["b"]).tanh(), p["a"].sum() * 2)  # 6 + 1 rows
    mine = func.jacrev(f, chunk_size=chunk_size)({"a": minigrad.Tensor(x), "b": minigrad.Tensor(y)})
    theirs = tf.jacrev(f, chunk_size=chunk_size)({"a": torch.tensor(x), "b": torch.tensor(y)})
    _close(minigrad.levels.flatten(mine)[0], torch.utils._pytree.tree_leaves(theirs))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "vmap(jacrev)", "vmap(jacfwd)"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jacobians_with_has_aux_return_f_aux_like_torch_func(transform, argnums):
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=(2, 3)), rng.normal(size=(2, 2, 3))

    def f(a, b):
        out = (a * b).tanh()
        return out, {"sum": out.sum(), "a2": a * 2}

    def run(lib, tensor):
        jac = getattr(lib, transform.replace("vmap(", "").rstrip(")"))(
            f, argnums=argnums, has_aux=True)
        if transform.startswith("vmap"):
            return lib.vmap(jac)(tensor(x), tensor(y))
        return jac(tensor(x[0]), tensor(y[0]))
    (mine, aux), (theirs, their_aux) = run(func, minigrad.Tensor), run(tf, torch.tensor)
    _close(minigrad.levels.flatten(mine)[0], torch.utils._pytree.tree_leaves(theirs))
    assert sorted(aux) == ["a2", "sum"]
    _close([aux["a2"], aux["sum"]], [their_aux["a2"], their_aux["sum"]])
    assert not aux["a2"].requires_grad  # cut from the transform's graph, as torch.func's
    # (minigrad's aux may hold other things than tensors; torch.func's may not)
    assert func.jacfwd(lambda a: (a * 2, "tag"), has_aux=True)(minigrad.Tensor(x[0]))[1] == "tag"
    with pytest.raises(ValueError, match="f must return \\(output, aux\\)"):
        getattr(func, transform.replace("vmap(", "").rstrip(")"))(lambda a, b: a * b, has_aux=True)(
            minigrad.Tensor(x[0]), minigrad.Tensor(y[0]))


@pytest.mark.parametrize("transform", ["vjp", "grad", "jacrev", "jacfwd"])
def test_an_aux_that_reaches_an_outer_variable_stays_differentiable_like_torch_func(transform):
    """The aux was cut from the graph whenever the output was (its gradient silently 0), though
    it may reach a variable that the output does not (found by a review)."""
    x = np.array([1.0, 2.0, 3.0])

    def outer(lib, tensor):
        def inner(a):
            f = lambda b: ((b * b).exp().sum() if transform == "grad" else (b * b).exp(), b * a)
            if transform == "vjp":
                return lib.vjp(f, tensor(x), has_aux=True)[2].sum()
            return getattr(lib, transform)(f, has_aux=True)(tensor(x))[1].sum()
        return lib.grad(inner)(tensor(x))
    mine = outer(func, minigrad.Tensor)
    _close(mine, outer(tf, torch.tensor))
    np.testing.assert_array_equal(mine.data, x)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobians_with_empty_inputs_or_outputs_are_empty_like_torch_func(transform):
    # (jacrev of an empty output and jacfwd of an empty input raised; torch.func's jacfwd of an
    # empty input raises an IndexError of its own, its jacrev gives the empty Jacobian.)
    jac = getattr(func, transform)
    x = minigrad.Tensor(np.ones(3, np.float32))
    assert jac(lambda t: t[:0] * 2)(x).shape == (0, 3)
    assert jac(lambda t: t[:0] * 2)(x).dtype == np.float32
    assert jac(lambda t: t.sum() * 2)(x[:0]).shape == (0,)
    assert tf.jacrev(lambda t: t[:0] * 2)(torch.ones(3)).shape == (0, 3)


@pytest.mark.parametrize("transform", ["grad", "jvp", "jacrev", "jacfwd", "hessian"])
def test_integer_inputs_to_differentiate_are_a_clear_error_like_torch_func(transform):
    # (jvp and jacfwd returned integer tangents, and jacfwd zeros for an int leaf of a tree.)
    f = lambda p: (p["w"] * 2.0).sum()
    for p in ({"w": np.ones(2), "n": np.array([1, 2])}, {"w": np.array([1, 2])}):
        args = {k: minigrad.Tensor(v) for k, v in p.items()}
        with pytest.raises(TypeError, match="floating point or complex, got int64"):
            if transform == "jvp":
                func.jvp(f, (args,), (args,))
            else:
                getattr(func, transform)(f)(args)
        targs = {k: torch.tensor(v) for k, v in p.items()}
        with pytest.raises((ValueError, RuntimeError), match="floating point"):
            if transform == "jvp":
                tf.jvp(f, (targs,), (targs,))
            else:
                getattr(tf, transform)(f)(targs)


@pytest.mark.parametrize("op", ["add", "mul", "div", "pow"])
def test_vmap_promotes_dtypes_per_example_like_torch_func(op):
    """torch lets a 0-d operand's dtype count less than a dimensioned one's; under vmap an
    example's 0-d operand is a batched 1-d array, which NumPy promoted as dimensioned (float64
    0-d * float32 [n] gave float64 where torch.func gives float32; found by a review)."""
    rng = np.random.default_rng(14)
    fn = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
          "pow": lambda a, b: a ** b}[op]
    for (da, shape_a), (db, shape_b) in [((np.float64, ()), (np.float32, (3,))),
                                         ((np.float32, ()), (np.float64, (3,))),
                                         ((np.float64, ()), (np.float32, ())),
                                         ((np.float64, (3,)), (np.float32, (3,)))]:
        for in_dims in [(0, 0), (0, None), (None, 0)]:
            a = rng.normal(size=((2,) if in_dims[0] == 0 else ()) + shape_a).astype(da) + 2
            b = rng.normal(size=((2,) if in_dims[1] == 0 else ()) + shape_b).astype(db)
            mine = func.vmap(fn, in_dims=in_dims)(minigrad.Tensor(a), minigrad.Tensor(b))
            theirs = tf.vmap(fn, in_dims=in_dims)(torch.tensor(a), torch.tensor(b))
            assert str(mine.dtype) == str(theirs.dtype).replace("torch.", ""), (da, db, in_dims)
            np.testing.assert_allclose(mine.data, theirs.numpy(), rtol=1e-6)


def test_bad_transform_arguments_are_errors_like_torch_func():
    x, z = minigrad.Tensor(np.array([1.0, 2.0])), minigrad.Tensor(np.array([1 + 2j, 3 - 1j]))
    t_x, t_z = torch.tensor(x.data), torch.tensor(z.data)
    f = lambda a, b: (a * b).sum()
    for lib, a in ((func, x), (tf, t_x)):
        with pytest.raises(RuntimeError, match=r"argnums must be int or Tuple\[int, ...\]"):
            lib.grad(f, argnums=[0, 1])(a, a)
        with pytest.raises(RuntimeError, match="argnums elements must be unique"):
            lib.grad(f, argnums=(0, 0))(a, a)
        with pytest.raises((TypeError, ValueError), match="tangent.* floating point or complex"):
            lib.jvp(lambda v: v * 2, (a,), (a.int() if lib is tf else
                                            minigrad.Tensor(np.array([1, 2])),))
    # Jacobians are of real functions: jacrev would give the conjugate of jacfwd's (a review
    # found it), and a real input's complex output lost its imaginary part.
    for name in ("jacrev", "jacfwd"):
        for lib, real, cplx in ((func, x, z), (tf, t_x, t_z)):
            with pytest.raises(RuntimeError, match="%s: Expected all inputs to be real" % name):
                getattr(lib, name)(lambda v: v * v)(cplx)
            with pytest.raises(RuntimeError, match="%s: Expected all outputs to be real" % name):
                getattr(lib, name)(lambda v: v * (1 + 1j))(real)
    for lib, a in ((func, x), (tf, t_x)):
        with pytest.raises(RuntimeError, match="argnums must be non-empty"):
            lib.grad(f, argnums=())(a, a)
        with pytest.raises(RuntimeError, match="All outputs of f must be floating-point"):
            lib.jacrev(lambda v: v > 1)(a)  # (it gave a zero Jacobian)
        # grad does not ask: an integer loss has a zero gradient (vmap(grad) too)
        _close(lib.grad(lambda v: (v > 1).sum())(a), torch.zeros(2))
        _close(lib.vmap(lib.grad(lambda v: (v > 1).sum()))(a.reshape(2, 1)), torch.zeros(2, 1))
    # chunk_size may be any integer, as torch.func's (np.int64 from a computation)
    _close(func.jacrev(lambda v: v * 2, chunk_size=np.int64(1))(x), 2 * torch.eye(2))


def test_jacobians_with_respect_to_an_empty_tree_are_empty_trees_like_torch_func():
    x = np.array([1.0, 2.0, 3.0])
    f = lambda p, a: a * 2
    for name in ("jacrev", "jacfwd"):
        mine = getattr(func, name)(f, argnums=(0, 1))({}, minigrad.Tensor(x))
        theirs = getattr(tf, name)(f, argnums=(0, 1))({}, torch.tensor(x))
        assert mine[0] == {} and theirs[0] == {}
        _close(mine[1], theirs[1])
    assert func.jacfwd(lambda p: minigrad.Tensor(x) * 2)({}) == {}  # (no tensor at all)


def test_vmap_bad_in_dims_and_out_dims_are_clear_errors():
    x = minigrad.Tensor(np.ones((3, 2)))
    with pytest.raises(ValueError, match="batch sizes 3 and 2"):
        func.vmap(lambda a, b: a + b, in_dims=(0, 1))(x, minigrad.Tensor(np.ones((3, 3, 2))[:, :2]))
    with pytest.raises(ValueError, match="at least one argument must be batched"):
        func.vmap(lambda a: a, in_dims=None)(x)
    with pytest.raises(ValueError, match="in_dim 2 is out of range"):
        func.vmap(lambda a: a, in_dims=2)(x)
    for out_dim in (2, -3):  # as torch: the output's dims with the batch, no wrapping around
        with pytest.raises(IndexError, match="out_dim %d is out of range" % out_dim):
            func.vmap(lambda a: a, out_dims=out_dim)(x)
        with pytest.raises(IndexError, match="Dimension out of range"):
            tf.vmap(lambda a: a, out_dims=out_dim)(torch.ones(3, 2))
    with pytest.raises(RuntimeError, match="inside vmap are not supported"):
        func.vmap(lambda a: minigrad.grad(a.sum(), a))(minigrad.Tensor(np.ones((2, 2)), requires_grad=True))



def test_shape_errors_inside_vmap_name_the_shapes_the_caller_wrote():
    """torch.func reports the batched shapes ("5x3 and 4x2"), which no line of the caller's
    function has; minigrad reports one example's, with the eager operation's wording."""
    xs, T = minigrad.Tensor(np.ones((5, 3))), minigrad.Tensor
    cases = [
        (lambda a, b: a @ b, T(np.ones((4, 2))), r"matmul: shapes \(3,\) and \(4, 2\) are not aligned"),
        (lambda a, b: a @ b, T(np.ones((2, 3, 2))), None),  # batch dims broadcast: (2, 2)
        (lambda a, b: a + b, T(np.ones(4)), r"add: shapes \(3,\) and \(4,\) cannot be broadcast"),
        (lambda a, b: a > b, T(np.ones(4)), r"greater: shapes \(3,\) and \(4,\) cannot be broadcast"),
        (lambda a, b: F.linear(a, b), T(np.ones((2, 4))),
         r"linear: input of shape \(3,\) does not fit a weight of shape \(2, 4\)"),
    ]
    for f, other, message in cases:
        if message is None:
            assert func.vmap(f, in_dims=(0, None))(xs, other).shape == (5, 2, 2)
            continue
        with pytest.raises(ValueError, match=message + r".*\(per example, inside vmap\)"):
            func.vmap(f, in_dims=(0, None))(xs, other)
        with pytest.raises(ValueError, match=message):  # the same words as outside vmap
            f(xs[0], other)

def test_vjp_output_and_grad_aux_come_back_cut_from_the_inner_graph_like_torch_func():
    f = lambda t: ((t * t).sum(), t * 2)
    for lib, T in ((func, minigrad.Tensor), (tf, torch.tensor)):
        x = T(np.arange(3.0))
        aux = lib.grad(f, has_aux=True)(x)[1]
        out = lib.vjp(lambda t: t * 2, x)[0]
        assert not aux.requires_grad and not out.requires_grad
        assert aux.grad_fn is None and out.grad_fn is None
        w = T(np.arange(3.0), requires_grad=True)  # differentiable from outside: still tracked
        assert lib.vjp(lambda t: t * 2, w)[0].requires_grad
    # Forward mode outside still sees them: the tangent of grad's aux.
    mine = func.jvp(lambda t: func.grad(f, has_aux=True)(t)[1], (minigrad.Tensor(np.ones(3)),),
                    (minigrad.Tensor(np.arange(3.0)),))[1]
    theirs = tf.jvp(lambda t: tf.grad(f, has_aux=True)(t)[1], (torch.ones(3),),
                    (torch.arange(3.0),))[1]
    _close(mine, theirs)


def test_in_place_changes_inside_transforms_are_errors_not_lost():
    """vmap would index the batch dim and jvp would keep the old tangent (torch.func records
    both); minigrad refuses them."""
    def set_first(t):
        z = t * 2
        z[0] = 5.0
        return z
    x = minigrad.Tensor(np.arange(6.0).reshape(2, 3))
    for call in (lambda: func.vmap(set_first)(x),
                 lambda: func.jvp(lambda t: (t * 2).add_(t), (x,), (x,))):
        with pytest.raises(RuntimeError, match="in-place operations inside minigrad.func"):
            call()


def test_vmap_runs_each_operation_once_over_the_batch_not_per_example():
    with _exp_calls() as calls:
        func.vmap(lambda v: v.exp().sum())(minigrad.Tensor(np.ones((50, 3))))
    assert calls == [(50, 3)]


@pytest.mark.parametrize("transform, options, expected", [
    # the multiplies' first operands: f's `* 3` once, (4,); then the 4 rows' cotangents (or
    # the 12 columns' tangents) in one pass: `* 3`'s and exp's gradient (tangent) rules
    ("jacrev", {}, [(4,), (4, 4), (4, 3, 4)]),
    ("jacrev", {"chunk_size": 3}, [(4,), (3, 4), (3, 3, 4), (1, 4), (1, 3, 4)]),
    ("jacrev", {"chunk_size": 1}, [(4,)] + [(4,), (3, 4)] * 4),  # a pass per row
    ("jacfwd", {}, [(12, 3, 4), (4,), (12, 4)]),
])
def test_jacobians_run_f_once_and_its_rules_over_the_basis_at_once_like_torch_func(
        transform, options, expected):
    """(They ran a vjp per row, a jvp per column: 4-30x slower than one pass over the basis.)
    f itself runs once, unbatched, as torch.func's (so f may look at its input's values);
    jacrev's chunk_size bounds the rows per pass."""
    exps, muls = [], []
    exp, mul = minigrad.ops.Exp.forward, minigrad.ops.Mul.forward.__func__

    def counting_exp(ctx, a):
        exps.append(a.shape)
        return exp(ctx, a)

    def counting_mul(cls, ctx, a, b):
        muls.append(a.shape)
        return mul(cls, ctx, a, b)
    x = np.random.default_rng(0).normal(size=(3, 4))
    minigrad.ops.Exp.forward = staticmethod(counting_exp)
    minigrad.ops.Mul.forward = classmethod(counting_mul)
    try:
        jac = getattr(func, transform)(lambda x: x.exp().sum(0) * 3, **options)
        mine = jac(minigrad.Tensor(x))
    finally:
        minigrad.ops.Exp.forward = staticmethod(exp)
        minigrad.ops.Mul.forward = classmethod(mul)
    assert exps == [(3, 4)] and muls == expected
    _close(mine, tf.jacrev(lambda x: x.exp().sum(0) * 3)(torch.tensor(x)))
    if options:
        with pytest.raises(ValueError, match="chunk_size must be None or a positive int, got 0"):
            func.jacrev(lambda x: x, chunk_size=0)


@pytest.mark.parametrize("transform", ["grad", "vjp", "jvp", "vmap(grad)", "jacrev", "jacfwd",
                                       "hessian", "grad(grad)"])
def test_a_transform_call_leaves_no_reference_cycle(transform):
    """What a call builds is freed by reference counting when dropped: a cycle (a retained
    graph's node holding its own output) kept each call's arrays until the next garbage
    collection, and made vmap(grad) of the digits MLP 1.4-2x slower."""
    params = [minigrad.Tensor(p) for p in _mlp_params((4, 5, 3))]
    x = minigrad.Tensor(np.random.default_rng(0).normal(size=(6, 4)))
    y, v = minigrad.Tensor(np.arange(6) % 3), minigrad.Tensor(np.ones(3))
    cube = lambda w: (w ** 3).sum()
    calls = {
        "grad": lambda: func.grad(mg_loss)(params, x[0], y[0]),
        "vjp": lambda: func.vjp(lambda w: (w * 2).exp(), v)[1](v),
        "jvp": lambda: func.jvp(lambda w: (w * 2).exp(), (v,), (v,)),
        "vmap(grad)": lambda: func.vmap(func.grad(mg_loss), in_dims=(None, 0, 0))(params, x, y),
        "jacrev": lambda: func.jacrev(lambda w: (w * 2).exp())(v),
        "jacfwd": lambda: func.jacfwd(lambda w: (w * 2).exp())(v),
        "hessian": lambda: func.hessian(cube)(v),
        "grad(grad)": lambda: func.grad(lambda w: func.grad(cube)(w).sum())(v),
    }
    call = calls[transform]
    call()
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            call()
        assert gc.collect() == 0
    finally:
        gc.enable()


@st.composite
def _broadcastable_batch(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
    floats = st.floats(-2, 2, allow_nan=False, width=64)
    batch = draw(st.integers(1, 4))
    a, b = shapes.input_shapes
    return (draw(hnp.arrays(np.float64, (batch,) + a, elements=floats)),
            draw(hnp.arrays(np.float64, (batch,) + b, elements=floats)))


def _expr(L, x, y):
    return ((x * y + x).tanh() / (1 + y * y) - x.sigmoid() * 2).sum()


@settings(max_examples=40, deadline=None)
@given(_broadcastable_batch())
def test_vmap_of_grad_and_of_jvp_on_broadcasting_expressions_match_torch_func(pair):
    a, b = pair
    mine = func.vmap(func.grad(lambda x, y: _expr(MinigradLib, x, y), argnums=(0, 1)))(
        minigrad.Tensor(a), minigrad.Tensor(b))
    theirs = tf.vmap(tf.grad(lambda x, y: _expr(TorchLib, x, y), argnums=(0, 1)))(
        torch.tensor(a), torch.tensor(b))
    _close(mine, theirs)
    # jvp inside vmap: forward mode over the batched expression, tangents batched too.
    out, tan = func.vmap(lambda x, y: func.jvp(lambda u, v: _expr(MinigradLib, u, v), (x, y),
                                               (x * 0.5, y - 1)))(minigrad.Tensor(a), minigrad.Tensor(b))
    out_t, tan_t = tf.vmap(lambda x, y: tf.jvp(lambda u, v: _expr(TorchLib, u, v), (x, y),
                                               (x * 0.5, y - 1)))(torch.tensor(a), torch.tensor(b))
    _close([out, tan], [out_t, tan_t])


def test_hessian_of_a_squared_cross_entropy_matches_torch_func():
    """Forward over reverse through cross_entropy's gradient node, with a tangent on the
    incoming gradient too (it depends on the input)."""
    logits = np.random.default_rng(5).normal(size=(3, 4))
    target = np.array([1, 0, 3])
    mine = func.hessian(lambda z: F.cross_entropy(z, target) ** 2)(minigrad.Tensor(logits))
    theirs = tf.hessian(lambda z: torch.nn.functional.cross_entropy(z, torch.tensor(target)) ** 2)(
        torch.tensor(logits))
    _close(mine, theirs)


MATMUL_FORMS = {
    "dot": [(4,), (4,)], "mv": [(3, 4), (4,)], "vm": [(4,), (4, 3)], "mm": [(3, 4), (4, 2)],
    "outer products": [(2, 3, 1), (2, 1, 4)], "broadcast outer": [(3, 1), (2, 1, 4)],
}


@pytest.mark.parametrize("form", list(MATMUL_FORMS))
@pytest.mark.parametrize("argnum, in_dims", [(0, (0, 0)), (0, (None, 0)), (1, (0, None))])
def test_vmap_of_hessian_and_of_jvp_of_grad_through_matmul_match_torch_func(form, argnum, in_dims):
    """Forward over reverse inside vmap. The backward pass differentiates the batching rules'
    own operations (the Reshape that makes a batch of vectors a batch of matrices), and an
    unbatched argument is copied per example: jvp saw neither and took them for constants
    (vmap(jvp(grad(x @ x))) gave 0 for 2; vmap(hessian) was off by up to 25 on every form)."""
    rng = np.random.default_rng(0)
    args = [rng.normal(size=((3,) if d == 0 else ()) + s)
            for s, d in zip(MATMUL_FORMS[form], in_dims)]
    v = rng.normal(size=args[argnum].shape)
    f = lambda a, b: ((a @ b) ** 2).sum()

    def hvp(lib, grad, jvp):
        def along(a, b, v):
            point = (a, b)
            at = lambda p: grad(f, argnums=argnum)(*[p if k == argnum else point[k]
                                                     for k in range(2)])
            return jvp(at, (point[argnum],), (v,))[1]
        return lib.vmap(along, in_dims=in_dims + (in_dims[argnum],))

    mine, theirs = [minigrad.Tensor(a) for a in args], [torch.tensor(a) for a in args]
    _close(func.vmap(func.hessian(f, argnums=argnum), in_dims=in_dims)(*mine),
           tf.vmap(tf.hessian(f, argnums=argnum), in_dims=in_dims)(*theirs))
    # the mixed partials: jvp along the argument grad does not differentiate (which need not
    # require grad, so that the batching rules' work on it is not recorded)
    _close(func.vmap(func.jacfwd(func.grad(f, argnums=argnum), argnums=1 - argnum),
                     in_dims=in_dims)(*mine),
           tf.vmap(tf.jacfwd(tf.grad(f, argnums=argnum), argnums=1 - argnum),
                   in_dims=in_dims)(*theirs))
    _close(hvp(func, func.grad, func.jvp)(*mine, minigrad.Tensor(v)),
           hvp(tf, tf.grad, tf.jvp)(*theirs, torch.tensor(v)))


@pytest.mark.parametrize("in_dims", [(0, None), (0, 0)])
def test_vmap_of_third_derivatives_matches_torch_func(in_dims):
    """jacfwd(jacfwd(jacrev)) inside vmap: the second jvp's tangents of the first's tangents
    carry the batch too (the stack of their columns raised, not broadcastable)."""
    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(2, 3)), rng.normal(size=(2, 3, 3) if in_dims[1] == 0 else (3, 3))
    f = lambda x, w: (w @ x).tanh().sum()
    third = lambda lib: lib.vmap(lib.jacfwd(lib.jacfwd(lib.jacrev(f))), in_dims=in_dims)
    _close(third(func)(minigrad.Tensor(x), minigrad.Tensor(w)),
           third(tf)(torch.tensor(x), torch.tensor(w)))


def test_jvp_of_grad_inside_vmap_with_per_example_tangents_of_a_shared_weight_matches_torch_func():
    """Batched Hessian-vector products at one point: the batching rules' work on the shared
    weight (linear's transpose) needs its per-example tangent. It gave wrong values, then
    raised; jvp now batches a shared primal whose tangent is per example."""
    rng = np.random.default_rng(0)
    x0, w, vs = (rng.normal(size=s) for s in ((4, 3), (2, 3), (5, 2, 3)))

    def along(lib, linear, tensor):
        at = lambda w: lib.grad(lambda x: (linear(x, w) ** 2).sum())(tensor(x0))
        return lib.vmap(lambda v: lib.jvp(at, (tensor(w),), (v,))[1])(tensor(vs))
    _close(along(func, F.linear, minigrad.Tensor),
           along(tf, torch.nn.functional.linear, torch.tensor))


@pytest.mark.parametrize("name", OPS)
def test_vmap_over_tangents_at_one_point_matches_torch_func(name):
    """vmap of jvp and of jvp of grad over per-example tangents of shared primals (jacfwd's
    and batched Hessian-vector products' pattern)."""
    f, g, xs, ts, r = _setup(name)
    vs = _batch([x.data for x in xs], size=2, seed=6)
    nums = tuple(range(len(xs)))

    def run(lib, fn, primals, tensor):
        at = lib.grad(_scalar(fn, r, tensor), argnums=nums)
        return [lib.vmap(lambda *v: lib.jvp(h, tuple(primals), v)[1])(*map(tensor, vs))
                for h in (fn, at)]
    for mine, theirs in zip(run(func, f, xs, minigrad.Tensor), run(tf, g, ts, torch.tensor)):
        _close(mine, theirs)


@pytest.mark.parametrize("shape", [(4,), (3, 3)])
def test_vmap_of_hessian_and_of_jvp_of_grad_of_x_at_x_match_torch_func(shape):
    """x on both sides: the backward pass reads the batching rule's reshapes of x itself,
    whose tangents jvp now derives from their recorded operations."""
    rng = np.random.default_rng(1)
    x, v = rng.normal(size=(3,) + shape), rng.normal(size=(3,) + shape)
    f = lambda x: ((x @ x) ** 2).sum()
    _close(func.vmap(func.hessian(f))(minigrad.Tensor(x)), tf.vmap(tf.hessian(f))(torch.tensor(x)))
    hvp = lambda lib, x, v: lib.jvp(lib.grad(f), (x,), (v,))[1]
    _close(func.vmap(lambda x, v: hvp(func, x, v))(minigrad.Tensor(x), minigrad.Tensor(v)),
           tf.vmap(lambda x, v: hvp(tf, x, v))(torch.tensor(x), torch.tensor(v)))


def test_vmap_of_jacfwd_and_hessian_of_cross_entropy_with_per_example_targets_matches_torch_func():
    rng = np.random.default_rng(2)
    z, t = rng.normal(size=(3, 2, 4)), rng.integers(0, 4, size=(3, 2))
    f = lambda z, t: F.cross_entropy(z, t)
    g = lambda z, t: torch.nn.functional.cross_entropy(z, t)
    mine, theirs = (minigrad.Tensor(z), minigrad.Tensor(t)), (torch.tensor(z), torch.tensor(t))
    _close(func.vmap(func.jacfwd(f))(*mine), tf.vmap(tf.jacfwd(g))(*theirs))
    _close(func.vmap(func.hessian(f))(*mine), tf.vmap(tf.hessian(g))(*theirs))


@pytest.mark.parametrize("batched", [(True, True, True), (True, False, False), (False, True, True),
                                     (True, True, False)])
def test_the_batching_rule_of_cross_entropys_gradient_equals_it_per_example(batched):
    """(logits, target, incoming gradient), each batched or shared: the batched node equals
    the node applied to each example."""
    rng = np.random.default_rng(3)
    shapes = [(2, 4), (2,), ()]
    values = [rng.normal(size=s) for s in shapes]
    values[1] = rng.integers(0, 4, size=(2,))
    args = [(rng.integers(0, 4, size=(3,) + s) if k == 1 else rng.normal(size=(3,) + s)) if b
            else v for k, (s, v, b) in enumerate(zip(shapes, values, batched))]
    out = func.vmap(lambda z, t, g: F.CrossEntropyGrad.apply(z, t, g),
                    in_dims=tuple(0 if b else None for b in batched))(
        *[minigrad.Tensor(a) for a in args])
    for i in range(3):
        one = [minigrad.Tensor(a[i] if b else a) for a, b in zip(args, batched)]
        np.testing.assert_allclose(out.data[i], F.CrossEntropyGrad.apply(*one).data, rtol=1e-12)


@pytest.mark.parametrize("name", OPS)
def test_vmap_of_jacobians_and_hessian_matches_torch_func(name):
    """Jacobians per example: reverse and forward mode inside vmap, and forward over reverse
    (the tangents of the batched backward pass keep the batch)."""
    f, g, xs, _, r = _setup(name)
    batch = _batch([x.data for x in xs], size=2, seed=4)
    mine = [minigrad.Tensor(b) for b in batch]
    theirs = [torch.tensor(b) for b in batch]
    expected = tf.vmap(tf.jacrev(g))(*theirs)
    _close(func.vmap(func.jacrev(f))(*mine), expected)
    _close(func.vmap(func.jacfwd(f))(*mine), expected)
    if xs[0].data.size <= 12:
        _close(func.vmap(func.hessian(_scalar(f, r, minigrad.Tensor)))(*mine),
               tf.vmap(tf.hessian(_scalar(g, r, torch.tensor)))(*theirs))


# -- functional_call --------------------------------------------------------------------------

def _mlp_pair(sizes=(4, 3, 2)):
    """minigrad's MLP and torch's equivalent Sequential, with the same parameters."""
    model = minigrad.nn.MLP(list(sizes), dtype=np.float64, rng=np.random.default_rng(0))
    layers = [torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
    theirs = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.ReLU())][:-1])
    with torch.no_grad():
        for p, q in zip(theirs.parameters(), model.parameters()):
            p.copy_(torch.tensor(q.data))
    return model, theirs


def test_per_example_gradients_of_a_module_by_functional_call_match_torch_func():
    """torch.func's per-sample-gradients recipe, line for line: a module's parameters as a
    dict, functional_call, vmap(grad)."""
    model, theirs = _mlp_pair()
    assert [n for n, _ in model.named_parameters()] == [
        "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(5, 4)), np.array([0, 1, 1, 0, 1])

    def per_example(lib, module, cross_entropy, tensor):
        params = {k: v.detach() for k, v in module.named_parameters()}
        loss = lambda p, xi, yi: cross_entropy(lib.functional_call(module, p, (xi[None],)),
                                               yi[None])
        return lib.vmap(lib.grad(loss), in_dims=(None, 0, 0))(params, tensor(x), tensor(y))
    mine = per_example(func, model, F.cross_entropy, minigrad.Tensor)
    expected = per_example(tf, theirs, torch.nn.functional.cross_entropy, torch.tensor)
    _close(list(mine.values()), list(expected.values()))
    assert all(p.requires_grad and p.grad is None for p in model.parameters())  # its own, back


def test_functional_call_restores_the_parameters_and_checks_names_like_torch():
    model, _ = _mlp_pair()
    own = model.parameters()
    x = minigrad.Tensor(np.ones((2, 4)))
    zeros = {k: minigrad.Tensor(np.zeros(v.shape)) for k, v in model.named_parameters()}
    assert np.all(func.functional_call(model, zeros, x).data == 0)  # a non-tuple: one argument
    with pytest.raises(ValueError, match="matmul|linear"):  # restored when forward raises, too
        func.functional_call(model, {"layers.0.weight": minigrad.Tensor(np.ones((3, 5)))}, (x,))
    assert all(a is b for a, b in zip(model.parameters(), own))
    # as torch's: a missing name keeps the module's own, an unknown one is ignored...
    partial = func.functional_call(model, ({"layers.1.bias": minigrad.Tensor([5.0, 5.0])},
                                           {"nosuch": minigrad.Tensor(1.0)}), (x,))
    np.testing.assert_allclose(partial.data, model(x).data + 5 - model.layers[1].bias.data)
    with pytest.raises(AttributeError, match="'no.such': MLP has no 'no'"):  # (a bad path)
        func.functional_call(model, {"no.such": own[0]}, (x,))
    with pytest.raises(TypeError, match="'layers.0.weight.foo': Tensor holds no parameters"):
        func.functional_call(model, {"layers.0.weight.foo": own[0]}, (x,))
    for bad, what in (({"nosuch": 5.0}, "5.0 is not a Tensor"),
                      ({"layers": own[0]}, "attribute 'layers': .* is not a Tensor")):
        with pytest.raises(TypeError, match=what):  # (as torch's)
            func.functional_call(model, bad, (x,))
    class Held(minigrad.nn.Module):  # a parameter in a tuple cannot be swapped
        def __init__(self):
            self.w = minigrad.Tensor(np.ones(2), requires_grad=True)
            self.ws = (minigrad.Tensor(np.ones(2), requires_grad=True),)
    held = Held()
    w = held.w
    with pytest.raises(TypeError, match="held in a tuple cannot be replaced"):
        func.functional_call(held, {"w": own[1], "ws.0": own[1], "extra": own[1]}, ())
    assert held.w is w and not hasattr(held, "extra")  # what was swapped is restored
    # a name where the module holds no tensor is set for the call, as torch's (a review)
    plain = minigrad.nn.Linear(4, 2, bias=False, dtype=np.float64, rng=np.random.default_rng(3))
    biased = func.functional_call(plain, {"bias": minigrad.Tensor([10.0, 20.0])}, (x,))
    np.testing.assert_allclose(biased.data, plain(x).data + [10.0, 20.0])
    unbiased = func.functional_call(model.layers[1], {"bias": None}, (x[:, :3],))  # (None:
    np.testing.assert_allclose(unbiased.data,  # removed for the call, as torch's)
                               x.data[:, :3] @ model.layers[1].weight.data.T)
    assert plain.bias is None and not hasattr(model, "nosuch")
    # ...unless strict
    with pytest.raises(RuntimeError,
                       match=r"missing \['layers.0.bias', .*unexpected \['nosuch'\]"):
        func.functional_call(model, {"layers.0.weight": own[0], "nosuch": own[0]}, (x,),
                             strict=True)
    # a frozen parameter is replaced too, as torch's (it is not in named_parameters)
    model.layers[1].bias.requires_grad = False
    try:
        frozen = func.functional_call(model, {"layers.1.bias": minigrad.Tensor([5.0, 5.0])}, x)
        np.testing.assert_allclose(frozen.data, partial.data)
        assert "layers.1.bias" not in dict(model.named_parameters())
    finally:
        model.layers[1].bias.requires_grad = True
    with pytest.raises(ValueError, match="'layers.1.bias' is given twice"):
        func.functional_call(model, (zeros, {"layers.1.bias": own[3]}), (x,))


def test_functional_call_replaces_a_tied_parameter_everywhere_like_torch():
    model = minigrad.nn.MLP([2, 2, 2], dtype=np.float64, rng=np.random.default_rng(2))
    model.layers[1].weight = model.layers[0].weight  # tied
    assert [n for n, _ in model.named_parameters()] == [
        "layers.0.weight", "layers.0.bias", "layers.1.bias"]  # once, as torch's
    x, two = minigrad.Tensor(np.ones((1, 2))), minigrad.Tensor(2 * np.eye(2))
    biases = {"layers.0.bias": minigrad.Tensor(np.zeros(2)),
              "layers.1.bias": minigrad.Tensor(np.zeros(2))}
    for name in ("layers.0.weight", "layers.1.weight"):  # either name replaces both places
        out = func.functional_call(model, {name: two, **biases}, (x,))
        np.testing.assert_allclose(out.data, [[4.0, 4.0]])
    untied = func.functional_call(model, {"layers.0.weight": two, **biases}, (x,),
                                  tie_weights=False)
    second = model.layers[1].weight.data
    np.testing.assert_allclose(untied.data, np.maximum(2 * x.data, 0) @ second.T)
    with pytest.raises(ValueError, match="tied parameters are given different values"):
        func.functional_call(model, {"layers.0.weight": two, "layers.1.weight": x}, (x,))
    assert model.layers[1].weight is model.layers[0].weight
    # strict counts a tied place as filled by either name, unless untied (as torch's)
    second_only = {"layers.1.weight": two, **biases}
    np.testing.assert_allclose(
        func.functional_call(model, second_only, (x,), strict=True).data, [[4.0, 4.0]])
    with pytest.raises(RuntimeError, match=r"missing \['layers.0.weight'\]"):
        func.functional_call(model, second_only, (x,), strict=True, tie_weights=False)


def test_vmap_of_grad_of_max_routes_each_examples_gradient_by_its_own_nans_like_torch_func():
    # One example with a NaN, one without, one with two (a mutation check found the mask of
    # the examples without NaN untested: only max() over a whole tensor was).
    x = np.array([[1.0, np.nan, 3.0], [1.0, 5.0, 2.0], [np.nan, 0.0, np.nan]])
    mine = func.vmap(func.grad(lambda r: r.max()))(minigrad.Tensor(x))
    theirs = tf.vmap(tf.grad(lambda r: r.max()))(torch.tensor(x))
    np.testing.assert_array_equal(mine.data, theirs.numpy())


@pytest.mark.parametrize("lib", ["minigrad", "torch"])
def test_cotangents_and_tangents_must_have_the_structure_like_torch_func(lib):
    """vjp_fn and jvp counted leaves alone: a dict's cotangents or tangents in another key
    order were taken by position (a silently wrong [2, 30] for [3, 20]), and a list stood for
    a tuple. torch.func raises for any other structure, and so does minigrad now."""
    F_, T = (func, lambda a: minigrad.Tensor(np.asarray(a))) if lib == "minigrad" else (
        tf, torch.tensor)
    x, p, q = T([0.5, -1.0]), T([0.0, 10.0]), T([1.0, 0.0])
    _, vjp_fn = F_.vjp(lambda x: {"p": x * 2, "q": x * 3}, x)
    np.testing.assert_allclose(_np(vjp_fn({"p": p, "q": q})[0]), [3.0, 20.0])
    with pytest.raises(RuntimeError, match="structure"):
        vjp_fn({"q": q, "p": p})
    _, vjp_fn = F_.vjp(lambda x: (x * 2, x * 3), x)
    with pytest.raises(RuntimeError, match="structure"):
        vjp_fn([p, q])
    _, vjp_fn = F_.vjp(lambda x: x * 2, x)
    with pytest.raises(RuntimeError, match="structure"):
        vjp_fn((p,))
    g = lambda d: d["p"] * 2 + d["q"] * 3  # noqa: E731
    np.testing.assert_allclose(_np(F_.jvp(g, ({"p": x, "q": x},), ({"p": p, "q": q},))[1]),
                               [3.0, 20.0])
    with pytest.raises(RuntimeError, match="structure"):
        F_.jvp(g, ({"p": x, "q": x},), ({"q": q, "p": p},))


@pytest.mark.parametrize("primal, tangent", [("float32", "float64"), ("float64", "float32")])
def test_a_tangent_keeps_its_dtype_like_torch_func(primal, tangent):
    """torch's make_dual keeps the tangent's dtype, and an operation computes its tangent in
    it: a cast to the primal's made x * 3's tangent 3.0000003576 where torch's is
    3.000000476837158. (torch then casts an operation's tangent to its output's dtype, where
    minigrad keeps the tangent's: the values agree.)"""
    x, v = np.array([0.5, -1.0], primal), np.array([1 + 1e-7, 2.0], tangent)
    for f in (lambda a: a, lambda a: a * 3):
        mine = func.jvp(f, (minigrad.Tensor(x),), (minigrad.Tensor(v),))[1]
        theirs = tf.jvp(f, (torch.tensor(x),), (torch.tensor(v),))[1]
        np.testing.assert_array_equal(mine.data, theirs.numpy())
    assert func.jvp(lambda a: a, (minigrad.Tensor(x),), (minigrad.Tensor(v),))[1].dtype == tangent


@pytest.mark.parametrize("shape", [(0, 3), (0, 2, 3), (2, 0, 3)], ids=str)
@pytest.mark.parametrize("name", ["jacrev", "jacfwd", "hessian", "vmap"])
def test_nested_transforms_over_an_empty_batch_like_torch_func(name, shape):
    """A vmap inside a vmap of 0 examples raised ZeroDivisionError: the nested level found
    its factor as a quotient of batch sizes."""
    inner = {"jacrev": lambda F: F.jacrev(lambda t: t.tanh()),
             "jacfwd": lambda F: F.jacfwd(lambda t: t.tanh()),
             "hessian": lambda F: F.hessian(lambda t: t.tanh().sum()),
             "vmap": lambda F: F.vmap(lambda t: t.tanh())}[name]
    x = np.random.default_rng(0).standard_normal(shape)
    make = (lambda F: F.vmap(F.vmap(inner(F)))) if len(shape) == 3 else (lambda F: F.vmap(inner(F)))
    mine, theirs = make(func)(minigrad.Tensor(x)), make(tf)(torch.tensor(x))
    assert mine.shape == tuple(theirs.shape)
    np.testing.assert_allclose(mine.data, theirs.numpy(), **TOL)


@pytest.mark.parametrize("name", ["grad", "vmap", "vmap(grad)", "jacrev", "jacfwd", "hessian"])
def test_keyword_arguments_reach_f_as_they_are_like_torch_func(name):
    """grad and vmap raised TypeError for keyword arguments, which torch.func's pass to f
    (neither differentiated nor batched). jacrev, jacfwd and hessian pass them too (torch's
    take none: compared with functools.partial there)."""
    make = {"grad": lambda F, f: F.grad(f, argnums=1), "vmap": lambda F, f: F.vmap(f),
            "vmap(grad)": lambda F, f: F.vmap(F.grad(f)), "jacrev": lambda F, f: F.jacrev(f),
            "jacfwd": lambda F, f: F.jacfwd(f, argnums=(0, 1)),
            "hessian": lambda F, f: F.hessian(f)}[name]

    def f(x, y, scale=1.0, shift=None):
        return ((x * y).tanh() * scale + shift).sum()
    rng = np.random.default_rng(0)
    x, y, shift = rng.standard_normal((4, 3)), rng.standard_normal((4, 3)), rng.standard_normal(3)
    mine = make(func, f)(minigrad.Tensor(x), minigrad.Tensor(y), scale=2.0,
                         shift=minigrad.Tensor(shift))
    theirs = make(tf, lambda x, y: f(x, y, scale=2.0, shift=torch.tensor(shift)))(
        torch.tensor(x), torch.tensor(y))
    mine, theirs = (mine, theirs) if isinstance(mine, tuple) else ((mine,), (theirs,))
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(_np(m), _np(t), **TOL)
    if name in ("grad", "vmap"):  # torch's own pass-through gives the same
        same = make(tf, f)(torch.tensor(x), torch.tensor(y), scale=2.0, shift=torch.tensor(shift))
        np.testing.assert_allclose(_np(same), _np(theirs[0]), **TOL)


def test_vmap_over_an_empty_batch_infers_a_reshapes_minus_one_from_one_example():
    """NumPy cannot infer -1 over a batch of no examples: reshape(-1) under vmap, and so
    vmap(grad) of a per-example cross_entropy (it reshapes one example's logits to a row),
    raised where torch.func gives an empty result."""
    z, t = np.zeros((0, 3)), np.zeros(0, np.int64)
    got = func.vmap(func.grad(lambda z, t: F.cross_entropy(z, t)))(minigrad.Tensor(z), minigrad.Tensor(t))
    want = torch.func.vmap(torch.func.grad(lambda z, t: torch.nn.functional.cross_entropy(z, t)))(
        torch.from_numpy(z), torch.from_numpy(t))
    assert got.shape == tuple(want.shape) == (0, 3)
    assert func.vmap(lambda a: a.reshape(-1))(minigrad.Tensor(np.zeros((0, 3, 2)))).shape == (0, 6)
