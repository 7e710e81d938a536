"""The op table's second pass: dtype promotion, 0-d tensors and error messages, against torch."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import minigrad
from minigrad import functional as F

torch.set_default_dtype(torch.float64)  # minigrad's default float dtype is float64

BINARY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "div": lambda a, b: a / b, "pow": lambda a, b: a ** b}

# (left dtype, left shape, right dtype, right shape): dimensioned and 0-d tensors of each category.
PAIRS = [
    ("int64", (3,), "float32", (3,)),
    ("int32", (3,), "float64", (3,)),
    ("float32", (3,), "float64", (3,)),
    ("float32", (3,), "float64", ()),
    ("int32", (3,), "float64", ()),
    ("int32", (3,), "int64", ()),
    ("bool", (3,), "int32", (3,)),
    # A bool operand is not cast (NumPy promotes it in the loop): each case torch has.
    ("bool", (3,), "float32", ()),
    ("bool", (), "float16", (3,)),
    ("float32", (3,), "bool", (3,)),
    ("bool", (3,), "int64", ()),
    ("bool", (3,), "complex64", ()),
    ("uint8", (3,), "int8", (3,)),
    ("float64", (), "float32", ()),
    ("float32", (3,), "complex128", ()),
    ("float64", (3,), "complex64", (3,)),
]


def _same_as_torch(op, a, b, ta, tb):
    """op on minigrad's operands and torch's: the same dtype and values, or both refuse."""
    try:
        theirs = BINARY[op](ta, tb)
    except RuntimeError as e:
        assert "bool" in str(e)  # torch refuses subtraction with a bool: so does minigrad
        with pytest.raises(TypeError, match="sub: subtraction with a bool tensor"):
            BINARY[op](a, b)
        return
    mine = BINARY[op](a, b)
    assert mine.dtype == np.dtype(str(theirs.dtype).replace("torch.", ""))
    np.testing.assert_allclose(mine.data, theirs.numpy(), rtol=1e-6)


def _array(dtype, shape, seed):
    values = np.random.default_rng(seed).uniform(1, 3, shape)
    return np.asarray(values > 2 if dtype == "bool" else values).astype(dtype)


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "%s%s-%s%s" % p)
def test_binary_ops_promote_dtypes_like_torch(op, pair):
    da, sa, db, sb = pair
    a, b = _array(da, sa, 0), _array(db, sb, 1)
    if op == "pow" and "bool" in (da, db):
        pytest.skip("torch has no pow for bool")
    _same_as_torch(op, minigrad.Tensor(a), minigrad.Tensor(b), torch.from_numpy(a), torch.from_numpy(b))


@pytest.mark.parametrize("pair", [("int64", (), "uint8", (3,)), ("int8", (2,), "uint8", ()),
                                  ("int8", (2,), "uint8", (2,)), ("int16", (2,), "bool", ())],
                         ids=lambda p: "%s%s-%s%s" % p)
def test_true_division_of_integers_of_two_dtypes_divides_their_values_like_torch(pair):
    """Each integer operand becomes the default float: cast first to their common integer
    dtype, a negative int64 over a uint8 tensor wrapped (-1 / 1 gave 255; a review)."""
    da, sa, db, sb = pair
    a = np.array(-3, da) if sa == () else np.array([-3, 5], da)
    b = np.array(True) if db == "bool" else np.full(sb, 2, db)
    _same_as_torch("div", minigrad.Tensor(a), minigrad.Tensor(b), torch.from_numpy(a),
                   torch.from_numpy(b))


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("pair", [p for p in PAIRS if (p[1] == ()) != (p[3] == ())],
                         ids=lambda p: "%s%s-%s%s" % p)
def test_0d_results_of_operations_promote_as_0d_tensors_like_torch(op, pair):
    """A 0-d operation's result (a loss), which NumPy computes as a scalar and minigrad holds
    as a 0-d array, promotes as a 0-d tensor: NumPy 2 promoted it by its dtype (float32 [n] + a
    float64 0-d product gave float64, torch float32: a review)."""
    da, sa, db, sb = pair
    a, b = _array(da, sa, 0), _array(db, sb, 1)
    if op == "pow" and "bool" in (da, db):
        pytest.skip("torch has no pow for bool")
    made = lambda t: t * 1 if t.ndim == 0 else t  # the 0-d operand as an operation's result
    mine_a, mine_b = made(minigrad.Tensor(a)), made(minigrad.Tensor(b))
    assert all(t.data.__class__ is np.ndarray for t in (mine_a, mine_b))
    _same_as_torch(op, mine_a, mine_b, made(torch.from_numpy(a)), made(torch.from_numpy(b)))


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("scalar", [2, 2.5, True, np.int64(2), np.float32(2.5), np.float64(2.5)],
                         ids=repr)
@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "bool"])
def test_python_numbers_promote_like_torch(op, scalar, dtype):
    if op == "pow" and (dtype == "bool" or scalar is True):
        pytest.skip("torch has no pow for bool")
    a = _array(dtype, (3,), 2)
    _same_as_torch(op, minigrad.Tensor(a), scalar, torch.from_numpy(a), scalar)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("scalar", [300, -1, 200, -129, 2 ** 40, np.int64(300)], ids=repr)
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16"])
def test_python_ints_out_of_an_integer_tensors_range_wrap_like_torch(op, scalar, dtype):
    # (NumPy 2 raised OverflowError: uint8 + 300, uint8 + -1, int8 * 200)
    a = np.array([1, 2, 100], dtype)
    for left, right in ((minigrad.Tensor(a), scalar), (scalar, minigrad.Tensor(a))):
        theirs = [torch.from_numpy(a) if isinstance(v, minigrad.Tensor) else v for v in (left, right)]
        _same_as_torch(op, left, right, *theirs)
    mine, theirs = minigrad.Tensor(a), torch.from_numpy(a.copy())
    if op != "div":  # (an integer tensor cannot take a quotient in place)
        exec("x %s= y" % {"add": "+", "sub": "-", "mul": "*"}[op], {}, {"x": mine, "y": scalar})
        exec("x %s= y" % {"add": "+", "sub": "-", "mul": "*"}[op], {}, {"x": theirs, "y": scalar})
        np.testing.assert_array_equal(mine.data, theirs.numpy())
    if dtype != "int16":  # as an exponent out of range: refused, as torch's
        with pytest.raises(OverflowError):
            minigrad.Tensor(a) ** 300
        with pytest.raises(RuntimeError, match="cannot be converted .* without overflow"):
            torch.from_numpy(a) ** 300


IN_PLACE_DTYPES = ["bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64",
                   "complex128"]


@st.composite
def in_place_case(draw):
    """x op= y: x of any dtype, y a tensor of any dtype and a shape that broadcasts with x's
    (wider too), or a Python number of each kind."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    arrays = [np.asarray(rng.integers(1, 6, shape)) for shape in shapes.input_shapes]
    dtypes = [draw(st.sampled_from(IN_PLACE_DTYPES)) for _ in arrays]
    x, y = [np.asarray(a > 2) if d == "bool" else a.astype(d) for a, d in zip(arrays, dtypes)]
    other = draw(st.sampled_from(["tensor", -300, 7, 2.5, True, 1 + 2j]))
    return x, draw(st.sampled_from(["+=", "-=", "*=", "/="])), y if other == "tensor" else other


