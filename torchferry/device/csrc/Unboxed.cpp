// Unboxed `neuron` kernels for the ops a training step calls most.
//
// Every other op reaches the boxed fallback (Execution.cpp), which pays for generality:
// the dispatcher boxes the arguments into a stack, the fallback walks them by schema, the
// CPU kernel unboxes them again and boxes its result. For a small op that is about as
// much as the kernel itself (a 32x64 `mul` cost 1.4-2.1 us over the CPU boxed, 0.8-1.1 us
// unboxed), and a transformer's step is mostly small ops. So the ops below get kernels
// of their own, generated from ATen's operator structs (`at::_ops::mul_Tensor`): their
// arguments go straight to the CPU kernel as host views, and a fresh result is relabelled
// as device memory (`adopt_in_place`).
//
// For the elementwise ops among them (TensorIterator kernels) and `mm` there is a cheaper way
// still, when no dtype needs converting: PyTorch's structured CPU kernel runs on the device
// tensors themselves (their bytes are host memory), with an output allocated as device memory,
// so no host view is made and no result adopted (`OnDevice` below). Its `impl` calls the CPU's
// kernel of the op's DispatchStub (or the CPU's BLAS): the same kernel, on the same bytes, as
// the CPU runs.
//
// The rules stay the boxed path's, and the boxed path itself takes every call that needs
// one of its rarer ones: a tensor on another device or a non-0-dim CPU tensor (the
// placement error), a 64-bit value under target numerics, a dtype the target refuses, an in-place op whose output
// shares memory with an input, and any op the target runs on the host. The call is
// accounted once, and its eager signature has the same words either way (`Signature`).
#include "neuron.h"

#include <ATen/MemoryOverlap.h>

#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/zero_ops.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/addcdiv_native.h>
#include <ATen/ops/addcmul_native.h>
#include <ATen/ops/cos_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/lerp_native.h>
#include <ATen/ops/mm_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/pow_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/silu_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/tanh_native.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torchferry {
namespace {

// The host views of a tensor list (`cat`), passed on as the list the kernel takes.
struct HostTensorList {
  c10::SmallVector<at::Tensor, 4> tensors;
  operator at::ITensorListRef() const { return at::ITensorListRef(c10::ArrayRef<at::Tensor>(tensors)); }
};

// How an argument of C++ type A reaches the CPU kernel: tensors as host views (owned by
// the call), everything else as it came.
template <class A, class D = std::decay_t<A>>
using HostArg = std::conditional_t<
    std::is_same_v<D, at::Tensor> || std::is_same_v<D, std::optional<at::Tensor>>, D,
    std::conditional_t<std::is_same_v<D, at::ITensorListRef>, HostTensorList, A>>;

// One call on the fast path: which arguments it takes and their host views.
class UnboxedCall {
 public:
  explicit UnboxedCall(const OpInfo& info) : info_(info) {}

  c10::DeviceIndex device() const { return device_; }

  // Device tensors of one device (strided; not 64-bit under target numerics) and 0-dim
  // CPU inputs (wrapped Python numbers), as the boxed path allows them; anything else
  // is the boxed path's to judge.
  bool takes(const at::Tensor& t) {
    if (!t.defined()) return true;
    if (t.device().type() != kNeuron) return t.is_cpu() && t.dim() == 0;
    return takes_device_tensor(t);
  }
  // A written argument (the self of an in-place op) must be on the device.
  // One whose elements share memory (an expanded tensor) takes the boxed path, which writes
  // through where the target does (the overlapping_writes rule) or raises the CPU's error;
  // so does a strided one the target's torch-mlir kernel cannot execute into
  // (compiled_strided_writes_fail rule: the boxed path raises the target's error).
  bool takes(at::Tensor& t) {
    return t.defined() && t.device().type() == kNeuron && takes_device_tensor(t) &&
           !(info_.strided_writes_fail && !t.is_contiguous()) && at::has_internal_overlap(t) != at::MemOverlap::Yes;
  }
  bool takes(const std::optional<at::Tensor>& t) { return !t.has_value() || takes(*t); }
  bool takes(const at::ITensorListRef& list) {
    for (const at::Tensor& t : list) {
      if (!takes(t)) return false;
    }
    return true;
  }
  // A `dtype=` the target refuses: the boxed path raises the target's error.
  bool takes(const std::optional<at::ScalarType>& dtype) { return !dtype || !info_.refuses(*dtype); }
  // An int beyond int32 where the int_arguments_as_int32 rule may look: the boxed path judges it.
  bool takes(const c10::Scalar& number) {
    return info_.int32_args == 0 || !number.isIntegral(/*includeBool=*/false) || number.isSymbolic() ||
           fits_int32(number.toLong());
  }
  template <class T>
  bool takes(const T& /*not a tensor*/) {
    return true;
  }

