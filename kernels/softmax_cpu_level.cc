// CPU softmax kernels for one x86-64 instruction-set level (see softmax.h).
//
// This file is compiled once per level (kernels/BUILD.bazel, flags in
// tools/copts.bzl): AVX-512 with BF16, AVX-512 (x86-64-v4), AVX2+FMA+F16C
// (x86-64-v3) and baseline x86-64 (SSE2); softmax_cpu.cc picks a level at
// run time. Each
// compilation uses GCC vector types exactly as wide as its level's registers
// (16, 8 or 4 floats). One source at the native width, rather than one wide
// vector for every level (GCC split 512-bit vectors on AVX2 into scalar
// selects and conversions: 3x slower than torch there) or Highway: the kernels
// need three operations (max, a polynomial exp, sums) that plain vector
// arithmetic expresses, the -inf and NaN semantics of masked rows stay in this
// file rather than in a library's Exp, and the build needs nothing the machine
// images lack. Everything here has internal linkage inside a per-level
// namespace: an inline function shared between levels would be kept once by
// the linker, possibly with another level's instructions.
//
// float32 rows: one online pass reads x block by block, tracking the running
// max m and the sum s of exp(x - m) (rescaled when m grows) and writing
// exp(x - m) to y; a second pass scales each block of y by exp(m_block - m)/s.
// x and y are each read once from memory, and exp runs once per element.
// float16/bfloat16 rows are widened vector by vector as they are read (F16C's
// vcvtph2ps, a shift for bfloat16); the unscaled exp values go to a float32
// row, narrowed (vcvtps2ph; for bfloat16 AVX-512 BF16's vcvtneps2bf16, or
// round-to-nearest-even integer arithmetic) as the second pass scales them.
// vcvtneps2bf16 flushes subnormal results to zero: below 2^-126, where the
// exp here gives 0 anyway. float64 uses libm's exp.
//
// The backward reads dy and y twice per row (a sum, then dx; the second pass
// finds the row in cache) and, when its data is
// larger than the thread's share of the cache (cache_share), writes dx with
// non-temporal stores:
// memory then sees 2 reads and 1 write per element instead of 2 reads, a
// read-for-ownership and a write.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/softmax_cpu_level.h"

#if defined(__AVX512BF16__)
#define WS_LEVEL avx512_bf16
#elif defined(__AVX512F__)
#define WS_LEVEL avx512
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define WS_LEVEL avx2
#elif !defined(__AVX__)
#define WS_LEVEL baseline
#else
#error "build this file with the flags of one level in tools/copts.bzl"
#endif
#define WS_STR2(x) #x
#define WS_STR(x) WS_STR2(x)

namespace warp_softmax::cpu::WS_LEVEL {
namespace {

#define WS_INLINE inline __attribute__((always_inline))

#if defined(__AVX512F__)
constexpr int W = 16;
#elif defined(__AVX2__)
constexpr int W = 8;
#else
constexpr int W = 4;
#endif
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));
typedef uint32_t vu __attribute__((vector_size(W * 4)));
typedef uint16_t vh __attribute__((vector_size(W * 2)));

constexpr int64_t kBlock = 1024;  // elements per online-pass block (4 KiB of float32)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

WS_INLINE vf splat(float a) { return vf{} + a; }

// Scalar conversions, for tails and the baseline level's float16.
WS_INLINE float to_float(float f) { return f; }
WS_INLINE float to_float(Half h) { return static_cast<float>(__builtin_bit_cast(_Float16, h.bits)); }
WS_INLINE float to_float(BFloat16 h) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(h.bits) << 16);
}
WS_INLINE void from_float(float f, float* out) { *out = f; }
WS_INLINE void from_float(float f, Half* out) {
  out->bits = __builtin_bit_cast(uint16_t, static_cast<_Float16>(f));
}
WS_INLINE void from_float(float f, BFloat16* out) {
  const uint32_t b = __builtin_bit_cast(uint32_t, f);
  const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;  // round to nearest even
  out->bits = static_cast<uint16_t>(f != f ? ((b >> 16) | 0x40u) : rounded);  // keep NaN a NaN
}

// W elements as float32, and back.
WS_INLINE vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
WS_INLINE void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

// bfloat16 is the upper half of a float32. Intrinsics: GCC 12 widened a vector
// of 8 uint16 for AVX2 in two 128-bit halves plus an insert.
WS_INLINE vf load(const BFloat16* p) {
#if defined(__AVX512F__)
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
#elif defined(__AVX2__)
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
#else
  const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h));  // h above 16 zero bits
