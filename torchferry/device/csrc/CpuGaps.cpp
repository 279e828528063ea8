// Kernels the CPU lacks but accelerators provide. Libraries take accelerator code
// paths on any device that is not the CPU, so a host-backed device must compute
// these correctly instead of failing where the real device would not.
// Each gap has a test in tests/device/test_cpu_gaps.py.
#include "neuron.h"

#include <ATen/ops/histc_ops.h>

namespace torchferry {

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
  count_op("aten::histc", "out");
  const bool integral = at::isIntegralType(self.scalar_type(), /*includeBool=*/true);
  at::Tensor host_self = host_view_of(self);
  at::Tensor counts = at::_ops::histc::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                  integral ? host_self.to(at::kDouble) : host_self,
                                                  bins, min, max);
  out.resize_(counts.sizes());
  host_view_of(out).copy_(counts);
  return out;
}

}  // namespace torchferry
