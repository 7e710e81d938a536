"""minigrad.hlo: StableHLO export and XLA jit against minigrad's own eager results."""

import collections
import gc
import warnings

import numpy as np
import pytest
import torch

import minigrad
from minigrad import func, hlo, nn, tensor
from minigrad import functional as F
from minigrad.levels import flatten
from minigrad.tests.op_table import CASES
from minigrad.tests.torch_compare import MinigradLib

TOL = dict(rtol=1e-6, atol=1e-6)
# Advanced indexing is not exported, nor max's gradient (hlo raises NotImplementedError for
# them: see the last test); max's forward is.
EXPORTED = sorted(name for name in CASES if name != "index_repeated")
FORWARD_ONLY = ("max_all", "max_dim")


def _case(name, dtype):
    fn, arrays = CASES[name]
    r = np.random.default_rng(0).normal(size=np.shape(fn(MinigradLib, *[minigrad.Tensor(a) for a in arrays]).data))
    f = lambda *xs: fn(MinigradLib, *xs)
    return f, lambda *xs: (f(*xs) * minigrad.Tensor(r.astype(dtype))).sum(), [a.astype(dtype) for a in arrays]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", EXPORTED)
def test_jit_output_and_gradients_equal_eager_on_every_op(name, dtype):
    f, scalar, arrays = _case(name, dtype)
    tensors = [minigrad.Tensor(a) for a in arrays]
    np.testing.assert_allclose(hlo.jit(f)(*arrays).data, f(*tensors).data, **TOL)
    if name in FORWARD_ONLY:
        return
    nums = tuple(range(len(arrays)))
    compiled = hlo.jit(func.grad(scalar, argnums=nums))(*arrays)
    eager = func.grad(scalar, argnums=nums)(*tensors)
    for c, e in zip(compiled, eager):
        assert c.dtype == e.dtype
        np.testing.assert_allclose(c.data, e.data, **TOL)


@pytest.mark.parametrize("name", [n for n in EXPORTED if n not in FORWARD_ONLY])
def test_export_with_grad_emits_minigrads_backward_graph(name):
    f, scalar, arrays = _case(name, np.float64)
    text = hlo.export(scalar, *arrays, grad=True)
    assert text.startswith("module @minigrad") and "func.func public @main" in text
    run = hlo.load(text, [(a.shape, a.dtype) for a in arrays],
                   [((), np.float64)] + [(a.shape, a.dtype) for a in arrays])
    out, *grads = run(*arrays)
    tensors = [minigrad.Tensor(a, requires_grad=True) for a in arrays]
    loss = scalar(*tensors)
    loss.backward()
    np.testing.assert_allclose(out, loss.data, **TOL)
    for g, t in zip(grads, tensors):
        np.testing.assert_allclose(g, t.grad.data, **TOL)


def test_jit_is_compiled_once_per_signature_and_reruns_on_new_data():
    calls = []

    def f(x):
        calls.append(1)
        return (x * x).sum(0)
    j = hlo.jit(f)
    a, b = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    np.testing.assert_allclose(j(a).data, (a * a).sum(0))
    np.testing.assert_allclose(j(b).data, (b * b).sum(0))  # new values: the same program
    assert len(calls) == 1
    j(np.ones((4, 3)))  # a new shape: traced again
    assert len(calls) == 2 and len(j.compiled) == 2
    # Back to the first shape, then a new dtype (the last program tried first, then the right one)
    np.testing.assert_allclose(j(a).data, (a * a).sum(0))
    assert j(a.astype(np.float32)).dtype == np.float32 and len(j.compiled) == 3
    np.testing.assert_allclose(j(np.ones((4, 3))).data, [4.0, 4.0, 4.0])
    assert len(calls) == 3


def test_jit_traces_again_for_another_container_of_the_same_arrays():
    # The output's structure can follow the input's: a program traced for a list must not
    # answer a tuple (or a dict with other keys) with a list.
    j = hlo.jit(lambda ps: type(ps)(p * 2 for p in ps) if not isinstance(ps, dict)
                else {k: v * 2 for k, v in ps.items()})
    a = np.ones(3)
    assert isinstance(j([a, a]), list)
    assert isinstance(j((a, a)), tuple)
    assert set(j({"w": a, "b": a})) == {"w", "b"} and set(j({"u": a, "v": a})) == {"u", "v"}
    assert len(j.compiled) == 4
    # The outputs' containers are levels.unflatten's, built in C++ (hlo._pytrees): a dict keeps
    # its keys' order, a list or tuple subclass its type.
    class Pair(tuple):
        pass
    out = hlo.jit(lambda x: ({"z": x, "a": x * 2}, Pair([x, [x + 1]])))(a)
    assert list(out[0]) == ["z", "a"] and type(out[1]) is Pair
    np.testing.assert_allclose(out[1][1][0].data, a + 1)


def test_jit_takes_and_returns_namedtuples_as_jax_jit_does():
    # A namedtuple is built from its fields one by one: rebuilt from one list, a two-field one
    # raised and a one-field one held the list in its field.
    P, Q = collections.namedtuple("P", "w b"), collections.namedtuple("Q", "w")
    a = np.arange(3.0)
    both = hlo.jit(lambda p: P(p.w * 2, p.w + p.b))(P(a, a))
    assert type(both) is P
    np.testing.assert_allclose(both.w.data, a * 2)
    np.testing.assert_allclose(both.b.data, a * 2)
    one = hlo.jit(lambda x: Q(x * 2))(a)
    assert type(one) is Q
    np.testing.assert_allclose(one.w.data, a * 2)


