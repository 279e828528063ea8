// Op execution of the built-in `neuron` device: every ATen op runs on the CPU
// kernels over zero-copy views of device memory.
//
// The boxed fallback below receives every op that has no `neuron` kernel of its
// own. It
//   1. views each device tensor as a CPU tensor over the same bytes (one CPU
//      storage per device storage, so kernels still see which arguments alias),
//   2. swaps neuron devices and generators in the arguments for CPU ones,
//   3. calls the CPU kernel,
//   4. writes back what an in-place or `out=` kernel changed (a resized `out=`
//      tensor gets the new bytes and shape), and
//   5. adopts fresh results as device memory without copying them; results that
//      are views of an input stay views of that input's device storage.
// Ops that the device profile lists as host fallbacks take an explicit
// copy-to-host path instead and are counted and reported as fallbacks (Target.cpp
// decides what the target does with each op).
//
// While it walks the arguments, the fallback also
//   - enforces device placement as accelerators do: a `neuron` op given a tensor on
//     another device raises PyTorch's "Expected all tensors to be on the same
//     device" (0-dim CPU inputs, CPU index tensors of advanced indexing and explicit
//     copies are allowed, as on CUDA);
//   - hashes the eager signature (op, dtypes, shapes, the non-tensor arguments that
//     change the program) of ops the target compiles, for the NEFF-compile count;
//   - refuses the dtypes the target has no type for in the ops it compiles (complex,
//     uint16/32/64: the profile's [rules]);
//   - under target numerics, gives 64-bit values of ops the target runs natively the
//     target's 32-bit range and precision (int64 wraps as int32, float64 rounds to
//     float32), keeping their dtype.
#include "neuron.h"

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <sstream>
#include <typeinfo>
#include <vector>

namespace torchferry {
namespace {

// ---------------------------------------------------------------- conversion
bool is_neuron(const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; }

// Whether an argument's type is `kind`, or `kind?`.
bool is_kind(const c10::TypePtr& type, c10::TypeKind kind) {
  if (type->kind() != c10::TypeKind::OptionalType) return type->kind() == kind;
  return type->castRaw<c10::OptionalType>()->getElementType()->kind() == kind;
}

at::Tensor make_tensor(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  c10::DispatchKeySet keys(key);
  // An efficient zero tensor has a storage of its size but no bytes (data pointer null);
  // only its ZeroTensor key makes reads see zeros, so a re-wrapped one must keep it.
  if (like._is_zerotensor()) keys = keys.add(c10::DispatchKey::ZeroTensor);
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys, like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  if (like.is_conj()) impl->_set_conj(true);
  if (like.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

at::ScalarType narrow_type(at::ScalarType type) { return type == at::kLong ? at::kInt : at::kFloat; }

// Writes `src`'s 64-bit values through the target's 32-bit type into `dst` (which may be
// `src`), as `dst.copy_(src.to(narrow))` does (the CPU's conversions are these static_casts),
// when both are dense in memory with one layout: their elements are then the same span of
// memory in the same order. False, and nothing written, otherwise.
bool round_in_memory_order(const at::Tensor& src, const at::Tensor& dst) {
  if (!src.is_non_overlapping_and_dense() || src.is_neg() || src.strides() != dst.strides() ||
      src.scalar_type() != dst.scalar_type()) {
    return false;
  }
  const int64_t n = src.numel();
  if (src.scalar_type() == at::kLong) {
    const int64_t* in = src.const_data_ptr<int64_t>();
    int64_t* out = dst.mutable_data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(static_cast<int32_t>(in[i]));
  } else {
    const double* in = src.const_data_ptr<double>();
    double* out = dst.mutable_data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(static_cast<float>(in[i]));
  }
  return true;
}

// A 64-bit input under target numerics: `host.to(narrow).to(wide)` (a dense layout kept, as
// `to` keeps it), without the two conversions through the dispatcher.
at::Tensor rounded_copy(const at::Tensor& host) {
  if (host.is_non_overlapping_and_dense() && !host.is_neg()) {
    at::Tensor rounded = at::detail::empty_strided_cpu(host.sizes(), host.strides(), host.scalar_type());
    if (round_in_memory_order(host, rounded)) return rounded;
  }
  return host.to(narrow_type(host.scalar_type())).to(host.scalar_type());
}

// TorchNeuron's layout of a fresh tensor (csrc/aten/NeuronNativeFunctions.cpp, empty_neuron:
// get_strides_for_memory_format): channels-last strides for a 4-D or 5-D tensor in that format,
// row-major strides otherwise, each the product of the sizes after it in the layout's order, as c10's
// TensorType::contiguousStridesOf computes them: a size of zero is not clamped to one, as the CPU's
// empty clamps it, so torch.empty((5, 0)) has strides (0, 1) there.
std::vector<int64_t> target_strides(c10::IntArrayRef sizes, at::MemoryFormat format) {
  std::vector<size_t> inner_first(sizes.size());
  if (format == at::MemoryFormat::ChannelsLast && sizes.size() == 4) {
    inner_first = {1, 3, 2, 0};
  } else if (format == at::MemoryFormat::ChannelsLast3d && sizes.size() == 5) {
    inner_first = {1, 4, 3, 2, 0};
  } else {
    for (size_t i = 0; i < sizes.size(); ++i) inner_first[i] = sizes.size() - 1 - i;
  }
  std::vector<int64_t> strides(sizes.size());
  int64_t running = 1;
  for (size_t dim : inner_first) {
    strides[dim] = running;
    running *= sizes[dim];
  }
  return strides;
}

// allocations_by_numel rule: a fresh result with no elements takes the target's row-major strides, as
// TorchNeuron allocates every result through empty_neuron (its kernels' empty results,
// python_ops/torch_mlir/kernel.py _create_zeros_like_original; a host fallback's result moved back,
// python_ops/to_copy.py). With no elements there is nothing to move: only the strides change.
void lay_out_as_target(const at::Tensor& t) {
  t.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), target_strides(t.sizes(), at::MemoryFormat::Contiguous),
                                                  t.storage_offset());
}

// A pooled host view: a CPU TensorImpl over an alias of a device tensor's storage that
// takes the device tensor's metadata as it is. PyTorch computed that tensor's numel and
// contiguity flags when its sizes were set, and they depend on sizes and strides alone:
// a view whose last tensor had the same sizes and strides (an elementwise chain, a
// layer's parameters step after step) keeps its own, and any other copies them
// (set_sizes_and_strides would compute them again, per argument per op). The flags are
// protected members of TensorImpl, hence the subclass.
class HostViewImpl final : public c10::TensorImpl {
 public:
  HostViewImpl(c10::Storage alias, const c10::TensorImpl& device)
      : c10::TensorImpl(std::move(alias), c10::DispatchKeySet(c10::DispatchKey::CPU), device.dtype()) {
    mirror(device);
  }

  // Takes `device`'s dtype, sizes, strides, offset, contiguity and conj/neg bits (the
  // storage is the caller's to rebind).
  void mirror(const c10::TensorImpl& device) {
    storage_offset_ = device.storage_offset();
    data_type_ = device.dtype();
    _set_conj(device.is_conj());
    _set_neg(device.is_neg());
    const c10::IntArrayRef sizes = device.sizes(), strides = device.strides();
    if (same_sizes_and_strides(sizes, strides)) return;
    sizes_and_strides_.set_sizes(sizes);
    sizes_and_strides_.set_strides(strides);
    numel_ = device.numel();
    is_contiguous_ = device.is_contiguous(at::MemoryFormat::Contiguous);
    is_channels_last_contiguous_ = device.is_contiguous(at::MemoryFormat::ChannelsLast);
    is_channels_last_3d_contiguous_ = device.is_contiguous(at::MemoryFormat::ChannelsLast3d);
    is_channels_last_ = device.is_strides_like(at::MemoryFormat::ChannelsLast);
    is_channels_last_3d_ = device.is_strides_like(at::MemoryFormat::ChannelsLast3d);
    is_non_overlapping_and_dense_ = device.is_non_overlapping_and_dense();
  }

 private:
  // One pass over both (ArrayRef's == calls memcmp twice: a third of `mirror` on a 1-d add).
  bool same_sizes_and_strides(c10::IntArrayRef sizes, c10::IntArrayRef strides) const {
    if (sizes.size() != sizes_and_strides_.size()) return false;
    const int64_t* my_sizes = sizes_and_strides_.sizes_data();
    const int64_t* my_strides = sizes_and_strides_.strides_data();
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] != my_sizes[d] || strides[d] != my_strides[d]) return false;
    }
    return true;
  }
};

