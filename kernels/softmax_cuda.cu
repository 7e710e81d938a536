// CUDA softmax kernels (see softmax.h). Three tiers, picked by row length:
//
//   cols <= 1024   warp per row: each lane keeps cols/32 values in registers,
//                  loaded and stored in packs of up to 16 bytes where rows are
//                  aligned; max and sum are __shfl_xor_sync butterflies. 4 rows
//                  a block.
//   row on chip    the row cached in shared memory, in its own format, read
//                  from device memory once (16-byte loads where aligned) and
//                  written once: a copy's traffic. The max (backward: the
//                  sum) is formed from the loaded registers as they are
//                  cached, saving a pass over shared memory. A row over a
//                  block's chunk_bytes is split across a thread-block cluster
//                  (compute capability 9.0+, up to 8 blocks, 16 for the
//                  longest rows where allowed): each block caches and
//                  reduces its chunk, and the blocks exchange their partial
//                  (max, sum) through distributed shared memory. Small chunks
//                  keep several blocks on each multiprocessor, so one block's
//                  loads overlap another's arithmetic and stores; one block per
//                  long row would leave each multiprocessor's loads idle in turn.
//   longer         block per row, online softmax: one pass merges per-thread
//                  (max, sum) pairs, a second writes exp(x - max) / sum.
//
// float16/bfloat16 are computed in float32. Every launch goes on the caller's stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/online_softmax.h"
#include "kernels/softmax.h"

namespace warp_softmax {
namespace {

constexpr int kWarp = 32;
constexpr int kBlockThreads = 512;  // block-per-row kernels
constexpr int kWarpsPerBlock = 4;   // warp-per-row kernels
constexpr int kSMThreads = 2048;    // a multiprocessor's most resident threads
// The cached tier's blocks: their threads, and their target bytes of shared
// memory, such that kSMThreads / threads of them fit in a Hopper's 228 KiB,
// and in its registers at 32 a thread (__launch_bounds__). A 16-bit forward
// does twice the arithmetic a byte, and in smaller blocks more of them overlap
// one another's loads: on an H200, bfloat16 at 4096x32768 took 1.24x a copy's
// time in blocks of 512 threads and 48 KiB, 1.10x in blocks of 256 and 32 KiB
// (float32 no faster that way, and slower in 1 MiB rows).
struct CachedShape {
  int threads;
  int64_t chunk_bytes;
};
template <typename T>
constexpr CachedShape kForwardShape = sizeof(T) == 2 ? CachedShape{256, 32 * 1024} : CachedShape{512, 48 * 1024};
constexpr CachedShape kBackwardShape{512, 48 * 1024};
constexpr int kMaxCluster = 8;    // the portable cluster size
constexpr int kWideCluster = 16;  // Hopper's largest, with the kernel's consent (launch_cached)

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

// max that lets NaN through (fmaxf drops it), so a NaN row gives NaN as on the CPU:
// one instruction from compute capability 8.0.
__device__ __forceinline__ float nan_max(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || a > b) ? a : b;
#endif
}

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

// Merges every thread's online (max, sum) pair (online_softmax.h) across the
// block: within each warp, then across warps. Every thread gets the block's
// pair, merged in the same order.
__device__ void block_merge(float& m, float& s, float2* shared) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    online::merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  }
  __syncthreads();  // `shared` may still be read from a previous merge
  if (threadIdx.x % kWarp == 0) shared[threadIdx.x / kWarp] = make_float2(m, s);
  __syncthreads();
  m = -INFINITY;
  s = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) online::merge(m, s, shared[w].x, shared[w].y);
}

// ---------------------------------------------------------------- warp per row

template <typename T>
constexpr int kPack = 16 / sizeof(T);  // elements in one 16-byte access

template <int kBytes>
struct Bits;
template <>
struct Bits<4> {
  using type = unsigned;
};
template <>
struct Bits<8> {
  using type = uint2;
};
template <>
struct Bits<16> {
  using type = uint4;
};

