// CPU softmax kernels for one x86-64 instruction-set level (see softmax.h).
//
// This file is compiled once per level (kernels/BUILD.bazel, flags in
// tools/copts.bzl): AVX-512 with BF16, AVX-512 (x86-64-v4), AVX2+FMA+F16C
// (x86-64-v3) and baseline x86-64 (SSE2); softmax_cpu.cc picks a level at run
// time. Each compilation uses GCC vector types exactly as wide as its level's
// registers (16, 8 or 4 floats). One source at the native width, rather than
// one wide vector for every level (GCC split 512-bit vectors on AVX2 into
// scalar selects and conversions: 3x slower than torch there) or Highway: the
// kernels need three operations (max, a polynomial exp, sums) that plain
// vector arithmetic expresses, the -inf and NaN semantics of masked rows stay
// in this file rather than in a library's Exp, and the build needs nothing the
// machine images lack. Everything here has internal linkage inside a
// per-level namespace: an inline function shared between levels would be kept
// once by the linker, possibly with another level's instructions.
// tests/vector_code_test.py reads each level's hot loops from the built code.
//
// float32 rows: one online pass reads x block by block, tracking the running
// max m and the sum s of exp(x - m) (rescaled when m grows) and writing
// exp(x - m) to y; a second pass scales each block of y by exp(m_block - m)/s.
// x and y are each read once from memory, and exp runs once per element.
// Rows shorter than 4 vectors instead go W rows at a time through a
// transposed tile (forward_short_rows, and backward_short_rows below W), and
// rows of up to 512 columns two at a time (forward_two_rows).
// float16/bfloat16 rows are widened vector by vector as they are read (F16C's
// vcvtph2ps, a shift for bfloat16); the unscaled exp values go to a float32
// row, narrowed (vcvtps2ph; for bfloat16 AVX-512 BF16's vcvtneps2bf16, or
// round-to-nearest-even integer arithmetic) as the second pass scales them.
// vcvtneps2bf16 flushes subnormal results to zero: below 2^-126, where the
// exp here gives 0 anyway. float64 rows take three plain passes at W/2
// doubles a vector, with an exp within about one ulp (forward_row_f64).
//
// The backward reads dy and y twice per row (a sum, then dx; the second pass
// finds the row in cache) and, when its data is larger than the thread's
// share of the last-level cache (cache_share), writes dx with non-temporal
// stores: memory then sees 2 reads and 1 write per element instead of 2
// reads, a read-for-ownership and a write.
//
// The fused attention form softmax(x * scale + mask) runs the same row
// kernel on a source that forms z = x * scale + mask as each vector is loaded
// (Plain and Scaled below), so z is never written to memory: with inductor,
// BERT's eager attention fuses that sum into its softmax pass too.
//
// The vector primitives (loads, stores, conversions, exp) are in simd_level.h.
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/simd_level.h"
#include "kernels/softmax_cpu_level.h"

