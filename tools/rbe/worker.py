"""A minimal Remote Workers API bot that executes REAPI actions for BuildGrid.

Why it exists: BuildGrid ships no worker, and its usual ones (buildbox-worker
with buildbox-casd and buildbox-run) are in neither Debian nor PyPI. This is the
smallest bot that executes Bazel's actions correctly, built on BuildGrid's own
protos and CAS client. tools/rbe_local.sh starts it; it runs on BuildGrid's
Python (3.13) environment.

For each lease BuildGrid hands it:
  1. fetch the Action, its Command and its input tree from the CAS, checking
     every blob against its digest: a corrupted blob is never used; the lease
     fails with FAILED_PRECONDITION naming it as missing (the REAPI's way to
     say "upload this again");
  2. stage exactly the declared inputs into a fresh folder, by hard link from
     a local content-addressed cache, so torch's headers cross the wire once
     per worker rather than once per action;
  3. run the command with exactly the Command's environment, in its own
     process group, killed at the action's timeout; where it can (root, or
     unprivileged user namespaces) each action also gets a private mount
     namespace in which $HOME and the --hide folders (the workspace) are
     empty, apart from the executor image's folders (--image-path: the
     Python environment the platform names), so an undeclared read fails;
  4. upload the declared outputs, stdout and stderr, and return the
     ActionResult in the lease.
Actions run one at a time; run several bots for parallelism. While an action
runs the bot keeps its session alive; a bot killed mid-action stops doing so,
and BuildGrid queues the job again once the session expires.
"""

import argparse
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import worker_pb2
from buildgrid._protos.google.rpc import code_pb2, error_details_pb2, status_pb2
from buildgrid.server.client.cas import Downloader, Uploader
from buildgrid.server.client.channel import setup_channel

# Blobs up to this size are fetched in batches; larger ones stream (ByteStream).
BATCH_BYTES = 2 * 1024 * 1024
# How often a busy bot tells BuildGrid it is alive (its keepalive is 15 s).
HEARTBEAT_S = 2.0


class MissingBlobs(Exception):
    """Blobs absent from the CAS, or present but not matching their digest."""

    def __init__(self, digests, why):
        super().__init__("%d blob(s) %s: %s" % (len(digests), why, ", ".join(
            "%s/%d" % (d.hash, d.size_bytes) for d in digests[:3])))
        self.digests = digests


def log(message):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), message))
    sys.stderr.flush()


class BlobCache:
    """Verified blobs on local disk, named by hash; fetches what it lacks."""

    def __init__(self, folder, downloader):
        self.folder = folder
        self.downloader = downloader
        os.makedirs(folder, exist_ok=True)

    def path(self, digest, executable=False):
        return os.path.join(self.folder, digest.hash + (".x" if executable else ""))

    def _store(self, digest, data):
        if hashlib.sha256(data).hexdigest() != digest.hash or len(data) != digest.size_bytes:
            return False
        fd, tmp = tempfile.mkstemp(dir=self.folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o444)
        os.replace(tmp, self.path(digest))
        return True

    def ensure(self, digests):
        """Makes every digest present in the cache; raises MissingBlobs otherwise."""
        wanted = {d.hash: d for d in digests if not os.path.exists(self.path(d))}
        small = [d for d in wanted.values() if d.size_bytes <= BATCH_BYTES]
        large = [d for d in wanted.values() if d.size_bytes > BATCH_BYTES]
        missing, corrupt = [], []
        batch, size = [], 0
        for digest in small + [None]:
            if digest is not None and size + digest.size_bytes <= BATCH_BYTES and len(batch) < 1000:
                batch.append(digest)
                size += digest.size_bytes
                continue
            if batch:
                found = {d.hash: data for data, d in self.downloader.get_available_blobs(batch)}
                for d in batch:
                    if d.hash not in found:
                        missing.append(d)
                    elif not self._store(d, found[d.hash]):
                        corrupt.append(d)
            batch, size = ([digest], digest.size_bytes) if digest is not None else ([], 0)
        for digest in large:
            data = self.downloader.get_blob(digest)
            if data is None:
                missing.append(digest)
            elif not self._store(digest, data):
                corrupt.append(digest)
        if corrupt:
            log("REJECTED %d blob(s) whose content does not match their digest: %s" % (
                len(corrupt), ", ".join(d.hash[:12] for d in corrupt[:5])))
            raise MissingBlobs(corrupt + missing, "do not match their digest")
        if missing:
            raise MissingBlobs(missing, "are missing from the CAS")

    def read(self, digest):
        self.ensure([digest])
        with open(self.path(digest), "rb") as f:
            return f.read()

    def link(self, digest, dest, executable):
        source = self.path(digest, executable)
        if executable and not os.path.exists(source):
            fd, tmp = tempfile.mkstemp(dir=self.folder)
            os.close(fd)
            shutil.copyfile(self.path(digest), tmp)
            os.chmod(tmp, 0o555)
            os.replace(tmp, source)
        os.link(source, dest)