// kVec elements at p (aligned to kVec * sizeof(T)) to floats, in one access.
template <typename T, int kVec>
__device__ __forceinline__ void load_floats(const T* __restrict__ p, float* out) {
  if constexpr (kVec == 1) {
    out[0] = to_float(*p);
  } else {
    using B = typename Bits<kVec * sizeof(T)>::type;
    const B raw = __ldg(reinterpret_cast<const B*>(p));
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = to_float(reinterpret_cast<const T*>(&raw)[k]);
  }
}

template <typename T, int kVec>
__device__ __forceinline__ void store_floats(T* __restrict__ p, const float* in) {
  if constexpr (kVec == 1) {
    *p = from_float<T>(in[0]);
  } else {
    using B = typename Bits<kVec * sizeof(T)>::type;
    B raw;
#pragma unroll
    for (int k = 0; k < kVec; ++k) reinterpret_cast<T*>(&raw)[k] = from_float<T>(in[k]);
    *reinterpret_cast<B*>(p) = raw;
  }
}

// The warp kernels' lane holds kPerLane elements of its row as packs of kVec
// (kVec > 1 only where rows are aligned to a pack and cols is a multiple of
// it): pack j of lane l starts at column (j * 32 + l) * kVec, so the warp's
// accesses are consecutive (coalesced), each as wide as the pack.
template <int kVec>
__device__ __forceinline__ int pack_column(int j, int lane) {
  return (j * kWarp + lane) * kVec;
}

template <typename T, int kPerLane, int kVec, bool kLog>
__global__ void warp_forward(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const T* xr = x + row * cols;
  float v[kPerLane];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kPerLane / kVec; ++j) {
    const int c = pack_column<kVec>(j, lane);
    if (c < cols) {
      load_floats<T, kVec>(xr + c, v + j * kVec);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[j * kVec + k] = -INFINITY;
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) m = nan_max(v[j * kVec + k], m);
  }
  m = warp_max(m);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane / kVec; ++j) {
    const bool in_row = pack_column<kVec>(j, lane) < cols;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float e = in_row ? online::exp_fast(v[j * kVec + k] - m) : 0.0f;
      if (!kLog) v[j * kVec + k] = e;
      s += e;
    }
  }
  s = warp_sum(s);
  const float log_s = kLog ? __logf(s) : 0.0f;
  const float inv = 1.0f / s;
  T* yr = y + row * cols;
#pragma unroll
  for (int j = 0; j < kPerLane / kVec; ++j) {
    const int c = pack_column<kVec>(j, lane);
    if (c >= cols) continue;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float& o = v[j * kVec + k];
      o = kLog ? (o - m) - log_s : o * inv;
    }
    store_floats<T, kVec>(yr + c, v + j * kVec);
  }
}

template <typename T, int kPerLane, int kVec, bool kLog>
__global__ void warp_backward(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                              int64_t rows, int cols) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t base = row * cols;
  float g[kPerLane], o[kPerLane];
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane / kVec; ++j) {
    const int c = pack_column<kVec>(j, lane);
    if (c < cols) {
      load_floats<T, kVec>(dy + base + c, g + j * kVec);
      load_floats<T, kVec>(y + base + c, o + j * kVec);
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) g[j * kVec + k] = o[j * kVec + k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc += kLog ? g[j * kVec + k] : g[j * kVec + k] * o[j * kVec + k];
  }
  acc = warp_sum(acc);
#pragma unroll
  for (int j = 0; j < kPerLane / kVec; ++j) {
    const int c = pack_column<kVec>(j, lane);
    if (c >= cols) continue;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const int i = j * kVec + k;
      g[i] = kLog ? g[i] - online::exp_fast(o[i]) * acc : o[i] * (g[i] - acc);
    }
    store_floats<T, kVec>(dx + base + c, g + j * kVec);
  }
}

// ------------------------------------- rows cached in shared memory, split across a cluster

// Thread-block clusters exist from compute capability 9.0; the host launches
// the kCluster kernels only where their code was compiled for it
// (plan_cached), so elsewhere their cluster calls trap.
__device__ __forceinline__ unsigned cluster_blocks() {
#if __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().num_blocks();
#else
  __trap();
  return 1;
#endif
}
__device__ __forceinline__ unsigned cluster_rank() {
#if __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().block_rank();
#else
  __trap();
  return 0;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();
#endif
}
// `value` (a __shared__ variable) as block `rank` of this cluster holds it.
template <typename V>
__device__ __forceinline__ V cluster_read(V* value, unsigned rank) {
#if __CUDA_ARCH__ >= 900
  return *cooperative_groups::this_cluster().map_shared_rank(value, rank);
#else
  __trap();
  return *value;
#endif
}