def test_jit_of_per_example_gradients_equals_eager_for_each_calls_parameters():
    # vmap(grad)'s per-example copies ask every level on the stack for tangents: jit's trace
    # level had no such method, and the trace raised AttributeError. The copy of the shared
    # parameters was a bare view, compiled in as a constant: a second call's w was not read.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3))
    g = func.vmap(func.grad(lambda w, x: (F.linear(x, w) ** 2).sum()), in_dims=(None, 0))
    compiled = hlo.jit(g)
    for w in rng.normal(size=(2, 2, 3)):
        np.testing.assert_allclose(compiled(w, x).data,
                                   g(minigrad.Tensor(w), minigrad.Tensor(x)).data, **TOL)


def test_jit_of_per_example_cross_entropy_reads_each_calls_targets_and_parameters():
    """vmap's cross_entropy picked by indexing with the targets, which was not exported (and,
    as an array, would have been compiled in). Now the targets are the program's operand:
    vmap(grad), vmap(hessian) and a loss per example with two rows each equal eager for each
    call's targets, a -inf logit elsewhere in a row stays finite, and a target out of range
    raises eager's error."""
    rng = np.random.default_rng(0)
    w, x, x2 = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2, 4))
    loss = lambda w, xi, yi: F.cross_entropy(F.linear(xi, w), yi)
    cases = [(func.vmap(func.grad(loss), in_dims=(None, 0, 0)), x),
             (func.vmap(func.hessian(loss), in_dims=(None, 0, 0)), x),
             (func.vmap(loss, in_dims=(None, 0, 0)), x2)]
    for f, inputs in cases:
        compiled = hlo.jit(f)
        shape = inputs.shape[:-1]
        for w_k, y in ((w, rng.integers(0, 3, shape)), (2 * w, rng.integers(0, 3, shape))):
            np.testing.assert_allclose(
                compiled(w_k, inputs, y).data,
                f(minigrad.Tensor(w_k), minigrad.Tensor(inputs), minigrad.Tensor(y)).data, **TOL)
        with pytest.raises(IndexError, match=r"target values must be in \[0, 3\)"):
            compiled(w, inputs, np.full(shape, 3))
    z = np.array([[0.0, -np.inf, 1.0], [2.0, 0.0, -np.inf]])
    per_example = func.vmap(func.grad(lambda z, t: F.cross_entropy(z, t)))
    expected = per_example(minigrad.Tensor(z), minigrad.Tensor(np.array([0, 1]))).data
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(hlo.jit(per_example)(z, np.array([0, 1])).data, expected, **TOL)


def test_jit_of_a_derivative_through_the_losss_own_gradient_reads_each_calls_targets():
    """cross_entropy's gradient node built its one-hot as an array from the targets when
    differentiated with respect to its upstream gradient: jit compiled the first call's in (the
    second call gave 0.309 where eager gives -0.441)."""
    rng = np.random.default_rng(0)
    z, weights = rng.normal(size=(4, 3)), np.arange(12.0).reshape(4, 3)

    def f(w, z, t):
        return (func.grad(lambda z: F.cross_entropy(z, t) * w)(z) * weights).sum()
    outer = func.grad(f)
    compiled = hlo.jit(outer)
    for t in (np.array([0, 1, 2, 0]), np.array([2, 2, 1, 1])):
        np.testing.assert_allclose(compiled(np.array(1.5), z, t).data,
                                   outer(minigrad.Tensor(1.5), minigrad.Tensor(z),
                                         minigrad.Tensor(t)).data, **TOL)


def test_what_a_trace_would_compile_in_from_its_first_call_is_refused():
    """Each of these gave the first call's answer on later calls, silently: a traced int as a
    slice bound or reshape size (x[:n] kept n = 3); backward() inside f (w.grad was the first
    call's gradient, and a sum of two passes only the first); an optimizer step inside f
    (its write into the weights ran at the trace, before the program's constants were
    taken). jit(grad(f)) and returning gradients stay the way."""
    x = np.arange(6.0)
    n = minigrad.Tensor(np.array(3))
    for f in (lambda x, n: x[:n], lambda x, n: x[1:n + 1], lambda x, n: x.reshape(n, -1)):
        with pytest.raises(RuntimeError, match="used as an index or a shape"):
            hlo.jit(f)(x, n)
    w = minigrad.Tensor(np.ones(6), requires_grad=True)

    def with_backward(x):
        (w * x).sum().backward()
        return x * 1

    def retained(x):
        y = w * x
        y.retain_grad()
        return minigrad.grad(y.sum(), w)[0]
    opt = minigrad.optim.SGD([w], lr=0.5)
    w.grad = minigrad.Tensor(np.ones(6))
    for f, match in ((with_backward, "backward"), (retained, "retain_grad"),
                     (lambda x: (opt.step(), x * 1)[1], "optimizer step")):
        with pytest.raises(RuntimeError, match=match):
            hlo.jit(f)(x)
    np.testing.assert_array_equal(w.data, np.ones(6))  # (no step ran)
    step = hlo.jit(func.grad(lambda w, x: (w * w * x).sum()))
    for k in (1.0, 2.0):
        np.testing.assert_allclose(step(np.full(6, k), x).data, 2 * k * x)


def test_keyword_arguments_and_a_donated_tensor_passed_twice_are_clear_errors():
    """jit took no keywords with Python's words about its inner function; a donated tensor
    passed twice raised XLA's INVALID_ARGUMENT, naming neither argument nor fix."""
    with pytest.raises(TypeError, match="keyword arguments are not taken"):
        hlo.jit(lambda a, scale=1.0: a * scale)(np.ones(2), scale=2.0)
    pair = hlo.jit(lambda a, b: (a + b, a * b), donate_argnums=(0, 1))
    add = hlo.jit(lambda a, b: a + b, donate_argnums=0)
    for f in (pair, add):
        p = pair(np.ones(3), np.ones(3))[0]
        with pytest.raises(ValueError, match="passed twice"):
            f(p, p)


