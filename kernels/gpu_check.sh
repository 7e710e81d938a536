#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU, nvcc and a CUDA build of
# torch but no Bazel (the lent device machine): builds the PyTorch operator
# from the same sources with torch.utils.cpp_extension, runs the GPU tests and
# the GPU benchmark, and writes the results (Markdown) to $1 (default
# kernels/BENCHMARKS.gpu.md). About 5 minutes on an H200.
#
#   bash kernels/gpu_check.sh /path/to/results.md
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out="${1:-kernels/BENCHMARKS.gpu.md}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 - <<'PY'
import os, shutil, torch
from torch.utils.cpp_extension import load
arch = "%d%d" % torch.cuda.get_device_capability()
build = "/tmp/warp_softmax_build"
os.makedirs(build, exist_ok=True)
load(name="warp_softmax", build_directory=build, is_python_module=False,
     sources=["kernels/torch_op.cc", "kernels/softmax_cpu.cc", "kernels/softmax_cuda.cu"],
     extra_include_paths=[os.getcwd()],
     extra_cflags=["-O3", "-fopenmp", "-Wno-psabi", "-DWARP_SOFTMAX_WITH_CUDA"],
     extra_cuda_cflags=["-O3", "-gencode=arch=compute_%s,code=sm_%s" % (arch, arch)],
     extra_ldflags=["-fopenmp"])
# Where kernels/library.py looks first (ignored by git).
shutil.copy(os.path.join(build, "warp_softmax.so"), "kernels/warp_softmax.so")
PY
{
  echo "# warp_softmax on $(python3 -c 'import torch; print(torch.cuda.get_device_name())'), $(date -u +%F)"
  echo
  echo "torch $(python3 -c 'import torch; print(torch.__version__)'), $(nvcc --version | tail -1)"
  echo
  echo '## GPU tests'
  echo '```'
  python3 -m pytest -q -p no:cacheprovider kernels/tests/torch_op_gpu_test.py 2>&1 | tail -5
  echo '```'
  for dtype in float32 bfloat16; do
    echo "## Benchmark, $dtype"
    echo '```'
    python3 kernels/bench.py --device cuda --dtype "$dtype" \
      --sizes 4096x1024 1024x4096 4096x32768 256x32768 64x131072 16384x131072 \
      --plot "$(dirname "$out")/warp_softmax_gpu_$dtype.png" 2>/dev/null
    echo '```'
  done
} > "$out"
cat "$out"
