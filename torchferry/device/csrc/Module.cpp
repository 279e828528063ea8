// Python bindings of the built-in `neuron` device (`torchferry.device._C`).
// Thin glue: each function forwards to the file that implements it.
#include "neuron.h"

#include <c10/core/AutogradState.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/extension.h>

namespace torchferry {
namespace {

c10::CachingDeviceAllocator::DeviceStats stats_of(c10::DeviceIndex index) {
  return neuron_allocator()->getDeviceStats(index);
}

py::dict stat_dict(const c10::CachingAllocator::Stat& stat) {
  py::dict d;
  d["current"] = stat.current;
  d["peak"] = stat.peak;
  d["allocated"] = stat.allocated;
  d["freed"] = stat.freed;
  return d;
}

py::dict memory_stats(c10::DeviceIndex index) {
  const auto s = stats_of(index);
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  py::dict d;
  d["allocated_bytes"] = stat_dict(s.allocated_bytes[agg]);
  d["reserved_bytes"] = stat_dict(s.reserved_bytes[agg]);
  d["active_bytes"] = stat_dict(s.active_bytes[agg]);
  d["requested_bytes"] = stat_dict(s.requested_bytes[agg]);
  d["allocation"] = stat_dict(s.allocation[agg]);
  d["segment"] = stat_dict(s.segment[agg]);
  d["num_ooms"] = s.num_ooms;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  d["capacity_bytes"] = device_capacity(index);
  return d;
}

// Calls `account` with the op names, its TORCH_WARNs raised as Python warnings (as an op
// called from Python warns), so that warning filters and `warnings.catch_warnings` see them.
template <void (*account)(const std::vector<std::string>&)>
void with_python_warnings(const std::vector<std::string>& op_names) {
  HANDLE_TH_ERRORS
  account(op_names);
  END_HANDLE_TH_ERRORS_PYBIND
}

}  // namespace
}  // namespace torchferry

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace torchferry;
  m.doc() = "C++ core of torchferry's built-in neuron device (PrivateUse1).";
  m.def("_use_host_stream", &use_host_stream);
  m.def("_init", [](int count, int64_t capacity, const std::string& capacity_source, bool caching,
                    bool backward_on_calling_thread) {
    init_devices(static_cast<c10::DeviceIndex>(count), capacity, capacity_source, caching);
    set_backward_thread(backward_on_calling_thread);
    register_hooks();
  });
  m.def("_device_count", [] { return int(device_count()); });
  m.def("_current_device", [] { return int(current_device()); });
  m.def("_set_device", [](int index) { set_current_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("_memory_stats", [](int index) { return memory_stats(static_cast<c10::DeviceIndex>(index)); });
  m.def("_empty_cache", [] { neuron_allocator()->emptyCache(); });
  m.def("_reset_peak_memory_stats", [](int index) {
    neuron_allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_reset_accumulated_memory_stats", [](int index) {
    neuron_allocator()->resetAccumulatedStats(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_default_generator", [](int index) {
    return default_generator(static_cast<c10::DeviceIndex>(index));
  });
  m.def("_set_target", [](const std::unordered_map<std::string, int>& codes,
                          const std::unordered_map<std::string, std::string>& reasons,
                          int default_code, const std::string& default_reason, int mode,
                          const std::string& profile, bool target_numerics, int rules,
                          const std::unordered_map<std::string, int64_t>& int32_args) {
    set_target(codes, reasons, default_code, default_reason, static_cast<FallbackMode>(mode),
               profile, target_numerics, rules, int32_args);
  });
  m.def("_register_cpu_kernels", &register_cpu_kernels);
  m.def("_register_native_composites", &register_native_composites);
  m.def("_account_ops", &with_python_warnings<account_ops>);
  m.def("_unboxed_ops", &unboxed_op_names);
  m.def("_unboxed_foreach_ops", &unboxed_foreach_op_names);
  // Called at interpreter exit (atexit). The autograd engine's worker thread for
  // each device keeps its last graph task, and with it Python objects from the
  // thread-local state of the `backward()` call, until the thread ends. The thread
  // ends during interpreter finalisation, cannot take the GIL to release them, and
  // the process aborts ("terminate called without an active exception"). One tiny
  // backward per device from C++ (no Python state attached) replaces that task while
  // Python is alive; the GIL is released so that the worker can drop the old one.
  m.def("_release_autograd_workers", [] {
    py::gil_scoped_release no_gil;
    // The device threads, not this one, hold the tasks to replace.
    c10::AutogradState& autograd = c10::AutogradState::get_tls_state();
    const bool multithreading = autograd.get_multithreading_enabled();
    autograd.set_multithreading_enabled(true);
    try {
      for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
        at::Tensor x = at::ones({1}, at::TensorOptions().device(kNeuron, i)).requires_grad_();
        torch::autograd::backward({x.sum()});
      }
    } catch (const std::exception&) {
      // Exiting anyway: never turn a clean exit into an error.
    }
    autograd.set_multithreading_enabled(multithreading);
  });
  // A CPU tensor over a device tensor's bytes (no copy): for collectives and compiled
  // code that run on host kernels. Writes through it change the device tensor.
  m.def("_host_view", [](const at::Tensor& t) { return host_view_of(t); });
  // Calls `fn(args)` (a compiled graph) with its host allocations served from device
  // `index`'s block cache, as a device op's CPU kernel is.
  m.def("_call_with_device_memory", [](const py::object& fn, const py::object& args, int index) {
    KernelMemoryScope kernel_memory(static_cast<c10::DeviceIndex>(index));
    return fn(args);
  });
  m.def("_adopt_host_results", [](const std::vector<at::Tensor>& hosts, int index) {
    return adopt_host_results(hosts, static_cast<c10::DeviceIndex>(index));
  });
  m.def("_executed_ops", &executed_ops);
  m.def("_executed_op_count", &executed_op_count);
  m.def("_enter_uncounted", &enter_uncounted);
  m.def("_exit_uncounted", &exit_uncounted);
  m.def("_fallback_ops", &fallback_ops);
  m.def("_clear_op_tracking", &clear_op_tracking);
  m.def("_fallback_reasons", &fallback_reasons_seen);
  m.def("_fallback_disabled_message", &fallback_disabled_message);
  m.def("_set_known_issues", &set_known_issues);
  m.def("_known_issue_calls", &known_issue_calls);
  m.def("_note_graph_known_issues", &with_python_warnings<note_graph_known_issues>);
  m.def("_graph_known_issue_calls", &graph_known_issue_calls);
  m.def("_host_syncs", &host_syncs);
  m.def("_eager_compile_counts", &eager_compile_counts);
  m.def("_load_persisted_signatures", &load_persisted_signatures);
  m.def("_take_unsaved_signatures", &take_unsaved_signatures);
  m.def("_forget_seen_signatures", &forget_seen_signatures);
}
