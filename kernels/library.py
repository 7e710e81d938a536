"""Finds a compiled library of this package: beside this file (Bazel runfiles), or in the
bazel-bin/kernels folder that ./bazelw build fills (on sys.path under tools/python)."""

import os
import sys


def find(name):
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in [here] + [os.path.join(p, "kernels") for p in sys.path if p]:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise ImportError("kernels: %s is not built; run ./bazelw build //kernels:%s (or //kernels/...) "
                      "and import again" % (name, name))