// Every block's `value` combined across the row's cluster, in rank order so
// that each block gets the same result: published in this block's `slot`
// (a __shared__ variable), read from every block's through distributed shared
// memory.
template <typename V, typename Combine>
__device__ __forceinline__ V cluster_combine(V value, V* slot, unsigned blocks, V result, Combine combine) {
  if (threadIdx.x == 0) *slot = value;
  cluster_sync();
  for (unsigned r = 0; r < blocks; ++r) result = combine(result, cluster_read(slot, r));
  cluster_sync();  // no block exits while another still reads its slot
  return result;
}

// Element k of each array's 16-byte pack, as float.
template <typename T, int kArrays>
__device__ __forceinline__ void unpack(const uint4 (&packs)[kArrays], int k, float (&values)[kArrays]) {
#pragma unroll
  for (int a = 0; a < kArrays; ++a) values[a] = to_float(reinterpret_cast<const T*>(&packs[a])[k]);
}

// Copies `len` elements of each of kArrays rows from device memory into shared
// memory, calling visit(values) with each index's kArrays values as float, so
// a row's statistics come from the loaded registers, not another pass over
// shared memory. kVector: every `src` is 16-byte aligned and len a multiple of
// kPack, so each thread moves 16 bytes an access, 4 accesses in flight.
// Thread t handles the same indices here as in map_cached, so it reads back
// only what it wrote itself.
template <typename T, int kArrays, bool kVector, typename Visit>
__device__ __forceinline__ void load_chunk(T* const (&dst)[kArrays], const T* const (&src)[kArrays], int len,
                                           Visit&& visit) {
  if constexpr (kVector) {
    constexpr int kUnroll = 4 / kArrays;
    const int packs = len / kPack<T>;
    for (int base = threadIdx.x; base < packs; base += kUnroll * blockDim.x) {
      uint4 v[kArrays][kUnroll];
#pragma unroll
      for (int a = 0; a < kArrays; ++a)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i = base + u * blockDim.x;
          if (i < packs) v[a][u] = __ldg(reinterpret_cast<const uint4*>(src[a]) + i);
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = base + u * blockDim.x;
        if (i >= packs) break;
        uint4 pack[kArrays];
#pragma unroll
        for (int a = 0; a < kArrays; ++a) reinterpret_cast<uint4*>(dst[a])[i] = pack[a] = v[a][u];
        if constexpr (std::is_invocable_v<Visit, const uint4 (&)[kArrays]>) {
          visit(pack);  // a visitor that takes the packs whole
        } else {
#pragma unroll
          for (int k = 0; k < kPack<T>; ++k) {
            float values[kArrays];
            unpack<T>(pack, k, values);
            visit(values);
          }
        }
      }
    }
  } else {
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      float values[kArrays];
#pragma unroll
      for (int a = 0; a < kArrays; ++a) {
        const T value = src[a][i];
        dst[a][i] = value;
        values[a] = to_float(value);
      }
      visit(values);
    }
  }
}

