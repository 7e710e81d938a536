"""tools/lib.sh, the helpers the tools/ scripts source: messages and exit codes,
exit handlers that run in reverse order whatever happens, and stop_pid."""

import os
import subprocess

import pytest

LIB = os.path.abspath("tools/lib.sh")


def bash(script, tmp_path):
    """Runs script after sourcing lib.sh as a script named "demo" would."""
    return subprocess.run(
        ["bash", "-c", 'set -euo pipefail; LIB_NAME=demo; source "$0"; ' + script, LIB],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_say_die_fail_abort(tmp_path):
    run = bash('say hello; fail one; fail two; echo "failures $FAILURES"; die "no tool"',
               tmp_path)
    assert run.returncode == 2
    assert run.stdout == "failures 2\n"
    assert run.stderr == "demo: hello\ndemo: FAILED: one\ndemo: FAILED: two\ndemo: error: no tool\n"
    run = bash('abort "it broke"; echo unreachable', tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (1, "", "demo: FAILED: it broke\n")


@pytest.mark.parametrize("ending, status", [("true", 0), ("exit 3", 3), ("false", 1),
                                            ("die x", 2)])
def test_on_exit_runs_last_in_first_out_and_keeps_the_status(tmp_path, ending, status):
    odd = "a b 'c' $(touch pwned) `touch pwned2`"
    run = bash('on_exit echo first "%s"; on_exit false; on_exit echo second; %s'
               % (odd.replace('"', '\\"').replace("$", "\\$").replace("`", "\\`"), ending),
               tmp_path)
    assert run.returncode == status
    assert run.stdout == "second\nfirst %s\n" % odd
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_make_work_dir_is_removed_at_exit(tmp_path):
    run = bash('make_work_dir demo-test; touch "$WORK/file"; echo "$WORK"',
               tmp_path)
    work = run.stdout.strip()
    assert run.returncode == 0 and os.path.basename(work).startswith("demo-test.")
    assert not os.path.exists(work)


def test_stop_pid_kills_what_ignores_sigterm(tmp_path):
    run = bash('(trap "" TERM; exec sleep 60) & pid=$!; echo $pid > pidfile; sleep 0.5; '
               'pid_alive pidfile && echo alive; stop_pid pidfile; '
               '[ -f pidfile ] || echo removed; wait $pid || echo "status $?"', tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "alive\nremoved\nstatus 137\n"  # 128 + SIGKILL


def test_host_cuda_dirs_lists_each_toolkit_once_resolved(tmp_path):
    local = tmp_path / "local"
    (local / "cuda-12.4").mkdir(parents=True)
    (local / "cuda-13.0").mkdir()
    (local / "cuda").symlink_to(local / "cuda-13.0")
    (local / "cuda-notes.txt").write_text("not a toolkit")
    run = bash('host_cuda_dirs "%s"' % local, tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [str(local / "cuda-12.4"), str(local / "cuda-13.0")]
    run = bash('host_cuda_dirs "%s"' % (tmp_path / "none"), tmp_path)
    assert (run.returncode, run.stdout) == (0, "")
