"""Where an action's command runs: its own process group, killed at its timeout,
and where it can (root, or unprivileged user namespaces, and unshare) a private
mount namespace in which the hidden folders ($HOME, the workspace) are empty
apart from the executor image's folders, bound back in, so an undeclared read
fails.

Every path reaches `sh -c` through shlex.quote: a folder named with quotes,
spaces, $(...), backticks or newlines is one argument, never shell code.
"""

import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile

log = logging.getLogger("worker")


def isolation_script(hide, keep, scratch):
    """The sh script that empties every hide folder and binds every keep folder
    back; run as `sh -c SCRIPT WORKDIR ARGV...` it then runs ARGV in WORKDIR."""
    q = shlex.quote
    stash = [os.path.join(scratch, "keep%d" % i) for i in range(len(keep))]
    script = ["set -e"]
    for path, saved in zip(keep, stash):
        script.append("mkdir -p %s && mount --rbind %s %s" % (q(saved), q(path), q(saved)))
    for path in hide:
        script.append("mount -t tmpfs -o size=1m,mode=755 hidden %s" % q(path))
    for path, saved in zip(keep, stash):
        script.append("mkdir -p %s && mount --rbind %s %s" % (q(path), q(saved), q(path)))
    script.append('cd "$0" && exec "$@"')
    return "; ".join(script)


def isolation_prefix(hide, keep, scratch):
    """The argv prefix that runs a command in a private mount namespace with
    hide emptied and keep bound back; followed by the working folder and argv."""
    flags = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        flags.insert(0, "--map-root-user")
    return ["unshare"] + flags + ["/bin/sh", "-c", isolation_script(hide, keep, scratch)]


class Sandbox:
    """Runs commands, isolated when mode is "auto" and this machine allows it."""

    def __init__(self, mode, hide, keep, work_dir):
        self.hide = [p for p in hide if os.path.isdir(p)]
        self.keep = [p for p in keep if os.path.isdir(p)]
        self.work_dir = work_dir
        work = os.path.realpath(work_dir)
        for path in self.hide:
            if mode != "off" and (work + "/").startswith(os.path.realpath(path) + "/"):
                raise SystemExit("error: --work-dir %s lies inside %s, which actions must not see"
                                 % (work, path))
        self.isolated = mode == "auto" and self._isolation_works()
        if mode == "auto" and not self.isolated:
            log.warning("warning: no private mount namespace here (needs root, or unprivileged "
                        "user namespaces, and unshare): actions can read %s", ", ".join(hide))

    def _isolation_works(self):
        if not shutil.which("unshare"):
            return False
        scratch = tempfile.mkdtemp(prefix="probe-", dir=self.work_dir)
        try:
            return subprocess.call(
                isolation_prefix(self.hide, self.keep, scratch) + [scratch, "true"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def argv(self, command, workdir, scratch):
        """The full argv that runs command (an action's arguments) in workdir;
        scratch holds the sandbox's own mount points."""
        first = command[0]
        if "/" in first and not os.path.isabs(first):  # relative to the working folder
            command = [os.path.join(workdir, first)] + list(command[1:])
        if not self.isolated:
            return list(command)
        return isolation_prefix(self.hide, self.keep, scratch) + [workdir] + list(command)

    def run(self, command, workdir, scratch, env, timeout, stdout, stderr):
        """Runs command to its end or its timeout; returns (exit code, timed out)."""
        proc = subprocess.Popen(self.argv(command, workdir, scratch), cwd=workdir, env=env,
                                stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return proc.wait(), True
