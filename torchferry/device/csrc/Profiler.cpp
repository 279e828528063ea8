// Device activity of the built-in `neuron` device in torch.profiler.
//
// PyTorch's documented route for a PrivateUse1 backend (docs/source/accelerator/
// profiler.md): a libkineto::IActivityProfiler registered with the PrivateUse1 profiler
// registry (torch/csrc/profiler/standalone/privateuse1_profiler.h). Kineto asks it for
// a session when a profile with ProfilerActivity.PrivateUse1 starts, forwards each CPU
// op's correlation id to it, and at the end merges the activities it logs into the
// trace. The CPU-only wheel's Kineto runs such child profilers too; device events come
// only from them (the legacy ProfilerStubs path serves `use_device=` without Kineto).
//
// Each op the device runs (Execution.cpp, `ProfiledOp`) becomes one kernel activity on
// the device's track, linked to the CPU op that launched it; ops the target runs on the
// host are named "<op> [host fallback]" and carry `"fallback": "host"`. Times are the
// host's: the kernel is the CPU kernel, so its span is host time, not Trainium's.
#ifndef USE_KINETO
// The torch 2.13 wheel is built with Kineto (torch.autograd.kineto_available()); its
// headers declare the PrivateUse1 profiler registry only under this macro.
#define USE_KINETO
#endif

#include "neuron.h"

#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>  // IActivityProfiler, and CpuTraceBuffer complete for getTraceBuffer()
#include <output_base.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace torchferry {
namespace {

struct DeviceOp {
  std::string name;
  int64_t start_ns;
  int64_t end_ns;
  c10::DeviceIndex device;
  int64_t stream;
  uint64_t correlation;
  bool on_host;
};

std::mutex g_mutex;
std::vector<DeviceOp> g_ops;
// Correlation ids of the CPU ops being run on this thread (Kineto pushes and pops them).
thread_local std::vector<uint64_t> tls_correlation;

const std::set<libkineto::ActivityType>& device_activities() {
  static const std::set<libkineto::ActivityType> types{libkineto::ActivityType::CONCURRENT_KERNEL};
  return types;
}

class NeuronProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  void start() override {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_ops.clear();
    }
    g_profiling_device.store(true, std::memory_order_release);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    g_profiling_device.store(false, std::memory_order_release);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return {}; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t start_ns,
                    int64_t end_ns) override {
    std::vector<DeviceOp> ops;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      ops.swap(g_ops);
    }
    span_ = libkineto::TraceSpan(start_ns, end_ns, "neuron");
    for (const DeviceOp& op : ops) {
      // Kineto's loggers keep pointers to the activities: the session owns them.
      libkineto::GenericTraceActivity& activity = activities_.emplace_back(
          span_, libkineto::ActivityType::CONCURRENT_KERNEL,
          op.on_host ? op.name + " [host fallback]" : op.name);
      activity.startTime = op.start_ns;
      activity.endTime = op.end_ns;
      activity.id = static_cast<int32_t>(op.correlation);
      activity.device = op.device;
      activity.resource = static_cast<int32_t>(op.stream);
      activity.threadId = static_cast<int32_t>(op.stream);
      activity.addMetadataQuoted("device", "neuron:" + std::to_string(op.device));
      activity.addMetadataQuoted("fallback", op.on_host ? "host" : "none");
      if (linked_activity && op.correlation != 0) {
        activity.linked = linked_activity(static_cast<int32_t>(op.correlation));
        activity.flow.id = static_cast<uint32_t>(op.correlation);
        activity.flow.type = libkineto::kLinkAsyncCpuGpu;
        activity.flow.start = false;
      }
      activity.log(logger);
    }
    status_ = libkineto::TraceStatus::READY;
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
        0, 0, "neuron (torchferry host device)", "neuron"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> resources;
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      resources.push_back({0, i, i, "neuron:" + std::to_string(i) + " stream 0"});
    }
    return resources;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override { tls_correlation.push_back(id); }

  void popCorrelationId() override {
    if (!tls_correlation.empty()) tls_correlation.pop_back();
  }

 private:
  libkineto::TraceSpan span_{0, 0, "neuron"};
  std::deque<libkineto::GenericTraceActivity> activities_;
};

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return device_activities();
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& /*config*/) override {
    for (auto type : activity_types) {
      if (device_activities().count(type)) return std::make_unique<NeuronProfilerSession>();
    }
    return nullptr;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"neuron"};
};

}  // namespace

std::atomic<bool> g_profiling_device{false};

void ProfiledOp::start(const c10::OperatorHandle& op, bool on_host, c10::DeviceIndex index) {
  op_ = &op;
  on_host_ = on_host;
  index_ = index;
  start_ns_ = c10::getTime();
}

void ProfiledOp::finish() {
  const int64_t end_ns = c10::getTime();
  const uint64_t correlation = tls_correlation.empty() ? 0 : tls_correlation.back();
  const int64_t stream = guard_impl()->getStream(c10::Device(kNeuron, index_)).id();
  const c10::OperatorName& name = op_->operator_name();
  std::string label = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ops.push_back({std::move(label), start_ns_, end_ns, index_, stream, correlation, on_host_});
}

void register_profiler() {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
      [] { return std::make_unique<NeuronActivityProfiler>(); });
}

}  // namespace torchferry