// Host views of op arguments are made and dropped once per argument per op. A thread keeps
// up to kPooled of those no one kept (a TensorImpl, its version counter and its alias
// StorageImpl: three allocations) and points them at its next arguments instead.
class HostViewPool {
 public:
  at::Tensor take(const at::Tensor& t) {
    const c10::TensorImpl& device = *t.unsafeGetTensorImpl();
    // A device tensor's sizes may be symbolic only under a Python dispatch key (a tracing
    // wrapper): such a view takes make_tensor's checked path, as does a zero tensor's.
    if (t._is_zerotensor() || device.has_symbolic_sizes_strides()) {
      return make_tensor(host_alias(t.storage()), c10::DispatchKey::CPU, t);
    }
    if (free_.empty()) return at::Tensor(c10::make_intrusive<HostViewImpl>(host_alias(t.storage()), device));
    c10::intrusive_ptr<HostViewImpl> impl = std::move(free_.back());
    free_.pop_back();
    // A view made under InferenceMode is an inference tensor. Outside it, a kernel that calls
    // ops from the top on its arguments (a composite's in-place parts: `_foreach_mul_`) would
    // be refused it, so such a view is let go there and a fresh one made.
    if (impl->is_inference() && !c10::InferenceMode::is_enabled()) [[unlikely]] {
      return at::Tensor(c10::make_intrusive<HostViewImpl>(host_alias(t.storage()), device));
    }
    rebind_host_alias(impl->storage().unsafeGetStorageImpl(), t.storage());
    impl->mirror(device);
    return at::Tensor(std::move(impl));
  }

  // Keeps `view` if it is a pooled kind of host view that nothing else holds (the kernel
  // may have kept it, resized its storage or pointed it elsewhere: then it is let go).
  void give(at::Tensor& view) {
    if (free_.size() >= kPooled || !view.defined() || view.use_count() != 1 || view.weak_use_count() != 1) return;
    c10::TensorImpl* impl = view.unsafeGetTensorImpl();
    if (typeid(*impl) != typeid(HostViewImpl)) return;  // a second view of a storage (make_tensor)
    const c10::Storage& storage = impl->storage();
    if (!storage || storage.use_count() != 1 || !is_host_alias(storage) || impl->autograd_meta() != nullptr ||
        !impl->allow_tensor_metadata_change() || impl->key_set().has(c10::DispatchKey::Python)) {
      return;
    }
    clear_host_alias(storage.unsafeGetStorageImpl());  // holds no device memory while pooled
    free_.push_back(c10::intrusive_ptr<HostViewImpl>::reclaim(
        static_cast<HostViewImpl*>(view.unsafeReleaseIntrusivePtr().release())));  // leaves `view` undefined
  }

 private:
  static constexpr size_t kPooled = 16;
  c10::SmallVector<c10::intrusive_ptr<HostViewImpl>, kPooled> free_;
};

// This thread's pool, read once per op argument. A thread_local with a destructor is read
// through a wrapper that checks its initialisation, and in a shared library every read
// calls __tls_get_addr (six calls per argument with the pool itself thread_local): a plain
// pointer is one.
thread_local HostViewPool* t_host_views = nullptr;

// Made at a thread's first host view; freed, with the views it keeps, when the thread exits.
C10_NOINLINE HostViewPool& new_host_view_pool() {
  thread_local std::unique_ptr<HostViewPool> owner = std::make_unique<HostViewPool>();
  t_host_views = owner.get();
  return *owner;
}

HostViewPool& host_views() {
  HostViewPool* pool = t_host_views;
  return C10_LIKELY(pool != nullptr) ? *pool : new_host_view_pool();
}

// One op call on the CPU kernels: the bookkeeping between device and host tensors.
class HostCall {
 public:
  explicit HostCall(const OpInfo& info)
      : info_(info), copy_inputs_(info.kind == OpKind::HostCopy || info.loses_unmarked_writes) {}
  HostCall(const HostCall&) = delete;
  HostCall& operator=(const HostCall&) = delete;
  // The pool takes back the host views the kernel did not keep (views_ holds the last copies).
  ~HostCall() {
    mutated_.clear();
    rounded_writes_.clear();
    sized_outs_.clear();
    aliases_.clear();
    for (auto& view : views_) recycle_host_view(view.first);
  }

  c10::DeviceIndex device() const { return device_ < 0 ? current_device() : device_; }

  void convert_arguments(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
    const auto& args = schema.arguments();
    const size_t begin = stack->size() - args.size();
    c10::SmallVector<size_t, 2> default_generators;
    for (size_t i = 0; i < args.size(); ++i) {
      c10::IValue& iv = (*stack)[begin + i];
      const bool writes = args[i].alias_info() != nullptr && args[i].alias_info()->isWrite();
      arg_ = &args[i];
      arg_index_ = i;
      if (i < 64 && ((info_.int32_args >> i) & 1)) [[unlikely]] check_int32(iv);
      if (info_.compiles) signature_.add(iv, args[i]);
      if (iv.isTensor()) {
        // TorchNeuron's torch-mlir kernel looks at its positional tensor arguments only.
        if ((info_.empty_zeros || info_.empty_raises) && !args[i].kwarg_only() && iv.toTensor().defined() &&
            iv.toTensor().numel() == 0) {
          empty_input_ = true;
        }
        // A host fallback's out= that is not empty must keep its size (fallback_out_resize rule).
        const bool sized_out = writes && info_.out_keeps_size && args[i].kwarg_only() &&
                               is_neuron(iv.toTensor()) && iv.toTensor().numel() != 0;
        at::Tensor out_before = sized_out ? iv.toTensor() : at::Tensor();
        // A compiled op's out= (compiled_out_written_after rule): the kernel writes a fresh tensor.
        const bool later_out = writes && info_.out_written_after && args[i].kwarg_only() && is_neuron(iv.toTensor());
        // An in-place op's self (compiled_strided_writes_fail rule); an out= is judged against the result's
        // shape once known (write_later_outs).
        if (writes && info_.strided_writes_fail && !args[i].kwarg_only() && fails_as_strided_output(iv.toTensor()) &&
            !in_native_composite()) [[unlikely]] {
          throw_strided_output(info_, iv.toTensor(), KernelOutput::kInPlace);
        }
        // A Python float reaches an op as a 0-dim CPU double tensor (a wrapped number).
        if (info_.target_numerics && !is_neuron(iv.toTensor()) && iv.toTensor().defined() &&
            iv.toTensor().dim() == 0 && iv.toTensor().scalar_type() == at::kDouble) {
          float_scalars_.push_back(begin + i);
        }
        iv = to_host(iv.toTensor(), writes);
        if (sized_out) sized_outs_.emplace_back(iv.toTensor(), std::move(out_before));
        if (writes && info_.writes_through_overlap && at::has_internal_overlap(iv.toTensor()) == at::MemOverlap::Yes) {
          overlapping_writes_.push_back({begin + i, iv.toTensor(), at::Tensor()});
        } else if (later_out) {
          later_outs_.push_back({iv.toTensor(), at::empty({0}, iv.toTensor().options())});
          iv = c10::IValue(later_outs_.back().result);
        }
      } else if (iv.isDouble()) {
        if (info_.target_numerics) float_scalars_.push_back(begin + i);
      } else if (iv.isList()) {
        const auto kind = args[i].type()->kind();
        if (kind == c10::TypeKind::ListType) convert_list(iv, writes);
      } else if (iv.isDevice()) {
        const c10::Device d = iv.toDevice();
        if (d.type() == kNeuron) {
          note_device(d.has_index() ? d.index() : current_device());
          iv = c10::IValue(c10::Device(c10::kCPU));
        }
      } else if (iv.isGenerator()) {
        const at::Generator& g = iv.toGenerator();
        if (g.device().type() == kNeuron) {
          note_device(g.device().index());
          iv = c10::IValue(host_generator(g));
        }
      } else if (iv.isNone() && is_kind(args[i].type(), c10::TypeKind::GeneratorType)) {
        default_generators.push_back(i);
      } else if (iv.isStorage()) {
        const c10::Storage s = iv.toStorage();
        if (s.device().type() == kNeuron) {
          note_device(s.device().index());
          iv = c10::IValue(alias_of(s));
        }
      } else if (iv.isInt() && info_.refused_dtypes != 0 &&
                 is_kind(args[i].real_type(), c10::TypeKind::ScalarTypeType)) {
        // A `dtype=` the target's tables lack: a factory it compiles (`zeros`) has no tensor to check.
        const auto type = static_cast<at::ScalarType>(iv.toInt());
        if (info_.refuses(type)) throw_unsupported_dtype(info_, type);
      }
    }
    // TorchNeuron's argument processor passes a float scalar, and moves a 0-dim CPU tensor, as a
    // float32 tensor (processors/argument_processor.py): with float64 operands computed as float32,
    // so is the scalar (`x.mul(2 * pi / (n - 1))` multiplies by the float32 constant).
    if (!float_scalars_.empty() && std::any_of(rounded_.begin(), rounded_.end(),
                                               [](const at::Tensor& r) { return r.scalar_type() == at::kDouble; })) {
      for (size_t i : float_scalars_) {
        c10::IValue& scalar = (*stack)[i];
        scalar = scalar.isDouble()
                     ? c10::IValue(static_cast<double>(static_cast<float>(scalar.toDouble())))
                     : c10::IValue(scalar.toTensor().to(at::kFloat).to(at::kDouble));
      }
    }
    // A random op without a generator draws from the device's default generator,
    // never from the CPU's.
    for (size_t i : default_generators) {
      (*stack)[begin + i] = c10::IValue(host_generator(default_generator(device())));
    }
    if (!foreign_device_.empty() && neuron_device_) throw_placement_error();
  }

