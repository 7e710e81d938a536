#include "tools/tests/saxpy.h"

namespace {

__global__ void saxpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

cudaError_t saxpy(int n, float a, const float* x, float* y, cudaStream_t stream) {
  constexpr int kThreads = 256;
  saxpy_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(n, a, x, y);
  return cudaGetLastError();
}