// f(values) for each index i of the chunk's cached rows (16-byte reads where
// kVector); given `out`, f's results go to out[i] (16 bytes a store where
// kVector), else f only accumulates. Thread t takes the indices load_chunk
// gave it.
template <typename T, int kArrays, bool kVector, typename F, typename Out = std::nullptr_t>
__device__ __forceinline__ void map_cached(T* const (&cache)[kArrays], int len, F f, Out out = nullptr) {
  constexpr bool kStore = !std::is_same_v<Out, std::nullptr_t>;
  if constexpr (kVector) {
    for (int i = threadIdx.x; i < len / kPack<T>; i += blockDim.x) {
      uint4 packs[kArrays], result;
#pragma unroll
      for (int a = 0; a < kArrays; ++a) packs[a] = reinterpret_cast<const uint4*>(cache[a])[i];
#pragma unroll
      for (int k = 0; k < kPack<T>; ++k) {
        float values[kArrays];
        unpack<T>(packs, k, values);
        if constexpr (kStore) {
          reinterpret_cast<T*>(&result)[k] = from_float<T>(f(values));
        } else {
          f(values);
        }
      }
      if constexpr (kStore) reinterpret_cast<uint4*>(out)[i] = result;
    }
  } else {
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      float values[kArrays];
#pragma unroll
      for (int a = 0; a < kArrays; ++a) values[a] = to_float(cache[a][i]);
      if constexpr (kStore) {
        out[i] = from_float<T>(f(values));
      } else {
        f(values);
      }
    }
  }
}

// This block's chunk: a row's `blocks` blocks (its cluster's, in rank order)
// hold `chunk` elements each, the last what is left (or none).
struct Chunk {
  int64_t offset;  // of the chunk's first element in the tensor
  int len;
  unsigned blocks;
};

template <bool kCluster>
__device__ __forceinline__ Chunk chunk_of_block(int64_t cols, int chunk) {
  const unsigned blocks = kCluster ? cluster_blocks() : 1, rank = kCluster ? cluster_rank() : 0;
  const int64_t row = blockIdx.x / blocks, begin = static_cast<int64_t>(rank) * chunk;
  const int len = static_cast<int>(begin < cols ? (cols - begin < chunk ? cols - begin : chunk) : 0);
  return {row * cols + begin, len, blocks};
}

// The max of a chunk as load_chunk reads it: 16-bit values two at a time (an
// exact, NaN-keeping max of the pair type), float32 values one at a time.
template <typename T>
struct ChunkMax {
  float m = -INFINITY;
  __device__ void operator()(const float (&v)[1]) { m = nan_max(v[0], m); }
  __device__ float value() const { return m; }
};
template <typename T, typename T2>
struct PairMax {
  T2 pair{from_float<T>(-INFINITY), from_float<T>(-INFINITY)};
  float m = -INFINITY;  // load_chunk's unaligned path
  __device__ void operator()(const uint4 (&p)[1]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) pair = __hmax2_nan(pair, reinterpret_cast<const T2*>(&p[0])[k]);
  }
  __device__ void operator()(const float (&v)[1]) { m = nan_max(v[0], m); }
  __device__ float value() const { return nan_max(nan_max(to_float(pair.x), to_float(pair.y)), m); }
};
template <>
struct ChunkMax<__half> : PairMax<__half, __half2> {};
template <>
struct ChunkMax<__nv_bfloat16> : PairMax<__nv_bfloat16, __nv_bfloat162> {};

template <typename T, bool kLog, bool kVector, bool kCluster>
__global__ void __launch_bounds__(kForwardShape<T>.threads, kSMThreads / kForwardShape<T>.threads) cached_forward(const T* __restrict__ x, T* __restrict__ y,
                                                                int64_t cols, int chunk) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  __shared__ float reduce[kWarp];
  __shared__ float2 partial;  // this block's (max, sum), for the cluster's other blocks
  T* const cache[1] = {reinterpret_cast<T*>(shared_raw)};
  const Chunk c = chunk_of_block<kCluster>(cols, chunk);
  const T* const src[1] = {x + c.offset};
  // The max as the row is loaded (cheap enough not to hold back the loads in
  // flight; an exp a value there made the bfloat16 forward 1.4x slower on an
  // H200), then the sum over shared memory.
  ChunkMax<T> chunk_max;
  load_chunk<T, 1, kVector>(cache, src, c.len, chunk_max);
  float m = block_reduce<true>(chunk_max.value(), reduce);
  const float shift = online::shift(m);
  float s = 0.0f;
  map_cached<T, 1, kVector>(cache, c.len, [&](const float (&v)[1]) { s += online::exp_fast(v[0] - shift); });
  s = block_reduce<false>(s, reduce);
  if constexpr (kCluster) {
    const float2 row = cluster_combine(make_float2(m, s), &partial, c.blocks, make_float2(-INFINITY, 0.0f),
                                       [](float2 a, float2 b) {
                                         online::merge(a.x, a.y, b.x, b.y);
                                         return a;
                                       });
    m = row.x;
    s = row.y;
  }
  // An all -inf row: m = -inf, s = 0, and the outputs are NaN, as torch's.
  const float log_s = kLog ? __logf(s) : 0.0f, inv = 1.0f / s;
  map_cached<T, 1, kVector>(cache, c.len, [=](const float (&v)[1]) {
    return kLog ? (v[0] - m) - log_s : online::exp_fast(v[0] - m) * inv;
  }, y + c.offset);
}

