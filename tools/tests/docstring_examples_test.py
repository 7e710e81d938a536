"""Every macro's docstring example is a real target of the workspace, so it builds with `bazel
build //...`: each indented call or load in a tools/*.bzl docstring must appear, whitespace
aside, in one of the BUILD files read here (what the issue found: examples naming targets that
did not exist)."""

import os
import re

import pytest

RUNFILES = os.environ.get("RUNFILES_DIR") or os.environ["TEST_SRCDIR"]


def files(suffix):
    found = []
    for top, _, names in os.walk(RUNFILES):
        found += [os.path.join(top, n) for n in names if n.endswith(suffix)]
    return found


def squash(text):
    return re.sub(r"\s+", "", text)


def examples(bzl):
    """The 4-space-indented blocks of the module docstring that call or load something."""
    with open(bzl) as f:
        doc = re.match(r'\s*"""(.*?)"""', f.read(), re.S)  # Starlark: the module's first string
    doc = doc.group(1) if doc else ""
    blocks, current = [], []
    for line in doc.splitlines() + [""]:
        if line.startswith("    ") and (current or re.match(r"    [a-z_]+\(", line)):
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    return blocks


MACROS = sorted(p for p in files(".bzl") if os.sep + "tools" + os.sep in p)
BUILD_TEXT = "".join(squash(open(p).read()) for p in files("BUILD.bazel"))


def test_the_macros_and_build_files_are_read():
    names = {os.path.basename(p) for p in MACROS}
    assert {"pytest.bzl", "pybind.bzl", "cuda.bzl", "torch.bzl", "tensorflow.bzl"} <= names
    assert "torch_op_library(" in BUILD_TEXT


@pytest.mark.parametrize("bzl", MACROS, ids=os.path.basename)
def test_each_docstring_example_is_a_real_target(bzl):
    for example in examples(bzl):
        assert squash(example) in BUILD_TEXT, "%s's example is in no BUILD file:\n%s" % (bzl, example)


def test_a_made_up_example_is_caught(tmp_path):
    fake = tmp_path / "fake.bzl"
    fake.write_text('"""Doc.\n\n    torch_op_library(\n        name = "nope",\n    )\n"""\n')
    (example,) = examples(str(fake))
    assert squash(example) not in BUILD_TEXT
