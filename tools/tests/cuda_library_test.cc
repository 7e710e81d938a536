// Links a cuda_library (nvcc-compiled saxpy) and runs it when a GPU is present.
// Without one it checks that the CUDA runtime linked in loads and reports the
// GPU part skipped (tools/gpu_skip.h), so the CUDA build is tested on GPU-less
// machines too.
#include <cmath>
#include <cstdio>
#include <vector>

#include "tools/gpu_skip.h"
#include "tools/tests/saxpy.h"

#define CHECK_CUDA(expr)                                                      \
  do {                                                                        \
    cudaError_t err_ = (expr);                                                \
    if (err_ != cudaSuccess) {                                                \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(err_)); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int main() {
  int devices = 0;
  cudaError_t status = cudaGetDeviceCount(&devices);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    return gpu_skip("cuda_library_test", cudaGetErrorName(status));
  }
  CHECK_CUDA(status);
  const int n = 1 << 20;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97);
    y[i] = static_cast<float>(i % 13);
  }
  float *dx = nullptr, *dy = nullptr;
  CHECK_CUDA(cudaMalloc(&dx, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dy, n * sizeof(float)));
  CHECK_CUDA(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(saxpy(n, 2.5f, dx, dy, nullptr));
  CHECK_CUDA(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float want = 2.5f * static_cast<float>(i % 97) + static_cast<float>(i % 13);
    if (std::fabs(y[i] - want) > 1e-5f) {
      std::fprintf(stderr, "y[%d] = %f, want %f\n", i, y[i], want);
      return 1;
    }
  }
  std::printf("saxpy on %d GPU(s): %d values correct\n", devices, n);
  return 0;
}
