// PyTorch binding: the kernels::warp_softmax operators (schemas, CPU and CUDA kernels).
//
// Fake (meta) kernels and autograd are registered from Python (ops.py) with
// torch.library, as in pytorch/extension-cpp, with autograd's fast path for
// calls that need no gradient in torch_autograd.cc. Any dim and any strides: the
// softmax dim is moved last and made contiguous (a no-op for the usual
// contiguous last-dim input) and the result is laid out like the input.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/dims.h"
#include "kernels/softmax.h"

namespace {

template <typename T>
using Core = warp_softmax::core_type_t<T, at::Half, at::BFloat16>;

template <typename T>
auto* core_ptr(const at::Tensor& t) {
  return reinterpret_cast<Core<T>*>(t.data_ptr<T>());
}

void check_input(const at::Tensor& t, const char* name, const char* op) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), op, ": ", name,
              " must be a floating point tensor (float32, float16, bfloat16 or float64), got ",
              t.scalar_type());
  TORCH_CHECK(!t.device().is_cuda() || t.scalar_type() != at::kDouble, op,
              ": float64 is supported on the CPU only");
}

// The tensor with `dim` last and contiguous, viewed as rows x cols.
struct Rows {
  c10::MaybeOwned<at::Tensor> data;
  int64_t dim, rows, cols;
};

// `dim` of `t` as a non-negative index, or op's IndexError.
int64_t checked_dim(const at::Tensor& t, int64_t dim, const char* op) {
  const int64_t d = warp_softmax::normalize_dim(dim, t.dim());
  TORCH_CHECK_INDEX(d >= 0, warp_softmax::dim_error(op, "dim", dim, t.dim()));
  return d;
}

Rows as_rows(const at::Tensor& t, int64_t dim, const char* op) {
  const int64_t d = checked_dim(t, dim, op);
  const auto rows = [d](c10::MaybeOwned<at::Tensor> x) {
    const int64_t cols = x->size(-1), count = cols == 0 ? 0 : x->numel() / cols;
    return Rows{std::move(x), d, count, cols};
  };
  // The usual input is borrowed: a copy of a tensor that Python holds increfs its PyObject,
  // which takes back the GIL the caller released (two such copies kept the 1x1 backward at
  // 0.93x torch's speed). movedim makes a new view even when dim is already last.
  if (t.dim() != 0 && d == t.dim() - 1 && t.is_contiguous()) {
    return rows(c10::MaybeOwned<at::Tensor>::borrowed(t));
  }
  const at::Tensor x = t.dim() == 0 ? t.reshape({1}) : d == t.dim() - 1 ? t : t.movedim(d, -1);
  return rows(c10::MaybeOwned<at::Tensor>::owned(x.contiguous()));
}

// A new tensor like `like` for a kernel to write (on huge pages where large: softmax.h).
at::Tensor new_result(const at::Tensor& like) {
  at::Tensor out = at::empty_like(like);
  if (out.device().is_cpu()) warp_softmax::prepare_result(out.data_ptr(), out.nbytes());
  return out;
}

// `result` (dim last, contiguous) laid out like `like`.
at::Tensor restore_layout(const at::Tensor& result, const at::Tensor& like, int64_t dim) {
  if (like.dim() == 0) return result.reshape({});
  at::Tensor moved = dim == like.dim() - 1 ? result : result.movedim(-1, dim);
  if (moved.strides() == like.strides()) return moved;
  at::Tensor out = new_result(like);
  out.copy_(moved);
  return out;
}

#ifdef WARP_SOFTMAX_WITH_CUDA
void* current_cuda_stream(const at::Tensor& t) {
  // c10's device-neutral stream API, so this file needs no CUDA headers.
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()).native_handle();
}
#endif

// cpu(begin_row, end_row) over ATen's threads.
template <typename Cpu>
void parallel_rows(const Rows& r, Cpu cpu) {
  warp_softmax::cpu_isa();  // a bad WARP_SOFTMAX_ISA raises here, on the caller's thread
  at::parallel_for(0, r.rows, std::max<int64_t>(1, at::internal::GRAIN_SIZE / r.cols), cpu);
}

