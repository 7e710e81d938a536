// CUDA softmax kernels (see softmax.h). Three tiers, picked by row length:
//
//   cols <= 1024   warp per row: each lane keeps cols/32 values in registers;
//                  max and sum are __shfl_xor_sync butterflies. 4 rows a block.
//   cols <= cached block per row, the row cached in shared memory as float32
//                  (up to the device's opt-in shared memory per block).
//   longer         block per row, online softmax: one pass merges per-thread
//                  (max, sum) pairs, a second writes exp(x - max) / sum.
//
// float16/bfloat16 are computed in float32. Every launch goes on the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "kernels/online_softmax.h"
#include "kernels/softmax.h"

namespace warp_softmax {
namespace {

constexpr int kWarp = 32;
constexpr int kBlockThreads = 512;  // block-per-row kernels
constexpr int kWarpsPerBlock = 4;   // warp-per-row kernels

// The kernels' 16-bit types are layout-compatible with CUDA's.
template <typename T>
struct Device {
  using type = T;
};
template <>
struct Device<Half> {
  using type = __half;
};
template <>
struct Device<BFloat16> {
  using type = __nv_bfloat16;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// max that lets NaN through (fmaxf drops it), so a NaN row gives NaN as on the CPU.
__device__ __forceinline__ float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }

// Block-wide reductions through shared memory (blockDim.x a multiple of 32).
template <bool kIsMax>
__device__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = kIsMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? shared[lane] : (kIsMax ? -FLT_MAX * 2 : 0.0f);
  v = kIsMax ? warp_max(v) : warp_sum(v);
  return v;  // every thread holds the result
}

// ---------------------------------------------------------------- warp per row

template <typename T, int kPerLane, bool kLog>
__global__ void warp_forward(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * cols;
  float v[kPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + i * kWarp;  // coalesced: lanes read consecutive elements
    v[i] = c < cols ? to_float(xr[c]) : -INFINITY;
    m = nan_max(v[i], m);
  }
  m = warp_max(m);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + i * kWarp;
    const float e = c < cols ? __expf(v[i] - m) : 0.0f;
    if (!kLog) v[i] = e;
    s += e;
  }
  s = warp_sum(s);
  const float log_s = kLog ? __logf(s) : 0.0f;
  const float inv = 1.0f / s;
  T* yr = y + row * cols;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + i * kWarp;
    if (c < cols) yr[c] = from_float<T>(kLog ? (v[i] - m) - log_s : v[i] * inv);
  }
}

template <typename T, int kPerLane, bool kLog>
__global__ void warp_backward(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                              int64_t rows, int cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t base = row * cols;
  float g[kPerLane], o[kPerLane];
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + i * kWarp;
    g[i] = c < cols ? to_float(dy[base + c]) : 0.0f;
    o[i] = c < cols ? to_float(y[base + c]) : 0.0f;
    acc += kLog ? g[i] : g[i] * o[i];
  }
  acc = warp_sum(acc);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + i * kWarp;
    if (c < cols) dx[base + c] = from_float<T>(kLog ? g[i] - __expf(o[i]) * acc : o[i] * (g[i] - acc));
  }
}

// ------------------------------------------------- block per row, row in shared memory

template <typename T, bool kLog>
__global__ void block_cached_forward(const T* __restrict__ x, T* __restrict__ y, int cols) {
  extern __shared__ float row_cache[];
  __shared__ float reduce[kWarp];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = to_float(xr[c]);
    row_cache[c] = v;
    m = nan_max(v, m);
  }
  m = block_reduce<true>(m, reduce);
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float e = __expf(row_cache[c] - m);
    if (!kLog) row_cache[c] = e;
    s += e;
  }
  s = block_reduce<false>(s, reduce);
  const float log_s = kLog ? __logf(s) : 0.0f, inv = 1.0f / s;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    yr[c] = from_float<T>(kLog ? (row_cache[c] - m) - log_s : row_cache[c] * inv);
  }
}

// ------------------------------------------------- block per row, online (max, sum)

template <typename T, bool kLog>
__global__ void block_online_forward(const T* __restrict__ x, T* __restrict__ y, int64_t cols) {
  __shared__ float red_m[kWarp], red_s[kWarp];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) online::add(to_float(xr[c]), m, s);
  // Merge the pairs: within each warp, then across warps.
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    online::merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    red_m[warp] = m;
    red_s[warp] = s;
  }
  __syncthreads();
  m = -INFINITY;
  s = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) online::merge(m, s, red_m[w], red_s[w]);
  // An all -inf row: m = -inf, s = 0, and the outputs below are NaN, as torch's.
  const float log_s = kLog ? __logf(s) : 0.0f, inv = 1.0f / s;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = to_float(xr[c]) - m;
    yr[c] = from_float<T>(kLog ? v - log_s : __expf(v) * inv);
  }
}

