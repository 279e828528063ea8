// Kernels the CPU lacks but accelerators provide. Libraries take accelerator code
// paths on any device that is not the CPU, so a host-backed device must compute
// these correctly instead of failing where the real device would not.
// Each gap has a test in tests/device/test_cpu_gaps.py.
#include "neuron.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/histc_ops.h>

namespace torchferry {
namespace {

std::optional<at::Tensor> optional_host_view(const std::optional<at::Tensor>& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return torchferry::host_view_of(*t);
}

}  // namespace

// The CPU has no integer histc ("histogram_cpu" not implemented for 'Int'), but
// accelerators do, and libraries call it on integers off the CPU (transformers'
// mixture-of-experts routing). Integer inputs are counted in float64, exact for
// every integer below 2**53, then cast back to the input's dtype as the
// accelerator kernels return it.
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  at::Tensor out = at::empty({0}, self.options());
  histc_out(self, bins, min, max, out);
  return out;
}

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                      const at::Scalar& max, at::Tensor& out) {
  static const KnownOp op = known_op("aten::histc", "out");
  const OpInfo& info = account(op);
  if (info.checks(self.scalar_type())) {
    if (info.refuses(self.scalar_type())) throw_unsupported_dtype(info, self.scalar_type());
    note_known_issue(info);
  }
  const bool integral = at::isIntegralType(self.scalar_type(), /*includeBool=*/true);
  at::Tensor host_self = host_view_of(self);
  at::Tensor counts = at::_ops::histc::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                  integral ? host_self.to(at::kDouble) : host_self,
                                                  bins, min, max);
  at::native::resize_output(out, counts.sizes());  // warns on a wrong-shaped out=, as the CPU does
  host_view_of(out).copy_(counts);
  return out;
}

}  // namespace torchferry

namespace torchferry {

// PyTorch's convolution picks the `Overrideable` backend for every PrivateUse1
// device and calls `convolution_overrideable`, which has no kernel unless the device
// brings one ("convolution_overrideable not implemented"), so Conv1d/Conv2d and the
// causal-conv layers of state-space models fail on a naive host-backed device. The
// device runs the CPU's convolution (same backend choice, so the CPU's numbers).
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                   c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                   bool transposed, c10::IntArrayRef output_padding,
                                   int64_t groups) {
  static const KnownOp op = known_op("aten::convolution_overrideable", "");
  count_op(op);
  KernelMemoryScope kernel_memory(input.device().index());
  at::Tensor out = at::convolution(host_view_of(input), host_view_of(weight), optional_host_view(bias),
                                   stride, padding, dilation, transposed, output_padding, groups);
  return adopt_host_result(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  static const KnownOp op = known_op("aten::convolution_backward_overrideable", "");
  count_op(op);
  const int64_t bias_size = transposed ? weight.size(1) * groups : weight.size(0);
  const c10::DeviceIndex index = input.device().index();
  KernelMemoryScope kernel_memory(index);
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      host_view_of(grad_output), host_view_of(input), host_view_of(weight),
      c10::IntArrayRef{bias_size}, stride, padding, dilation, transposed, output_padding, groups,
      output_mask);
  auto to_device = [index](const at::Tensor& t) { return t.defined() ? adopt_host_result(t, index) : t; };
  return {to_device(grad_input), to_device(grad_weight), to_device(grad_bias)};
}

}  // namespace torchferry

namespace torchferry {

// ATen's GRU and LSTM cells (RNN.cpp) call the fused cell kernels `_thnn_fused_gru_cell` /
// `_thnn_fused_lstm_cell` for CUDA, XPU and PrivateUse1 inputs. Only CUDA has them.
// TorchNeuron registers neither, and its CPU fallback finds no CPU kernel. Its own runs of
// PyTorch's suite list the failure: tests/pytorch_tests/specs/ddp_spec.json,
// test_ddp_packed_sequence, "Could not run 'aten::_thnn_fused_lstm_cell' with arguments
// from the 'CPU' backend", and failing_test_methods/TestNNDeviceType.json (GRU/LSTM tests).
// So nn.GRU, nn.GRUCell, nn.LSTM and nn.LSTMCell fail on the device as they would on the
// target, counted as host fallbacks, with a message that names the way out.
void refuse_fused_rnn_cell(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  account(op);  // a host fallback on the target: counted (and warned or refused) first
  const std::string& name = op.operator_name().name;
  const char* module = name.find("gru") != std::string::npos ? "nn.GRU/nn.GRUCell" : "nn.LSTM/nn.LSTMCell";
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "Could not run '", name, "' with arguments from the 'CPU' backend: ", module,
      " on the neuron device calls this CUDA-only fused cell, and TorchNeuron has no kernel "
      "for it (its CPU fallback fails the same way; TorchNeuron's own test lists mark "
      "nn.LSTM/nn.GRU tests failing). Next step: write the cell with nn.Linear and "
      "torch.sigmoid/torch.tanh so that it compiles for the device, or keep the RNN on the CPU.");
}

}  // namespace torchferry