// Runs a kernel where `t` lives: cuda(stream) on its CUDA device, or cpu(begin_row,
// end_row) over ATen's threads. The CUDA kernels have no float64.
template <typename scalar_t, typename Cpu, typename Cuda>
void launch(const at::Tensor& t, const Rows& r, const char* op, Cpu cpu, Cuda cuda) {
  if (t.device().is_cuda()) {
#ifdef WARP_SOFTMAX_WITH_CUDA
    if constexpr (std::is_same_v<scalar_t, double>) {
      TORCH_CHECK(false, op, ": float64 is supported on the CPU only");
    } else {
      c10::OptionalDeviceGuard guard(t.device());
      const int err = cuda(current_cuda_stream(t));
      TORCH_CHECK(err == 0, op, ": CUDA launch failed: ", warp_softmax::cuda_error_string(err));
    }
#else
    TORCH_CHECK(false, op, ": this build has no CUDA kernels; build with --config=cuda");
#endif
  } else {
    parallel_rows(r, cpu);
  }
}

at::Tensor forward(const at::Tensor& self, int64_t dim, bool log) {
  const char* op = log ? "warp_log_softmax" : "warp_softmax";
  check_input(self, "input", op);
  Rows in = as_rows(self, dim, op);
  at::Tensor y = new_result(*in.data);
  if (in.data->numel() == 0) return restore_layout(y, self, in.dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.data->scalar_type(), "warp_softmax", [&] {
    using core_t = Core<scalar_t>;
    const core_t* x = core_ptr<scalar_t>(*in.data);
    core_t* out = core_ptr<scalar_t>(y);
    const int64_t cols = in.cols;
    launch<scalar_t>(
        *in.data, in, op,
        [&](int64_t begin, int64_t end) {
          warp_softmax::forward_cpu<core_t>(x + begin * cols, out + begin * cols, end - begin, cols, log);
        },
        // Generic, so it is only compiled where launch calls it (never for float64).
        [&](auto stream) { return warp_softmax::forward_cuda<core_t>(x, out, in.rows, cols, log, stream); });
  });
  return restore_layout(y, self, in.dim);
}

at::Tensor backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim, bool log) {
  const char* op = log ? "warp_log_softmax_backward" : "warp_softmax_backward";
  check_input(grad_output, "grad_output", op);
  check_input(output, "output", op);
  TORCH_CHECK(grad_output.sizes() == output.sizes(), op, ": grad_output of shape ",
              grad_output.sizes(), " does not match output of shape ", output.sizes());
  TORCH_CHECK(grad_output.scalar_type() == output.scalar_type() &&
                  grad_output.device() == output.device(),
              op, ": grad_output and output must have the same dtype and device");
  Rows g = as_rows(grad_output, dim, op);
  Rows y = as_rows(output, dim, op);
  at::Tensor dx = new_result(*g.data);
  if (g.data->numel() == 0) return restore_layout(dx, output, g.dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.data->scalar_type(), "warp_softmax_backward", [&] {
    using core_t = Core<scalar_t>;
    const core_t* dy_p = core_ptr<scalar_t>(*g.data);
    const core_t* y_p = core_ptr<scalar_t>(*y.data);
    core_t* dx_p = core_ptr<scalar_t>(dx);
    const int64_t cols = g.cols;
    launch<scalar_t>(
        *g.data, g, op,
        [&](int64_t begin, int64_t end) {
          const int64_t off = begin * cols;
          warp_softmax::backward_cpu<core_t>(dy_p + off, y_p + off, dx_p + off, end - begin, cols, log);
        },
        [&](auto stream) {
          return warp_softmax::backward_cuda<core_t>(dy_p, y_p, dx_p, g.rows, cols, log, stream);
        });
  });
  return restore_layout(dx, output, g.dim);
}

// The masked forward's mask (masked_forward): `mask` (broadcastable to x,
// whose shape with the softmax dim last is `moved`) as a tensor whose rows
// are contiguous and the layout saying which row each of x's rows reads.
// Only the mask's own elements are copied, never its broadcast.
struct MaskRows {
  at::Tensor data;
  warp_softmax::MaskLayout layout;
};