template <typename T, bool kLog>
__global__ void block_backward(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                               int64_t cols) {
  __shared__ float reduce[kWarp];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  float acc = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = to_float(dy[base + c]);
    acc += kLog ? g : g * to_float(y[base + c]);
  }
  acc = block_reduce<false>(acc, reduce);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = to_float(dy[base + c]), o = to_float(y[base + c]);
    dx[base + c] = from_float<T>(kLog ? g - __expf(o) * acc : o * (g - acc));
  }
}

// ---------------------------------------------------------------- dispatch

// Values per lane for the warp kernels: the smallest power of two covering cols / 32.
int per_lane(int64_t cols) {
  int n = 1;
  while (n * kWarp < cols) n *= 2;
  return n;
}

// The one place run-time choices become template arguments: calls
// launch(kLog, kPerLane) with std::integral_constant arguments, so each
// kernel's launch is written once for both forms and every row length.
template <typename Launch>
cudaError_t dispatch(bool log, int64_t cols, Launch&& launch) {
  auto with_lanes = [&](auto kLog) -> cudaError_t {
    switch (cols <= 1024 ? per_lane(cols) : 0) {  // 0: the block tiers, no per-lane count
      case 1: return launch(kLog, std::integral_constant<int, 1>{});
      case 2: return launch(kLog, std::integral_constant<int, 2>{});
      case 4: return launch(kLog, std::integral_constant<int, 4>{});
      case 8: return launch(kLog, std::integral_constant<int, 8>{});
      case 16: return launch(kLog, std::integral_constant<int, 16>{});
      case 32: return launch(kLog, std::integral_constant<int, 32>{});
      default: return launch(kLog, std::integral_constant<int, 0>{});
    }
  };
  return log ? with_lanes(std::true_type{}) : with_lanes(std::false_type{});
}

dim3 warp_grid(int64_t rows) { return dim3(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock)); }

// The largest row, in floats, that fits the device's opt-in shared memory per block.
int64_t cached_cols_limit() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    return 0;
  }
  return (bytes - static_cast<int>(2 * kWarp * sizeof(float))) / static_cast<int64_t>(sizeof(float));
}

template <typename T>
cudaError_t forward_device(const T* x, T* y, int64_t rows, int64_t cols, bool log, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > 1024 && rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  const int64_t cached_limit = cols > 1024 ? cached_cols_limit() : 0;
  return dispatch(log, cols, [&](auto kLog, auto kPerLane) -> cudaError_t {
    const dim3 grid(static_cast<unsigned>(rows));
    if constexpr (kPerLane > 0) {
      warp_forward<T, kPerLane, kLog><<<warp_grid(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
          x, y, rows, static_cast<int>(cols));
    } else if (cols <= cached_limit) {
      const size_t smem = cols * sizeof(float);
      cudaError_t err = cudaFuncSetAttribute(block_cached_forward<T, kLog>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (err != cudaSuccess) return err;
      block_cached_forward<T, kLog><<<grid, kBlockThreads, smem, stream>>>(x, y, static_cast<int>(cols));
    } else {
      block_online_forward<T, kLog><<<grid, kBlockThreads, 0, stream>>>(x, y, cols);
    }
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t backward_device(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log,
                            cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > 1024 && rows > 0x7fffffff) return cudaErrorInvalidValue;
  return dispatch(log, cols, [&](auto kLog, auto kPerLane) -> cudaError_t {
    if constexpr (kPerLane > 0) {
      warp_backward<T, kPerLane, kLog><<<warp_grid(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
          dy, y, dx, rows, static_cast<int>(cols));
    } else {
      block_backward<T, kLog><<<dim3(static_cast<unsigned>(rows)), kBlockThreads, 0, stream>>>(dy, y, dx, cols);
    }
    return cudaGetLastError();
  });
}

template <typename T>
const typename Device<T>::type* device_ptr(const T* p) {
  return reinterpret_cast<const typename Device<T>::type*>(p);
}
template <typename T>
typename Device<T>::type* device_ptr(T* p) {
  return reinterpret_cast<typename Device<T>::type*>(p);
}

}  // namespace

template <typename T>
int forward_cuda(const T* x, T* y, int64_t rows, int64_t cols, bool log, void* stream) {
  return forward_device(device_ptr(x), device_ptr(y), rows, cols, log, static_cast<cudaStream_t>(stream));
}

template <typename T>
int backward_cuda(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log, void* stream) {
  return backward_device(device_ptr(dy), device_ptr(y), device_ptr(dx), rows, cols, log,
                         static_cast<cudaStream_t>(stream));
}

template int forward_cuda<float>(const float*, float*, int64_t, int64_t, bool, void*);
template int forward_cuda<Half>(const Half*, Half*, int64_t, int64_t, bool, void*);
template int forward_cuda<BFloat16>(const BFloat16*, BFloat16*, int64_t, int64_t, bool, void*);
template int backward_cuda<float>(const float*, const float*, float*, int64_t, int64_t, bool, void*);
template int backward_cuda<Half>(const Half*, const Half*, Half*, int64_t, int64_t, bool, void*);
template int backward_cuda<BFloat16>(const BFloat16*, const BFloat16*, BFloat16*, int64_t, int64_t, bool,
                                     void*);

const char* cuda_error_string(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace warp_softmax
