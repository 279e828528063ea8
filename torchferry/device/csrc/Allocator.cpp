// Device memory of the built-in `neuron` device: host memory with per-device
// statistics and a per-device capacity, so that a workload that would not fit one
// logical NeuronCore fails here the way it would on the real device.
//
// Freed device blocks are cached for reuse (by size class), and while a device op
// runs its CPU kernel, that kernel's own allocations (the results the device then
// adopts) come from the same cache. Without it, device memory would cycle through
// glibc's per-thread malloc arenas: PyTorch runs a device's backward on the autograd
// engine's device thread, so a step's activations are freed there and its gradients
// come from that thread's arena; glibc trims both arenas after every step and the next
// step faults its pages in again (docs/device/architecture.md, Performance, session 5).
// The CPU keeps one arena warm for both passes; the cache gives the device the same.
#include "neuron.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace torchferry {
namespace {

// The size class a request is served from: whole pages under 1 MiB, then eight classes
// per power of two, so a block is at most 1/8 larger than asked.
size_t size_class(size_t nbytes) {
  size_t step = 4096;
  if (nbytes >= (size_t(1) << 20)) step = size_t(1) << (63 - __builtin_clzll(nbytes) - 3);
  return (nbytes + step - 1) & ~(step - 1);
}

// A size class's place in a device's free lists: its page count up to 1 MiB, then eight
// places per power of two (an array index, where a hash map cost a hash and a probe per block).
constexpr size_t kSizeClasses = 256 + (64 - 20) * 8 + 1;
size_t class_slot(size_t cls) {
  if (cls < (size_t(1) << 20)) return cls >> 12;
  const int log2 = 63 - __builtin_clzll(cls);
  return 256 + static_cast<size_t>(log2 - 20) * 8 + ((cls >> (log2 - 3)) - 8);
}

struct DeviceMemory {
  int64_t capacity = 0;
  std::string capacity_source;  // where the capacity came from (the profile or TORCHFERRY_DEVICE_MEMORY), for OOMs
  std::atomic<int64_t> allocated{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocated_total{0};  // cumulative bytes
  std::atomic<int64_t> freed_total{0};
  std::atomic<int64_t> num_allocs{0};       // cumulative allocation count
  std::atomic<int64_t> num_frees{0};
  std::atomic<int64_t> live_allocs{0};
  std::atomic<int64_t> live_allocs_peak{0};
  std::atomic<int64_t> num_ooms{0};
  std::atomic<int64_t> cached{0};         // bytes of freed blocks kept for reuse
  std::atomic<int64_t> reserved_peak{0};  // of allocated + cached
  // Freed blocks by size class (`class_slot`), each list LIFO.
  std::array<std::vector<void*>, kSizeClasses> free_blocks;
};

// Never destroyed: device tensors may be freed during interpreter finalisation, after
// static destructors have run.
std::vector<std::unique_ptr<DeviceMemory>>& devices() {
  static auto* d = new std::vector<std::unique_ptr<DeviceMemory>>();
  return *d;
}

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t old = peak.load(std::memory_order_relaxed);
  while (value > old && !peak.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
}

std::string format_bytes(int64_t n) {
  std::ostringstream s;
  s.precision(2);
  s << std::fixed;
  if (n >= (int64_t(1) << 30)) {
    s << double(n) / double(int64_t(1) << 30) << " GiB";
  } else if (n >= (int64_t(1) << 20)) {
    s << double(n) / double(int64_t(1) << 20) << " MiB";
  } else {
    s << n << " bytes";
  }
  return s.str();
}

DeviceMemory& memory_of(c10::DeviceIndex index) {
  check_device_index(index);
  return *devices()[index];
}

// Charges `nbytes` to the device or raises torch.OutOfMemoryError naming the device,
// the request, the capacity and the knob that sets it.
void charge(c10::DeviceIndex index, size_t nbytes) {
  DeviceMemory& m = memory_of(index);
  const int64_t n = static_cast<int64_t>(nbytes);
  const int64_t now = m.allocated.fetch_add(n, std::memory_order_relaxed) + n;
  if (now > m.capacity) {
    m.allocated.fetch_sub(n, std::memory_order_relaxed);
    m.num_ooms.fetch_add(1, std::memory_order_relaxed);
    TORCH_CHECK_WITH(OutOfMemoryError, false, "neuron:", int(index),
                     " out of memory: tried to allocate ", format_bytes(n), " with ",
                     format_bytes(now - n), " already allocated; the device holds ",
                     format_bytes(m.capacity), " (", m.capacity_source, "). Reduce the "
                     "batch or model size, or set TORCHFERRY_DEVICE_MEMORY (e.g. 48GiB) to "
                     "rehearse a larger device.");
  }
  raise_peak(m.peak, now);
  raise_peak(m.reserved_peak, now + m.cached.load(std::memory_order_relaxed));
  if (c10::memoryProfilingEnabled()) {  // profile_memory=True: attributed to neuron:<index>
    c10::reportMemoryUsageToProfiler(nullptr, n, now, now, c10::Device(kNeuron, index));
  }
  m.allocated_total.fetch_add(n, std::memory_order_relaxed);
  m.num_allocs.fetch_add(1, std::memory_order_relaxed);
  raise_peak(m.live_allocs_peak, m.live_allocs.fetch_add(1, std::memory_order_relaxed) + 1);
}

void release(c10::DeviceIndex index, size_t nbytes) {
  DeviceMemory& m = *devices()[index];
  const int64_t n = static_cast<int64_t>(nbytes);
  const int64_t now = m.allocated.fetch_sub(n, std::memory_order_relaxed) - n;
  if (c10::memoryProfilingEnabled()) {
    c10::reportMemoryUsageToProfiler(nullptr, -n, now, now, c10::Device(kNeuron, index));
  }
  m.freed_total.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
  m.num_frees.fetch_add(1, std::memory_order_relaxed);
  m.live_allocs.fetch_sub(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------- block cache
// Blocks under this size are left to malloc: its per-thread bins reuse them without
// trimming, and a lock and a table look-up would cost more than they save.
constexpr size_t kCachedMin = 16 * 1024;

bool g_caching = true;  // TORCHFERRY_NO_MEMORY_CACHING=1 turns the cache off (set at init)

// Guards every device's free blocks and the table of blocks lent to CPU kernels.
std::mutex& cache_mutex() {
  static auto* m = new std::mutex();
  return *m;
}

void* fresh_block(size_t nbytes);

// A cached block of class `cls` for device `index`, or null (cache_mutex held).
void* pop_cached(c10::DeviceIndex index, size_t cls) {
  DeviceMemory& m = *devices()[index];
  std::vector<void*>& blocks = m.free_blocks[class_slot(cls)];
  if (blocks.empty()) return nullptr;
  void* data = blocks.back();
  blocks.pop_back();
  m.cached.fetch_sub(static_cast<int64_t>(cls), std::memory_order_relaxed);
  return data;
}

// Keeps a freed block of class `cls` for reuse (cache_mutex held).
void push_cached(c10::DeviceIndex index, void* data, size_t cls) {
  DeviceMemory& m = *devices()[index];
  m.free_blocks[class_slot(cls)].push_back(data);
  const int64_t cached = m.cached.fetch_add(static_cast<int64_t>(cls), std::memory_order_relaxed) +
                         static_cast<int64_t>(cls);
  raise_peak(m.reserved_peak, m.allocated.load(std::memory_order_relaxed) + cached);
}

// A block of at least `nbytes` for device `index` and its size class (0: not cached,
// malloc'd to the exact size).
std::pair<void*, size_t> take_block(c10::DeviceIndex index, size_t nbytes) {
  if (!g_caching || nbytes < kCachedMin) return {c10::alloc_cpu(nbytes), 0};
  const size_t cls = size_class(nbytes);
  void* data;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    data = pop_cached(index, cls);
  }
  return {data != nullptr ? data : fresh_block(cls), cls};
}

void give_block(c10::DeviceIndex index, void* data, size_t cls) {
  if (cls == 0) return c10::free_cpu(data);
  std::lock_guard<std::mutex> lock(cache_mutex());
  push_cached(index, data, cls);
}

// Returns every device's cached blocks to the host (`torch.neuron.empty_cache()`).
void release_cached_blocks() {
  std::vector<void*> freed;
  {
    std::lock_guard<std::mutex> lock(cache_mutex());
    for (auto& m : devices()) {
      for (std::vector<void*>& blocks : m->free_blocks) {
        freed.insert(freed.end(), blocks.begin(), blocks.end());
        blocks.clear();
      }
      m->cached.store(0, std::memory_order_relaxed);
    }
  }
  for (void* data : freed) c10::free_cpu(data);
}

// A new block from the host; when the host is out of memory, the cache is released and
// the allocation tried once more (as PyTorch's caching allocators do).
void* fresh_block(size_t nbytes) {
  try {
    return c10::alloc_cpu(nbytes);
  } catch (const c10::Error&) {
    release_cached_blocks();
    return c10::alloc_cpu(nbytes);
  }
}

// The device whose cache the CPU kernels on this thread allocate from (-1: none).
thread_local c10::DeviceIndex t_kernel_device = -1;

// Blocks lent to CPU kernels, by address: their DataPtr has the address as its context
// (as the CPU allocator's own do, so `raw_allocate` keeps working), so the size class and
// device are looked up here when the block comes back.
std::unordered_map<void*, std::pair<size_t, c10::DeviceIndex>>& lent_blocks() {
  static auto* lent = new std::unordered_map<void*, std::pair<size_t, c10::DeviceIndex>>();
  return *lent;
}

// Takes a lent block back into its device's cache; false if `data` was not lent.
bool return_lent(void* data) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto it = lent_blocks().find(data);
  if (it == lent_blocks().end()) return false;
  const auto [cls, index] = it->second;
  lent_blocks().erase(it);
  push_cached(index, data, cls);
  return true;
}

void free_lent(void* data) { return_lent(data); }

// The process's CPU allocator while the device is loaded: the allocator it replaced,
// except for a CPU kernel run by a device op (`KernelMemoryScope`), whose blocks of
// kCachedMin bytes and more come from the device's cache.
class KernelAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex index = t_kernel_device;
    if (index < 0 || nbytes < kCachedMin) return host()->allocate(nbytes);
    // Installed only with caching, so the block is of a size class; one lock takes it and
    // records the loan.
    const size_t cls = size_class(nbytes);
    std::unique_lock<std::mutex> lock(cache_mutex());
    void* data = pop_cached(index, cls);
    if (data == nullptr) {
      lock.unlock();
      data = fresh_block(cls);
      lock.lock();
    }
    lent_blocks().emplace(data, std::make_pair(cls, index));
    return c10::DataPtr(data, data, &free_lent, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_free; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static c10::Allocator*& host() {
    static c10::Allocator* replaced = nullptr;
    return replaced;
  }

 private:
  // `raw_deallocate` of either kind of block.
  static void raw_free(void* data) {
    if (return_lent(data)) return;
    c10::DeleterFnPtr host_free = host()->raw_deleter();
    TORCH_CHECK(host_free != nullptr, "the CPU allocator that torchferry's device wraps has no raw deleter");
    host_free(data);
  }
};

KernelAllocator g_kernel_allocator;

// Owner of device bytes that this allocator allocated itself.
struct OwnedBlock {
  void* data;
  size_t nbytes;
  size_t size_class;  // 0: not cached
  c10::DeviceIndex index;
};

void free_owned(void* ctx_ptr) {
  auto* ctx = static_cast<OwnedBlock*>(ctx_ptr);
  release(ctx->index, ctx->nbytes);
  give_block(ctx->index, ctx->data, ctx->size_class);
  delete ctx;
}

// Owner of device bytes adopted from a CPU kernel's output (kept alive, not copied):
// the CPU storage that still holds them, or, for a result relabelled in place, the CPU
// allocator's DataPtr itself.
struct AdoptedBlock {
  c10::Storage host;
  c10::DataPtr bytes;
  size_t nbytes;
  c10::DeviceIndex index;
};

void free_adopted(void* ctx_ptr) {
  auto* ctx = static_cast<AdoptedBlock*>(ctx_ptr);
  release(ctx->index, ctx->nbytes);
  delete ctx;
}

// A CPU view of device bytes only keeps the device storage alive: its context is that
// StorageImpl, with a reference of its own (no owner block to allocate per view).
void free_host_alias(void* device_storage) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(device_storage));
}

