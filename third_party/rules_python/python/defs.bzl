"""Offline stand-in for rules_python: the py_* rules built into Bazel 4.2.3.

rules_python cannot be fetched here. BUILD files load these names exactly as
they would from the real rules_python (which MODULE.bazel uses for Bazel >= 7,
where the native rules are going away).
"""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

py_binary = native.py_binary
py_library = native.py_library
py_runtime = native.py_runtime
py_runtime_pair = _py_runtime_pair
py_test = native.py_test
