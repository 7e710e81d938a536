"""Compiler flags are chosen in tools/copts.bzl alone (as abseil's copts.bzl): no BUILD file or
macro sets a language standard, optimisation level, warning, code-generation or ISA flag itself,
and the one build outside Bazel (kernels/gpu_check.sh) reads them from there (tools/copts.py)."""

import glob
import os
import re
import sys

import pytest

RUNFILES = os.environ.get("RUNFILES_DIR") or os.path.join(os.environ["TEST_SRCDIR"])
# Such a flag (-Wl, linker options, -D/-I and -fPIC, per-target mechanics, are not choices of
# this kind, nor grep's -m1): in Starlark, a string literal that starts with one (docstrings
# may name flags); in a shell script, any word that does.
_FLAG = r"(-std=|--std=|-O[0-3sgz]?(?![\w=-])|-W(?!l,)[a-z]|-f[a-z]|-m(?!\d)[a-z0-9]|--expt-)"
FLAG = re.compile(r"[\"']" + _FLAG)
SHELL_FLAG = re.compile(r"(?<![\w-])" + _FLAG)


def starlark_files():
    found = []
    for top, _, files in os.walk(RUNFILES):
        found += [os.path.join(top, f) for f in files if f.endswith((".bzl", "BUILD.bazel"))]
    return found


def flags_outside_copts(paths, flag=FLAG):
    bad = []
    for path in paths:
        if path.endswith("tools/copts.bzl"):
            continue
        with open(path) as f:
            for number, line in enumerate(f, 1):
                code = line.split("#", 1)[0]  # comments may name flags
                if flag.search(code):
                    bad.append("%s:%d: %s" % (path[len(RUNFILES) + 1:], number, line.strip()))
    return bad


def main_repo_file(path):
    """A file of this workspace among the runfiles (under the main repository's folder)."""
    (found,) = glob.glob(os.path.join(RUNFILES, "*", path))
    return found


def test_every_starlark_file_is_read():
    names = {os.path.relpath(p, RUNFILES).split(os.sep, 1)[-1] for p in starlark_files()}
    assert {"kernels/BUILD.bazel", "tools/torch.bzl", "cuda/defs.bzl", "tools/copts.bzl"} <= names


def test_no_flag_is_set_outside_copts_bzl():
    assert flags_outside_copts(starlark_files()) == []


def test_the_build_outside_bazel_sets_no_flag_itself():
    script = main_repo_file("kernels/gpu_check.sh")
    with open(script) as f:
        assert "tools/copts.py" in f.read()
    assert flags_outside_copts([script], SHELL_FLAG) == []


def test_copts_py_reads_every_list_copts_bzl_defines():
    path = main_repo_file("tools/copts.bzl")
    sys.path.insert(0, os.path.dirname(main_repo_file("tools/copts.py")))
    import copts
    with open(path) as f:
        defined = set(re.findall(r"^([A-Z][A-Z0-9_]*) = ", f.read(), re.M)) - {"TF_COPTS"}
    flags = copts.read(path)
    assert set(flags) == defined
    assert flags["KERNEL_COPTS"][:len(flags["CXX_COPTS"])] == flags["CXX_COPTS"]
    for level in flags["X86_LEVEL_COPTS"].values():
        assert level and all(flag.startswith("-") for flag in level)


@pytest.mark.parametrize("line, flagged", [
    ('copts = ["-std=c++17"],', True), ('copts = ["-O3"],', True), ('"-Wno-psabi",', True),
    ('"-fopenmp"', True), ('"-march=x86-64-v3"', True), ('"--expt-relaxed-constexpr"', True),
    ('linkopts = ["-Wl,-Bsymbolic"]', False), ('"-DTORCH_EXTENSION_NAME=" + name', False),
    ('"-ccbin"', False), ('"-x", "cu"', False), ('"-O"', True),
    ('"-Xcompiler", "-fPIC"', False), ('name = "no-fast-math"', False),
])
def test_the_pattern_tells_flags_from_mechanics(line, flagged):
    assert bool(FLAG.search(line)) == flagged
    assert bool(SHELL_FLAG.search(line)) == flagged


@pytest.mark.parametrize("line, flagged", [
    ("nvcc -std=c++17 -O3 x.cu", True), ("c++ -march=x86-64-v3 -c", True),
    ("grep -m1 'model name' /proc/cpuinfo", False), ("timeout --kill-after=10 60 cmd", False),
    ('nvcc "${copts[@]}" -arch="$1" -I. x.cu', False),
])
def test_the_shell_pattern_finds_unquoted_flags(line, flagged):
    assert bool(SHELL_FLAG.search(line)) == flagged
