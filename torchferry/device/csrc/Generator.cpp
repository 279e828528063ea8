// Per-device RNG of the built-in `neuron` device.
//
// Each neuron generator owns a CPU (mt19937) generator that the CPU kernels draw
// from. The same seed therefore gives the same numbers as on the CPU, while the
// device keeps its own stream (seeding or drawing on `neuron` never moves the CPU's),
// as every accelerator does.
//
// With the host stream (`TORCHFERRY_RNG=host`, what `ferry check` sets in its target's
// processes) the default generators draw from the CPU's default generator itself: one
// stream, so that a script that draws noise on the device, shuffles on the CPU and
// initialises on the CPU draws the very numbers its CPU run draws, in the same order.
#include "neuron.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>
#include <vector>

namespace torchferry {
namespace {

struct NeuronGeneratorImpl final : public c10::GeneratorImpl {
  explicit NeuronGeneratorImpl(c10::DeviceIndex index)
      : c10::GeneratorImpl(c10::Device(kNeuron, index), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        host(at::make_generator<at::CPUGeneratorImpl>(c10::default_rng_seed_val)) {}

  static c10::DeviceType device_type() { return kNeuron; }

  void set_current_seed(uint64_t seed) override { host.set_current_seed(seed); }
  uint64_t current_seed() const override { return host.current_seed(); }
  uint64_t seed() override { return host.seed(); }
  void set_offset(uint64_t offset) override { host.set_offset(offset); }
  uint64_t get_offset() const override { return host.get_offset(); }
  void set_state(const c10::TensorImpl& state) override { host.unsafeGetGeneratorImpl()->set_state(state); }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override { return host.get_state().getIntrusivePtr(); }

  NeuronGeneratorImpl* clone_impl() const override {
    auto* copy = new NeuronGeneratorImpl(device().index());
    copy->host = host.clone();
    return copy;
  }

  at::Generator host;
};

std::once_flag g_defaults_once;
std::vector<at::Generator> g_defaults;
bool g_host_stream = false;

}  // namespace

void use_host_stream(bool host) {
  TORCH_CHECK(g_defaults.empty(), "the random stream is chosen before the first default generator is made");
  g_host_stream = host;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  std::call_once(g_defaults_once, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      g_defaults.push_back(at::make_generator<NeuronGeneratorImpl>(i));
      if (g_host_stream) {
        auto* impl = static_cast<NeuronGeneratorImpl*>(g_defaults.back().unsafeGetGeneratorImpl());
        impl->host = at::detail::getDefaultCPUGenerator();  // the same generator, not a copy
      }
    }
  });
  check_device_index(index);
  return g_defaults[index];
}

at::Generator new_generator(c10::DeviceIndex index) {
  check_device_index(index);
  return at::make_generator<NeuronGeneratorImpl>(index);
}

at::Generator host_generator(const at::Generator& neuron_generator) {
  auto* impl = dynamic_cast<NeuronGeneratorImpl*>(neuron_generator.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "expected a neuron generator, got one for ", neuron_generator.device());
  return impl->host;
}

}  // namespace torchferry
