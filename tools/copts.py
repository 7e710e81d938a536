"""tools/copts.bzl's flag lists for the one build outside Bazel: kernels/gpu_check.sh, made for
a GPU machine without Bazel. Reading them from copts.bzl keeps every flag chosen in that file
alone, so the GPU machine builds what Bazel builds.

    python3 tools/copts.py KERNEL_COPTS     # one flag a line, for a shell's array
    python3 -c 'import sys; sys.path.insert(0, "tools"); import copts; print(copts.read())'

copts.bzl is written in the part of Starlark that is Python, but for its load() of TensorFlow's
language standard (TF_COPTS), which no build outside Bazel compiles with: read() leaves the
load and TF_COPTS out.
"""

import os
import re
import sys

BZL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "copts.bzl")


def read(path=BZL):
    """{name: flags} for every public list and dict copts.bzl defines, TF_COPTS aside."""
    with open(path) as f:
        source = re.sub(r"^load\([^)]*\)\n", "", f.read(), flags=re.M)
    scope = {"TF_STD_COPTS": []}
    exec(compile(source, path, "exec"), scope)
    return {name: value for name, value in scope.items() if name.isupper()
            and not name.startswith("_") and name not in ("TF_STD_COPTS", "TF_COPTS")}


def main(argv):
    flags = read()
    if len(argv) != 1 or argv[0] not in flags or not isinstance(flags[argv[0]], list):
        raise SystemExit("usage: copts.py NAME, one of %s" % ", ".join(
            sorted(name for name, value in flags.items() if isinstance(value, list))))
    print("\n".join(flags[argv[0]]))


if __name__ == "__main__":
    main(sys.argv[1:])