  // The eager signature of this call (valid after `convert_arguments`).
  uint64_t signature() const { return signature_.value(); }

  // TorchNeuron's CPU fallback copies an out= result back only into an empty tensor or one of its
  // size (csrc/aten/CopyKernel.cpp): checked after the kernel, before anything is written back.
  void check_out_sizes() const {
    for (const auto& [host, out] : sized_outs_) {
      if (host.sizes() != out.sizes()) throw_fallback_out_resize(info_, out, host);
    }
  }

  void write_back_mutations() {
    for (auto& [host, original] : rounded_writes_) {
      round_to_target(host);
      copy_back(host, original);
    }
    for (auto& [host, original] : mutated_) {
      if (copy_inputs_) {
        copy_back(host, original);
        continue;
      }
      c10::TensorImpl* orig_impl = original.unsafeGetTensorImpl();
      c10::StorageImpl* host_storage = host.storage().unsafeGetStorageImpl();
      c10::StorageImpl* device_storage = original.storage().unsafeGetStorageImpl();
      const c10::Storage* alias = find_alias(device_storage);
      if (alias != nullptr && alias->unsafeGetStorageImpl() == host_storage) {
        // Same CPU storage: new bytes only if the kernel grew it.
        if (host_storage->data() != device_storage->data()) {
          rebind_device_storage(device_storage, host.storage(), device());
        }
      } else {
        // The kernel pointed the tensor at another storage (`set_`).
        orig_impl->set_storage_keep_dtype(to_device_storage(host.storage()));
      }
      if (host.sizes() != original.sizes() || host.strides() != original.strides() ||
          host.storage_offset() != original.storage_offset()) {
        orig_impl->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
      }
    }
  }

  void convert_results(size_t num_returns, torch::jit::Stack* stack) {
    const size_t begin = stack->size() - num_returns;
    for (size_t i = begin; i < stack->size(); ++i) {
      c10::IValue& iv = (*stack)[i];
      if (iv.isTensor()) {
        iv = to_device(iv.toTensor());
      } else if (iv.isTensorList()) {
        auto list = iv.toTensorList();
        c10::List<at::Tensor> out;
        out.reserve(list.size());
        for (const at::Tensor& t : list) out.push_back(to_device(t));
        iv = c10::IValue(std::move(out));
      }
    }
  }

 private:
  void note_device(c10::DeviceIndex index) {
    if (device_ < 0) device_ = index;
  }

  static void copy_back(const at::Tensor& host, const at::Tensor& original) {
    if (host.sizes() != original.sizes()) original.resize_(host.sizes());
    make_tensor(host_alias(original.storage()), c10::DispatchKey::CPU, original).copy_(host);
  }

  // Device placement as PyTorch's device check defines it for accelerators.
  void check_placement(const at::Tensor& t, bool writes, bool in_index_list) {
    if (!foreign_device_.empty() || info_.placement == Placement::Any) return;
    if (t.is_cpu() && !writes && (t.dim() == 0 || in_index_list)) return;
    foreign_device_ = t.device().str();
    foreign_argument_ = arg_->name();
  }

  // int_arguments_as_int32 rule: TorchNeuron's torch-mlir kernel makes each int argument its registration
  // does not keep static an int32 tensor (python_ops/processors/argument_processor.py, preprocess_inputs:
  // torch.tensor(value, dtype=torch.int32)), int lists item by item.
  void check_int32(const c10::IValue& iv) const {
    if (iv.isInt()) {
      if (!fits_int32(iv.toInt())) throw_int32_overflow(iv.toInt());
    } else if (iv.isIntList()) {
      for (int64_t v : iv.toIntVector()) {
        if (!fits_int32(v)) throw_int32_overflow(v);
      }
    }
  }

  [[noreturn]] void throw_int32_overflow(int64_t value) const {
    std::ostringstream details;
    details << "TorchMlirOpImpl: value cannot be converted to type int32 without overflow (argument `" << arg_->name()
            << "` = " << value << ": TorchNeuron's torch-mlir kernel passes every int argument its registration "
            << "does not keep static as an int32 tensor, torch_neuronx/python_ops/processors/argument_processor.py "
            << "preprocess_inputs; the snapshot's build raises here, a build with "
            << "TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=0 would run the op on the host CPU). Next step: "
            << "keep the value within int32 (-2147483648 to 2147483647), e.g. torch.iinfo(torch.int32).max as a "
            << "sentinel, or pass it as a float; int_arguments_as_int32 = false in a profile lets it through "
            << "(docs/device/fidelity.md).";
    TORCH_CHECK(false, fallback_disabled_message(info_.name, /*executed=*/true, "TorchMlirOpImpl", details.str()));
  }

  // host_index_writes rule: TorchNeuron's OperationImplementation.can_handle (python_ops/base.py).
  [[noreturn]] void throw_host_index(const at::Tensor& index, size_t position) const {
    TORCH_CHECK(false, "Non-scalar tensor arg", arg_index_, "[", position, "] is on ", index.device().type(),
                " device, expected neuron (", info_.name, ": TorchNeuron's indexed write checks that every index "
                "tensor is on the device before it runs, torch_neuronx/python_ops/base.py "
                "OperationImplementation.can_handle; reads such as x[idx] take host indices). Next step: move the "
                "index to the device first, e.g. x[mask.to(x.device)] = value; host_index_writes = false in a "
                "profile lets it through as CUDA does (docs/device/fidelity.md).");
  }

