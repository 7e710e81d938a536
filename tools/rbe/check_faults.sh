#!/usr/bin/env bash
# Breaks the loopback remote executor (tools/rbe_local.sh) mid-build and checks
# that each fault ends the way a user can rely on:
#   server_stopped      BuildGrid killed while an action runs remotely: with
#                       --config=rbe Bazel fails and says why; with
#                       --config=rbe_fallback it finishes the build locally;
#   worker_killed       a bot (and its action) killed mid-action: BuildGrid
#                       queues the job again once the bot's session expires,
#                       another bot runs it, the build passes;
#   corrupt_blob        a blob changed on the server's disk: as an input the bot
#                       refuses it (digest mismatch), as a cached output Bazel
#                       refuses it; neither is ever used.
#
#   tools/rbe/check_faults.sh [FAULT...]      (default: all three)
#
# Each fault gets a freshly started server and clean output bases; a running
# server is stopped first. Exits non-zero if any fault ends otherwise.
set -euo pipefail
LIB_NAME="rbe faults"
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
ROOT="$LIB_ROOT"
cd "$ROOT"
STATE="$(tools/rbe_local.sh state)"
make_work_dir rbe-faults
work="$WORK"
stop_server() { tools/rbe_local.sh stop >/dev/null 2>&1; }
on_exit stop_server
on_exit stop_bazel_servers "$work"
# No bazel-* links in the clone for these throwaway output bases.
NO_LINKS=--symlink_prefix=/

fresh_server() { stop_server || true; tools/rbe_local.sh start "${1:-2}" 2>/dev/null; }

# slow_bg NAME ARGS...: starts //tools/rbe:slow_test (20 s) in its own clean output
# base, in the background (its pid in $!); a fresh FAULT_RUN gives it an action
# key never cached.
slow_bg() {
  local name="$1"; shift
  ./bazelw --output_base="$work/base-$name" test //tools/rbe:slow_test $NO_LINKS "$@" \
    --test_env=FAULT_RUN="$name-$$-$RANDOM" >"$work/$name.log" 2>&1 &
}

# wait_for_log PATTERN SECONDS: waits until a worker log has a line matching PATTERN.
wait_for_log() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    grep -h -E "$1" "$STATE"/worker-*.log 2>/dev/null | head -1 | grep . && return 0
    sleep 0.2
  done
  return 1
}