  // Whether the first device tensor taken (an in-place op's self) shares its storage with
  // another: the boxed path gives the two one host view, as the kernel expects.
  bool self_shares_storage() const {
    return std::find(storages_.begin() + 1, storages_.end(), storages_.front()) != storages_.end();
  }

  bool runs_known_issue_dtype() const { return known_issue_dtype_; }

  at::Tensor host(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kNeuron) return t;
    at::Tensor view = take_host_view(t);
    views_.emplace_back(view.storage().unsafeGetStorageImpl(), &t);
    return view;
  }
  at::Tensor host(at::Tensor& t) { return host(std::as_const(t)); }  // not the template below
  std::optional<at::Tensor> host(const std::optional<at::Tensor>& t) {
    if (!t.has_value()) return t;
    return host(*t);
  }
  HostTensorList host(const at::ITensorListRef& list) {
    HostTensorList hosts;
    for (const at::Tensor& t : list) hosts.tensors.push_back(host(t));
    return hosts;
  }
  template <class T>
  T&& host(T&& v) {
    return std::forward<T>(v);
  }

  // After the kernel: the host views go back to the thread's pool.
  void recycle(at::Tensor& view) { recycle_host_view(view); }
  void recycle(std::optional<at::Tensor>& view) {
    if (view.has_value()) recycle_host_view(*view);
  }
  void recycle(HostTensorList& list) {
    for (at::Tensor& view : list.tensors) recycle_host_view(view);
  }
  template <class T>
  void recycle(T& /*not a tensor*/) {}

  // A functional op's result as a device tensor: a view of an input stays a view of that
  // input's device storage; a fresh result becomes device memory without a copy.
  at::Tensor to_device(const at::Tensor& result) {
    if (!result.defined()) return result;
    for (const auto& [host, device] : views_) {
      if (host == result.storage().unsafeGetStorageImpl()) return device_view(device->storage(), result);
    }
    check_strided_result(info_, result);
    // The target's kernel writes a fresh row-major result (compiled_results_row_major rule).
    if (info_.row_major_results && !result.is_contiguous()) {
      warn_row_major(info_, result.strides());
      return to_device(result.contiguous());
    }
    if (info_.target_numerics) round_to_target(result);
    return adopt_host_result(result, device_);
  }

 private:
  // Per device tensor argument of every call: the common case is one test of its dtype and
  // falls through (this code is cold in the instruction cache and the branch predictor at
  // each op; a taken branch it has not learned is a misprediction).
  bool takes_device_tensor(const at::Tensor& t) {
    const c10::TensorImpl& impl = *t.unsafeGetTensorImpl();
    if (impl.layout() != c10::kStrided) [[unlikely]] return false;
    const at::ScalarType type = t.scalar_type();
    if ((info_.unboxed_looks_at >> static_cast<int>(type)) & 1) [[unlikely]] {
      if (!takes_dtype(type)) return false;
    }
    // The boxed path gives the target's zeros, or its error.
    if ((info_.empty_zeros || info_.empty_raises) && impl.numel() == 0) [[unlikely]] return false;
    const c10::DeviceIndex index = impl.device().index();
    if (device_ < 0) device_ = index;
    storages_.push_back(impl.storage().unsafeGetStorageImpl());
    return index == device_;
  }

  [[gnu::noinline]] bool takes_dtype(at::ScalarType type) {
    if (info_.target_numerics && is_64bit(type)) return false;
    if (info_.refuses(type)) return false;  // the boxed path raises the target's error
    if (info_.checks(type)) known_issue_dtype_ = true;
    return true;
  }

  const OpInfo& info_;
  bool known_issue_dtype_ = false;  // a device tensor has a dtype of the op's known issue
  c10::DeviceIndex device_ = -1;
  c10::SmallVector<c10::StorageImpl*, 4> storages_;                  // of the device tensors taken
  // Host alias, device tensor: the caller holds the arguments for the whole call.
  c10::SmallVector<std::pair<c10::StorageImpl*, const at::Tensor*>, 4> views_;
};

template <class First, class... Rest>
First& first_of(First& first, Rest&... /*rest*/) {
  return first;
}

// ---- The structured path: the CPU's TensorIterator kernel on the device tensors ----------

