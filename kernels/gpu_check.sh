#!/usr/bin/env bash
# The GPU check without Bazel: builds the PyTorch operator from the same sources
# with torch.utils.cpp_extension, loads it, runs the tests and the benchmark, and
# writes every result to one Markdown file. Made for the lent GPU machine as it
# is (Python 3.12, torch 2.11.0+cu130, nvcc 13.0, no Bazel, no network; under
# 10 minutes: each step has its own time limit).
#
#   bash kernels/gpu_check.sh [RESULTS.md]               # on a GPU: build, GPU tests
#                                                        # (sweep), benchmarks (the kernels
#                                                        # alone, then through torch), CPU tests
#   bash kernels/gpu_check.sh --build-only [RESULTS.md]  # anywhere: build for sm_80 and
#                                                        # sm_90 (the kernel bench too),
#                                                        # load, run the CPU tests
#
# RESULTS.md defaults to kernels/BENCHMARKS.gpu.md, and the steps' whole output
# goes to RESULTS.log beside it. PYTHON picks the interpreter (default python3;
# the workspace's pinned one is "$(tools/python --path)"). The toolkit:
# $CUDA_HOME if set; else the one of NVIDIA's wheels beside torch (nvidia/cu<major>,
# what Bazel's --config=cuda uses); else the folder above nvcc on PATH; else
# /usr/local/cuda. CI runs --build-only with the pinned environment, so the
# script's GPU runs are not its first. Exit status: 0 when every step passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mode=full
if [[ "${1:-}" == --build-only ]]; then mode=build-only; shift; fi
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then sed -n '2,21p' "$0"; exit 0; fi
out="${1:-kernels/BENCHMARKS.gpu.md}"
log="${out%.md}.log"  # every step's whole output; the Markdown keeps each one's last 40 lines
python="${PYTHON:-python3}"
build="$(mktemp -d "${TMPDIR:-/tmp}/warp_softmax_gpu_check.XXXXXX")"
mkdir -p "$build/py/kernels" "$(dirname "$out")"

if [[ -z "${CUDA_HOME:-}" ]]; then
  CUDA_HOME="$("$python" - <<'PY'
import os, sysconfig, torch
root = os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "cu" + (torch.version.cuda or "0").split(".")[0])
print(root if os.path.exists(os.path.join(root, "bin", "nvcc")) else "")
PY
)"
  if [[ -z "$CUDA_HOME" ]] && command -v nvcc >/dev/null; then
    CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  fi
  CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
fi
# The library is found through sys.path (kernels/library.py), not copied into the tree.
export CUDA_HOME PYTHONPATH="$PWD:$build/py${PYTHONPATH:+:$PYTHONPATH}" WARP_SOFTMAX_BUILD="$build"
if [[ "$mode" == build-only ]]; then
  # No GPU to ask: Hopper (H100/H200), and Ampere, where the kernels' cluster code is compiled out.
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}"
  export CUDA_VISIBLE_DEVICES=""  # the same code paths on a machine with a GPU
fi

failed=0
status=0  # the last step's exit status
step() {  # step TITLE SECONDS COMMAND...: runs it under a time limit, its output in a block
  local title="$1" limit="$2"
  status=0
  shift 2
  echo "step: $title" >&2
  {
    echo "## $title"
    echo
    echo '```'
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log" | tail -n 40 || status=$?
    echo '```'
    if [[ $status == 0 ]]; then echo "Passed."; else echo "**Failed** (exit status $status)."; fi
    echo
  } >> "$out"
  [[ $status == 0 ]] || { failed=1; echo "FAILED: $title (exit status $status)" >&2; }
}

{
  echo "# warp_softmax GPU check ($mode), $(date -u '+%F %H:%M UTC')"
  echo
  "$python" -c 'import platform, torch; print("- Python %s, torch %s (CUDA %s)" % (platform.python_version(), torch.__version__, torch.version.cuda)); print("- GPU: %s" % (torch.cuda.get_device_name() if torch.cuda.is_available() else "none"))'
  echo "- nvcc: $("$CUDA_HOME/bin/nvcc" --version | grep release) ($CUDA_HOME)"
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  echo
} > "$out"
: > "$log"

