"""Offline stand-in for pybind11_bazel: `pybind_extension`, building `<name>.so`.

pybind11_bazel cannot be fetched here; MODULE.bazel uses the real one under
bzlmod. Same public API: the `.so` goes in the `data` of py_* targets, and
pybind11's and Python's headers come from the pinned environment.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary")

def pybind_extension(name, copts = [], features = [], linkopts = [], deps = [], **kwargs):
    """A Python extension module `<name>.so` built with pybind11 (hidden symbols)."""
    cc_binary(
        name = name + ".so",
        copts = copts + ["-fexceptions", "-fvisibility=hidden"],
        features = features + ["-use_header_modules", "-parse_headers"],
        linkopts = linkopts + ["-Wl,-Bsymbolic"],
        linkshared = True,
        deps = deps + ["@python_env//:pybind11"],
        **kwargs
    )
