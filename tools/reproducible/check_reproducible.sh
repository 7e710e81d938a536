#!/usr/bin/env bash
# Builds the workspace's C++ outputs twice, from two clones at different paths,
# each in a clean output base with no cache, and compares their SHA-256 digests:
# identical libraries prove the build depends on neither the checkout's path
# nor anything left over from an earlier build.
#
#   tools/reproducible/check_reproducible.sh [TARGET...]   # default: the C++ libraries below
#
# Every .so and .a file the build writes is compared, not only the targets named.
#
# Exit status 0 when every output is bit-identical (compare_digests.sh); 1 otherwise.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(//kernels:warp_softmax.so //kernels:warp_softmax_numpy.so
  //kernels:warp_softmax_tf.so //kernels:softmax_cpu //tools/tests:pybind_example.so
  //tools/tests:torch_example_op.so //tools/tests:tf_example_op.so)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

build() {  # build NAME: a clone at $work/NAME/<NAME>-checkout, digests into $work/NAME.sha256
  local clone="$work/$1/$1-checkout" base="$work/$1/output_base"
  git -C "$root" worktree add --detach -q "$clone" HEAD 2>/dev/null || git clone -q "$root" "$clone"
  (cd "$clone" && ./bazelw --output_base="$base" build --disk_cache= --remote_cache= \
     --curses=no --color=no "${targets[@]}" >"$work/$1.log" 2>&1) ||
    { echo "check_reproducible: the build in $clone failed:"; tail -20 "$work/$1.log"; return 1; }
  # Every library the build wrote (Bazel 4.2.3's cquery cannot list output files).
  local bin
  bin="$(cd "$clone" && ./bazelw --output_base="$base" info bazel-bin 2>/dev/null)" && [[ -d "$bin" ]] ||
    { echo "check_reproducible: bazel info bazel-bin failed in $clone"; return 1; }
  (cd "$bin" && find . -path ./external -prune -o -type f \( -name '*.so' -o -name '*.a' \) \
     -not -path '*.runfiles/*' -print0 | xargs -0 -r sha256sum | sort -k2) > "$work/$1.sha256" ||
    { echo "check_reproducible: listing or hashing the outputs in $bin failed"; return 1; }
  (cd "$clone" && ./bazelw --output_base="$base" shutdown >/dev/null 2>&1)
  # A worktree that cannot be removed stays behind in the temp folder, removed on exit.
  git -C "$root" worktree remove --force "$clone" 2>/dev/null || git -C "$root" worktree prune
  return 0
}

build first && build second || exit 1
# At least one library per target named: fewer means outputs went missing.
"$root/tools/reproducible/compare_digests.sh" "$work/first.sha256" "$work/second.sha256" "${#targets[@]}"
