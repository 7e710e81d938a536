"""One REAPI action, from its digest to its ActionResult:
  1. fetch the Action, its Command and its input tree through the blob cache
     (every blob checked against its digest);
  2. stage exactly the declared inputs into a fresh folder, by hard link;
  3. run the command in the sandbox with exactly the Command's environment,
     killed at the action's timeout;
  4. upload the declared outputs, stdout and stderr.
"""

import logging
import os
import shutil
import stat
import tempfile

from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.google.rpc import code_pb2, status_pb2

log = logging.getLogger("worker")


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


def output_files(command):
    return list(command.output_files) + list(command.output_paths)


def collect_outputs(uploader, workdir, command, result):
    """Uploads the declared outputs that exist, recording them in result."""
    for rel in output_files(command) + list(command.output_directories):
        path = os.path.join(workdir, rel)
        if os.path.isdir(path):
            tree = uploader.upload_tree(path, queue=True)
            result.output_directories.add(path=rel, tree_digest=tree)
        elif os.path.isfile(path):
            digest = uploader.upload_file(path, queue=True)
            executable = bool(os.stat(path).st_mode & stat.S_IXUSR)
            result.output_files.add(path=rel, digest=digest, is_executable=executable)


class Executor:
    """Executes actions for the bot named name, one scratch folder each."""

    def __init__(self, name, cache, uploader, sandbox, work_dir, default_timeout):
        self.name = name
        self.cache = cache
        self.uploader = uploader
        self.sandbox = sandbox
        self.work_dir = work_dir
        self.default_timeout = default_timeout

    def load(self, payload):
        """The lease's Action (sent whole, or as its digest) and its Command."""
        action = re_pb2.Action()
        if payload.Is(re_pb2.Action.DESCRIPTOR):
            payload.Unpack(action)
        else:
            digest = re_pb2.Digest()
            payload.Unpack(digest)
            action = re_pb2.Action.FromString(self.cache.read(digest))
        return action, re_pb2.Command.FromString(self.cache.read(action.command_digest))

    def stage(self, action, command, root):
        """Stages the inputs and the outputs' folders; returns (workdir, input count)."""
        count = stage_inputs(self.cache, action.input_root_digest, root)
        workdir = os.path.join(root, command.working_directory)
        for rel in output_files(command):
            os.makedirs(os.path.dirname(os.path.join(workdir, rel)), exist_ok=True)
        for rel in command.output_directories:
            os.makedirs(os.path.join(workdir, rel), exist_ok=True)
        return workdir, count

    def run(self, action, command, workdir, scratch, result):
        """Runs the command; its stdout and stderr go to files in scratch."""
        env = {v.name: v.value for v in command.environment_variables}
        timeout = action.timeout.seconds or self.default_timeout
        with open(os.path.join(scratch, "stdout"), "wb") as out, \
                open(os.path.join(scratch, "stderr"), "wb") as err:
            result.exit_code, timed_out = self.sandbox.run(
                list(command.arguments), workdir, scratch, env, timeout, out, err)
        if timed_out:
            return status_pb2.Status(code=code_pb2.DEADLINE_EXCEEDED,
                                     message="action timed out after %d s" % timeout)
        return status_pb2.Status(code=code_pb2.OK)

    def upload(self, command, workdir, scratch, result):
        collect_outputs(self.uploader, workdir, command, result)
        for stream, digest in (("stdout", result.stdout_digest), ("stderr", result.stderr_digest)):
            digest.CopyFrom(self.uploader.upload_file(os.path.join(scratch, stream), queue=True))
        self.uploader.flush()

    def execute(self, lease_id, payload, result):
        """Executes the lease's action into result; returns the lease's status."""
        action, command = self.load(payload)
        meta = result.execution_metadata
        meta.worker = self.name
        scratch = tempfile.mkdtemp(prefix="action-", dir=self.work_dir)
        try:
            meta.input_fetch_start_timestamp.GetCurrentTime()
            workdir, count = self.stage(action, command, os.path.join(scratch, "root"))
            meta.input_fetch_completed_timestamp.GetCurrentTime()
            outputs = output_files(command)
            log.info("lease %s: start %s -> %s", lease_id, os.path.basename(command.arguments[0]),
                     outputs[0] if outputs else "-")
            meta.execution_start_timestamp.GetCurrentTime()
            status = self.run(action, command, workdir, scratch, result)
            meta.execution_completed_timestamp.GetCurrentTime()
            meta.output_upload_start_timestamp.GetCurrentTime()
            self.upload(command, workdir, scratch, result)
            meta.output_upload_completed_timestamp.GetCurrentTime()
            seconds = (meta.execution_completed_timestamp.ToNanoseconds()
                       - meta.execution_start_timestamp.ToNanoseconds()) / 1e9
            log.info("lease %s: done, %d inputs, exit %d in %.1f s",
                     lease_id, count, result.exit_code, seconds)
            return status
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
