"""kernels::warp_softmax as a PyTorch operator on the CPU: values, gradients, opcheck, compile
(torch_transforms_test.py: vmap, autocast, forward AD and torch.func).

Tests taking the `isa` fixture run once per CPU level this machine supports."""

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import kernels
from kernels import ops
from kernels.tests import checks
from kernels.tests.torch_cases import DTYPES, OPS, inputs, reference

isa = checks.isa_fixture(ops._isa)
SHAPES = [(1,), (7,), (5, 3), (4, 1024), (3, 4097), (2, 32768), (2, 3, 5, 7), (64, 17)]


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_torch_in_float32_over_shapes_and_dims(name, shape, isa):
    x = inputs(shape)
    for dim in range(-len(shape), len(shape)):
        y = OPS[name][0](x, dim)
        assert y.shape == x.shape and y.dtype == torch.float32
        checks.assert_close(y.double(), reference(name, x, dim), "float32", "log" in name)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(OPS))
# Under 4 vectors (16, 32 or 64 columns by level) rows go W at a time through a tile: the
# columns take both sides of each level's boundary.
@pytest.mark.parametrize("cols", [3, 10, 15, 16, 29, 31, 32, 63, 64, 300, 1024, 2049, 5000])
def test_every_mask_pattern_matches_torch(name, dtype, cols, isa):
    rows = 37  # several groups of W rows at every level, the last one partial
    for pattern, mask in checks.masks(rows, cols).items():
        x = torch.from_numpy(checks.masked_logits(rows, cols, mask)).to(DTYPES[dtype])
        y = OPS[name][0](x, -1)
        want = reference(name, x, -1)
        alive = ~torch.from_numpy(mask).all(-1)  # fully masked rows are NaN, as torch's
        assert not y[alive].isnan().any(), pattern
        checks.assert_close(y.double(), want, dtype, "log" in name)
        if "log" not in name:
            assert (y[alive][torch.from_numpy(mask)[alive]] == 0).all(), pattern  # masked: exactly 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=checks.masked_rows(), dtype=st.sampled_from(sorted(DTYPES)))
def test_property_random_masks_match_torch(data, dtype, isa):
    logits, mask = data
    x = torch.from_numpy(logits).to(DTYPES[dtype])
    for name, (ours, _) in OPS.items():
        checks.assert_close(ours(x, -1).double(), reference(name, x, -1), dtype, "log" in name)


# How far off a kernel may be and still pass assert_close: its temperature (a
# scale of the logits) wrong by this much fails it, as do outputs twice the
# allowed units too large.
TEMPERATURE_ERROR = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


@pytest.mark.parametrize("dtype", sorted(TEMPERATURE_ERROR))
def test_the_tolerances_reject_a_slightly_wrong_kernel(dtype):
    x = inputs((16, 1000), dtype=DTYPES[dtype])
    for name, log in (("softmax", False), ("log_softmax", True)):
        want = reference(name, x, -1)
        checks.assert_close(OPS[name][0](x, -1).double(), want, dtype, log)
        hot = OPS[name][1](x.double() * (1 + TEMPERATURE_ERROR[dtype]), -1).to(DTYPES[dtype]).double()
        scaled = (want * (1 + 2 * checks.ULPS[dtype] * checks.EPS[dtype])).to(DTYPES[dtype]).double()
        for wrong in (hot, scaled):
            with pytest.raises(AssertionError):
                checks.assert_close(wrong, want, dtype, log)


@pytest.mark.parametrize("name", sorted(OPS))
def test_any_strides(name):
    base = inputs((6, 10, 12))
    for x in (base.transpose(0, 2), base[:, ::3, 1::2], base.permute(1, 2, 0)[..., :4],
              torch.as_strided(base, (5, 7), (3, 17))):
        assert not x.is_contiguous()
        for dim in range(x.dim()):
            y = OPS[name][0](x, dim)
            torch.testing.assert_close(y.double(), reference(name, x, dim), atol=1e-6, rtol=1e-6)
            assert y.stride() == torch.empty_like(x).stride()  # laid out like the input


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_other_dtypes(name, dtype, isa):
    for shape in [(8, 300), (3, 33), (2, 4097)]:
        x = inputs(shape, dtype=DTYPES[dtype], scale=2.0)
        y = OPS[name][0](x, -1)
        assert y.dtype == DTYPES[dtype]
        checks.assert_close(y.double(), reference(name, x, -1), dtype, "log" in name)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_results_are_the_float32_results_rounded_to_nearest_even(dtype, isa):
    # A 16-bit row is widened, computed in float32 and narrowed once, so each result is
    # exactly torch's .to() of the float32 kernel's: the tolerances above cannot tell a
    # narrowing that truncates or misplaces a lane's half from a right one.
    for shape in [(37, 3), (37, 29), (33, 1000), (3, 4100)]:  # tiles, tails, whole vectors
        x = inputs(shape, dtype=DTYPES[dtype], scale=4.0)
        g = inputs(shape, seed=1, dtype=DTYPES[dtype])
        for name, (ours, _) in OPS.items():
            y = ours(x, -1)
            assert torch.equal(y, ours(x.float(), -1).to(y.dtype)), (name, shape)
            back = kernels.warp_log_softmax_backward if "log" in name else kernels.warp_softmax_backward
            assert torch.equal(back(g, y, -1), back(g.float(), y.float(), -1).to(y.dtype)), (name, shape)


