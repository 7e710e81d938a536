"""kernels::warp_softmax under PyTorch's transforms: vmap, autocast, forward-mode AD and every
torch.func transform, on the Python API and the raw torch.ops.kernels operators, against torch."""

import pytest
import torch

import kernels
from kernels.tests import checks
from kernels.tests.torch_cases import BACKWARD, DTYPES, OPS, RAW, inputs, recorded_in_cpp, reference


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


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_autocast_runs_in_the_context_dtype_with_float32_accumulation(dtype):
    x = inputs((4, 2000))
    with torch.autocast("cpu", dtype=DTYPES[dtype]):
        y = kernels.warp_softmax(x, -1)
        assert kernels.warp_log_softmax(x, -1).dtype == DTYPES[dtype]
        assert kernels.warp_softmax(x.double(), -1).dtype == torch.float64  # float64 is kept
    assert y.dtype == DTYPES[dtype]
    # Within one unit of the format of the float64 softmax of the rounded input.
    checks.assert_close(y.double(), reference("softmax", x.to(DTYPES[dtype]), -1), dtype, False)
    assert kernels.warp_softmax(x, -1).dtype == torch.float32  # outside the context


def test_vmap_over_0d_examples_and_dim_0_as_torch():
    for name, (ours, theirs) in OPS.items():
        x = inputs((5,))
        torch.testing.assert_close(torch.vmap(ours)(x), torch.vmap(lambda t: theirs(t, -1))(x))
        torch.testing.assert_close(torch.vmap(lambda t: ours(t, 0))(x), torch.vmap(lambda t: theirs(t, 0))(x))
        x = inputs((3, 4, 6))
        for dim in (0, 1, -1, -2):
            got = torch.vmap(lambda t: ours(t, dim))(x)
            torch.testing.assert_close(got, torch.vmap(lambda t: theirs(t, dim))(x), atol=1e-6, rtol=1e-5)
        with pytest.raises(IndexError, match="out of range"):
            torch.vmap(lambda t: ours(t, 2))(x)


