"""Compiler flags are chosen in tools/copts.bzl alone (as abseil's copts.bzl): no BUILD file or
macro sets a language standard, optimisation level, warning, code-generation or ISA flag itself."""

import os
import re

import pytest

RUNFILES = os.environ.get("RUNFILES_DIR") or os.path.join(os.environ["TEST_SRCDIR"])
# A string literal that starts with such a flag (-Wl, linker options, and -D/-I, per-target
# mechanics, are not choices of this kind).
FLAG = re.compile(r"""["'](-std=|--std=|-O[0-3sgz]?["']|-W(?!l,)[a-z]|-f[a-z]|-m[a-z0-9]|--expt-)""")


def starlark_files():
    found = []
    for top, _, files in os.walk(RUNFILES):
        found += [os.path.join(top, f) for f in files if f.endswith((".bzl", "BUILD.bazel"))]
    return found


def flags_outside_copts():
    bad = []
    for path in starlark_files():
        if path.endswith("tools/copts.bzl"):
            continue
        with open(path) as f:
            for number, line in enumerate(f, 1):
                code = line.split("#", 1)[0]  # comments may name flags
                if FLAG.search(code):
                    bad.append("%s:%d: %s" % (path[len(RUNFILES) + 1:], number, line.strip()))
    return bad


def test_every_starlark_file_is_read():
    names = {os.path.relpath(p, RUNFILES).split(os.sep, 1)[-1] for p in starlark_files()}
    assert {"kernels/BUILD.bazel", "tools/torch.bzl", "cuda/defs.bzl", "tools/copts.bzl"} <= names


def test_no_flag_is_set_outside_copts_bzl():
    assert flags_outside_copts() == []


@pytest.mark.parametrize("line, flagged", [
    ('copts = ["-std=c++17"],', True), ('copts = ["-O3"],', True), ('"-Wno-psabi",', True),
    ('"-fopenmp"', True), ('"-march=x86-64-v3"', True), ('"--expt-relaxed-constexpr"', True),
    ('linkopts = ["-Wl,-Bsymbolic"]', False), ('"-DTORCH_EXTENSION_NAME=" + name', False),
    ('"-ccbin"', False), ('"-x", "cu"', False), ('"-O"', True),
])
def test_the_pattern_tells_flags_from_mechanics(line, flagged):
    assert bool(FLAG.search(line)) == flagged
