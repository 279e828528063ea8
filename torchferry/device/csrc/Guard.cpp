// Device guard, PrivateUse1 hooks, pinned host memory and the intra-op thread count of the
// autograd engine's device thread, for the built-in `neuron` device.
//
// Kernels run synchronously on the calling thread, so streams are bookkeeping
// (ids a user can create, set and synchronise) and an event is the host clock
// read when it is recorded; `elapsed_time` between two events is real wall time.
#include "neuron.h"

#include <ATen/Parallel.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/AutogradState.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/autograd/graph_task.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>

namespace torchferry {
namespace {

thread_local c10::DeviceIndex tls_current_device = 0;
// Every DeviceIndex (int8_t) has a slot: a plain array needs no size check and no
// thread-exit destructor, so reading it is one TLS access (the guard reads it per backward
// node, and autograd per recorded input).
thread_local std::array<c10::StreamId, std::numeric_limits<c10::DeviceIndex>::max() + 1> tls_current_streams{};
std::atomic<c10::StreamId> g_next_stream_id{1};
// The intra-op thread count of the threads that run device ops outside a backward.
std::atomic<int> g_intraop_threads{0};
// Whether a device backward runs on the thread that calls it (set once, at init).
bool g_backward_on_calling_thread = true;
// Whether this thread's backward thread has been chosen (at its first device op).
thread_local bool tls_backward_thread_chosen = false;

struct HostEvent {
  std::chrono::steady_clock::time_point when;
  bool recorded = false;
};

c10::StreamId& current_stream_slot(c10::DeviceIndex index) {
  TORCH_INTERNAL_ASSERT_DEBUG_ONLY(index >= 0, "a stream slot needs a device index, got ", int(index));
  return tls_current_streams[static_cast<size_t>(index)];
}

// A backward node's guard (twice per node) needs the full settle only when the count of
// the threads outside a backward is not the one this thread last settled to: that count
// changes only with `torch.set_num_threads`, and the ops inside the node settle in full.
// (docs/device/architecture.md, Performance, session 10: the per-node cost it removes).
void settle_node_threading() {
  thread_local int settled_to = -1;  // no thread count is -1: a thread's first call settles
  if (g_intraop_threads.load(std::memory_order_relaxed) == settled_to) return;
  settle_device_threading();
  settled_to = g_intraop_threads.load(std::memory_order_relaxed);
}

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device old = getDevice();
    if (old.index() != device.index()) setDevice(device);
    return old;
  }

  c10::Device getDevice() const override { return c10::Device(kNeuron, current_device()); }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kNeuron, "expected a neuron device, got ", device);
    set_current_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    tls_current_device = device.index();
  }

  c10::Stream getStream(c10::Device device) const override {
    const auto index = device.has_index() ? device.index() : current_device();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, index), current_stream_slot(index));
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, device, g_next_stream_id.fetch_add(1));
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool is_high_priority) const override {
    return getNewStream(device, is_high_priority ? -1 : 0);
  }

  // The engine guards onto each device node's stream before running it (and back after),
  // on its device thread: the one place every device backward node passes, compiled ones
  // included. Both calls settle the thread count only when it changed since this thread
  // last did (`settle_node_threading`), and a stream that does not change is not written.
  c10::Stream exchangeStream(c10::Stream stream) const override {
    settle_node_threading();
    const c10::DeviceIndex index = stream.device().has_index() ? stream.device_index() : current_device();
    c10::StreamId& slot = current_stream_slot(index);
    const c10::Stream old(c10::Stream::UNSAFE, c10::Device(kNeuron, index), slot);
    if (slot != stream.id()) slot = stream.id();
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return device_count(); }

  void record(void** event, const c10::Stream& /*stream*/, const c10::DeviceIndex /*index*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) *event = new HostEvent();
    auto* e = static_cast<HostEvent*>(*event);
    e->when = std::chrono::steady_clock::now();
    e->recorded = true;
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*index*/) const noexcept override {
    delete static_cast<HostEvent*>(event);
  }

  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*index*/) const override {}
  void recordDataPtrOnStream(const c10::DataPtr& /*ptr*/, const c10::Stream& /*stream*/) const override {}

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr &&
                    static_cast<HostEvent*>(start)->recorded &&
                    static_cast<HostEvent*>(end)->recorded,
                "Both events must be recorded before calculating elapsed time.");
    const auto d = static_cast<HostEvent*>(end)->when - static_cast<HostEvent*>(start)->when;
    return std::chrono::duration<double, std::milli>(d).count();
  }
};