@settings(max_examples=300, deadline=None)
@given(in_place_case())
def test_in_place_operators_keep_the_dtype_or_raise_like_torch(case):
    """torch's rules: the operation's promotion, then its canCast into x's dtype (int32 into
    uint8 is allowed; NumPy's same_kind refused it) and x's shape; subtraction of a bool
    refused (minigrad's -= allowed it)."""
    x, op, y = case
    outcomes = []
    for tensor in (minigrad.Tensor, torch.from_numpy):
        env = {"x": tensor(x.copy()), "y": tensor(y.copy()) if isinstance(y, np.ndarray) else y}
        try:
            with np.errstate(all="ignore"):
                exec("x %s y" % op, {}, env)
        except (RuntimeError, TypeError, ValueError):
            outcomes.append("raises")
        else:
            out = env["x"]
            outcomes.append((str(out.dtype).replace("torch.", ""),
                             out.numpy() if isinstance(out, torch.Tensor) else out.data))
    assert (outcomes[0] == "raises") == (outcomes[1] == "raises"), (case, outcomes)
    if outcomes[0] != "raises":
        assert outcomes[0][0] == outcomes[1][0], (case, outcomes)
        np.testing.assert_allclose(outcomes[0][1], outcomes[1][1], rtol=1e-3)


@st.composite
def binary_case(draw):
    """a op b: tensors of any two dtypes and broadcastable shapes (0-d among them), or a
    tensor and a Python or NumPy number of each kind, on either side."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    arrays = [np.asarray(rng.integers(1, 6, shape)) for shape in shapes.input_shapes]
    dtypes = [draw(st.sampled_from(BINARY_DTYPES)) for _ in arrays]
    a, b = [np.asarray(v > 2) if d == "bool" else v.astype(d) for v, d in zip(arrays, dtypes)]
    other = draw(st.sampled_from(["tensor", -300, 7, 0, 2.5, True, 1 + 2j, np.float32(1.5),
                                  np.int64(3)]))
    b = b if isinstance(other, str) else other
    return (b, a) if draw(st.booleans()) else (a, b), draw(st.sampled_from(sorted(BINARY_OPS)))


BINARY_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                 "float64", "complex64", "complex128"]
BINARY_OPS = dict(BINARY, gt=lambda a, b: a > b, le=lambda a, b: a <= b, eq=lambda a, b: a == b)


def _torch_quirk(a, b, op):
    """Where torch's answer is its own and minigrad keeps NumPy's: torch wraps a Python int out
    of an integer tensor's range before comparing (uint8 5 > -300 is False) or using it as a
    base of pow; it has no complex half; and its pow of booleans is refused or boolean."""
    number = next((v for v in (a, b) if not isinstance(v, np.ndarray)), None)
    dtypes = [np.asarray(v).dtype for v in (a, b) if isinstance(v, np.ndarray)]
    out_of_range = isinstance(number, int) and not isinstance(number, bool) and any(
        d.kind in "iu" and not np.iinfo(d).min <= number <= np.iinfo(d).max for d in dtypes)
    # (complex half: float16 with a complex number, or with a 0-d complex tensor that a
    # dimensioned float16 one outranks in size)
    return (out_of_range and op in ("gt", "le", "eq", "pow")
            or any(d == np.float16 for d in dtypes) and (
                isinstance(number, complex) or any(d.kind == "c" for d in dtypes))
            or op == "pow" and any(d == bool for d in dtypes))


@settings(max_examples=400, deadline=None)
@given(binary_case())
def test_binary_operators_give_torchs_dtype_and_values_or_raise_like_it(case):
    (a, b), op = case
    if _torch_quirk(a, b, op):
        return
    outcomes = []
    for tensor in (minigrad.Tensor, torch.from_numpy):
        left, right = [tensor(v.copy()) if isinstance(v, np.ndarray) else v for v in (a, b)]
        try:
            with np.errstate(all="ignore"):
                out = BINARY_OPS[op](left, right)
        except (RuntimeError, TypeError, ValueError, NotImplementedError, OverflowError):
            outcomes.append("raises")
        else:
            outcomes.append((str(out.dtype).replace("torch.", ""),
                             out.numpy() if isinstance(out, torch.Tensor) else out.data))
    assert (outcomes[0] == "raises") == (outcomes[1] == "raises"), (case, outcomes)
    if outcomes[0] != "raises":
        assert outcomes[0][0] == outcomes[1][0], (case, outcomes)
        np.testing.assert_allclose(np.asarray(outcomes[0][1]).astype(complex),
                                   outcomes[1][1].astype(complex), rtol=2e-3, atol=1e-6)


def test_gradients_of_mixed_precision_operands_keep_each_inputs_dtype():
    x = minigrad.Tensor(np.ones(3, np.float32), requires_grad=True)
    y = minigrad.Tensor(np.full(3, 2.0), requires_grad=True)
    (x * y).sum().backward()
    xt = torch.ones(3, dtype=torch.float32, requires_grad=True)
    yt = torch.full((3,), 2.0, requires_grad=True)
    (xt * yt).sum().backward()
    assert x.grad.dtype == np.float32 and y.grad.dtype == np.float64
    assert xt.grad.dtype == torch.float32 and yt.grad.dtype == torch.float64


def test_every_path_gives_a_mixed_precision_input_a_gradient_of_its_own_dtype():
    """torch casts each gradient to its input's dtype: autograd.grad, func.grad, a second
    backward accumulating into .grad, create_graph, and a caller's float64 gradient."""
    y = minigrad.Tensor(np.full(3, 2.0))
    f = lambda x: (x * y).sum()
    x = minigrad.Tensor(np.ones(3, np.float32), requires_grad=True)
    assert minigrad.grad(f(x), x)[0].dtype == np.float32
    assert minigrad.func.grad(f)(minigrad.Tensor(np.ones(3, np.float32))).dtype == np.float32
    f(x).backward()
    f(x).backward()
    assert x.grad.dtype == np.float32
    x.grad = None
    f(x).backward(create_graph=True)
    assert x.grad.dtype == np.float32
    x.grad = None
    x.backward(np.ones(3))
    assert x.grad.dtype == np.float32
    xt = torch.ones(3, dtype=torch.float32, requires_grad=True)
    (xt * torch.full((3,), 2.0)).sum().backward()
    (xt * torch.full((3,), 2.0)).sum().backward()
    assert xt.grad.dtype == torch.float32


