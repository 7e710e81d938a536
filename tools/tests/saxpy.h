// y = a * x + y on the GPU, for //tools/tests:cuda_library_test.
#pragma once

#include <cuda_runtime.h>

// Runs saxpy over n floats in device memory on `stream`; returns the launch status.
cudaError_t saxpy(int n, float a, const float* x, float* y, cudaStream_t stream);