  [[noreturn]] void throw_placement_error() const {
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                *neuron_device_, " and ", foreign_device_, "! (when checking argument for argument ",
                foreign_argument_, " in method ", info_.name, "). Move it to the device first, e.g. ",
                foreign_argument_, ".to(\"", *neuron_device_, "\"): TorchNeuron, like every "
                "accelerator, does not compute across devices.");
  }

  const c10::Storage* find_alias(c10::StorageImpl* device_storage) const {
    for (const auto& [host, dev] : aliases_) {
      if (dev.unsafeGetStorageImpl() == device_storage) return &host;
    }
    return nullptr;
  }

  // The CPU storage over a device storage's bytes, one per device storage per call.
  c10::Storage alias_of(const c10::Storage& device_storage) {
    if (const c10::Storage* host = find_alias(device_storage.unsafeGetStorageImpl())) return *host;
    c10::Storage host = host_alias(device_storage);
    aliases_.emplace_back(host, device_storage);
    return host;
  }

  at::Tensor to_host(const at::Tensor& t, bool writes, bool in_index_list = false) {
    if (!is_neuron(t)) {
      if (!t.defined()) return t;
      check_placement(t, writes, in_index_list);
      if (t.has_storage()) cpu_inputs_.push_back(t.storage().unsafeGetStorageImpl());
      return t;
    }
    if (!neuron_device_) {
      neuron_device_ = t.device();  // named only in an error: no string per op
    } else if (foreign_device_.empty() && t.device().index() != device_) {
      foreign_device_ = t.device().str();
      foreign_argument_ = arg_->name();
    }
    note_device(t.device().index());
    TORCH_CHECK(t.layout() == c10::kStrided, "the neuron device supports strided tensors only, got ",
                t.layout());
    if (info_.checks(t.scalar_type())) {
      if (info_.refuses(t.scalar_type())) throw_unsupported_dtype(info_, t.scalar_type());
      known_issue_dtype_ = true;
    }
    // One host tensor per device tensor: a kernel given the same tensor twice (`mul.out(self,
    // other, out=self)`) must see the alias, or it resizes an `out=` that is also its input
    // and an in-place op changes its self's shape where the CPU raises.
    for (const auto& [host, original] : views_) {
      if (original.unsafeGetTensorImpl() != t.unsafeGetTensorImpl()) continue;
      // A rounded 64-bit copy (target numerics) is written back by copying, never rebound.
      const bool rounded = std::any_of(rounded_.begin(), rounded_.end(),
                                       [&](const at::Tensor& r) { return r.is_same(host); });
      auto& writes_back = rounded ? rounded_writes_ : mutated_;
      if (writes && std::none_of(writes_back.begin(), writes_back.end(),
                                 [&](const auto& m) { return m.second.is_same(t); })) {
        writes_back.emplace_back(host, t);
      }
      return host;
    }
    at::Tensor host;
    if (const c10::Storage* alias = find_alias(t.storage().unsafeGetStorageImpl())) {
      host = make_tensor(*alias, c10::DispatchKey::CPU, t);  // a second view of one storage
    } else {
      host = take_host_view(t);
      aliases_.emplace_back(host.storage(), t.storage());
    }
    if (info_.target_numerics && is_64bit(host)) {
      at::Tensor rounded = rounded_copy(host);
      rounded_.push_back(rounded);
      views_.emplace_back(rounded, t);
      if (writes) rounded_writes_.emplace_back(rounded, t);
      return rounded;
    }
    if (copy_inputs_) {
      host = host.clone(at::MemoryFormat::Preserve);
      if (info_.loses_unmarked_writes && !writes) unmarked_.push_back({host, t, arg_->name()});
    }
    views_.emplace_back(host, t);
    if (writes) mutated_.emplace_back(host, t);
    return host;
  }

  void convert_list(c10::IValue& iv, bool writes) {
    c10::List<c10::IValue> list = iv.toList();
    const bool named_indices = arg_->name() == "indices";
    const bool indices = info_.placement == Placement::HostIndices && named_indices;
    const bool device_indices = info_.placement == Placement::DeviceIndices && named_indices;
    bool any = false;
    for (size_t j = 0; j < list.size(); ++j) {
      const c10::IValue e = list.get(j);
      if (!e.isTensor()) continue;
      const at::Tensor& t = e.toTensor();
      if ((indices || device_indices) && t.defined() &&
          (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte)) {
        index_mask_ = true;
      }
      if (is_neuron(t)) {
        any = true;
      } else if (device_indices && t.defined() && t.dim() != 0) {
        throw_host_index(t, j);
      } else if (t.defined()) {
        check_placement(t, writes, indices || device_indices);
      }
    }
    if (!any) return;
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (const c10::IValue& e : list) {
      out.push_back(e.isTensor() ? c10::IValue(to_host(e.toTensor(), writes, indices)) : e);
    }
    iv = c10::IValue(std::move(out));
  }

 public:
  // Whether the call indexes with a boolean mask (its shape depends on the data).
  bool indexes_with_mask() const { return index_mask_; }
  // The target writes through a written argument whose elements share memory, where the CPU's
  // kernel refuses it: the kernel writes a compact copy, which goes back element by element
  // (a shared location keeps one of the values written).
  bool writes_overlapping() const { return !overlapping_writes_.empty(); }
  void unshare_overlapping_writes(torch::jit::Stack* stack) {
    for (OverlappingWrite& w : overlapping_writes_) {
      w.compact = at::empty(w.shared.sizes(), w.shared.options());
      w.compact.copy_(w.shared);
      (*stack)[w.slot] = c10::IValue(w.compact);
    }
  }
  void write_through_overlapping(size_t num_returns, torch::jit::Stack* stack) {
    for (OverlappingWrite& w : overlapping_writes_) {
      const at::Tensor& shared = w.shared;
      if (shared.numel() > 0) {
        at::Tensor offsets = at::zeros(shared.sizes(), shared.options().dtype(at::kLong));
        c10::SmallVector<int64_t, 6> shape(shared.dim(), 1);
        for (int64_t d = 0; d < shared.dim(); ++d) {
          shape[d] = shared.size(d);
          offsets.add_(at::arange(shared.size(d), offsets.options()).mul_(shared.stride(d)).view(shape));
          shape[d] = 1;
        }
        const int64_t extent = offsets.max().item<int64_t>() + 1;
        shared.as_strided({extent}, {1}, shared.storage_offset())
            .index_put_({offsets.reshape(-1)}, w.compact.reshape(-1));
      }
      for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
        if ((*stack)[i].isTensor() && (*stack)[i].toTensor().is_same(w.compact)) (*stack)[i] = c10::IValue(shared);
      }
    }
  }
  // TorchNeuron's kernels compute into an output of their own, then resize each out= with a plain
  // resize_ and write the result into it (python_ops/torch_mlir/kernel.py _prepare_execution_tensors,
  // handlers/output.py _copy_to_output): no "resized" warning, no check that out= overlaps an input.
  void write_later_outs(size_t num_returns, torch::jit::Stack* stack) {
    for (LaterOut& o : later_outs_) {
      // An out= of the result's shape is the torch-mlir kernel's execution output itself (one of another
      // shape is resized first, and so made contiguous): compiled_strided_writes_fail rule.
      if (info_.strided_writes_fail && o.out.sizes() == o.result.sizes() && fails_as_strided_output(o.out) &&
          !in_native_composite()) [[unlikely]] {
        throw_strided_output(info_, o.out, KernelOutput::kOut);
      }
      if (o.out.sizes() != o.result.sizes()) o.out.resize_(o.result.sizes());
      o.out.copy_(o.result);
      for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
        if ((*stack)[i].isTensor() && (*stack)[i].toTensor().is_same(o.result)) (*stack)[i] = c10::IValue(o.out);
      }
    }
  }
  // fallback_unmarked_writes_lost rule: the arguments the kernel wrote into without its schema saying so,
  // whose copies are dropped as the target's CPU fallback drops them (native_batch_norm's running stats).
  std::string lost_writes() const {
    std::string names;
    for (const UnmarkedCopy& u : unmarked_) {
      at::Tensor device_bytes = take_host_view(u.original);
      const bool changed = !at::equal(u.copy, device_bytes);
      recycle_host_view(device_bytes);
      if (changed) names += (names.empty() ? "" : ", ") + u.name;
    }
    return names;
  }
  // Whether a positional tensor argument is empty (the target returns zeros or raises: empty_inputs rule).
  bool has_empty_input() const { return empty_input_; }
  // Whether a device tensor has a dtype the op's known issue is scoped to.
  bool runs_known_issue_dtype() const { return known_issue_dtype_; }

 private:

  // The device storage for a CPU storage produced by the kernel: the input it
  // aliases, or the same bytes adopted as device memory.
  c10::Storage to_device_storage(const c10::Storage& host) {
    c10::StorageImpl* impl = host.unsafeGetStorageImpl();
    for (const auto& [h, dev] : aliases_) {
      if (h.unsafeGetStorageImpl() == impl) return dev;
    }
    for (const auto& [h, dev] : adopted_) {
      if (h.unsafeGetStorageImpl() == impl) return dev;
    }
    c10::Storage dev = adopt_host_storage(host, device());
    adopted_.emplace_back(host, dev);
    return dev;
  }

  at::Tensor to_device(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::kCPU) return t;
    for (const auto& [host, original] : views_) {
      if (host.is_same(t)) return original;  // in-place and out= results
    }
    for (c10::StorageImpl* s : cpu_inputs_) {
      if (s == t.storage().unsafeGetStorageImpl()) return t;  // a view of a genuine CPU input
    }
    TORCH_CHECK(t.layout() == c10::kStrided, "the neuron device supports strided tensors only; the "
                "CPU kernel returned a ", t.layout(), " tensor");
    TORCH_CHECK(!t.is_nested(), nested_tensors_unsupported());
    check_strided_result(info_, t);
    // The target's kernel writes a fresh row-major result (compiled_results_row_major rule), or its CPU
    // fallback copies one to the device (to_copy_row_major rule). (The copy is converted as a result
    // of its own: a second handle to `t` would keep adopt_in_place below from ever relabelling a result.)
    if (info_.row_major_results && !t.is_contiguous()) {
      warn_row_major(info_, t.strides());
      return to_device(t.contiguous());
    }
    if (t.numel() == 0 && rule_on(kRuleAllocationsByNumel)) [[unlikely]] lay_out_as_target(t);
    if (info_.target_numerics) round_to_target(t);
    if (copy_inputs_) {
      // Explicit host fallback: the result is copied into fresh device memory.
      at::Tensor out = make_tensor(c10::Storage(c10::make_intrusive<c10::StorageImpl>(
                                       c10::StorageImpl::use_byte_size_t(), t.storage().nbytes(),
                                       allocate_on(device(), t.storage().nbytes()),
                                       neuron_allocator(), true)),
                                   c10::DispatchKey::PrivateUse1, t);
      make_tensor(host_alias(out.storage()), c10::DispatchKey::CPU, t).copy_(t);
      return out;
    }
    if (adopt_in_place(t, device())) return t;  // a fresh result no one else holds
    return make_tensor(to_device_storage(t.storage()), c10::DispatchKey::PrivateUse1, t);
  }

  const OpInfo& info_;
  const bool copy_inputs_;
  const c10::Argument* arg_ = nullptr;  // the argument being converted
  size_t arg_index_ = 0;                // its place in the schema
  std::optional<c10::Device> neuron_device_;
  std::string foreign_device_, foreign_argument_;
  Signature signature_;
  bool index_mask_ = false;
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 1> sized_outs_;  // host out=, device out= (non-empty)
  bool known_issue_dtype_ = false;
  bool empty_input_ = false;
  struct OverlappingWrite {
    size_t slot;        // its place on the stack
    at::Tensor shared;  // the host view whose elements share memory
    at::Tensor compact; // what the kernel writes instead
  };
  c10::SmallVector<OverlappingWrite, 1> overlapping_writes_;
  struct LaterOut {
    at::Tensor out;     // the host view of the out= tensor given
    at::Tensor result;  // the fresh tensor the kernel writes instead
  };
  c10::SmallVector<LaterOut, 1> later_outs_;
  struct UnmarkedCopy {
    at::Tensor copy;      // the host copy the kernel was given
    at::Tensor original;  // the device tensor, which keeps its bytes
    std::string name;     // the schema argument
  };
  c10::SmallVector<UnmarkedCopy, 2> unmarked_;
  c10::DeviceIndex device_ = -1;
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 4> aliases_;  // host alias, device
  c10::SmallVector<std::pair<c10::Storage, c10::Storage>, 2> adopted_;  // kernel output, device
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 6> views_;  // host view, device
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> mutated_;  // host view, device
  c10::SmallVector<at::Tensor, 1> rounded_;  // rounded copies of 64-bit inputs (target numerics)
  c10::SmallVector<size_t, 2> float_scalars_;  // stack slots of float scalars (target numerics)
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> rounded_writes_;  // rounded copy, device
  c10::SmallVector<c10::StorageImpl*, 2> cpu_inputs_;
};