void fill_stat(c10::CachingAllocator::Stat& stat, int64_t current, int64_t peak, int64_t allocated,
               int64_t freed) {
  stat.current = current;
  stat.peak = peak;
  stat.allocated = allocated;
  stat.freed = freed;
}

class NeuronAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override { return allocate_on(current_device(), nbytes); }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool initialized() override { return !devices().empty(); }

  // Returns the cached blocks of every device to the host (there are no memory pools).
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override { release_cached_blocks(); }

  // Execution is synchronous, so a block is never in flight on another stream.
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex index) override {
    DeviceMemory& m = memory_of(index);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const int64_t cur = m.allocated.load(), peak = m.peak.load();
    const int64_t total = m.allocated_total.load(), freed = m.freed_total.load();
    // Reserved: allocated plus the cached blocks (its cumulative counts are allocated's).
    fill_stat(stats.allocated_bytes[agg], cur, peak, total, freed);
    fill_stat(stats.reserved_bytes[agg], cur + m.cached.load(), std::max(m.reserved_peak.load(), peak),
              total, freed);
    fill_stat(stats.active_bytes[agg], cur, peak, total, freed);
    fill_stat(stats.requested_bytes[agg], cur, peak, total, freed);
    fill_stat(stats.allocation[agg], m.live_allocs.load(), m.live_allocs_peak.load(),
              m.num_allocs.load(), m.num_frees.load());
    fill_stat(stats.segment[agg], m.live_allocs.load(), m.live_allocs_peak.load(),
              m.num_allocs.load(), m.num_frees.load());
    fill_stat(stats.active[agg], m.live_allocs.load(), m.live_allocs_peak.load(),
              m.num_allocs.load(), m.num_frees.load());
    stats.num_ooms = m.num_ooms.load();
    stats.num_device_alloc = m.num_allocs.load();
    stats.num_device_free = m.num_frees.load();
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    DeviceMemory& m = memory_of(index);
    m.allocated_total = 0;
    m.freed_total = 0;
    m.num_allocs = 0;
    m.num_frees = 0;
    m.num_ooms = 0;
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    DeviceMemory& m = memory_of(index);
    m.peak = m.allocated.load();
    m.reserved_peak = m.peak + m.cached.load();
    m.live_allocs_peak = m.live_allocs.load();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    DeviceMemory& m = memory_of(index);
    const int64_t free_bytes = std::max<int64_t>(0, m.capacity - m.allocated.load());
    return {static_cast<size_t>(free_bytes), static_cast<size_t>(m.capacity)};
  }
};

