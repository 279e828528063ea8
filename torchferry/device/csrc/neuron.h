// Shared declarations of the built-in `neuron` device: a PrivateUse1 backend whose
// memory is host memory and whose kernels are the CPU's.
//
// One .cpp per PyTorch interface:
//   Allocator.cpp   device allocator, statistics, capacity, host<->device storage aliasing
//   Guard.cpp       DeviceGuardImpl (current device, streams, events), PrivateUse1 hooks,
//                   which thread runs a device backward, and its intra-op thread count
//   Generator.cpp   per-device RNG generators
//   Execution.cpp   zero-copy execution of ATen ops on the CPU kernels, device placement
//                   checks, target numerics, the explicit host-fallback path
//   Unboxed.cpp     unboxed kernels for the hottest ops, on the same rules
//   Target.cpp      what the target does with each op (from the profile) and its
//                   accounting: executed/fallback ops, host syncs, eager compilations
//   Profiler.cpp    device activity in torch.profiler (Kineto PrivateUse1 profiler)
//   Registration.cpp  only registers (dispatcher, autocast, guard)
//   Module.cpp      Python bindings
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace torchferry {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// ---- Allocator.cpp -------------------------------------------------------
// Set once by `_C._init` before any tensor exists. With `caching`, freed device blocks
// are kept for reuse and the process's CPU allocator is wrapped (see KernelMemoryScope).
// `capacity_source` says where the capacity came from; out-of-memory errors quote it.
void init_devices(c10::DeviceIndex count, int64_t capacity_bytes, const std::string& capacity_source, bool caching);
c10::DeviceIndex device_count() noexcept;
int64_t device_capacity(c10::DeviceIndex index);
void check_device_index(c10::DeviceIndex index);

c10::DeviceAllocator* neuron_allocator();
// Allocation on an explicit device (the allocator's `allocate` uses the current device).
c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes);
// A CPU storage over the same bytes as `device_storage` (no copy); it keeps the device
// storage alive. It is resizable with the CPU allocator, so a CPU kernel may grow an
// `out=` tensor; the caller then moves the new bytes back with `adopt_host_storage`.
c10::Storage host_alias(const c10::Storage& device_storage);
// Whether `storage` is such an alias (its bytes are a device storage's).
bool is_host_alias(const c10::Storage& storage);
// Points an alias at another device storage's bytes (reusing its StorageImpl), or at none.
void rebind_host_alias(c10::StorageImpl* alias, const c10::Storage& device_storage);
void clear_host_alias(c10::StorageImpl* alias);
// A device storage over the bytes of a CPU storage (no copy); it keeps the CPU storage
// alive and charges its size to the device (raising OutOfMemoryError past capacity).
c10::Storage adopt_host_storage(const c10::Storage& host_storage, c10::DeviceIndex index);
// Relabels a CPU kernel's fresh result as device memory: its TensorImpl and StorageImpl
// become the device tensor's (dispatch keys, device, allocator) and its bytes are charged
// to device `index`, with nothing allocated. False, and nothing changed, when anyone else
// holds the tensor or its storage (views among a kernel's results, a kernel's own cache):
// the caller then wraps it with `adopt_host_storage`.
bool adopt_in_place(const at::Tensor& host, c10::DeviceIndex index);
// Gives `device_storage` the bytes of `host_storage` (after an in-kernel resize).
void rebind_device_storage(c10::StorageImpl* device_storage, const c10::Storage& host_storage,
                           c10::DeviceIndex index);
