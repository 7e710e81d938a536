// CPU softmax kernels (see softmax.h).
//
// float32 rows: one online pass reads x block by block, tracking the running
// max m and the sum s of exp(x - m) (rescaled when m grows) and writing
// exp(x - m) to y; a second pass scales each block of y by exp(m_block - m)/s.
// x and y are each read once, and exp runs once per element. The loops are
// plain arithmetic (exp is a polynomial, not a libm call) that GCC vectorises,
// and every row function is compiled for AVX-512, AVX2 and baseline x86-64 with the
// best picked at load time (target_clones). float16/bfloat16 rows are widened
// to float32 scratch rows; float64 uses libm's exp.
#include "kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace warp_softmax {
namespace {

#define WS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// Helpers must be inlined into each clone to be compiled for its instruction set.
#define WS_INLINE inline __attribute__((always_inline))

constexpr int64_t kBlock = 1024;  // elements per online-pass block (4 KiB of float32)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

WS_INLINE float bits_to_float(uint32_t b) { return __builtin_bit_cast(float, b); }
WS_INLINE uint32_t float_to_bits(float f) { return __builtin_bit_cast(uint32_t, f); }

// 16 floats as one GCC vector: one zmm register with AVX-512, two ymm with AVX2,
// four xmm on baseline x86-64. Written with vector types rather than left to the
// auto-vectoriser, which gives up on the exp polynomial's selects and spills
// reduction accumulators to the stack.
constexpr int W = 16;
typedef float vf __attribute__((vector_size(W * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(W * sizeof(float))));

WS_INLINE vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
WS_INLINE void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
WS_INLINE vf splat(float a) { return vf{} + a; }

// The last n < W elements, padded with `pad`, as a vector.
WS_INLINE vf load_tail(const float* p, int64_t n, float pad) {
  float tmp[W];
  for (int j = 0; j < W; ++j) tmp[j] = j < n ? p[j] : pad;
  return load(tmp);
}
WS_INLINE void store_tail(float* p, int64_t n, vf v) {
  float tmp[W];
  store(tmp, v);
  for (int64_t j = 0; j < n; ++j) p[j] = tmp[j];
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

// exp(x) for x <= 0: 2^n * e^r with n = round(x / ln 2) and |r| <= ln(2)/2, e^r
// by Cephes' expf polynomial (about 1 ulp). x is clamped at -88, where n = -127
// makes the scale 2^n's bit pattern 0: the result is exactly 0 there (so
// exp(-inf) = 0, as masked softmax inputs need) with no extra select. NaN stays NaN.
WS_INLINE vf exp_nonpositive(vf x) {
  const vf lo = splat(-88.0f);
  const vf xc = x < lo ? lo : x;
  const vf n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const vf r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;              // x - n ln 2, two steps
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  return p * __builtin_bit_cast(vf, bits);
}

WS_INLINE float block_max(const float* x, int64_t n) {
  vf acc = splat(kNegInf);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf v = load(x + i);
    acc = v > acc ? v : acc;
  }
  if (i < n) {
    const vf v = load_tail(x + i, n - i, kNegInf);
    acc = v > acc ? v : acc;
  }
  return lane_max(acc);
}

// sum(exp(x - m)); exp(x - m) is also stored to y unless y is null.
WS_INLINE float exp_sum(const float* x, float* y, int64_t n, float m) {
  vf acc = splat(0.0f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf e = exp_nonpositive(load(x + i) - m);
    if (y) store(y + i, e);
    acc += e;
  }
  if (i < n) {
    const vf e = exp_nonpositive(load_tail(x + i, n - i, kNegInf) - m);  // padding gives 0
    if (y) store_tail(y + i, n - i, e);
    acc += e;
  }
  return lane_sum(acc);
}

// One row: see the file comment. `scales` holds one float per block.
WS_INLINE void softmax_row_f32(const float* x, float* y, int64_t n, bool log, float* scales) {
  float m = kNegInf, s = 0.0f;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t len = std::min(kBlock, n - b * kBlock);
    const float bm = block_max(x + b * kBlock, len);
    if (bm > m) {
      s *= std::exp(m - bm);  // 0 while m is -inf
      m = bm;
    }
    // For log-softmax only the sum is needed: y = x - m - log(s) comes in the second pass.
    s += exp_sum(x + b * kBlock, log ? nullptr : y + b * kBlock, len, m);
    scales[b] = m;
  }
  if (log) {
    // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round to m's ulp.
    const float log_s = std::log(s);
    int64_t i = 0;
    for (; i + W <= n; i += W) store(y + i, (load(x + i) - m) - log_s);
    for (; i < n; ++i) y[i] = (x[i] - m) - log_s;
    return;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    float* yb = y + b * kBlock;
    const float f = std::exp(scales[b] - m) / s;
    const int64_t len = std::min(kBlock, n - b * kBlock);
    int64_t i = 0;
    for (; i + W <= len; i += W) store(yb + i, load(yb + i) * f);
    for (; i < len; ++i) yb[i] *= f;
  }
}

WS_INLINE void softmax_backward_row_f32(const float* dy, const float* y, float* dx, int64_t n,
                                     bool log) {
  vf acc = splat(0.0f);
  int64_t i = 0;
  if (log) {  // dx = dy - exp(y) * sum(dy)
    for (; i + W <= n; i += W) acc += load(dy + i);
    if (i < n) acc += load_tail(dy + i, n - i, 0.0f);
    const float total = lane_sum(acc);
    for (i = 0; i + W <= n; i += W) store(dx + i, load(dy + i) - exp_nonpositive(load(y + i)) * total);
    if (i < n) {
      const vf d = load_tail(dy + i, n - i, 0.0f) - exp_nonpositive(load_tail(y + i, n - i, 0.0f)) * total;
      store_tail(dx + i, n - i, d);
    }
  } else {  // dx = y * (dy - sum(dy * y))
    for (; i + W <= n; i += W) acc += load(dy + i) * load(y + i);
    if (i < n) acc += load_tail(dy + i, n - i, 0.0f) * load_tail(y + i, n - i, 0.0f);
    const float total = lane_sum(acc);
    for (i = 0; i + W <= n; i += W) store(dx + i, load(y + i) * (load(dy + i) - total));
    for (; i < n; ++i) dx[i] = y[i] * (dy[i] - total);
  }
}

// 16-bit formats, widened to float32 and narrowed back (round to nearest even).
WS_INLINE float to_float(Half h) { return static_cast<float>(__builtin_bit_cast(_Float16, h.bits)); }
WS_INLINE float to_float(BFloat16 h) { return bits_to_float(static_cast<uint32_t>(h.bits) << 16); }
WS_INLINE void from_float(float f, Half* out) {
  out->bits = __builtin_bit_cast(uint16_t, static_cast<_Float16>(f));
}
WS_INLINE void from_float(float f, BFloat16* out) {
  const uint32_t b = float_to_bits(f);
  const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  out->bits = static_cast<uint16_t>(f != f ? ((b >> 16) | 0x40u) : rounded);  // keep NaN a NaN
}

template <typename T>
WS_INLINE void widen(const T* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

template <typename T>
WS_INLINE void narrow(const float* in, T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) from_float(in[i], out + i);
}

// Per-thread scratch: block maxima, and float32 rows for 16-bit inputs.
std::vector<float>& scratch(int which, int64_t n) {
  thread_local std::vector<float> buffers[4];
  if (static_cast<int64_t>(buffers[which].size()) < n) buffers[which].resize(n);
  return buffers[which];
}

WS_CLONES void forward_rows_f32(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  float* scales = scratch(0, (cols + kBlock - 1) / kBlock + 1).data();
  for (int64_t r = 0; r < rows; ++r) softmax_row_f32(x + r * cols, y + r * cols, cols, log, scales);
}

WS_CLONES void backward_rows_f32(const float* dy, const float* y, float* dx, int64_t rows,
                                 int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    softmax_backward_row_f32(dy + r * cols, y + r * cols, dx + r * cols, cols, log);
  }
}