namespace warp_softmax::cpu::WS_LEVEL {
namespace {

constexpr int64_t kBlock = 1024;  // elements per online-pass block (4 KiB of float32)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Where a row's softmax input z comes from, read W elements at a time at
// offsets from the row's start: x itself, or x * scale + mask (the attention
// form, kMask false for a scale alone), so the fused operator never writes z.
// Elements are computed as VecOf<T>'s vectors V of scalars E: float32 but for double.
template <typename T>
struct Plain {
  using V = typename VecOf<T>::type;
  using E = typename VecOf<T>::scalar;
  static constexpr int64_t lanes = VecOf<T>::lanes;
  const T* x;
  WS_INLINE V at(int64_t i) const { return load(x + i); }
  WS_INLINE V tail(int64_t i, int64_t n, E pad) const { return load_tail(x + i, n, pad); }
  WS_INLINE E one(int64_t i) const { return to_float(x[i]); }
  WS_INLINE void prefetch(int64_t i) const { __builtin_prefetch(x + i); }
};

template <typename T, bool kMask>
struct Scaled {
  using V = typename VecOf<T>::type;
  using E = typename VecOf<T>::scalar;
  static constexpr int64_t lanes = VecOf<T>::lanes;
  const T* x;
  const T* mask;
  E scale;
  WS_INLINE V at(int64_t i) const {
    if constexpr (kMask) return load(x + i) * scale + load(mask + i);
    return load(x + i) * scale;
  }
  WS_INLINE E one(int64_t i) const {
    if constexpr (kMask) return to_float(x[i]) * scale + to_float(mask[i]);
    return to_float(x[i]) * scale;
  }
  WS_INLINE V tail(int64_t i, int64_t n, E pad) const {
    V v = load_tail(x + i, n, E(0)) * scale;
    if constexpr (kMask) v += load_tail(mask + i, n, E(0));
    return first_lanes(v, n, pad);  // the padding is `pad` for any scale, inf and NaN too
  }
  WS_INLINE void prefetch(int64_t i) const {
    __builtin_prefetch(x + i);
    if constexpr (kMask) __builtin_prefetch(mask + i);
  }
};

template <typename S>
WS_INLINE auto src_n(const S& z, int64_t i, int64_t k, typename S::E pad) {
  return k == S::lanes ? z.at(i) : z.tail(i, k, pad);
}

// max(z[o, o + n)); NaN is not seen here (exp_sum lets it through).
template <typename S>
WS_INLINE auto block_max(const S& z, int64_t o, int64_t n) {
  constexpr int64_t L = S::lanes;
  constexpr typename S::E kLow = -std::numeric_limits<typename S::E>::infinity();
  typename S::V a = typename S::V{} + kLow, b = a;  // two chains: vmaxps's latency, not its throughput, bounds one
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a = vmax(z.at(o + i), a);
    b = vmax(z.at(o + i + L), b);
  }
  for (; i + L <= n; i += L) a = vmax(z.at(o + i), a);
  if (i < n) a = vmax(z.tail(o + i, n - i, kLow), a);
  return lane_max(vmax(a, b));
}

// sum(exp(z - m)) over z[o, o + n), storing exp(z - m) to y[0, n) unless y is
// null. As it goes it prefetches the n elements that follow, in z and (for
// writing) in the output `out` (the block's start in the output row): the
// row's next block, or after its last block the next row's first, so that
// memory works while exp computes. One accumulator: exp's 12 or 13 operations per
// vector hide the add's latency, and AVX2's 16 registers hold its constants
// (GCC reloads m from the stack each vector: a load, which the loop has room for).
template <typename S, typename T>
WS_INLINE float exp_sum(const S& z, int64_t o, float* y, int64_t n, float m, const T* out) {
  vf a = splat(0.0f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    z.prefetch(o + n + i);
    __builtin_prefetch(out + n + i, 1);
    const vf e = exp_nonpositive(z.at(o + i) - m);
    if (y) store(y + i, e);
    a += e;
  }
  if (i < n) {
    const vf e = exp_nonpositive(z.tail(o + i, n - i, kNegInf) - m);  // padding gives 0
    if (y) store_tail(y + i, n - i, e);
    a += e;
  }
  return lane_sum(a);
}

// The sum of z[o, o + n): NaN if any element is NaN (used on blocks with no finite element).
template <typename S>
WS_INLINE float block_sum(const S& z, int64_t o, int64_t n) {
  vf a = splat(0.0f);
  int64_t i = 0;
  for (; i + W <= n; i += W) a += z.at(o + i);
  if (i < n) a += z.tail(o + i, n - i, 0.0f);
  return lane_sum(a);
}

// One row of softmax or log_softmax of z: see the file comment. `scales` holds
// one float per block; `ybuf` holds the unscaled exp values (y itself for float32).
template <bool kLog, typename S, typename T>
WS_INLINE void forward_row(const S& z, T* y, int64_t n, float* scales, float* ybuf) {
  float m = kNegInf, s = 0.0f;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o = b * kBlock;
    const int64_t len = min64(kBlock, n - o);
    const float bm = block_max(z, o, len);
    if (bm > m) {
      // s is 0 until a block has a finite maximum (after one it is >= 1): no exp
      // to rescale it. Two libm expf calls a row (here and the scale below) were
      // a tenth of a 64-column row's time: without them 4096x64 ran 10% (avx2)
      // and 16% (avx512_bf16) faster, 4096x256 3-7% (AMD EPYC Zen 5, one thread,
      // float32, both builds in one process). A NaN s stays NaN either way.
      if (s != 0.0f) s *= __builtin_expf(m - bm);
      m = bm;
    }
    scales[b] = m;
    if (m == kNegInf) {
      // Nothing finite yet (a masked prefix): exp(z - m) would be NaN. These
      // entries are 0 whatever comes later; a NaN among them makes the row NaN.
      const float sum = block_sum(z, o, len);
      if (sum != sum) s = sum;
      if (!kLog) std::memset(ybuf + o, 0, len * sizeof(float));
      continue;
    }
    // Prefetching the next block or row, input and output, while exp computes:
    // measured on an AMD EPYC (Zen 3, avx2 level, one thread, float32, against
    // the same kernel without it in one process) 1.43-1.59x faster at 4096x1024
    // and 2048x2048, 1.13-1.20x at 1024x4096 and 256x32768, unchanged at 64
    // columns and at 512x512 (in cache). Not yet measured on AVX-512: a Zen 4
    // had measured prefetching x alone, faster within rows of 3 blocks or more
    // and slower at 2048x2048.
    // For log-softmax only the sum is needed: y = z - m - log(s) comes in the second pass.
    s += exp_sum(z, o, kLog ? nullptr : ybuf + o, len, m, y + o);
  }
  // A row with no finite maximum (all -inf) ends with m = -inf, s = 0: both
  // passes below then give NaN, as torch does.
  if constexpr (kLog) {
    // (z - m) - log(s), not z - (m + log(s)): m + log(s) would round to m's ulp.
    const float log_s = __builtin_logf(s);
    write_row<false>(y, n, [&](int64_t i, int64_t k) { return (src_n(z, i, k, 0.0f) - m) - log_s; });
    return;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const float* eb = ybuf + b * kBlock;
    // exp(0) for every block from the one that set the row's maximum: one block, for rows up to kBlock.
    const float f = (scales[b] == m ? 1.0f : __builtin_expf(scales[b] - m)) / s;
    write_row<false>(y + b * kBlock, min64(kBlock, n - b * kBlock),
                     [&](int64_t i, int64_t k) { return load_n(eb + i, k, 0.0f) * f; });
  }
}

