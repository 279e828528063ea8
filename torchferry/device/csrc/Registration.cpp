// Registers the built-in `neuron` device with PyTorch. Only registration lives
// here; the implementations are in the other files of this directory.
#include "neuron.h"

#include <ATen/autocast_mode.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

namespace torchferry {
namespace {

// Device guard: current device, streams and events for `neuron`.
c10::impl::DeviceGuardImplRegistrar g_guard_registrar(kNeuron, guard_impl());

// Device activity in torch.profiler (ProfilerActivity.PrivateUse1), through Kineto.
const bool g_profiler_registered = (register_profiler(), true);

}  // namespace

}  // namespace torchferry

namespace at::native {
// scaled_dot_product_attention picks its kernel as the CPU would.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchferry::sdp_choice)
}  // namespace at::native

namespace torchferry {

// Every op without a kernel of its own runs on the CPU kernels, zero-copy.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&execute_on_host_kernels>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  m.impl("histc", TORCH_FN(histc));
  m.impl("histc.out", TORCH_FN(histc_out));
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward_overrideable));
  m.impl("record_stream", TORCH_FN(record_stream));
  register_unboxed_kernels(m);
}

// CompositeExplicitAutograd kernels that call a CPU DispatchStub on their arguments
// directly (`conj_physical_`: "DispatchStub: missing kernel for neuron") or accept only
// CPU/CUDA/XPU tensors (`mode.values`): the device runs them on the CPU kernels instead.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"conj_physical_", "mode.values"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&execute_on_host_kernels>());
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"_thnn_fused_gru_cell", "_thnn_fused_lstm_cell"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuse_fused_rnn_cell>());
  }
}

// Nested tensors have no device kernels: TorchNeuron registers none either (the snapshot's
// torch_neuronx/ has no NestedTensor registration), so ops on them fail as they would there,
// with the way out instead of "Could not run ... 'NestedTensorneuron' backend".
std::string nested_tensors_unsupported() {
  return "nested tensors (torch.nested) are not supported on the neuron device, as on "
         "TorchNeuron, which registers no NestedTensor kernels. PyTorch builds them itself in "
         "the inference fast path of nn.TransformerEncoder/TransformerEncoderLayer and "
         "nn.MultiheadAttention (eval mode, no grad, with a padding mask or a nested input). "
         "Next step: pass dense (padded) tensors with a key-padding mask, construct "
         "nn.TransformerEncoder(..., enable_nested_tensor=False), or call "
         "torch.backends.mha.set_fastpath_enabled(False).";
}

namespace {
void refuse_nested(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.operator_name().name, ": ", nested_tensors_unsupported());
}
}  // namespace

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_nested>());
}

// Sparse layouts likewise: TorchNeuron registers no sparse kernels.
namespace {
void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, op.operator_name().name,
      ": sparse tensors (torch.sparse layouts) are not supported on the neuron device, as on "
      "TorchNeuron, which registers no sparse kernels. Next step: keep the sparse tensor on the "
      "CPU, or make it dense (.to_dense()) before moving it to the device.");
}
}  // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

// `_copy_from` copies lazily conjugated or negated views itself (the host views keep
// the conj/neg bits), so the Conjugate and Negative fallbacks must not materialise them
// first: their `clone` would call `_copy_from` again, without end.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("dropout", TORCH_FN(dropout));
  m.impl("contiguous", TORCH_FN(contiguous));
}

// Also below autograd (inference mode), as TorchNeuron's PrivateUse1 registration; `_to_copy` there only
// (its autograd formula stays PyTorch's), as TorchNeuron registers it.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("contiguous", TORCH_FN(contiguous));
  m.impl("_to_copy", TORCH_FN(to_copy));
}

namespace {
// An op the target registers natively that PyTorch would otherwise decompose before this
// device saw it: counted as itself (one native call, one eager signature), then run as the
// CPU runs it, through PyTorch's composite (the CPU dispatch slot holds it).
void run_native_composite(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t begin = stack->size() - args.size();
  Signature signature;
  for (size_t i = 0; i < args.size(); ++i) signature.add((*stack)[begin + i], args[i]);
  NativeCompositeScope as_native(op, signature.value());
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// A natively registered CompositeExplicitAutograd op whose `device=` argument may name another device
// (`ones_like(x, device="cpu")`): run whole on host views, as the others, unless it does; then PyTorch's
// composite (the CPU dispatch slot holds it) makes the result there.
void run_native_unless_elsewhere(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t begin = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& value = (*stack)[begin + i];
    if (args[i].name() == "device" && value.isDevice() && value.toDevice().type() != c10::DeviceType::PrivateUse1) {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
      return;
    }
  }
  execute_on_host_kernels(op, keys, stack);
}
}  // namespace

// Ops the target registers natively that PyTorch implements as composites; the lists come
// from the profile at start-up (see _runtime.py). CompositeImplicitAutograd ops are registered
// above autograd (so the composite's parts still record autograd) and below it (inference
// mode). CompositeExplicitAutograd ops keep PyTorch's autograd formula and are registered
// below it only, as TorchNeuron registers them: each runs whole on host views, the CPU
// dispatch slot holding the composite, so its parts are CPU calls, not device ops; the
// optimizers' foreach ops among them run the same loop on kernels of their own (Unboxed.cpp).
void register_native_composites(const std::vector<std::string>& implicit_ops,
                                const std::vector<std::string>& explicit_ops,
                                const std::vector<std::string>& device_argument_ops) {
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  for (const auto key : {c10::DispatchKey::AutogradPrivateUse1, c10::DispatchKey::PrivateUse1}) {
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__);
    for (const std::string& name : implicit_ops) {
      library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_native_composite>());
    }
    libraries.push_back(std::move(library));
  }
  // The optimizers' native foreach ops have kernels of their own (Unboxed.cpp), and so do the ops with a
  // `device=` argument.
  auto own = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                                  __FILE__, __LINE__);
  std::vector<std::string> on_host_kernels;
  for (const std::string& name : explicit_ops) {
    if (!register_unboxed_foreach(*own, name)) on_host_kernels.push_back(name);
  }
  for (const std::string& name : device_argument_ops) {
    own->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_native_unless_elsewhere>());
  }
  libraries.push_back(std::move(own));
  register_cpu_kernels(on_host_kernels);
}

// Ops the device runs whole on the CPU dispatch slot's kernel over host views, in one
// dispatch, where PrivateUse1 would inherit a composite kernel (a decomposition, or `empty` +
// the `out=` variant): ops with a CPU kernel of their own (so the device computes what the
// CPU computes; the list is found at start-up from the dispatcher, see _runtime.py), and the
// natively registered CompositeExplicitAutograd ops above.
void register_cpu_kernels(const std::vector<std::string>& op_names) {
  static std::vector<std::unique_ptr<torch::Library>> libraries;
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                  c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const std::string& name : op_names) {
    library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&execute_on_host_kernels>());
  }
  libraries.push_back(std::move(library));
}

// Autocast: the same op lists and casting policies as CUDA and XPU.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using namespace at;
  using namespace at::autocast;
#define TORCHFERRY_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TORCHFERRY_LOWER)
#define TORCHFERRY_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TORCHFERRY_FP32)
#define TORCHFERRY_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHFERRY_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define TORCHFERRY_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TORCHFERRY_PROMOTE)
}

}  // namespace torchferry