def test_edge_values_match_torch(isa):
    x = torch.tensor([[float("-inf")] * 4,                    # all -inf: NaN, as torch
                      [0.0, float("-inf"), 1.0, float("-inf")],  # masked entries: exactly 0
                      [1e30, -1e30, 3e4, 0.0],                 # large magnitudes, no overflow
                      [float("nan"), 1.0, 2.0, 3.0]])
    for name, (ours, theirs) in OPS.items():
        torch.testing.assert_close(ours(x, -1), theirs(x, -1), equal_nan=True, atol=1e-6, rtol=0)
    assert kernels.warp_softmax(x, -1)[1, 1].item() == 0.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_log_softmax_backward_of_any_saved_output_matches_torch(dtype, isa):
    """The backward's exp(y) took y <= 0, as a log-probability is: from y = 88.4 it overflowed
    to -inf and from 89 wrapped (2e-34 where torch gives -inf). The operator takes any y, as
    torch's does. Within 0.35 of ln(FLT_MAX) = 88.72, where exp(y) is in the last half-binade
    below overflow, dx is infinite where torch's is finite (documented in simd_level.h).
    Rows of 3 (the short-row tiles) and of 40."""
    dt = getattr(torch, dtype)
    values = [0.5, 10.0, 44.0, 44.5, 80.0, 88.3, 88.5, 88.7, 88.8, 89.0, 100.0, 1e30,
              float("inf"), float("nan"), -1.0]
    for cols in (3, 40):
        y = torch.full((len(values), cols), -30.0)
        y[:, 1] = torch.tensor(values)
        y = y.to(dt)
        dy = torch.linspace(-1.0, 2.0, y.numel()).reshape(y.shape).to(dt)
        ours = kernels.warp_log_softmax_backward(dy, y, -1).float()
        theirs = torch._log_softmax_backward_data(dy, y, -1, dt).float()
        window = (y.float() > 88.37) & (y.float() <= 88.73)  # (as rounded to dt)
        assert torch.equal(ours[window].sign(), theirs[window].sign())
        assert (ours[window].isinf() | (ours[window] == theirs[window])).all()
        tol = checks.ULPS[dtype] * checks.EPS[dtype] * 4
        torch.testing.assert_close(ours[~window], theirs[~window], rtol=tol, atol=0, equal_nan=True)


def test_empty_and_zero_dim_tensors():
    for shape in [(0,), (0, 5), (5, 0), (2, 0, 3)]:
        x = torch.empty(shape)
        assert kernels.warp_softmax(x, -1).shape == shape
    torch.testing.assert_close(kernels.warp_softmax(torch.tensor(3.0), 0), torch.softmax(torch.tensor(3.0), 0))