@pytest.mark.filterwarnings("error::numpy.exceptions.ComplexWarning")  # (taken on purpose)
def test_a_real_input_gets_the_real_part_of_a_complex_gradient_like_torch():
    x = minigrad.Tensor(np.ones(2), requires_grad=True)
    (x * (1 + 2j)).backward(np.full(2, 1 - 1j))
    xt = torch.ones(2, requires_grad=True)
    (xt * (1 + 2j)).backward(torch.full((2,), 1 - 1j))
    assert x.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy())


@pytest.mark.parametrize("op", ["exp", "log", "tanh", "sigmoid"])
@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int32"])
def test_float_ops_of_integers_and_booleans_give_the_default_float_like_torch(op, dtype):
    x = np.array([[1, 0, 3], [2, 5, 1]]).astype(dtype)
    mine = getattr(minigrad.Tensor(x), op)()
    theirs = getattr(torch.tensor(x), op)()  # (torch's default float is float64 here)
    assert mine.dtype == np.float64 and theirs.dtype == torch.float64
    np.testing.assert_allclose(mine.data, theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["bool", "uint8", "uint16", "int8", "int32"])
def test_sums_of_integers_and_booleans_are_int64_like_torch(dtype):
    x = np.array([[1, 0, 3], [2, 5, 1]]).astype(dtype)
    for mine, theirs in ((minigrad.Tensor(x).sum(), torch.tensor(x).sum()),
                         (minigrad.Tensor(x).sum(0, keepdim=True), torch.tensor(x).sum(0, keepdim=True))):
        assert mine.dtype == np.int64 and theirs.dtype == torch.int64
        np.testing.assert_array_equal(mine.data, theirs.numpy())


