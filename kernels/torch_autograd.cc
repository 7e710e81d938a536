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
//   the masked form record a C++ node (RowSoftmaxBackward below) whose
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
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/csrc/dynamo/compiled_autograd.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <optional>
#include <vector>

using torch::autograd::variable_list;

namespace {

// Ordered: a call needs the most any of its tensor arguments needs.
enum class Needs { kNothing, kReverse, kMore };

// What autograd one tensor argument needs: nothing (it cannot carry a
// gradient), reverse mode alone, or more (a forward-mode tangent; forward mode
// has one level, 0, outside torch.func, and torch.func's jvp uses it too).
Needs needs(const at::Tensor& t) {
  if (!t.defined()) return Needs::kNothing;  // the kernel below reports it
  if (t._fw_grad(/*level=*/0).defined()) return Needs::kMore;
  return at::GradMode::is_enabled() && t.requires_grad() ? Needs::kReverse : Needs::kNothing;
}

// What autograd the call on the stack needs.
Needs needs(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  Needs most = Needs::kNothing;
  for (const c10::IValue& arg : torch::jit::last(stack, op.schema().arguments().size())) {
    if (arg.isTensor()) most = std::max(most, needs(arg.toTensor()));  // not dim, scale, or a None mask
  }
  return most;
}

// Whether the call runs in plain eager mode, where a C++ node records exactly
// what the Python Function would: no torch.func transform on the stack, no
// Python dispatch mode (torch.compile's fake and functional modes), and no
// argument that is a tensor subclass or a functorch/functionalization wrapper.
bool plain_eager_thread() {
  // functorch keeps its back-mode key in the thread's included set while any
  // transform is on its stack (its front-mode key is excluded inside one).
  return !c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerBackMode) &&
         !c10::impl::dispatch_mode_enabled();
}

bool plain_eager_tensor(const at::Tensor& t) {
  static const c10::DispatchKeySet wrapped({c10::DispatchKey::Python, c10::DispatchKey::Functionalize,
                                            c10::DispatchKey::FuncTorchGradWrapper,
                                            c10::DispatchKey::FuncTorchBatched});
  return !t.key_set().has_any(wrapped);
}

bool plain_eager(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  if (!plain_eager_thread()) return false;
  for (const c10::IValue& arg : torch::jit::last(stack, op.schema().arguments().size())) {
    if (arg.isTensor() && !plain_eager_tensor(arg.toTensor())) return false;
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

// The backward operators' handles.
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>& backward_handle(bool log) {
  using Signature = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t);
  static const auto softmax = c10::Dispatcher::singleton()
                                  .findSchemaOrThrow("kernels::warp_softmax_backward", "")
                                  .typed<Signature>();
  static const auto log_softmax = c10::Dispatcher::singleton()
                                      .findSchemaOrThrow("kernels::warp_log_softmax_backward", "")
                                      .typed<Signature>();
  return log ? log_softmax : softmax;
}

// softmax's and log_softmax's handles.
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, int64_t)>& unary_handle(bool log) {
  using Signature = at::Tensor(const at::Tensor&, int64_t);
  static const auto softmax =
      c10::Dispatcher::singleton().findSchemaOrThrow("kernels::warp_softmax", "").typed<Signature>();
  static const auto log_softmax =
      c10::Dispatcher::singleton().findSchemaOrThrow("kernels::warp_log_softmax", "").typed<Signature>();
  return log ? log_softmax : softmax;
}

// The forward operators that record a node in plain eager reverse mode.
enum class Forward : int64_t { kSoftmax, kLogSoftmax, kMasked };

// What a recorded call's backward reads besides the output and its gradient.
struct Saved {
  Forward forward = Forward::kSoftmax;
  int64_t dim = 0;
  at::Scalar scale = 1;                            // kMasked
  std::optional<std::vector<int64_t>> mask_shape;  // kMasked with a mask
};

// One gradient per forward tensor argument (x, and the masked form's mask)
// from the output's gradient g and the output y; an entry is undefined where
// none flows or `needed` says none is wanted. For the masked form, softmax(z)
// with z = x * scale + mask: dz as softmax's, dx = scale * dz, and the mask's
// gradient dz summed over the dims it was broadcast along. dz comes through the
// dispatcher: with create_graph, the backward operator's autograd records the
// double backward.
variable_list gradients(const Saved& s, const at::Tensor& g, const at::Tensor& y, const std::vector<bool>& needed) {
  variable_list out(needed.size());
  if (!g.defined()) return out;
  const at::Tensor dz = backward_handle(s.forward == Forward::kLogSoftmax).call(g, y, s.dim);
  if (needed[0]) out[0] = s.scale.equal(1) ? dz : dz * s.scale;
  if (s.mask_shape && needed.size() > 1 && needed[1]) out[1] = dz.sum_to_size(*s.mask_shape);
  return out;
}