// Pinned host memory (`pin_memory=True`, `Tensor.pin_memory()`): page-aligned host
// blocks whose ranges are remembered, so that `is_pinned()` is true exactly for memory
// this allocator handed out (and for views into it), as on CUDA. DDP's reducer relies
// on that (`find_unused_parameters=True` asserts its pinned staging tensor is pinned).
class PinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool contains(const void* ptr) const {
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return false;
    --it;
    return address < it->first + it->second;
  }

  static PinnedHostAllocator& instance() {
    static PinnedHostAllocator allocator;
    return allocator;
  }

 private:
  static void release(void* data) {
    {
      std::lock_guard<std::mutex> lock(instance().mutex_);
      instance().blocks_.erase(reinterpret_cast<uintptr_t>(data));
    }
    c10::free_cpu(data);
  }

  mutable std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_;  // start address -> size of each live block
};

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count();
  }
  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const auto old = current_device();
    set_current_device(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index < 0 ? current_device() : index);
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return at::Device(kNeuron, current_device());
  }
  // Pinned exactly where the pinned allocator handed the memory out. (The real
  // TorchNeuron answers true for every pointer: NeuronHooksInterface.h, isPinnedPtr.)
  bool isPinnedPtr(const void* data) const override {
    return PinnedHostAllocator::instance().contains(data);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override {
    return &PinnedHostAllocator::instance();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_nbytes) const override {
    resize_device_storage(storage, new_nbytes);
  }
};

}  // namespace

c10::DeviceIndex current_device() { return tls_current_device; }

// PyTorch's autograd engine runs the backward of device tensors on a thread of its own
// per device type; the CPU's backward runs on the calling thread. On this device that
// thread runs CPU kernels, so it brings a second OpenMP team: with more OpenMP threads
// than cores, libgomp's workers stop spinning between parallel regions (GOMP's throttled
// spin count) and every op waits for its workers to wake, on both devices (forward and
// optimizer included: a 4x256 Llama step took 1.6x the CPU's wall time at 2 threads, at
// equal CPU time). So each thread, at its first device op, turns PyTorch's multithreaded
// backward off for itself (thread-local autograd state, what
// `torch.autograd.set_multithreading_enabled(False)` sets): its backward then runs on the
// calling thread, as the CPU's does. TORCHFERRY_BACKWARD_THREAD=device keeps the device
// thread; so does the user's own `set_multithreading_enabled(True)` after that first op.
//
// The device thread, where it is used, sets its intra-op (OpenMP) count once, when it
// starts (at::init_num_threads). After a
// `torch.set_num_threads`, the device's backward would keep the old count: the two
// devices' reductions would split differently (gradients no longer bitwise equal) and
// two OpenMP teams of different sizes would share the cores. So device work outside a
// backward records its thread's count, and device work inside one takes that count
// when its own differs. A thread whose backward runs on itself (multithreading off, the
// default above) has one thread count for both and skips the rest: one thread-local read
// per op, not the thread count's and the graph task's.
namespace {
[[gnu::noinline]] void choose_backward_thread() {
  if (torch::autograd::get_current_graph_task_id() >= 0) return;  // chosen outside a backward
  tls_backward_thread_chosen = true;
  if (g_backward_on_calling_thread) c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
}
}  // namespace

void settle_device_threading() {
  if (!tls_backward_thread_chosen) [[unlikely]] choose_backward_thread();
  if (!c10::AutogradState::get_tls_state().get_multithreading_enabled()) return;
  const int mine = at::get_num_threads();
  if (torch::autograd::get_current_graph_task_id() < 0) {
    if (g_intraop_threads.load(std::memory_order_relaxed) != mine) {
      g_intraop_threads.store(mine, std::memory_order_relaxed);
    }
    return;
  }
  const int wanted = g_intraop_threads.load(std::memory_order_relaxed);
  if (wanted > 0 && wanted != mine) at::set_num_threads(wanted);
}

void set_backward_thread(bool on_calling_thread) { g_backward_on_calling_thread = on_calling_thread; }

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  tls_current_device = index;
}

c10::impl::DeviceGuardImplInterface* guard_impl() {
  static NeuronGuardImpl impl;
  return &impl;
}

// CUDA's caching allocator keeps a block that another stream still uses from being
// reused until that stream's work is done. Here every kernel has finished when it
// returns, so the block has no pending use on any stream: the guard records nothing.
// The checks are those of the real device (RecordStream.cpp in torch-neuronx).
void record_stream(at::Tensor& self, c10::Stream stream) {
  static const KnownOp op = known_op("aten::record_stream", "");
  TORCH_CHECK(self.device().type() == kNeuron,
              "record_stream: expected a neuron tensor, got one on ", self.device());
  TORCH_CHECK(stream.device_type() == kNeuron,
              "record_stream: expected a neuron stream, got one on ", stream.device(),
              "; pass torch.neuron.current_stream() or a torch.neuron.Stream()");
  guard_impl()->recordDataPtrOnStream(self.storage().data_ptr(), stream);
  count_op(op);
}

void register_hooks() {
  static NeuronHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
}

}  // namespace torchferry