// Two rows of up to kPairCols columns (one block) at once: forward_row's
// arithmetic for each, with the two rows' exp passes in one loop. A short row
// is a chain of dependent steps (max, a lane reduction, exp, a sum, another
// reduction, a division) that leaves most execution units idle; two
// independent chains fill them. Against forward_row row by row (AMD EPYC Zen
// 5, one thread, float32, both builds in one process, two runs): at avx2 and
// avx512_bf16, 4096x64 25-35% and 32-36% faster, 4096x128 12-20% and 17-19%,
// 4096x256 4-9% and 3-9%, 4096x512 8-9% and -2 to +5%. At 1024 columns, rows
// that stream from memory, a first version ran 3% and 26% slower (it lacked
// forward_row's output prefetch): hence kPairCols. A row with no finite
// maximum needs none of forward_row's care for masked blocks: its one block
// is all of it, and z - m is NaN, so the row is NaN, as forward_row and torch
// make it. `buf0`/`buf1`: as forward_row's ybuf.
constexpr int64_t kPairCols = kBlock / 2;

template <bool kLog, typename S, typename T>
WS_INLINE void forward_two_rows(const S& z0, const S& z1, T* y0, T* y1, int64_t n, float* buf0,
                                float* buf1) {
  const float m0 = block_max(z0, 0, n), m1 = block_max(z1, 0, n);
  vf a0 = splat(0.0f), a1 = a0;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    z0.prefetch(2 * n + i);  // the next pair of rows
    z1.prefetch(2 * n + i);
    const vf e0 = exp_nonpositive(z0.at(i) - m0), e1 = exp_nonpositive(z1.at(i) - m1);
    if (!kLog) {
      store(buf0 + i, e0);
      store(buf1 + i, e1);
    }
    a0 += e0;
    a1 += e1;
  }
  if (i < n) {  // the padding gives 0
    const vf e0 = exp_nonpositive(z0.tail(i, n - i, kNegInf) - m0);
    const vf e1 = exp_nonpositive(z1.tail(i, n - i, kNegInf) - m1);
    if (!kLog) {
      store_tail(buf0 + i, n - i, e0);
      store_tail(buf1 + i, n - i, e1);
    }
    a0 += e0;
    a1 += e1;
  }
  const float s0 = lane_sum(a0), s1 = lane_sum(a1);
  if constexpr (kLog) {
    const float l0 = __builtin_logf(s0), l1 = __builtin_logf(s1);
    write_row<false>(y0, n, [&](int64_t i, int64_t k) { return (src_n(z0, i, k, 0.0f) - m0) - l0; });
    write_row<false>(y1, n, [&](int64_t i, int64_t k) { return (src_n(z1, i, k, 0.0f) - m1) - l1; });
  } else {
    const float f0 = 1.0f / s0, f1 = 1.0f / s1;
    write_row<false>(y0, n, [&](int64_t i, int64_t k) { return load_n(buf0 + i, k, 0.0f) * f0; });
    write_row<false>(y1, n, [&](int64_t i, int64_t k) { return load_n(buf1 + i, k, 0.0f) * f1; });
  }
}

