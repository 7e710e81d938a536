// The kernels:: operators' autograd kernels for CPU and CUDA tensors: C++ fast
// paths in front of the autograd.Function that ops.py registers.
//
// ops.py registers each operator's autograd as a Python kernel for the
// Autograd alias key (an autograd.Function with backward, jvp and the
// torch.func rules). A kernel registered for a backend's own autograd key
// (AutogradCPU, AutogradCUDA) takes precedence over the alias, so this one
// sees every call first and takes the two common cases without Python:
// - no input can carry a gradient (none requires grad while grad mode is on,
//   none has a forward-mode tangent): it runs the operator below autograd. The
//   Python kernel cost about 2 us a call even then: at 64x10 the backward op
//   took 6.6 us against torch's 4.5 us (AMD EPYC, Zen 5, one thread).
// - plain eager training (a gradient can flow in reverse mode only, outside
//   torch.func, dispatch modes and tensor subclasses): softmax, log-softmax and
//   the masked form record a C++ node (torch::autograd::Function) whose
//   backward calls the backward operator through the dispatcher, so its own
//   autograd still records double backward. Through the Python Function a
//   64x64 softmax's forward took 12 us and its backward 12 us more than
//   torch's, which records 3.7 us and runs its node in 1-2 us.
// Every other call (forward-mode AD, torch.func transforms, torch.compile's
// fake and functional tensors, the backward operators themselves) goes to the
// Python kernel, which the alias also installed for AutogradOther, a key no
// CPU or CUDA tensor reaches by itself.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/autograd.h>
#include <torch/library.h>

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace {

enum class Needs { kNothing, kReverse, kMore };

// What autograd the call needs: nothing (no tensor argument can carry a
// gradient through it), reverse mode alone, or more (a forward-mode tangent;
// forward mode has one level, 0, outside torch.func, and torch.func's jvp uses
// it too).
Needs needs(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const bool grad_mode = at::GradMode::is_enabled();
  bool reverse = false;
  for (const c10::IValue& arg : torch::jit::last(stack, op.schema().arguments().size())) {
    if (!arg.isTensor()) continue;  // dim, scale, or a mask left at None
    const at::Tensor& t = arg.toTensor();
    if (!t.defined()) continue;  // the kernel below reports it
    if (t._fw_grad(/*level=*/0).defined()) return Needs::kMore;
    reverse = reverse || (grad_mode && t.requires_grad());
  }
  return reverse ? Needs::kReverse : Needs::kNothing;
}

// Whether the call runs in plain eager mode, where a C++ node records exactly
// what the Python Function would: no torch.func transform on the stack, no
// Python dispatch mode (torch.compile's fake and functional modes), and no
// argument that is a tensor subclass or a functorch/functionalization wrapper.
bool plain_eager(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  // functorch keeps its back-mode key in the thread's included set while any
  // transform is on its stack (its front-mode key is excluded inside one).
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerBackMode) ||
      c10::impl::dispatch_mode_enabled()) {
    return false;
  }
  const c10::DispatchKeySet wrapped({c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
                                     c10::DispatchKey::FuncTorchGradWrapper,
                                     c10::DispatchKey::FuncTorchBatched});
  for (const c10::IValue& arg : torch::jit::last(stack, op.schema().arguments().size())) {
    if (arg.isTensor() && arg.toTensor().key_set().has_any(wrapped)) return false;
  }
  return true;
}

// The operator's own CPU/CUDA kernel on the stack's arguments, leaving its
// result there. As torch's own fallbacks do: the ops the kernel calls
// (contiguous, empty_like) skip autograd too.
void run_below_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  at::AutoDispatchBelowADInplaceOrView guard;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

at::Tensor below_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack args) {
  run_below_autograd(op, keys, &args);
  return args[0].toTensor();
}

// dx from the output's gradient g and the output y, through the dispatcher
// (with create_graph its autograd records the double backward).
at::Tensor backward_op(bool log, const at::Tensor& g, const at::Tensor& y, int64_t dim) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);
  static const auto softmax = c10::Dispatcher::singleton()
                                  .findSchemaOrThrow("kernels::warp_softmax_backward", "")
                                  .typed<Signature>();
  static const auto log_softmax = c10::Dispatcher::singleton()
                                      .findSchemaOrThrow("kernels::warp_log_softmax_backward", "")
                                      .typed<Signature>();
  return (log ? log_softmax : softmax).call(g, y, dim);
}

}  // namespace