void resize_device_storage(const c10::Storage& storage, size_t new_nbytes);
// While alive, the CPU allocator's blocks on this thread come from device `index`'s cache
// of freed blocks: a device op's CPU kernel (or compiled graph) allocates there the results
// that the device adopts. Other threads, and small blocks, keep the CPU's own allocator.
class KernelMemoryScope {
 public:
  explicit KernelMemoryScope(c10::DeviceIndex index);
  ~KernelMemoryScope();
  KernelMemoryScope(const KernelMemoryScope&) = delete;
  KernelMemoryScope& operator=(const KernelMemoryScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// ---- Guard.cpp -----------------------------------------------------------
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
c10::impl::DeviceGuardImplInterface* guard_impl();
void register_hooks();
// Called per op and per backward node. Outside a backward: at a thread's first device op,
// turns multithreaded backward off for that thread (unless `set_backward_thread(false)`),
// so that its backward runs where the CPU's does. Inside one (the autograd engine's device
// thread, where it is used): takes the intra-op thread count of the threads outside.
void settle_device_threading();
// Set once at init: whether device backward runs on the calling thread (TORCHFERRY_BACKWARD_THREAD).
void set_backward_thread(bool on_calling_thread);
// `Tensor.record_stream(stream)` on a neuron tensor (registered in Registration.cpp).
void record_stream(at::Tensor& self, c10::Stream stream);

// ---- Generator.cpp -------------------------------------------------------
// Before the first default generator: `host` makes every device's default generator the CPU's
// default generator (one random stream); else each device has its own (the default).
void use_host_stream(bool host);
const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);
// The CPU generator a CPU kernel should draw from for this neuron generator.
at::Generator host_generator(const at::Generator& neuron_generator);

// ---- Registration.cpp ----------------------------------------------------
void register_cpu_kernels(const std::vector<std::string>& op_names);
// Why nested tensors fail on the device, and the way out.
std::string nested_tensors_unsupported();

// ---- Execution.cpp -------------------------------------------------------
struct OpInfo;
// The eager signature of a call, as TorchNeuron's eager kernel cache keys it
// (torch_neuronx/kernels/base.py get_cache_key): tensors by shape and dtype, scalars by
// type only, the arguments that shape the program (ints, int lists, bools, strings,
// dtypes) by value. The boxed path adds IValues, the unboxed kernels their C++ arguments;
// both come down to the same words, so an op's signature does not depend on the path.
class Signature {
 public:
  uint64_t value() const { return value_; }
  void add(const at::Tensor& t) {
    if (!t.defined()) return mix(0x75);
    mix(static_cast<uint64_t>(t.scalar_type()) + 0x100);
    mix(static_cast<uint64_t>(t.dim()));
    for (int64_t size : t.sizes()) mix(static_cast<uint64_t>(size));
  }
  void add(const std::optional<at::Tensor>& t) { t.has_value() ? add(*t) : none(); }
  void add(const at::ITensorListRef& list) {
    for (const at::Tensor& t : list) add(t);
  }
  // A Scalar[] as the boxed path sees it, a list of numbers: an int by its value, any other
  // number by its place only (`add(const c10::IValue&, ...)`).
  void add(c10::ArrayRef<c10::Scalar> numbers) {
    for (const c10::Scalar& s : numbers) s.isIntegral(/*includeBool=*/false) ? add(s.toLong()) : mix(0x6e);
  }
  void add(const c10::Scalar& s) {  // a number argument: its type only
    if (s.isBoolean()) return add(s.toBool());
    mix(s.isFloatingPoint() ? 0x64 : s.isComplex() ? 0x63 : s.isIntegral(false) ? 0x69 : 0x6f);
  }
  void add(double) { mix(0x64); }
  void add(bool b) { mix(b ? 0x74 : 0x66); }
  void add(int64_t v) { mix(static_cast<uint64_t>(v)); }
  void add(at::ScalarType t) { add(static_cast<int64_t>(t)); }
  void add(c10::IntArrayRef values) {
    for (int64_t v : values) add(v);
  }
  template <class T>
  void add(const std::optional<T>& v) { v.has_value() ? add(*v) : none(); }
  void add(at::OptionalIntArrayRef v) { v.has_value() ? add(*v) : none(); }
  void add(const c10::IValue& iv, const c10::Argument& arg);

