// A small real TensorFlow op for //tools/tests:tf_op_library_test:
// ExampleScaledAdd(a, b, alpha) = a + alpha * b, with a shape function.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;  // NOLINT: TF's own examples do this.

REGISTER_OP("ExampleScaledAdd")
    .Input("a: float")
    .Input("b: float")
    .Attr("alpha: float")
    .Output("out: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle merged;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &merged));
      c->set_output(0, merged);
      return absl::OkStatus();
    });

class ExampleScaledAddOp : public OpKernel {
 public:
  explicit ExampleScaledAddOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("alpha", &alpha_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    OP_REQUIRES(ctx, a.shape() == b.shape(),
                errors::InvalidArgument("ExampleScaledAdd: shapes differ: ",
                                        a.shape().DebugString(), " vs ", b.shape().DebugString()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, a.shape(), &out));
    auto pa = a.flat<float>();
    auto pb = b.flat<float>();
    auto po = out->flat<float>();
    for (int64_t i = 0; i < po.size(); ++i) po(i) = pa(i) + alpha_ * pb(i);
  }

 private:
  float alpha_;
};

REGISTER_KERNEL_BUILDER(Name("ExampleScaledAdd").Device(DEVICE_CPU), ExampleScaledAddOp);
