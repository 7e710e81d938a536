// The vector primitives of one x86-64 level, for softmax_cpu_level.cc: GCC
// vector types as wide as the level's registers (W floats or WD doubles),
// loads and stores that widen and narrow float16/bfloat16, non-temporal
// stores, and exp.
// Which level comes from the compiler's flags (tools/copts.bzl). Everything
// is in the level's namespace with internal linkage (see softmax_cpu_level.cc):
// include this from that file only.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/softmax.h"

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
// float64 rows: the same registers, half as many lanes.
constexpr int WD = W / 2;
typedef double vd __attribute__((vector_size(W * 4)));
typedef int64_t vl __attribute__((vector_size(W * 4)));

WS_INLINE vf splat(float a) { return vf{} + a; }

// The vector an element type is computed in, its lanes and its scalar: float32
// for float and the 16-bit formats, float64 for double.
template <typename T>
struct VecOf {
  using type = vf;
  using scalar = float;
  static constexpr int lanes = W;
};
template <>
struct VecOf<double> {
  using type = vd;
  using scalar = double;
  static constexpr int lanes = WD;
};

// Scalar conversions to the computation type, for tails and the baseline level's float16.
WS_INLINE double to_float(double d) { return d; }
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
WS_INLINE vd load(const double* p) {
  vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
WS_INLINE void store(double* p, vd v) { std::memcpy(p, &v, sizeof v); }

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
#else
  const vu b = __builtin_bit_cast(vu, v);
  const vu rounded = b + 0x7FFFu + ((b >> 16) & 1u);  // the result in the upper 16 bits
#if defined(__AVX512F__)
  // The upper halves gathered by one vpermw (AVX-512 BW). A shift and vpmovdw took
  // 1.07x torch's time for a bfloat16 backward at 4096x64 (Intel Xeon, AVX-512
  // without BF16, one thread, paired rounds), this 0.99x: those rows are mostly
  // conversions.
  const __m512i odd_words = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                             31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return __builtin_bit_cast(
      vh, _mm512_castsi512_si256(_mm512_permutexvar_epi16(odd_words, __builtin_bit_cast(__m512i, rounded))));
#elif defined(__AVX2__)
  const vu r = rounded >> 16;  // < 2^16: packing cannot saturate
  const __m256i packed = _mm256_packus_epi32(__builtin_bit_cast(__m256i, r), __builtin_bit_cast(__m256i, r));
  return __builtin_bit_cast(vh, _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
#else
  // SSE2 packs with signed saturation only: the upper halves, sign-extended.
  const __m128i low = _mm_srai_epi32(__builtin_bit_cast(__m128i, rounded), 16);
  return __builtin_bit_cast(vh, _mm_cvtsi128_si64(_mm_packs_epi32(low, low)));
#endif
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

// A non-temporal store of one vector's elements (W, or WD doubles) at a p
// aligned to the vector: the line goes to memory without being read first or
// kept in the caches.
WS_INLINE void stream(float* p, vf v) {
#if defined(__AVX512F__)
  _mm512_stream_ps(p, v);
#elif defined(__AVX2__)
  _mm256_stream_ps(p, v);
#else
  _mm_stream_ps(p, v);
#endif
}
WS_INLINE void stream(double* p, vd v) {
#if defined(__AVX512F__)
  _mm512_stream_pd(p, v);
#elif defined(__AVX2__)
  _mm256_stream_pd(p, v);
#else
  _mm_stream_pd(p, v);
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

WS_INLINE vi lane_index() {
  vi i;
  for (int j = 0; j < W; ++j) i[j] = j;  // a constant after folding
  return i;
}
WS_INLINE vl lane_index_d() {  // the same for float64's WD lanes
  vl i;
  for (int j = 0; j < WD; ++j) i[j] = j;
  return i;
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
#if defined(__AVX2__)
// float32 tails as one masked load or store (masked-off lanes never fault): the
// loops above build the vector lane by lane and reload it through the stack,
// which made a row whose length is not a multiple of W cost about twice a row of
// whole vectors (AMD EPYC, avx2: 4096x17 took 402 us, 4096x16 203 us).
template <>
WS_INLINE vf load_tail(const float* p, int64_t n, float pad) {
#if defined(__AVX512F__)
  return _mm512_mask_loadu_ps(splat(pad), static_cast<__mmask16>((1u << n) - 1), p);
#else
  const vi live = lane_index() < static_cast<int32_t>(n);
  const vf v = _mm256_maskload_ps(p, __builtin_bit_cast(__m256i, live));
  return live ? v : splat(pad);
#endif
}
template <>
WS_INLINE void store_tail(float* p, int64_t n, vf v) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
#else
  _mm256_maskstore_ps(p, __builtin_bit_cast(__m256i, lane_index() < static_cast<int32_t>(n)), v);
#endif
}
#endif

// float64 tails: as float32's.
WS_INLINE vd load_tail(const double* p, int64_t n, double pad) {
#if defined(__AVX512F__)
  return _mm512_mask_loadu_pd(vd{} + pad, static_cast<__mmask8>((1u << n) - 1), p);
#elif defined(__AVX2__)
  const vl live = lane_index_d() < n;
  const vd v = _mm256_maskload_pd(p, __builtin_bit_cast(__m256i, live));
  return live ? v : vd{} + pad;
#else
  return vd{p[0], pad};  // n = 1
#endif
}
WS_INLINE void store_tail(double* p, int64_t n, vd v) {
#if defined(__AVX512F__)
  _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << n) - 1), v);
#elif defined(__AVX2__)
  _mm256_maskstore_pd(p, __builtin_bit_cast(__m256i, lane_index_d() < n), v);
#else
  p[0] = v[0];  // n = 1
#endif
}