// Runs `fn` with `index` as the current device (the allocator allocates there).
template <typename Fn>
auto on_device(c10::DeviceIndex index, Fn&& fn) {
  const c10::DeviceIndex previous = current_device();
  if (previous == index) return fn();
  set_current_device(index);
  struct Restore {
    c10::DeviceIndex previous;
    ~Restore() { set_current_device(previous); }
  } restore{previous};
  return fn();
}

}  // namespace

at::Tensor take_host_view(const at::Tensor& t) { return host_views().take(t); }

void recycle_host_view(at::Tensor& view) { host_views().give(view); }

at::Tensor host_view_of(const at::Tensor& t) {
  return is_neuron(t) ? make_tensor(host_alias(t.storage()), c10::DispatchKey::CPU, t) : t;
}

void round_to_target(const at::Tensor& t) {
  if (!t.defined() || !is_64bit(t) || t.numel() == 0) return;
  if (round_in_memory_order(t, t)) return;
  t.copy_(t.to(narrow_type(t.scalar_type())));
}

at::Tensor device_view(const c10::Storage& device_storage, const at::Tensor& like) {
  return make_tensor(device_storage, c10::DispatchKey::PrivateUse1, like);
}

at::Tensor adopt_host_result(const at::Tensor& host, c10::DeviceIndex index) {
  if (adopt_in_place(host, index)) return host;
  return make_tensor(adopt_host_storage(host.storage(), index), c10::DispatchKey::PrivateUse1, host);
}

std::vector<at::Tensor> adopt_host_results(const std::vector<at::Tensor>& hosts, c10::DeviceIndex index) {
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> adopted;  // host storage -> device
  std::vector<at::Tensor> out;
  out.reserve(hosts.size());
  for (const at::Tensor& host : hosts) {
    c10::StorageImpl* key = host.storage().unsafeGetStorageImpl();
    auto it = std::find_if(adopted.begin(), adopted.end(), [&](const auto& a) { return a.first == key; });
    if (it == adopted.end()) it = adopted.insert(adopted.end(), {key, adopt_host_storage(host.storage(), index)});
    out.push_back(make_tensor(it->second, c10::DispatchKey::PrivateUse1, host));
  }
  return out;
}

c10::OperatorHandle op_handle(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

namespace {

c10::DeviceIndex index_of(std::optional<at::Device> device) {
  return device && device->has_index() ? device->index() : current_device();
}

}  // namespace

namespace {

// cat_of_empty_tensors_1d rule: the dtype of the first tensor of aten::cat's list when every tensor in it
// is empty (TorchNeuron's torch_cat then returns torch.empty(0) in that dtype), else nothing.
std::optional<at::ScalarType> all_empty_list_dtype(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const c10::IValue& tensors = stack[stack.size() - schema.arguments().size()];
  if (!tensors.isTensorList() || tensors.toTensorList().empty()) return std::nullopt;
  for (const at::Tensor& t : tensors.toTensorList()) {
    if (t.numel() != 0) return std::nullopt;
  }
  return tensors.toTensorList().get(0).scalar_type();
}

// cat_of_empty_tensors_1d rule: the result becomes a 1-D empty tensor in `dtype`.
void make_cat_result_1d(at::ScalarType dtype, torch::jit::Stack* stack) {
  const at::Tensor cpu_shaped = stack->back().toTensor();
  stack->back() = c10::IValue(empty_on({0}, {}, dtype, std::nullopt, cpu_shaped.device().index()));
  if (cpu_shaped.dim() != 1) warn_cat_of_empties(cpu_shaped.sizes());
}

// TorchNeuron turns a boolean mask into indices with `nonzero`, whose size the host
// reads back (torch_mlir/ops/indexing.py convert_indices), except `x[mask] = scalar`,
// which it runs as a `where` on the device (index_put's masked-fill path there).
bool is_masked_fill(const OpInfo& info, const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  if (info.name.find("index_put") == std::string::npos) return false;
  const size_t begin = stack.size() - schema.arguments().size();
  const c10::IValue& values = stack[begin + 2];
  const c10::IValue& accumulate = stack[begin + 3];
  return values.isTensor() && values.toTensor().numel() == 1 && accumulate.isBool() && !accumulate.toBool();
}

}  // namespace

void Signature::add(const c10::IValue& iv, const c10::Argument& arg) {
  if (iv.isTensor()) return add(iv.toTensor());
  if (iv.isTensorList()) {
    for (const at::Tensor& t : iv.toTensorList()) add(t);
  } else if (iv.isList()) {
    for (const c10::IValue& e : iv.toListRef()) {
      if (e.isTensor()) add(e.toTensor());
      else if (e.isInt()) add(e.toInt());
      else mix(0x6e);
    }
  } else if (iv.isInt() && arg.type()->kind() != c10::TypeKind::NumberType) {
    add(iv.toInt());  // an int or a dtype: by value
  } else if (iv.isBool()) {
    add(iv.toBool());
  } else if (iv.isString()) {
    for (char c : iv.toStringRef()) mix(static_cast<unsigned char>(c));
  } else if (iv.isDouble() || iv.isInt() || iv.isComplexDouble()) {
    add(iv.toScalar());  // a number: its type only
  } else {
    none();
  }
}

namespace {
// The target's result for an empty positional input: zeros of each result's shape (its
// torch-mlir kernel computes nothing). Written through host views: not a device op.
// empty_inputs rule: the target's torch-mlir kernel computes nothing and returns torch.zeros of each
// result's shape, in the default dtype; an out= result is the tensor given, which the zeros are copied into.
void zero_results(const OpInfo& info, const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  const size_t num_returns = schema.returns().size();
  const at::ScalarType default_dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  bool zeroed = false, dtype_changed = false;
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue& iv = (*stack)[stack->size() - num_returns + r];
    if (!iv.isTensor() || !iv.toTensor().defined() || iv.toTensor().numel() == 0) continue;
    const at::Tensor& result = iv.toTensor();
    if (schema.returns()[r].alias_info() == nullptr && result.scalar_type() != default_dtype) {
      iv = c10::IValue(empty_on(result.sizes(), {}, default_dtype, std::nullopt, result.device().index()));
      dtype_changed = true;
    }
    host_view_of(iv.toTensor()).zero_();
    zeroed = true;
  }
  if (zeroed) warn_empty_zeros(info, dtype_changed);
}

// empty_inputs rule: a reduction without an identity (`ReductionOps.NO_IDENTITY_OPS`) raises in the
// target's torch-mlir kernel, and the snapshot's build passes the error on rather than falling back.
[[noreturn]] void throw_empty_no_identity(const OpInfo& info) {
  TORCH_CHECK(false, fallback_disabled_message(
                         info.name, /*executed=*/true, "TorchMlirOpImpl",
                         "TorchMlirOpImpl: Cannot perform " + info.name + " on empty tensor (no identity value) "
                         "(TorchNeuron's torch-mlir kernel computes nothing when a tensor argument is empty and has "
                         "no value to give for this reduction, torch_neuronx/python_ops/torch_mlir/kernel.py "
                         "_handle_empty_tensors, python_ops/shared/config.py ReductionOps; where the CPU gives an "
                         "empty result, the target raises). Next step: skip the reduction when the tensor is empty "
                         "(if x.numel() == 0: ...); a profile with empty_inputs = false computes what the CPU "
                         "computes (docs/device/fidelity.md)."));
}
}  // namespace

