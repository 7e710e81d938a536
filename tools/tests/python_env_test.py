"""The pinned environment: tests run inside it; its creation fails clearly and atomically."""

import importlib
import os
import signal
import subprocess
import sys

import pytest

from tools import python_env

# The workspace root: in Bazel's runfiles, or in the source tree under tools/python.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCK = os.path.join(ROOT, "requirements.lock")


def test_py_test_runs_inside_the_environment_built_from_this_lock():
    with open(LOCK, "rb") as f:
        expected = python_env.env_path(f.read())
    assert sys.prefix == expected
    for module in ("numpy", "torch", "pytest", "hypothesis"):
        assert importlib.import_module(module).__file__.startswith(sys.prefix + os.sep), module


def locked_pins(text):
    """{name: (version, marker or None)} of the lock's requirement lines."""
    pins = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith(("#", " ", "-")):
            requirement, _, marker = line.rstrip(" \\").partition(" ; ")
            name, version = requirement.strip().split("==")
            pins[name] = (version, marker or None)
    return pins


def test_every_locked_package_for_this_python_is_installed_at_its_pinned_version():
    from importlib import metadata
    from packaging.markers import Marker
    with open(LOCK) as f:
        text = f.read()
    python_env.check_lock(text)
    pins = locked_pins(text)
    assert len(pins) > 50
    installed = 0
    for name, (version, marker) in pins.items():
        if marker is None or Marker(marker).evaluate():
            assert metadata.version(name) == version, name
            installed += 1
    assert installed > 50


def test_the_lock_names_only_the_public_index_and_serves_python_3_11_and_3_12():
    with open(LOCK) as f:
        text = f.read()
    # No option line (--find-links, --index-url...) and no local path: pip's default
    # index, PyPI, serves every pin, on any machine.
    assert not [line for line in text.splitlines() if line.startswith("-")]
    assert "/opt/" not in text and "file:" not in text
    # One universal lock: markers keep the version-dependent pins apart (uv --universal).
    assert "python_full_version" in text or "python_version" in text
    assert python_env.SUPPORTED_PYTHONS == ((3, 11), (3, 12))
    # PyPI's torch is the CUDA build; its toolkit wheels are pinned at torch's CUDA version.
    pins = locked_pins(text)
    assert "+" not in pins["torch"][0]  # no local build (+cpu): PyPI's own file
    import torch
    for wheel in ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl"):
        assert pins[wheel][0].startswith(torch.version.cuda + "."), wheel


def test_tools_python_refuses_itself_as_the_base_interpreter():
    # PYTHON is also the interpreter variable of scripts such as kernels/gpu_check.sh;
    # set to tools/python, each call used to start another without end. Its own
    # session, so a regression is killed whole at the timeout.
    wrapper = os.path.join(ROOT, "tools", "python")
    child = subprocess.Popen([wrapper, "-c", "pass"], env=dict(os.environ, PYTHON=wrapper),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        _, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 2
    assert "PYTHON is tools/python itself" in err


def test_lock_without_hashes_is_refused_with_one_line():
    with pytest.raises(python_env.SetupError) as err:
        python_env.check_lock("numpy==2.4.6\nscipy==1.17.1 \\\n    --hash=sha256:abc\ntqdm>=4\n")
    message = str(err.value)
    assert "\n" not in message
    assert "without --hash: numpy" in message and "not pinned with ==: tqdm>=4" in message
    assert "tools/update_lock.sh" in message


def test_wrong_python_version_is_refused_with_one_line():
    with pytest.raises(python_env.SetupError, match=r"Python 3\.11 or 3\.12 is required.*3\.9") as err:
        python_env.check_python(version_info=(3, 9, 18), executable="/usr/bin/python3")
    assert "\n" not in str(err.value)
    python_env.check_python(version_info=(3, 12, 1), executable="/usr/bin/python3.12")


def test_too_little_disk_is_refused_before_installing(tmp_path):
    with pytest.raises(python_env.SetupError, match="GiB free .* FRAMEWORK_INTERNALS_CACHE"):
        python_env.check_free_space(str(tmp_path), need=1 << 60)


def test_full_disk_during_pip_is_named_as_such():
    output = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    assert python_env.classify_pip_failure(output, "/cache/x").startswith("the disk filled up")


def test_an_environment_that_fails_its_check_is_never_published(tmp_path, monkeypatch):
    # A lock pinning nothing installs fine but cannot import the frameworks: ensure()
    # must fail, remove its scratch folder and leave no environment under the final name.
    monkeypatch.setenv("FRAMEWORK_INTERNALS_CACHE", str(tmp_path))
    lock = tmp_path / "empty.lock"
    lock.write_text("# nothing pinned\n")
    with pytest.raises(python_env.SetupError, match="fails its import check"):
        python_env.ensure(str(lock))
    final = python_env.env_path(lock.read_bytes())
    assert not os.path.exists(final)
    # Only its lock file is left (one per environment, so creating one never waits for another).
    assert os.listdir(os.path.dirname(final)) == [os.path.basename(final) + ".lock"]


def test_an_environment_is_usable_where_it_lies_and_an_unmarked_one_is_redone(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAMEWORK_INTERNALS_CACHE", str(tmp_path))
    lock = tmp_path / "empty.lock"
    lock.write_text("# nothing pinned\n")
    final = python_env.ensure(str(lock), check="import json")
    # Its scripts name its own interpreter (a venv cannot be moved after install;
    # pip writes a /bin/sh trampoline when the path is too long for a #! line).
    with open(os.path.join(final, "bin", "pip")) as f:
        head = f.read(1000)
    assert os.path.join(final, "bin", "python") in head
    # An install interrupted before the marker is written is removed and redone.
    os.remove(os.path.join(final, python_env.COMPLETE_MARKER))
    leftover = os.path.join(final, "leftover")
    open(leftover, "w").close()
    assert python_env.ensure(str(lock), check="import json") == final
    assert os.path.exists(os.path.join(final, python_env.COMPLETE_MARKER))
    assert not os.path.exists(leftover)