kill_tree() {  # kills a process and all its descendants at once, like a lost machine
  local pids=("$1") i=0 child
  while [ $i -lt ${#pids[@]} ]; do
    for child in $(ps -o pid= --ppid "${pids[$i]}" 2>/dev/null); do pids+=("$child"); done
    i=$((i + 1))
  done
  kill -9 "${pids[@]}" 2>/dev/null || true
}

SLOW_ACTION='start .* -> .*/slow_test/'

# kill_server_mid_test NAME CONFIG: a fresh server, the slow test under --config=CONFIG,
# BuildGrid killed once the test runs remotely; sets rc to Bazel's exit status.
kill_server_mid_test() {
  local pid
  fresh_server
  slow_bg "$1" --config="$2"; pid=$!
  wait_for_log "$SLOW_ACTION" 300 >/dev/null || { kill "$pid"; rc=no-start; return 0; }
  kill -9 "$(cat "$STATE/buildgrid.pid")"
  rc=0; wait "$pid" || rc=$?
}

server_stopped() {
  local rc message
  say "server_stopped: kill BuildGrid while a test runs remotely"
  kill_server_mid_test stop-plain rbe
  message="$(grep -m1 -E '^ERROR: ' "$work/stop-plain.log" || true)"
  if [ "$rc" != 0 ] && [ "$rc" != no-start ] && [ -n "$message" ]; then
    say "  --config=rbe: build failed (exit $rc) with: ${message:0:300}"
  else
    fail "--config=rbe with the server gone: exit $rc, message '${message}'"
  fi

  kill_server_mid_test stop-fallback rbe_fallback
  if [ "$rc" = 0 ] && grep -q -E 'processes:.* local' "$work/stop-fallback.log"; then
    say "  --config=rbe_fallback: build passed, finished locally: $(grep -E '^INFO: [0-9]+ processes' "$work/stop-fallback.log")"
  else
    fail "--config=rbe_fallback with the server gone: exit $rc"; tail -20 "$work/stop-fallback.log"
  fi
}

worker_killed() {
  local pid rc line lease victim other t0
  say "worker_killed: kill the bot running a test, and the test"
  fresh_server 2
  slow_bg worker --config=rbe; pid=$!
  line="$(wait_for_log "$SLOW_ACTION" 300)" || { fail "no remote action started"; kill "$pid"; return 0; }
  lease="$(echo "$line" | sed -E 's/.*lease ([^:]+): start.*/\1/')"
  victim="$(grep -l -F "lease $lease: start" "$STATE"/worker-*.log | head -1)"
  victim="$(basename "$victim" .log)"
  kill_tree "$(cat "$STATE/$victim.pid")"
  t0=$(date +%s)
  rc=0; wait "$pid" || rc=$?
  other="$(grep -l -F "lease $lease: done" "$STATE"/worker-*.log | grep -v "$victim" | head -1 || true)"
  if [ "$rc" = 0 ] && [ -n "$other" ]; then
    say "  $victim killed mid-action; $(basename "$other" .log) ran lease $lease again; build passed" \
      "$(( $(date +%s) - t0 )) s after the kill"
  else
    fail "after killing $victim: build exit $rc, lease $lease rerun by: ${other:-nobody}"
    tail -20 "$work/worker.log"
  fi
}

corrupt() {  # corrupt FILE: overwrites the start of the server's copy of FILE's content
  local hash blob
  hash="$(sha256sum "$1" | cut -d' ' -f1)"
  # BuildGrid's !disk-storage layout: <path>/cas/objects/<hash[:2]>/<hash[2:]>
  blob="$STATE/cas/cas/objects/${hash:0:2}/${hash:2}"
  [ -f "$blob" ] || { echo "blob $hash of $1 is not in the server's CAS" >&2; return 1; }
  printf 'corrupted' | dd of="$blob" bs=1 seek=0 conv=notrunc status=none
  echo "$hash"
}

corrupt_blob() {
  local hash rc out
  say "corrupt_blob: change blobs on the server's disk under the CAS's back"
  fresh_server 1
  ./bazelw --output_base="$work/base-seed" build //kernels:softmax_cpu --config=rbe $NO_LINKS >"$work/seed.log" 2>&1 ||
    { fail "seed build failed"; tail -20 "$work/seed.log"; return 0; }

  # A cached output (the compiled library) corrupted: a clean build must not use it.
  out="$(find "$work/base-seed/execroot" -path '*/bin/kernels/libsoftmax_cpu.a' | head -1)"
  hash="$(corrupt "$out")" || { fail "could not corrupt the cached library"; return 0; }
  rc=0
  ./bazelw --output_base="$work/base-output" build //kernels:softmax_cpu --config=rbe $NO_LINKS >"$work/output.log" 2>&1 || rc=$?
  local got; got="$(find "$work/base-output/execroot" -path '*/bin/kernels/libsoftmax_cpu.a' 2>/dev/null | head -1)"
  if [ -n "$got" ] && [ "$(sha256sum "$got" | cut -d' ' -f1)" = "$hash" ] && [ "$rc" = 0 ]; then
    say "  cached output ${hash:0:12} corrupted: Bazel refused it and rebuilt it identical ($(grep -E '^INFO: [0-9]+ processes' "$work/output.log"))"
  elif [ "$rc" != 0 ] && grep -q -i "digest" "$work/output.log"; then
    say "  cached output ${hash:0:12} corrupted: Bazel refused it: $(grep -m1 -i 'digest' "$work/output.log" | cut -c1-250)"
  else
    fail "corrupted cached output: build exit $rc, output $(sha256sum "$got" 2>/dev/null | cut -c1-12)"
    tail -20 "$work/output.log"
  fi

  # An input (a source file) corrupted, fetched by a new bot (empty blob cache);
  # -D gives the compile a new action key, so it must run rather than hit.
  hash="$(corrupt kernels/softmax_cpu.cc)" || { fail "could not corrupt the source"; return 0; }
  tools/rbe_local.sh workers 1 2>/dev/null
  rc=0
  ./bazelw --output_base="$work/base-input" build //kernels:softmax_cpu --config=rbe $NO_LINKS \
    --copt=-DRBE_FAULT_CHECK >"$work/input.log" 2>&1 || rc=$?
  if grep -q "REJECTED .*${hash:0:12}" "$STATE"/worker-*.log && [ "$rc" != 0 ]; then
    say "  input ${hash:0:12} corrupted: the bot rejected it; Bazel (exit $rc):" \
      "$(grep -m1 -A1 -E '^ERROR: ' "$work/input.log" | tr '\n' ' ' | cut -c1-400)"
  else
    fail "the corrupted input ${hash:0:12}: build exit $rc, rejected: $(grep -c REJECTED "$STATE"/worker-*.log)"
    tail -20 "$work/input.log"
  fi
}

ALL_FAULTS=(server_stopped worker_killed corrupt_blob)
faults=("${@:-${ALL_FAULTS[@]}}")
for fault in "${faults[@]}"; do
  [[ " ${ALL_FAULTS[*]} " == *" $fault "* ]] || die "unknown fault '$fault' (known: ${ALL_FAULTS[*]})"
done
for fault in "${faults[@]}"; do "$fault"; done
[ "$FAILURES" = 0 ] && say "all faults handled" || abort "$FAILURES fault check(s) failed"