// The offsets of consecutive rows' masks (MaskLayout), counted like an odometer.
class MaskRows {
 public:
  MaskRows(const MaskLayout& layout, int64_t row) : layout_(layout) {
    for (int d = layout.ndim - 1; d >= 0; --d) {
      index_[d] = row % layout.sizes[d];
      row /= layout.sizes[d];
      offset_ += index_[d] * layout.strides[d];
    }
  }
  int64_t offset() const { return offset_; }
  void next() {
    for (int d = layout_.ndim - 1; d >= 0; --d) {
      offset_ += layout_.strides[d];
      if (++index_[d] < layout_.sizes[d]) return;
      offset_ -= index_[d] * layout_.strides[d];
      index_[d] = 0;
    }
  }

 private:
  const MaskLayout& layout_;
  int64_t index_[MaskLayout::kMaxDims] = {};
  int64_t offset_ = 0;
};

// Rows shorter than kShortCols, W rows at a time: transposed into a tile in
// which each vector holds one column of the W rows, so that the max, the sum
// and the scaling are plain vertical vector arithmetic. Row by row, a 10-column
// row (a classifier's logits) ran exp on two vectors for 10 elements and
// reduced across lanes twice: 1.6x slower than torch.softmax at 4096x10 (AMD
// EPYC, avx2). The transposes are scalar moves; exp runs once per element.
// Same arithmetic as forward_row (z - m, exp, (z - m) - log(s) or e / s), so
// masked (-inf) entries, all -inf rows and NaN give what it gives. Below 4 W
// columns this was the faster of the two at every width measured (avx2: 3-31).
constexpr int64_t kShortCols = 4 * W;

// The first k rows of a tile (column j of W rows at tile + j * W) to out, row by row.
template <typename T>
WS_INLINE void untranspose(const float* tile, T* out, int64_t k, int64_t cols) {
  for (int64_t l = 0; l < k; ++l) {
    for (int64_t j = 0; j < cols; ++j) from_float(tile[j * W + l], out + l * cols + j);
  }
}

// The sum over columns j < n of col(j) (column j of a tile's W rows), as eight
// interleaved partial sums added as a tree. One running sum loses every term under
// half an ulp of a dominant one, and a row's maximum gives exp(0) = 1: a row of 65.5
// and 36 x 48.75 summed to exactly 1, 32 units of 2^-24 off, where torch's
// lane-parallel sum is 2 off (a hypothesis test found it); here a term waits behind
// at most 7 others.
template <typename F>
WS_INLINE vf column_sum(int64_t n, F col) {
  vf r[8];
  for (vf& v : r) v = splat(0.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int k = 0; k < 8; ++k) r[k] += col(j + k);
  }
  for (int k = 0; k < 8; ++k) {  // unrolled with its branches: r stays in registers
    if (j + k < n) r[k] += col(j + k);
  }
  return ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
}

