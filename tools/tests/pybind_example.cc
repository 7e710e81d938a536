// A small real pybind11 module for //tools/tests:pybind_extension_test: a
// function over a NumPy buffer and a C++ error mapped to a Python exception.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>

namespace py = pybind11;

namespace {

double sum_of_squares(py::array_t<double, py::array::c_style | py::array::forcecast> x) {
  const double* data = x.data();
  double total = 0.0;
  for (py::ssize_t i = 0; i < x.size(); ++i) total += data[i] * data[i];
  return total;
}

int checked_div(int a, int b) {
  if (b == 0) throw std::invalid_argument("checked_div: division by zero");
  return a / b;
}

}  // namespace

PYBIND11_MODULE(pybind_example, m) {
  m.doc() = "pybind_extension example";
  m.def("sum_of_squares", &sum_of_squares, py::arg("x"));
  m.def("checked_div", &checked_div, py::arg("a"), py::arg("b"));
}