#endif
}
// Round to nearest even. No NaN case: every NaN here has zero low 16 bits
// (a widened bfloat16 NaN, or x86's default NaN, whose payload arithmetic
// keeps), so rounding cannot carry out of them and a NaN stays a NaN.
WS_INLINE vh narrow(vf v, BFloat16*) {
#if defined(__AVX512BF16__)
  return __builtin_bit_cast(vh, _mm512_cvtneps_pbh(v));  // round to nearest even, in one instruction
#endif
  const vu b = __builtin_bit_cast(vu, v);
  const vu r = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;  // < 2^16: packing cannot saturate
#if defined(__AVX512F__)
  return __builtin_bit_cast(vh, _mm512_cvtepi32_epi16(__builtin_bit_cast(__m512i, r)));
#elif defined(__AVX2__)
  const __m256i packed = _mm256_packus_epi32(__builtin_bit_cast(__m256i, r), __builtin_bit_cast(__m256i, r));
  return __builtin_bit_cast(vh, _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
#else
  // SSE2 packs with signed saturation only: sign-extend the low halves first.
  const __m128i low = _mm_srai_epi32(_mm_slli_epi32(__builtin_bit_cast(__m128i, r), 16), 16);
  return __builtin_bit_cast(vh, _mm_cvtsi128_si64(_mm_packs_epi32(low, low)));
#endif
}

WS_INLINE vf load(const Half* p) {
#if defined(__AVX512F__)
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#elif defined(__F16C__)
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
  vf v;
  for (int j = 0; j < W; ++j) v[j] = to_float(p[j]);
  return v;
#endif
}
WS_INLINE vh narrow(vf v, Half*) {
#if defined(__AVX512F__)
  return __builtin_bit_cast(vh, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
  return __builtin_bit_cast(vh, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
#else
  vh h;
  for (int j = 0; j < W; ++j) {
    Half one;
    from_float(v[j], &one);
    h[j] = one.bits;
  }
  return h;
#endif
}

template <typename T16>
WS_INLINE void store(T16* p, vf v) {
  const vh h = narrow(v, p);
  std::memcpy(p, &h, sizeof h);
}

// A non-temporal store of W elements at a W-element-aligned p: the line goes
// to memory without being read first or kept in the caches.
WS_INLINE void stream(float* p, vf v) {
#if defined(__AVX512F__)
  _mm512_stream_ps(p, v);
#elif defined(__AVX2__)
  _mm256_stream_ps(p, v);
#else
  _mm_stream_ps(p, v);
#endif
}
template <typename T16>
WS_INLINE void stream(T16* p, vf v) {
  const vh h = narrow(v, p);
#if defined(__AVX512F__)
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), __builtin_bit_cast(__m256i, h));
#elif defined(__AVX2__)
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), __builtin_bit_cast(__m128i, h));
#else
  _mm_stream_si64(reinterpret_cast<long long*>(p), __builtin_bit_cast(long long, h));
#endif
}

// The last n < W elements, padded with `pad`, and back.
template <typename T>
WS_INLINE vf load_tail(const T* p, int64_t n, float pad) {
  vf v = splat(pad);
  for (int64_t j = 0; j < n; ++j) v[j] = to_float(p[j]);
  return v;
}
template <typename T>
WS_INLINE void store_tail(T* p, int64_t n, vf v) {
  for (int64_t j = 0; j < n; ++j) from_float(v[j], p + j);
}

// Elements [0, k) at p, k <= W, padded with `pad` when k < W.
template <typename T>
WS_INLINE vf load_n(const T* p, int64_t k, float pad) {
  return k == W ? load(p) : load_tail(p, k, pad);
}

WS_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// out[0, n) = value(i, k) for each run of k <= W elements at i (k = W but for
// the row's ends). kStream: with non-temporal stores (the caller ends with an
// sfence), for outputs too large to be read back from the caches; the row's
// unaligned head is written normally.
template <bool kStream, typename T, typename F>
WS_INLINE void write_row(T* out, int64_t n, F value) {
  int64_t i = 0;
  if constexpr (kStream) {
    constexpr uintptr_t bytes = W * sizeof(T);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(out);
    if (addr % sizeof(T) == 0) {
      const int64_t head = min64(n, static_cast<int64_t>((bytes - addr % bytes) % bytes / sizeof(T)));
      if (head) store_tail(out, head, value(0, head));
      for (i = head; i + W <= n; i += W) stream(out + i, value(i, W));
    }
  }
  for (; i + W <= n; i += W) store(out + i, value(i, W));
  if (i < n) store_tail(out + i, n - i, value(i, n - i));
}

WS_INLINE float lane_max(vf v) {
  float m = v[0];
  for (int j = 1; j < W; ++j) m = v[j] > m ? v[j] : m;
  return m;
}
WS_INLINE float lane_sum(vf v) {
  float s = 0.0f;
  for (int j = 0; j < W; ++j) s += v[j];
  return s;
}
WS_INLINE vf vmax(vf a, vf b) { return a > b ? a : b; }  // one vmaxps; NaN in a is dropped