# Every op of the op table on 0-d inputs: value and gradient as torch's.
ZERO_D = {
    "add": lambda L, a, b: a + b, "sub": lambda L, a, b: a - b, "mul": lambda L, a, b: a * b,
    "div": lambda L, a, b: a / b, "pow": lambda L, a, b: a ** b, "neg": lambda L, a, b: -a * b,
    "exp": lambda L, a, b: a.exp() * b, "log": lambda L, a, b: a.log() * b,
    "tanh": lambda L, a, b: a.tanh() * b, "sigmoid": lambda L, a, b: a.sigmoid() * b, "relu": lambda L, a, b: L.relu(a - b),
    "sum": lambda L, a, b: a.sum() + b.sum(0), "mean": lambda L, a, b: a.mean() * b.mean(-1),
    "max": lambda L, a, b: a.max() + b.max(0).values,
    "reshape": lambda L, a, b: a.reshape(1, 1) * b.reshape(()),
    "index": lambda L, a, b: a.reshape(1)[0] * b[None],
    "softmax": lambda L, a, b: L.softmax(a, 0) + L.log_softmax(b, -1),
    "matmul_of_reshaped": lambda L, a, b: a.reshape(1) @ b.reshape(1),
}


@pytest.mark.parametrize("name", sorted(ZERO_D))
def test_every_op_takes_0d_tensors_like_torch(name):
    from minigrad.tests.torch_compare import assert_matches_torch
    assert_matches_torch(ZERO_D[name], [np.array(1.3), np.array(0.7)], rtol=1e-12)