def test_0d_array_arguments_stay_0d_and_promote_as_in_eager():
    x, s = np.array([1.0, 2.0], np.float32), np.array(3.0)  # a 0-d float64 is a scalar to types
    eager = minigrad.Tensor(x) * minigrad.Tensor(s)
    compiled = hlo.jit(lambda x, s: x * s)(x, s)
    assert compiled.dtype == eager.dtype == np.float32
    np.testing.assert_allclose(compiled.data, eager.data)
    assert "%arg1: tensor<f64>" in hlo.export(lambda x, s: x * s, x, s)
    assert hlo.jit(lambda s: s * 2)(s).shape == ()


def test_jit_refuses_class_indices_out_of_range_as_eager_does():
    """The compiled one-hot of an index out of range is all zeros (a loss of -0.0), so the
    program checks the targets on each run, and the call raises eager's error."""
    logits = np.random.default_rng(0).normal(size=(3, 4))
    loss = hlo.jit(lambda x, t: F.cross_entropy(x, t))
    step = hlo.jit(func.grad(lambda x, t: F.cross_entropy(x, t)))
    for f in (loss, step):
        f(logits, np.array([0, 3, 1]))
        for bad in ([0, 4, 1], [-1, 0, 1]):
            with pytest.raises(IndexError, match=r"target values must be in \[0, 4\)"):
                f(logits, np.array(bad))


def test_jit_outputs_fed_back_stay_on_the_device_and_inputs_changed_in_place_are_seen():
    """The dispatch fast path: an output tensor passed back in is used as its device buffer,
    without a transfer, until its data is replaced; every array is copied in on each call."""
    j = hlo.jit(lambda x: x * 2 + 1)
    a = np.arange(6.0).reshape(2, 3)
    t = j(a)
    buffer = tensor.unread_buffer(t)
    assert buffer is not None  # not read on the host
    arrays, key = [], []
    hlo._structure((t,), arrays, key, [])
    assert arrays[0] is buffer  # the buffer itself: no transfer
    assert tensor.unread_buffer(t) is buffer  # and still unread
    np.testing.assert_allclose(j(t).data, (a * 2 + 1) * 2 + 1)  # fed back
    out = t.data
    assert not out.flags.writeable  # a view of an immutable device buffer
    with pytest.raises(ValueError):
        out[0, 0] = 7.0
    arrays.clear()
    hlo._structure((t,), arrays, key, [])
    assert arrays[0] is buffer  # read on the host: still passed as its buffer
    np.testing.assert_allclose(j(t).data, (a * 2 + 1) * 2 + 1)
    np.testing.assert_allclose(j(out).data, (a * 2 + 1) * 2 + 1)  # the array: copied in
    np.testing.assert_allclose(j(out.copy()).data, (a * 2 + 1) * 2 + 1)
    a[0, 0] = 100.0  # changed in place between calls: the next call sees it
    np.testing.assert_allclose(j(a).data, a * 2 + 1)
    np.testing.assert_allclose(j(out).data, (np.arange(6.0).reshape(2, 3) * 2 + 1) * 2 + 1)
    t.data = np.zeros((2, 3))  # replaced: the call takes the new data, not the old buffer
    np.testing.assert_allclose(j(t).data, np.ones((2, 3)))


def test_jit_outputs_read_on_the_host_only_when_read_and_held_ones_keep_their_values():
    """jit returns tensors over device buffers, read into NumPy only when read: a training loop
    that feeds its parameters back never copies them out, and a tensor the caller kept from an
    earlier step still reads that step's values."""
    step = hlo.jit(_mlp_step(0.5))
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(8, 5)), rng.integers(0, 3, size=8)
    params = [rng.normal(size=s) for s in ((4, 5), (4,), (3, 4), (3,))]
    eager_params, history = [minigrad.Tensor(p) for p in params], []
    eager_step, mx, my = _mlp_step(0.5), minigrad.Tensor(x), minigrad.Tensor(y)
    for _ in range(3):
        loss, params = step(params, x, y)
        eager_loss, eager_params = eager_step(eager_params, mx, my)
        assert all(tensor.unread_buffer(p) is not None for p in params)  # never read on the host
        history.append((loss, params, eager_loss, eager_params))
    for loss, params, eager_loss, eager_params in history:  # read after every step ran
        np.testing.assert_allclose(loss.data, eager_loss.data, **TOL)
        for p, e in zip(params, eager_params):
            np.testing.assert_allclose(p.data, e.data, **TOL)


def test_a_jit_output_is_an_ordinary_tensor_once_used():
    w = hlo.jit(lambda x: x * 3)(np.array([1.0, -2.0]))
    assert (w.shape, w.dtype, w.grad, w.grad_fn, w.requires_grad, w.is_leaf) == (
        (2,), np.float64, None, None, False, True)
    w.requires_grad = True
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.data, [6.0, -12.0])
    assert repr(w) == repr(minigrad.Tensor([3.0, -6.0], requires_grad=True))
    copied = minigrad.Tensor(w)
    copied.add_(1.0)  # a copy: writable, and w unchanged
    np.testing.assert_allclose(w.data, [3.0, -6.0])
    with pytest.raises(ValueError):  # w's own data is the device buffer's read-only view
        w.detach().add_(1.0)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        w.nonexistent
    assert type(w) is minigrad.Tensor  # once used, a plain Tensor
    # Written before it was ever read: the engine still sees a Tensor that requires grad.
    v = hlo.jit(lambda x: x * 3)(np.array([1.0, -2.0]))
    v.requires_grad = True
    (v * v).sum().backward()
    np.testing.assert_allclose(v.grad.data, [6.0, -12.0])
    # Its data replaced before it was read: a call takes the new data, not the buffer.
    u = hlo.jit(lambda x: x * 3)(np.array([1.0, -2.0]))
    u.data = np.array([5.0, 5.0])
    np.testing.assert_allclose(hlo.jit(lambda x: x + 1)(u).data, [6.0, 6.0])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