MaskRows mask_rows(at::Tensor mask, at::IntArrayRef moved, int64_t d) {
  while (mask.dim() < static_cast<int64_t>(moved.size())) mask = mask.unsqueeze(0);
  mask = mask.movedim(d, -1);
  const int64_t cols = moved.back();
  if (mask.size(-1) != cols) {  // one value for the whole row: spell it out once per row
    std::vector<int64_t> sizes(mask.sizes().begin(), mask.sizes().end());
    sizes.back() = cols;
    mask = mask.expand(sizes);
  }
  mask = mask.contiguous();
  const at::Tensor wide = mask.expand(moved);
  warp_softmax::MaskLayout layout{0, {}, {}};
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), adjacent dims merged
  for (int64_t k = 0; k + 1 < wide.dim(); ++k) {
    const int64_t size = wide.size(k), stride = wide.stride(k);
    if (size == 1) continue;
    if (!dims.empty() && dims.back().second == stride * size) {
      dims.back() = {dims.back().first * size, stride};
    } else {
      dims.push_back({size, stride});
    }
  }
  if (dims.size() > static_cast<size_t>(warp_softmax::MaskLayout::kMaxDims)) {
    mask = wide.contiguous();  // a broadcast too irregular to describe: write it out
    dims = {{mask.numel() / cols, cols}};
  }
  for (const auto& [size, stride] : dims) {
    layout.sizes[layout.ndim] = size;
    layout.strides[layout.ndim++] = stride;
  }
  return {mask, layout};
}

// softmax(self * scale + mask) along dim, mask broadcastable to self: a
// floating mask is added (the result has torch's promoted dtype), a bool mask
// keeps the elements where it is true (F.scaled_dot_product_attention's
// convention), the others become -inf.
// With `in_place`, the result goes over self: written by the kernel as it reads
// (each row is read before it is written, so the rows can share their memory)
// where self is already the kernel's rows in the result's dtype, and copied in
// otherwise. The attention scores a model makes are read by this softmax alone,
// and a 100 MB result allocated anew costs its page faults: 27 ms of 33 for
// BERT's 8x12x512x512 scores on an AMD EPYC Zen 5, 2 threads (4 KiB pages, before
// prepare_result's huge pages).
at::Tensor masked(const at::Tensor& self, const std::optional<at::Tensor>& mask_arg,
                  const at::Scalar& scale_arg, int64_t dim, bool in_place) {
  const char* op = in_place ? "warp_softmax_masked_" : "warp_softmax_masked";
  check_input(self, "input", op);
  TORCH_CHECK(!scale_arg.isComplex() && !scale_arg.isBoolean(), op, ": scale must be a real number, got ",
              scale_arg.type());
  const double scale = scale_arg.toDouble();
  at::Tensor x = self, mask;
  if (mask_arg.has_value() && mask_arg->defined()) {
    mask = *mask_arg;
    // A mask that shares memory with self would be read after rows of it were written.
    if (in_place) at::assert_no_overlap(self, mask);
    TORCH_CHECK(mask.scalar_type() == at::kBool || at::isFloatingType(mask.scalar_type()), op,
                ": mask must be a bool or floating point tensor, got ", mask.scalar_type());
    TORCH_CHECK(mask.device() == self.device(), op, ": mask is on ", mask.device(), ", input on ",
                self.device());
    // The result keeps self's shape: a mask with more dims (a 0-d self's too) is refused.
    bool broadcasts = mask.dim() <= self.dim();
    for (int64_t k = 1; broadcasts && k <= mask.dim(); ++k) {
      broadcasts = mask.size(-k) == 1 || mask.size(-k) == self.size(-k);
    }
    TORCH_CHECK(broadcasts, op, ": mask of shape ", mask.sizes(), " does not broadcast to the input's shape ",
                self.sizes());
    if (mask.scalar_type() == at::kBool) {
      mask = at::zeros(mask.sizes(), self.options()).masked_fill_(mask.logical_not(),
                                                                  -std::numeric_limits<double>::infinity());
    } else {
      // As x * scale + mask: a 0-d mask does not promote a tensor's dtype.
      const at::ScalarType type = at::result_type(self, mask);
      x = self.to(type);
      mask = mask.to(type);
    }
  }
  TORCH_CHECK(!in_place || x.scalar_type() == self.scalar_type(), op, ": the result's dtype ",
              x.scalar_type(), " (the input's and the mask's promoted) cannot be written over the input's ",
              self.scalar_type());
  if (!x.device().is_cpu()) {
    // The CUDA kernels take no mask: x * scale + mask in one kernel (torch's composite
    // takes two), then the softmax kernels (float64, which they lack: torch's).
    const int64_t d = checked_dim(x, dim, op);
    const at::Tensor z = mask.defined() ? at::add(mask, x, scale_arg) : x * scale_arg;
    at::Tensor y = z.scalar_type() == at::kDouble ? at::softmax(z, d) : forward(z, d, false);
    return in_place ? self.copy_(y) : y;
  }
  Rows in = as_rows(x, dim, op);
  const bool over_self = in_place && in.data->is_same(self);
  at::Tensor y = over_self ? self : new_result(*in.data);
  if (in.data->numel() == 0) return in_place ? self : restore_layout(y, x, in.dim);
  MaskRows m{mask, {0, {}, {}}};
  if (mask.defined()) m = mask_rows(mask, in.data->sizes(), in.dim);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.data->scalar_type(), "warp_softmax_masked", [&] {
    using core_t = Core<scalar_t>;
    const core_t* xp = core_ptr<scalar_t>(*in.data);
    const core_t* mp = mask.defined() ? core_ptr<scalar_t>(m.data) : nullptr;
    core_t* out = core_ptr<scalar_t>(y);
    const int64_t cols = in.cols;
    parallel_rows(in, [&](int64_t begin, int64_t end) {
      warp_softmax::forward_masked_cpu<core_t>(xp + begin * cols, mp, m.layout, scale, out + begin * cols,
                                               begin, end - begin, cols);
    });
  });
  if (over_self) return self;
  at::Tensor out = restore_layout(y, x, in.dim);
  return in_place ? self.copy_(out) : out;
}