ERRORS = {
    "add": (lambda: minigrad.Tensor(np.ones((2, 3))) + minigrad.Tensor(np.ones(4)),
            ValueError, r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"),
    "mul": (lambda: minigrad.Tensor(np.ones((2, 3))) * np.ones((3, 2)),
            ValueError, r"multiply: shapes \(2, 3\) and \(3, 2\) cannot be broadcast"),
    "matmul_shapes": (lambda: minigrad.Tensor(np.ones((2, 3))) @ np.ones((4, 5)),
                      ValueError, r"matmul: shapes \(2, 3\) and \(4, 5\) are not aligned"),
    "matmul_0d": (lambda: minigrad.Tensor(2.0) @ minigrad.Tensor(np.ones(3)),
                  ValueError, r"matmul: both operands need at least one dimension.*use \*|with \*"),
    "reshape": (lambda: minigrad.Tensor(np.ones((2, 3))).reshape(4, 2),
                ValueError, r"reshape: cannot reshape a tensor of shape \(2, 3\) \(6 elements\)"),
    "index": (lambda: minigrad.Tensor(np.ones((2, 3)))[5],
              IndexError, r"index 5 into a tensor of shape \(2, 3\)"),
    "sum_dim": (lambda: minigrad.Tensor(np.ones(3)).sum(1),
                IndexError, r"sum: dim 1 is out of range for a tensor of shape \(3,\)"),
    "sum_dim_type": (lambda: minigrad.Tensor(np.ones(3)).sum(1.0),
                     TypeError, r"sum: dim must be an int or a tuple of ints, got 1.0"),
    "max_empty": (lambda: minigrad.Tensor(np.ones((0, 3))).max(),
                  RuntimeError, r"max: the tensor of shape \(0, 3\) is empty"),
    "pow_int": (lambda: minigrad.Tensor([2, 3]) ** minigrad.Tensor([1, -2]),
                ValueError, r"pow: integers to negative integer powers.*x \* 1.0"),
    "softmax_dim": (lambda: F.softmax(minigrad.Tensor(np.ones(3)), 1),
                    IndexError, r"softmax: dim 1 is out of range for a tensor of shape \(3,\)"),
    "softmax_dim_tuple": (lambda: F.softmax(minigrad.Tensor(np.ones(3)), (0,)),
                          TypeError, r"softmax: dim must be one int"),
    "linear": (lambda: F.linear(minigrad.Tensor(np.ones((2, 3))), minigrad.Tensor(np.ones((4, 5)))),
               ValueError, r"linear: input of shape \(2, 3\) does not fit a weight of shape \(4, 5\)"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_input_gives_an_error_naming_the_op_and_shapes(name):
    fn, kind, pattern = ERRORS[name]
    with pytest.raises(kind, match=pattern):
        fn()


def test_float16_sigmoid_is_rounded_once_like_torch():
    x = np.linspace(-12, 12, 4001).astype(np.float16)
    exact = torch.tensor(x, dtype=torch.float64).sigmoid().numpy()
    mine = minigrad.Tensor(x).sigmoid().data
    theirs = torch.tensor(x).sigmoid().numpy()
    assert mine.dtype == np.float16
    ulp = np.spacing(np.abs(theirs))
    assert np.abs(mine.astype(np.float64) - exact).max() <= np.abs(theirs.astype(np.float64) - exact).max()
    assert (np.abs(mine.astype(np.float64) - theirs) <= ulp).all()


@pytest.mark.parametrize("op", ["relu", "matmul"])
def test_relu_and_matmul_of_booleans_are_refused_like_torch(op):
    fn = {"relu": lambda L, t: L.relu(t), "matmul": lambda L, t: t @ t}[op]
    with pytest.raises((RuntimeError, NotImplementedError)):
        fn(torch, torch.tensor([True, False]))
    with pytest.raises(TypeError, match="%s: boolean tensors are not supported" % op):
        fn(F, minigrad.Tensor([True, False]))


def test_comparisons_promote_like_torch():
    x = np.array([0.1, 0.2, 0.3], np.float32)
    for other in (np.array(0.1), np.array(0.1, np.float32), 0.1, np.float64(0.1)):
        mine, theirs = minigrad.Tensor(x), torch.tensor(x)
        o_mine = minigrad.Tensor(other) if isinstance(other, np.ndarray) else other
        o_theirs = torch.tensor(other) if isinstance(other, np.ndarray) else other
        for op in ("__eq__", "__ne__", "__gt__", "__le__"):
            np.testing.assert_array_equal(getattr(mine, op)(o_mine).data,
                                          getattr(theirs, op)(o_theirs).numpy())


@pytest.mark.parametrize("op", ["__gt__", "__ge__", "__lt__", "__le__"])
def test_ordered_comparisons_of_complex_numbers_are_errors_like_torch(op):
    # (NumPy orders complex numbers by real, then imaginary part: minigrad answered silently)
    z, r = np.array([1 + 2j, 3 - 1j]), np.array([1.0, 4.0])
    for left, right in ((z, 2.0), (r, 1 + 2j), (z, z), (r, z), (z.astype(np.complex64), 3)):
        for tensor, error in ((minigrad.Tensor, TypeError), (torch.from_numpy, NotImplementedError)):
            other = tensor(right) if isinstance(right, np.ndarray) else right
            with pytest.raises(error, match="not ordered|not implemented for 'Complex"):
                getattr(tensor(left), op)(other)
    np.testing.assert_array_equal((minigrad.Tensor(z) == 1 + 2j).data, [True, False])  # (== is)