// The CPU's structured kernel class of an op that has one here (`void`: none). Listed are
// TensorIterator kernels whose `impl` does nothing but call the op's DispatchStub, and `mm`,
// whose `impl` calls the CPU's BLAS on the operands' bytes. An `impl` that branches on the
// device type, or calls other ops, would compute or count differently on a device tensor than
// on a host view: `pow` (which fills or copies for an exponent of 0 or 1) and `mm` (which
// clones an operand of no BLAS layout and zeroes an empty product) take this path only for
// the calls that do neither (`TakesCall`).
// `cpu_scalars`: the kernel's TensorIterator takes 0-dim CPU inputs beside device tensors, as
// the binary ops' do (elsewhere such a call keeps the host views).
template <class Op>
struct CpuStructured {
  using type = void;
  static constexpr bool cpu_scalars = false;
};
#define TORCHFERRY_STRUCTURED(op, kernel, scalars) \
  template <>                                      \
  struct CpuStructured<at::_ops::op> {             \
    using type = at::native::kernel;               \
    static constexpr bool cpu_scalars = scalars;   \
  };
TORCHFERRY_STRUCTURED(add_Tensor, structured_ufunc_add_CPU, true)
TORCHFERRY_STRUCTURED(add__Tensor, structured_ufunc_add_CPU, true)
TORCHFERRY_STRUCTURED(sub_Tensor, structured_sub_out, true)
TORCHFERRY_STRUCTURED(sub__Tensor, structured_sub_out, true)
TORCHFERRY_STRUCTURED(mul_Tensor, structured_mul_out, true)
TORCHFERRY_STRUCTURED(mul__Tensor, structured_mul_out, true)
TORCHFERRY_STRUCTURED(div_Tensor, structured_div_out, true)
TORCHFERRY_STRUCTURED(div__Tensor, structured_div_out, true)
TORCHFERRY_STRUCTURED(neg, structured_neg_out, false)
TORCHFERRY_STRUCTURED(rsqrt, structured_rsqrt_out, false)
TORCHFERRY_STRUCTURED(sqrt, structured_sqrt_out, false)
TORCHFERRY_STRUCTURED(silu, structured_silu_out, false)
TORCHFERRY_STRUCTURED(exp, structured_exp_out, false)
TORCHFERRY_STRUCTURED(tanh, structured_tanh_out, false)
TORCHFERRY_STRUCTURED(sigmoid, structured_sigmoid_out, false)
TORCHFERRY_STRUCTURED(sin, structured_sin_out, false)
TORCHFERRY_STRUCTURED(cos, structured_cos_out, false)
TORCHFERRY_STRUCTURED(lerp__Scalar, structured_lerp_Scalar, false)
TORCHFERRY_STRUCTURED(addcmul_, structured_addcmul_out, false)
TORCHFERRY_STRUCTURED(addcdiv_, structured_addcdiv_out, false)
TORCHFERRY_STRUCTURED(pow_Tensor_Scalar, structured_pow_Tensor_Scalar_out, false)
TORCHFERRY_STRUCTURED(mm, structured_mm_out_cpu, false)
#undef TORCHFERRY_STRUCTURED

// Which calls of a listed op take the structured path: those whose `impl` calls nothing but
// the CPU kernel (see above).
template <class Op>
struct TakesCall {
  template <class... A>
  static bool check(const A&... /*args*/) {
    return true;
  }
};
template <>
struct TakesCall<at::_ops::pow_Tensor_Scalar> {
  static bool check(const at::Tensor& /*self*/, const c10::Scalar& exponent) {
    return !exponent.isComplex() && !exponent.equal(0.0) && !exponent.equal(1.0) && !exponent.equal(false) &&
           !exponent.equal(true);
  }
};
template <>
struct TakesCall<at::_ops::mm> {
  // A matrix BLAS reads as it is: rows or columns contiguous, the other stride past them.
  static bool blas_layout(const at::Tensor& m) {
    return (m.stride(1) == 1 && m.stride(0) >= std::max<int64_t>(1, m.size(1))) ||
           (m.stride(0) == 1 && m.stride(1) >= std::max<int64_t>(1, m.size(0)));
  }
  static bool check(const at::Tensor& self, const at::Tensor& mat2) {
    return self.dim() == 2 && mat2.dim() == 2 && self.size(0) > 0 && self.size(1) > 0 && mat2.size(1) > 0 &&
           blas_layout(self) && blas_layout(mat2);
  }
};

// A structured CPU kernel whose output is device memory: fresh (a functional op, on device
// `index`) or the device tensor it writes in place. TensorIterator asks for the output's
// layout here, as it asks the CPU's and CUDA's generated kernels.
template <class Kernel>
class OnDevice final : public Kernel {
 public:
  // `row_major`: the op whose result the target allocates row-major (compiled_results_row_major
  // rule), or null.
  OnDevice(c10::DeviceIndex index, const OpInfo* row_major) : index_(index), row_major_(row_major) {}
  explicit OnDevice(const at::Tensor& self) : self_(&self) {}

