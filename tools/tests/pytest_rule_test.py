"""pytest_test runs pytest and reports each case to Bazel as JUnit XML."""

import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

# The workspace root: in Bazel's runfiles, or in the source tree under tools/python.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = os.path.join(ROOT, "tools", "pytest_main.py")


def run_main(tmp_path, source):
    test_file = tmp_path / "sample_test.py"
    test_file.write_text(textwrap.dedent(source))
    xml = tmp_path / "test.xml"
    env = dict(os.environ, XML_OUTPUT_FILE=str(xml), TEST_TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, MAIN, str(test_file)], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    return proc, ET.parse(xml).getroot()


def test_each_case_lands_in_the_junit_xml(tmp_path):
    proc, root = run_main(tmp_path, """
        import pytest
        @pytest.mark.parametrize("x", [1, 2, 3])
        def test_ok(x):
            assert x > 0
        def test_bad():
            assert 1 == 2
    """)
    assert proc.returncode == 1, proc.stdout
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert int(suite.get("tests")) == 4
    assert int(suite.get("failures")) == 1


def test_runs_in_the_pinned_environment_and_writes_no_cache(tmp_path):
    proc, _ = run_main(tmp_path, """
        import sys
        def test_env():
            assert sys.prefix != sys.base_prefix
    """)
    assert proc.returncode == 0, proc.stdout
    assert not (tmp_path / ".pytest_cache").exists()


def test_hypothesis_saves_failing_examples_in_the_test_tmpdir(tmp_path):
    proc, _ = run_main(tmp_path, """
        from hypothesis import given, strategies as st
        @given(st.integers())
        def test_int(x):
            assert x < 10
    """)
    assert proc.returncode == 1, proc.stdout
    assert any((tmp_path / "hypothesis").iterdir())