step "Build (torch.utils.cpp_extension, CUDA)" 420 "$python" - <<'PY'
import json, os, re, shutil, subprocess, sys, torch
from torch.utils.cpp_extension import load
sys.path.insert(0, "tools")
import copts  # every flag as tools/copts.bzl gives Bazel's build
flags = copts.read()
build = os.environ["WARP_SOFTMAX_BUILD"]
if torch.cuda.is_available() and "TORCH_CUDA_ARCH_LIST" not in os.environ:
    os.environ["TORCH_CUDA_ARCH_LIST"] = "%d.%d" % torch.cuda.get_device_capability()
print("TORCH_CUDA_ARCH_LIST=" + os.environ.get("TORCH_CUDA_ARCH_LIST", "(torch's default)"))
# ops.py's entry module (torch_entry.cc, a Python extension over torch's
# tensors), built beside the rest in its own process.
entry_dir = os.path.join(build, "entry")
os.makedirs(entry_dir)
entry = subprocess.Popen([sys.executable, "-c", "import json, sys; from torch.utils.cpp_extension import load; "
                          "load(name='warp_softmax_entry', sources=['kernels/torch_entry.cc'], "
                          "build_directory=sys.argv[1], is_python_module=False, "
                          "extra_cflags=json.loads(sys.argv[2]), extra_ldflags=json.loads(sys.argv[3]))",
                          entry_dir, json.dumps(flags["TORCH_COPTS"]), json.dumps(flags["TORCH_LINKOPTS"])])
# softmax_cpu_level.cc once per x86-64 level, with its level's flags (X86_LEVEL_COPTS);
# cpp_extension's one set of flags cannot do that, so these objects are linked in.
levels = flags["X86_LEVEL_COPTS"]
objects, compiles = [], []
for level, level_flags in levels.items():
    objects.append(os.path.join(build, "softmax_cpu_%s.o" % level))
    compiles.append(subprocess.Popen(["c++"] + flags["KERNEL_COPTS"] + level_flags + [
        "-fPIC", "-I.", "-c", "kernels/softmax_cpu_level.cc", "-o", objects[-1]]))
for level, job in zip(levels, compiles):
    if job.wait():
        raise SystemExit("compiling the %s level failed" % level)
    print("compiled the", level, "level")
# NVIDIA's runtime wheel ships only libcudart.so.<major>; cpp_extension links -lcudart.
link_dir = os.path.join(build, "lib")
os.makedirs(link_dir, exist_ok=True)
for lib in ("lib64", "lib"):
    folder = os.path.join(os.environ["CUDA_HOME"], lib)
    versioned = sorted(f for f in os.listdir(folder) if re.fullmatch(r"libcudart\.so\.\d+", f)) if os.path.isdir(folder) else []
    if versioned and not os.path.exists(os.path.join(folder, "libcudart.so")):
        os.symlink(os.path.join(folder, versioned[-1]), os.path.join(link_dir, "libcudart.so"))
# Then the operator, as Bazel's torch_op_library and cuda_library compile it (cpp_extension
# adds its own standard and ABI define before these).
load(name="warp_softmax", build_directory=build, is_python_module=False, verbose=False,
     sources=["kernels/torch_op.cc", "kernels/torch_autograd.cc", "kernels/softmax_cpu.cc", "kernels/softmax_cuda.cu"],
     extra_include_paths=[os.getcwd()],
     extra_cflags=flags["TORCH_COPTS"] + ["-DWARP_SOFTMAX_WITH_CUDA"],
     extra_cuda_cflags=flags["CUDA_COPTS"],
     extra_ldflags=flags["TORCH_LINKOPTS"] + ["-L" + link_dir] + objects)
if entry.wait():
    raise SystemExit("building warp_softmax_entry failed")
for folder, name in ((build, "warp_softmax.so"), (entry_dir, "warp_softmax_entry.so")):
    shutil.copy(os.path.join(folder, name), os.path.join(build, "py", "kernels"))
    print("built", os.path.join(build, "py", "kernels", name))
PY