 private:
  void none() { mix(0x6f); }
  void mix(uint64_t word) { value_ = (value_ ^ word) * 1099511628211ULL; }
  uint64_t value_ = 1469598103934665603ULL ^ 0x9e3779b97f4a7c15ULL;
};
// A CPU view of a device tensor over the same bytes (the tensor itself if not on the device).
at::Tensor host_view_of(const at::Tensor& t);
// The same for an op's argument, from this thread's pool of host views that no one kept
// (their TensorImpl and alias StorageImpl, pointed at `t`); `recycle_host_view` returns a
// view to the pool after the op if nothing else holds it, and lets it go otherwise.
at::Tensor take_host_view(const at::Tensor& t);
void recycle_host_view(at::Tensor& view);
// A CPU kernel's result taken over as device memory without a copy.
at::Tensor adopt_host_result(const at::Tensor& host, c10::DeviceIndex index);
// A device tensor over `device_storage` with `like`'s dtype, sizes, strides and offset.
at::Tensor device_view(const c10::Storage& device_storage, const at::Tensor& like);
// The target has no 64-bit types (torch_neuronx/kernels/type_converter.py maps int64 to
// int32 and float64 to float32; results are cast back to the 64-bit dtype).
inline bool is_64bit(at::ScalarType type) { return type == at::kLong || type == at::kDouble; }
inline bool is_64bit(const at::Tensor& t) { return is_64bit(t.scalar_type()); }
// A tracing tensor (Dynamo's fakes, functional wrappers) has no bytes: the rules that judge a tensor's
// layout or values leave it to compile/ (a compiled graph's rules).
inline bool is_tracing(const at::Tensor& t) {
  return t.key_set().has_any(c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize}));
}
// Under target numerics: gives a 64-bit tensor the target's 32-bit range and precision.
void round_to_target(const at::Tensor& t);
// Fresh CPU results of a compiled graph as device memory, one device storage per host
// storage (results sharing a buffer stay views of one another). Not an op: not accounted.
std::vector<at::Tensor> adopt_host_results(const std::vector<at::Tensor>& hosts, c10::DeviceIndex index);
// Callers of `count_op` (Target.cpp) look the handle up once
// (`static const auto op = op_handle(...)`).
c10::OperatorHandle op_handle(const char* name, const char* overload);
void execute_on_host_kernels(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                             torch::jit::Stack* stack);
// The same for a call already accounted (`account(op)` returned `info`): the unboxed
// kernels hand over here the calls they do not take.
void run_on_host_kernels(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack);
at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory);
// Device memory of `sizes` on device `index`, as `empty_strided` (strides given) or `empty`
// (none: `memory_format`'s layout) allocate it, but not an op: not counted. The kernels'
// outputs (Unboxed.cpp) are allocated here.
at::Tensor empty_on(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                    std::optional<at::MemoryFormat> memory_format, c10::DeviceIndex index);
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset);
at::Tensor view(const at::Tensor& self, c10::IntArrayRef size);
at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);
int64_t sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa);
// ---- Unboxed.cpp ---------------------------------------------------------
// Unboxed `neuron` kernels for the ops a training step calls most (registered by
// Registration.cpp); each takes the common case and hands the rest to the boxed path.
void register_unboxed_kernels(torch::Library& library);
// Their names ("aten::mul.Tensor"), for the tests of the rule that picks them.
std::vector<std::string> unboxed_op_names();
// Registers the unboxed kernel of a foreach op (`name` without "aten::") if there is one.
bool register_unboxed_foreach(torch::Library& library, const std::string& name);
std::vector<std::string> unboxed_foreach_op_names();

// ---- CpuGaps.cpp ---------------------------------------------------------
// Results accelerators give that the CPU kernels refuse.
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max);
at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                      const at::Scalar& max, at::Tensor& out);
// PyTorch's convolution calls these for any PrivateUse1 device.
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                   const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                                   c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                   bool transposed, c10::IntArrayRef output_padding, int64_t groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask);
// The fused GRU/LSTM cells fail as on the target (boxed: one kernel for both ops).
void refuse_fused_rnn_cell(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Dropout draws from the neuron generator and rounds like the CPU path.
at::Tensor dropout(const at::Tensor& input, double p, bool train);
// Tensor.contiguous(memory_format): TorchNeuron's own kernel, which refuses channels_last.
at::Tensor contiguous(const at::Tensor& self, at::MemoryFormat memory_format);
// Tensor.to's copy (`_to_copy`): TorchNeuron's refuses a channels-last format for a device tensor.
at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format);