def test_the_program_checks_class_indices_of_each_integer_dtype_as_eager_does(dtype):
    """jit's program flags an index out of range itself (emit_ops.targets_out_of_range), in
    the target's own dtype: unsigned ones are never negative, and an int8 target of 200
    classes can hold no value >= 200 but can hold -1."""
    rng = np.random.default_rng(0)
    loss = hlo.jit(lambda x, t: F.cross_entropy(x, t))
    for classes, good, bads in ((4, [0, 3, 1], ([0, 4, 1], [-1, 0, 1])),
                                (200, [0, 127, 5], ([-1, 0, 1], [0, 200, 1]))):
        logits = rng.normal(size=(3, classes))
        np.testing.assert_allclose(loss(logits, np.array(good, dtype)).data,
                                   F.cross_entropy(minigrad.Tensor(logits), np.array(good)).data, **TOL)
        for bad in bads:
            # (-1 wraps to the top of an unsigned dtype, 200 to -56 in an int8: out of range still)
            target = np.array(bad).astype(dtype)
            with pytest.raises(IndexError, match=r"target values must be in \[0, %d\)" % classes):
                loss(logits, target)
    assert "stablehlo.or" not in hlo.export(lambda x, t: F.cross_entropy(x, t), logits, np.array(good))
    empty = hlo.jit(lambda x, t: F.cross_entropy(x, t).sum() * 0)(np.zeros((0, 4)), np.zeros(0, dtype))
    assert empty.shape == ()  # no rows: nothing to check, and no flag returned


def test_a_target_that_is_a_jit_output_is_checked_too():
    logits = np.random.default_rng(0).normal(size=(3, 4))
    loss = hlo.jit(lambda x, t: F.cross_entropy(x, t))
    ok, bad = (hlo.jit(lambda t: t * 1)(np.array(v)) for v in ([0, 3, 1], [0, 4, 1]))
    np.testing.assert_allclose(loss(logits, ok).data,
                               F.cross_entropy(minigrad.Tensor(logits), [0, 3, 1]).data, **TOL)
    with pytest.raises(IndexError, match=r"target values must be in \[0, 4\)"):
        loss(logits, bad)


@pytest.mark.parametrize("made", [lambda t: t[:], lambda t: t + 0, lambda t: t.reshape(1, 3)[0]])
def test_a_target_the_program_computes_is_checked_too(made):
    """A target computed from an input (sliced, shifted, reshaped) was left unchecked: its
    values out of range gave a silently wrong loss where eager raises."""
    logits = np.random.default_rng(0).normal(size=(3, 4))
    f = lambda x, t: F.cross_entropy(x, made(t))
    loss = hlo.jit(f)
    good = np.array([0, 3, 1])
    np.testing.assert_allclose(loss(logits, good).data,
                               f(minigrad.Tensor(logits), minigrad.Tensor(good)).data, **TOL)
    for bad in ([0, 7, 1], [-1, 0, 1]):
        with pytest.raises(IndexError, match=r"must be in \[0, 4\), got %d\.\.%d" % (min(bad), max(bad))):
            loss(logits, np.array(bad))