  void set_output_raw_strided(int64_t output_idx, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::TensorOptions options) override {
    if constexpr (kIterator) {
      // TensorIterator's general set-up asks for its inputs' layout (strides given) after
      // ordering its dimensions by them (`perm_`: iteration dimension -> tensor dimension).
      // Under the rule the output is row-major instead, and the iterator writes it so: its
      // byte strides for the output, computed for the layout it asked for, become the
      // row-major tensor's. The fast set-ups (`perm_` empty: one dimension in memory order,
      // or channels-last by memory format) keep their layout and are copied after
      // (`with_target_layout`), as on the host path.
      if (self_ == nullptr && row_major_ != nullptr && !strides.empty() && this->perm_.size() == sizes.size()) {
        out_ = empty_on(sizes, {}, options.dtype().toScalarType(), std::nullopt, index_);
        if (!out_.strides().equals(strides)) warn_row_major(*row_major_, strides);
        Kernel::set_output_raw_strided(output_idx, sizes, {}, options);
        auto& op = this->operands_[output_idx];
        const c10::IntArrayRef row_major = out_.strides();
        const int64_t element_size = static_cast<int64_t>(options.dtype().itemsize());
        for (size_t dim = 0; dim < this->perm_.size(); ++dim) {
          op.stride_bytes[dim] = row_major[this->perm_[dim]] * element_size;
        }
        return;
      }
    }
    if (self_ == nullptr) {
      out_ = empty_on(sizes, strides, options.dtype().toScalarType(), options.memory_format_opt(), index_);
    }
    if constexpr (kIterator) Kernel::set_output_raw_strided(output_idx, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t /*output_idx*/) override { return self_ != nullptr ? *self_ : out_; }
  at::Tensor take() { return std::move(out_); }

  // After `meta`: `impl` picks the kernel of the op's DispatchStub by the output's device
  // type (`device_type()`); relabelled as the CPU, it picks the CPU's kernel, which then
  // loops over the device tensors' bytes as it would over a CPU tensor's.
  void use_cpu_kernel() {
    if constexpr (kIterator) this->operands_[0].device = c10::Device(c10::kCPU);
  }

 private:
  static constexpr bool kIterator = std::is_base_of_v<at::TensorIteratorBase, Kernel>;

  c10::DeviceIndex index_ = -1;
  const OpInfo* row_major_ = nullptr;
  const at::Tensor* self_ = nullptr;
  at::Tensor out_;
};

// Whether a call's tensors let the CPU's TensorIterator kernel run on them as they are: every
// device tensor float32 (no type promotion: the CPU's TensorIterator converts mismatched
// inputs into temporaries on the CPU only, and its kernels require one dtype), with no
// conj/neg/zero-tensor bit. A 0-dim CPU input (where the op takes one) is a float32 tensor or
// a Python number: a number never changes a float32 result's dtype, and is converted to
// float32 as the CPU's TensorIterator converts it (`as_float32`).
// What the CPU's TensorIterator gives a float32 op for a number: `to(float32)` of its wrapped
// 0-dim tensor, a static_cast of the value.
inline float float32_value(const c10::Scalar& number) {
  return number.isFloatingPoint() ? static_cast<float>(number.toDouble())
         : number.isBoolean()     ? static_cast<float>(number.toBool())
                                  : static_cast<float>(number.toLong());
}

template <bool kCpuScalars>
struct StructuredArgs {
  static bool takes(const at::Tensor& t) {
    if (!t.defined()) return true;
    if (t.is_cpu()) {
      return kCpuScalars && (t.scalar_type() == at::kFloat ||
                             (t.unsafeGetTensorImpl()->is_wrapped_number() && real_scalar(t.scalar_type())));
    }
    return t.scalar_type() == at::kFloat && !t.is_conj() && !t.is_neg() && !t._is_zerotensor();
  }
  static bool takes(const std::optional<at::Tensor>& t) { return !t.has_value() || takes(*t); }
  static bool takes(const at::ITensorListRef& /*list*/) { return false; }
  template <class T>
  static bool takes(const T& /*not a tensor*/) {
    return true;
  }

  static c10::MaybeOwned<at::Tensor> pass(const at::Tensor& t) {
    if (!t.defined() || !t.is_cpu() || t.scalar_type() == at::kFloat) return c10::MaybeOwned<at::Tensor>::borrowed(t);
    return c10::MaybeOwned<at::Tensor>::owned(as_float32(t));
  }
  template <class T>
  static const T& pass(const T& v) {
    return v;
  }

