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
// The rules stay the boxed path's, and the boxed path itself takes every call that needs
// one of its rarer ones: a tensor on another device or a non-0-dim CPU tensor (the
// placement error), a 64-bit value under target numerics, a dtype the target refuses, an in-place op whose output
// shares memory with an input, and any op the target runs on the host. The call is
// accounted once, and its eager signature has the same words either way (`Signature`).
#include "neuron.h"

#include <ATen/MemoryOverlap.h>

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
  // through where the target does (the overlapping_writes rule) or raises the CPU's error.
  bool takes(at::Tensor& t) {
    return t.defined() && t.device().type() == kNeuron && takes_device_tensor(t) &&
           at::has_internal_overlap(t) != at::MemOverlap::Yes;
  }
  bool takes(const std::optional<at::Tensor>& t) { return !t.has_value() || takes(*t); }
  bool takes(const at::ITensorListRef& list) {
    for (const at::Tensor& t : list) {
      if (!takes(t)) return false;
    }
    return true;
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
    // The target's kernel writes a fresh row-major result (compiled_results_row_major rule).
    if (info_.row_major_results && !result.is_contiguous()) return to_device(result.contiguous());
    if (info_.target_numerics) round_to_target(result);
    return adopt_host_result(result, device_);
  }

 private:
  bool takes_device_tensor(const at::Tensor& t) {
    if (t.layout() != c10::kStrided) return false;
    if (info_.target_numerics && is_64bit(t)) return false;
    if (info_.empty_zeros && t.numel() == 0) return false;  // the boxed path gives the target's zeros
    if (info_.checks(t.scalar_type())) {
      if (info_.refuses(t.scalar_type())) return false;  // the boxed path raises the target's error
      known_issue_dtype_ = true;
    }
    if (device_ < 0) device_ = t.device().index();
    storages_.push_back(t.storage().unsafeGetStorageImpl());
    return t.device().index() == device_;
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

// The boxed path for a call the fast path does not take (already accounted).
template <class R, class... A>
R run_boxed(const c10::OperatorHandle& op, const OpInfo& info, A&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(A));
  (stack.emplace_back(args), ...);
  run_on_host_kernels(op, info, &stack);
  if constexpr (std::is_same_v<R, at::Tensor&>) {
    return first_of(args...);  // in place: the boxed path wrote the device tensor itself
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
    static const c10::OperatorHandle op = op_handle(Op::name, Op::overload_name);
    settle_device_threading();
    const OpInfo& info = account(op);
    UnboxedCall call(info);
    const bool fast = !info.on_host() && (call.takes(args) && ...) && call.device() >= 0 &&
                      !(kInPlace && call.self_shares_storage());
    if (!fast) return run_boxed<R>(op, info, args...);
    if (call.runs_known_issue_dtype()) note_known_issue(info);
    if (info.compiles) {
      Signature signature;
      (signature.add(args), ...);
      record_signature(signature.value() ^ info.name_hash);
    }
    ProfiledOp profiled(op, /*on_host=*/false, call.device());
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

}  // namespace torchferry