template <bool kLog, typename T, typename F>
WS_INLINE void forward_short_rows(F source, T* y, int64_t rows, int64_t cols) {
  alignas(64) float tile[kShortCols * W];  // column j of the W rows at tile + j * W
  alignas(64) float ex[kLog ? kShortCols * W : 1];  // log-softmax: exp(z - m), summed (tile keeps z - m)
  float* const e_at = kLog ? ex : tile;
  for (int64_t r0 = 0; r0 < rows; r0 += W) {
    const int64_t k = min64(W, rows - r0);
    for (int64_t l = 0; l < W; ++l) {
      if (l < k) {
        const auto z = source(r0 + l);
        for (int64_t j = 0; j < cols; ++j) tile[j * W + l] = z.one(j);
      } else {  // lanes past the last row: finite, computed and dropped
        for (int64_t j = 0; j < cols; ++j) tile[j * W + l] = 0.0f;
      }
    }
    vf m = splat(kNegInf);
    for (int64_t j = 0; j < cols; ++j) m = vmax(load(tile + j * W), m);
    for (int64_t j = 0; j < cols; ++j) {
      const vf t = load(tile + j * W) - m;
      if (kLog) store(tile + j * W, t);
      store(e_at + j * W, exp_nonpositive(t));
    }
    const vf s = column_sum(cols, [&](int64_t j) { return load(e_at + j * W); });
    const vf f = kLog ? log_at_least_one(s) : splat(1.0f) / s;
    for (int64_t j = 0; j < cols; ++j) {
      const vf v = load(tile + j * W);
      store(tile + j * W, kLog ? v - f : v * f);
    }
    untranspose(tile, y + r0 * cols, k, cols);
  }
}

// The rows' loop: `source(r)` is row r's source (rows counted from 0 here).
template <bool kLog, typename T, typename F>
void forward_rows_of(F source, T* y, int64_t rows, int64_t cols) {
  if (cols < kShortCols) return forward_short_rows<kLog>(source, y, rows, cols);
  float* scales = scratch(0, (cols + kBlock - 1) / kBlock + 1);
  float* ybuf = std::is_same_v<T, float> ? nullptr : scratch(1, 2 * cols);
  // Pairs only while x and y fit in this thread's cache share: from memory, forward_row's
  // prefetching of input and output is worth more than a second chain (on 64 MiB tensors of
  // 64-512 columns pairs ran 22-50% slower in five of six size and level pairs, 12% faster in
  // one; with the output prefetched too, still 8-21% slower at avx512_bf16).
  const bool pairs = cols <= kPairCols && 2 * rows * cols * static_cast<int64_t>(sizeof(T)) <= cache_share();
  int64_t r = 0;
  for (; pairs && r + 2 <= rows; r += 2) {
    T* y0 = y + r * cols;
    float* buf0 = ybuf;
    if constexpr (std::is_same_v<T, float>) buf0 = y0;
    const auto z0 = source(r);  // in order: a masked source counts rows forward
    forward_two_rows<kLog>(z0, source(r + 1), y0, y0 + cols, cols, buf0, buf0 + cols);
  }
  for (; r < rows; ++r) {
    T* yr = y + r * cols;
    float* buf = ybuf;
    if constexpr (std::is_same_v<T, float>) buf = yr;
    forward_row<kLog>(source(r), yr, cols, scales, buf);
  }
}

// The forward never streams: measured on an AMD EPYC (Zen 4), streaming y from
// a float32 scratch row took 1.7x-2x as long as writing it in place, where
// the backward's streamed dx took 0.7x-0.8x of the time of cached stores (both
// timed in one process, 4096x1024 and 256x32768, AVX-512 and AVX2 levels).
template <typename T>
void forward_rows(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  auto source = [&](int64_t r) { return Plain<T>{x + r * cols}; };
  log ? forward_rows_of<true>(source, y, rows, cols) : forward_rows_of<false>(source, y, rows, cols);
}

template <typename T>
void forward_masked(const T* x, const T* mask, const MaskLayout& layout, double scale, T* y,
                    int64_t first_row, int64_t rows, int64_t cols) {
  const float s = static_cast<float>(scale);
  if (!mask) {
    forward_rows_of<false>([&](int64_t r) { return Scaled<T, false>{x + r * cols, nullptr, s}; }, y,
                           rows, cols);
    return;
  }
  MaskRows at(layout, first_row);
  int64_t next = 0;  // the row `at` stands at
  forward_rows_of<false>(
      [&](int64_t r) {
        for (; next < r; ++next) at.next();
        return Scaled<T, true>{x + r * cols, mask + at.offset(), s};
      },
      y, rows, cols);
}