def test_a_target_of_two_losses_is_checked_against_each_as_eager_checks_it():
    """One target, two cross_entropy calls of 5 and 3 classes: its check against the first
    was overwritten by the second's, so the order of the calls decided whether 4 passed."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 5)), rng.normal(size=(2, 3))
    for f in (lambda a, b, t: F.cross_entropy(a, t) + F.cross_entropy(b, t),
              lambda a, b, t: F.cross_entropy(b, t) + F.cross_entropy(a, t)):
        loss = hlo.jit(f)
        loss(a, b, np.array([0, 2]))
        with pytest.raises(IndexError, match=r"must be in \[0, 3\), got 0\.\.4"):
            loss(a, b, np.array([0, 4]))


def test_a_jit_call_leaves_no_reference_cycle():
    """A dropped call's outputs (and their device buffers) are freed at once, not at the next
    garbage collection: one cycle per call once made every digits-MLP step pay for them there."""
    j = hlo.jit(lambda x: {"twice": [x * 2], "plus": (x + 1,)})
    a = np.ones(3)
    j(a)  # traced and compiled
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            out = j(a)
        assert out["plus"][0].data.tolist() == [2.0, 2.0, 2.0]
        del out
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_relu_and_pow_gradient_masks_follow_the_data_not_the_trace():
    """Masks are computed inside the program: new inputs route gradients anew."""
    g = hlo.jit(func.grad(lambda x, y: (F.relu(x) * x ** y).sum(), argnums=(0, 1)))
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x, y = rng.normal(size=5), rng.integers(0, 3, size=5).astype(np.float64)
        x[seed] = 0.0
        eager = func.grad(lambda x, y: (F.relu(x) * x ** y).sum(), argnums=(0, 1))(
            minigrad.Tensor(x), minigrad.Tensor(y))
        for c, e in zip(g(x, y), eager):
            np.testing.assert_allclose(c.data, e.data, **TOL)


def test_comparison_masks_follow_the_data_not_the_trace():
    j = hlo.jit(lambda x: x * (x > 0) + (x == 1) * 10.0)
    x = np.array([-1.0, 1.0, 2.0])
    for data in (x, -x):
        t = minigrad.Tensor(data)
        np.testing.assert_allclose(j(data).data, (t * (t > 0) + (t == 1) * 10.0).data)


def test_a_detached_input_is_the_input_not_a_constant_of_the_trace():
    j = hlo.jit(lambda x: x.detach() * 2 + x)
    for data in (np.ones(2), np.zeros(2)):
        np.testing.assert_allclose(j(data).data, data * 3)


def test_an_in_place_change_under_jit_is_an_error_not_left_out_of_the_program():
    with pytest.raises(RuntimeError, match="in-place operations inside minigrad.func"):
        hlo.jit(lambda x: (x * 2).add_(1))(np.arange(3.0))


def _train(step, params, x, y, steps):
    losses = []
    for _ in range(steps):
        loss, params = step(params, x, y)
        losses.append(float(loss.data))
    return losses


def _mlp_step(lr):
    def loss_fn(params, x, y):
        w1, b1, w2, b2 = params
        return F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)

    def step(params, x, y):
        grads, loss = func.grad(lambda ps: (lambda l: (l, l))(loss_fn(ps, x, y)), has_aux=True)(params)
        return loss, [p - lr * g for p, g in zip(params, grads)]
    return step


def test_donated_parameters_are_reused_by_xla_and_unreadable_after_while_arrays_and_read_ones_are_kept():
    """jit(f, donate_argnums) as jax.jit's: the unread outputs passed back in a donated
    argument are XLA's to overwrite (a clear error if read afterwards); the caller's arrays,
    and outputs already read on the host, are copied in and keep their values."""
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(8, 5)), rng.integers(0, 3, size=8)
    params = [rng.normal(size=s) for s in ((4, 5), (4,), (3, 4), (3,))]
    kept = [p.copy() for p in params]
    step, eager_step = hlo.jit(_mlp_step(0.5), donate_argnums=0), _mlp_step(0.5)
    eager, mx, my = [minigrad.Tensor(p) for p in params], minigrad.Tensor(x), minigrad.Tensor(y)
    current = params
    for _ in range(4):
        before = current
        loss, current = step(current, x, y)
        eager_loss, eager = eager_step(eager, mx, my)
        if before is not params:
            with pytest.raises(RuntimeError, match="donated to an hlo.jit call"):
                before[0].data
    np.testing.assert_allclose(loss.data, eager_loss.data, **TOL)
    for p, e, k, q in zip(current, eager, kept, params):
        np.testing.assert_allclose(p.data, e.data, **TOL)
        np.testing.assert_array_equal(q, k)  # the arrays passed first: unchanged
    read = [p.data.copy() for p in current]  # read on the host: no longer XLA's to reuse
    later = step(current, x, y)[1]
    for p, r in zip(current, read):
        np.testing.assert_array_equal(p.data, r)
    assert not np.allclose(later[0].data, read[0])
    # w1 is written into the first output of its shape, after the targets' flag and the loss
    assert "%arg0: tensor<4x5xf64> {tf.aliasing_output = 2 : i32}" in next(iter(step.compiled.values())).text
    bad = y.copy()
    bad[0] = 3
    unread = step(later, x, y)[1]
    with pytest.raises(IndexError, match=r"target values must be in \[0, 3\)"):
        step(unread, x, bad)
    with pytest.raises(RuntimeError, match="donated"):  # consumed all the same, as documented
        unread[0].data
    with pytest.raises(ValueError, match=r"donate_argnums \[3\], but f got 1 arguments"):
        hlo.jit(lambda t: t, donate_argnums=3)(x)
    with pytest.raises(TypeError, match="non-negative ints"):
        hlo.jit(lambda t: t, donate_argnums=[-1])


def test_the_digits_mlp_trains_through_jit_with_the_same_loss_curve():
    from minigrad.train import load_digits_split
    x, y, _, _ = load_digits_split(seed=0)
    rng = np.random.default_rng(0)
    params = [rng.uniform(-0.1, 0.1, s).astype(np.float32) for s in ((32, 64), (32,), (10, 32), (10,))]
    step = _mlp_step(0.5)
    eager = _train(step, [minigrad.Tensor(p) for p in params], minigrad.Tensor(x), minigrad.Tensor(y), 30)
    compiled = _train(hlo.jit(step), params, x, y, 30)
    assert eager[-1] < 0.5 * eager[0]  # it trains
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)
    # The eager loop with minigrad's optimizer gives the same curve too.
    model = minigrad.nn.MLP([64, 32, 10])
    for layer, (w, b) in zip(model.layers, (params[:2], params[2:])):
        layer.weight, layer.bias = minigrad.Tensor(w, requires_grad=True), minigrad.Tensor(b, requires_grad=True)
    opt = minigrad.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(minigrad.Tensor(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(compiled, losses, rtol=1e-5)


def test_jit_routes_max_gradients_and_tangents_by_each_calls_maxima():
    """max's gradient was not exported (its mask was an array of the traced values' maxima),
    and jvp's tangent through max compiled that mask in (1.0 for any later x, eager 3.0). The
    mask is now recorded (ops.routing): to argmax's index over a dim, shared between ties or
    NaNs over all; a stable log-sum-exp's detached max and its Hessian compile too."""
    cases = [func.grad(lambda t: t.max() * 3), func.grad(lambda t: (t.max(1)[0] * 2.0).sum()),
             func.grad(lambda t: (t.max(0, keepdim=True)[0] ** 2).sum()),
             lambda t: func.jvp(lambda s: s.max(), (t,), (t * 0 + np.arange(6.0).reshape(2, 3),))[1],
             lambda t: func.jvp(lambda s: s.max(1)[0], (t,), (t * 2 + 1,))[1],
             func.hessian(lambda s: (lambda m: (s - m).exp().sum().log() + m)(s.max().detach())),
             func.vmap(func.grad(lambda r: r.max() * r.sum()))]
    inputs = [np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]]), np.array([[9.0, 5.0, 2.0], [0.0, 0.0, 3.0]]),
              np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]),
              np.array([[np.nan, 1.0, 1.0], [2.0, np.nan, np.nan]])]
    for f in cases:
        compiled = hlo.jit(f)
        for x in inputs:
            np.testing.assert_allclose(compiled(x).data, f(minigrad.Tensor(x)).data, **TOL)
    text = hlo.export(lambda t: t.max(), inputs[0], grad=True)
    assert "stablehlo.compare" in text  # (the mask, computed by the program)