// v's first n lanes, then `pad`.
WS_INLINE vf first_lanes(vf v, int64_t n, float pad) {
  return lane_index() < static_cast<int32_t>(n) ? v : splat(pad);
}
WS_INLINE vd first_lanes(vd v, int64_t n, double pad) { return lane_index_d() < n ? v : vd{} + pad; }

// Elements [0, k) at p, k <= the lanes of T's vector, padded with `pad` when fewer.
template <typename T>
WS_INLINE auto load_n(const T* p, int64_t k, typename VecOf<T>::scalar pad) {
  return k == VecOf<T>::lanes ? load(p) : load_tail(p, k, pad);
}

WS_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// out[0, n) = value(i, k) for each run of k <= L elements at i, L the lanes of
// T's vector (k = L but for the row's ends). kStream: with non-temporal stores
// (the caller ends with an sfence), for outputs too large to be read back from
// the caches; the row's unaligned head is written normally.
template <bool kStream, typename T, typename F>
WS_INLINE void write_row(T* out, int64_t n, F value) {
  constexpr int64_t L = VecOf<T>::lanes;
  int64_t i = 0;
  if constexpr (kStream) {
    constexpr uintptr_t bytes = L * sizeof(T);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(out);
    if (addr % sizeof(T) == 0) {
      const int64_t head = min64(n, static_cast<int64_t>((bytes - addr % bytes) % bytes / sizeof(T)));
      if (head) store_tail(out, head, value(0, head));
      for (i = head; i + L <= n; i += L) stream(out + i, value(i, L));
    }
  }
  for (; i + L <= n; i += L) store(out + i, value(i, L));
  if (i < n) store_tail(out + i, n - i, value(i, n - i));
}

