"""./bazelw: finds or refuses Bazel with one clear line, passes arguments through unchanged."""

import glob
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Enough of a system for bazelw to run, with no Bazel and no apt-get on PATH.
TOOLS = ["bash", "dirname", "id", "cat", "env", "sed"]


@pytest.fixture
def sandbox(tmp_path):
    """A copy of the launcher and its setup script, and an empty bin folder for PATH."""
    ws = tmp_path / "ws"
    (ws / "tools").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "bazelw"), ws / "bazelw")
    shutil.copy(os.path.join(ROOT, "tools", "python_env.py"), ws / "tools" / "python_env.py")
    shutil.copy(os.path.join(ROOT, "requirements.lock"), ws / "requirements.lock")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)
    return ws, bin_dir


def run(ws, bin_dir, *args, **env):
    environ = {"PATH": str(bin_dir), "HOME": str(ws.parent)}
    environ.update(env)
    return subprocess.run(["bash", str(ws / "bazelw")] + list(args), env=environ,
                          capture_output=True, text=True, timeout=120)


def fake_bazel(bin_dir, version):
    script = bin_dir / "bazel"
    script.write_text('#!/bin/bash\nif [ "$1" = --version ]; then echo "bazel %s"; exit 0; fi\n'
                      'printf "%%s\\n" "$@" > "$(dirname "$0")/args"\n' % version)
    script.chmod(0o755)


def test_no_bazel_and_no_apt_get_is_one_clear_line(sandbox):
    ws, bin_dir = sandbox
    proc = run(ws, bin_dir, "test", "//...")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("bazelw: error: Bazel 4.2.x is not installed and there is no apt-get")
    assert "bazel-bootstrap" in lines[0]


def test_a_bazel_of_another_version_does_not_fit(sandbox):
    ws, bin_dir = sandbox
    fake_bazel(bin_dir, "7.4.1")
    proc = run(ws, bin_dir, "version")
    assert proc.returncode == 2
    assert "Bazel 4.2.x is not installed" in proc.stderr
    assert not (bin_dir / "args").exists()


@pytest.mark.skipif(not os.path.isdir("/usr/share/bazel/rules/java"),
                    reason="needs Debian's bazel-rules-java, which ./bazelw installs")
def test_arguments_pass_through_unchanged_with_the_environment_recorded(sandbox):
    ws, bin_dir = sandbox
    fake_bazel(bin_dir, "4.2.3")
    # The environment this test runs in is the one for this lock: ensure() finds it.
    cache = os.path.dirname(os.path.dirname(sys.prefix))
    args = ["test", "//...", "--config=ci", "a b", "--test_arg=-k x"]
    proc = run(ws, bin_dir, *args, PYTHON=sys.executable, FRAMEWORK_INTERNALS_CACHE=cache)
    assert proc.returncode == 0, proc.stderr
    assert (bin_dir / "args").read_text().splitlines() == args
    rc = (ws / ".bazelrc.python_env").read_text()
    assert "build --repo_env=PYTHON_ENV=%s\n" % sys.prefix in rc


def other_python():
    """A real interpreter that is neither 3.11 nor 3.12 (pyenv's shims need pyenv itself: not those)."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))
    candidates += ["/usr/bin/python3.%d" % minor for minor in range(8, 15)]
    for path in candidates:
        if os.path.exists(path) and not any(v in path for v in ("/3.11", "/3.12", "3.11", "3.12")):
            return path
    return None


def test_a_python_of_the_wrong_version_is_one_clear_line(sandbox):
    other = other_python()
    if other is None:
        pytest.skip("no Python other than 3.11 and 3.12 on this machine")
    ws, bin_dir = sandbox
    fake_bazel(bin_dir, "4.2.3")
    proc = run(ws, bin_dir, "version", PYTHON=other)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "Python 3.11 or 3.12 is required" in proc.stderr