def stage_inputs(cache, root_digest, folder):
    """Materialises the input tree under folder, fetching directories level by level."""
    level = [(root_digest, folder)]
    files = []
    while level:
        cache.ensure([digest for digest, _ in level])
        next_level = []
        for digest, path in level:
            directory = re_pb2.Directory.FromString(cache.read(digest))
            os.makedirs(path, exist_ok=True)
            for node in directory.files:
                files.append((node.digest, os.path.join(path, node.name), node.is_executable))
            for node in directory.symlinks:
                os.symlink(node.target, os.path.join(path, node.name))
            for node in directory.directories:
                next_level.append((node.digest, os.path.join(path, node.name)))
        level = next_level
    cache.ensure([digest for digest, _, _ in files])
    for digest, path, executable in files:
        cache.link(digest, path, executable)
    return len(files)


def isolation_prefix(mode, hide, keep, scratch):
    """The argv prefix that runs a command with hide emptied and keep bound back."""
    if mode == "off" or not shutil.which("unshare"):
        return []
    script = ['set -e']
    for i, path in enumerate(keep):
        script.append('mkdir -p "%s/keep%d" && mount --rbind "%s" "%s/keep%d"' % (scratch, i, path, scratch, i))
    for path in hide:
        script.append('mount -t tmpfs -o size=1m,mode=755 hidden "%s"' % path)
    for i, path in enumerate(keep):
        script.append('mkdir -p "%s" && mount --rbind "%s/keep%d" "%s"' % (path, scratch, i, path))
    script.append('cd "$0" && exec "$@"')
    flags = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        flags.insert(0, "--map-root-user")
    return ["unshare"] + flags + ["/bin/sh", "-c", "; ".join(script)]


def collect_outputs(uploader, workdir, command, result):
    """Uploads the declared outputs that exist, recording them in result."""
    files = list(command.output_files) + list(command.output_paths)
    directories = list(command.output_directories)
    for rel in files + directories:
        path = os.path.join(workdir, rel)
        if os.path.isdir(path):
            tree = uploader.upload_tree(path, queue=True)
            result.output_directories.add(path=rel, tree_digest=tree)
        elif os.path.isfile(path):
            digest = uploader.upload_file(path, queue=True)
            executable = bool(os.stat(path).st_mode & stat.S_IXUSR)
            result.output_files.add(path=rel, digest=digest, is_executable=executable)