 private:
  static bool real_scalar(at::ScalarType type) {
    return type == at::kFloat || type == at::kDouble || type == at::kLong || type == at::kInt || type == at::kBool;
  }
  // A 0-dim CPU input (a Python number) as a float32 op's TensorIterator gets it
  // (`float32_value`). Out of line: `pass` runs for every argument.
  [[gnu::noinline]] static at::Tensor as_float32(const at::Tensor& t) {
    at::Tensor out = at::detail::empty_cpu({}, at::kFloat, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
    c10::Scalar number;
    switch (t.scalar_type()) {
      case at::kDouble: number = *t.const_data_ptr<double>(); break;
      case at::kLong: number = *t.const_data_ptr<int64_t>(); break;
      case at::kInt: number = static_cast<int64_t>(*t.const_data_ptr<int32_t>()); break;
      case at::kBool: number = *t.const_data_ptr<bool>(); break;
      default: TORCH_INTERNAL_ASSERT(false, "not a real scalar type: ", t.scalar_type());
    }
    *out.mutable_data_ptr<float>() = float32_value(number);
    out.unsafeGetTensorImpl()->set_wrapped_number(t.unsafeGetTensorImpl()->is_wrapped_number());
    return out;
  }
};

inline const at::Tensor& unwrap(const c10::MaybeOwned<at::Tensor>& t) { return *t; }
template <class T>
const T& unwrap(const T& v) {
  return v;
}

// The fresh result of a functional op on the structured path, with the target's layout: the
// target's kernel writes it row-major (compiled_results_row_major rule). Where the iterator
// did not write it so (`OnDevice`), it is copied as the host path copies it (on the host: not
// an op).
at::Tensor with_target_layout(at::Tensor result, const OpInfo& info, c10::DeviceIndex index) {
  check_strided_result(info, result);
  if (!info.row_major_results || result.is_contiguous()) return result;
  warn_row_major(info, result.strides());
  at::Tensor row_major = empty_on(result.sizes(), {}, result.scalar_type(), std::nullopt, index);
  host_view_of(row_major).copy_(host_view_of(result));
  return row_major;
}

// In place: the kernel writes `self`, its first input.
template <class Kernel, class Args, class... A>
void write_structured(const at::Tensor& self, const A&... rest) {
  std::tuple<decltype(Args::pass(rest))...> passed{Args::pass(rest)...};
  OnDevice<Kernel> op(self);
  std::apply([&](const auto&... a) { op.meta(self, unwrap(a)...); }, passed);
  op.use_cpu_kernel();
  std::apply([&](const auto&... a) { op.impl(self, unwrap(a)..., self); }, passed);
}

// A functional op: a fresh result on device `index`.
template <class Kernel, class Args, class... A>
at::Tensor compute_structured(const OpInfo& info, c10::DeviceIndex index, const A&... args) {
  std::tuple<decltype(Args::pass(args))...> passed{Args::pass(args)...};
  OnDevice<Kernel> op(index, info.row_major_results ? &info : nullptr);
  std::apply([&](const auto&... a) { op.meta(unwrap(a)...); }, passed);
  op.use_cpu_kernel();
  std::apply([&](const auto&... a) { op.impl(unwrap(a)..., op.maybe_get_output(0)); }, passed);
  return with_target_layout(op.take(), info, index);
}

// A fast-path call of an op the target compiles: its eager signature, in the boxed path's words.
template <class... A>
void record_call_signature(const OpInfo& info, const A&... args) {
  if (!info.compiles) return;
  Signature signature;
  (signature.add(args), ...);
  record_signature(signature.value() ^ info.name_hash);
}

// The boxed path for a call the fast path does not take (already accounted).
template <class R, class... A>
R run_boxed(const c10::OperatorHandle& op, const OpInfo& info, A&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(A));
  (stack.emplace_back(args), ...);
  run_on_host_kernels(op, info, &stack);
  if constexpr (std::is_void_v<R>) {
    return;  // a foreach op in place: the boxed path wrote the device tensors themselves
  } else if constexpr (std::is_same_v<R, at::Tensor&>) {
    return first_of(args...);  // in place: the boxed path wrote the device tensor itself
  } else if constexpr (std::is_same_v<R, std::vector<at::Tensor>>) {
    return std::move(stack.back()).toTensorVector();
  } else {
    return std::move(stack.back()).toTensor();
  }
}

template <class Op, class Schema = typename Op::schema>
struct Unboxed;

// Op: an ATen operator struct; R is at::Tensor (a functional op) or at::Tensor& (an
// in-place op, whose first argument is the self it writes and returns).
template <class Op, class R, class... A>
struct Unboxed<Op, R(A...)> {
  static constexpr bool kInPlace = std::is_same_v<R, at::Tensor&>;
  static_assert(kInPlace || std::is_same_v<R, at::Tensor>, "one tensor result (or self) only");