// The nodes, named after the operators as the Python Function's are. They sit
// in the global namespace because torch names a C++ node by its type: a tensor
// shows grad_fn=<CppNode<warp_softmaxBackward>> (from a namespace, the name
// would end "warp_softmaxBackward>"). backward returns one entry per forward
// argument after ctx (op and keys included), undefined where none flows.
// is_traceable: compiled autograd may trace the backward (it calls the
// backward operator, whose fake kernel ops.py registers); otherwise it runs
// each node eagerly, a graph break that fullgraph=True refuses.
template <class Node, bool kLog>
struct RowSoftmax : torch::autograd::Function<Node> {
  static constexpr bool is_traceable = true;
  static at::Tensor forward(AutogradContext* ctx, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            const at::Tensor& x, int64_t dim) {
    at::Tensor y = below_autograd(op, keys, {x, dim});
    ctx->save_for_backward({y});
    ctx->saved_data["dim"] = dim;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    return {{}, {}, backward_op(kLog, grads[0], y, ctx->saved_data["dim"].toInt()), {}};
  }
};

struct warp_softmaxBackward : RowSoftmax<warp_softmaxBackward, false> {};
struct warp_log_softmaxBackward : RowSoftmax<warp_log_softmaxBackward, true> {};

// softmax(z) with z = x * scale + mask: dz as softmax's, dx = scale * dz, and
// the mask's gradient dz summed over the dims it was broadcast along.
struct warp_softmax_maskedBackward : torch::autograd::Function<warp_softmax_maskedBackward> {
  static constexpr bool is_traceable = true;
  static at::Tensor forward(AutogradContext* ctx, const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            const at::Tensor& x, const std::optional<at::Tensor>& mask,
                            const at::Scalar& scale, int64_t dim) {
    at::Tensor y = below_autograd(op, keys, {x, mask, scale, dim});
    ctx->save_for_backward({y});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dim"] = dim;
    if (mask.has_value() && mask->defined()) ctx->saved_data["mask_shape"] = mask->sizes();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    const at::Tensor dz = backward_op(false, grads[0], y, ctx->saved_data["dim"].toInt());
    const at::Scalar scale = ctx->saved_data["scale"].toScalar();
    at::Tensor dx, dmask;
    if (ctx->needs_input_grad(0)) dx = scale.equal(1) ? dz : dz * scale;
    const auto shape = ctx->saved_data.find("mask_shape");
    if (shape != ctx->saved_data.end() && ctx->needs_input_grad(1)) {
      dmask = dz.sum_to_size(shape->second.toIntVector());
    }
    return {{}, {}, dx, dmask, {}, {}};
  }
};

namespace {

// Records the call with a C++ node if the operator has one; false if not.
bool record_in_cpp(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const std::string& name = op.operator_name().name;
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  at::Tensor y;
  if (name == "kernels::warp_softmax") {
    y = warp_softmaxBackward::apply(op, keys, args[0].toTensor(), args[1].toInt());
  } else if (name == "kernels::warp_log_softmax") {
    y = warp_log_softmaxBackward::apply(op, keys, args[0].toTensor(), args[1].toInt());
  } else if (name == "kernels::warp_softmax_masked") {
    y = warp_softmax_maskedBackward::apply(op, keys, args[0].toTensor(), args[1].toOptional<at::Tensor>(),
                                           args[2].toScalar(), args[3].toInt());
  } else {
    return false;
  }
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, std::move(y));
  return true;
}

void autograd_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  switch (needs(op, *stack)) {
    case Needs::kNothing:
      run_below_autograd(op, keys, stack);
      return;
    case Needs::kReverse:
      if (plain_eager(op, *stack) && record_in_cpp(op, keys, stack)) return;
      break;
    case Needs::kMore:
      break;
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::AutogradOther), stack);
}

constexpr const char* kOps[] = {"warp_softmax", "warp_softmax_backward", "warp_log_softmax",
                                "warp_log_softmax_backward", "warp_softmax_masked"};

void register_all(torch::Library& m) {
  for (const char* name : kOps) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&autograd_kernel>());
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(kernels, AutogradCPU, m) { register_all(m); }
TORCH_LIBRARY_IMPL(kernels, AutogradCUDA, m) { register_all(m); }
