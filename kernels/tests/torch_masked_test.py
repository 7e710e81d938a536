"""kernels::warp_softmax_masked, softmax(x * scale + mask), against torch's
softmax(x * scale + mask): every dtype, the masks attention sends (broadcast
padding masks, per-query masks, finfo.min, -inf runs, fully masked rows), bool
masks, gradients in x and the mask, torch.func, opcheck and torch.compile.

Tests taking the `where` fixture run once per CPU level this machine supports and, where
torch sees a GPU, once on it (gpu_check.sh runs them there)."""

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import kernels
from kernels import ops
from kernels.tests import checks

where = checks.isa_fixture(ops._isa, also=[pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
op = torch.ops.kernels.warp_softmax_masked


def name(dtype):
    return str(dtype)[6:]


def device(where, dtype=None):
    """The device a `where` test runs on; float64 is skipped on the GPU (no CUDA kernel has it)."""
    if where != "cuda":
        return "cpu"
    if dtype == torch.float64:
        pytest.skip("float64 is supported on the CPU only")
    return "cuda"


def reference(x, mask, scale, dim=-1):
    """torch's softmax of the same sum, computed in float64. On the CPU ours forms the
    sum in float32 without rounding it to x's format, so float64 is the fair reference;
    on CUDA the sum is one torch kernel in the result's format (rounded once, where
    torch's composite rounds twice), and the reference takes that sum."""
    if x.is_cuda:
        z = x * scale if mask is None else torch.add(mask, x, alpha=scale)
        return torch.softmax(z.double(), dim)
    z = x.double() * scale
    return torch.softmax(z if mask is None else z + mask.double(), dim)


def attention_masks(batch, heads, q, k, dtype, fill):
    """The masks BERT-style models send, filled with `fill` (-inf or finfo.min)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, k + 1, (batch,), generator=g)
    lengths[-1] = 0  # an empty sequence: every row fully masked
    padding = torch.zeros(batch, 1, 1, k, dtype=dtype).masked_fill(
        torch.arange(k) >= lengths[:, None, None, None], fill)
    causal = torch.zeros(q, k, dtype=dtype).masked_fill(torch.ones(q, k, dtype=torch.bool).triu(1), fill)
    return {
        "padding [B,1,1,S]": padding,
        "per query [B,1,S,S]": padding + causal,
        "causal [S,S]": causal,
        "full [B,H,S,S]": (padding + causal).expand(batch, heads, q, k).contiguous(),
        "per row [B,H,S,1]": torch.randn(batch, heads, q, 1, generator=g).to(dtype),
        "none": None,
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=name)
@pytest.mark.parametrize("k", [5, 300, 1024, 2049])
def test_attention_masks_match_torch(dtype, k, where):
    dev = device(where, dtype)
    batch, heads, q = 3, 2, 4
    x = (torch.randn(batch, heads, q, k, generator=torch.Generator().manual_seed(1)) * 4).to(dev, dtype)
    for fill in (float("-inf"), torch.finfo(dtype).min):
        for pattern, mask in attention_masks(batch, heads, q, k, dtype, fill).items():
            mask = None if mask is None else mask.to(dev)
            y = kernels.warp_softmax_masked(x, mask, scale=0.125)
            assert y.dtype == dtype and y.shape == x.shape, pattern
            want = reference(x, mask, 0.125)
            if dtype == torch.float16 and fill != float("-inf") and mask is not None:
                # float16's min, -65504, is float32's to 2^-8 only: rows of only masked
                # keys see the sum's float32 rounding (torch's float16 sum rounds
                # them all to -65504 and gives a uniform row).
                torch.testing.assert_close(y.double(), want, rtol=2 * 65504 * 2**-24 + 2**-10, atol=2**-24)
                continue
            checks.assert_close(y.double().cpu(), want.cpu(), name(dtype), False)
            # torch in x's own dtype: the same NaN rows (fully -inf ones) and exact zeros.
            torch_y = torch.softmax(x * 0.125 + (0 if mask is None else mask), -1)
            assert torch.equal(y.isnan(), torch_y.isnan()), pattern
            if fill == float("-inf") and mask is not None:
                masked = (mask == fill).expand_as(x) & ~y.isnan()
                assert (y[masked] == 0).all(), pattern


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), dtype=st.sampled_from(DTYPES), scale=st.sampled_from([1.0, 0.125, -2.0, 3]))
def test_property_random_broadcasts_dims_and_masks(data, dtype, scale, where):
    assume(where != "cuda" or dtype != torch.float64)
    shape = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4))
    shape[-1] = data.draw(st.sampled_from([1, 7, 33, 1030]))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    rank = data.draw(st.integers(0, len(shape)))  # the mask's rank, its dims 1 or x's
    mask_shape = [s if data.draw(st.booleans()) else 1 for s in shape[len(shape) - rank:]]
    seed = data.draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    mask = torch.randn(mask_shape, generator=g).to(dtype)
    mask[torch.rand(mask_shape, generator=g) < data.draw(st.sampled_from([0.0, 0.5, 0.95]))] = float("-inf")
    x, mask = x.to(device(where)), mask.to(device(where))
    y = kernels.warp_softmax_masked(x, mask, scale, dim)
    checks.assert_close(y.double().cpu(), reference(x, mask, scale, dim).cpu(), name(dtype), False)


def test_bool_mask_keeps_where_true_as_sdpa(where):
    x = torch.randn(2, 3, 6, 40, device=device(where))
    keep = torch.rand(2, 1, 6, 40, device=device(where)) > 0.7
    keep[0, 0, 2] = False  # a fully masked row: NaN, as softmax of all -inf
    y = kernels.warp_softmax_masked(x, keep, 0.5)
    want = torch.softmax((x * 0.5).masked_fill(~keep, float("-inf")), -1)
    torch.testing.assert_close(y, want, equal_nan=True)
    assert y[0, :, 2].isnan().all() and not y[1].isnan().any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=name)
def test_x_times_scale_rounds_before_the_mask_and_the_maximum_as_in_torch(dtype, where):
    """Fused into one FMA (GCC contracts a * b + c in C++ unless told not to), the row
    maximum's x * scale - max was the product's rounding error instead of 0 (all NaN at a
    scale of 1e300: exp of a large positive number), and x * scale + mask rounded once where
    torch rounds twice (0.07200177150871327 for torch's ...234). float32 has the first case
    only: its own rounding of x * scale is torch's too, and already far from float64's."""
    dev = device(where, dtype)
    g = torch.Generator().manual_seed(0)
    cases = [(torch.full((3, 40), 0.1, dtype=dtype), None, 1e300 if dtype == torch.float64 else 1e30)]
    if dtype == torch.float64:
        cases += [(1e6 + torch.arange(120, dtype=dtype).reshape(3, 40) / 8, None, 0.7),
                  (700 + 4 * torch.rand(3, 40, generator=g, dtype=dtype), torch.full((40,), -210.0, dtype=dtype), 0.3)]
    for x, mask, scale in cases:
        x, mask = x.to(dev), None if mask is None else mask.to(dev)
        y = kernels.warp_softmax_masked(x, mask, scale)
        checks.assert_close(y.cpu().double().numpy(), reference(x, mask, scale).cpu().numpy(), name(dtype), False)


def test_mixed_dtypes_promote_as_torch(where):
    x = torch.randn(2, 5, 8, device=device(where)).to(torch.bfloat16)
    mask = torch.zeros(2, 1, 8, device=device(where))
    mask[1, :, 3:] = torch.finfo(torch.float32).min
    y = kernels.warp_softmax_masked(x, mask, 0.3)
    assert y.dtype == torch.float32 == (x * 0.3 + mask).dtype
    checks.assert_close(y.double().cpu(), reference(x, mask, 0.3).cpu(), "float32", False)


def test_a_0d_mask_does_not_promote_as_in_torch(where):
    """x * scale + mask keeps x's dtype for a 0-d mask: so does the operator and its in-place form."""
    for x_dtype, mask_dtype in ((torch.float16, torch.float32), (torch.float32, torch.float64)):
        x = torch.randn(2, 3, device=device(where)).to(x_dtype)
        mask = torch.tensor(0.5, dtype=mask_dtype, device=device(where))
        y = kernels.warp_softmax_masked(x, mask, 2.0)
        assert y.dtype == (x * 2.0 + mask).dtype == x_dtype
        checks.assert_close(y.double().cpu(), reference(x, mask, 2.0).cpu(), name(x_dtype), False)
        assert torch.equal(kernels.warp_softmax_masked_(x, mask, 2.0), y)


def test_any_strides_0d_and_empty(where):
    dev = device(where)
    base = torch.randn(6, 10, 12, device=dev)
    mask = torch.randn(12, 10, device=dev)[None].transpose(1, 2)  # non-contiguous, [1, 10, 12]
    for x in (base.transpose(0, 2), base[:, ::2], base.permute(1, 2, 0)):
        m = mask if x.shape[-2:] == mask.shape[-2:] else None
        for dim in range(-x.dim(), x.dim()):
            y = kernels.warp_softmax_masked(x, m, 2.0, dim)
            torch.testing.assert_close(y, torch.softmax(x * 2.0 + (0 if m is None else m), dim))
            assert y.stride() == x.stride() or not x.is_contiguous()
    scalar = lambda v: torch.tensor(v, device=dev)  # noqa: E731
    torch.testing.assert_close(kernels.warp_softmax_masked(scalar(3.0), scalar(-1.0)), scalar(1.0))
    empty = lambda *shape: torch.zeros(shape, device=dev)  # noqa: E731
    assert kernels.warp_softmax_masked(empty(0, 4), empty(4)).shape == (0, 4)
    assert kernels.warp_softmax_masked(empty(3, 0), empty(0), 2.0).shape == (3, 0)


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="does not broadcast to the input's shape"):
        kernels.warp_softmax_masked(x, torch.zeros(5, 2, 3, 4))
    with pytest.raises(RuntimeError, match="does not broadcast"):
        kernels.warp_softmax_masked(x, torch.zeros(2, 1))
    with pytest.raises(RuntimeError, match="mask must be a bool or floating point"):
        kernels.warp_softmax_masked(x, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="input must be a floating point"):
        kernels.warp_softmax_masked(torch.arange(4), torch.zeros(4))
    with pytest.raises(IndexError, match="dim 3 is out of range"):
        kernels.warp_softmax_masked(x, None, 1.0, 3)
    with pytest.raises(RuntimeError, match="scale must be a real number"):
        kernels.warp_softmax_masked(x, None, True)
    # torch would broadcast x up to the mask's dims; the result keeps x's shape, so: refused
    with pytest.raises(RuntimeError, match="does not broadcast"):
        kernels.warp_softmax_masked(torch.tensor(2.0), torch.zeros(1))


def test_gradients_in_x_and_a_broadcast_mask():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 9, generator=g, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(2, 1, 1, 9, generator=g, dtype=torch.float64)
    mask[1, ..., 6:] = float("-inf")  # padding: its gradient is 0, not NaN
    mask.requires_grad_(True)
    fn = lambda x, m: kernels.warp_softmax_masked(x, m, 0.7)  # noqa: E731
    v = torch.randn(2, 3, 4, 9, generator=g, dtype=torch.float64)
    ours = torch.autograd.grad(fn(x, mask), (x, mask), v)
    ref = torch.autograd.grad(torch.softmax(x * 0.7 + mask, -1), (x, mask), v)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b)
    finite = mask.detach().clamp_min(-30).requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (x, finite), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, (x, finite))