void execute_on_host_kernels(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/,
                             torch::jit::Stack* stack) {
  settle_device_threading();
  run_on_host_kernels(op, account(op), stack);
}

void run_on_host_kernels(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  HostCall call(info);
  call.convert_arguments(schema, stack);
  if (info.empty_raises && call.has_empty_input()) throw_empty_no_identity(info);
  const std::optional<at::ScalarType> cat_of_empties =
      info.cat_of_empties_1d ? all_empty_list_dtype(schema, *stack) : std::nullopt;
  ProfiledOp profiled(op, info.on_host(), call.device());
  if (info.compiles) record_signature(call.signature() ^ info.name_hash);
  if (call.runs_known_issue_dtype()) note_known_issue(info);
  if (call.indexes_with_mask() && !is_masked_fill(info, schema, *stack)) {
    count_sync(info.name + " (boolean mask)");
  }
  if (call.writes_overlapping()) call.unshare_overlapping_writes(stack);
  {
    KernelMemoryScope kernel_memory(call.device());
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }
  if (call.writes_overlapping()) {
    call.write_through_overlapping(schema.returns().size(), stack);
    warn_overlapping_write(info);
  }
  call.write_later_outs(schema.returns().size(), stack);
  call.check_out_sizes();
  call.write_back_mutations();
  if (info.loses_unmarked_writes) [[unlikely]] {
    if (const std::string lost = call.lost_writes(); !lost.empty()) warn_lost_writes(info, lost);
  }
  call.convert_results(schema.returns().size(), stack);
  if (info.empty_zeros && call.has_empty_input()) zero_results(info, schema, stack);
  if (cat_of_empties) [[unlikely]] make_cat_result_1d(*cat_of_empties, stack);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<at::MemoryFormat> memory_format) {
  static const KnownOp op = known_op("aten::empty", "memory_format");
  count_op(op);
  TORCH_CHECK(!layout || *layout == c10::kStrided,
              "the neuron device supports strided tensors only, got layout ", *layout);
  return empty_on(size, {}, c10::dtype_or_default(dtype), memory_format, index_of(device));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> /*pin_memory*/) {
  static const KnownOp op = known_op("aten::empty_strided", "");
  count_op(op);
  TORCH_CHECK(!layout || *layout == c10::kStrided,
              "the neuron device supports strided tensors only, got layout ", *layout);
  // The CPU's and TorchNeuron's (c10's) check, which empty_on's contiguous path for no strides would skip.
  TORCH_CHECK(size.size() == stride.size(), "dimensionality of sizes (", size.size(),
              ") must match dimensionality of strides (", stride.size(), ")");
  return empty_on(size, stride, c10::dtype_or_default(dtype), std::nullopt, index_of(device));
}

namespace {
// allocations_by_numel rule: TorchNeuron's empty_strided_neuron gives a tensor a storage of its number
// of elements (one element when it has none) whatever its strides. The allocation here holds the
// strides' whole extent, so the CPU's kernels stay inside it; the storage's size is the target's, so
// what reads it (storage().size(), as_strided's bounds check, a resize) sees the target's.
// Whether TorchNeuron's allocation differs from the CPU's: a tensor with no elements (its strides, and a storage of
// one element), or strides whose reach is not the tensor's elements (a padded or overlapping layout). Every other
// allocation is the CPU's there too, and takes its path here (one product of the sizes more).
bool allocated_otherwise(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype) {
  const int64_t numel = c10::multiply_integers(sizes);
  if (numel == 0) return true;
  const size_t itemsize = c10::elementSize(dtype);
  return !strides.empty() && at::detail::computeStorageNbytes(sizes, strides, itemsize) != numel * itemsize;
}

at::Tensor empty_by_numel(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                          std::optional<at::MemoryFormat> memory_format) {
  std::vector<int64_t> laid_out;
  if (strides.empty()) {
    laid_out = target_strides(sizes, memory_format.value_or(at::MemoryFormat::Contiguous));
    strides = laid_out;
  }
  const size_t itemsize = c10::elementSize(dtype);
  const size_t nbytes = static_cast<size_t>(std::max<int64_t>(c10::multiply_integers(sizes), 1)) * itemsize;
  const size_t extent = at::detail::computeStorageNbytes(sizes, strides, itemsize);
  if (extent > nbytes) [[unlikely]] {
    TORCH_WARN_ONCE("aten::empty_strided: sizes ", sizes, " with strides ", strides, " reach ", extent / itemsize,
                    " elements, but TorchNeuron gives a tensor a storage of its number of elements, ", nbytes / itemsize,
                    " (csrc/aten/NeuronNativeFunctions.cpp, empty_strided_neuron): on the target its last elements "
                    "lie past the allocation, and a view of them fails the storage bounds check. Next step: "
                    "allocate the extent and take the view, torch.empty(", extent / itemsize,
                    ", ...).as_strided(size, stride), or use the strides of a dense layout; a profile with "
                    "allocations_by_numel = false keeps the CPU's storage (docs/device/fidelity.md).");
  }
  c10::Allocator* allocator = neuron_allocator();
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                             allocator->allocate(std::max(nbytes, extent)),
                                                             allocator, /*resizable=*/true));
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                   c10::scalarTypeToTypeMeta(dtype));
  impl->set_sizes_and_strides(sizes, strides);
  return at::Tensor(std::move(impl));
}
}  // namespace

at::Tensor empty_on(c10::IntArrayRef sizes, c10::IntArrayRef strides, at::ScalarType dtype,
                    std::optional<at::MemoryFormat> memory_format, c10::DeviceIndex index) {
  const c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return on_device(index, [&] {
    if (rule_on(kRuleAllocationsByNumel) && allocated_otherwise(sizes, strides, dtype)) [[unlikely]] {
      return empty_by_numel(sizes, strides, dtype, memory_format);
    }
    return at::Tensor(strides.empty()
                          ? at::detail::empty_generic(sizes, neuron_allocator(), keys, dtype, memory_format)
                          : at::detail::empty_strided_generic(sizes, strides, neuron_allocator(), keys, dtype));
  });
}

// The views that reach a backend (the composite views, `t`, `slice`, `expand`, ..., end in
// these): a new TensorImpl over the same device storage, made by ATen's own
// device-independent kernels, as the CPU and CUDA register them. They are metadata on the
// target too (Target.cpp counts views as such), and the boxed path's host views and
// adoption would only add a round trip (about 2 us a call) to no purpose.
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  static const KnownOp op = known_op("aten::as_strided", "");
  count_op(op);
  // TorchNeuron's as_strided_neuron (csrc/aten/TensorShape.cpp) runs PyTorch's storage bounds
  // check before `setStrided`, whose first checks refuse strides of another length than the sizes
  // and negative strides: the bounds check fails first there, with its own message ("dimensionality
  // of sizes (2) must match dimensionality of strides (1)"; no strides at all take its contiguous
  // path and pass; or the bounds error for a negative stride its arithmetic cannot take). Only
  // those cases tell the orders apart, so the usual call pays one scan of its strides. The
  // message must not quote the CPU's: PyTorch's tests match on it.
  if (rule_on(kRuleAsStridedBoundsFirst) &&
      (size.size() != stride.size() ||
       std::any_of(stride.begin(), stride.end(), [](int64_t s) { return s < 0; }))) {
    try {
      at::native::checkInBoundsForStorage(size, stride, storage_offset.value_or(self.storage_offset()),
                                          self.dtype(), self.storage());
    } catch (const c10::Error& e) {
      TORCH_CHECK(false, e.msg(), " (aten::as_strided on ", self.device(), ", as on TorchNeuron: its as_strided "
                  "checks the storage bounds before the strides, csrc/aten/TensorShape.cpp, where the CPU "
                  "refuses the strides first: their number or a negative one). Next step: give one "
                  "non-negative stride per size, e.g. torch.flip for a reversed view; "
                  "as_strided_bounds_first = false in a profile gives the CPU's error (docs/device/fidelity.md).");
    }
  }
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  static const KnownOp op = known_op("aten::view", "");
  count_op(op);
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  static const KnownOp op = known_op("aten::_reshape_alias", "");
  count_op(op);
  return at::native::_reshape_alias(self, size, stride);
}

