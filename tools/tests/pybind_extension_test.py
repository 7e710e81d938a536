"""pybind_extension builds a module the pinned interpreter imports."""

import numpy as np
import pytest

from tools.tests import pybind_example


def test_module_computes_over_numpy_buffers():
    x = np.arange(10, dtype=np.float64).reshape(2, 5)
    assert pybind_example.sum_of_squares(x) == pytest.approx(float((x**2).sum()))
    # forcecast: integer and non-contiguous input is converted, not rejected.
    assert pybind_example.sum_of_squares(np.arange(4)[::2]) == 4.0


def test_cxx_exceptions_become_python_exceptions():
    assert pybind_example.checked_div(7, 2) == 3
    with pytest.raises(ValueError, match="division by zero"):
        pybind_example.checked_div(1, 0)


def test_module_is_hidden_visibility_shared_object():
    assert pybind_example.__file__.endswith("pybind_example.so")
    assert pybind_example.__doc__ == "pybind_extension example"
