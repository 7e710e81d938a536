"""tools/rbe/sandbox.py: hostile paths stay single arguments of `sh -c`, for the
script alone (a stand-in `mount` records what it gets) and for real in a private
mount namespace; commands are killed at their timeout with their children."""

import ast
import json
import os
import subprocess
import sys
import time

import pytest

import sandbox

# Quotes, spaces, command substitution, backticks, a newline, a glob, ; and &&:
# each would break the script or run as shell code if a path reached sh unquoted.
HOSTILE = "it's a \"dir\" $(touch pwned) `touch pwned2` ;x&&y\nnew line *"


def hostile_tree(tmp_path):
    """hide, keep (inside hide), scratch and workdir, all named HOSTILE."""
    hide = tmp_path / ("hide " + HOSTILE)
    keep = hide / ("keep " + HOSTILE)
    scratch = tmp_path / ("scratch " + HOSTILE)
    workdir = tmp_path / ("work " + HOSTILE)
    for folder in (keep, scratch, workdir):
        folder.mkdir(parents=True)
    (hide / "secret").write_text("undeclared")
    (keep / "visible").write_text("image")
    return str(hide), str(keep), str(scratch), str(workdir)


def assert_no_code_ran(tmp_path):
    # The shell's working folder while it parses the script is tmp_path.
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_script_passes_hostile_paths_as_single_arguments(tmp_path):
    hide, keep, scratch, workdir = hostile_tree(tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "mount-calls"
    (fake / "mount").write_text("#!%s\nimport sys\nwith open(%r, 'a') as f: f.write(repr(sys.argv[1:]) + '\\n')\n"
                                % (sys.executable, str(calls)))
    (fake / "mount").chmod(0o755)
    report = str(tmp_path / "cwd")
    script = sandbox.isolation_script([hide], [keep], scratch)
    subprocess.run(["/bin/sh", "-c", script, workdir, sys.executable, "-c",
                    "import os, sys; open(sys.argv[1], 'w').write(os.getcwd())", report],
                   cwd=tmp_path, check=True,
                   env={"PATH": "%s:%s" % (fake, os.environ.get("PATH", "/usr/bin:/bin"))})
    stash = os.path.join(scratch, "keep0")
    assert [ast.literal_eval(line) for line in calls.read_text().splitlines()] == [
        ["--rbind", keep, stash],
        ["-t", "tmpfs", "-o", "size=1m,mode=755", "hidden", hide],
        ["--rbind", stash, keep],
    ]
    assert os.path.isdir(stash)  # mkdir got the hostile scratch path whole
    assert open(report).read() == workdir  # cd "$0" and exec "$@" kept theirs
    assert_no_code_ran(tmp_path)


def test_real_namespace_hides_and_keeps_hostile_paths(tmp_path):
    hide, keep, scratch, workdir = hostile_tree(tmp_path)
    (tmp_path / "bot").mkdir()
    if not sandbox.Sandbox("auto", [], [], str(tmp_path / "bot")).isolated:
        pytest.skip("no private mount namespace here (needs root or user namespaces, and unshare)")
    box = sandbox.Sandbox("auto", [hide], [keep], str(tmp_path / "bot"))
    assert box.isolated  # its probe ran the hostile script too
    probe = ("import json, os, sys; print(json.dumps({'hide': os.listdir(sys.argv[1]), "
             "'keep': open(os.path.join(sys.argv[2], 'visible')).read(), 'cwd': os.getcwd()}))")
    out = tmp_path / "out"
    with open(out, "wb") as stdout, open(tmp_path / "err", "wb") as stderr:
        code, timed_out = box.run([sys.executable, "-c", probe, hide, keep], workdir, scratch,
                                  dict(os.environ), 60, stdout, stderr)
    assert (code, timed_out) == (0, False), (tmp_path / "err").read_text()
    seen = json.loads(out.read_text())
    assert seen == {"hide": [os.path.basename(keep)], "keep": "image", "cwd": workdir}
    assert os.path.exists(os.path.join(hide, "secret"))  # outside, nothing changed
    assert_no_code_ran(tmp_path)


def test_off_runs_relative_commands_from_the_working_folder(tmp_path):
    workdir = tmp_path / HOSTILE
    (workdir / "bin").mkdir(parents=True)
    tool = workdir / "bin" / "tool.sh"
    tool.write_text("#!/bin/sh\necho \"$PWD:$1\"\n")
    tool.chmod(0o755)
    out = tmp_path / "out"
    box = sandbox.Sandbox("off", [], [], str(tmp_path))
    with open(out, "wb") as stdout:
        assert box.run(["bin/tool.sh", "a b"], str(workdir), str(tmp_path), {}, 60,
                       stdout, subprocess.DEVNULL) == (0, False)
    assert out.read_text() == "%s:a b\n" % workdir


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child"
    box = sandbox.Sandbox("off", [], [], str(tmp_path))
    start = time.monotonic()
    code, timed_out = box.run(["/bin/sh", "-c", 'sleep 60 & echo $! > "$0"; wait', str(pidfile)],
                              str(tmp_path), str(tmp_path), {}, 1,
                              subprocess.DEVNULL, subprocess.DEVNULL)
    assert timed_out and code == -9 and time.monotonic() - start < 30
    child = int(pidfile.read_text())
    for _ in range(50):  # the background sleep dies with its group
        if not os.path.exists("/proc/%d" % child) or "Z" in open("/proc/%d/stat" % child).read().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the action's child %d outlived the timeout" % child)


def test_work_dir_inside_a_hidden_folder_is_refused(tmp_path):
    (tmp_path / "bot").mkdir()
    with pytest.raises(SystemExit, match="actions must not see"):
        sandbox.Sandbox("auto", [str(tmp_path)], [], str(tmp_path / "bot"))