// exp(x) for x <= 0: 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2)/2.
// e^r is a degree-6 Taylor polynomial (error below 1.2e-7, about 1 ulp; 6
// FMAs). x is clamped at -88 (NaN passes the clamp), where n = -127. n comes
// from adding 1.5 * 2^23 + 127, which leaves n + 127 as the low bits of the
// float: shifted left by 23 they are the bits of 2^n, which is exactly 0 for
// n = -127, so exp(-inf) = 0 as masked softmax inputs need, with no select.
// 14 vector operations per vector; the hot loops are bound by them.
WS_INLINE vf exp_nonpositive(vf x) {
  const vf xc = vmax(splat(-88.0f), x);
  const vf biased = xc * 1.44269504088896341f + (12582912.0f + 127.0f);
  const vf n = biased - (12582912.0f + 127.0f);
  const vf r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // x - n ln 2, in two steps
  vf p = splat(1.0f / 720);
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * __builtin_bit_cast(vf, __builtin_bit_cast(vi, biased) << 23);
}

// max(x[0, n)); NaN is not seen here (exp_sum lets it through).
template <typename T>
WS_INLINE float block_max(const T* x, int64_t n) {
  vf a = splat(kNegInf), b = a;  // two chains: vmaxps's latency, not its throughput, bounds one
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a = vmax(load(x + i), a);
    b = vmax(load(x + i + W), b);
  }
  for (; i + W <= n; i += W) a = vmax(load(x + i), a);
  if (i < n) a = vmax(load_tail(x + i, n - i, kNegInf), a);
  return lane_max(vmax(a, b));
}

// sum(exp(x - m)) over x[0, n), storing exp(x - m) to y[0, n) unless y is null,
// and prefetching `ahead` (the row's next block, or null) as it goes. One
// accumulator: exp's 14 operations per vector hide the add's latency, and
// AVX2's 16 registers hold the constants without spilling.
template <typename T>
WS_INLINE float exp_sum(const T* x, float* y, int64_t n, float m, const T* ahead) {
  vf a = splat(0.0f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    if (ahead) __builtin_prefetch(ahead + i);
    const vf e = exp_nonpositive(load(x + i) - m);
    if (y) store(y + i, e);
    a += e;
  }
  if (i < n) {
    const vf e = exp_nonpositive(load_tail(x + i, n - i, kNegInf) - m);  // padding gives 0
    if (y) store_tail(y + i, n - i, e);
    a += e;
  }
  return lane_sum(a);
}

// The sum of x[0, n): NaN if any element is NaN (used on blocks with no finite element).
template <typename T>
WS_INLINE float block_sum(const T* x, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += to_float(x[i]);
  return s;
}

// One row of softmax or log_softmax: see the file comment. `scales` holds one
// float per block; `ybuf` holds the unscaled exp values (y itself for float32).
template <bool kLog, typename T>
WS_INLINE void forward_row(const T* x, T* y, int64_t n, float* scales, float* ybuf) {
  float m = kNegInf, s = 0.0f;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const T* xb = x + b * kBlock;
    const int64_t len = min64(kBlock, n - b * kBlock);
    const float bm = block_max(xb, len);
    if (bm > m) {
      s *= __builtin_expf(m - bm);  // 0 while m is -inf
      m = bm;
    }
    scales[b] = m;
    if (m == kNegInf) {
      // Nothing finite yet (a masked prefix): exp(x - m) would be NaN. These
      // entries are 0 whatever comes later; a NaN among them makes the row NaN.
      if (block_sum(xb, len) != block_sum(xb, len)) s = __builtin_nanf("");
      if (!kLog) std::memset(ybuf + b * kBlock, 0, len * sizeof(float));
      continue;
    }
    // For log-softmax only the sum is needed: y = x - m - log(s) comes in the second pass.
    // Rows of more than 2 blocks, whose x and y outgrow L1: the next block comes
    // from memory while exp computes. Measured on the AVX-512 level, one thread,
    // 4M float32: 1024x4096 1.71-1.79 ms without, 1.55-1.62 ms with; but
    // 2048x2048 1.36 ms without, 1.44 ms with, so shorter rows have none.
    const bool prefetch = blocks > 2 && b + 1 < blocks;
    s += exp_sum(xb, kLog ? nullptr : ybuf + b * kBlock, len, m, prefetch ? xb + kBlock : nullptr);
  }
  // A row with no finite maximum (all -inf) ends with m = -inf, s = 0: both
  // passes below then give NaN, as torch does.
  if constexpr (kLog) {
    // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round to m's ulp.
    const float log_s = __builtin_logf(s);
    write_row<false>(y, n, [&](int64_t i, int64_t k) { return (load_n(x + i, k, 0.0f) - m) - log_s; });
    return;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const float* eb = ybuf + b * kBlock;
    const float f = __builtin_expf(scales[b] - m) / s;
    write_row<false>(y + b * kBlock, min64(kBlock, n - b * kBlock),
                       [&](int64_t i, int64_t k) { return load_n(eb + i, k, 0.0f) * f; });
  }
}

