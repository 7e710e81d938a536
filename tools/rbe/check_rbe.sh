#!/usr/bin/env bash
# Proves the suite runs on a Remote Execution API server and that its results
# are cached there: `bazel test //... --config=rbe` in a clean output base, then
# again in another clean output base. Prints, for each run, the actions
# executed remotely, the remote cache hits and the wall time; the second run
# must execute nothing (goal: 100% remote cache hits).
#
#   tools/rbe/check_rbe.sh [BAZEL_ARGS...]     e.g. --config=ci
#   tools/rbe/check_rbe.sh --config=cuda --test_tag_filters=cuda,-gpu,-slow
#
# Starts tools/rbe_local.sh's server (and stops it at the end) unless one is
# already running; RBE_KEEP=1 leaves it running. Needs ./bazelw to have run
# once (the Python environment). Output bases go to a temp folder, removed after.
set -euo pipefail
LIB_NAME="rbe check"
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROOT="$LIB_ROOT"
cd "$ROOT"
make_work_dir rbe-check
work="$WORK"
on_exit stop_bazel_servers "$work"
# No bazel-* links in the clone for these throwaway output bases: a link into
# another live output base would make `//...` wander into its external/ folder.
NO_LINKS=--symlink_prefix=/
STATE="$(tools/rbe_local.sh state)"
# //... as the list of its packages, which this clone's own output base lists:
# the clone's bazel-<folder> link (named after the folder, so .bazelignore
# cannot list it) points into that output base, and a build in another output
# base would walk into it.
mapfile -t ALL < <(./bazelw query //... --output=package 2>/dev/null | sed 's|^|//|; s|$|:all|')
[ "${#ALL[@]}" -gt 0 ] || abort "bazel query //... found no packages"

cas_figures() {  # what the loopback server's CAS holds (BuildGrid's !disk-storage)
  local objects="$STATE/cas/cas/objects"
  [ -d "$objects" ] || return 0
  say "server CAS after run $1: $(find "$objects" -type f | wc -l) blobs," \
    "$(du -sm "$objects" | cut -f1) MB"
}

if ! tools/rbe_local.sh status >/dev/null 2>&1; then
  tools/rbe_local.sh start
  [ -n "${RBE_KEEP:-}" ] || on_exit tools/rbe_local.sh stop
fi

# run N: one clean `bazel test //... --config=rbe`; prints its figures.
run() {
  local n="$1" log="$work/run$1.log" start end rc=0 line why
  shift
  start=$(date +%s.%N)
  ./bazelw --output_base="$work/base$n" test "${ALL[@]}" --config=rbe $NO_LINKS "$@" >"$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  if [ "$rc" != 0 ]; then
    tail -40 "$log" >&2
    # The failing targets and Bazel's first errors, for the one line CI's summary
    # keeps; else its last line. (`|| true`: under pipefail a grep that finds
    # nothing would end the script here, silently.)
    why="$({ grep -E '^(FAIL|FAILED|TIMEOUT|FLAKY|NO STATUS): //|^(ERROR|FATAL): ' "$log" ||
      grep -v '^$' "$log" | tail -1; } | grep -v 'did NOT complete' | head -3 | cut -c1-200 |
      paste -sd';' - || true)"
    abort "run $n failed (exit $rc): ${why:-it printed nothing}"
  fi
  line="$(grep -E '^INFO: [0-9]+ processes' "$log" | tail -1 || true)"
  [ -n "$line" ] || abort "run $n printed no 'INFO: N processes' line to count its actions"
  # Bazel 4.2: "INFO: 140 processes: 100 remote cache hit, 30 internal, 10 remote."
  python3 - "$n" "$line" "$start" "$end" "$work/figures" <<'EOF'
import re, sys
n, line, start, end, out = sys.argv[1:]
counts = {kind.strip(): int(num) for num, kind in re.findall(r"(\d+) ([a-z -]+?)[,.]", line.split(":", 1)[1].split("processes:", 1)[1])}
hits = counts.pop("remote cache hit", 0)
remote = counts.pop("remote", 0)
counts.pop("internal", 0)
local = sum(counts.values())  # anything else ran on this machine
total = hits + remote + local
rate = 100.0 * hits / total if total else 100.0
wall = float(end) - float(start)
print("rbe run %s: %d actions executed remotely, %d remote cache hits, %d run locally "
      "(%.1f%% cache hits), wall %.1f s" % (n, remote, hits, local, rate, wall))
with open(out, "a") as f:
    f.write("%s %d %d %d %.1f\n" % (n, remote, hits, local, rate))
EOF
}

run 1 "$@"
cas_figures 1
run 2 "$@"
cas_figures 2
read -r _ remote2 hits2 local2 rate2 < <(tail -1 "$work/figures")
if [ "$remote2" != 0 ] || [ "$local2" != 0 ]; then
  abort "the second clean build executed $remote2 actions remotely and" \
    "$local2 locally instead of taking them from the remote cache ($rate2% hits)"
fi
say "second clean build: $hits2 remote cache hits, 100%, nothing executed"

# Hermetic actions: from inside a remote action the workspace, $HOME and the
# host's CUDA toolkit look empty, apart from the executor image's Python
# environment (and its base interpreter), which holds the pinned CUDA toolkit.
allowed="$(tools/rbe_local.sh image | paste -sd:)"
forbidden="$(printf '%s\n' "$ROOT" "$HOME" | cat - <(host_cuda_dirs) | paste -sd:)"
if ./bazelw --output_base="$work/base2" test //tools/rbe:isolation_test --config=rbe $NO_LINKS "$@" \
    --test_env=FORBIDDEN="$forbidden" --test_env=ALLOWED="$allowed" --test_output=all \
    --test_tag_filters= \
    >"$work/isolation.log" 2>&1; then
  grep -E "^ok: " "$work/isolation.log" | sed 's/^/rbe check: isolation /'
else
  grep -E "^(ok|FAIL): |^ERROR" "$work/isolation.log" >&2
  abort "remote actions can read undeclared files"
fi
say "passed"
