"""Compiler flags shared by the workspace's C++ targets.

    load("//tools:copts.bzl", "X86_LEVEL_COPTS")

X86_LEVEL_COPTS: the x86-64 instruction-set levels that CPU kernels are built
for, each compiled from one source with its level's flags and picked at run
time (kernels/softmax_cpu.cc). The names are WARP_SOFTMAX_ISA's values.
"""

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
