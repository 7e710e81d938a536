"""`torch_op_library`: a shared library of PyTorch operators; `torch_python_module`: a
Python extension module over torch's tensors.

    torch_op_library(
        name = "torch_example_op",
        srcs = ["torch_example_op.cc"],
    )

(tools/tests/BUILD.bazel; kernels' warp_softmax is another) builds
`torch_example_op.so`, which `torch.ops.load_library(path)` loads; its
TORCH_LIBRARY blocks then register the operators. Compiled as
torch.utils.cpp_extension compiles CPU extensions (C++20, torch's
_GLIBCXX_USE_CXX11_ABI, -fopenmp, headers of the torch in the pinned
environment), so it loads without undefined symbols, and at::parallel_for,
whose OpenMP loop is compiled into the extension itself, runs in parallel.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary")
load("//tools:copts.bzl", "TORCH_COPTS", "TORCH_LINKOPTS")

def torch_op_library(name, srcs, deps = [], copts = [], **kwargs):
    """Builds `<name>.so` against the environment's torch.

    Args:
      name: the library's name, without `.so`.
      srcs: C++ sources registering operators with TORCH_LIBRARY / TORCH_LIBRARY_IMPL.
      deps: cc targets it links (kernel cores, cuda_library targets).
      copts: extra compiler flags.
      **kwargs: passed to cc_binary (visibility, tags, target_compatible_with).
    """
    cc_binary(
        name = name + ".so",
        srcs = srcs,
        copts = TORCH_COPTS + ["-DTORCH_EXTENSION_NAME=" + name] + copts,
        linkopts = TORCH_LINKOPTS,
        linkshared = True,
        deps = deps + ["@python_env//:torch"],
        **kwargs
    )

def torch_python_module(name, srcs, deps = [], copts = [], **kwargs):
    """Builds the Python extension module `<name>.so` (PyInit_<name> in `srcs`).

    As torch_op_library, also linked to torch's Python bindings (libtorch_python:
    THPVariable, torch's translation of C++ errors to Python exceptions).

    Args:
      name: the module's name.
      srcs: C++ sources.
      deps: cc targets it links.
      copts: extra compiler flags.
      **kwargs: passed to cc_binary (visibility, tags, target_compatible_with).
    """
    torch_op_library(name, srcs, deps + ["@python_env//:torch_python"], copts, **kwargs)
