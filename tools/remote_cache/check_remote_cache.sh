#!/usr/bin/env bash
# Shows the loopback remote cache at work, for CI:
#   1. a build in a clean output base fills the cache,
#   2. a build in another clean output base is served entirely from it
#      (every action a remote cache hit, none executed),
#   3. with the server stopped, a build in a third clean output base still
#      passes, and Bazel says it fell back to building locally.
# The local disk cache is off throughout so only the remote cache can serve.
# Exit status 0 when all three hold.
set -uo pipefail
LIB_NAME=check_remote_cache
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "$LIB_ROOT"
server=tools/remote_cache/remote_cache.sh
targets=(//tools/tests:pybind_example.so //tools/tests:torch_example_op.so //tools/tests:tf_example_op.so)
make_work_dir remote-cache-check
work="$WORK"
export REMOTE_CACHE_DIR="$work/cache"
stop_cache() { $server stop >/dev/null 2>&1; }
on_exit stop_cache

build() {  # build NAME: a clean output base, the remote cache, no disk cache
  local log="$work/$1.log" start=$SECONDS status
  ./bazelw --output_base="$work/$1" build --config=remote_cache --disk_cache= --symlink_prefix=/ \
    --curses=no --color=no "${targets[@]}" >"$log" 2>&1
  status=$?
  ./bazelw --output_base="$work/$1" shutdown >/dev/null 2>&1
  echo "$1: exit $status in $((SECONDS - start)) s; $(grep -o '[0-9]* processes: .*' "$log")"
  return $status
}

$server start || abort "the cache server did not start"
build fill || abort "the first build failed (see above)"
build served || abort "the second build failed"
grep -q 'remote cache hit' "$work/served.log" || abort "no remote cache hits in the second build"
grep -qE 'processes: .*(linux-sandbox|local|processwrapper-sandbox)' "$work/served.log" &&
  abort "the second build executed actions instead of taking them from the cache"
echo "served entirely from the remote cache"
$server stop
build fallback || abort "with the cache server down the build failed"
grep -q 'Remote Cache' "$work/fallback.log" || abort "Bazel did not report the unreachable cache"
echo "cache down: $(grep -m1 -A1 'Remote Cache' "$work/fallback.log" | tr '\n' ' ')-> built locally"