def test_max_over_a_dim_takes_the_argmaxs_tangent_alone_and_float16_ties_count():
    """A tangent of inf away from the argmax made eager's max(dim) tangent NaN (inf * 0; torch
    and jit: the argmax's); under jit a float16 count of 70000 ties overflowed to inf, and the
    gradient was 0 (review)."""
    x, v = np.array([1.0, 5.0, 2.0]), np.array([np.inf, 1.0, np.nan])
    f = lambda x, v: func.jvp(lambda s: s.max(0)[0], (x,), (v,))[1]
    want = torch.func.jvp(lambda s: s.max(0)[0], (torch.tensor(x),), (torch.tensor(v),))[1]
    assert f(minigrad.Tensor(x), minigrad.Tensor(v)).item() == hlo.jit(f)(x, v).item() == want.item()
    g = func.grad(lambda t: t.max())
    zeros = np.zeros(70000, np.float16)
    np.testing.assert_array_equal(hlo.jit(g)(zeros).data, g(minigrad.Tensor(zeros)).data)


def test_what_is_not_exported_is_a_clear_error():
    x = np.arange(6.0).reshape(2, 3)
    with pytest.raises(NotImplementedError, match="only basic indexing"):
        hlo.export(lambda t: t[np.array([0, 0])], x)
    # an index array is named by shape and dtype, not printed in full
    with pytest.raises(NotImplementedError, match=r"not \[an array of shape \(1000,\) and dtype "
                       r"int64, slice\(None, 2, None\)\]$"):
        hlo.export(lambda t: t[np.arange(1000) % 2, :2], x)
    # (max's forward is exported)
    np.testing.assert_allclose(hlo.jit(lambda t: t.max(dim=1))(x).values.data, [2.0, 5.0])
    with pytest.raises(ValueError, match="f must return one scalar tensor"):
        hlo.export(lambda t: t * 2, x, grad=True)
    with pytest.raises(TypeError, match="the program takes"):
        hlo.load(hlo.export(lambda t: t * 2, x), [((2, 3), np.float64)], [((2, 3), np.float64)])(
            x.astype(np.float32))
    with pytest.raises(TypeError, match="the program returns"):
        hlo.load(hlo.export(lambda t: t * 2, x), [((2, 3), np.float64)], [((6,), np.float64)])(x)


def test_jit_takes_a_tensor_subclass_as_an_input():
    class Param(minigrad.Tensor):
        __slots__ = ()

    w = Param(np.array([1.0, 2.0]))
    j = hlo.jit(lambda t: t * 2)
    np.testing.assert_allclose(j(w).data, [2.0, 4.0])
    w.data = np.array([5.0, 6.0])  # an input, not a constant baked into the program
    np.testing.assert_allclose(j(w).data, [10.0, 12.0])


def test_jit_reads_big_endian_arrays_by_their_values():
    a = np.arange(6.0).reshape(2, 3)
    j = hlo.jit(lambda x, n: x * 2 + n)
    n = np.arange(3, dtype=">i8")
    np.testing.assert_allclose(j(a.astype(">f8"), n).data, a * 2 + np.arange(3))
    np.testing.assert_allclose(j(minigrad.Tensor(a.astype(">f8")), n).data, a * 2 + np.arange(3))
    np.testing.assert_allclose(j(a, n).data, a * 2 + np.arange(3))  # the same program, native
    assert len(j.compiled) == 1
    x = np.arange(4.0)
    run = hlo.load(hlo.export(lambda t: t * 2, x), [((4,), np.float64)], [((4,), np.float64)])
    np.testing.assert_allclose(run(x.astype(">f8"))[0], x * 2)