NeuronAllocator g_allocator;

}  // namespace

void init_devices(c10::DeviceIndex count, int64_t capacity_bytes, const std::string& capacity_source,
                  bool caching) {
  TORCH_CHECK(devices().empty(), "the neuron device is already initialised");
  TORCH_CHECK(count > 0, "neuron device count must be positive, got ", int(count));
  TORCH_CHECK(capacity_bytes > 0, "neuron device capacity must be positive, got ", capacity_bytes);
  for (c10::DeviceIndex i = 0; i < count; ++i) {
    devices().push_back(std::make_unique<DeviceMemory>());
    devices().back()->capacity = capacity_bytes;
    devices().back()->capacity_source = capacity_source;
  }
  c10::SetAllocator(kNeuron, &g_allocator);
  g_caching = caching;
  if (caching) {
    KernelAllocator::host() = c10::GetCPUAllocator();
    c10::SetCPUAllocator(&g_kernel_allocator);
  }
}

KernelMemoryScope::KernelMemoryScope(c10::DeviceIndex index) : previous_(t_kernel_device) {
  t_kernel_device = index;
}

KernelMemoryScope::~KernelMemoryScope() { t_kernel_device = previous_; }

c10::DeviceIndex device_count() noexcept { return static_cast<c10::DeviceIndex>(devices().size()); }