class Bot:
    def __init__(self, args):
        self.args = args
        self.channel, _ = setup_channel(args.server)
        self.bots = bots_pb2_grpc.BotsStub(self.channel)
        self.downloader = Downloader(self.channel, instance=args.instance)
        self.uploader = Uploader(self.channel, instance=args.instance)
        self.cache = BlobCache(os.path.join(args.work_dir, "cas"), self.downloader)
        self.done = {}  # lease id -> (status, ActionResult) when finished
        self.running = set()
        self.wake = threading.Event()
        self.stopping = False
        self.hide = [p for p in [os.path.expanduser("~")] + args.hide if os.path.isdir(p)]
        self.keep = [p for p in args.image_path if os.path.isdir(p)]
        work = os.path.realpath(args.work_dir)
        for path in self.hide:
            if args.isolate != "off" and (work + "/").startswith(os.path.realpath(path) + "/"):
                raise SystemExit("error: --work-dir %s lies inside %s, which actions must not see"
                                 % (work, path))
        self.isolate = args.isolate
        if self.isolate == "auto" and not self._isolation_works():
            log("warning: no private mount namespace here (needs root, or unprivileged user "
                "namespaces, and unshare): actions can read $HOME and %s" % ", ".join(args.hide))
            self.isolate = "off"

    def _isolation_works(self):
        scratch = tempfile.mkdtemp(prefix="probe-", dir=self.args.work_dir)
        try:
            prefix = isolation_prefix("auto", self.hide, self.keep, scratch)
            return bool(prefix) and subprocess.call(
                prefix + [scratch, "true"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL) == 0
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def properties(self):
        props = [("OSFamily", "Linux")]
        props += [("python-env", os.path.basename(p.rstrip("/"))) for p in self.args.python_env]
        if shutil.which("nvidia-smi") and subprocess.call(
                ["nvidia-smi", "-L"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
            props.append(("gpu", "nvidia"))
        return [worker_pb2.Device.Property(key=k, value=v) for k, v in props]

    def create_session(self):
        session = bots_pb2.BotSession(
            bot_id=self.args.name, status=bots_pb2.BotStatus.Value("OK"),
            worker=worker_pb2.Worker(devices=[worker_pb2.Device(
                handle=self.args.name, properties=self.properties())]))
        session = self.bots.CreateBotSession(
            bots_pb2.CreateBotSessionRequest(parent=self.args.instance, bot_session=session),
            timeout=10)
        log("bot %s: session %s, properties %s" % (
            self.args.name, session.name,
            ", ".join("%s=%s" % (p.key, p.value) for p in session.worker.devices[0].properties)))
        return session

    def run(self):
        session = self.create_session()
        while not self.stopping:
            for lease in session.leases:
                if lease.id in self.done:
                    status, result = self.done.pop(lease.id)
                    lease.state = bots_pb2.LeaseState.Value("COMPLETED")
                    lease.status.CopyFrom(status)
                    lease.result.Pack(result)
                    self.running.discard(lease.id)
                elif lease.state == bots_pb2.LeaseState.Value("PENDING") or (
                        lease.state == bots_pb2.LeaseState.Value("ACTIVE")
                        and lease.id not in self.running):
                    lease.state = bots_pb2.LeaseState.Value("ACTIVE")
                    self.running.add(lease.id)
                    threading.Thread(target=self.execute, args=(lease.id, lease.payload),
                                     daemon=True).start()
            # Busy: report at least every HEARTBEAT_S, at once when an action ends
            # (the server answers a busy bot at once: bots-long-poll-during-execution
            # is off). Idle: the server holds the call until it has work.
            try:
                session = self.bots.UpdateBotSession(
                    bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                    timeout=10)
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                    log("bot %s: UpdateBotSession %s; retrying" % (self.args.name, e.code().name))
                    time.sleep(1)
                    continue
                # The server closed the session (it missed our keepalive, or was
                # restarted): it has requeued our jobs, so start over.
                log("bot %s: session lost (%s: %s); starting a new one" % (
                    self.args.name, e.code().name, e.details()))
                self.running.clear()
                self.done.clear()
                time.sleep(1)
                session = self.create_session()
                continue
            if self.running:
                self.wake.wait(HEARTBEAT_S)
                self.wake.clear()

    def execute(self, lease_id, payload):
        result = re_pb2.ActionResult()
        try:
            status = self._execute(lease_id, payload, result)
        except MissingBlobs as e:
            failure = error_details_pb2.PreconditionFailure()
            for d in e.digests:
                failure.violations.add(type="MISSING", subject="blobs/%s/%d" % (d.hash, d.size_bytes))
            status = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=str(e))
            status.details.add().Pack(failure)
        except Exception as e:  # an infrastructure fault: BuildGrid retries INTERNAL
            log("lease %s: %s: %s" % (lease_id, type(e).__name__, e))
            status = status_pb2.Status(code=code_pb2.INTERNAL, message="%s: %s" % (type(e).__name__, e))
        self.done[lease_id] = (status, result)
        self.wake.set()

    def _execute(self, lease_id, payload, result):
        action = re_pb2.Action()
        if payload.Is(re_pb2.Action.DESCRIPTOR):
            payload.Unpack(action)
        else:
            digest = re_pb2.Digest()
            payload.Unpack(digest)
            action = re_pb2.Action.FromString(self.cache.read(digest))
        command = re_pb2.Command.FromString(self.cache.read(action.command_digest))
        meta = result.execution_metadata
        meta.worker = self.args.name
        scratch = tempfile.mkdtemp(prefix="action-", dir=self.args.work_dir)
        try:
            meta.input_fetch_start_timestamp.GetCurrentTime()
            root = os.path.join(scratch, "root")
            count = stage_inputs(self.cache, action.input_root_digest, root)
            workdir = os.path.join(root, command.working_directory)
            for rel in list(command.output_files) + list(command.output_paths):
                os.makedirs(os.path.dirname(os.path.join(workdir, rel)), exist_ok=True)
            for rel in command.output_directories:
                os.makedirs(os.path.join(workdir, rel), exist_ok=True)
            meta.input_fetch_completed_timestamp.GetCurrentTime()

            env = {v.name: v.value for v in command.environment_variables}
            timeout = action.timeout.seconds or self.args.default_timeout
            argv = list(command.arguments)
            prefix = isolation_prefix(self.isolate, self.hide, self.keep, scratch)
            outputs = list(command.output_files) + list(command.output_paths)
            log("lease %s: start %s -> %s" % (lease_id, os.path.basename(argv[0]),
                                             outputs[0] if outputs else "-"))
            meta.execution_start_timestamp.GetCurrentTime()
            with open(os.path.join(scratch, "stdout"), "wb") as out, \
                    open(os.path.join(scratch, "stderr"), "wb") as err:
                argv0 = argv[0] if "/" not in argv[0] or os.path.isabs(argv[0]) \
                    else os.path.join(workdir, argv[0])
                proc = subprocess.Popen(prefix + ([workdir] if prefix else []) + [argv0] + argv[1:],
                                        cwd=workdir, env=env, stdout=out, stderr=err,
                                        start_new_session=True)
                try:
                    result.exit_code = proc.wait(timeout=timeout)
                    status = status_pb2.Status(code=code_pb2.OK)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    result.exit_code = proc.wait()
                    status = status_pb2.Status(code=code_pb2.DEADLINE_EXCEEDED,
                                               message="action timed out after %d s" % timeout)
            meta.execution_completed_timestamp.GetCurrentTime()
            meta.output_upload_start_timestamp.GetCurrentTime()
            collect_outputs(self.uploader, workdir, command, result)
            result.stdout_digest.CopyFrom(self.uploader.upload_file(os.path.join(scratch, "stdout"), queue=True))
            result.stderr_digest.CopyFrom(self.uploader.upload_file(os.path.join(scratch, "stderr"), queue=True))
            self.uploader.flush()
            meta.output_upload_completed_timestamp.GetCurrentTime()
            log("lease %s: done, %d inputs, exit %d in %.1f s" % (
                lease_id, count, result.exit_code,
                meta.execution_completed_timestamp.ToNanoseconds() / 1e9
                - meta.execution_start_timestamp.ToNanoseconds() / 1e9))
            return status
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="http://127.0.0.1:50051", help="BuildGrid's address")
    parser.add_argument("--instance", default="main", help="the REAPI instance name")
    parser.add_argument("--name", default="bot-%s" % uuid.uuid4().hex[:8], help="this bot's id")
    parser.add_argument("--work-dir", required=True,
                        help="folder for the blob cache and the actions' scratch folders")
    parser.add_argument("--python-env", action="append", default=[],
                        help="a Python environment this executor provides; offered to the "
                             "scheduler as the property python-env=<its folder's name>")
    parser.add_argument("--image-path", action="append", default=[],
                        help="a folder of the executor image that stays visible to actions "
                             "inside the hidden ones")
    parser.add_argument("--hide", action="append", default=[],
                        help="a folder actions must not see (besides $HOME), e.g. the workspace")
    parser.add_argument("--isolate", choices=["auto", "off"], default="auto",
                        help="auto: private mount namespace per action where unshare works")
    parser.add_argument("--default-timeout", type=int, default=900,
                        help="seconds an action may run when it sets no timeout")
    args = parser.parse_args(argv)
    bot = Bot(args)

    def stop(signum, frame):
        bot.stopping = True
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    bot.run()


if __name__ == "__main__":
    main()