  static R call(A... args) {
    static const KnownOp op = known_op(Op::name, Op::overload_name);
    settle_device_threading();
    const OpInfo& info = account(op);
    UnboxedCall call(info);
    const bool fast = !info.on_host() && (call.takes(args) && ...) && call.device() >= 0 &&
                      !(kInPlace && call.self_shares_storage());
    if (!fast) return run_boxed<R>(op.handle, info, args...);
    if (call.runs_known_issue_dtype()) note_known_issue(info);
    record_call_signature(info, args...);
    ProfiledOp profiled(op.handle, /*on_host=*/false, call.device());
    using Structured = CpuStructured<Op>;
    if constexpr (!std::is_void_v<typename Structured::type>) {
      using Args = StructuredArgs<Structured::cpu_scalars>;
      if ((Args::takes(args) && ...) && TakesCall<Op>::check(args...)) {
        if constexpr (kInPlace) {
          write_structured<typename Structured::type, Args>(args...);
          return first_of(args...);
        } else {
          return compute_structured<typename Structured::type, Args>(info, call.device(), args...);
        }
      }
    }
    std::tuple<HostArg<A>...> hosts{call.host(args)...};
    const c10::DispatchKeySet cpu(c10::DispatchKey::CPU);
    auto recycle = [&] { std::apply([&](auto&... host) { (call.recycle(host), ...); }, hosts); };
    KernelMemoryScope kernel_memory(call.device());
    if constexpr (kInPlace) {
      std::apply([&](auto&... host) { Op::redispatch(cpu, host...); }, hosts);
      recycle();
      return first_of(args...);  // its host view wrote the device bytes
    } else {
      at::Tensor result = call.to_device(std::apply([&](auto&... host) { return Op::redispatch(cpu, host...); }, hosts));
      recycle();
      return result;
    }
  }
};

// ---- Foreach ops: the CPU's loop, each element on the structured path -------------------
//
// PyTorch's optimizers take their foreach implementation on an accelerator
// (torch/optim/optimizer.py, _default_to_fused_or_foreach). TorchNeuron registers some
// `_foreach_*` ops natively (`add`, `sub`, `mul`, `div`, `norm`: the profile's op table), so
// such a call is one op there and here; the others (`lerp_`, `addcmul_`, `sqrt`, ...) run
// PyTorch's composite, one per-tensor op per element, there and here. A native call on the
// boxed path costs a host view per tensor, and then the CPU's foreach kernel dispatches the
// per-tensor op once per element (ForeachOpsKernels.cpp, the `slow` kernels: the CPU has no
// other). Here the loop is the same, but each element runs that per-tensor op's structured
// CPU kernel on the device tensors (`OnDevice`): the same kernel, on the same bytes, with the
// same number, as the CPU runs. Calls whose tensors are all float32 on one device take this
// path; any other call takes the boxed one, which raises the CPU's errors (an empty list,
// lists of different lengths) and the target's. The call is accounted once, and its eager
// signature has the same words, either way.

// Whether a foreach call's arguments let its loop run on the structured path.
class ForeachCall {
 public:
  explicit ForeachCall(bool in_place) : in_place_(in_place) {}

  c10::DeviceIndex device() const { return device_; }

  // The lists come first in every foreach schema: the first sets the length, and an in-place
  // op writes it (an element whose elements share memory takes the boxed path, which raises
  // the CPU's error, as PyTorch's kernel would).
  bool takes(at::TensorList list) {
    const bool written = in_place_ && length_ < 0;
    const auto length = static_cast<int64_t>(list.size());
    if (length == 0 || (length_ >= 0 && length != length_)) return false;
    length_ = length;
    return std::all_of(list.begin(), list.end(), [&](const at::Tensor& t) { return takes_element(t, written); });
  }
  bool takes(c10::ArrayRef<c10::Scalar> numbers) {
    return static_cast<int64_t>(numbers.size()) == length_ && std::all_of(numbers.begin(), numbers.end(), real_number);
  }
  bool takes(const c10::Scalar& number) { return real_number(number); }
  // The 0-dim factor of `_foreach_mul_.Tensor` (clip_grad_norm_'s): a device tensor here.
  bool takes(const at::Tensor& factor) { return factor.dim() == 0 && takes_element(factor, false); }

