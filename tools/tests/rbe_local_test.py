"""tools/rbe_local.sh status: exit 0 only while BuildGrid runs. A state folder a
killed run left behind once made tools/rbe/check_rbe.sh skip starting a server
and point Bazel at a closed port."""

import subprocess

SCRIPT = "tools/rbe_local.sh"


def status(state):
    return subprocess.run(["bash", SCRIPT, "status"], env={"PATH": "/usr/bin:/bin",
                          "RBE_STATE": str(state)}, capture_output=True, text=True, timeout=60)


def test_no_state_folder_is_not_running(tmp_path):
    run = status(tmp_path / "none")
    assert (run.returncode, run.stdout) == (3, "not running\n")


def test_leftover_state_with_dead_pids_is_not_running(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in ("buildgrid", "worker-1"):
        (tmp_path / (name + ".pid")).write_text("%d\n" % dead.pid)
    run = status(tmp_path)
    assert run.returncode == 3, run.stderr
    assert "buildgrid: not running" in run.stdout and "worker-1: not running" in run.stdout


def test_a_live_server_pid_is_running(tmp_path):
    with subprocess.Popen(["sleep", "60"]) as server:
        try:
            (tmp_path / "buildgrid.pid").write_text("%d\n" % server.pid)
            run = status(tmp_path)
            assert run.returncode == 0, run.stderr
            assert "buildgrid: running (pid %d)" % server.pid in run.stdout
        finally:
            server.kill()
