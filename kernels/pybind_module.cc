// NumPy binding: kernels.warp_softmax_numpy, the CPU kernels over ndarrays (float32, float64).
//
//   from kernels import warp_softmax_numpy as k
//   y = k.softmax(x, axis=-1); dx = k.softmax_backward(dy, y, axis=-1)
//
// minigrad's softmax/log_softmax use it when it is built. Its CPU level:
// kernels.isa.CpuIsa(k.__file__).current(). Any axis (moved last
// and made contiguous, then moved back), any strides; the GIL is released while
// the kernel runs, and rows are split across threads for large arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "kernels/dims.h"
#include "kernels/softmax.h"

namespace py = pybind11;

namespace {

// Splits rows across up to hardware_concurrency threads when the work is large enough to pay.
template <typename F>
void parallel_rows(int64_t rows, int64_t cols, F&& body) {
  const int64_t min_elements_per_thread = 1 << 16;
  const int64_t by_size = std::min(rows, rows * cols / min_elements_per_thread);
  if (by_size <= 1) return body(0, rows);
  // Read once: glibc's hardware_concurrency opens and reads a sysfs file on every call
  // (perf: 7 us, most of a small array's call).
  static const int64_t cpus = std::max(1u, std::thread::hardware_concurrency());
  const int64_t threads = std::min(cpus, by_size);
  if (threads <= 1) return body(0, rows);
  std::vector<std::thread> pool;
  const int64_t chunk = (rows + threads - 1) / threads;
  for (int64_t begin = chunk; begin < rows; begin += chunk) {
    pool.emplace_back([&, begin] { body(begin, std::min(rows, begin + chunk)); });
  }
  body(0, std::min(rows, chunk));
  for (auto& t : pool) t.join();
}

// `a` with `axis` moved last, C-contiguous, as T.
template <typename T>
py::array_t<T, py::array::c_style> rows_view(const py::array& a, int axis) {
  using Rows = py::array_t<T, py::array::c_style | py::array::forcecast>;
  if (axis == a.ndim() - 1) return Rows::ensure(a);  // the common case: no moveaxis
  return Rows::ensure(py::module_::import("numpy").attr("moveaxis")(a, axis, -1));
}

// `a`, a 0-d array as one row of one element (as torch.softmax takes it).
py::array at_least_1d(const py::array& a) {
  return a.ndim() == 0 ? py::cast<py::array>(a.attr("reshape")(1)) : a;
}

// The inverse of rows_view's move, and of at_least_1d for a 0-d `like`.
py::array restore_axis(const py::array& a, int axis, const py::array& like) {
  if (like.ndim() == 0) return py::cast<py::array>(a.attr("reshape")(py::tuple()));
  if (axis == a.ndim() - 1) return a;
  return py::cast<py::array>(py::module_::import("numpy").attr("moveaxis")(a, -1, axis));
}

// `axis` as an index into a's dims. An int or anything with __index__ (np.int64), not a bool
// or a float: NumPy's reductions refuse those, and pybind11's int would take a bool as 0 or 1.
int normalize_axis(const py::array& a, py::handle axis, const char* op) {
  if (PyBool_Check(axis.ptr()) || !PyIndex_Check(axis.ptr())) {
    throw py::type_error(std::string(op) + ": axis must be an int, not " + Py_TYPE(axis.ptr())->tp_name);
  }
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(axis.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const int64_t value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (value == -1 && PyErr_Occurred()) throw py::error_already_set();
  const int64_t d = overflow ? -1 : warp_softmax::normalize_dim(value, a.ndim());
  if (d < 0) {
    throw py::index_error(overflow ? warp_softmax::dim_error(op, "axis", py::str(index).cast<std::string>(), a.ndim())
                                   : warp_softmax::dim_error(op, "axis", value, a.ndim()));
  }
  return static_cast<int>(d);
}

void check_dtype(const py::array& a, const char* op) {
  const char kind = a.dtype().kind();
  if (kind != 'f' || (a.itemsize() != 4 && a.itemsize() != 8)) {
    throw py::type_error(std::string(op) + ": expected a float32 or float64 array, got " +
                         py::str(a.dtype()).cast<std::string>());
  }
}

template <typename T>
py::array forward_t(const py::array& x, int axis, bool log) {
  auto in = rows_view<T>(at_least_1d(x), axis);
  py::array_t<T, py::array::c_style> out(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
  const int64_t cols = in.ndim() ? in.shape(in.ndim() - 1) : 1;
  const int64_t rows = cols ? in.size() / cols : 0;
  const T* xp = in.data();
  T* yp = out.mutable_data();
  warp_softmax::cpu_isa();  // a bad WARP_SOFTMAX_ISA raises here, with the GIL held
  {
    py::gil_scoped_release release;  // (faulting a large result in takes milliseconds too)
    warp_softmax::prepare_result(yp, out.nbytes());
    parallel_rows(rows, cols, [&](int64_t begin, int64_t end) {
      warp_softmax::forward_cpu<T>(xp + begin * cols, yp + begin * cols, end - begin, cols, log);
    });
  }
  return restore_axis(out, axis, x);
}

py::array forward(const py::array& x, py::handle axis_arg, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_dtype(x, op);
  const int axis = normalize_axis(x, axis_arg, op);
  return x.itemsize() == 4 ? forward_t<float>(x, axis, log) : forward_t<double>(x, axis, log);
}

template <typename T>
py::array backward_t(const py::array& dy, const py::array& y, int axis, bool log) {
  auto g = rows_view<T>(at_least_1d(dy), axis);
  auto out = rows_view<T>(at_least_1d(y), axis);
  py::array_t<T, py::array::c_style> dx(std::vector<py::ssize_t>(g.shape(), g.shape() + g.ndim()));
  const int64_t cols = g.shape(g.ndim() - 1);
  const int64_t rows = cols ? g.size() / cols : 0;
  const T *gp = g.data(), *yp = out.data();
  T* dxp = dx.mutable_data();
  warp_softmax::cpu_isa();  // a bad WARP_SOFTMAX_ISA raises here, with the GIL held
  {
    py::gil_scoped_release release;
    warp_softmax::prepare_result(dxp, dx.nbytes());
    parallel_rows(rows, cols, [&](int64_t begin, int64_t end) {
      const int64_t off = begin * cols;
      warp_softmax::backward_cpu<T>(gp + off, yp + off, dxp + off, end - begin, cols, log);
    });
  }
  return restore_axis(dx, axis, dy);
}

py::array backward(const py::array& dy, const py::array& y, py::handle axis_arg, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_dtype(dy, op);
  check_dtype(y, op);
  if (!dy.dtype().equal(y.dtype()) || dy.ndim() != y.ndim() ||
      !std::equal(dy.shape(), dy.shape() + dy.ndim(), y.shape())) {
    throw py::value_error(std::string(op) + ": dy and y must have the same shape and dtype");
  }
  const int axis = normalize_axis(dy, axis_arg, op);
  return dy.itemsize() == 4 ? backward_t<float>(dy, y, axis, log) : backward_t<double>(dy, y, axis, log);
}

}  // namespace

PYBIND11_MODULE(warp_softmax_numpy, m) {
  m.doc() = "warp_softmax's CPU kernels over NumPy arrays (float32, float64)";
  m.def("softmax", [](const py::array& x, py::handle axis) { return forward(x, axis, false); },
        py::arg("x"), py::arg("axis") = py::int_(-1), "softmax of x along axis");
  m.def("log_softmax", [](const py::array& x, py::handle axis) { return forward(x, axis, true); },
        py::arg("x"), py::arg("axis") = py::int_(-1), "log_softmax of x along axis");
  m.def("softmax_backward",
        [](const py::array& dy, const py::array& y, py::handle axis) { return backward(dy, y, axis, false); },
        py::arg("dy"), py::arg("y"), py::arg("axis") = py::int_(-1), "y * (dy - sum(dy * y, axis))");
  m.def("log_softmax_backward",
        [](const py::array& dy, const py::array& y, py::handle axis) { return backward(dy, y, axis, true); },
        py::arg("dy"), py::arg("y"), py::arg("axis") = py::int_(-1), "dy - exp(y) * sum(dy, axis)");
}
