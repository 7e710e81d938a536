"""A minimal Remote Workers API bot that executes REAPI actions for BuildGrid.

Why it exists: BuildGrid ships no worker, and its usual ones (buildbox-worker
with buildbox-casd and buildbox-run) are in neither Debian nor PyPI. This is the
smallest bot that executes Bazel's actions correctly, built on BuildGrid's own
protos and CAS client. tools/rbe_local.sh starts it; it runs on BuildGrid's
Python (3.13) environment. Its parts, one file each:
  bot.py         the Remote Workers API session and its leases;
  action.py      one action: fetch, stage the inputs, run, upload the outputs;
  blob_cache.py  the local content-addressed store every blob is checked into;
  sandbox.py     the process group and private mount namespace actions run in;
  properties.py  the execution properties the bot offers (properties.bzl).
"""

import argparse
import logging
import os
import uuid

from buildgrid.server.client.cas import Downloader, Uploader
from buildgrid.server.client.channel import setup_channel
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2_grpc

from action import Executor
from blob_cache import BlobCache
from bot import Bot
from sandbox import Sandbox


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="http://127.0.0.1:50051", help="BuildGrid's address")
    parser.add_argument("--instance", default="main", help="the REAPI instance name")
    parser.add_argument("--name", default="bot-%s" % uuid.uuid4().hex[:8], help="this bot's id")
    parser.add_argument("--work-dir", required=True,
                        help="folder for the blob cache and the actions' scratch folders")
    parser.add_argument("--python-env", action="append", default=[],
                        help="a Python environment this executor provides; offered to the "
                             "scheduler under properties.bzl's PYTHON_ENV_KEY as its folder's name")
    parser.add_argument("--image-path", action="append", default=[],
                        help="a folder of the executor image that stays visible to actions "
                             "inside the hidden ones")
    parser.add_argument("--hide", action="append", default=[],
                        help="a folder actions must not see (besides $HOME), e.g. the workspace")
    parser.add_argument("--isolate", choices=["auto", "off"], default="auto",
                        help="auto: private mount namespace per action where unshare works")
    parser.add_argument("--default-timeout", type=int, default=900,
                        help="seconds an action may run when it sets no timeout")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    handler = logging.StreamHandler()  # stderr, which tools/rbe_local.sh logs
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    log = logging.getLogger("worker")  # the bot's own lines only, not BuildGrid's
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    channel, _ = setup_channel(args.server)
    sandbox = Sandbox(args.isolate, [os.path.expanduser("~")] + args.hide, args.image_path,
                      args.work_dir)
    cache = BlobCache(os.path.join(args.work_dir, "cas"),
                      Downloader(channel, instance=args.instance))
    executor = Executor(args.name, cache, Uploader(channel, instance=args.instance), sandbox,
                        args.work_dir, args.default_timeout)
    Bot(args.name, args.instance, bots_pb2_grpc.BotsStub(channel), executor,
        args.python_env).run()


if __name__ == "__main__":
    main()
