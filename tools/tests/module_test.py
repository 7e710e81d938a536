"""MODULE.bazel (bzlmod) and WORKSPACE.bazel (Bazel 4.2.3) name the same dependencies.

MODULE.bazel cannot be exercised with the Bazel that installs here, so this
keeps the two from drifting apart: every external repository one declares, the
other declares too.
"""

import os
import re

# The workspace root: in Bazel's runfiles, or in the source tree under tools/python.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Declared in WORKSPACE.bazel only: an implicit dependency of Bazel 4.2.3's test
# rules that bzlmod's Bazel resolves itself.
WORKSPACE_ONLY = {"remote_coverage_tools"}
# Declared in MODULE.bazel only: built into Debian's Bazel 4.2.3.
MODULE_ONLY = {"platforms"}


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        # Comments may mention names; only code counts.
        return re.sub(r"#[^\n]*", "", f.read())


def workspace_repos(text):
    return set(re.findall(r'\bname\s*=\s*"([^"]+)"', text)) - {"framework_internals"}


def module_repos(text):
    deps = set(re.findall(r'bazel_dep\(\s*name\s*=\s*"([^"]+)"', text))
    for args in re.findall(r"use_repo\(([^)]*)\)", text):
        deps |= set(re.findall(r'"([^"]+)"', args))
    return deps


def test_both_files_name_the_same_external_dependencies():
    workspace = workspace_repos(read("WORKSPACE.bazel")) - WORKSPACE_ONLY
    module = module_repos(read("MODULE.bazel")) - MODULE_ONLY
    assert workspace == module, (
        "only in WORKSPACE.bazel: %s; only in MODULE.bazel: %s"
        % (sorted(workspace - module), sorted(module - workspace)))


def test_both_register_the_pinned_python_toolchain():
    for name in ("WORKSPACE.bazel", "MODULE.bazel"):
        assert 'register_toolchains("@python_env//:python_toolchain")' in read(name), name


def test_parsers_see_what_a_mismatch_looks_like():
    # The comparison is only as good as the parsing: a dependency added to one file
    # alone must show up as a difference.
    workspace = read("WORKSPACE.bazel") + '\nlocal_repository(name = "extra", path = "x")\n'
    assert workspace_repos(workspace) - WORKSPACE_ONLY != module_repos(read("MODULE.bazel")) - MODULE_ONLY
    assert {"rules_python", "rules_cuda", "pybind11_bazel"} <= module_repos(read("MODULE.bazel"))
