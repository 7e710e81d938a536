// The CUDA kernels against the CPU kernels, for every tier (warp, the row cached
// in one block or across a cluster, online block), softmax and log-softmax,
// float32 and bfloat16. Without a GPU
// it checks that the CUDA runtime linked in loads and reports the GPU part
// skipped (tools/gpu_skip.h).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/softmax.h"
#include "tools/gpu_skip.h"

namespace {

int failures = 0;

template <typename T>
T from_float(float f);
template <>
float from_float<float>(float f) { return f; }
template <>
warp_softmax::BFloat16 from_float<warp_softmax::BFloat16>(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return {static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16)};
}
float to_float(float f) { return f; }
float to_float(warp_softmax::BFloat16 h) {
  uint32_t b = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

template <typename T>
void check(int64_t rows, int64_t cols, bool log, float tol) {
  std::mt19937 gen(static_cast<unsigned>(rows * 31 + cols));
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<T> x(rows * cols), dy(rows * cols), cpu(rows * cols), gpu(rows * cols);
  for (auto& v : x) v = from_float<T>(dist(gen));
  for (auto& v : dy) v = from_float<T>(dist(gen));
  const size_t bytes = x.size() * sizeof(T);
  T *dx_in, *dy_in, *d_out, *d_grad;
  cudaMalloc(&dx_in, bytes);
  cudaMalloc(&dy_in, bytes);
  cudaMalloc(&d_out, bytes);
  cudaMalloc(&d_grad, bytes);
  cudaMemcpy(dx_in, x.data(), bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(dy_in, dy.data(), bytes, cudaMemcpyHostToDevice);
  int err = warp_softmax::forward_cuda<T>(dx_in, d_out, rows, cols, log, nullptr);
  warp_softmax::backward_cuda<T>(dy_in, d_out, d_grad, rows, cols, log, nullptr);
  cudaDeviceSynchronize();
  double worst = 0, worst_grad = 0;
  cudaMemcpy(gpu.data(), d_out, bytes, cudaMemcpyDeviceToHost);
  warp_softmax::forward_cpu<T>(x.data(), cpu.data(), rows, cols, log);
  for (size_t i = 0; i < x.size(); ++i) worst = std::fmax(worst, std::fabs(to_float(cpu[i]) - to_float(gpu[i])));
  std::vector<T> y = gpu, cpu_grad(x.size());
  cudaMemcpy(gpu.data(), d_grad, bytes, cudaMemcpyDeviceToHost);
  warp_softmax::backward_cpu<T>(dy.data(), y.data(), cpu_grad.data(), rows, cols, log);
  for (size_t i = 0; i < x.size(); ++i) {
    worst_grad = std::fmax(worst_grad, std::fabs(to_float(cpu_grad[i]) - to_float(gpu[i])));
  }
  cudaFree(dx_in);
  cudaFree(dy_in);
  cudaFree(d_out);
  cudaFree(d_grad);
  const bool ok = err == 0 && worst <= tol * (log ? 20 : 1) && worst_grad <= tol * 20;
  std::printf("%s %6lldx%-7lld %-11s %-8s max |gpu - cpu| %.2e, gradient %.2e\n", ok ? "ok  " : "FAIL",
              static_cast<long long>(rows), static_cast<long long>(cols), log ? "log_softmax" : "softmax",
              sizeof(T) == 4 ? "float32" : "bfloat16", worst, worst_grad);
  failures += !ok;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    return gpu_skip("softmax_cuda_test", cudaGetErrorName(status));
  }
  for (bool log : {false, true}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 7}, {64, 1000}, {8, 5000}, {4, 65536}, {2, 300000}, {2, 1 << 20}}) {
      check<float>(rows, cols, log, 1e-6f);
      check<warp_softmax::BFloat16>(rows, cols, log, 1e-2f);
    }
  }
  return failures == 0 ? 0 : 1;
}