template <typename T, bool kLog, bool kVector, bool kCluster>
__global__ void __launch_bounds__(kBackwardShape.threads, kSMThreads / kBackwardShape.threads) cached_backward(const T* __restrict__ dy, const T* __restrict__ y,
                                                                 T* __restrict__ dx, int64_t cols, int chunk) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  __shared__ float reduce[kWarp];
  __shared__ float partial;
  // chunk is a multiple of kPack<T>, so the second row starts 16-byte aligned.
  T* const cache[2] = {reinterpret_cast<T*>(shared_raw), reinterpret_cast<T*>(shared_raw) + chunk};
  const Chunk c = chunk_of_block<kCluster>(cols, chunk);
  const T* const src[2] = {dy + c.offset, y + c.offset};
  float acc = 0.0f;
  load_chunk<T, 2, kVector>(cache, src, c.len, [&](const float (&v)[2]) { acc += kLog ? v[0] : v[0] * v[1]; });
  acc = block_reduce<false>(acc, reduce);
  if constexpr (kCluster) {
    acc = cluster_combine(acc, &partial, c.blocks, 0.0f, [](float a, float b) { return a + b; });
  }
  map_cached<T, 2, kVector>(cache, c.len, [=](const float (&v)[2]) {
    return kLog ? v[0] - online::exp_fast(v[1]) * acc : v[1] * (v[0] - acc);
  }, dx + c.offset);
}

// ------------------------------------------------- block per row, online (max, sum)

template <typename T, bool kLog>
__global__ void block_online_forward(const T* __restrict__ x, T* __restrict__ y, int64_t cols) {
  __shared__ float2 pairs[kWarp];
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) online::add(to_float(xr[c]), m, s);
  block_merge(m, s, pairs);
  // An all -inf row: m = -inf, s = 0, and the outputs below are NaN, as torch's.
  const float log_s = kLog ? __logf(s) : 0.0f, inv = 1.0f / s;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = to_float(xr[c]) - m;
    yr[c] = from_float<T>(kLog ? v - log_s : online::exp_fast(v) * inv);
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
    dx[base + c] = from_float<T>(kLog ? g - online::exp_fast(o) * acc : o * (g - acc));
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

// How the cached tier splits rows: `blocks` blocks a row (a cluster when more
// than one) of `chunk` elements each, `smem` bytes of shared memory a block.
struct CachedPlan {
  int blocks = 0;  // 0: rows this long do not fit on chip
  int threads = 0;
  int chunk = 0;
  size_t smem = 0;
  int smem_limit = 0;  // the most dynamic shared memory a cached kernel may ask for here
};

// The kernels' static shared memory (reductions, under 300 bytes), reserved
// from the device's limit.
constexpr int kStaticSmem = 1024;

// Lets `kernel` take `smem` bytes of dynamic shared memory a block and clusters
// of `blocks`. Past 48 KiB, static and dynamic together, a kernel must ask for
// more. It asks for the most any plan here uses (`smem_limit`), the same for
// every call, so threads launching other sizes cannot lower it under each
// other's launches. Past the portable 8 blocks, clusters need its consent.
cudaError_t allow(const void* kernel, int blocks, size_t smem, int smem_limit) {
  if (smem + kStaticSmem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit);
    if (err != cudaSuccess) return err;
  }
  return blocks > kMaxCluster ? cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)
                              : cudaSuccess;
}