template <typename T>
WS_CLONES void forward_rows_16(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  float* scales = scratch(0, (cols + kBlock - 1) / kBlock + 1).data();
  float* xf = scratch(1, cols).data();
  float* yf = scratch(2, cols).data();
  for (int64_t r = 0; r < rows; ++r) {
    widen(x + r * cols, xf, cols);
    softmax_row_f32(xf, yf, cols, log, scales);
    narrow(yf, y + r * cols, cols);
  }
}

template <typename T>
WS_CLONES void backward_rows_16(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols,
                                bool log) {
  float* dyf = scratch(1, cols).data();
  float* yf = scratch(2, cols).data();
  float* dxf = scratch(3, cols).data();
  for (int64_t r = 0; r < rows; ++r) {
    widen(dy + r * cols, dyf, cols);
    widen(y + r * cols, yf, cols);
    softmax_backward_row_f32(dyf, yf, dxf, cols, log);
    narrow(dxf, dx + r * cols, cols);
  }
}

// float64: three plain passes with libm's exp (precision over speed).
void forward_rows_f64(const double* x, double* y, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * cols;
    double* yr = y + r * cols;
    double m = -std::numeric_limits<double>::infinity(), s = 0.0;
    for (int64_t i = 0; i < cols; ++i) m = xr[i] > m ? xr[i] : m;
    if (m == -std::numeric_limits<double>::infinity()) m = std::numeric_limits<double>::quiet_NaN();
    for (int64_t i = 0; i < cols; ++i) s += std::exp(xr[i] - m);
    if (log) {
      const double log_s = std::log(s);
      for (int64_t i = 0; i < cols; ++i) yr[i] = (xr[i] - m) - log_s;
    } else {
      for (int64_t i = 0; i < cols; ++i) yr[i] = std::exp(xr[i] - m) / s;
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
    for (int64_t i = 0; i < cols; ++i) {
      dxr[i] = log ? dyr[i] - std::exp(yr[i]) * acc : yr[i] * (dyr[i] - acc);
    }
  }
}

}  // namespace

