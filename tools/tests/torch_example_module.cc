// A small real Python module over torch for //tools/tests:torch_op_library_test:
// torch_example_module.twice(t) = 2 * t, a float32 tensor; torch's own error
// translation turns a failed TORCH_CHECK into RuntimeError.
#include <Python.h>
#include <ATen/ATen.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

PyObject* twice(PyObject* /*module*/, PyObject* arg) {
  HANDLE_TH_ERRORS
  TORCH_CHECK(THPVariable_Check(arg), "twice: expected a tensor");
  const at::Tensor& t = THPVariable_Unpack(arg);
  TORCH_CHECK(t.scalar_type() == at::kFloat, "twice: expected a float32 tensor, got ", t.scalar_type());
  return THPVariable_Wrap(t * 2);
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"twice", twice, METH_O, "twice(t): 2 * t for a float32 tensor."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_example_module", "tools' torch_python_module example.", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC PyInit_torch_example_module() { return PyModule_Create(&module); }
