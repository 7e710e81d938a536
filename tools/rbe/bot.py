"""The Remote Workers API session: a bot offers its properties, takes the leases
BuildGrid hands it, runs each in a thread and reports it when done.

Actions run one at a time; run several bots for parallelism. While an action
runs the bot keeps its session alive; a bot killed mid-action stops doing so,
and BuildGrid queues the job again once the session expires.
"""

import logging
import shutil
import subprocess
import threading
import time

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2, bots_pb2_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import worker_pb2
from buildgrid._protos.google.rpc import code_pb2, error_details_pb2, status_pb2

import properties
from blob_cache import MissingBlobs

log = logging.getLogger("worker")

# How often a busy bot tells BuildGrid it is alive (its keepalive is 15 s).
HEARTBEAT_S = 2.0
LEASE = bots_pb2.LeaseState


def has_gpu():
    return bool(shutil.which("nvidia-smi")) and subprocess.call(
        ["nvidia-smi", "-L"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0


def failure_status(error):
    """The lease status for an action that raised error."""
    if isinstance(error, MissingBlobs):  # the REAPI's "upload these again"
        failure = error_details_pb2.PreconditionFailure()
        for d in error.digests:
            failure.violations.add(type="MISSING", subject="blobs/%s/%d" % (d.hash, d.size_bytes))
        status = status_pb2.Status(code=code_pb2.FAILED_PRECONDITION, message=str(error))
        status.details.add().Pack(failure)
        return status
    # An infrastructure fault: BuildGrid retries INTERNAL.
    return status_pb2.Status(code=code_pb2.INTERNAL,
                             message="%s: %s" % (type(error).__name__, error))


class Bot:
    """One bot session on stub (a BotsStub), executing leases with executor."""

    def __init__(self, name, instance, stub, executor, python_envs):
        self.name = name
        self.instance = instance
        self.bots = stub
        self.executor = executor
        self.offer = properties.offer(python_envs, has_gpu())
        self.done = {}  # lease id -> (status, ActionResult) when finished
        self.running = set()
        self.wake = threading.Event()

    def create_session(self):
        device = worker_pb2.Device(handle=self.name, properties=[
            worker_pb2.Device.Property(key=k, value=v) for k, v in self.offer])
        session = bots_pb2.BotSession(bot_id=self.name, status=bots_pb2.BotStatus.Value("OK"),
                                      worker=worker_pb2.Worker(devices=[device]))
        session = self.bots.CreateBotSession(
            bots_pb2.CreateBotSessionRequest(parent=self.instance, bot_session=session),
            timeout=10)
        log.info("bot %s: session %s, properties %s", self.name, session.name, ", ".join(
            "%s=%s" % (p.key, p.value) for p in session.worker.devices[0].properties))
        return session

    def update_leases(self, session):
        """Marks finished leases COMPLETED and starts the new ones."""
        for lease in session.leases:
            if lease.id in self.done:
                status, result = self.done.pop(lease.id)
                lease.state = LEASE.Value("COMPLETED")
                lease.status.CopyFrom(status)
                lease.result.Pack(result)
                self.running.discard(lease.id)
            elif lease.state == LEASE.Value("PENDING") or (
                    lease.state == LEASE.Value("ACTIVE") and lease.id not in self.running):
                lease.state = LEASE.Value("ACTIVE")
                self.running.add(lease.id)
                threading.Thread(target=self.execute, args=(lease.id, lease.payload),
                                 daemon=True).start()

    def update_session(self, session):
        """Reports the session; returns the server's answer, a new session when
        the server dropped ours, or None to retry."""
        try:
            return self.bots.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session),
                timeout=10)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                log.warning("bot %s: UpdateBotSession %s; retrying", self.name, e.code().name)
                time.sleep(1)
                return None
            # The server closed the session (it missed our keepalive, or was
            # restarted): it has requeued our jobs, so start over.
            log.warning("bot %s: session lost (%s: %s); starting a new one",
                        self.name, e.code().name, e.details())
            self.running.clear()
            self.done.clear()
            time.sleep(1)
            return self.create_session()

    def run(self):
        """Serves leases until the process ends."""
        session = self.create_session()
        while True:
            self.update_leases(session)
            # Busy: report at least every HEARTBEAT_S, at once when an action ends
            # (the server answers a busy bot at once: bots-long-poll-during-execution
            # is off). Idle: the server holds the call until it has work.
            answer = self.update_session(session)
            if answer is None:
                continue
            session = answer
            if self.running:
                self.wake.wait(HEARTBEAT_S)
                self.wake.clear()

    def execute(self, lease_id, payload):
        result = re_pb2.ActionResult()
        try:
            status = self.executor.execute(lease_id, payload, result)
        except Exception as e:  # reported in the lease, never lost with the thread
            if not isinstance(e, MissingBlobs):
                log.error("lease %s: %s: %s", lease_id, type(e).__name__, e)
            status = failure_status(e)
        self.done[lease_id] = (status, result)
        self.wake.set()
