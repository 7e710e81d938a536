"""Creates the workspace's pinned Python environment, once per lock-file content.

    python3.12 tools/python_env.py ensure   # create if needed; print the env's path
    python3.12 tools/python_env.py path     # print the path it would use
    python3.13 tools/python_env.py ensure --lock tools/rbe/requirements.lock \
        --python-version 3.13 --check buildgrid   # the loopback RBE server's env

The environment is a venv under $FRAMEWORK_INTERNALS_CACHE (default
~/.cache/framework-internals), named for a digest of requirements.lock and the
base interpreter, so every clone on a machine, and CI, shares it, and an edited
lock gets a new one. It is installed in place (a venv's scripts name their
interpreter by absolute path, so it cannot be moved afterwards) and marked
complete last: an interrupted install is never used, and is redone. Concurrent
callers serialise on a file lock.

Only the standard library is used: this runs on the base interpreter, before
the environment exists. Every failure the user can fix ends in one line saying
what to do (exit status 2).
"""

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig

# requirements.lock is one universal lock for these (environment markers).
SUPPORTED_PYTHONS = ((3, 11), (3, 12))
# CUDA torch + its CUDA libraries + TensorFlow + transformers come to about
# 8 GB installed (README); leave headroom for pip's temporary unpacking.
MIN_FREE_BYTES = 12 * 1024**3
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_FILE = os.path.join(ROOT, "requirements.lock")


class SetupError(Exception):
    """A problem the user can fix; its message is one line saying how."""


def cache_root():
    explicit = os.environ.get("FRAMEWORK_INTERNALS_CACHE")
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "framework-internals")


def check_python(version_info=sys.version_info, executable=sys.executable,
                 supported=SUPPORTED_PYTHONS):
    have = tuple(version_info[:2])
    names = " or ".join("%d.%d" % v for v in supported)
    if have not in [tuple(v) for v in supported]:
        last = "python%d.%d" % tuple(supported[-1])
        raise SetupError(
            "Python %s is required, but %s is Python %d.%d: install %s or point PYTHON at "
            "one (PYTHON=/path/to/%s ./bazelw ...)" % ((names, executable) + have + (last, last)))
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        raise SetupError(
            "Python.h is missing for %s: install the headers (Debian/Ubuntu: apt-get install "
            "python%d.%d-dev python%d.%d-venv)" % ((executable,) + have * 2))


_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(==|===)\s*\S+")


def check_lock(text, name="requirements.lock"):
    """Every requirement must be pinned with == and carry at least one --hash."""
    # Join backslash continuations so each requirement is one logical line.
    logical = re.sub(r"\\\n", " ", text).splitlines()
    unpinned, unhashed = [], []
    for line in logical:
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#") or line.startswith("-"):
            continue
        match = _REQUIREMENT.match(line)
        if not match:
            unpinned.append(line.split()[0])
        elif "--hash=" not in line:
            unhashed.append(match.group(1))
    if unpinned or unhashed:
        problems = []
        if unpinned:
            problems.append("not pinned with ==: " + ", ".join(unpinned))
        if unhashed:
            problems.append("without --hash: " + ", ".join(unhashed))
        raise SetupError(
            "%s has requirements %s; edit requirements.in instead and regenerate the lock "
            "with tools/update_lock.sh" % (name, "; ".join(problems)))


def env_path(lock_bytes):
    key = hashlib.sha256()
    key.update(lock_bytes)
    key.update(os.path.realpath(sys.executable).encode())
    key.update(sys.version.encode())
    tag = "py%d%d" % sys.version_info[:2]
    return os.path.join(cache_root(), "python-env", "%s-%s" % (tag, key.hexdigest()[:16]))


def check_free_space(folder, need=MIN_FREE_BYTES):
    free = shutil.disk_usage(folder).free
    if free < need:
        raise SetupError(
            "only %.1f GiB free in %s, and the Python environment needs about %.0f GiB: free "
            "some space or set FRAMEWORK_INTERNALS_CACHE to a folder on a larger disk"
            % (free / 1024**3, folder, need / 1024**3))


def classify_pip_failure(output, folder):
    """Turns pip's output into one actionable line."""
    if "No space left on device" in output or "[Errno 28]" in output:
        return ("the disk filled up while installing the Python environment into %s: free some "
                "space or set FRAMEWORK_INTERNALS_CACHE to a folder on a larger disk" % folder)
    if "THESE PACKAGES DO NOT MATCH THE HASHES" in output:
        return ("a downloaded package does not match its hash in requirements.lock: the lock or "
                "the package index was tampered with; regenerate with tools/update_lock.sh")
    if "Hashes are required" in output or "--require-hashes" in output:
        return ("requirements.lock is missing hashes: regenerate it with tools/update_lock.sh")
    if re.search(r"(Could not find a version|No matching distribution)", output):
        return ("a pinned package is not available from the configured index (see the pip "
                "output above); check network access to PyPI")
    return "pip failed while creating the Python environment (see its output above)"