namespace {
// A permutation of a row-major layout (contiguous_transpose.py, compute_permutation_for_contiguous):
// positive strides that, with the axes sorted by stride (the larger span first on ties), are the
// row-major strides of the sorted sizes.
bool is_permuted_row_major(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  const size_t n = sizes.size();
  if (std::any_of(strides.begin(), strides.end(), [](int64_t s) { return s <= 0; })) return false;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (strides[a] != strides[b]) return strides[a] > strides[b];
    return strides[a] * std::max<int64_t>(sizes[a], 1) > strides[b] * std::max<int64_t>(sizes[b], 1);
  });
  std::vector<int64_t> sorted_sizes(n);
  for (size_t i = 0; i < n; ++i) sorted_sizes[i] = sizes[order[i]];
  const std::vector<int64_t> expected = target_strides(sorted_sizes, at::MemoryFormat::Contiguous);
  for (size_t i = 0; i < n; ++i) {
    if (strides[order[i]] != expected[i]) return false;
  }
  return true;
}

// A broadcast (contiguous_broadcast.py, compute_broadcast_for_contiguous): no negative stride, and
// a zero stride over a dimension of more than one element.
bool is_broadcast(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  bool broadcast = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (strides[i] < 0) return false;
    broadcast = broadcast || (strides[i] == 0 && sizes[i] > 1);
  }
  return broadcast;
}

// A slice of one axis of a row-major tensor (contiguous_slice.py, detect_slice_pattern), whose
// whole base stays under the compiler's 4 GiB (ContiguousSliceImpl.can_handle).
bool is_slice_of_one_axis(const at::Tensor& t) {
  const c10::IntArrayRef sizes = t.sizes();
  const c10::IntArrayRef strides = t.strides();
  const size_t n = sizes.size();
  if (int64_t remaining = t.storage_offset(); remaining > 0) {
    int offset_dims = 0;
    for (size_t i = 0; i < n; ++i) {
      if (strides[i] > 0 && remaining >= strides[i]) {
        ++offset_dims;
        remaining %= strides[i];
      }
    }
    if (offset_dims > 1) return false;
  }
  if (strides[n - 1] != 1) return false;
  int64_t sliced_axis = -1;
  int64_t base_size = 0;
  for (size_t axis = 0; axis + 1 < n; ++axis) {
    const int64_t inner = strides[axis + 1];
    if (inner == 0) return false;
    if (strides[axis] == sizes[axis + 1] * inner) continue;
    if (sliced_axis >= 0 || strides[axis] % inner != 0 || strides[axis] / inner <= sizes[axis + 1]) return false;
    std::vector<int64_t> base_sizes(sizes.begin(), sizes.end());
    base_sizes[axis + 1] = strides[axis] / inner;
    if (target_strides(base_sizes, at::MemoryFormat::Contiguous) != std::vector<int64_t>(strides.begin(), strides.end())) return false;
    sliced_axis = static_cast<int64_t>(axis) + 1;
    base_size = base_sizes[axis + 1];
  }
  if (sliced_axis < 0) return false;
  const int64_t base_bytes = t.numel() / sizes[sliced_axis] * base_size * static_cast<int64_t>(t.element_size());
  return base_bytes < (int64_t{4} << 30);
}

// Whether the target takes a 64-bit `t` through 32 bits when it makes `t` contiguous on the device
// (Tensor.contiguous(), and each copy of it: to the host, into another device tensor).
// TorchNeuron makes a non-contiguous tensor contiguous with python_ops/contiguous.py's
// contiguous_internal, which tries a transpose, a broadcast and a slice kernel, in that order,
// before its NKI kernel (contiguous_generic_kernel, which keeps the dtype). The three are
// torch-mlir programs (TorchMlirKernel), whose lowering converts float64 to float32
// (neuron_dynamo_backend/fx/passes/dtype_conversion.py); the device gives them the 32-bit
// values it gives every op the target compiles (target numerics). Uncertain: whether the
// compiled program reads the 64-bit bytes converted or as they are; either way the values are
// not the CPU's.
bool narrowed_by_layout_kernel(const at::Tensor& t) {
  if (!is_neuron(t) || !is_64bit(t) || !target_numerics_on() || t.numel() == 0 || t.dim() == 0 ||
      t.is_contiguous()) {
    return false;
  }
  // A compiled graph's numerics are compile/numerics.py's business.
  if (is_tracing(t)) return false;
  return is_permuted_row_major(t.sizes(), t.strides()) || is_broadcast(t.sizes(), t.strides()) ||
         is_slice_of_one_axis(t);
}

// The CPU's copy between the bytes of `src` and `dst`, either of which may be a device tensor
// (then seen through a pooled host view, as an op's arguments are); `rounded`: of src.round();
// `narrowed`: the copy then takes the target's 32-bit values (narrowed_by_layout_kernel).
void copy_on_host(const at::Tensor& src, const at::Tensor& dst, bool rounded = false, bool narrowed = false) {
  at::Tensor host_dst = is_neuron(dst) ? take_host_view(dst) : dst;
  at::Tensor host_src = is_neuron(src) ? take_host_view(src) : src;
  host_dst.copy_(rounded ? host_src.round() : host_src);
  if (narrowed) round_to_target(host_dst);
  recycle_host_view(host_src);
  recycle_host_view(host_dst);
}
// complex_dtypes rule: a cast between device tensors TorchNeuron compiles (python_ops/cast_policy.py
// write_neuron_to_neuron: dtypes that differ, neither float64 nor int64, which bounce through the CPU) with a
// complex dtype at either end. `_to_copy` always writes a fresh contiguous tensor that way; `copy_` does when its
// destination is contiguous (python_ops/copy.py CopyNeuronImpl._copy_neuron_to_neuron; into a strided view it
// writes through _write_to_noncontiguous_neuron, whose CPU path casts on the host). An empty tensor is answered
// before any kernel (OperationImplementation.execute's empty-tensor path); tracing tensors have no bytes.
bool casts_complex_on_device(const at::Tensor& src, at::ScalarType to) {
  const at::ScalarType from = src.scalar_type();
  if (from == to || !(at::isComplexType(from) || at::isComplexType(to))) return false;
  if (from == at::kDouble || from == at::kLong || to == at::kDouble || to == at::kLong) return false;
  return rule_on(kRuleComplex) && is_neuron(src) && src.numel() > 0 &&
         !is_tracing(src);
}

// casts_to_int_round rule: the casts TorchNeuron runs on the device (32 bits or fewer, python_ops/cast_policy.py)
// from a float to an integer type other than bool.
bool rounds_to_int(at::ScalarType from, at::ScalarType to) {
  const bool float32_or_narrower = from == at::kFloat || from == at::kHalf || from == at::kBFloat16;
  const bool int32_or_narrower = to == at::kInt || to == at::kShort || to == at::kChar || to == at::kByte;
  return float32_or_narrower && int32_or_narrower;
}
}  // namespace

// `copy_` is CompositeExplicitAutograd: for a device it does not know it calls
// `_copy_from(src, dst)`, which lands here for host<->device and device<->device.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  static const KnownOp op = known_op("aten::_copy_from", "");
  count_op(op);
  // .cpu(), .tolist(), .numpy() and printing wait for the device: a host sync.
  if (dst.device().type() != kNeuron) count_sync("aten::_copy_from (device to host)");
  if (is_neuron(dst) && dst.is_contiguous() && casts_complex_on_device(self, dst.scalar_type())) [[unlikely]] {
    throw_complex_device_cast(self.scalar_type(), dst.scalar_type(), "aten::copy_", "CopyNeuronImpl");
  }
  const bool rounds = is_neuron(self) && is_neuron(dst) && rounds_to_int(self.scalar_type(), dst.scalar_type()) &&
                      rule_on(kRuleCastsToIntRound);
  const bool narrowed = self.scalar_type() == dst.scalar_type() && narrowed_by_layout_kernel(self);
  copy_on_host(self, dst, rounds, narrowed);
  if (rounds) [[unlikely]] warn_cast_rounds(self.scalar_type(), dst.scalar_type());
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  static const KnownOp op = known_op("aten::_copy_from_and_resize", "");
  count_op(op);
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  copy_on_host(self, dst);
  return dst;
}