// ---- Target.cpp ----------------------------------------------------------
// What the target does with each op (from the device profile) and its accounting.
enum class FallbackMode { Warn = 0, Silent = 1, Error = 2 };
// Native: runs on the device. Metadata: changes only sizes/strides/storage (no kernel).
// HostCopy: a host fallback on the explicit copy path. HostPredicted: not implemented
// by the target, so it would run on the host; executed zero-copy, counted as a fallback.
enum class OpKind : uint8_t { Native = 0, Metadata = 1, HostCopy = 2, HostPredicted = 3 };
// Which non-device tensors an op may take besides 0-dim CPU inputs (as on CUDA). DeviceIndices:
// an indexed write whose index tensors must be on the device too (host_index_writes rule).
enum class Placement : uint8_t { Strict, HostIndices, DeviceIndices, Any };
struct OpInfo {
  uint64_t name_hash = 0;  // of `name`
  OpKind kind = OpKind::Native;
  Placement placement = Placement::Strict;
  bool compiles = false;         // eager mode compiles one program per signature
  bool syncs = false;            // the target reads the output size back (data-dependent)
  bool target_numerics = false;  // 64-bit values take the target's 32-bit range and precision
  // The op has a known issue of the target's vendor in every dtype that has not warned yet: its
  // first call the accounting counts (not one inside a native composite) warns (Target.cpp).
  std::atomic<bool> issue_unwarned{false};
  // Bit i set: the target refuses device tensors and `dtype=` arguments of ScalarType i in this
  // op (its dtype tables have no such type; the profile's [rules]); zero for ops it does not compile.
  uint64_t refused_dtypes = 0;
  // Bit i set: a device tensor of ScalarType i needs a look: a refused dtype, or one of the
  // dtypes of the op's dtype-scoped known issue (`known_issue`). One test per tensor.
  uint64_t checked_dtypes = 0;
  // The unboxed fast path's one test per device tensor (Unboxed.cpp): checked_dtypes, and
  // the 64-bit types where target numerics make them the boxed path's.
  uint64_t unboxed_looks_at = 0;
  int known_issue = -1;  // its dtype-scoped known issue (Target.cpp), or -1
  // The target returns zeros when a positional tensor argument is empty (empty_inputs rule).
  bool empty_zeros = false;
  // The target raises when a positional tensor argument is empty: a reduction without an
  // identity (empty_inputs rule).
  bool empty_raises = false;
  // aten::cat: the target gives shape (0,) when every tensor is empty (cat_of_empty_tensors_1d rule).
  bool cat_of_empties_1d = false;
  // A host fallback whose kernel writes into arguments its schema does not mark as written: the target's
  // CPU fallback works on copies and drops those writes (fallback_unmarked_writes_lost rule).
  bool loses_unmarked_writes = false;
  // The target writes into a written argument whose elements share memory where the CPU
  // refuses (overlapping_writes rule): ops it compiles.
  bool writes_through_overlap = false;
  // The target copies an out= result back with a copy that refuses another size unless the
  // out= tensor is empty (fallback_out_resize rule): ops it runs with PyTorch's CPU fallback.
  bool out_keeps_size = false;
  // The target computes into an output of its own, then resizes out= with a plain resize_ and
  // writes the result into it (compiled_out_written_after rule): ops it compiles.
  bool out_written_after = false;
  // The target's torch-mlir kernel executes into the in-place or out= tensor given, which its pipeline
  // takes contiguous only (compiled_strided_writes_fail rule).
  bool strided_writes_fail = false;
  // The target registers only the op's out= variant, so PyTorch's generated functional variant hands that
  // kernel a result with the strides TensorIterator picks from the inputs (compiled_strided_writes_fail rule).
  bool strided_results_fail = false;
  // The target's kernel allocates the op's fresh result row-major (compiled_results_row_major rule), or its
  // CPU fallback moves it to the device with TorchNeuron's row-major _to_copy (to_copy_row_major rule).
  bool row_major_results = false;
  // Bit i set: schema argument i holding an int beyond int32 fails, as the target's torch-mlir kernel
  // makes every non-static int argument an int32 tensor (int_arguments_as_int32 rule).
  uint64_t int32_args = 0;
  // Last: a call reads the fields above (they share a cache line with the op's counter,
  // Target.cpp's OpEntry); the name only where a message or a table needs it.
  std::string name;  // "aten::add.Tensor"
  bool on_host() const { return kind == OpKind::HostCopy || kind == OpKind::HostPredicted; }
  bool refuses(at::ScalarType type) const { return (refused_dtypes >> static_cast<int>(type)) & 1; }
  bool checks(at::ScalarType type) const { return (checked_dtypes >> static_cast<int>(type)) & 1; }
};
// The device profile's [rules] (profile.py RULES): each a behaviour of the target that
// the device reproduces unless the profile turns it off.
enum Rule : int {
  kRuleMemoryFormat = 1,  // contiguous(memory_format=channels_last[_3d]) is refused
  kRuleComplex = 2,       // complex dtypes in ops the target compiles are refused
  kRuleUnsigned = 4,      // uint16/32/64 likewise
  kRuleEmptyInputs = 8,   // an empty positional tensor input gives zeros (torch-mlir kernels)
  kRuleOverlappingWrites = 16,  // in-place writes into self-overlapping tensors go through, with a warning
  kRuleAsStridedBoundsFirst = 32,  // as_strided checks the storage bounds before refusing negative strides
  kRuleFallbackOutResize = 64,  // a host fallback's non-empty out= of another size than its result is refused
  kRuleCompiledOutWrittenAfter = 128,  // a compiled op's out= is resized silently and written after the kernel
  kRuleCompiledResultsRowMajor = 256,  // a torch-mlir op's fresh result is row-major whatever its inputs' strides
  kRuleHostIndexWrites = 512,  // an indexed write (index_put_) refuses index tensors on the host
  kRuleIntArgumentsAsInt32 = 1024,  // a torch-mlir op's int argument beyond int32 fails
  kRuleCastsToIntRound = 2048,  // a device-to-device float -> int8/uint8/int16/int32 cast rounds to nearest
  kRuleCatOfEmptyTensors1d = 4096,  // cat of tensors that are all empty gives shape (0,)
  kRuleFallbackUnmarkedWritesLost = 8192,  // a host fallback's writes into unmarked arguments are dropped
  kRuleAllocationsByNumel = 16384,  // empty/empty_strided: a storage of numel elements, row-major strides unclamped
  kRuleCompiledStridedWritesFail = 32768,  // a torch-mlir op writing into a non-contiguous <=32-bit tensor fails
  kRuleToCopyRowMajor = 65536,  // _to_copy's device copies, and so host fallbacks' results, are row-major
};
// The range of the int32 tensors the target's torch-mlir kernel makes of int arguments.
inline bool fits_int32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }
// Classification code bit (profile.py EMPTY_ZEROS): the op gives zeros on an empty input.
constexpr int kCodeEmptyZeros = 16;
// Classification code bit (profile.py ROW_MAJOR): the target allocates the op's result row-major.
constexpr int kCodeRowMajor = 32;
// Classification code bit (profile.py EMPTY_RAISES): the op raises on an empty input.
constexpr int kCodeEmptyRaises = 64;
// Classification code bit (profile.py UNMARKED_WRITES): the CPU kernel writes into arguments its
// schema does not mark as written.
constexpr int kCodeUnmarkedWrites = 128;
// Classification code bit (profile.py TORCH_MLIR): the op runs through the target's torch-mlir kernel.
constexpr int kCodeTorchMlir = 256;
// Classification code bit (profile.py VIA_OUT_KERNEL): a functional op the target runs as its out= kernel.
constexpr int kCodeViaOutKernel = 512;
// Classification code bit (profile.py KEEPS_STRIDES): a host fallback whose results keep the CPU's strides.
constexpr int kCodeKeepsStrides = 1024;
// compiled_strided_writes_fail rule: TorchNeuron's torch-mlir kernel executes into the tensor an in-place
// op or out= gives it (python_ops/auto_registration.py create_wrapper_function passes out=self;
// torch_mlir/kernel.py _prepare_execution_tensors keeps it unless its dtype is narrowed, as float64 and
// int64 are, into a fresh 32-bit tensor copied in afterwards), and its pipeline takes contiguous outputs only
// (csrc/core/NeuronBindings.cpp _submit_xla_task_to_pipeline -> PrepareKernelTensors). An empty tensor never
// reaches it (the empty-tensor path copies zeros in); tracing tensors have no bytes. The callers leave alone the
// parts of an op the target runs as one kernel (in_native_composite).
inline bool fails_as_strided_output(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 && !t.is_contiguous() && !is_64bit(t) && !is_tracing(t);
}
// How an op writes the tensor its torch-mlir kernel executes into.
enum class KernelOutput { kInPlace, kOut, kComposedResult };
// TorchNeuron's error for that write into a non-contiguous tensor.
[[noreturn]] void throw_strided_output(const OpInfo& info, const at::Tensor& t, KernelOutput how);
// Whether this thread is inside an op the target runs as one kernel (a NativeCompositeScope: its parts never
// run as themselves there) or an uncounted span.
bool in_native_composite();
// A functional op's fresh result, under that rule: refused where the target's out= kernel would be given it.
inline void check_strided_result(const OpInfo& info, const at::Tensor& result) {
  if (info.strided_results_fail && fails_as_strided_output(result) && !in_native_composite()) [[unlikely]] {
    throw_strided_output(info, result, KernelOutput::kComposedResult);
  }
}
// TorchNeuron's error when an op it implements fails and its build falls back only for
// unimplemented ops (python_ops/base.py, Operation.__call__): `executed` for an implementation that
// ran and failed, else none could handle the call. One text for the device and the process group.
std::string fallback_disabled_message(const std::string& op, bool executed, const std::string& implementation,
                                      const std::string& details);