// One row of the backward: dx = y * (dy - sum(dy * y)), or for log-softmax
// dx = dy - exp(y) * sum(dy). Two passes; the second finds the row in cache.
// kLog is a template parameter: as a run-time flag GCC computed both forms
// (an exp per element) and selected.
template <bool kLog, bool kStream, typename T>
WS_INLINE void backward_row(const T* dy, const T* y, T* dx, int64_t n) {
  using V = typename VecOf<T>::type;
  using E = typename VecOf<T>::scalar;
  constexpr int64_t L = VecOf<T>::lanes;
  auto term = [](V d, V yv) { return kLog ? d : d * yv; };
  V a = V{}, b = a;
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    a += term(load(dy + i), load(y + i));
    b += term(load(dy + i + L), load(y + i + L));
  }
  for (; i + L <= n; i += L) a += term(load(dy + i), load(y + i));
  if (i < n) a += term(load_tail(dy + i, n - i, E(0)), load_tail(y + i, n - i, E(0)));
  const E total = lane_sum(a + b);
  // When the data come from memory (kStream: larger than the cache share), the
  // next row's dy and y are fetched while this row's dx is computed, for rows
  // whose dy and y fit in L1 (32 KiB) together; a longer next row would evict
  // this one before the pass below reads it. Measured on an AMD EPYC (Zen 3,
  // avx2, float32, one thread): 1.16x faster at 1024 to 4096 columns; on a
  // Zen 5 1.16x at 1024x4096. From the last-level cache the hardware keeps up
  // alone and the prefetches only take load slots: on the Zen 5 at avx2,
  // 4 MiB a tensor, 256 to 2048 columns, 1.07x-1.21x faster without them
  // (neutral at avx512), each against the other in one process.
  const bool ahead = kStream && 2 * n * static_cast<int64_t>(sizeof(T)) <= (32 << 10);
  write_row<kStream>(dx, n, [&](int64_t j, int64_t k) {
    if (ahead) {
      __builtin_prefetch(dy + n + j);
      __builtin_prefetch(y + n + j);
    }
    const V d = load_n(dy + j, k, 0), yv = load_n(y + j, k, 0);
    if constexpr (kLog) return d - exp_any(yv) * total;
    return yv * (d - total);
  });
}

template <bool kLog, bool kStream, typename T>
void backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    backward_row<kLog, kStream>(dy + r * cols, y + r * cols, dx + r * cols, cols);
  }
  if constexpr (kStream) _mm_sfence();
}

// Rows shorter than one vector, W at a time in transposed tiles, as
// forward_short_rows (row by row: 2x slower than torch's at 4096x3). From W
// columns up the row loop is faster: the backward's arithmetic is too light to
// pay for transposing dy and y (avx2, 4096x10: 100 against 56 us).
template <bool kLog, typename T>
void backward_short_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols) {
  alignas(64) float tdy[W * W], ty[W * W];  // column j of the W rows at + j * W
  for (int64_t r0 = 0; r0 < rows; r0 += W) {
    const int64_t k = min64(W, rows - r0);
    for (int64_t l = 0; l < W; ++l) {
      const int64_t off = (r0 + (l < k ? l : 0)) * cols;  // lanes past the last row: a copy, dropped
      for (int64_t j = 0; j < cols; ++j) {
        tdy[j * W + l] = to_float(dy[off + j]);
        ty[j * W + l] = to_float(y[off + j]);
      }
    }
    const vf total = column_sum(cols, [&](int64_t j) {
      const vf d = load(tdy + j * W);
      return kLog ? d : d * load(ty + j * W);
    });
    for (int64_t j = 0; j < cols; ++j) {
      const vf d = load(tdy + j * W), yv = load(ty + j * W);
      store(tdy + j * W, kLog ? d - exp_any(yv) * total : yv * (d - total));
    }
    untranspose(tdy, dx + r0 * cols, k, cols);
  }
}

template <typename T>
void backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log) {
  if constexpr (!std::is_same_v<T, double>) {  // float64 rows are never transposed
    if (cols < W) {
      return log ? backward_short_rows<true>(dy, y, dx, rows, cols)
                 : backward_short_rows<false>(dy, y, dx, rows, cols);
    }
  }
  // dy, y and dx: stream dx when they cannot all stay in this thread's cache.
  const bool stream = 3 * rows * cols * static_cast<int64_t>(sizeof(T)) > cache_share();
  (log ? (stream ? backward_rows<true, true, T> : backward_rows<true, false, T>)
       : (stream ? backward_rows<false, true, T> : backward_rows<false, false, T>))(dy, y, dx, rows, cols);
}

