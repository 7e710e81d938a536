// kernels.warp_softmax's fast way in from Python: the operators called
// unboxed through the dispatcher, as torch's own generated bindings call
// theirs.
//
// torch.ops.kernels.warp_softmax(x) runs a Python frame, then builds a boxed
// argument stack against the schema on every call: 1.7 us for a 1x1 tensor
// where torch.softmax takes 0.8 us (AMD EPYC, Zen 5, one thread). At 64x64
// that difference alone left the backward operator at 0.6x torch's. Here a
// plain tensor and an int dim go straight to the typed operator; anything
// else (a tensor subclass, a __torch_function__ mode, an FX proxy, a SymInt
// dim) goes to torch.ops.kernels.<name>, which handles it. The fallback is
// here, not in ops.py, so that each public function there is one Python
// frame: a second one (the fallback's test) cost 0.19 us a call, which left
// the backward at 64x64 0.91x-0.96x torch's.
// Autograd, vmap, autocast and dispatch modes sit in the dispatcher below,
// so they see the same call either way.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace {

using Unary = at::Tensor(const at::Tensor&, int64_t);
using Binary = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);

// Looked up when the module is imported: ops.py imports it after loading the
// operators' library, which registers the schemas.
std::optional<c10::TypedOperatorHandle<Unary>> softmax, log_softmax;
std::optional<c10::TypedOperatorHandle<Binary>> softmax_backward, log_softmax_backward;

// torch.ops.kernels.<name> for each entry point (indexed by Entry): what
// takes the calls the typed path cannot.
enum Entry { kSoftmax, kLogSoftmax, kSoftmaxBackward, kLogSoftmaxBackward, kEntries };
constexpr const char* kNames[kEntries] = {"warp_softmax", "warp_log_softmax", "warp_softmax_backward",
                                          "warp_log_softmax_backward"};
PyObject* fallback[kEntries];

// The tensor `obj` holds, if it is a plain torch.Tensor (or Parameter: neither
// overrides __torch_function__) and no __torch_function__ mode is on; nullptr
// otherwise.
const at::Tensor* plain_tensor(PyObject* obj) {
  if (!THPVariable_CheckExact(obj) || at::impl::torch_function_mode_enabled()) return nullptr;
  return &THPVariable_Unpack(obj);
}

// The dim a Python int gives; nullopt for anything else (SymInt, an int past
// int64), which torch.ops then accepts or reports.
std::optional<int64_t> plain_dim(PyObject* obj) {
  if (!PyLong_CheckExact(obj)) return std::nullopt;
  int overflow = 0;
  const long long dim = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow != 0) return std::nullopt;
  return dim;
}

// (*kOp)(tensors..., dim) on the call's arguments, or torch.ops' call of them.
// The GIL is released around the typed call, as torch.ops and torch's
// bindings release it.
template <auto* kOp, size_t kTensors, Entry kEntry>
PyObject* entry(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  const auto slow = [&] { return PyObject_Vectorcall(fallback[kEntry], args, nargs, nullptr); };
  if (nargs != kTensors + 1) return slow();
  // torch.ops would take a bool as 0 or 1; torch.softmax refuses it, and so do we.
  if (PyBool_Check(args[kTensors])) {
    PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be int, not bool", kNames[kEntry]);
    return nullptr;
  }
  const at::Tensor* tensors[kTensors];
  for (size_t i = 0; i < kTensors; ++i) {
    tensors[i] = plain_tensor(args[i]);
    if (tensors[i] == nullptr) return slow();
  }
  const std::optional<int64_t> dim = plain_dim(args[kTensors]);
  if (!dim) return slow();
  at::Tensor result;
  {
    pybind11::gil_scoped_release no_gil;
    if constexpr (kTensors == 1) {
      result = (*kOp)->call(*tensors[0], *dim);
    } else {
      result = (*kOp)->call(*tensors[0], *tensors[1], *dim);
    }
  }
  return THPVariable_Wrap(std::move(result));
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {kNames[kSoftmax], reinterpret_cast<PyCFunction>(entry<&softmax, 1, kSoftmax>), METH_FASTCALL,
     "warp_softmax(x, dim): kernels::warp_softmax."},
    {kNames[kLogSoftmax], reinterpret_cast<PyCFunction>(entry<&log_softmax, 1, kLogSoftmax>), METH_FASTCALL,
     "warp_log_softmax(x, dim): kernels::warp_log_softmax."},
    {kNames[kSoftmaxBackward], reinterpret_cast<PyCFunction>(entry<&softmax_backward, 2, kSoftmaxBackward>),
     METH_FASTCALL, "warp_softmax_backward(grad_output, output, dim): kernels::warp_softmax_backward."},
    {kNames[kLogSoftmaxBackward],
     reinterpret_cast<PyCFunction>(entry<&log_softmax_backward, 2, kLogSoftmaxBackward>), METH_FASTCALL,
     "warp_log_softmax_backward(grad_output, output, dim): kernels::warp_log_softmax_backward."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "warp_softmax_entry",
    "Unboxed Python entry points to the kernels:: operators (ops.py's fast path).", -1, methods,
};

}  // namespace

PyMODINIT_FUNC PyInit_warp_softmax_entry() {
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto find = [&](const char* name) { return dispatcher.findSchema({name, ""}); };
  const auto unary = find("kernels::warp_softmax"), log_unary = find("kernels::warp_log_softmax");
  const auto binary = find("kernels::warp_softmax_backward");
  const auto log_binary = find("kernels::warp_log_softmax_backward");
  if (!unary || !log_unary || !binary || !log_binary) {
    PyErr_SetString(PyExc_ImportError,
                    "kernels.warp_softmax_entry: the kernels:: operators are not registered; "
                    "import kernels.ops (which loads them) instead");
    return nullptr;
  }
  softmax = unary->typed<Unary>();
  log_softmax = log_unary->typed<Unary>();
  softmax_backward = binary->typed<Binary>();
  log_softmax_backward = log_binary->typed<Binary>();
  PyObject* torch = PyImport_ImportModule("torch");
  PyObject* ops = torch ? PyObject_GetAttrString(torch, "ops") : nullptr;
  PyObject* kernels = ops ? PyObject_GetAttrString(ops, "kernels") : nullptr;
  Py_XDECREF(ops);
  Py_XDECREF(torch);
  for (int i = 0; i < kEntries && kernels; ++i) {
    fallback[i] = PyObject_GetAttrString(kernels, kNames[i]);  // kept for the process's life
    if (!fallback[i]) Py_CLEAR(kernels);
  }
  if (!kernels) return nullptr;
  Py_DECREF(kernels);
  return PyModule_Create(&module);
}