def test_bad_input_is_a_clear_error_never_a_crash():
    with pytest.raises(RuntimeError, match="must be a floating point tensor"):
        kernels.warp_softmax(torch.arange(6).reshape(2, 3))
    # IndexError, as torch.softmax, eagerly and in fake mode (what torch.compile runs).
    with pytest.raises(IndexError, match=r"dim 2 is out of range for 2 dimensions \(valid: -2 to 1\)"):
        kernels.warp_softmax(torch.ones(2, 3), 2)
    # A bool dim is a TypeError, as torch.softmax's (torch.ops would take it as 0 or 1).
    with pytest.raises(TypeError, match=r"warp_softmax\(\): argument 'dim' must be int, not bool"):
        kernels.warp_softmax(torch.ones(2, 3), True)
    with pytest.raises(TypeError, match=r"warp_log_softmax_backward\(\): argument 'dim' must be int, not bool"):
        kernels.warp_log_softmax_backward(torch.ones(2, 3), torch.ones(2, 3), False)
    for masked in (kernels.warp_softmax_masked, kernels.warp_softmax_masked_):  # (through torch.ops)
        with pytest.raises(TypeError, match=r"warp_softmax_masked_?\(\): argument 'dim' must be int, not bool"):
            masked(torch.ones(2, 3), None, 1.0, True)
    with pytest.raises(Exception, match="argument 'dim' must be int, not bool"):  # (and compiled)
        torch.compile(lambda x: kernels.warp_softmax(x, True), backend="eager", fullgraph=True)(torch.ones(2, 3))
    with torch._subclasses.FakeTensorMode(), pytest.raises(IndexError, match="out of range"):
        kernels.warp_softmax(torch.empty(2, 3), -3)
    with pytest.raises((NotImplementedError, RuntimeError), match="SparseCPU"):
        kernels.warp_softmax(torch.ones(2, 3).to_sparse())
    with pytest.raises(RuntimeError, match="does not match"):
        torch.ops.kernels.warp_softmax_backward(torch.ones(2, 3), torch.ones(3, 2), -1)


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradcheck_and_gradgradcheck_in_float64(name):
    op = OPS[name][0]
    for shape, dim in [((3, 5), -1), ((4, 3, 2), 1)]:
        x = inputs(shape, dtype=torch.float64, scale=1.0).requires_grad_()
        assert torch.autograd.gradcheck(lambda t: op(t, dim), (x,))
        assert torch.autograd.gradgradcheck(lambda t: op(t, dim), (x,))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_gradient_matches_torch(name, dtype, isa):
    # 37 rows of 3 (under a vector: groups of W rows in a tile, the last partial) and of 29
    for shape in [(37, 3), (37, 29), (6, 50), (2, 3000)]:
        x = inputs(shape, dtype=DTYPES[dtype]).requires_grad_()
        w = inputs(shape, seed=1, dtype=DTYPES[dtype])
        (grad,) = torch.autograd.grad((OPS[name][0](x, -1) * w).sum(), x)
        xt = x.detach().double().requires_grad_()
        (want,) = torch.autograd.grad((OPS[name][1](xt, -1) * w.double()).sum(), xt)
        # The backward's error is relative to the terms it subtracts (|w| ~ 1), not to dx.
        atol = checks.ULPS[dtype] * checks.EPS[dtype] * (8 if dtype == "float32" else 2)
        torch.testing.assert_close(grad.double(), want, atol=atol, rtol=checks.EPS[dtype] * 4)


@pytest.mark.parametrize("op", ["warp_softmax", "warp_log_softmax"])
def test_opcheck_passes_all_default_tests(op):
    samples = [
        (inputs((4, 8)), -1),
        (inputs((3, 5, 7)), 1),
        (inputs((4, 8), dtype=torch.float64).requires_grad_(), 0),
        (inputs((2, 3, 6)).transpose(0, 2).requires_grad_(), -1),
    ]
    for x, dim in samples:
        torch.library.opcheck(getattr(torch.ops.kernels, op).default, (x, dim))


@pytest.mark.parametrize("op", ["warp_softmax_backward", "warp_log_softmax_backward"])
def test_opcheck_on_the_backward_ops(op):
    y = torch.softmax(inputs((4, 8), dtype=torch.float64), -1).requires_grad_()
    g = inputs((4, 8), dtype=torch.float64, seed=2).requires_grad_()
    torch.library.opcheck(getattr(torch.ops.kernels, op).default, (g, y, -1))


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_without_graph_breaks(dynamic):
    def model(x, w):
        return kernels.warp_softmax(x @ w, -1).sum(-1) + kernels.warp_log_softmax(x, 0).mean()

    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)  # inductor
    for rows in (4, 9):  # a second shape exercises dynamic shapes
        x, w = inputs((rows, 6)), inputs((6, 6), seed=3).requires_grad_()
        torch.testing.assert_close(compiled(x, w), model(x, w))
        (grad,) = torch.autograd.grad(compiled(x, w).sum(), w)  # autograd through the compiled graph
        torch.testing.assert_close(grad, torch.autograd.grad(model(x, w).sum(), w)[0])
    explanation = torch._dynamo.explain(model)(inputs((4, 6)), inputs((6, 6)))
    assert explanation.graph_break_count == 0


def test_a_dominant_element_keeps_the_small_ones_in_its_sum(isa):
    # Found by the property test below: in the short-row tile each row's sum ran in one
    # chain, which lost every exp under half an ulp of the maximum's exp(0) = 1 (at 37
    # columns of [65.5, 48.75, ...] the result was exactly 1, 32 units of 2^-24 off). Longer
    # rows sum in vector lanes, as torch's kernels do, with torch's error at the same width.
    for cols in (5, 13, 37, 63):
        x = torch.full((3, cols), 48.75)
        x[:, 0] = 65.5
        for name, (ours, _) in OPS.items():
            checks.assert_close(ours(x, -1).double(), reference(name, x, -1), "float32", "log" in name)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_property_matches_torch_softmax(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=40))
    values = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-80, 80, width=32)))
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = torch.from_numpy(values)
    for name, (ours, _) in OPS.items():
        checks.assert_close(ours(x, dim).double(), reference(name, x, dim), "float32", "log" in name)


