"""`pybind_extension`: a Python extension module written with pybind11.

    pybind_extension(
        name = "fastmath",
        srcs = ["fastmath.cc"],
        deps = [":fastmath_core"],
    )

builds `fastmath.so` (importable as `<package>.fastmath`) and a py_library
`:fastmath` to put in a py_library's or test's deps. Symbols are hidden by
default (pybind11's recommendation), and libpython is not linked: the
interpreter that imports the module provides it.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary")
load("@rules_python//python:defs.bzl", "py_library")

def pybind_extension(name, srcs, deps = [], copts = [], **kwargs):
    """Builds `<name>.so` with pybind11 and wraps it in py_library `<name>`.

    Args:
      name: the module's name: PYBIND11_MODULE(<name>, m) in the sources.
      srcs: C++ sources and private headers.
      deps: cc targets it links (a cuda_library, a kernel core...).
      copts: extra compiler flags.
      **kwargs: passed to both targets (visibility, tags, target_compatible_with).
    """
    cc_binary(
        name = name + ".so",
        srcs = srcs,
        copts = ["-std=c++17", "-fvisibility=hidden", "-O3"] + copts,
        linkshared = True,
        deps = deps + ["@python_env//:pybind11"],
        **kwargs
    )
    py_library(
        name = name,
        data = [":" + name + ".so"],
        **kwargs
    )