template <>
void forward_cpu<float>(const float* x, float* y, int64_t rows, int64_t cols, bool log) {
  forward_rows_f32(x, y, rows, cols, log);
}
template <>
void forward_cpu<double>(const double* x, double* y, int64_t rows, int64_t cols, bool log) {
  forward_rows_f64(x, y, rows, cols, log);
}
template <>
void forward_cpu<Half>(const Half* x, Half* y, int64_t rows, int64_t cols, bool log) {
  forward_rows_16(x, y, rows, cols, log);
}
template <>
void forward_cpu<BFloat16>(const BFloat16* x, BFloat16* y, int64_t rows, int64_t cols, bool log) {
  forward_rows_16(x, y, rows, cols, log);
}

template <>
void backward_cpu<float>(const float* dy, const float* y, float* dx, int64_t rows, int64_t cols,
                         bool log) {
  backward_rows_f32(dy, y, dx, rows, cols, log);
}
template <>
void backward_cpu<double>(const double* dy, const double* y, double* dx, int64_t rows,
                          int64_t cols, bool log) {
  backward_rows_f64(dy, y, dx, rows, cols, log);
}
template <>
void backward_cpu<Half>(const Half* dy, const Half* y, Half* dx, int64_t rows, int64_t cols,
                        bool log) {
  backward_rows_16(dy, y, dx, rows, cols, log);
}
template <>
void backward_cpu<BFloat16>(const BFloat16* dy, const BFloat16* y, BFloat16* dx, int64_t rows,
                            int64_t cols, bool log) {
  backward_rows_16(dy, y, dx, rows, cols, log);
}

}  // namespace warp_softmax