// A launch of `grid` blocks of `threads`, `smem` bytes of dynamic shared memory
// each, in clusters of `blocks` where that is more than one. (Not copyable:
// config points at cluster.)
struct ClusterLaunch {
  cudaLaunchAttribute cluster[1];
  cudaLaunchConfig_t config = {};
  ClusterLaunch(int64_t grid, int blocks, int threads, size_t smem, cudaStream_t stream) {
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = static_cast<unsigned>(blocks);
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.gridDim = dim3(static_cast<unsigned>(grid));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = cluster;
    config.numAttrs = blocks > 1 ? 1 : 0;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// Whether `kernel` (a kCluster kernel of `threads` a block) can run clusters
// of `blocks` blocks with `smem` bytes each on this device.
bool clusters_fit(const void* kernel, int blocks, int threads, size_t smem, int smem_limit) {
  if (allow(kernel, blocks, smem, smem_limit) != cudaSuccess) return false;
  const ClusterLaunch launch(blocks, blocks, threads, smem, nullptr);
  int clusters = 0;
  const bool fit = cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config) == cudaSuccess && clusters > 0;
  cudaGetLastError();  // a refusal here is an answer, not the caller's error
  return fit;
}

// For rows of `cols` elements with `arrays` of them cached a block (x; or dy
// and y) in elements of `elem` bytes, in blocks of `shape`. A row takes
// enough blocks to hold shape.chunk_bytes each, up to the portable cluster
// of 8; where 8 would each hold more than twice that, too few fit on a
// multiprocessor to keep its loads in flight (one block of 128 KiB: the
// float32 backward at 131072 columns took 2.3x a copy's time on an H200, 1.8x
// in 16 blocks of 64 KiB), so such rows take up to 16 where the device allows.
// Clusters need compute capability 9.0 and code compiled for it: a build for
// sm_80 alone runs on a Hopper through the driver's JIT of its compute_80
// PTX, where `cluster_kernel` (any kCluster instantiation) would trap.
CachedPlan plan_cached(int64_t rows, int64_t cols, int arrays, int elem, CachedShape shape,
                       const void* cluster_kernel) {
  int device = 0, major = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    return {};
  }
  const int64_t bytes = cols * arrays * elem;
  const int pack = 16 / elem;  // chunks start 16-byte aligned
  auto chunk_of = [&](int64_t blocks) { return ((cols + blocks - 1) / blocks + pack - 1) / pack * pack; };
  int64_t blocks = (bytes + shape.chunk_bytes - 1) / shape.chunk_bytes;
  cudaFuncAttributes compiled;
  if (blocks > 1 && !(major >= 9 && cudaFuncGetAttributes(&compiled, cluster_kernel) == cudaSuccess &&
                      compiled.ptxVersion >= 90)) {
    blocks = 1;
  }
  if (blocks > kMaxCluster) {
    const int64_t wide = std::min<int64_t>(blocks, kWideCluster);
    const int64_t wide_smem = chunk_of(wide) * arrays * elem;
    blocks = bytes > kMaxCluster * 2 * shape.chunk_bytes &&
                     clusters_fit(cluster_kernel, static_cast<int>(wide), shape.threads, wide_smem, optin - kStaticSmem)
                 ? wide
                 : kMaxCluster;
  }
  const int64_t chunk = chunk_of(blocks);
  const int64_t smem = chunk * arrays * elem;
  if (smem + kStaticSmem > optin || rows * blocks > 0x7fffffff) return {};
  return {static_cast<int>(blocks), shape.threads, static_cast<int>(chunk), static_cast<size_t>(smem),
          optin - kStaticSmem};
}

// Launches a cached-tier kernel over `rows` rows as `plan` says.
template <typename... Params, typename... Args>
cudaError_t launch_cached(void (*kernel)(Params...), const CachedPlan& plan, int64_t rows, cudaStream_t stream,
                          Args... args) {
  cudaError_t err = allow(reinterpret_cast<const void*>(kernel), plan.blocks, plan.smem, plan.smem_limit);
  if (err != cudaSuccess) return err;
  const ClusterLaunch launch(rows * plan.blocks, plan.blocks, plan.threads, plan.smem, stream);
  err = cudaLaunchKernelEx(&launch.config, kernel, args...);
  if (err != cudaSuccess) cudaGetLastError();  // reported here, not again by the caller's next check
  return err;
}