def test_jit_keeps_jaxs_x64_setting_as_the_caller_left_it_and_works_under_either():
    import jax
    import jax.numpy as jnp
    a, n = np.arange(6.0).reshape(2, 3), np.arange(3, dtype=np.int64)
    j = hlo.jit(lambda x, k: x * 2 + k)
    before = jax.config.jax_enable_x64
    try:
        for x64 in (False, True, False):  # x64 turned off again after a program compiled under it
            jax.config.update("jax_enable_x64", x64)
            out = j(a, n)
            assert out.dtype == np.float64
            np.testing.assert_array_equal(out.data, a * 2 + n)
            assert jax.config.jax_enable_x64 == x64  # minigrad changed nothing process-wide
            assert jnp.ones(2).dtype == (np.float64 if x64 else np.float32)
        assert len(j.compiled) == 1
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.mark.parametrize("read", ["item", "float", "int", "bool", "numpy", "tolist"])
def test_reading_a_traced_value_in_python_is_an_error_not_a_value_compiled_in(read):
    """jit traces once per signature: a value Python read from a tensor computed from the
    inputs was compiled in, so the next call with other values silently used the first's
    (jit(lambda x: x * float(x.sum())) gave [-3, -15] for [-1, -5], not [6, 30]). As jax.jit,
    it raises; a tensor that does not depend on the inputs (a closed-over weight) can be read."""
    calls = {"item": lambda t: t.sum().item(), "float": lambda t: float(t.sum()),
             "int": lambda t: int(t.sum() > 0), "bool": lambda t: bool(t.sum() > 0),
             "numpy": lambda t: t.numpy()[0], "tolist": lambda t: t.tolist()[0]}
    x = minigrad.Tensor(np.array([1.0, 2.0]))
    for transform in (hlo.jit, lambda f: (lambda *a: hlo.export(f, *a))):
        with pytest.raises(RuntimeError, match=r"hlo.jit: .* of a traced tensor"):
            transform(lambda t: t * calls[read](t))(x)
    w = minigrad.Tensor(np.array([3.0, 4.0]))
    scaled = hlo.jit(lambda t: t * calls[read](w))
    for values in ([1.0, 2.0], [-1.0, -5.0]):
        np.testing.assert_allclose(scaled(minigrad.Tensor(np.array(values))).data,
                                   np.array(values) * calls[read](w))