// Once per op: the call wrote into a tensor whose elements share memory (the CPU refuses).
void warn_overlapping_write(const OpInfo& info);
// Once per op: an empty input gave zeros, as on the target (`dtype_changed`: in the default dtype).
void warn_empty_zeros(const OpInfo& info, bool dtype_changed);
// Once per op: a host fallback's writes into `arguments` (unmarked in its schema) were dropped.
void warn_lost_writes(const OpInfo& info, const std::string& arguments);
// Once: a cat of empty tensors gave shape (0,) where the CPU's result has `cpu_sizes`.
void warn_cat_of_empties(c10::IntArrayRef cpu_sizes);
// Once per pair of dtypes: a device-to-device cast rounded where the CPU truncates (casts_to_int_round).
void warn_cast_rounds(at::ScalarType from, at::ScalarType to);
// Once per op: the row-major rule gave a result other strides than the CPU's (`cpu_strides`).
void warn_row_major(const OpInfo& info, c10::IntArrayRef cpu_strides);
bool rule_on(Rule rule);
// Whether 64-bit values take the target's 32-bit range and precision (the profile's numerics).
bool target_numerics_on();
// TorchNeuron's error for a dtype its tables lack, with the way out.
[[noreturn]] void throw_unsupported_dtype(const OpInfo& info, at::ScalarType type);
// TorchNeuron's error for a device-to-device cast to or from a complex dtype, which it compiles (`op`, run by
// `implementation`: aten::_to_copy or aten::copy_).
[[noreturn]] void throw_complex_device_cast(at::ScalarType from, at::ScalarType to, const std::string& op,
                                            const std::string& implementation);