 private:
  static bool real_number(const c10::Scalar& number) { return !number.isComplex() && !number.isSymbolic(); }

  bool takes_element(const at::Tensor& t, bool written) {
    if (!t.defined() || t.device().type() != kNeuron || t.layout() != c10::kStrided ||
        t.scalar_type() != at::kFloat || t.is_conj() || t.is_neg() || t._is_zerotensor()) {
      return false;
    }
    if (written && at::has_internal_overlap(t) == at::MemOverlap::Yes) return false;
    if (device_ < 0) device_ = t.device().index();
    return t.device().index() == device_;
  }

  bool in_place_;
  int64_t length_ = -1;  // of the first list
  c10::DeviceIndex device_ = -1;
};

// A number as the CPU's per-tensor op hands it to a float32 kernel: `mul_(Scalar)` wraps it
// (`wrapped_scalar_tensor`: a 0-dim double, long or bool tensor) and TensorIterator converts
// that to float32 (`float32_value`). One tensor per call,
// rewritten for each element: the kernel reads it and keeps nothing.
class Float32Number {
 public:
  Float32Number()
      : tensor_(at::detail::empty_cpu({}, at::kFloat, std::nullopt, std::nullopt, std::nullopt, std::nullopt)) {
    tensor_.unsafeGetTensorImpl()->set_wrapped_number(true);
  }
  const at::Tensor& operator()(const c10::Scalar& number) {
    *tensor_.mutable_data_ptr<float>() = float32_value(number);
    return tensor_;
  }

 private:
  at::Tensor tensor_;
};

using BinaryArgs = StructuredArgs<true>;

// Each op's loop: what the CPU's `slow` kernel calls for element i, as its structured kernel.
template <class Op>
struct ForeachLoop;

template <>
struct ForeachLoop<at::_ops::_foreach_add__Scalar> {  // t.add_(number): add_(wrapped number, alpha=1)
  static void run(const OpInfo& /*info*/, c10::DeviceIndex /*index*/, at::TensorList self, const c10::Scalar& number) {
    Float32Number wrapped;
    const at::Tensor& other = wrapped(number);
    const c10::Scalar alpha(static_cast<int64_t>(1));
    for (const at::Tensor& t : self) write_structured<at::native::structured_ufunc_add_CPU, BinaryArgs>(t, other, alpha);
  }
};
template <>
struct ForeachLoop<at::_ops::_foreach_add__List> {  // self[i].add_(other[i], alpha)
  static void run(const OpInfo& /*info*/, c10::DeviceIndex /*index*/, at::TensorList self, at::TensorList other,
                  const c10::Scalar& alpha) {
    for (size_t i = 0; i < self.size(); ++i) {
      write_structured<at::native::structured_ufunc_add_CPU, BinaryArgs>(self[i], other[i], alpha);
    }
  }
};
template <>
struct ForeachLoop<at::_ops::_foreach_mul__Scalar> {  // t.mul_(number)
  static void run(const OpInfo& /*info*/, c10::DeviceIndex /*index*/, at::TensorList self, const c10::Scalar& number) {
    Float32Number wrapped;
    const at::Tensor& factor = wrapped(number);
    for (const at::Tensor& t : self) write_structured<at::native::structured_mul_out, BinaryArgs>(t, factor);
  }
};
template <>
struct ForeachLoop<at::_ops::_foreach_mul__Tensor> {  // t.mul_(factor), a 0-dim tensor
  static void run(const OpInfo& /*info*/, c10::DeviceIndex /*index*/, at::TensorList self, const at::Tensor& factor) {
    for (const at::Tensor& t : self) write_structured<at::native::structured_mul_out, BinaryArgs>(t, factor);
  }
};
template <>
struct ForeachLoop<at::_ops::_foreach_div__ScalarList> {  // self[i].div_(numbers[i])
  static void run(const OpInfo& /*info*/, c10::DeviceIndex /*index*/, at::TensorList self,
                  c10::ArrayRef<c10::Scalar> numbers) {
    Float32Number wrapped;
    for (size_t i = 0; i < self.size(); ++i) {
      write_structured<at::native::structured_div_out, BinaryArgs>(self[i], wrapped(numbers[i]));
    }
  }
};
template <>
struct ForeachLoop<at::_ops::_foreach_add_List> {  // self[i].add(other[i], alpha)
  static std::vector<at::Tensor> run(const OpInfo& info, c10::DeviceIndex index, at::TensorList self,
                                     at::TensorList other, const c10::Scalar& alpha) {
    std::vector<at::Tensor> results;
    results.reserve(self.size());
    for (size_t i = 0; i < self.size(); ++i) {
      results.push_back(compute_structured<at::native::structured_ufunc_add_CPU, BinaryArgs>(info, index, self[i], other[i], alpha));
    }
    return results;
  }
};

template <class Op, class Schema = typename Op::schema>
struct UnboxedForeach;

// R is void (an in-place foreach op) or std::vector<at::Tensor> (a functional one).
template <class Op, class R, class... A>
struct UnboxedForeach<Op, R(A...)> {
  static R call(A... args) {
    static const KnownOp op = known_op(Op::name, Op::overload_name);
    settle_device_threading();
    const OpInfo& info = account(op);
    ForeachCall call(/*in_place=*/std::is_void_v<R>);
    if (info.on_host() || info.refuses(at::kFloat) || !(call.takes(args) && ...)) {
      return run_boxed<R>(op.handle, info, args...);
    }
    if (info.checks(at::kFloat)) note_known_issue(info);
    record_call_signature(info, args...);
    ProfiledOp profiled(op.handle, /*on_host=*/false, call.device());
    return ForeachLoop<Op>::run(info, call.device(), args...);
  }
};

template <class Op>
std::string name_of() {  // "aten::mul.Tensor"
  std::string name = Op::name;
  if (*Op::overload_name != '\0') name += std::string(".") + Op::overload_name;
  return name;
}

}  // namespace