def test_torch_func_grad_jacrev_vmap():
    x, mask = torch.randn(3, 4, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    fn = lambda x, m: kernels.warp_softmax_masked(x, m, 0.5)  # noqa: E731
    ref = lambda x, m: torch.softmax(x * 0.5 + m, -1)  # noqa: E731
    for transform in (lambda f: torch.func.grad(lambda x, m: f(x, m).pow(2).sum(), argnums=(0, 1)),
                      lambda f: torch.func.jacrev(f, argnums=(0, 1)),
                      lambda f: torch.func.jacfwd(f, argnums=(0, 1))):
        torch.testing.assert_close(transform(fn)(x[0], mask[0]), transform(ref)(x[0], mask[0]))
    # a per-example mask, a shared one, and a 0-d example
    torch.testing.assert_close(torch.func.vmap(fn)(x, mask), ref(x, mask[:, None]))
    torch.testing.assert_close(torch.func.vmap(fn, (0, None))(x, mask[0]), ref(x, mask[0]))
    torch.testing.assert_close(torch.func.vmap(fn)(x[:, 0, 0], mask[:, 0]), torch.ones(3, dtype=torch.float64))
    # A shared mask with more dims than an example: refused, as eagerly, rather than
    # broadcast against the batch dim (mask[b] masking x[b]).
    with pytest.raises(RuntimeError, match=r"mask of shape \[3, 4, 6\] .* input's shape \[4, 6\]$"):
        torch.func.vmap(fn, (0, None))(x, torch.zeros(3, 4, 6, dtype=torch.float64))


@pytest.mark.parametrize("mask", [None, "float", "bool"])
def test_opcheck(mask):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, requires_grad=True)
    m = {None: None, "float": torch.randn(3, 1, requires_grad=True),
         "bool": torch.tensor([True, False, True, False, False])}[mask]
    torch.library.opcheck(op.default, (x, m, 0.25, -1))
    if mask != "bool":  # along dim 1 this bool mask would leave fully masked rows: NaN != NaN
        torch.library.opcheck(op.default, (x.detach(), m if m is None else m.detach(), 2, 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=name)
def test_in_place_form_writes_exactly_the_result_over_its_input(dtype, where):
    """warp_softmax_masked_: bit for bit warp_softmax_masked's result, in x's own memory:
    written by the kernel as it reads where x is already contiguous rows, copied in for
    other layouts and dims."""
    g = torch.Generator().manual_seed(3)
    for k in (5, 300, 2049):  # the short-row tiles, one block, several blocks
        x = (torch.randn(3, 2, 4, k, generator=g) * 4).to(device(where, dtype), dtype)
        for mask in attention_masks(3, 2, 4, k, dtype, float("-inf")).values():
            mask = None if mask is None else mask.to(x.device)
            flipped = None if mask is None else mask.transpose(-1, -2)
            for scores, m, dim in ((x.clone(), mask, -1),
                                   (x.transpose(-1, -2).contiguous().transpose(-1, -2), mask, -1),
                                   (x.transpose(-1, -2).contiguous(), flipped, 2)):
                want = kernels.warp_softmax_masked(scores, m, 0.125, dim)
                address = scores.data_ptr()
                assert kernels.warp_softmax_masked_(scores, m, 0.125, dim) is scores
                assert scores.data_ptr() == address
                assert torch.equal(scores.isnan(), want.isnan())
                torch.testing.assert_close(scores.nan_to_num(), want.nan_to_num(), rtol=0, atol=0)


def test_in_place_form_refuses_a_result_that_cannot_be_written_over_its_input():
    with pytest.raises(RuntimeError, match="Float .*cannot be written over the input's BFloat16"):
        kernels.warp_softmax_masked_(torch.randn(2, 8).bfloat16(), torch.zeros(8))
    x = torch.randn(40, 300)
    with pytest.raises(RuntimeError, match="unsupported operation"):  # its rows would be read after written
        kernels.warp_softmax_masked_(x, x[0])
    with pytest.raises(RuntimeError, match="unsupported operation"):  # one element, several places
        kernels.warp_softmax_masked_(torch.randn(1, 300).expand(4, 300))
    for m in (None, torch.zeros(5), torch.tensor([True, False, True, True, True])):
        torch.library.opcheck(torch.ops.kernels.warp_softmax_masked_.default, (torch.randn(3, 5), m, 0.5, -1))


def test_in_place_form_refuses_autograd_and_bumps_the_version_counter():
    """It has no autograd: a call a gradient could flow through is refused (torch would
    record one), and the version bump makes a node that saved x refuse the changed values."""
    leaf = torch.randn(2, 3, requires_grad=True)
    before = leaf.detach().clone()
    for x, mask in ((leaf, None), (leaf * 1, None), (torch.randn(2, 3), torch.zeros(3, requires_grad=True))):
        with pytest.raises(RuntimeError, match="in-place form has no autograd"):
            kernels.warp_softmax_masked_(x, mask)
    assert torch.equal(leaf, before)  # nothing written
    y = leaf.sigmoid()  # saves its output
    with torch.no_grad():
        kernels.warp_softmax_masked_(y)
    assert y._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    with torch.no_grad():
        kernels.warp_softmax_masked_(leaf)  # as torch's in-place ops: allowed on a leaf under no_grad
    with torch.inference_mode():
        frozen = torch.randn(2, 3)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        kernels.warp_softmax_masked_(frozen)


def test_compiles_without_graph_breaks_and_with_a_traced_float_scale():
    class Attention(torch.nn.Module):
        scaling = 0.125  # a float attribute: dynamic=True traces it as a SymFloat

        def forward(self, scores, mask):
            return kernels.warp_softmax_masked(scores, mask, self.scaling)
    model = Attention()
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=True)
        for batch in (2, 3):
            x, mask = torch.randn(batch, 2, 5, 5, requires_grad=True), torch.zeros(batch, 1, 1, 5)
            mask[0, ..., 3:] = float("-inf")
            ours, ref = compiled(x, mask), torch.softmax(x * 0.125 + mask, -1)
            torch.testing.assert_close(ours, ref)
            torch.testing.assert_close(*(torch.autograd.grad(y.sum() + (y * y).sum(), x)[0] for y in (ours, ref)))