int64_t device_capacity(c10::DeviceIndex index) { return memory_of(index).capacity; }

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK_INDEX(index >= 0 && index < device_count(), "invalid neuron device index ",
                    int(index), ": this process sees ", int(device_count()),
                    " neuron device(s) (valid: 0..", int(device_count()) - 1,
                    "); NEURON_RT_VISIBLE_CORES or NEURON_RT_NUM_CORES sets the count");
}

c10::DeviceAllocator* neuron_allocator() { return &g_allocator; }

c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes) {
  const c10::Device device(kNeuron, index);
  if (nbytes == 0) {
    check_device_index(index);
    return c10::DataPtr(nullptr, device);
  }
  charge(index, nbytes);
  std::pair<void*, size_t> block;
  try {
    block = take_block(index, nbytes);
  } catch (...) {
    release(index, nbytes);
    throw;
  }
  return c10::DataPtr(block.first, new OwnedBlock{block.first, nbytes, block.second, index}, &free_owned,
                      device);
}

namespace {
c10::DataPtr alias_bytes(const c10::Storage& device_storage) {
  void* data = device_storage.mutable_data_ptr().get();
  c10::StorageImpl* owner = device_storage.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(owner);
  return c10::DataPtr(data, owner, &free_host_alias, c10::Device(c10::kCPU));
}
}  // namespace

