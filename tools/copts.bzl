"""Every C++ and CUDA compiler flag the workspace chooses, in one place.

    load("//tools:copts.bzl", "CXX_COPTS", "KERNEL_COPTS", "X86_LEVEL_COPTS")

The macros (pybind.bzl, torch.bzl, tensorflow.bzl, cuda.bzl) and BUILD files
take their flags from here, as abseil's copts do; tools/tests:copts_test fails
on a flag set anywhere else. A target adds its own only through the macros'
`copts` argument, for a reason stated beside it.
"""

load("@python_env//:flags.bzl", "TF_STD_COPTS")

# Optimised code everywhere: the workspace exists to be fast (and tests run
# the code users get).
_OPT = ["-O3"]

# Our own C++: the kernels' dispatcher, pybind11 modules, C++ tests.
CXX_COPTS = ["-std=c++17"] + _OPT

# The CPU kernels compiled per level. -Wno-psabi: their vector types never
# cross an ABI boundary; -Wno-maybe-uninitialized: GCC 12's own AVX-512
# intrinsic headers trip it. -falign-loops=64: the hot loops start on a cache
# line, so their speed no longer depends on where the linker put them (on a Zen
# 3 the same avx2 code ran 3-15% slower in one of two link positions; aligned,
# it ran alike in both, at the faster one's speed: kernels/BENCHMARKS.md).
# -ffp-contract=off: GCC fuses a * b + c into one FMA in C++ whatever -std says,
# and fused, the attention form's x * scale - max was x * scale's rounding error
# at the row's maximum instead of 0 (all NaN for a scale of 1e300) and
# x * scale + mask rounded once where torch rounds twice; the kernels write each
# fused multiply-add they want (simd_level.h's madd).
KERNEL_COPTS = CXX_COPTS + ["-Wno-psabi", "-Wno-maybe-uninitialized", "-falign-loops=64", "-ffp-contract=off"]

# PyTorch extensions, as torch.utils.cpp_extension compiles them: C++20 (torch
# >= 2.13's headers need it) and OpenMP, since at::parallel_for's loop is
# compiled into the extension itself (without it the loop runs serially).
TORCH_COPTS = ["-std=c++20", "-fopenmp"] + _OPT
TORCH_LINKOPTS = ["-fopenmp"]

# TensorFlow ops: the C++ standard TensorFlow's build reports
# (tf.sysconfig.get_compile_flags(), read by python_env.bzl), and quiet about
# the warnings of TensorFlow's own headers.
TF_COPTS = TF_STD_COPTS + _OPT + [
    "-Wno-deprecated-declarations",
    "-Wno-interference-size",
    "-Wno-sign-compare",
]

# nvcc: host code as our C++, constexpr functions callable from device code,
# position-independent host objects (they are linked into shared libraries).
CUDA_COPTS = CXX_COPTS + ["--expt-relaxed-constexpr", "-Xcompiler", "-fPIC"]

# The x86-64 instruction-set levels that CPU kernels are built for, each
# compiled from one source with its level's flags and picked at run time
# (kernels/softmax_cpu.cc). The names are WARP_SOFTMAX_ISA's values.
X86_LEVEL_COPTS = {
    # x86-64-v4 and AVX-512 BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and later).
    "avx512_bf16": ["-march=x86-64-v4", "-mavx512bf16"],
    # x86-64-v4: AVX-512 F, BW, DQ, VL, CD, and everything in v3.
    "avx512": ["-march=x86-64-v4"],
    # x86-64-v3: AVX2, FMA, F16C, BMI1/2, MOVBE.
    "avx2": ["-march=x86-64-v3"],
    # Every x86-64 CPU: SSE2.
    "baseline": ["-march=x86-64"],
}