// Compiled autograd's form of a node's backward: the gradients and the
// node's state as IValues, in apply_with_saved's order.
variable_list gradients_from_ivalues(const variable_list& grads, const std::vector<c10::IValue>& args) {
  Saved s{static_cast<Forward>(args[0].toInt()), args[1].toInt(), args[2].toScalar(),
          args[3].toOptional<std::vector<int64_t>>()};
  const c10::List<bool> needed = args[5].toBoolList();
  return gradients(s, grads[0], args[4].toTensor(), {needed.begin(), needed.end()});
}

// The backward of one recorded call, built as torch's generated nodes are
// (SoftmaxBackward0): the saved output and the call's other arguments as
// members. torch::autograd::Function's CppNode did the same job slower (at
// 1x1 its forward took 1.77x torch's and a training step 1.21x-1.34x; this
// node: 1.03x and 0.99x, AMD EPYC Zen 3, one thread): it demangles its name
// on every backward and keeps a string-keyed saved-data map and type-erased
// input and output records.
struct RowSoftmaxBackward : torch::autograd::TraceableFunction {
  Saved saved;
  torch::autograd::SavedVariable y;

  // Named after the operators, as the Python Function's nodes are: a tensor
  // shows grad_fn=<warp_softmaxBackward> either way.
  std::string name() const override {
    switch (saved.forward) {
      case Forward::kSoftmax:
        return "warp_softmaxBackward";
      case Forward::kLogSoftmax:
        return "warp_log_softmaxBackward";
      case Forward::kMasked:
        return "warp_softmax_maskedBackward";
    }
    return "";
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return gradients(saved, grads[0], y.unpack(getptr()), needed());
  }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    y.reset_data();
  }

  // Compiled autograd (torch.compile over a backward) reads the node through
  // these two, as it reads CppNode: compiled_args keys its cache, and
  // apply_with_saved puts a call of gradients_from_ivalues in its graph
  // (traceable: Dynamo runs it on fake tensors, through the backward
  // operator's fake kernel that ops.py registers, and keeps it in the graph).
  void compiled_args(torch::dynamo::autograd::CompiledNodeArgs& args) const override {
    args.collect(static_cast<int64_t>(saved.forward));
    args.collect(saved.dim);
    args.collect(saved.scale);
    args.collect(saved.mask_shape);
    args.collect(y, /*is_output=*/true);
  }

  variable_list apply_with_saved(const variable_list& grads,
                                 torch::dynamo::autograd::SwapSavedVariables& swap) override {
    namespace dynamo = torch::dynamo::autograd;
    swap.before(y);
    const std::vector<c10::IValue> args = {
        static_cast<int64_t>(saved.forward), saved.dim, saved.scale, saved.mask_shape, y.unpack(), needed()};
    std::vector<at::TypePtr> schema;
    for (const c10::IValue& arg : args) schema.push_back(arg.isTensor() ? at::TensorType::get() : arg.type());
    const auto& python = dynamo::getPyCompilerInterface();
    // Bound anew each time, as CppNode binds (the schema varies with the mask).
    const std::string fn = python->bind_function(swap.get_py_compiler(), name(), gradients_from_ivalues, schema,
                                                 /*is_custom_function=*/true, /*is_traceable=*/true);
    variable_list out = python->call_function(
        swap.get_py_compiler(), "apply_functional", fn, grads, args,
        dynamo::IValuePacker<std::vector<std::optional<torch::autograd::InputMetadata>>>::pack(
            dynamo::get_input_metadata(next_edges())));
    swap.after(y);
    return out;
  }

 private:
  std::vector<bool> needed() const {
    std::vector<bool> out(num_outputs());
    for (size_t i = 0; i < out.size(); ++i) out[i] = task_should_compute_output(i);
    return out;
  }
};

// Runs a forward operator's kernel (run() gives its output) and records its
// node, as torch's generated autograd kernels record theirs.
template <typename Run>
at::Tensor record(Saved saved, torch::autograd::edge_list edges, Run run) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13)
  auto node = c10::make_intrusive<RowSoftmaxBackward>();
#else  // torch 2.12 and earlier (the lent GPU machine's 2.11) held nodes in a shared_ptr
  std::shared_ptr<RowSoftmaxBackward> node(new RowSoftmaxBackward(), torch::autograd::deleteNode);
#endif
  node->saved = std::move(saved);
  node->set_next_edges(std::move(edges));
  at::Tensor y = run();
  torch::autograd::set_history(y, node);
  node->y = torch::autograd::SavedVariable(y, /*is_output=*/true);
  return y;
}