c10::Storage host_alias(const c10::Storage& device_storage) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), device_storage.sym_nbytes(), alias_bytes(device_storage),
      c10::GetCPUAllocator(), /*resizable=*/true));
}

bool is_host_alias(const c10::Storage& storage) {
  return storage.unsafeGetStorageImpl()->data_ptr().get_deleter() == &free_host_alias;
}

void rebind_host_alias(c10::StorageImpl* alias, const c10::Storage& device_storage) {
  alias->set_data_ptr_noswap(alias_bytes(device_storage));
  alias->set_nbytes(device_storage.nbytes());
}

void clear_host_alias(c10::StorageImpl* alias) {
  alias->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
  alias->set_nbytes(0);
}

c10::Storage adopt_host_storage(const c10::Storage& host_storage, c10::DeviceIndex index) {
  const size_t nbytes = host_storage.nbytes();
  void* data = host_storage.mutable_data_ptr().get();
  c10::DataPtr ptr;
  if (data == nullptr) {
    check_device_index(index);
    ptr = c10::DataPtr(nullptr, c10::Device(kNeuron, index));
  } else {
    charge(index, nbytes);
    ptr = c10::DataPtr(data, new AdoptedBlock{host_storage, {}, nbytes, index}, &free_adopted,
                       c10::Device(kNeuron, index));
  }
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), host_storage.sym_nbytes(), std::move(ptr),
      &g_allocator, /*resizable=*/true));
}

namespace {
// The weak count of a StorageImpl that someone holds (1: no weak reference), read without
// making a weak pointer (two atomic updates per adopted result).
uint32_t weak_references(c10::StorageImpl* storage) {
  auto borrowed = c10::intrusive_ptr<c10::StorageImpl>::reclaim(storage);
  const uint32_t count = borrowed.weak_use_count();
  borrowed.release();  // not ours: the reference count is left as it was
  return count;
}
}  // namespace

bool adopt_in_place(const at::Tensor& host, c10::DeviceIndex index) {
  // Only a tensor no one else can see: not held elsewhere (a Python object, a kernel's
  // cache, another result), not weakly referenced, a plain strided CPU tensor over a
  // storage of its own.
  if (!host.defined() || host.use_count() != 1 || host.weak_use_count() != 1 || !host.is_cpu() ||
      host.layout() != c10::kStrided || host._is_zerotensor() || !host.has_storage()) {
    return false;
  }
  c10::TensorImpl* impl = host.unsafeGetTensorImpl();
  const c10::Storage& storage = impl->storage();
  if (storage.use_count() != 1 || weak_references(storage.unsafeGetStorageImpl()) != 1 ||
      storage.device_type() != c10::kCPU || impl->key_set().has(c10::DispatchKey::Python)) {
    return false;
  }
  c10::StorageImpl* s = storage.unsafeGetStorageImpl();
  const size_t nbytes = s->nbytes();
  c10::DataPtr& bytes = s->mutable_data_ptr();
  const c10::Device device(kNeuron, index);
  c10::DataPtr device_bytes;
  if (bytes.get() == nullptr) {
    check_device_index(index);
    device_bytes = c10::DataPtr(nullptr, device);
  } else {
    charge(index, nbytes);  // may raise OutOfMemoryError: nothing is changed yet
    void* data = bytes.get();
    device_bytes =
        c10::DataPtr(data, new AdoptedBlock{{}, std::move(bytes), nbytes, index}, &free_adopted, device);
  }
  s->set_data_ptr_noswap(std::move(device_bytes));
  s->set_allocator(&g_allocator);
  impl->_change_backend_component_keys(device);
  impl->set_storage_keep_dtype(storage);  // the TensorImpl's device follows its storage's
  return true;
}

void rebind_device_storage(c10::StorageImpl* device_storage, const c10::Storage& host_storage,
                           c10::DeviceIndex index) {
  c10::Storage adopted = adopt_host_storage(host_storage, index);
  device_storage->set_data_ptr_noswap(
      adopted.unsafeGetStorageImpl()->set_data_ptr(c10::DataPtr(nullptr, adopted.device())));
  device_storage->set_nbytes(host_storage.nbytes());
}

void resize_device_storage(const c10::Storage& storage, size_t new_nbytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceIndex index = storage.device().index();
  c10::DataPtr fresh = allocate_on(index, new_nbytes);
  const size_t keep = std::min(new_nbytes, impl->nbytes());
  if (keep > 0 && impl->data() != nullptr) {
    std::memcpy(fresh.get(), impl->data(), keep);
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_nbytes);
}

}  // namespace torchferry
