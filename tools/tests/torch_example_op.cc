// A small real PyTorch operator for //tools/tests:torch_op_library_test:
// tools_example::scaled_add(a, b, alpha) = a + alpha * b, on the CPU.
#include <torch/library.h>
#include <ATen/ATen.h>

namespace {

at::Tensor scaled_add_cpu(const at::Tensor& a, const at::Tensor& b, double alpha) {
  TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: a and b must have the same shape, got ",
              a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "scaled_add: expected float32 tensors");
  at::Tensor a_c = a.contiguous(), b_c = b.contiguous();
  at::Tensor out = at::empty_like(a_c);
  const float* pa = a_c.data_ptr<float>();
  const float* pb = b_c.data_ptr<float>();
  float* po = out.data_ptr<float>();
  const float s = static_cast<float>(alpha);
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + s * pb[i];
  return out;
}

}  // namespace

TORCH_LIBRARY(tools_example, m) {
  m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor");
}

TORCH_LIBRARY_IMPL(tools_example, CPU, m) {
  m.impl("scaled_add", &scaled_add_cpu);
}