// The same for the masked form's call on the stack, leaving its output there.
void record_masked(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, op.schema().arguments().size());
  const at::Tensor x = args[0].toTensor();
  const std::optional<at::Tensor> mask = args[1].toOptional<at::Tensor>();
  Saved saved;
  saved.forward = Forward::kMasked;
  saved.scale = args[2].toScalar();
  saved.dim = args[3].toInt();
  if (mask.has_value() && mask->defined()) saved.mask_shape = mask->sizes().vec();
  record(std::move(saved), torch::autograd::collect_next_edges(x, mask), [&] {
    run_below_autograd(op, keys, stack);
    return stack->back().toTensor();
  });
}

// The Python kernel's share: every call the two kernels below do not take.
void to_python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::AutogradOther), stack);
}

// The masked form's kernel (boxed: its optional mask and scalar scale).
void masked_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  switch (needs(op, *stack)) {
    case Needs::kNothing:
      return run_below_autograd(op, keys, stack);
    case Needs::kReverse:
      if (plain_eager(op, *stack)) return record_masked(op, keys, stack);
      break;
    case Needs::kMore:
      break;
  }
  to_python(op, stack);
}

// softmax's and log_softmax's kernel, unboxed: a boxed kernel copies x onto a
// stack, and a copy of a tensor Python holds increfs its PyObject, taking
// back the GIL the caller released (twice a call: boxed, the 1x1 forward ran
// at 1.01x torch's speed; unboxed 1.19x, Intel Xeon, one thread).
template <Forward kForward>
at::Tensor unary_kernel(c10::DispatchKeySet keys, const at::Tensor& x, int64_t dim) {
  const auto& op = unary_handle(kForward == Forward::kLogSoftmax);
  const auto run = [&] {
    at::AutoDispatchBelowADInplaceOrView guard;
    return op.redispatch(keys & c10::after_autograd_keyset, x, dim);
  };
  switch (needs(x)) {
    case Needs::kNothing:
      return run();
    case Needs::kReverse:
      if (plain_eager_thread() && plain_eager_tensor(x)) {
        Saved saved;
        saved.forward = kForward;
        saved.dim = dim;
        return record(std::move(saved), torch::autograd::collect_next_edges(x), run);
      }
      break;
    case Needs::kMore:
      break;
  }
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::AutogradOther), x, dim);  // Python's
}

// The backward operators' kernel, unboxed: called from Python once per
// training step, like the forward, and a boxed kernel packs and unpacks a
// stack (at 1x1 the call took 1.24x torch's time boxed, 1.15x-1.20x unboxed;
// Zen 3, one thread). They record through the Python Function (double
// backward is rare); calls with nothing to record stay here.
template <bool kLog>
at::Tensor backward_kernel(c10::DispatchKeySet keys, const at::Tensor& g, const at::Tensor& y, int64_t dim) {
  const auto& op = backward_handle(kLog);
  if (std::max(needs(g), needs(y)) != Needs::kNothing) {
    return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::AutogradOther), g, y, dim);
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  return op.redispatch(keys & c10::after_autograd_keyset, g, y, dim);
}

// The in-place masked operator has no autograd (self's old values are gone):
// a call a gradient could flow through is refused, where torch would record
// one; the rest go on to ADInplaceOrView, as torch's in-place kernels do.
void in_place_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  TORCH_CHECK(needs(op, *stack) == Needs::kNothing,
              "warp_softmax_masked_: the in-place form has no autograd (it overwrites its input), and "
              "the input or the mask requires grad or carries a forward-mode tangent; use "
              "warp_softmax_masked, or call it under torch.no_grad()");
  at::AutoDispatchBelowAutograd guard;
  op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

// Bumps self's version counter after the write (torch's generated
// ADInplaceOrView kernels do the same): a node that saved self then refuses
// to run its backward on the changed values, and an inference tensor outside
// inference mode is refused.
void bump_version_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const at::Tensor self = torch::jit::last(*stack, op.schema().arguments().size())[0].toTensor();
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  torch::autograd::impl::bump_version(self);
}

void register_all(torch::Library& m) {
  using torch::CppFunction;
  m.impl("warp_softmax", TORCH_FN(unary_kernel<Forward::kSoftmax>));
  m.impl("warp_log_softmax", TORCH_FN(unary_kernel<Forward::kLogSoftmax>));
  m.impl("warp_softmax_masked", CppFunction::makeFromBoxedFunction<&masked_kernel>());
  m.impl("warp_softmax_backward", TORCH_FN(backward_kernel<false>));
  m.impl("warp_log_softmax_backward", TORCH_FN(backward_kernel<true>));
  m.impl("warp_softmax_masked_", CppFunction::makeFromBoxedFunction<&in_place_kernel>());
}

}  // namespace

TORCH_LIBRARY_IMPL(kernels, AutogradCPU, m) { register_all(m); }
TORCH_LIBRARY_IMPL(kernels, AutogradCUDA, m) { register_all(m); }
TORCH_LIBRARY_IMPL(kernels, ADInplaceOrView, m) {
  m.impl("warp_softmax_masked_", torch::CppFunction::makeFromBoxedFunction<&bump_version_kernel>());
}
