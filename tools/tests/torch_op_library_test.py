"""torch_op_library builds a .so that torch.ops.load_library loads; torch_python_module
a Python module over torch's tensors."""

import importlib.util
import os

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "torch_example_op.so")


@pytest.fixture(scope="module")
def op():
    torch.ops.load_library(LIBRARY)
    return torch.ops.tools_example.scaled_add


def test_operator_matches_eager_torch(op):
    a = torch.randn(3, 5)
    b = torch.randn(3, 5)
    torch.testing.assert_close(op(a, b, 0.5), a + 0.5 * b)
    # Non-contiguous input goes through .contiguous() in the kernel.
    torch.testing.assert_close(op(a.t(), b.t(), -2.0), a.t() - 2.0 * b.t())


def test_schema_is_registered(op):
    assert "scaled_add(Tensor a, Tensor b, float alpha) -> Tensor" in str(op.default._schema)


def test_torch_check_becomes_runtime_error(op):
    with pytest.raises(RuntimeError, match="same shape"):
        op(torch.ones(2), torch.ones(3), 1.0)


def test_python_module_takes_and_returns_tensors():
    path = os.path.join(HERE, "torch_example_module.so")
    spec = importlib.util.spec_from_file_location("torch_example_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.testing.assert_close(module.twice(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))
    with pytest.raises(RuntimeError, match="expected a float32 tensor, got Long"):
        module.twice(torch.arange(3))