// TorchNeuron's error for a host fallback's out= tensor that its result would resize.
[[noreturn]] void throw_fallback_out_resize(const OpInfo& info, const at::Tensor& out, const at::Tensor& result);
// While alive, the op the target runs as one native kernel (`op`, counted once with its
// eager signature) is what the accounting sees: the ops this device runs it through
// (PyTorch's composite, or the CPU's dropout) are neither counted nor warned about.
class NativeCompositeScope {
 public:
  NativeCompositeScope(const c10::OperatorHandle& op, uint64_t signature);
  ~NativeCompositeScope();
  NativeCompositeScope(const NativeCompositeScope&) = delete;
  NativeCompositeScope& operator=(const NativeCompositeScope&) = delete;
};
// Between these, this thread's ops are neither counted (executed, fallback, host syncs, eager
// signatures, known issues) nor warned about: a harness's own device work inside a user's
// process (torchferry.device.uncounted). Nested spans nest.
void enter_uncounted();
void exit_uncounted();
// Ops the target registers natively that PyTorch implements as composites (CompositeImplicitAutograd
// and CompositeExplicitAutograd): counted as the op itself, not its parts (Registration.cpp).
void register_native_composites(const std::vector<std::string>& implicit_ops,
                                const std::vector<std::string>& explicit_ops,
                                const std::vector<std::string>& device_argument_ops);
