// The CPU kernels of one x86-64 instruction-set level, as a table of function
// pointers, and the levels built (softmax_cpu_level.cc is compiled once per
// level; softmax_cpu.cc picks one at run time).
#pragma once

#include <cstdint>

#include "kernels/softmax.h"

namespace warp_softmax::cpu {

// Rows [0, rows) of `cols` elements each, on the calling thread.
template <typename T>
using ForwardFn = void (*)(const T* x, T* y, int64_t rows, int64_t cols, bool log);
template <typename T>
using MaskedForwardFn = void (*)(const T* x, const T* mask, const MaskLayout& layout, double scale,
                                 T* y, int64_t first_row, int64_t rows, int64_t cols);
template <typename T>
using BackwardFn = void (*)(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log);

struct LevelKernels {
  const char* name;  // "avx512_bf16", "avx512", "avx2" or "baseline": WARP_SOFTMAX_ISA's values
  ForwardFn<float> forward_f32;
  ForwardFn<double> forward_f64;
  ForwardFn<Half> forward_f16;
  ForwardFn<BFloat16> forward_bf16;
  MaskedForwardFn<float> masked_f32;
  MaskedForwardFn<double> masked_f64;
  MaskedForwardFn<Half> masked_f16;
  MaskedForwardFn<BFloat16> masked_bf16;
  BackwardFn<float> backward_f32;
  BackwardFn<double> backward_f64;
  BackwardFn<Half> backward_f16;
  BackwardFn<BFloat16> backward_bf16;
};

// One per level, defined in that level's namespace by softmax_cpu_level.cc.
namespace avx512_bf16 {
extern const LevelKernels kKernels;
}
namespace avx512 {
extern const LevelKernels kKernels;
}
namespace avx2 {
extern const LevelKernels kKernels;
}
namespace baseline {
extern const LevelKernels kKernels;
}

// A per-thread float32 buffer of at least n elements; `slot` tells apart the
// buffers one call needs at once. Defined once, in softmax_cpu.cc: the level
// files must not instantiate std::vector themselves (see softmax_cpu_level.cc).
float* scratch(int slot, int64_t n);

// This thread's share of the last-level cache, in bytes: a call whose data
// (inputs and output) exceeds it writes its output with non-temporal stores;
// smaller outputs stay in the caches for whoever reads them next.
int64_t cache_share();

}  // namespace warp_softmax::cpu