step "Load: the operators have CPU and CUDA kernels" 120 "$python" -c '
import torch, kernels
from kernels import library
print("library:", library.find("warp_softmax.so"))
print(kernels.warp_softmax(torch.tensor([[1.0, 2.0, 3.0]])))
for op in ("warp_softmax", "warp_softmax_backward", "warp_log_softmax", "warp_log_softmax_backward"):
    for key in ("CPU", "CUDA", "AutogradCPU", "AutogradCUDA"):  # the last two: torch_autograd.cc
        assert torch._C._dispatch_has_kernel_for_dispatch_key("kernels::" + op, key), (op, key)
print("CPU, CUDA and their autograd kernels registered for every operator")'

# The CPU kernels under this build and this host's libraries, every level. Run on the GPU
# machine's host too: the masked kernel's first CPU call crashed there (a sysfs read through
# iostreams) and nowhere else.
cpu_tests() {
  pytest_step "CPU tests with this build (torch_op_test.py, torch_masked_test.py's CPU cases)" 360 \
    -k "not cuda" kernels/tests/torch_op_test.py kernels/tests/torch_masked_test.py
}

# pytest_step TITLE SECONDS PYTEST-ARGS...: a test step. Where a signal killed the tests (a
# crash; not the time limit's), they run again to their first failure under a debugger, so the
# crash's native stack is in the results too: faulthandler shows only Python's, and the GPU
# machine is lent for minutes.
pytest_step() {
  local title="$1" limit="$2" debugger
  shift 2
  step "$title" "$limit" "$python" -m pytest -q -p no:cacheprovider "$@"
  if (( status > 128 && status != 137 )) && debugger="$(command -v cuda-gdb || command -v gdb)"; then
    step "Native stack of the crash above ($(basename "$debugger"))" 300 "$debugger" -q -batch \
      -ex "set pagination off" -ex run -ex "bt 30" \
      --args "$("$python" -c 'import sys; print(sys.executable)')" -m pytest -x -q -p no:cacheprovider "$@"
  fi
}

# kernels/cuda_kernel_bench.cu: the kernels alone, timed against a device copy (no torch).
# build-only compiles it for Hopper, whose cluster code it runs; a GPU run, for its own GPU.
# NVIDIA's wheels keep the static runtime in lib/, a toolkit in lib64/.
kernel_bench() {
  step "The kernels alone against a device copy (cuda_kernel_bench.cu, no torch)" 180 bash -c '
    set -e
    copts="$("$2" tools/copts.py CUDA_COPTS)"  # (an assignment: set -e stops here if it fails)
    mapfile -t copts <<< "$copts"
    "$CUDA_HOME/bin/nvcc" "${copts[@]}" -arch="$1" -I. -L"$CUDA_HOME/lib" \
      kernels/cuda_kernel_bench.cu kernels/softmax_cuda.cu -o "$WARP_SOFTMAX_BUILD/kernel_bench"
    if [[ "$1" == native ]]; then "$WARP_SOFTMAX_BUILD/kernel_bench"; else echo "built (no GPU to run it on)"; fi' \
    kernel_bench "$1" "$python"
}

if [[ "$mode" == build-only ]]; then
  kernel_bench sm_90a
  cpu_tests
else
  # torch_masked_test.py's GPU cases are those its `where` fixture names cuda.
  pytest_step "GPU tests: tiers, dtypes, streams, graphs, compile, sweep 32..262144 with masked rows, the masked form" 300 \
    -rs --tb=short -k "not cuda_build_torch and (gpu or cuda)" kernels/tests/torch_op_gpu_test.py kernels/tests/torch_masked_test.py
  kernel_bench native
  sizes=(4096x1024 1024x4096 4096x32768 256x32768 64x131072 16384x131072)
  step "Benchmark against F.softmax (float32, bfloat16): eager calls, as a Python program sees them" 300 \
    "$python" kernels/bench.py --device cuda --dtypes float32 bfloat16 --sizes "${sizes[@]}" \
      --plot "$(dirname "$out")/warp_softmax_gpu.png"
  step "Benchmark against F.softmax (float32, bfloat16): CUDA graph replays, the kernels alone" 300 \
    "$python" kernels/bench.py --device cuda --cuda-graph --dtypes float32 bfloat16 --sizes "${sizes[@]}" \
      --plot "$(dirname "$out")/warp_softmax_gpu_graph.png"
  cpu_tests
fi
rm -rf "$build"
cat "$out"
exit "$failed"