// One row of the backward: dx = y * (dy - sum(dy * y)), or for log-softmax
// dx = dy - exp(y) * sum(dy). Two passes; the second finds the row in cache.
// kLog is a template parameter: as a run-time flag GCC computed both forms
// (an exp per element) and selected.
template <bool kLog, bool kStream, typename T>
WS_INLINE void backward_row(const T* dy, const T* y, T* dx, int64_t n) {
  auto term = [](vf d, vf yv) { return kLog ? d : d * yv; };
  vf a = splat(0.0f), b = a;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    a += term(load(dy + i), load(y + i));
    b += term(load(dy + i + W), load(y + i + W));
  }
  for (; i + W <= n; i += W) a += term(load(dy + i), load(y + i));
  if (i < n) a += term(load_tail(dy + i, n - i, 0.0f), load_tail(y + i, n - i, 0.0f));
  const float total = lane_sum(a + b);
  write_row<kStream>(dx, n, [&](int64_t j, int64_t k) {
    const vf d = load_n(dy + j, k, 0.0f), yv = load_n(y + j, k, 0.0f);
    if constexpr (kLog) return d - exp_nonpositive(yv) * total;
    return yv * (d - total);
  });
}


template <bool kLog, typename T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  float* scales = scratch(0, (cols + kBlock - 1) / kBlock + 1);
  float* ybuf = std::is_same_v<T, float> ? nullptr : scratch(1, cols);
  for (int64_t r = 0; r < rows; ++r) {
    T* yr = y + r * cols;
    float* buf = ybuf;
    if constexpr (std::is_same_v<T, float>) buf = yr;
    forward_row<kLog>(x + r * cols, yr, cols, scales, buf);
  }
}

// The forward never streams: measured on an AMD EPYC (Zen 4), streaming y from
// a float32 scratch row took 1.7x-2x as long as writing it in place, where
// the backward's streamed dx took 0.7x-0.8x of the time of cached stores (both
// timed in one process, 4096x1024 and 256x32768, AVX-512 and AVX2 levels).
template <typename T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  (log ? forward_rows<true, T> : forward_rows<false, T>)(x, y, rows, cols);
}

template <bool kLog, bool kStream, typename T>
void backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    backward_row<kLog, kStream>(dy + r * cols, y + r * cols, dx + r * cols, cols);
  }
  if constexpr (kStream) _mm_sfence();
}

template <typename T>
void backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log) {
  // dy, y and dx: stream dx when they cannot all stay in this thread's cache.
  const bool stream = 3 * rows * cols * static_cast<int64_t>(sizeof(T)) > cache_share();
  (log ? (stream ? backward_rows<true, true, T> : backward_rows<true, false, T>)
       : (stream ? backward_rows<false, true, T> : backward_rows<false, false, T>))(dy, y, dx, rows, cols);
}

// float64: three plain passes with libm's exp (precision over speed).
void forward_rows_f64(const double* x, double* y, int64_t rows, int64_t cols, bool log) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    double* yr = y + r * cols;
    double m = -kInf, s = 0.0;
    for (int64_t i = 0; i < cols; ++i) m = xr[i] > m ? xr[i] : m;
    if (m == -kInf) m = std::numeric_limits<double>::quiet_NaN();
    for (int64_t i = 0; i < cols; ++i) s += ::exp(xr[i] - m);
    if (log) {
      const double log_s = ::log(s);
      for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] - m) - log_s;
    } else {
      for (int64_t i = 0; i < cols; ++i) yr[i] = ::exp(xr[i] - m) / s;
    }
  }
}

void backward_rows_f64(const double* dy, const double* y, double* dx, int64_t rows, int64_t cols,
                       bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const double *dyr = dy + r * cols, *yr = y + r * cols;
    double* dxr = dx + r * cols;
    double acc = 0.0;
    for (int64_t i = 0; i < cols; ++i) acc += log ? dyr[i] : dyr[i] * yr[i];
    for (int64_t i = 0; i < cols; ++i) dxr[i] = log ? dyr[i] - ::exp(yr[i]) * acc : yr[i] * (dyr[i] - acc);
  }
}

}  // namespace

extern const LevelKernels kKernels = {
    WS_STR(WS_LEVEL),
    forward_rows<float>,  forward_rows_f64,  forward_rows<Half>,  forward_rows<BFloat16>,
    backward_rows<float>, backward_rows_f64, backward_rows<Half>, backward_rows<BFloat16>,
};

}  // namespace warp_softmax::cpu::WS_LEVEL