// Counts calls of ops by name, as the eager device would (a compiled graph's host ops).
void account_ops(const std::vector<std::string>& op_names);
// Counts one call of `op` as executed or fallback; warns once per host-fallback op, or
// raises under TORCHFERRY_FALLBACK=error. The reference stays valid for the process.
const OpInfo& account(const c10::OperatorHandle& op);
// An op's accounting entry (Target.cpp): made on the op's first call, classified again in
// place when the target's tables change, never moved. A kernel of the device's own knows
// its op, so it finds the entry once (`static const KnownOp op = known_op(...)`) and counts
// through it, where the boxed fallback looks each op's entry up.
struct OpEntry;
struct KnownOp {
  c10::OperatorHandle handle;
  OpEntry* entry;
};
KnownOp known_op(const char* name, const char* overload);
const OpInfo& account(const KnownOp& op);
// Counts a call of a kernel registered for the device (not through the boxed fallback).
void count_op(const KnownOp& op);
void count_sync(const std::string& what);
void record_signature(uint64_t signature);
// codes: op name -> kind | compiles << 2 | syncs << 3; reasons: why an op runs
// on the host; ops in neither table get `default_code` and `default_reason`.
// rules: the Rule bits in force.
// int32_args: op -> its arguments the int_arguments_as_int32 rule checks (OpInfo::int32_args).
void set_target(const std::unordered_map<std::string, int>& codes,
                const std::unordered_map<std::string, std::string>& reasons, int default_code,
                const std::string& default_reason, FallbackMode mode, const std::string& profile,
                bool target_numerics, int rules, const std::unordered_map<std::string, int64_t>& int32_args);
std::unordered_map<std::string, int64_t> executed_ops();
int64_t executed_op_count();  // the sum of executed_ops(), without building it (read at every step)
std::unordered_map<std::string, int64_t> fallback_ops();
// op -> the warning its first call gives: the target vendor's known issue with the op.
// dtypes: op -> the dtypes its issue is scoped to; such an op warns (and counts) only when it
// runs on a device tensor of one of them (`note_known_issue`), the others on their first call.
void set_known_issues(const std::unordered_map<std::string, std::string>& warnings,
                      const std::unordered_map<std::string, std::vector<at::ScalarType>>& dtypes);
// One call of an op on a device tensor of a dtype its known issue is scoped to (info.checks
// and not info.refuses): counted, and the issue's warning on the first.
void note_known_issue(const OpInfo& info);
// op -> its calls in the dtypes of its known issue, since clear_op_tracking.
std::unordered_map<std::string, int64_t> known_issue_calls();
// One call of a compiled graph that holds these known-issue ops (dtype scopes judged by the
// graph, compile/known_issues.py): counted per op, and each issue's warning on its first call.
void note_graph_known_issues(const std::vector<std::string>& op_names);
// op -> its calls in compiled graphs, since clear_op_tracking.
std::unordered_map<std::string, int64_t> graph_known_issue_calls();
std::unordered_map<std::string, std::string> fallback_reasons_seen();
std::unordered_map<std::string, int64_t> host_syncs();
void clear_op_tracking();
std::unordered_map<std::string, int64_t> eager_compile_counts();
void load_persisted_signatures(const std::vector<uint64_t>& signatures);
std::vector<uint64_t> take_unsaved_signatures();
// The signatures seen so far count again as new (found in the persistent cache), as in a fresh process.
void forget_seen_signatures();

// ---- Profiler.cpp --------------------------------------------------------
// Whether a torch.profiler session with ProfilerActivity.PrivateUse1 is recording.
extern std::atomic<bool> g_profiling_device;
inline bool profiling_device() noexcept { return g_profiling_device.load(std::memory_order_acquire); }
// Scope of one op run by the device: while the profiler records, it becomes a kernel
// activity on the device's track, linked to the CPU op (marked when it ran on the host).
// Inline: every op makes one, and without the profiler it is one load.
class ProfiledOp {
 public:
  ProfiledOp(const c10::OperatorHandle& op, bool on_host, c10::DeviceIndex index) {
    if (profiling_device()) [[unlikely]] start(op, on_host, index);
  }
  ~ProfiledOp() {
    if (op_ != nullptr) [[unlikely]] finish();
  }
  ProfiledOp(const ProfiledOp&) = delete;
  ProfiledOp& operator=(const ProfiledOp&) = delete;

 private:
  void start(const c10::OperatorHandle& op, bool on_host, c10::DeviceIndex index);
  void finish();

  const c10::OperatorHandle* op_ = nullptr;  // null while not profiling
  bool on_host_ = false;
  c10::DeviceIndex index_ = 0;
  int64_t start_ns_ = 0;
};
void register_profiler();

}  // namespace torchferry
