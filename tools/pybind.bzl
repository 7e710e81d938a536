"""`pybind_extension`: a Python extension module written with pybind11.

    pybind_extension(
        name = "warp_softmax_numpy",
        srcs = ["pybind_module.cc"],
        deps = [
            ":dims",
            ":softmax_cpu",
        ],
    )

    py_library(
        name = "numpy",
        data = [":warp_softmax_numpy.so"],
        deps = [":package"],
    )

(kernels/BUILD.bazel) builds `warp_softmax_numpy.so`, importable as
`kernels.warp_softmax_numpy` by any py_* target that has it in `data`. The workspace's policy on top of pybind11_bazel's
macro (an offline stand-in under third_party/ for Bazel 4.2.3, the real one
under bzlmod): C++17 and optimised code. Symbols are hidden and libpython is
not linked: the interpreter that imports the module provides it.
"""

load("@pybind11_bazel//:build_defs.bzl", _pybind_extension = "pybind_extension")
load("//tools:copts.bzl", "CXX_COPTS")

def pybind_extension(name, srcs, deps = [], copts = [], **kwargs):
    """Builds the extension module `<name>.so` (PYBIND11_MODULE(<name>, m) in `srcs`).

    Args:
      name: the module's name.
      srcs: C++ sources and private headers.
      deps: cc targets it links (a kernel core, a cuda_library...).
      copts: extra compiler flags.
      **kwargs: passed on (visibility, tags, target_compatible_with).
    """
    _pybind_extension(
        name = name,
        srcs = srcs,
        deps = deps,
        copts = CXX_COPTS + copts,
        **kwargs
    )