// `module.to("neuron")` swaps parameter data in place (`param.data = moved`) only
// when PyTorch deems the two tensors shallow-copy compatible; its built-in rule
// knows dense CPU/CUDA/... but not PrivateUse1, so without this a move would make
// new Parameters and silently untie shared weights (embeddings and lm_head).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.device().is_cpu() || t.device().type() == kNeuron) &&
           !t.is_quantized() && !t.is_nested();
  };
  return dense(self) && dense(from);
}

// scaled_dot_product_attention asks a per-device stub which fused kernel to use;
// the device answers as the CPU does, so attention runs the same CPU kernel
// (flash attention for CPU, or the math path) and gives the CPU's numbers. The
// choice reads only metadata, so it is asked with byte-less CPU tensors of the same
// shape: that also works for the fake tensors torch.compile traces with.
static at::Tensor shape_only_host_tensor(const at::Tensor& t) {
  c10::Storage none(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), 0, c10::DataPtr(nullptr, c10::Device(c10::kCPU)),
      nullptr, /*resizable=*/false));
  at::Tensor shaped = make_tensor(std::move(none), c10::DispatchKey::CPU, t);
  // The choice depends on it too (no fused CPU kernel differentiates the mask).
  if (t.requires_grad()) shaped.set_requires_grad(true);
  return shaped;
}

int64_t sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  std::optional<at::Tensor> host_mask;
  if (attn_mask.has_value() && attn_mask->defined()) host_mask = shape_only_host_tensor(*attn_mask);
  return at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), shape_only_host_tensor(query),
      shape_only_host_tensor(key), shape_only_host_tensor(value), host_mask, dropout_p, is_causal,
      scale, enable_gqa);
}

// Dropout as the CPU computes it (noise = bernoulli(1-p) / (1-p); out = x * noise),
// not the fused native_dropout path PyTorch picks for accelerators: the two round
// differently, and the device must reproduce the CPU's numbers for the same seed.
// The mask is drawn on the device, so from the neuron generator.
//
// On the target, PyTorch's dropout calls the fused `native_dropout` for a PrivateUse1 input
// with 0 < p < 1 (ATen's is_fused_kernel_acceptable), which TorchNeuron registers natively
// (torch_mlir/ops): so the call counts as one native `native_dropout`, and the ops it runs
// through here (bernoulli_, a predicted host fallback on its own) are not counted.
at::Tensor dropout(const at::Tensor& input, double p, bool train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (p == 0 || !train || input.sym_numel() == 0) return input;
  if (p == 1) return input.mul(at::zeros({}, input.options()));
  static const c10::OperatorHandle native_dropout = op_handle("aten::native_dropout", "");
  Signature signature;
  signature.add(input);
  signature.add(p);
  signature.add(std::optional<bool>(train));
  NativeCompositeScope as_native_dropout(native_dropout, signature.value());
  at::Tensor noise = at::empty_like(input);
  noise.bernoulli_(1 - p);
  noise.div_(1 - p);
  return input.mul(noise);
}


// TorchNeuron registers `contiguous` itself, for AutogradPrivateUse1
// (csrc/core/NeuronBindings.cpp, contiguous_autograd_neuron -> python_ops/contiguous.py
// contiguous_internal), and refuses every memory format but contiguous and preserve there
// (python_ops/cast_policy.py, validate_neuron_memory_format), before any CPU fallback.
// `clone` and `empty` in channels_last stay allowed (csrc/aten/NeuronNativeFunctions.cpp).
// Tensor.contiguous() returns a tensor already in the format before dispatching, there as here.
at::Tensor contiguous(const at::Tensor& self, at::MemoryFormat memory_format) {
  static const c10::OperatorHandle op = op_handle("aten::contiguous", "");
  // Tracing tensors (Dynamo's fakes, functional wrappers) pass, as TorchNeuron lets them.
  if (rule_on(kRuleMemoryFormat) && !self.unsafeGetTensorImpl()->is_python_dispatch() &&
      (memory_format == at::MemoryFormat::ChannelsLast || memory_format == at::MemoryFormat::ChannelsLast3d)) {
    TORCH_CHECK(false, "aten::contiguous: Neuron tensors only support contiguous or preserve memory format (got ",
                memory_format, " on ", self.device(), "; TorchNeuron's python_ops/cast_policy.py). Next step: "
                "call .contiguous() without a memory format, or keep the tensor in the layout it has "
                "(channels_last tensors can be created, cloned and moved: torch.empty(..., "
                "memory_format=torch.channels_last), x.clone(memory_format=torch.channels_last))");
  }
  Signature signature;
  signature.add(self);
  signature.add(static_cast<int64_t>(memory_format));
  NativeCompositeScope as_contiguous(op, signature.value());
  if (self.is_contiguous(memory_format)) return self;
  at::Tensor result = self.clone(memory_format);
  if (memory_format == at::MemoryFormat::Contiguous && narrowed_by_layout_kernel(self)) {
    at::Tensor host = take_host_view(result);
    round_to_target(host);
    recycle_host_view(host);
  }
  return result;
}

// `Tensor.to(memory_format=channels_last)` (and `Module.to(memory_format=...)`): TorchNeuron's `_to_copy`
// (python_ops/to_copy.py, ToCopyNeuronImpl, registered for PrivateUse1, which takes moves to the device as well as
// copies of device tensors) validates the format first whenever the device is either end, as its `contiguous` does
// (cast_policy.py validate_neuron_memory_format), and its build falls back to the CPU only for unimplemented ops
// (_build_config.py's DEV default, which torch_neuronx/__init__.py sets), so the failure reaches the caller: its own
// tests/operations/test_to_copy_basic.py expects `cpu_tensor.to("neuron:0", memory_format=torch.channels_last)` to
// raise, and its CI lists DDP's test_channels_last_contig as failing with "aten::_to_copy - RuntimeError: CPU
// fallback disabled" (tests/pytorch_tests/specs/ddp_spec.json). An empty tensor is answered before the validation
// (OperationImplementation.execute's empty-tensor path), and a tensor already in the format never reaches
// `_to_copy` (Tensor.to returns it). A cast between device tensors with a complex end is refused too
// (complex_dtypes rule, `casts_complex_on_device`). Otherwise PyTorch's own kernel, as before.
at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format) {
  if (memory_format && (*memory_format == at::MemoryFormat::ChannelsLast ||
                        *memory_format == at::MemoryFormat::ChannelsLast3d) &&
      rule_on(kRuleMemoryFormat) && self.numel() > 0 && !self.unsafeGetTensorImpl()->is_python_dispatch()) {
    std::ostringstream details;
    details << "ToCopyNeuronImpl: aten::_to_copy: Neuron tensors only support contiguous or preserve memory format "
            << "(got " << *memory_format << " for a tensor on " << self.device()
            << "; TorchNeuron's python_ops/to_copy.py). Next step: keep the default format for tensors and "
               "modules on the device (TorchNeuron moves and copies them row-major), or make a channels-last copy of "
               "a device tensor with x.clone(memory_format=torch.channels_last), which it allows; a profile with "
               "memory_format = false lets .to(memory_format=...) through (docs/device/fidelity.md)";
    TORCH_CHECK(false, fallback_disabled_message("aten::_to_copy", /*executed=*/true, "ToCopyNeuronImpl", details.str()));
  }
  const at::ScalarType to = dtype.value_or(self.scalar_type());
  if (device.value_or(self.device()).type() == kNeuron && casts_complex_on_device(self, to)) [[unlikely]] {
    throw_complex_device_cast(self.scalar_type(), to, "aten::_to_copy", "ToCopyNeuronImpl");
  }
  // TorchNeuron makes every copy on the device row-major (to_copy_row_major rule: python_ops/to_copy.py
  // allocates io_tensor.empty(shape), or moves through cast_policy.copy_cpu_to_neuron, contiguous).
  const bool row_major = rule_on(kRuleToCopyRowMajor) && device.value_or(self.device()).type() == kNeuron &&
                         (!memory_format || *memory_format == at::MemoryFormat::Preserve) && !is_tracing(self);
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking,
                              row_major ? std::optional(at::MemoryFormat::Contiguous) : memory_format);
}

}  // namespace torchferry
