// The online (max, sum) arithmetic of softmax_cuda.cu's block-per-row tier
// (Milakov & Gimelshein 2018) and of its cluster tier's merge of the blocks'
// parts, in a header that also compiles as plain C++ so
// tests/online_softmax_test.cc checks it on the CPU, where there is no GPU:
// masked (-inf) runs anywhere in a row, a fully masked row, NaN.
#pragma once

#include <cmath>

#ifdef __CUDACC__
#define WS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define WS_HOST_DEVICE inline
#endif

namespace warp_softmax::online {

// On the GPU, exp as the multiprocessor's ex2 unit gives it, results below
// 2^-126 flushed to zero as the CPU kernels' exp flushes them
// (tests/checks.py's TINY): __expf scales such results instead, three more
// instructions an element, and on an H200 bfloat16 rows are bound by this
// arithmetic, not by memory.
WS_HOST_DEVICE float exp_fast(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
#else
  return std::exp(x);
#endif
}

// Adds exp(x - m) to s, rescaling when x raises the max. -inf contributes
// nothing, and never meets an m of -inf in a subtraction (which would be NaN).
WS_HOST_DEVICE void add(float x, float& m, float& s) {
  if (x > m) {
    s = (m == -INFINITY ? 0.0f : s * exp_fast(m - x)) + 1.0f;
    m = x;
  } else if (x != -INFINITY) {
    s += exp_fast(x - m);  // NaN x gives NaN s, as it should
  }
}

// Merges the pair (m2, s2) into (m, s); either may be the empty pair (-inf, 0),
// which adds nothing. A NaN sum stays NaN even beside a max of -inf (a NaN
// after a masked prefix): testing m alone, as this did, dropped it.
WS_HOST_DEVICE void merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  const float a = (m == -INFINITY && s == 0.0f) ? 0.0f : s * exp_fast(m - mm);
  const float b = (m2 == -INFINITY && s2 == 0.0f) ? 0.0f : s2 * exp_fast(m2 - mm);
  m = mm;
  s = a + b;
}

// What a block subtracts before summing exp over its part of a row whose max
// is m: m itself, or 0 where the part is fully masked (m = -inf), so the sum is
// exp(-inf) = 0 rather than exp(-inf - -inf) = NaN. The pair (m, that sum) is
// then one merge() takes, the empty pair (-inf, 0) included.
WS_HOST_DEVICE float shift(float m) { return m == -INFINITY ? 0.0f : m; }

}  // namespace warp_softmax::online