def _run_streamed(cmd, env=None):
    """Runs cmd, echoing its output to stderr as it comes; returns (status, output)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, env=env)
    lines = []
    for line in proc.stdout:
        sys.stderr.write("  " + line)
        lines.append(line)
    return proc.wait(), "".join(lines)


FRAMEWORKS_CHECK = (
    "import numpy, torch, tensorflow, pybind11, pytest; "
    "print('torch', torch.__version__, '(CUDA %s)' % torch.version.cuda, "
    "'| tensorflow', tensorflow.__version__, "
    "'| numpy', numpy.__version__)")


def _install(target, lock_file, check):
    status, output = _run_streamed([sys.executable, "-m", "venv", target])
    if status != 0:
        if "ensurepip" in output:
            raise SetupError("%s cannot create virtual environments: install python%d.%d-venv"
                             % ((sys.executable,) + tuple(sys.version_info[:2])))
        raise SetupError(classify_pip_failure(output, target))
    python = os.path.join(target, "bin", "python")
    status, output = _run_streamed([
        # --no-deps: the lock lists every dependency already, and leaves out on
        # purpose what tools/update_lock.sh overrides (torch's triton).
        python, "-m", "pip", "install", "--require-hashes", "--no-deps", "--progress-bar", "off",
        "--disable-pip-version-check", "--no-warn-script-location", "-r", lock_file])
    if status != 0:
        raise SetupError(classify_pip_failure(output, target))
    # A broken environment would be cached forever: prove it imports before publishing it.
    status, output = _run_streamed([python, "-c", check],
                                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if status != 0:
        raise SetupError("the new Python environment fails its import check (see above); "
                         "report this with the output")


COMPLETE_MARKER = ".complete"


def ensure(lock_file=LOCK_FILE, supported=SUPPORTED_PYTHONS, check=FRAMEWORKS_CHECK):
    check_python(supported=supported)
    with open(lock_file, "rb") as f:
        lock_bytes = f.read()
    check_lock(lock_bytes.decode("utf-8"), os.path.basename(lock_file))
    final = env_path(lock_bytes)
    marker = os.path.join(final, COMPLETE_MARKER)
    if os.path.exists(marker):
        return final
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    # One lock per environment: creating one never waits for another lock's.
    with open(final + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(marker):  # another process finished it while we waited
            return final
        # Under the lock, an unmarked folder is left from an interrupted install.
        shutil.rmtree(final, ignore_errors=True)
        check_free_space(parent)
        sys.stderr.write("Creating the Python environment %s from %s (once per lock file)\n"
                         % (final, os.path.basename(lock_file)))
        try:
            _install(final, lock_file, check)
        except BaseException:
            shutil.rmtree(final, ignore_errors=True)
            raise
        with open(marker, "w") as f:
            f.write(os.path.basename(lock_file) + "\n")
        sys.stderr.write("Python environment ready: %s\n" % final)
    return final


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["ensure", "path"],
                        help="ensure: create the environment if needed and print its path; "
                             "path: print the path without creating anything")
    parser.add_argument("--lock", default=LOCK_FILE, help="the lock file (default: %(default)s)")
    parser.add_argument("--python-version", action="append",
                        help="a Python the lock is for; repeatable (default: %s)"
                        % ", ".join("%d.%d" % v for v in SUPPORTED_PYTHONS))
    parser.add_argument("--check", metavar="MODULES",
                        help="comma-separated modules the new environment must import "
                             "(default: the workspace's frameworks)")
    args = parser.parse_args(argv)
    supported = tuple(tuple(int(part) for part in v.split("."))
                      for v in args.python_version) if args.python_version else SUPPORTED_PYTHONS
    check = ("import " + args.check) if args.check else FRAMEWORKS_CHECK
    try:
        if args.command == "path":
            check_python(supported=supported)
            with open(args.lock, "rb") as f:
                print(env_path(f.read()))
        else:
            print(ensure(args.lock, supported, check))
    except SetupError as e:
        sys.stderr.write("error: %s\n" % e)
        return 2
    except OSError as e:
        if e.errno == 28:
            sys.stderr.write("error: %s\n" % classify_pip_failure("[Errno 28]", cache_root()))
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