// Calls f(kVector, kCluster) with std::integral_constant arguments for the run-time flags.
template <typename F>
cudaError_t with_flags(bool vector, bool cluster, F&& f) {
  auto with_vector = [&](auto kVector) {
    return cluster ? f(kVector, std::true_type{}) : f(kVector, std::false_type{});
  };
  return vector ? with_vector(std::true_type{}) : with_vector(std::false_type{});
}

// Accesses of `vec` elements need every row's start aligned to them: the base
// pointers and the row length.
template <typename T>
bool rows_aligned(int64_t cols, int vec, std::initializer_list<const void*> pointers) {
  return cols % vec == 0 && std::all_of(pointers.begin(), pointers.end(), [&](const void* p) {
           return reinterpret_cast<uintptr_t>(p) % (vec * sizeof(T)) == 0;
         });
}

// The warp kernels' pack: as wide as 16 bytes and the lane's elements allow.
template <typename T, int kPerLane>
constexpr int kWarpVec = kPack<T> < kPerLane ? kPack<T> : kPerLane;

template <typename T>
cudaError_t forward_device(const T* x, T* y, int64_t rows, int64_t cols, bool log, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > 1024 && rows > 0x7fffffff) return cudaErrorInvalidValue;  // one block per row
  const CachedPlan plan =
      cols > 1024 ? plan_cached(rows, cols, 1, sizeof(T), kForwardShape<T>,
                                reinterpret_cast<const void*>(cached_forward<T, false, false, true>))
                  : CachedPlan{};
  return dispatch(log, cols, [&](auto kLog, auto kPerLane) -> cudaError_t {
    if constexpr (kPerLane > 0) {
      constexpr int kVec = kWarpVec<T, kPerLane>;
      if (rows_aligned<T>(cols, kVec, {x, y})) {
        warp_forward<T, kPerLane, kVec, kLog><<<warp_grid(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
            x, y, rows, static_cast<int>(cols));
      } else {
        warp_forward<T, kPerLane, 1, kLog><<<warp_grid(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
            x, y, rows, static_cast<int>(cols));
      }
    } else if (plan.blocks > 0) {
      return with_flags(rows_aligned<T>(cols, kPack<T>, {x, y}), plan.blocks > 1, [&](auto kVector, auto kCluster) {
        return launch_cached(cached_forward<T, kLog, kVector, kCluster>, plan, rows, stream, x, y, cols, plan.chunk);
      });
    } else {
      block_online_forward<T, kLog><<<dim3(static_cast<unsigned>(rows)), kBlockThreads, 0, stream>>>(x, y, cols);
    }
    return cudaGetLastError();
  });
}

template <typename T>
cudaError_t backward_device(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool log,
                            cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (cols > 1024 && rows > 0x7fffffff) return cudaErrorInvalidValue;
  const CachedPlan plan =
      cols > 1024 ? plan_cached(rows, cols, 2, sizeof(T), kBackwardShape,
                                reinterpret_cast<const void*>(cached_backward<T, false, false, true>))
                  : CachedPlan{};
  return dispatch(log, cols, [&](auto kLog, auto kPerLane) -> cudaError_t {
    if constexpr (kPerLane > 0) {
      constexpr int kVec = kWarpVec<T, kPerLane>;
      if (rows_aligned<T>(cols, kVec, {dy, y, dx})) {
        warp_backward<T, kPerLane, kVec, kLog><<<warp_grid(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
            dy, y, dx, rows, static_cast<int>(cols));
      } else {
        warp_backward<T, kPerLane, 1, kLog><<<warp_grid(rows), kWarpsPerBlock * kWarp, 0, stream>>>(
            dy, y, dx, rows, static_cast<int>(cols));
      }
    } else if (plan.blocks > 0) {
      return with_flags(rows_aligned<T>(cols, kPack<T>, {dy, y, dx}), plan.blocks > 1,
                        [&](auto kVector, auto kCluster) {
        return launch_cached(cached_backward<T, kLog, kVector, kCluster>, plan, rows, stream, dy, y, dx, cols,
                             plan.chunk);
      });
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
