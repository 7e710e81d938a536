# Helpers the shell scripts in tools/ share (bash); each script names itself
# for the messages, then sources this file:
#
#   LIB_NAME="rbe check"
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
#
#   say MESSAGE...           "NAME: MESSAGE" on stderr (stdout stays for results)
#   die MESSAGE...           says "error: MESSAGE", exits 2 (bad usage, a missing tool)
#   fail MESSAGE...          says "FAILED: MESSAGE", counts it in FAILURES, goes on
#   abort MESSAGE...         says "FAILED: MESSAGE", exits 1
#   on_exit COMMAND [ARG...] runs COMMAND ARG... when the script exits, before the
#                            commands registered earlier (last in, first out, so a
#                            folder outlives what uses it); a failing one neither
#                            stops the others nor changes the script's exit status
#   make_work_dir PREFIX     sets WORK to a new temp folder, removed at exit
#   stop_bazel_servers DIR   stops the Bazel server of each output base in DIR
#   pid_alive PIDFILE        whether the process PIDFILE names runs
#   stop_pid PIDFILE         SIGTERM, SIGKILL after 5 s; removes PIDFILE
#
# LIB_ROOT is the workspace's root.

LIB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FAILURES=0
_LIB_ON_EXIT=()

say() { echo "${LIB_NAME:-$(basename "$0")}: $*" >&2; }
die() { say "error: $*"; exit 2; }
fail() { say "FAILED: $*"; FAILURES=$((FAILURES + 1)); }
abort() { say "FAILED: $*"; exit 1; }

on_exit() {
  _LIB_ON_EXIT=("$(printf '%q ' "$@")" "${_LIB_ON_EXIT[@]}")
  trap _lib_run_on_exit EXIT
}

_lib_run_on_exit() {
  local status=$? command
  for command in "${_LIB_ON_EXIT[@]}"; do eval "$command" || true; done
  exit "$status"
}

make_work_dir() {
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  on_exit rm -rf "$WORK"
}

stop_bazel_servers() {
  local base
  for base in "$1"/*/; do
    [ -d "$base" ] && "$LIB_ROOT/bazelw" --output_base="${base%/}" shutdown >/dev/null 2>&1 || true
  done
}

# The host's own CUDA toolkits (PREFIX/cuda and PREFIX/cuda-*, PREFIX defaults to
# /usr/local), resolved and one a line: no action may read them, as the build's
# toolkit comes from the pinned wheels (tools/local_cuda.bzl).
host_cuda_dirs() {
  local d
  for d in "${1:-/usr/local}"/cuda "${1:-/usr/local}"/cuda-*; do
    if [ -d "$d" ]; then realpath "$d"; fi
  done | sort -u
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pid() {
  local pid
  [ -f "$1" ] || return 0
  pid="$(cat "$1")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$1"
}