// The forward, backward and optimizer ops of transformer training steps (the tiny
// workload's and llama's: bench/eager_overhead.py), by call count. Each has a CPU kernel
// and no composite one that PrivateUse1 would otherwise run (tests/device/test_unboxed.py
// checks both), so registering it changes which kernel runs on the device, never which
// computation.
#define TORCHFERRY_UNBOXED_OPS(_)                                                              \
  _(mul_Tensor) _(add_Tensor) _(sub_Tensor) _(div_Tensor) _(mm) _(bmm) _(addmm) _(cat) _(neg) \
  _(rsqrt) _(sqrt) _(pow_Tensor_Scalar) _(silu) _(mean_dim) _(sum_dim_IntList) _(exp) _(tanh) \
  _(sigmoid) _(sin) _(cos) _(add__Tensor) _(sub__Tensor) _(mul__Tensor) _(div__Tensor)         \
  _(addcdiv_) _(addcmul_) _(lerp__Scalar) _(zero_) _(fill__Scalar)

void register_unboxed_kernels(torch::Library& library) {
#define TORCHFERRY_REGISTER(op) library.impl(name_of<at::_ops::op>().c_str(), TORCH_FN(Unboxed<at::_ops::op>::call));
  TORCHFERRY_UNBOXED_OPS(TORCHFERRY_REGISTER)
#undef TORCHFERRY_REGISTER
}

std::vector<std::string> unboxed_op_names() {
#define TORCHFERRY_NAME(op) name_of<at::_ops::op>(),
  return {TORCHFERRY_UNBOXED_OPS(TORCHFERRY_NAME)};
#undef TORCHFERRY_NAME
}

// The native foreach calls of PyTorch's AdamW, Adam and SGD and of clip_grad_norm_
// (torch/optim/{adamw,adam,sgd}.py, torch/nn/utils/clip_grad.py). They are
// CompositeExplicitAutograd ops with no CPU kernel: a kernel here stands for the target's
// native one, so it is registered only where the profile says the target has one
// (register_native_composites); elsewhere PrivateUse1 keeps PyTorch's composite.
#define TORCHFERRY_UNBOXED_FOREACH_OPS(_)                                                       \
  _(_foreach_add__Scalar) _(_foreach_add__List) _(_foreach_add_List) _(_foreach_mul__Scalar) \
  _(_foreach_mul__Tensor) _(_foreach_div__ScalarList)

bool register_unboxed_foreach(torch::Library& library, const std::string& name) {
#define TORCHFERRY_REGISTER(op)                                                   \
  if ("aten::" + name == name_of<at::_ops::op>()) {                               \
    library.impl(name.c_str(), TORCH_FN(UnboxedForeach<at::_ops::op>::call));     \
    return true;                                                                  \
  }
  TORCHFERRY_UNBOXED_FOREACH_OPS(TORCHFERRY_REGISTER)
#undef TORCHFERRY_REGISTER
  return false;
}

std::vector<std::string> unboxed_foreach_op_names() {
#define TORCHFERRY_NAME(op) name_of<at::_ops::op>(),
  return {TORCHFERRY_UNBOXED_FOREACH_OPS(TORCHFERRY_NAME)};
#undef TORCHFERRY_NAME
}

}  // namespace torchferry