// Across the lanes, as a tree of halving shuffles: a lane-by-lane loop is a chain of
// W dependent scalar operations (about 25 cycles at W = 8), once or twice per row,
// which rows of a few vectors (32-64 columns) wait on. `op` combines two __m128;
// NaN lanes: see vmax.
template <typename Op>
WS_INLINE float lane_reduce(vf v, Op op) {
#if defined(__AVX512F__)
  // (x0 op x2) op (x1 op x3) over the four 128-bit quarters: the 256-bit halves, then theirs
  __m128 q = op(op(_mm512_castps512_ps128(v), _mm512_extractf32x4_ps(v, 2)),
                op(_mm512_extractf32x4_ps(v, 1), _mm512_extractf32x4_ps(v, 3)));
#elif defined(__AVX2__)
  __m128 q = op(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
#else
  __m128 q = v;
#endif
  q = op(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(op(q, _mm_shuffle_ps(q, q, 1)));
}
WS_INLINE float lane_max(vf v) {
  return lane_reduce(v, [](__m128 a, __m128 b) { return _mm_max_ps(a, b); });
}
WS_INLINE float lane_sum(vf v) {
  return lane_reduce(v, [](__m128 a, __m128 b) { return _mm_add_ps(a, b); });
}
// The same for float64; `op` combines two __m128d.
template <typename Op>
WS_INLINE double lane_reduce(vd v, Op op) {
#if defined(__AVX512F__)
  const __m256d h = _mm512_castpd512_pd256(v), g = _mm512_extractf64x4_pd(v, 1);
  __m128d q = op(op(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(g, 0)),
                 op(_mm256_extractf128_pd(h, 1), _mm256_extractf128_pd(g, 1)));
#elif defined(__AVX2__)
  __m128d q = op(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
#else
  __m128d q = v;
#endif
  return _mm_cvtsd_f64(op(q, _mm_unpackhi_pd(q, q)));
}
WS_INLINE double lane_max(vd v) {
  return lane_reduce(v, [](__m128d a, __m128d b) { return _mm_max_pd(a, b); });
}
WS_INLINE double lane_sum(vd v) {
  return lane_reduce(v, [](__m128d a, __m128d b) { return _mm_add_pd(a, b); });
}
// a > b ? a : b, as one vmaxps: NaN in a is dropped. Written as the select, GCC made
// some (the exp's clamp) a compare and a blend.
WS_INLINE vf vmax(vf a, vf b) {
#if defined(__AVX512F__)
  return _mm512_max_ps(a, b);
#elif defined(__AVX__)
  return _mm256_max_ps(a, b);
#else
  return _mm_max_ps(a, b);
#endif
}
WS_INLINE vd vmax(vd a, vd b) {
#if defined(__AVX512F__)
  return _mm512_max_pd(a, b);
#elif defined(__AVX__)
  return _mm256_max_pd(a, b);
#else
  return _mm_max_pd(a, b);
#endif
}

// a * b + c, rounded once where the level has FMA (the kernels are built with
// -ffp-contract=off: tools/copts.bzl), twice at baseline.
WS_INLINE vf madd(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}
WS_INLINE vf madd(vf a, vf b, float c) { return madd(a, b, splat(c)); }
WS_INLINE vd madd(vd a, vd b, double c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_pd(a, b, vd{} + c);
#elif defined(__FMA__)
  return _mm256_fmadd_pd(a, b, vd{} + c);
#else
  return a * b + c;
#endif
}

// exp(x) for x <= 0. x is clamped at -88 (NaN passes the clamp), and the
// power of two 2^k is built from the low bits of a float to which 1.5 * 2^23
// plus the exponent bias was added: shifted into the exponent field they are
// exactly 0 at the clamp, so exp(-inf) = 0 as masked softmax inputs need, with
// no select. Most of the hot loops' arithmetic.
//
// AVX2 and AVX-512: 2^(n/W) * e^r with n = round(W x / ln 2), |r| <= ln(2)/2W:
// 2^(n/W) is 2^k (k = floor(n/W)) times 2^(j/W), j = n mod W, read from a
// register of W entries by one vpermps (it takes the index's low bits), and
// e^r a degree-3 polynomial fitted for least maximum relative error (2.5e-8
// at W = 8, 1.6e-9 at W = 16, in exact arithmetic). Against the degree-5 form
// below: two multiply-adds fewer and a shorter chain. AVX2: 3-6% less time
// for the forward pass (AMD EPYC Zen 3, 4x1024 to 256x32768, both builds in
// one process with their loops aligned alike), over every 16th float32 in
// [-87.3, 0] against double exp a maximum error of 1.93 ulp and a mean of
// 0.078 (degree 5: 2.00 and 0.096). AVX-512 (16 entries): an exp-and-sum loop
// over a row in L1 took 6-9% less time (AMD EPYC Zen 4, one thread, both forms
// in one binary), the whole forward on rows in L2 0-3% (within the noise of
// separate processes), and over the same floats max 1.64 ulp, mean 0.076.
// Results are 0 below about -87.4 (2^k's exponent field is 0), where exp is
// under 1.2e-38.
//
// Baseline (SSE2 has no variable permute): 2^n * e^r with n = round(x / ln 2),
// |r| <= ln(2)/2, e^r a degree-5 polynomial fitted for least maximum relative
// error (9.2e-8 in exact arithmetic); a degree-6 Taylor polynomial, one FMA
// more, was less accurate. 12 vector operations per vector (the clamp one
// vmaxps: see vmax), 9 of them on the multiply pipes; the table form has 13,
// 8 on those pipes.
WS_INLINE vf exp_nonpositive(vf x) {
  const vf xc = vmax(splat(-88.0f), x);
#if defined(__AVX2__)
  constexpr float kShift = 12582912.0f + 127 * W;  // low bits of the sum: n + 127 W
  const vf biased = madd(xc, splat(W * 1.44269504088896341f), kShift);
  const vf n = biased - kShift;
  const vi bits = __builtin_bit_cast(vi, biased);
#if defined(__AVX512F__)
  // x - n ln(2)/16, in two steps (ln(2)/16's high part has 9 bits: n times it is exact)
  const vf r = madd(n, splat(1.3262152e-05f), madd(n, splat(-0.0433349609375f), xc));
  vf p = madd(splat(0.16666721f), r, 0.50001615f);
  const vf two_j = _mm512_permutexvar_ps(  // 2^(j/16), j = 0..15
      __builtin_bit_cast(__m512i, bits),
      _mm512_setr_ps(1.0f, 1.0442737824274138f, 1.0905077326652577f, 1.1387886347566916f,
                     1.189207115002721f, 1.2418578120734840f, 1.2968395546510096f, 1.3542555469368927f,
                     1.4142135623730951f, 1.4768261459394993f, 1.5422108254079407f, 1.6104903319492543f,
                     1.681792830507429f, 1.7562521603732995f, 1.8340080864093424f, 1.9152065613971474f));
  const vf two_k = __builtin_bit_cast(vf, (bits >> 4) << 23);  // (k + 127) << 23: 2^k
#else
  const vf r = madd(n, splat(2.6524305e-05f), madd(n, splat(-0.086669921875f), xc));  // x - n ln(2)/8
  vf p = madd(splat(0.16664298f), r, 0.50006479f);
  const vf two_j = _mm256_permutevar8x32_ps(  // 2^(j/8), j = 0..7
      _mm256_setr_ps(1.0f, 1.0905077326652577f, 1.189207115002721f, 1.2968395546510096f,
                     1.4142135623730951f, 1.5422108254079407f, 1.681792830507429f, 1.8340080864093424f),
      __builtin_bit_cast(__m256i, bits));
  const vf two_k = __builtin_bit_cast(vf, (bits >> 3) << 23);
#endif
  p = madd(p, r, 1.0f);
  p = madd(p, r, 1.0f);
  return p * (two_j * two_k);
#else
  const vf biased = madd(xc, splat(1.44269504088896341f), 12582912.0f + 127.0f);
  const vf n = biased - (12582912.0f + 127.0f);
  const vf r = madd(n, splat(2.12194440e-4f), madd(n, splat(-0.693359375f), xc));  // x - n ln 2, in two steps
  vf p = splat(0.008290303211734644f);
  p = madd(p, r, 0.041897924234802826f);
  p = madd(p, r, 0.1666763629456615f);
  p = madd(p, r, 0.49999149569428636f);
  p = madd(p, r, 0.9999997071820533f);
  p = madd(p, r, 1.0f);
  return p * __builtin_bit_cast(vf, __builtin_bit_cast(vi, biased) << 23);
#endif
}

// exp(y) for any y: the log-softmax backward's exp of its saved output, a
// log-probability (<= 0) in any real use, but the operator takes any tensor
// and torch's gives exp(y) for it (inf from ln(FLT_MAX) = 88.72 up). y is
// capped at 88.75 (NaN passes: vminps returns its second operand), where
// exp_nonpositive's 2^n is inf; above it, 2^n wrapped (2e-34 for y = 100).
// Where 2^n is 2^128 and e^r < 1, from y = 88.38 (the table forms: 88.68 at
// AVX2, 88.70 at AVX-512), the result is inf for a finite exp(y) in the last
// half-binade below overflow: splitting 2^n in two factors for those would
// cost this loop 5-8% at 64x64 (a test per vector) against the cap's 2%, for
// inputs no log-softmax makes.
WS_INLINE vf exp_any(vf y) {
#if defined(__AVX512F__)
  return exp_nonpositive(_mm512_min_ps(splat(88.75f), y));
#elif defined(__AVX__)
  return exp_nonpositive(_mm256_min_ps(splat(88.75f), y));
#else
  return exp_nonpositive(_mm_min_ps(splat(88.75f), y));
#endif
}

// exp(x) for x <= 0 in float64, within 0.88 ulp with FMA and 1.15 without
// (baseline; measured against exp in long double: libm's exp is within 0.5,
// the Sleef exp torch's float64 softmax uses within 1.0). Where libm took one call
// an element, the float64 softmax ran 0.34x-0.58x torch's speed (Intel Xeon,
// AVX-512, one thread, 64x64 to 256x32768). 2^n * e^r with n = round(x / ln 2)
// and r = x - n ln 2 in two steps (fdlibm's split: ln2_hi's low 21 bits are 0,
// so n * ln2_hi is exact), |r| <= ln(2)/2, e^r by its Taylor series to r^13
// (truncation 4e-18 relative), by Horner's rule with fused multiply-adds where
// the level has them. 2^n is built from the low bits of a double to which
// 1.5 * 2^52 + n + 1077 was added, as 2^(n + 54), a normal double for n >=
// -1076, times 2^-54: the one rounding of that product gives the subnormal
// results below 2^-1022 that torch's gives. x is clamped at -746.5 (NaN
// passes: see vmax), where n = -1077 and 2^(n + 54) is built as exactly 0, so
// exp(-inf) = 0 with no select and no underflow: an underflowing multiply
// takes a microcode assist on Intel cores, and clamped at -745.2 (a result
// rounded to 0) a 64x10 softmax took 3x as long as 64x16 (each row's padding
// lanes are -inf; Intel Xeon, AVX-512).
WS_INLINE vd exp_nonpositive(vd x) {
  constexpr double kShift = 6755399441055744.0 + 1077;  // 1.5 * 2^52, and the bias of 2^(n + 54)
  const vd xc = vmax(vd{} - 746.5, x);
  const vd biased = xc * 1.4426950408889634 + kShift;
  const vd n = biased - kShift;
  const vd r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  vd p = vd{} + 1.0 / 6227020800.0;  // 1/13!
  p = madd(p, r, 1.0 / 479001600.0);
  p = madd(p, r, 1.0 / 39916800.0);
  p = madd(p, r, 1.0 / 3628800.0);
  p = madd(p, r, 1.0 / 362880.0);
  p = madd(p, r, 1.0 / 40320.0);
  p = madd(p, r, 1.0 / 5040.0);
  p = madd(p, r, 1.0 / 720.0);
  p = madd(p, r, 1.0 / 120.0);
  p = madd(p, r, 1.0 / 24.0);
  p = madd(p, r, 1.0 / 6.0);
  p = madd(p, r, 0.5);
  p = madd(p, r, 1.0);
  p = madd(p, r, 1.0);
  const vd two_n54 = __builtin_bit_cast(vd, __builtin_bit_cast(vl, biased) << 52);
  return p * two_n54 * 0x1p-54;
}

// exp(y) for any float64 y (the log-softmax backward's, as exp_any above): lanes
// above 0, which no log-softmax makes, go to libm one by one.
WS_INLINE vd exp_any(vd y) {
  vd e = exp_nonpositive(y);
#if defined(__AVX512F__)
  const int positive = _mm512_cmp_pd_mask(y, vd{}, _CMP_GT_OQ);
#elif defined(__AVX__)
  const int positive = _mm256_movemask_pd(_mm256_cmp_pd(y, vd{}, _CMP_GT_OQ));
#else
  const int positive = _mm_movemask_pd(_mm_cmpgt_pd(y, vd{}));
#endif
  if (__builtin_expect(positive != 0, 0)) {
    for (int j = 0; j < WD; ++j) e[j] = y[j] > 0 ? ::exp(y[j]) : e[j];
  }
  return e;
}

// log(s) for s >= 1 (a softmax row's sum of exp(z - max), which holds exp(0) = 1),
// W rows' sums at once where libm's logf took one call each. s = 2^e * m with m in
// [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(u) with u = (m - 1) / (m + 1), |u| <= 0.172,
// by its series to u^9 (truncation 2e-9 relative), and e ln 2 in two steps.
// NaN stays NaN (its bits would read as a finite m).
WS_INLINE vf log_at_least_one(vf s) {
  const vi bits = __builtin_bit_cast(vi, s);
  vi e = ((bits >> 23) & 0xff) - 127;
  vf m = __builtin_bit_cast(vf, (bits & 0x007fffff) | 0x3f800000);
  const vi big = m > 1.41421356f;  // -1 where true
  m = big ? m * 0.5f : m;
  e -= big;
  const vf u = (m - 1.0f) / (m + 1.0f), u2 = u * u;
  vf p = splat(1.0f / 9);
  p = madd(p, u2, 1.0f / 7);
  p = madd(p, u2, 1.0f / 5);
  p = madd(p, u2, 1.0f / 3);
  const vf ef = __builtin_convertvector(e, vf);
  const vf series = (u + u) * madd(p, u2, 1.0f);
  const vf log_s = madd(ef, splat(0.693145751953125f), madd(ef, splat(1.428606765330187e-6f), series));
  return s == s ? log_s : s;
}

}  // namespace
}  // namespace warp_softmax::cpu::WS_LEVEL