at::Tensor masked_forward(const at::Tensor& self, const std::optional<at::Tensor>& mask,
                          const at::Scalar& scale, int64_t dim) {
  return masked(self, mask, scale, dim, false);
}
void masked_forward_(at::Tensor& self, const std::optional<at::Tensor>& mask, const at::Scalar& scale,
                     int64_t dim) {
  masked(self, mask, scale, dim, true);
}

at::Tensor softmax(const at::Tensor& self, int64_t dim) { return forward(self, dim, false); }
at::Tensor log_softmax(const at::Tensor& self, int64_t dim) { return forward(self, dim, true); }
at::Tensor softmax_backward(const at::Tensor& g, const at::Tensor& y, int64_t dim) {
  return backward(g, y, dim, false);
}
at::Tensor log_softmax_backward(const at::Tensor& g, const at::Tensor& y, int64_t dim) {
  return backward(g, y, dim, true);
}

}  // namespace

TORCH_LIBRARY(kernels, m) {
  // Every operator takes inputs of any strides, and says so: without the tag
  // inductor gives a custom operator each input in the exact strides it was
  // traced with, and copies an input it has not yet written out once per call,
  // so BERT's one attention mask (8x1x256x256 floats) was computed into six
  // fresh buffers a forward, one for each layer's softmax.
  const std::vector<at::Tag> any_strides = {at::Tag::flexible_layout};
  m.def("warp_softmax(Tensor self, int dim=-1) -> Tensor", any_strides);
  m.def("warp_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor", any_strides);
  m.def("warp_log_softmax(Tensor self, int dim=-1) -> Tensor", any_strides);
  m.def("warp_log_softmax_backward(Tensor grad_output, Tensor output, int dim) -> Tensor", any_strides);
  m.def("warp_softmax_masked(Tensor self, Tensor? mask=None, Scalar scale=1, int dim=-1) -> Tensor", any_strides);
  // The same over self; it returns nothing, so that torch.compile can functionalize it
  // and inductor write it in place again where nothing else reads self.
  m.def("warp_softmax_masked_(Tensor(a!) self, Tensor? mask=None, Scalar scale=1, int dim=-1) -> ()",
        any_strides);
}

// One function serves both devices: it dispatches on the tensor's device inside.
TORCH_LIBRARY_IMPL(kernels, CPU, m) {
  m.impl("warp_softmax", &softmax);
  m.impl("warp_softmax_backward", &softmax_backward);
  m.impl("warp_log_softmax", &log_softmax);
  m.impl("warp_log_softmax_backward", &log_softmax_backward);
  m.impl("warp_softmax_masked", &masked_forward);
  m.impl("warp_softmax_masked_", &masked_forward_);
}

TORCH_LIBRARY_IMPL(kernels, CUDA, m) {
  m.impl("warp_softmax", &softmax);
  m.impl("warp_softmax_backward", &softmax_backward);
  m.impl("warp_log_softmax", &log_softmax);
  m.impl("warp_log_softmax_backward", &log_softmax_backward);
  m.impl("warp_softmax_masked", &masked_forward);
  m.impl("warp_softmax_masked_", &masked_forward_);
}