@pytest.mark.parametrize("raw", [False, True], ids=["api", "raw_op"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_forward_mode_ad_matches_torch(name, raw):
    ours, theirs = (RAW[name] if raw else OPS[name][0]), OPS[name][1]
    x, v = inputs((3, 7), dtype=torch.float64), inputs((3, 7), dtype=torch.float64, seed=1)
    for dim in (-1, 0):
        got = torch.func.jvp(lambda t: ours(t, dim), (x,), (v,))
        want = torch.func.jvp(lambda t: theirs(t, dim), (x,), (v,))
        torch.testing.assert_close(got, want)
        assert got[1].abs().max() > 0.01  # a real tangent, not zeros
    torch.testing.assert_close(torch.func.jacfwd(ours)(x[0]), torch.func.jacfwd(lambda t: theirs(t, -1))(x[0]))
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(ours(fwAD.make_dual(x, v), -1)).tangent
    torch.testing.assert_close(tangent, torch.func.jvp(lambda t: theirs(t, -1), (x,), (v,))[1])


@pytest.mark.parametrize("raw", [False, True], ids=["api", "raw_op"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_torch_func_transform_matches_torch(name, raw):
    ours, theirs = (RAW[name] if raw else OPS[name][0]), OPS[name][1]
    x = inputs((4, 6), dtype=torch.float64)
    w = inputs((6,), dtype=torch.float64, seed=2)

    def loss(f):  # not linear in the output, so second derivatives are not trivially zero
        return lambda t: ((f(t, -1) * w) ** 3).sum()

    func = torch.func
    for transform in (func.grad, lambda f: func.vmap(func.grad(f)), func.jacrev, func.hessian,
                      lambda f: func.jacrev(func.grad(f)), lambda f: func.jacfwd(func.grad(f))):
        torch.testing.assert_close(transform(loss(ours))(x[0]), transform(loss(theirs))(x[0]))
    torch.testing.assert_close(func.vmap(func.grad(loss(ours)))(x), func.vmap(func.grad(loss(theirs)))(x))

    def half_untracked(f):  # torch.no_grad inside a transform hides that part from every level
        def g(t):
            with torch.no_grad():
                frozen = f(t, -1)
            return (f(t, -1) * frozen * w).sum() ** 2
        return g
    for transform in (func.grad, func.hessian, lambda f: func.grad(lambda t: func.grad(f)(t).sum())):
        torch.testing.assert_close(transform(half_untracked(ours))(x[0]), transform(half_untracked(theirs))(x[0]))
    # The backward operators: forward mode through them too (hessian's inner half).
    op, torch_op = BACKWARD[name]
    y, g, ty, tg = OPS[name][1](x, -1), *(inputs((4, 6), dtype=torch.float64, seed=s) for s in (3, 4, 5))
    got = func.jvp(lambda a, b: op(a, b, -1), (g, y), (tg, ty))
    torch.testing.assert_close(got, func.jvp(lambda a, b: torch_op(a, b, -1, torch.float64), (g, y), (tg, ty)))
    # Two forward-mode levels: torch.func gives custom functions a zero outer
    # tangent, so the operators refuse instead of returning it.
    with pytest.raises(NotImplementedError, match="forward-over-forward"):
        func.jacfwd(func.jacfwd(loss(ours)))(x[0])


# Each operator with torch's counterpart, on float64 inputs (x, or grad_output and output).
_RECORDING = {
    "softmax": (RAW["softmax"], lambda x: torch.softmax(x, -1), 1),
    "log_softmax": (RAW["log_softmax"], lambda x: torch.log_softmax(x, -1), 1),
    "softmax_backward": (lambda g, y: BACKWARD["softmax"][0](g, y, -1),
                         lambda g, y: BACKWARD["softmax"][1](g, y, -1, torch.float64), 2),
    "masked": (lambda x, m: torch.ops.kernels.warp_softmax_masked(x, m, 0.5),
               lambda x, m: torch.softmax(x * 0.5 + m, -1), 2),
}


@pytest.mark.parametrize("tangent", [False, True], ids=["", "dual"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["", "requires_grad"])
@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("name", sorted(_RECORDING))
def test_records_a_graph_and_a_tangent_exactly_where_torch_does(name, grad_mode, requires_grad, tangent):
    """The autograd kernel's fast path (no node, no tangent: torch_autograd.cc) is taken
    exactly where torch's own operator records nothing; elsewhere the gradients flow."""
    ours, theirs, arity = _RECORDING[name]

    def run(op):
        args = [inputs((3, 5), dtype=torch.float64, seed=i) for i in range(arity)]
        args[0].requires_grad_(requires_grad)
        with torch.set_grad_enabled(grad_mode), torch.autograd.forward_ad.dual_level():
            if tangent:
                args[-1] = torch.autograd.forward_ad.make_dual(args[-1], torch.ones_like(args[-1]))
            out = op(*args)
            primal, out_tangent = torch.autograd.forward_ad.unpack_dual(out)
            grads = torch.autograd.grad(out.sum(), args[0]) if out.requires_grad else None
            return out.requires_grad, out.grad_fn is not None, primal, out_tangent, grads

    got, want = run(ours), run(theirs)
    assert got[:2] == want[:2]
    torch.testing.assert_close(got[2:], want[2:])
    if grad_mode and requires_grad:
        # What a user sees names the operator on either path, grad_fn=<warp_softmaxBackward>:
        # the C++ node that plain eager reverse mode records, or the Python Function (the
        # backward operators').
        out = ours(*[inputs((3, 5), dtype=torch.float64).requires_grad_()] * arity)
        node = "warp_" + name.replace("masked", "softmax_masked") + "Backward"
        assert "grad_fn=<%s>" % node in repr(out)
        assert recorded_in_cpp(out) == (name != "softmax_backward")


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "masked"])
def test_eager_nodes_match_the_function_and_torch_to_second_order(name):
    """Plain eager reverse mode records torch_autograd.cc's C++ node; torch.func.vjp takes
    the Python Function. Both give torch's first and second derivatives, and the C++ node
    keeps autograd's checks: the saved output changed in place, a graph already freed."""
    ours, theirs, arity = _RECORDING[name]
    args = [inputs((4, 1, 6), dtype=torch.float64, seed=0).requires_grad_()]
    if arity == 2:  # a float mask broadcast over dim 1, with a padded tail
        mask = inputs((4, 3, 6), dtype=torch.float64, seed=1)[:, :1].clone()
        mask[2, :, 4:] = float("-inf")
        args = [inputs((4, 3, 6), dtype=torch.float64, seed=0).requires_grad_(), mask.requires_grad_()]
    v = inputs(tuple(args[0].shape), dtype=torch.float64, seed=2)

    def second_order(f, *a):  # the gradients and the gradient of their weighted sum
        first = torch.autograd.grad(f(*a), a, v, create_graph=True)
        return first + torch.autograd.grad(sum((g * g.detach().sin()).sum() for g in first), a)

    got = second_order(ours, *args)
    want = second_order(theirs, *args)
    out = ours(*args)
    assert recorded_in_cpp(out)
    via_function = torch.func.vjp(ours, *args)[1](v)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(via_function, want[:arity])
    for one in args:  # a gradient asked for one input alone (the mask's skips dx, and x's the mask's)
        torch.testing.assert_close(torch.autograd.grad(ours(*args), one, v),
                                   torch.autograd.grad(theirs(*args), one, v))

    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    out = ours(*args)
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "masked"])
def test_compiled_autograd_runs_the_eager_nodes(name):
    """Compiled autograd (torch.compile over a backward) traces the graph an eager forward
    recorded, so the C++ nodes must describe themselves to it: it gives torch's gradients."""
    from torch._dynamo import compiled_autograd
    ours, theirs, arity = _RECORDING[name]
    shapes = [(4, 3, 6), (4, 1, 6)][:arity]
    grads = {}
    for f in (ours, theirs):
        args = [inputs(shape, dtype=torch.float64, seed=k).requires_grad_() for k, shape in enumerate(shapes)]
        out = f(*args)
        assert recorded_in_cpp(out) == (f is ours)
        torch._dynamo.reset()
        with compiled_autograd._enable(torch.compile(backend="eager", fullgraph=True)):
            (out * inputs(shapes[0], dtype=torch.float64, seed=5)).sum().backward()
        grads[f] = [a.grad for a in args]
    torch.testing.assert_close(grads[ours], grads[theirs])
