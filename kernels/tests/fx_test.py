"""kernels.fx.use_warp_softmax: every pattern it replaces, what it leaves and why,
against torch's own result, on symbolic_trace, make_fx and Dynamo graphs."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._decomp import get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from kernels import fx
from kernels.tests import checks

aten = torch.ops.aten
OURS = {fx.softmax, fx.log_softmax, fx.safe_softmax, fx.attention, fx.masked_softmax,
        fx.masked_softmax_over_scores}


class Fn(torch.nn.Module):
    def __init__(self, fn, *children):
        super().__init__()
        self.fn, self.children_ = fn, torch.nn.ModuleList(children)

    def forward(self, x):
        return self.fn(self, x)


def shifted(x):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def shifted_functions(x):
    e = torch.exp(torch.sub(x, torch.amax(x, dim=1, keepdim=True)))
    return torch.div(e, torch.sum(e, dim=[1], keepdim=True))


# name -> (module, whether the result is a log-softmax)
PATTERNS = {
    "torch.softmax": (Fn(lambda m, x: torch.softmax(x, -1)), False),
    "torch.softmax dim=1": (Fn(lambda m, x: torch.softmax(x, dim=1)), False),
    "torch.softmax dtype": (Fn(lambda m, x: torch.softmax(x, 0, dtype=torch.float64)), False),
    "torch.special.softmax": (Fn(lambda m, x: torch.special.softmax(x, -1)), False),
    "F.softmax": (Fn(lambda m, x: F.softmax(x, dim=-1)), False),
    "F.softmax dtype": (Fn(lambda m, x: F.softmax(x, 1, 3, torch.float64)), False),
    "Tensor.softmax": (Fn(lambda m, x: x.softmax(-1)), False),
    "Tensor.softmax dtype": (Fn(lambda m, x: x.softmax(dim=0, dtype=torch.float64)), False),
    "nn.Softmax": (Fn(lambda m, x: m.children_[0](x), torch.nn.Softmax(dim=1)), False),
    "aten._softmax": (Fn(lambda m, x: aten._softmax.default(x, -1, False)), False),
    "aten.softmax": (Fn(lambda m, x: aten.softmax.int(x, 0)), False),
    "aten._safe_softmax": (Fn(lambda m, x: aten._safe_softmax.default(x, -1)), False),
    "exp / sum, amax shift": (Fn(lambda m, x: shifted(x)), False),
    "exp / sum, torch functions": (Fn(lambda m, x: shifted_functions(x)), False),
    "exp / sum, no shift": (Fn(lambda m, x: x.exp() / x.exp().sum(0, keepdim=True)), False),
    "torch.log_softmax": (Fn(lambda m, x: torch.log_softmax(x, -1)), True),
    "torch.special.log_softmax": (Fn(lambda m, x: torch.special.log_softmax(x, 1)), True),
    "F.log_softmax dtype": (Fn(lambda m, x: F.log_softmax(x, dim=0, dtype=torch.float64)), True),
    "Tensor.log_softmax": (Fn(lambda m, x: x.log_softmax(1)), True),
    "nn.LogSoftmax": (Fn(lambda m, x: m.children_[0](x), torch.nn.LogSoftmax(dim=-1)), True),
    "aten._log_softmax": (Fn(lambda m, x: aten._log_softmax.default(x, 0, False)), True),
    "aten.log_softmax": (Fn(lambda m, x: aten.log_softmax.int(x, -1)), True),
}


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def assert_replaced(gm, report, count):
    assert len(report.replaced) == count, str(report)
    assert sum(t in OURS for t in targets(gm)) == count, gm.code
    assert not any("softmax" in str(t) and t not in OURS for t in targets(gm)), gm.code


def check(ours, ref, log):
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    checks.assert_close(ours.detach().double(), ref.detach().double(), str(ref.dtype)[6:], log)


@pytest.mark.parametrize("name", PATTERNS)
def test_each_pattern_is_replaced_and_gives_torchs_result(name):
    module, log = PATTERNS[name]
    x = torch.randn(5, 7) * 4
    x[1, 2:] = float("-inf")  # a long -inf run
    gm = torch.fx.symbolic_trace(module)
    report = fx.use_warp_softmax(gm)
    assert_replaced(gm, report, 1)
    check(gm(x), module(x), log)
    check(gm(x.t().contiguous().t()), module(x.t().contiguous().t()), log)  # a non-contiguous view


def test_the_decomposed_pattern_drops_its_shift():
    gm = torch.fx.symbolic_trace(Fn(lambda m, x: shifted(x)))
    fx.use_warp_softmax(gm)
    assert targets(gm) == [fx.softmax], gm.code


def test_aten_graphs_from_make_fx_plain_and_decomposed():
    def f(x):
        return torch.softmax(x, -1) + torch.log_softmax(x, 0)
    x = torch.randn(4, 6)
    for table in ({}, get_decompositions([aten._softmax])):  # the second: amax, sub, exp, sum, div
        gm = make_fx(f, decomposition_table=table)(x)
        report = fx.use_warp_softmax(gm)
        assert_replaced(gm, report, 2)
        torch.testing.assert_close(gm(x), f(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_masked_rows_match_torch_and_safe_softmax_gives_zero_rows(dtype):
    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[0] = float("-inf")            # fully masked: NaN from softmax, 0 from _safe_softmax
    x[1, :290] = float("-inf")      # a long run
    x[2, 10:] = float("-inf")
    for fn in (lambda x: torch.softmax(x, -1), lambda x: aten._safe_softmax.default(x, -1)):
        gm = torch.fx.symbolic_trace(fn)
        fx.use_warp_softmax(gm)
        # Two implementations apart: 4 units, or the kernels' float64 bound (libm's exp and 300
        # terms: 6 units seen).
        name = str(dtype)[6:]
        rtol = checks.EPS[name] * max(4, checks.ULPS[name])
        torch.testing.assert_close(gm(x), fn(x), equal_nan=True, atol=0, rtol=rtol)


def decomposed_masked(s, m):
    e = (s * 0.125 + m).exp()
    return e / e.sum(-1, keepdim=True)


# Attention's softmax(scores * scale + mask), as models spell it: one fused call each.
ATTENTION_FORMS = {
    "x * c + mask": lambda s, m: F.softmax(s * 0.125 + m, dim=-1),
    "mask + x / c": lambda s, m: torch.softmax(m + s / 8, -1),
    "(c * x + mask).softmax": lambda s, m: (0.125 * s + m).softmax(-1),
    "torch.add, torch.mul": lambda s, m: torch.softmax(torch.add(torch.mul(s, 0.125), m), -1),
    "x + mask": lambda s, m: F.softmax(s + m, -1),
    "x * c, no mask": lambda s, m: F.softmax(s * 0.125, -1),
    "exp / sum": decomposed_masked,
}


def attention_inputs(dtype=torch.float32):
    scores = torch.randn(3, 2, 4, 300).to(dtype) * 8
    mask = torch.zeros(3, 1, 1, 300, dtype=dtype)
    mask[1, ..., 7:] = float("-inf")                 # a padded sequence: a long -inf run
    mask[2] = float("-inf")                          # an empty one: fully masked rows, NaN
    return scores, mask


@pytest.mark.parametrize("form", ATTENTION_FORMS)
def test_attention_forms_fuse_into_one_masked_softmax(form):
    fn = ATTENTION_FORMS[form]
    gm = torch.fx.symbolic_trace(fn)
    report = fx.use_warp_softmax(gm)
    assert_replaced(gm, report, 1)
    assert targets(gm) == [fx.masked_softmax], gm.code  # the scale and the sum are folded in
    assert "masked_softmax" in report.replaced[0].detail
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        scores, mask = attention_inputs(dtype)
        ours, ref = gm(scores, mask), fn(scores.double(), mask.double()).to(dtype)
        assert ours.dtype == dtype and torch.equal(ours.isnan(), fn(scores, mask).isnan())
        check(ours.nan_to_num(), ref.nan_to_num(), False)


def test_scores_only_the_softmax_reads_are_written_over():
    """Attention's scores, a matmul's result read by the softmax alone, take the form
    that writes over them (no result allocated): in inference that is where the
    result lands; with inputs that require grad it falls back at run time. Scores a
    caller passed in, or that something else reads too, are never written."""
    def attention(q, k, m):
        return F.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.125 + m, dim=-1)

    def kept(q, k, m):
        s = q @ k.transpose(-1, -2)
        return F.softmax(s * 0.125 + m, -1), s  # the scores are returned too

    def given(s, m):
        return F.softmax(s * 0.125 + m, -1)  # the caller's scores
    forms = {}
    for fn in (attention, kept, given):
        gm = torch.fx.symbolic_trace(fn)
        report = fx.use_warp_softmax(gm)
        forms[fn.__name__] = [t.__name__ for t in targets(gm) if t in OURS], report.replaced[0].detail
    assert forms["attention"] == (["masked_softmax_over_scores"], forms["attention"][1])
    assert forms["attention"][1].startswith("masked_softmax_over_scores(dim=-1, mask=m, scale=0.125")
    assert forms["kept"][0] == forms["given"][0] == ["masked_softmax"]
    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8)
    m = torch.zeros(2, 1, 1, 7)
    m[1, ..., 4:] = float("-inf")
    gm = torch.fx.symbolic_trace(attention)
    fx.use_warp_softmax(gm)
    torch.testing.assert_close(gm(q, k, m), attention(q, k, m))
    q.requires_grad_(True)  # training: the scores are kept for the backward
    grads = [torch.autograd.grad(f(q, k, m).pow(2).sum(), q)[0] for f in (gm, attention)]
    torch.testing.assert_close(grads[0], grads[1])
    s, given_m = torch.randn(2, 3, 5, 7), m.clone()
    before = s.clone()
    gm = torch.fx.symbolic_trace(given)
    fx.use_warp_softmax(gm)
    torch.testing.assert_close(gm(s, given_m), given(s, given_m))
    assert torch.equal(s, before)


def test_attention_forms_it_does_not_fold():
    def f(s, m, keep):
        z = s * 0.125 + m
        a = F.softmax(z, -1) + z                      # the sum has another user
        b = F.softmax(s + keep, -1)                   # a bool mask adds 0/1: torch's ops at run time
        c = F.softmax(m + s[:1, :1], -1)              # the scores broadcast to the mask: likewise
        d = F.softmax(s * 0.125 + m, -1, dtype=torch.float64)  # a dtype argument
        e = F.softmax(s / 0 + m, -1)                  # the division stays: 1 / 0 raises in Python
        return a, b, c, d, e, F.log_softmax(s * 0.125 + m, -1)
    gm = torch.fx.symbolic_trace(f)
    report = fx.use_warp_softmax(gm)
    assert [c.detail.split("(")[0] for c in report.replaced] == [
        "softmax", "masked_softmax", "masked_softmax", "softmax", "masked_softmax", "log_softmax"], str(report)
    scores, mask = attention_inputs()
    keep = torch.rand(300) > 0.5
    for ours, ref in zip(gm(scores, mask, keep), f(scores, mask, keep)):
        torch.testing.assert_close(ours, ref, equal_nan=True)


def test_dynamo_folds_a_float_attribute_scale_without_recompiles():
    class Attention(torch.nn.Module):  # transformers' eager attention: scores * self.scaling + mask
        scaling = 0.125

        def forward(self, s, m):
            return F.softmax(s * self.scaling + m, dim=-1)
    reports, model = [], Attention()

    def backend(gm, example_inputs):
        reports.append(fx.use_warp_softmax(gm))
        return gm.forward
    compiled = torch.compile(model, backend=backend, dynamic=True, fullgraph=True)
    for batch in (3, 5):
        scores, mask = attention_inputs()
        scores, mask = scores[torch.arange(batch) % 3], mask[torch.arange(batch) % 3]
        torch.testing.assert_close(compiled(scores, mask), model(scores, mask), equal_nan=True)
    assert len(reports) == 1 and "masked_softmax" in reports[0].replaced[0].detail, reports


def test_0d_and_empty_inputs():
    gm = torch.fx.symbolic_trace(lambda x: torch.softmax(x, 0) + torch.log_softmax(x, -1))
    fx.use_warp_softmax(gm)
    for x in (torch.tensor(3.0), torch.empty(0, 4), torch.empty(3, 0)):
        torch.testing.assert_close(gm(x), torch.softmax(x, 0) + torch.log_softmax(x, -1))


def test_integer_input_raises_as_torch_does():
    gm = torch.fx.symbolic_trace(lambda x: torch.softmax(x, -1))
    fx.use_warp_softmax(gm)
    with pytest.raises(RuntimeError, match="warp_softmax.*floating point"):
        gm(torch.arange(6).reshape(2, 3))


def test_what_it_leaves_and_why():
    def f(x, mask):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = F.softmax(x)  # implicit dim
        e = x.exp()
        b = e / e.sum((0, 1), keepdim=True)
        m = x.exp() * mask
        c = m / m.sum(-1, keepdim=True)
        d = e / e.sum(-1)[..., None]  # not the pattern at all: silently kept
        return a + b + c + d + F.scaled_dot_product_attention(x[None], x[None], x[None])[0]
    gm = torch.fx.symbolic_trace(f)
    before = gm.code
    report = fx.use_warp_softmax(gm)
    assert not report.replaced and gm.code == before
    reasons = "\n".join(c.detail for c in report.left)
    assert [c.pattern for c in report.left] == ["F.softmax", "exp / sum", "exp / sum",
                                                "scaled_dot_product_attention"], str(report)
    for words in ("dim=None", "sum over dims (0, 1)", "cannot prove", "decompose_sdpa=True"):
        assert words in reasons, str(report)
    assert "left" in str(report)


def test_a_model_without_softmax_keeps_its_graph():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    gm = torch.fx.symbolic_trace(model)
    before = gm.code
    report = fx.use_warp_softmax(gm)
    assert report.replaced == [] and report.left == [] and gm.code == before


class Attention(torch.nn.Module):
    def __init__(self, width=16, heads=2):
        super().__init__()
        self.qkv, self.out, self.heads = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width), heads

    def forward(self, x, mask):
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / (w // self.heads) ** 0.5 + mask
        return self.out((F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, w)).log_softmax(-1)


def test_training_gradients_match_eager():
    torch.manual_seed(0)
    model = Attention().double()
    gm = torch.fx.symbolic_trace(model)
    assert len(fx.use_warp_softmax(gm).replaced) == 2
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(3, 1, 1, 5, dtype=torch.float64)
    mask[1, ..., 2:] = float("-inf")  # padding
    grads = []
    for m in (model, gm):
        loss = (m(x, mask) * torch.linspace(-1, 1, 16, dtype=torch.float64)).sum()
        grads.append(torch.autograd.grad(loss, [x] + list(model.parameters())))
    for ours, ref in zip(*grads[::-1]):
        torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_autocast_keeps_torchs_dtypes():
    model = Attention()
    gm = torch.fx.symbolic_trace(model)
    fx.use_warp_softmax(gm)
    x, mask = torch.randn(2, 4, 16), torch.zeros(2, 1, 1, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, ref = gm(x, mask), model(x, mask)
        f32 = fx.softmax(x, -1)  # a float32 input stays float32 under CPU autocast, as in torch
    assert ours.dtype == ref.dtype == torch.bfloat16 and f32.dtype == torch.float32
    torch.testing.assert_close(ours, ref, atol=2e-2, rtol=2e-2)


def sdpa_cases():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    keep = torch.rand(6, 5) > 0.4
    keep[2] = False  # a fully masked row: 0 from SDPA
    additive = torch.zeros(2, 1, 1, 5).masked_fill(torch.tensor([0, 1, 1, 1, 1.0]) > 0.5, -1e9)
    return {
        "plain": ((q, k, v), {}),
        "bool mask": ((q, k, v), {"attn_mask": keep}),
        "float mask": ((q, k, v), {"attn_mask": additive, "scale": 0.3}),
        "causal": ((q, q, q), {"is_causal": True}),
        "gqa": ((q, k[:, :2], v[:, :2]), {"enable_gqa": True}),
    }


@pytest.mark.parametrize("case", list(sdpa_cases()))
def test_decompose_sdpa_matches_sdpa(case):
    args, kwargs = sdpa_cases()[case]
    gm = torch.fx.symbolic_trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs))
    assert_replaced(gm, fx.use_warp_softmax(gm, decompose_sdpa=True), 1)
    torch.testing.assert_close(gm(*args), F.scaled_dot_product_attention(*args, **kwargs))


def test_decompose_sdpa_leaves_dropout():
    gm = torch.fx.symbolic_trace(lambda q: F.scaled_dot_product_attention(q, q, q, dropout_p=0.1))
    report = fx.use_warp_softmax(gm, decompose_sdpa=True)
    assert not report.replaced and "dropout_p=0.1" in report.left[0].detail


def test_dynamo_graphs_and_the_dtypes_their_examples_show():
    reports = []

    def backend(gm, example_inputs):
        reports.append(fx.use_warp_softmax(gm))
        return gm.forward

    def f(x, n):
        return (torch.softmax(x, -1) + F.softmax(x, dim=0) + x.softmax(1) + torch.nn.Softmax(-1)(x)
                + x.log_softmax(-1) + shifted(x)), torch.softmax(n.float(), -1) * n
    x, n = torch.randn(3, 4), torch.arange(12).reshape(3, 4)
    out = torch.compile(f, backend=backend, fullgraph=True)(x, n)
    torch.testing.assert_close(out, f(x, n))
    assert len(reports) == 1 and len(reports[0].replaced) == 7 and not reports[0].left, str(reports[0])


@settings(deadline=None, max_examples=40)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data(),
       dtype=st.sampled_from(["float32", "float64", "bfloat16", "float16"]), log=st.booleans())
def test_property_any_shape_dim_and_dtype(shape, data, dtype, log):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = (torch.randn(shape) * 5).to(getattr(torch, dtype))
    fn = (lambda x: torch.log_softmax(x, dim)) if log else (lambda x: F.softmax(x, dim))
    gm = torch.fx.symbolic_trace(fn)
    fx.use_warp_softmax(gm)
    check(gm(x), fn(x.double()).to(x.dtype), log)