def test_cpu_level_is_reported_forced_and_refused_clearly():
    supported = kernels.cpu_isas_supported()
    assert kernels.cpu_isa() == supported[0] and supported[-1] == "baseline"
    with pytest.raises(ValueError, match="unknown instruction-set level 'sse9'.*this CPU supports: "):
        kernels.set_cpu_isa("sse9")
    import subprocess
    import sys
    script = "import torch, kernels; print(kernels.cpu_isa()); kernels.warp_softmax(torch.ones(3))"
    for level in supported:
        out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, WARP_SOFTMAX_ISA=level),
                             capture_output=True, text=True, check=True).stdout
        assert out.strip() == level
    bad = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, WARP_SOFTMAX_ISA="avx9"),
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert "unknown instruction-set level 'avx9'" in bad.stderr and "WARP_SOFTMAX_ISA" in bad.stderr


def test_streamed_backward_matches_torch_on_every_level():
    # Outputs larger than the cache are written with non-temporal stores; a
    # cache of 1 byte (WARP_SOFTMAX_CACHE_BYTES) takes that path on small
    # tensors: aligned and unaligned rows, every dtype, softmax and log_softmax.
    import subprocess
    import sys
    script = """
import torch, kernels
from kernels.tests import checks
for level in kernels.cpu_isas_supported():
    kernels.set_cpu_isa(level)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for rows, cols in ((3, 1000), (5, 4096), (2, 37)):
            g = torch.randn(rows, cols, dtype=torch.float64)
            x = torch.randn(rows, cols, dtype=torch.float64).to(dtype)
            for ours, theirs in ((kernels.warp_softmax, torch.softmax), (kernels.warp_log_softmax, torch.log_softmax)):
                xr = x.detach().requires_grad_()
                (grad,) = torch.autograd.grad((ours(xr, -1) * g.to(dtype)).sum(), xr)
                xt = x.double().requires_grad_()
                (want,) = torch.autograd.grad((theirs(xt, -1) * g.to(dtype).double()).sum(), xt)
                name = str(dtype).split(".")[1]
                tol = checks.ULPS[name] * checks.EPS[name] * 8
                torch.testing.assert_close(grad.double(), want, atol=tol, rtol=tol)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, WARP_SOFTMAX_CACHE_BYTES="1"),
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def _huge_page_advised(address):
    """Whether the mapping holding `address` was advised MADV_HUGEPAGE (its "hg" flag)."""
    mapped = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(" ", 1)[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line: start-end
                start, end = (int(part, 16) for part in head.split("-"))
                mapped = start <= address < end
            elif mapped and line.startswith("VmFlags:"):
                return "hg" in line.split()[1:]
    raise AssertionError("no mapping holds address %#x" % address)


def _advice_shows():
    """Whether this kernel marks a mapping advised MADV_HUGEPAGE (no THP, or a sandbox that
    takes the advice as a no-op: then there is nothing to test)."""
    import ctypes
    import mmap
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    region = mmap.mmap(-1, 4 << 20)
    try:
        region.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        return False
    try:
        return _huge_page_advised(ctypes.addressof(ctypes.c_char.from_buffer(region)) + (2 << 20))
    finally:
        region.close()


needs_thp = pytest.mark.skipif(not _advice_shows(), reason="no transparent huge pages to advise here")


@needs_thp
def test_a_large_result_is_advised_huge_pages():
    # glibc maps a result of 32 MiB or more afresh on each call; its 4 KiB pages' faults
    # were most of a call's time (softmax.h's prepare_result).
    x = torch.randn(256, 32768)
    y = kernels.warp_softmax(x)
    results = {"softmax": y, "log_softmax": kernels.warp_log_softmax(x),
               "softmax over dim 0": kernels.warp_softmax(x, 0),
               "backward": kernels.warp_softmax_backward(x, y, -1),
               "masked": kernels.warp_softmax_masked(x, x > 0, 0.5, -1)}
    for name, result in results.items():
        assert _huge_page_advised(result.data_ptr() + (4 << 20)), name


@needs_thp
def test_huge_pages_turned_off_by_the_environment():
    import subprocess
    import sys
    script = ("import torch, kernels\n"
              "from kernels.tests.torch_op_test import _huge_page_advised\n"
              "y = kernels.warp_softmax(torch.randn(256, 32768))\n"
              "print(_huge_page_advised(y.data_ptr() + (4 << 20)))\n")
    for setting, advised in (("0", "False"), ("1", "True")):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=dict(os.environ, WARP_SOFTMAX_HUGE_PAGES=setting))
        assert out.returncode == 0 and out.stdout.split() == [advised], out.stderr[-3000:]
