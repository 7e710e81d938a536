// The CUDA kernels alone, without torch: each size's forward and backward
// timed against a device-to-device copy of the same bytes (CUDA events,
// median of 15 interleaved rounds), and the forward checked against a float64
// softmax of the same inputs. gpu_check.sh builds and runs it on a GPU, where
// a kernel change can be timed in seconds (no torch extension to rebuild) on
// a machine lent for minutes.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -arch=sm_90a -I. \
//        kernels/cuda_kernel_bench.cu kernels/softmax_cuda.cu -o kernel_bench && ./kernel_bench
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/softmax.h"

namespace {

constexpr int kRounds = 15;

__device__ float as_float(float v) { return v; }
__device__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Uniform values in [-scale/2, scale/2) from a hash of the index: logits of a
// realistic spread, the same on every run.
template <typename D>
__global__ void fill(D* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32) * 97u;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    store(p + i, ((h & 0xffffff) / 16777216.0f - 0.5f) * scale);
  }
}

// The largest relative error of y against a float64 softmax of x, one block a
// row, over values above 1e-30 (below, the kernels flush to zero).
template <typename D>
__global__ void worst_error(const D* x, const D* y, int64_t cols, float* worst) {
  __shared__ double partial[32];
  const D* xr = x + blockIdx.x * cols;
  const D* yr = y + blockIdx.x * cols;
  auto reduce = [&](double v, bool is_max) {
    for (int o = 16; o > 0; o /= 2) {
      const double other = __shfl_xor_sync(~0u, v, o);
      v = is_max ? fmax(v, other) : v + other;
    }
    __syncthreads();
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = is_max ? -INFINITY : 0.0;
    for (int w = 0; w < blockDim.x / 32; ++w) v = is_max ? fmax(v, partial[w]) : v + partial[w];
    return v;
  };
  double m = -INFINITY, s = 0.0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmax(m, static_cast<double>(as_float(xr[c])));
  m = reduce(m, true);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += exp(as_float(xr[c]) - m);
  s = reduce(s, false);
  float e = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const double want = exp(as_float(xr[c]) - m) / s;
    if (want > 1e-30) e = fmaxf(e, static_cast<float>(fabs(as_float(yr[c]) - want) / want));
  }
  atomicMax(reinterpret_cast<int*>(worst), __float_as_int(e));  // e >= 0: ordered as ints
}

bool check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) std::printf("  %s: %s\n", what, cudaGetErrorString(err));
  return err == cudaSuccess;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// T: the kernels' type; D: CUDA's type of the same layout.
template <typename T, typename D>
void run(const char* name, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const size_t bytes = n * sizeof(T);
  T *x, *y, *dy, *dx, *copy;
  float* worst;
  if (!check(cudaMalloc(&x, bytes), "cudaMalloc") || !check(cudaMalloc(&y, bytes), "cudaMalloc") ||
      !check(cudaMalloc(&dy, bytes), "cudaMalloc") || !check(cudaMalloc(&dx, bytes), "cudaMalloc") ||
      !check(cudaMalloc(&copy, bytes), "cudaMalloc") || !check(cudaMalloc(&worst, sizeof(float)), "cudaMalloc")) {
    return;
  }
  fill<<<4096, 256>>>(reinterpret_cast<D*>(x), n, 1, 20.0f);
  fill<<<4096, 256>>>(reinterpret_cast<D*>(dy), n, 2, 2.0f);
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> forward, backward, copies;
  bool ok = true;
  for (int round = -2; round < kRounds && ok; ++round) {  // two rounds of warm-up
    auto time = [&](std::vector<float>& into, auto&& call) {
      cudaEventRecord(start);
      const int err = call();
      cudaEventRecord(stop);
      ok = ok && check(static_cast<cudaError_t>(err), name) && check(cudaEventSynchronize(stop), name);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (round >= 0) into.push_back(ms * 1e3f);
    };
    time(forward, [&] { return warp_softmax::forward_cuda<T>(x, y, rows, cols, false, nullptr); });
    time(copies, [&] { return cudaMemcpyAsync(copy, x, bytes, cudaMemcpyDeviceToDevice); });
    time(backward, [&] { return warp_softmax::backward_cuda<T>(dy, y, dx, rows, cols, false, nullptr); });
  }
  float error = -1;
  if (ok) {
    cudaMemset(worst, 0, sizeof(float));
    worst_error<<<static_cast<unsigned>(std::min<int64_t>(rows, 4096)), 256>>>(reinterpret_cast<D*>(x),
                                                                              reinterpret_cast<D*>(y), cols, worst);
    ok = check(cudaMemcpy(&error, worst, sizeof(float), cudaMemcpyDeviceToHost), name);
  }
  if (ok) {
    const float f = median(forward), b = median(backward), c = median(copies);
    std::printf("%-9s %6lldx%-7lld %9.1f %7.0f %9.1f %7.0f %9.1f %7.0f %9.3f %9.3f %10.2g\n", name,
                static_cast<long long>(rows), static_cast<long long>(cols), f, 2 * bytes / f / 1e3, b,
                3 * bytes / b / 1e3, c, 2 * bytes / c / 1e3, f / c, b / c, error);
  }
  for (void* p : {static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(dy), static_cast<void*>(dx),
                  static_cast<void*>(copy), static_cast<void*>(worst)}) {
    cudaFree(p);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::printf("usage: %s\n  times warp_softmax's CUDA forward and backward against a device copy at a\n"
                "  fixed sweep of sizes (float32, bfloat16) and checks the forward against float64\n", argv[0]);
    return std::strcmp(argv[1], "-h") && std::strcmp(argv[1], "--help") ? 2 : 0;
  }
  cudaDeviceProp prop;
  if (!check(cudaGetDeviceProperties(&prop, 0), "no CUDA device")) return 1;
  std::printf("%s; times in us (median of %d rounds), GB/s moved (forward 2 arrays, backward 3),\n"
              "fwd/copy and bwd/copy: time over a copy's (85%% of a copy's bandwidth: fwd/copy <= 1.18, "
              "bwd/copy <= 1.76);\nerror: the forward's largest relative error against float64\n",
              prop.name, kRounds);
  std::printf("%-9s %14s %9s %7s %9s %7s %9s %7s %9s %9s %10s\n", "dtype", "size", "fwd us", "GB/s", "bwd us", "GB/s",
              "copy us", "GB/s", "fwd/copy", "bwd/copy", "error");
  const int64_t sizes[][2] = {{4096, 1024},  {1024, 4096},  {4096, 8192},     {256, 32768},
                              {4096, 32768}, {64, 131072}, {16384, 131072}, {2048, 262144}};
  for (const auto& size : sizes) {
    run<float, float>("float32", size[0], size[1]);
    run<warp_softmax::BFloat16, __nv_bfloat16>("bfloat16", size[0], size[1]);
  }
  return 0;
}
