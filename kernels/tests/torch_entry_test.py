"""kernels.warp_softmax's unboxed entry (torch_entry.cc): it gives the operators'
results, keeps their errors, and hands to torch.ops every call it must not take."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode

import kernels
from kernels.ops import _entry as entry
from kernels.tests.torch_cases import inputs

UNARY = ["warp_softmax", "warp_log_softmax"]
BINARY = ["warp_softmax_backward", "warp_log_softmax_backward"]
TORCH_BACKWARD = {"warp_softmax_backward": torch._softmax_backward_data,
                  "warp_log_softmax_backward": torch._log_softmax_backward_data}


def _args(name, shape=(5, 7), dtype=torch.float32):
    x = inputs(shape, dtype=dtype)
    if name in UNARY:
        return (x,)
    output = getattr(kernels, name.replace("_backward", ""))(x, -1)
    return inputs(shape, dtype=dtype, seed=1), output


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_the_entry_gives_the_operators_result(name):
    for dim in (-1, 0):
        args = _args(name, dtype=torch.float64)
        want = getattr(torch.ops.kernels, name)(*args, dim)
        torch.testing.assert_close(getattr(entry, name)(*args, dim), want, rtol=0, atol=0)
        torch.testing.assert_close(getattr(kernels, name)(*args, dim=dim), want, rtol=0, atol=0)
    if name in BINARY:  # and torch's own backward's
        g, y = _args(name, dtype=torch.float64)
        torch.testing.assert_close(getattr(kernels, name)(g, y), TORCH_BACKWARD[name](g, y, -1, y.dtype))


class _Recorder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_what_the_entry_hands_to_torch_ops(name):
    args, op, call = _args(name), getattr(torch.ops.kernels, name), getattr(entry, name)
    subclassed = (args[0].as_subclass(_Subclass), *args[1:], -1)
    # a tensor subclass, the dim left out: torch.ops' results
    for given in (subclassed,) + ((args,) if name in UNARY else ()):
        torch.testing.assert_close(call(*given), op(*given), rtol=0, atol=0)
    assert type(call(*subclassed)) is _Subclass
    # a bool dim: torch.softmax's TypeError, where torch.ops would take it as 0 or 1
    with pytest.raises(TypeError, match="argument 'dim' must be int, not bool"):
        call(*args, True)
    # torch.ops' own errors: no dim for the backward's schema (it has no default), an int
    # past int64, a number for a tensor
    if name in BINARY:
        with pytest.raises(RuntimeError, match="missing value for argument 'dim'"):
            call(*args)
    with pytest.raises(RuntimeError, match="Expected a value of type 'int' for argument 'dim'"):
        call(*args, 2 ** 70)
    with pytest.raises(RuntimeError, match="Expected a value of type 'Tensor'"):
        call(*([1.0] * len(args)), -1)
    # A __torch_function__ mode sees the public function's call, as it sees torch.softmax's.
    with _Recorder() as recorder:
        getattr(kernels, name)(*args, -1)
    assert len(recorder.calls) == 1 and name in recorder.calls[0], recorder.calls


def _symbolic_trace(f, x):
    return torch.fx.symbolic_trace(f).graph


def _make_fx(f, x):
    return make_fx(f)(x).graph


def _export(strict):
    def trace(f, x):
        return torch.export.export(_Module(f), (x,), strict=strict).graph
    return trace


def _dynamo(f, x):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm.graph)
        return gm
    torch.compile(f, backend=backend, fullgraph=True)(x)
    return graphs[0]


class _Module(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


@pytest.mark.parametrize("trace", [_symbolic_trace, _make_fx, _export(True), _export(False), _dynamo],
                         ids=["symbolic_trace", "make_fx", "export_strict", "export_non_strict", "dynamo"])
def test_every_tracer_records_the_operators(trace):
    def f(x):
        y = kernels.warp_log_softmax(x, 0)
        return kernels.warp_softmax_backward(kernels.warp_softmax(x, -1), y.exp(), -1)

    x = inputs((3, 4))
    targets = {str(node.target) for node in trace(f, x).nodes if node.op == "call_function"}
    want = {"warp_softmax", "warp_log_softmax", "warp_softmax_backward"}
    assert want <= {t.split(".")[-2] if t.endswith(".default") else t.split(".")[-1] for t in targets}, targets


def test_errors_keep_their_python_types():
    with pytest.raises(IndexError, match=r"dim 2 is out of range for 2 dimensions"):
        entry.warp_softmax(torch.ones(2, 3), 2)
    with pytest.raises(RuntimeError, match="must be a floating point tensor"):
        entry.warp_softmax(torch.arange(6).reshape(2, 3), -1)
    with pytest.raises(RuntimeError, match="does not match"):
        kernels.warp_softmax_backward(torch.ones(2, 3), torch.ones(3, 2), -1)
    # torch.ops' own error for an int past int64 (the entry leaves it to torch.ops)
    with pytest.raises(RuntimeError, match="Expected a value of type 'int' for argument 'dim'"):
        kernels.warp_softmax(torch.ones(2, 3), 2 ** 70)


def test_autograd_and_double_backward_through_the_entry():
    x = inputs((3, 5), dtype=torch.float64).requires_grad_()
    assert kernels.warp_softmax(x).grad_fn.name() == "warp_softmaxBackward"
    assert torch.autograd.gradcheck(lambda t: kernels.warp_softmax(t, 0), (x,))
    y = torch.softmax(x.detach(), -1).requires_grad_()
    g = inputs((3, 5), dtype=torch.float64, seed=2).requires_grad_()
    assert torch.autograd.gradgradcheck(kernels.warp_softmax_backward, (g, y))
