"""The "warp" torch.compile backend: values and gradients against eager, with
inductor and aot_eager inside, dynamic shapes without recompiles, and the
graph breaks and recompiles it reports."""

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import kernels.backend
from kernels import fx


class Block(torch.nn.Module):
    """Masked attention over a padded batch, then a log-softmax head."""

    def __init__(self, width=16):
        super().__init__()
        self.q, self.k, self.head = (torch.nn.Linear(width, width) for _ in range(3))

    def forward(self, x, keep):
        scores = self.q(x) @ self.k(x).transpose(1, 2) / 4
        scores = scores.masked_fill(~keep[:, None, :], float("-inf"))  # padding: -inf runs
        return F.log_softmax(self.head(scores.softmax(-1) @ x), dim=-1)


def batch(size, seq=7, width=16):
    torch.manual_seed(size)
    keep = torch.arange(seq)[None, :] < torch.randint(1, seq + 1, (size, 1))
    return torch.randn(size, seq, width), keep


@pytest.fixture(autouse=True)
def fresh():
    torch._dynamo.reset()
    kernels.backend.reset()


def graph_targets(seen):
    def inner(gm, example_inputs):
        seen.extend(n.target for n in gm.graph.nodes)
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)
    return inner


def test_aot_eager_inside_inference_and_training_match_eager():
    model, seen = Block(), []
    compiled = torch.compile(model, backend="warp", fullgraph=True,
                             options={"inner": graph_targets(seen)})
    x, keep = batch(3)
    x.requires_grad_(True)
    ours, ref = compiled(x, keep), model(x, keep)
    torch.testing.assert_close(ours, ref)
    assert seen.count(fx.softmax) == 1 and seen.count(fx.log_softmax) == 1
    weights = torch.randn_like(ref)
    grads = [torch.autograd.grad((out * weights).sum(), [x] + list(model.parameters()))
             for out in (ours, ref)]
    for g_ours, g_ref in zip(*grads):
        # float32 sums of terms as large as the gradient's largest entry (up to 8 here) round
        # by about that times 1e-7, more with the order matmul's threads happen to sum in: on a
        # loaded machine one element of a 16x16 weight gradient (largest entries 1.8-8) came
        # 1.07e-6 off.
        torch.testing.assert_close(g_ours, g_ref, rtol=1e-5, atol=1e-6 * max(1.0, g_ref.abs().max().item()))
    stats = kernels.backend.stats
    assert (stats.graphs, stats.recompiles, stats.graph_breaks, stats.replaced) == (1, 0, 0, 2)
    assert "1 graphs, 0 recompiles, 0 graph breaks, 2 softmax replaced" in str(stats)


def test_inductor_dynamic_batch_sizes_without_recompiles_and_training():
    model = Block()
    compiled = torch.compile(model, backend="warp", dynamic=True)
    for size in (2, 3, 5):
        x, keep = batch(size)
        x.requires_grad_(True)
        if size == 2:  # run_and_get_code compiles afresh: only on the first call
            ours, code = run_and_get_code(compiled, x, keep)
            assert "kernels.warp_softmax.default" in "".join(code)  # inductor's code calls the op
        else:
            ours = compiled(x, keep)
        ref = model(x, keep)
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
        g_ours, g_ref = (torch.autograd.grad(out.sum(), x)[0] for out in (ours, ref))
        torch.testing.assert_close(g_ours, g_ref, rtol=1e-5, atol=1e-5)
    stats = kernels.backend.stats
    assert (stats.graphs, stats.recompiles, stats.graph_breaks, stats.replaced) == (1, 0, 0, 2), str(stats)


class Attention(torch.nn.Module):
    """transformers' eager attention: softmax(q @ k^T * scaling + mask) @ v."""

    def __init__(self, width=16):
        super().__init__()
        self.q, self.k = torch.nn.Linear(width, width), torch.nn.Linear(width, width)
        self.scaling = 0.25

    def forward(self, x, mask):
        scores = torch.matmul(self.q(x), self.k(x).transpose(-1, -2)) * self.scaling + mask
        return F.softmax(scores, dim=-1) @ x


def test_inductor_writes_the_softmax_over_the_scores_in_inference():
    """No result allocated for the attention softmax: inductor hands the operator its
    own scores buffer, with no clone; training keeps the scores (gradients as eager)."""
    model = Attention()
    compiled = torch.compile(model, backend="warp", dynamic=True)
    x, keep = batch(3)
    mask = torch.zeros(3, 1, 7).masked_fill(~keep[:, None, :], float("-inf"))
    with torch.no_grad():
        ours, code = run_and_get_code(compiled, x, mask)
        torch.testing.assert_close(ours, model(x, mask))
    code = "".join(code)
    assert "torch.ops.kernels.warp_softmax_masked_.default(buf" in code, code
    assert "clone" not in code and "copy_" not in code, code
    x.requires_grad_(True)
    grads = [torch.autograd.grad(f(x, mask).pow(2).sum(), x)[0] for f in (compiled, model)]
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)


def test_graph_breaks_and_recompiles_are_counted():
    def f(x):
        y = torch.softmax(x, -1)
        torch._dynamo.graph_break()
        return torch.softmax(y * 2, 0)
    compiled = torch.compile(f, backend="warp", dynamic=False, options={"inner": "aot_eager"})
    for shape in ((2, 3), (4, 5)):
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), f(x))
    stats = kernels.backend.stats
    assert stats.graphs == 4 and stats.recompiles == 2 and stats.graph_breaks >= 1, str(stats)
    assert stats.replaced == 4 and "graph break:" in str(stats)


def test_sdpa_is_left_or_decomposed_as_asked():
    q = torch.randn(2, 2, 5, 8)
    mask = torch.rand(5, 5) > 0.3
    f = lambda q: F.scaled_dot_product_attention(q, q, q, attn_mask=mask)  # noqa: E731
    for decompose, replaced in ((False, 0), (True, 1)):
        torch._dynamo.reset()
        kernels.backend.reset()
        compiled = torch.compile(f, backend="warp",
                                 options={"inner": "aot_eager", "decompose_sdpa": decompose})
        torch.testing.assert_close(compiled(q), f(q))
        assert kernels.backend.stats.replaced == replaced
        assert len(kernels.backend.stats.left) == 1 - replaced


def test_bad_option_names_the_backend_and_the_fix():
    compiled = torch.compile(torch.softmax, backend="warp", options={"inner": "aot_eager", "max_autotune": True})
    with pytest.raises(Exception, match="warp backend: options \\['max_autotune'\\] are inductor's"):
        compiled(torch.randn(3), 0)
