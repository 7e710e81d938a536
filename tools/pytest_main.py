"""Entry point of every pytest_test (tools/pytest.bzl): pytest inside Bazel's sandbox."""

import os
import sys

import pytest


def main():
    args = []
    tmp = os.environ.get("TEST_TMPDIR")
    if tmp:
        # Runfiles are read-only and /tmp is shared: keep pytest's tmp_path folders and
        # hypothesis' example database in the test's own scratch folder.
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = os.path.join(tmp, "hypothesis")
        args.append("--basetemp=" + os.path.join(tmp, "pytest"))
    args += [
        "-p", "no:cacheprovider",      # it would write .pytest_cache into the runfiles
        "--import-mode=importlib",     # tests in different packages may share a basename
        "-o", "console_output_style=classic",
        "-ra",
    ]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append("--junitxml=" + xml)
    return pytest.main(args + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