// float64 rows: three passes (max; exp(z - m) stored to y and summed; the
// scaling), the second and third reading the row from cache, where the float32
// path's online blocks read x once: float64 is the precision path, and its exp
// costs more than a reread.
template <bool kLog, typename S>
WS_INLINE void forward_row_f64(const S& z, double* y, int64_t n) {
  constexpr double kNegInfD = -std::numeric_limits<double>::infinity();
  double m = block_max(z, 0, n);
  // All -inf: z - m would be -inf - -inf = NaN anyway; NaN here says so for every element, as torch.
  if (m == kNegInfD) m = std::numeric_limits<double>::quiet_NaN();
  // The sum in chunks of kChunk elements, each summed in its own vector, the chunks' sums added
  // with Kahan's compensation: one running sum a lane over a row of 4000 terms (2000 a lane at
  // baseline) made its largest output 18 ulps off, where torch's was 2; with chunks added plainly,
  // a row of 32768 with one dominant term was 50 ulps off at baseline (torch's 370).
  constexpr int64_t kChunk = 256;
  const int64_t whole = n - n % WD;
  vd s = vd{}, lost = vd{};  // lost: what the additions to s rounded away, negated
  for (int64_t c = 0; c < whole; c += kChunk) {
    const int64_t end = min64(whole, c + kChunk);
    vd part = vd{};
    for (int64_t i = c; i < end; i += WD) {
      const vd e = exp_nonpositive(z.at(i) - m);
      if (!kLog) store(y + i, e);
      part += e;
    }
    if (c == 0) {  // (rows of one chunk, 64x10 among them, skip the compensation: 10% of their time)
      s = part;
    } else {
      const vd v = part - lost, t = s + v;
      lost = (t - s) - v;
      s = t;
    }
  }
  vd tail = vd{};  // kept for the last pass
  if (whole < n) {
    tail = exp_nonpositive(z.tail(whole, n - whole, kNegInfD) - m);  // padding gives 0
    s += tail;
  }
  const double sum = lane_sum(s - lost);
  if constexpr (kLog) {
    const double log_s = ::log(sum);
    write_row<false>(y, n, [&](int64_t j, int64_t k) { return (src_n(z, j, k, 0.0) - m) - log_s; });
  } else {
    const double inv = 1.0 / sum;  // a multiply, as torch's: vdivpd took about a quarter of a 64x64 row's time
    write_row<false>(y, n, [&](int64_t j, int64_t k) { return (k == WD ? load(y + j) : tail) * inv; });
  }
}

void forward_rows_f64(const double* x, double* y, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const Plain<double> z{x + r * cols};
    log ? forward_row_f64<true>(z, y + r * cols, cols) : forward_row_f64<false>(z, y + r * cols, cols);
  }
}

void forward_masked_f64(const double* x, const double* mask, const MaskLayout& layout, double scale,
                        double* y, int64_t first_row, int64_t rows, int64_t cols) {
  if (!mask) {
    for (int64_t r = 0; r < rows; ++r) {
      forward_row_f64<false>(Scaled<double, false>{x + r * cols, nullptr, scale}, y + r * cols, cols);
    }
    return;
  }
  MaskRows at(layout, first_row);
  for (int64_t r = 0; r < rows; ++r, at.next()) {
    forward_row_f64<false>(Scaled<double, true>{x + r * cols, mask + at.offset(), scale}, y + r * cols, cols);
  }
}

}  // namespace

#define WS_STR2(x) #x
#define WS_STR(x) WS_STR2(x)

extern const LevelKernels kKernels = {
    WS_STR(WS_LEVEL),
    forward_rows<float>,  forward_rows_f64,  forward_rows<Half>,  forward_rows<BFloat16>,
    forward_masked<float>, forward_masked_f64, forward_masked<Half>, forward_masked<BFloat16>,
    backward_rows<float>, backward_rows<double>, backward_rows<Half>, backward_rows<BFloat16>,
};

}  // namespace warp_softmax::cpu::WS_LEVEL
