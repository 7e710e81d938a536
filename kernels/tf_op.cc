// TensorFlow binding: the WarpSoftmax and WarpSoftmaxGrad ops (CPU) over the same kernels.
//
// Softmax (or, with log_softmax=true, log-softmax) over the last dimension,
// like tf.nn.softmax; tf_ops.py moves other axes last and registers the
// gradient, which is WarpSoftmaxGrad.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

#include "kernels/softmax.h"

namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

template <typename T>
using Core = warp_softmax::core_type_t<T, Eigen::half, Eigen::bfloat16>;

template <typename T>
const Core<T>* core(const Tensor& t) {
  return reinterpret_cast<const Core<T>*>(t.flat<T>().data());
}
template <typename T>
Core<T>* core(Tensor* t) {
  return reinterpret_cast<Core<T>*>(t->flat<T>().data());
}

// Runs body(begin_row, end_row) over TF's intra-op thread pool. A bad
// WARP_SOFTMAX_ISA fails the op here: an exception must not reach TF's threads.
template <typename F>
void for_rows(OpKernelContext* ctx, int64_t rows, int64_t cols, F body) {
  try {
    warp_softmax::cpu_isa();
  } catch (const std::exception& e) {
    ctx->CtxFailure(tensorflow::errors::FailedPrecondition(e.what()));
    return;
  }
  const auto& workers = *ctx->device()->tensorflow_cpu_worker_threads();
  // Cost per row, in TF's units (about a cycle per element for a few passes).
  tensorflow::Shard(workers.num_threads, workers.workers, rows, 8 * cols,
                    [&](int64_t begin, int64_t end) { body(begin, end); });
}

template <typename T>
class WarpSoftmaxOp : public OpKernel {
 public:
  explicit WarpSoftmaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("log_softmax", &log_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dims() >= 1,
                tensorflow::errors::InvalidArgument("WarpSoftmax: logits must have at least one "
                                                    "dimension, got a scalar"));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const int64_t cols = x.dim_size(x.dims() - 1);
    if (x.NumElements() == 0) return;
    const int64_t rows = x.NumElements() / cols;
    const auto* xp = core<T>(x);
    auto* yp = core<T>(y);
    for_rows(ctx, rows, cols, [&](int64_t begin, int64_t end) {
      warp_softmax::forward_cpu(xp + begin * cols, yp + begin * cols, end - begin, cols, log_);
    });
  }

 private:
  bool log_;
};

template <typename T>
class WarpSoftmaxGradOp : public OpKernel {
 public:
  explicit WarpSoftmaxGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("log_softmax", &log_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grad = ctx->input(0);
    const Tensor& y = ctx->input(1);
    OP_REQUIRES(ctx, grad.shape() == y.shape() && grad.dims() >= 1,
                tensorflow::errors::InvalidArgument(
                    "WarpSoftmaxGrad: gradients ", grad.shape().DebugString(),
                    " and softmax ", y.shape().DebugString(), " must have one shape of rank >= 1"));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, y.shape(), &dx));
    const int64_t cols = y.dim_size(y.dims() - 1);
    if (y.NumElements() == 0) return;
    const int64_t rows = y.NumElements() / cols;
    const auto *gp = core<T>(grad), *yp = core<T>(y);
    auto* dxp = core<T>(dx);
    for_rows(ctx, rows, cols, [&](int64_t begin, int64_t end) {
      const int64_t off = begin * cols;
      warp_softmax::backward_cpu(gp + off, yp + off, dxp + off, end - begin, cols, log_);
    });
  }

 private:
  bool log_;
};

}  // namespace

REGISTER_OP("WarpSoftmax")
    .Input("logits: T")
    .Output("softmax: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("log_softmax: bool = false")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle logits;
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &logits));
      c->set_output(0, logits);
      return absl::OkStatus();
    })
    .Doc("softmax (or log_softmax) of `logits` over its last dimension: warp_softmax's kernels.");

REGISTER_OP("WarpSoftmaxGrad")
    .Input("gradients: T")
    .Input("softmax: T")
    .Output("backprops: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("log_softmax: bool = false")
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle merged;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &merged));
      TF_RETURN_IF_ERROR(c->WithRankAtLeast(merged, 1, &merged));
      c->set_output(0, merged);
      return absl::OkStatus();
    })
    .Doc("The gradient of WarpSoftmax with respect to its logits, given its output.");

#define REGISTER(T)                                                                     \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("WarpSoftmax").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),        \
      WarpSoftmaxOp<T>);                                                                \
  REGISTER_KERNEL_BUILDER(                                                              \
      Name("WarpSoftmaxGrad").Device(tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),    \
      WarpSoftmaxGradOp<T>);

REGISTER(Eigen::half)
REGISTER(Eigen::bfloat16)
REGISTER(float)
REGISTER(double)
#undef REGISTER