def test_a_closed_over_tensor_changed_in_place_is_read_again_not_kept_from_the_trace():
    """jit compiled the tensors f closes over as constants: after an optimizer step on a model
    that a jitted forward closed over, the forward kept the first weights (0.25-0.70 off eager
    after 1-3 SGD steps). It traces again when one has changed (its version, or its array
    replaced), and says so from the third time (pass them as arguments instead)."""
    from minigrad import nn, optim
    model = nn.MLP((2, 4, 3), rng=np.random.default_rng(0), dtype=np.float64)
    opt = optim.SGD(model.parameters(), lr=0.5)
    forward = hlo.jit(lambda x: model(x))
    x = minigrad.Tensor(np.random.default_rng(1).normal(size=(5, 2)))
    with pytest.warns(UserWarning, match="pass them as arguments"):
        for _ in range(4):  # (a trace, then three again)
            loss = F.cross_entropy(model(x), np.array([0, 1, 2, 0, 1]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            np.testing.assert_allclose(forward(x).data, model(x).data, rtol=1e-12)
    w, s = minigrad.Tensor(np.array([1.0, 1.0])), minigrad.Tensor(np.array(2.0))
    scaled = hlo.jit(lambda t: t * w * float(s))  # (closed over, and read in Python)
    t = minigrad.Tensor(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(scaled(t).data, [2.0, 4.0])
    w.mul_(5)
    np.testing.assert_array_equal(scaled(t).data, [10.0, 20.0])
    w.data = np.array([2.0, 3.0])
    np.testing.assert_array_equal(scaled(t).data, [4.0, 12.0])
    s.add_(1)
    np.testing.assert_array_equal(scaled(t).data, [6.0, 18.0])
    assert len(scaled.compiled) == 1  # (one signature: each trace replaced the last)


def test_a_jit_inside_another_transform_runs_as_part_of_it():
    """A jit called inside another jit's trace ran its own program on the trace's arrays, so the
    enclosing program held its result as a constant ([3, 5] for every input); inside vmap its
    program read the whole batch. It now runs f as it is there, its operations seen."""
    inner = hlo.jit(lambda a: a * 2)
    outer = hlo.jit(lambda a: inner(a) + 1)
    for values in ([1.0, 2.0], [10.0, 20.0]):
        np.testing.assert_array_equal(outer(minigrad.Tensor(np.array(values))).data,
                                      np.array(values) * 2 + 1)
    rows = hlo.jit(lambda r: (r * r).sum())
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(func.vmap(rows)(minigrad.Tensor(x)).data, (x * x).sum(1))


def test_a_tensor_copied_by_tensor_inside_jit_or_vmap_is_refused_or_watched():
    """Tensor(t) read t's array as it was: inside jit a traced value was compiled in (x +
    Tensor(x) gave 11, 22 for 10, 20), inside vmap the whole batch was copied. A closed-over
    tensor copied so is watched for changes, as one read by item()."""
    with pytest.raises(RuntimeError, match=r"hlo.jit: Tensor\(\) of a traced tensor.*detach"):
        hlo.jit(lambda x: x + minigrad.Tensor(x))(minigrad.Tensor(np.array([1.0, 2.0])))
    with pytest.raises(RuntimeError, match=r"vmap: Tensor\(\) of a batched tensor"):
        func.vmap(lambda r: minigrad.Tensor(r).sum() * r)(minigrad.Tensor(np.ones((3, 2))))
    w = minigrad.Tensor(np.array([1.0, 2.0]))
    scaled = hlo.jit(lambda x: x * minigrad.Tensor(w))
    x = minigrad.Tensor(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(scaled(x).data, [1.0, 2.0])
    w.mul_(3)
    np.testing.assert_array_equal(scaled(x).data, [3.0, 6.0])


def test_gradients_through_a_jitted_function_are_eagers():
    """grad, vjp and jacrev of a jitted function, and a backward through a jitted forward
    that closes over a model's parameters, were silently zero: a program's outputs carry no
    gradient. The outputs are differentiable now (as jax.jit's and torch.compile's), the
    forward still compiled: a backward runs f again, recorded (hlo._Recomputed)."""
    square = hlo.jit(lambda x: x * x)
    x = minigrad.Tensor(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(func.grad(lambda x: square(x).sum())(x).data, [2, 4])
    np.testing.assert_array_equal(func.jacrev(square)(x).data, [[2, 0], [0, 4]])
    np.testing.assert_array_equal(func.hessian(lambda x: (square(x) * x).sum())(x).data,
                                  [[6, 0], [0, 12]])  # (a second order, through the recompute)
    assert len(square.compiled) == 1
    model = nn.MLP([3, 4, 2], rng=np.random.default_rng(0), dtype=np.float64)
    forward = hlo.jit(lambda x: model(x))
    inputs, target = minigrad.Tensor(np.ones((5, 3))), np.array([0, 1, 0, 1, 1])
    F.cross_entropy(forward(inputs), target).backward()
    grads = [p.grad.data.copy() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    F.cross_entropy(model(inputs), target).backward()
    for g, p in zip(grads, model.parameters()):
        np.testing.assert_allclose(g, p.grad.data, rtol=1e-12)
    with minigrad.no_grad():  # (nothing to differentiate: plain outputs)
        assert not forward(inputs).requires_grad
    y = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    out = square(y)
    with minigrad.no_grad():
        y.add_(1.0)  # changed in place before the backward: an error, as for a saved tensor
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        out.sum().backward()


def test_a_jitted_step_with_parameters_that_require_grad_stays_compiled():
    """The step takes the gradient inside (jit(grad)): given a model's own parameters (which
    require grad), it ran uncompiled for a while, 3x slower; its outputs are differentiable
    and equal eager's."""
    model = nn.MLP([6, 8, 3], rng=np.random.default_rng(0), dtype=np.float64)
    params = list(model.parameters())
    x, y = minigrad.Tensor(np.random.default_rng(1).normal(size=(5, 6))), np.array([0, 1, 2, 0, 1])
    step = _mlp_step(0.5)
    compiled = hlo.jit(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no warning: it compiles)
        mine = compiled(params, x, y)
    theirs = step(params, x, y)
    assert len(compiled.compiled) == 1
    for m, t in zip(flatten(mine)[0], flatten(theirs)[0]):
        np.testing.assert_allclose(m.data, t.data, rtol=1e-10)
        assert m.requires_grad == t.requires_grad


@pytest.mark.parametrize("op", ["==", "!=", ">", "<", ">=", "<="])
def test_jit_compares_in_eagers_promoted_dtype(op):
    """The program compared in NumPy's result_type: float32 [n] == a 0-d float64 0.1 was False
    (compared in float64), True in eager (and torch: in float32); float32 16777216 == int64
    16777217 likewise."""
    compare = eval("lambda a, b: a %s b" % op)
    values = {"f32": np.array([0.1, 16777216.0, -0.0, np.nan], np.float32),
              "f64": np.array([0.1, 16777217.0, 0.0, np.nan]),
              "i64": np.array([0, 16777217, 0, 3]), "bool": np.array([True, False, False, True]),
              "f64 0-d": np.array(0.1), "i64 0-d": np.array(16777217)}
    for a in values.values():
        for b in values.values():
            eager = compare(minigrad.Tensor(a), minigrad.Tensor(b)).data
            np.testing.assert_array_equal(hlo.jit(compare)(a, b).data, eager)


def test_jit_keeps_eagers_signed_zeros_in_constants():
    """A constant whose elements all compared equal became one value: [0., -0.] was [0., 0.]."""
    c = minigrad.Tensor(np.array([0.0, -0.0]))
    out = hlo.jit(lambda x: x / c)(np.ones(2)).data
    np.testing.assert_array_equal(out, [np.inf, -np.inf])


def test_jit_of_bool_max_and_indexing_like_eager():
    """max and argmax of a bool tensor raised ValueError (np.iinfo of bool); a gradient of
    x[0, 0] raised NotImplementedError (the two 0s are one object, taken for a repeated
    index); x[True] was read as x[1], an MLIR error, and is a clear NotImplementedError."""
    b = np.array([[True, False], [False, False]])
    for f in (lambda x: x.max(), lambda x: x.max(0)[0], lambda x: x.max(1)[1]):
        np.testing.assert_array_equal(hlo.jit(f)(b).data, f(minigrad.Tensor(b)).data)
    x = np.arange(6.0).reshape(2, 3)
    for index in ((0, 0), (1, slice(0, 3, 2)), (Ellipsis, 2)):
        g = func.grad(lambda t: (t[index] * 3).sum())
        np.testing.assert_array_equal(hlo.jit(g)(x).data, g(minigrad.Tensor(x)).data)
    with pytest.raises(NotImplementedError, match="basic indexing"):
        hlo.jit(lambda t: t[True])(x)


def test_an_integer_power_of_a_traced_exponent_is_refused_not_zero():
    """Traced with exponent [1], a call with [-1] gave [0]: eager refuses a negative integer
    exponent on each call, and the program cannot. A constant exponent (checked by eager at
    the trace) and float powers compile."""
    with pytest.raises(NotImplementedError, match="integer power"):
        hlo.jit(lambda a, b: a ** b)(np.array([2]), np.array([1]))
    np.testing.assert_array_equal(hlo.jit(lambda a: a ** 3)(np.array([2])).data, [8])
    np.testing.assert_array_equal(hlo.jit(lambda a, b: a ** b)(np.array([2.0]), np.array([-1.0])).data,
                                  [0.5])
