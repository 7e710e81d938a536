"""`pytest_test`: a py_test that runs its sources with pytest.

    pytest_test(
        name = "pybind_extension_test",
        srcs = ["pybind_extension_test.py"],
        data = [":pybind_example.so"],
    )

pytest writes JUnit XML to the file Bazel names ($XML_OUTPUT_FILE), so each
test case shows in Bazel's test.xml and in .ci/run's count. Extra pytest
arguments go in `args` (`-k expr`, `-x`...); at run time,
`bazel test //pkg:target --test_arg=-k --test_arg=expr` does the same.
"""

load("@rules_python//python:defs.bzl", "py_test")

def pytest_test(name, srcs, deps = [], args = [], size = "small", **kwargs):
    """Runs `srcs` with pytest under the workspace's pinned interpreter.

    Args:
      name: the test's name.
      srcs: the test files (test_*.py or *_test.py).
      deps: py_library targets the tests import.
      args: extra pytest arguments, before the test files.
      size: Bazel's test size, which sets its timeout (small 60 s, medium 300 s,
        large 900 s): the smallest whose timeout is at least 8x the test's time
        on an idle 2-core machine (a slower CPU under the rbe check, with a
        second build running, took 6x).
      **kwargs: passed to py_test (data, tags, shard_count...).
    """
    py_test(
        name = name,
        srcs = srcs + ["//tools:pytest_main.py"],
        main = "//tools:pytest_main.py",
        args = args + ["$(location %s)" % src for src in srcs],
        python_version = "PY3",
        deps = deps,
        size = size,
        **kwargs
    )
