// What the target (TorchNeuron on Trainium) does with each op, and the accounting
// that makes it visible: executed and host-fallback op counts, host syncs, and the
// eager compilations a cold NEFF cache would pay for.
//
// Each op is classified once, on its first call, from the tables the device profile
// hands over (`set_target`): native on the device, metadata only, a host fallback on
// the explicit copy path, or a predicted host fallback (not implemented by the
// target) that runs on the zero-copy path and is only counted. Views are metadata
// whatever the tables say: they never launch a kernel on the target.
#include "neuron.h"

#include <algorithm>
#include <iterator>
#include <atomic>
#include <deque>
#include <mutex>
#include <sstream>
#include <unordered_set>

namespace torchferry {
namespace {

struct TargetConfig {
  std::unordered_map<std::string, int> codes;           // op -> classification code
  std::unordered_map<std::string, std::string> reasons;  // op -> why it runs on the host
  int default_code = 0;
  std::string default_reason;
  FallbackMode mode = FallbackMode::Warn;
  std::string profile;
  bool target_numerics = false;
  std::unordered_map<std::string, int64_t> int32_args;  // op -> OpInfo::int32_args
  std::unordered_set<std::string> warned;
};
std::atomic<int> g_rules{0};
std::atomic<bool> g_target_numerics{false};  // g_config.target_numerics, read without the lock

constexpr uint64_t bit(at::ScalarType type) { return uint64_t{1} << static_cast<int>(type); }
static_assert(static_cast<int>(at::ScalarType::NumOptions) <= 64, "refused_dtypes is a 64-bit mask");
// TorchNeuron's dtype tables (torch_neuronx/type_converter_base.py, TORCH_TO_JAX_BASE) have
// float32/16, bfloat16, int8/16/32/64, uint8, bool and float8_e5m2: no complex type and no
// unsigned type wider than 8 bits.
constexpr uint64_t kComplexTypes = bit(at::kComplexHalf) | bit(at::kComplexFloat) | bit(at::kComplexDouble);
constexpr uint64_t kUnsignedTypes = bit(at::kUInt16) | bit(at::kUInt32) | bit(at::kUInt64);
constexpr uint64_t kSixtyFourBitTypes = bit(at::kLong) | bit(at::kDouble);  // is_64bit's

}  // namespace

// One op's classification and counts. The counter and the classification's per-call fields
// come first, in the entry's first cache line: an op's call reads them and nothing else of it.
struct alignas(64) OpEntry {
  std::atomic<int64_t> executed{0};
  OpInfo info;
  std::atomic<int64_t> fallback{0};
  std::string reason;
};

namespace {

std::mutex g_mutex;
std::unordered_map<const c10::FunctionSchema*, OpEntry> g_ops;
// The sums of the entries' counters since clear_op_tracking: a harness reads them every step,
// where a walk of g_ops (hundreds of entries, out of the cache by then) cost about 20 us a read.
std::atomic<int64_t> g_executed_total{0};
std::atomic<int64_t> g_fallback_total{0};
// The target vendor's known issues: op -> the warning its first call gives (one per message,
// so the overloads of one vendor op warn once). Read only when an op is first met.
std::unordered_map<std::string, std::string> g_known_issues;
std::unordered_set<std::string> g_known_issues_warned;
// Known issues scoped to dtypes ("bfloat16 gradient mismatch"), one slot per overload: they warn
// on the first call that runs in one of their dtypes, counted without the lock. Slots are made by
// set_known_issues only (at start-up) and never move (a deque).
struct ScopedIssue {
  std::string name;
  std::string warning;
  uint64_t dtypes = 0;
  std::atomic<int64_t> calls{0};
};
std::deque<ScopedIssue> g_scoped_issues;
std::unordered_map<std::string, int> g_scoped_issue_slot;
// Known issues met in compiled graphs, per op: each call of a graph counts the issues it holds.
std::unordered_map<std::string, int64_t> g_graph_issue_calls;
std::unordered_map<std::string, int64_t> g_syncs;
TargetConfig g_config;

struct Signatures {
  std::unordered_set<uint64_t> persisted;  // in the on-disk cache when the process started
  std::unordered_set<uint64_t> seen;       // compiled or loaded by this process
  std::vector<uint64_t> unsaved;           // new this process, not yet written to disk
  int64_t distinct = 0;  // signatures recorded as new, summed over every `forget_seen_signatures()`
  int64_t compilations = 0;
  int64_t cache_hits = 0;
  int64_t calls = 0;
};
std::mutex g_signature_mutex;
Signatures g_signatures;
std::atomic<int64_t> g_repeat_calls{0};  // calls of a signature their thread had recorded
// Bumped by `forget_seen_signatures()`: a thread's table of recent signatures is stale once it changes.
std::atomic<uint64_t> g_signature_generation{0};

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool is_view(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) return true;
  }
  return false;
}

Placement placement_of(const std::string& name, int rules) {
  static const std::unordered_set<std::string> copies = {
      "aten::_to_copy", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize",
      "aten::_has_compatible_shallow_copy_type"};
  // CUDA's advanced indexing takes CPU index tensors and moves them itself.
  static const std::unordered_set<std::string> host_indices = {
      "aten::index.Tensor", "aten::index.Tensor_out", "aten::index_put", "aten::index_put_",
      "aten::_index_put_impl_", "aten::_unsafe_index.Tensor", "aten::_unsafe_index_put"};
  // TorchNeuron's reads keep that (python_ops/torch_mlir/ops/index.py, IndexMLIRImpl.can_handle
  // looks at the indexed tensor only); its indexed write (torch_mlir/ops/indexing.py
  // _index_put_impl_) gets python_ops/base.py's OperationImplementation.can_handle, which
  // raises for a non-0-dim tensor off the device, inside a list too, before any fallback.
  static const std::unordered_set<std::string> device_indices = {
      "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"};
  if (copies.count(name)) return Placement::Any;
  if ((rules & kRuleHostIndexWrites) && device_indices.count(name)) return Placement::DeviceIndices;
  if (host_indices.count(name)) return Placement::HostIndices;
  return Placement::Strict;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

void classify(const c10::OperatorHandle& op, OpEntry& entry) {
  OpInfo& info = entry.info;
  info.name = full_name(op.operator_name());
  info.name_hash = fnv1a(info.name);
  const int rules = g_rules.load(std::memory_order_relaxed);
  info.placement = placement_of(info.name, rules);
  auto code_it = g_config.codes.find(info.name);
  const int code = code_it == g_config.codes.end() ? g_config.default_code : code_it->second;
  info.kind = static_cast<OpKind>(code & 3);
  info.compiles = (code & 4) != 0;
  info.syncs = (code & 8) != 0;
  if (is_view(op.schema())) {
    info.kind = OpKind::Metadata;
    info.compiles = false;
  }
  info.target_numerics = g_config.target_numerics && info.compiles;
  // Copies, views and host fallbacks move bytes; the ops the target compiles need its types.
  info.refused_dtypes = !info.compiles ? 0
                                       : ((rules & kRuleComplex) ? kComplexTypes : 0) |
                                             ((rules & kRuleUnsigned) ? kUnsignedTypes : 0);
  info.empty_zeros = (rules & kRuleEmptyInputs) && (code & kCodeEmptyZeros) && !info.on_host();
  info.empty_raises = (rules & kRuleEmptyInputs) && (code & kCodeEmptyRaises) && !info.on_host();
  info.cat_of_empties_1d = (rules & kRuleCatOfEmptyTensors1d) && info.name == "aten::cat" && !info.on_host();
  info.loses_unmarked_writes =
      (rules & kRuleFallbackUnmarkedWritesLost) && (code & kCodeUnmarkedWrites) && info.on_host();
  info.writes_through_overlap = (rules & kRuleOverlappingWrites) && info.compiles && !info.on_host();
  info.out_keeps_size = (rules & kRuleFallbackOutResize) && info.on_host();
  info.out_written_after = (rules & kRuleCompiledOutWrittenAfter) && info.compiles && !info.on_host();
  info.strided_writes_fail =
      (rules & kRuleCompiledStridedWritesFail) && (code & kCodeTorchMlir) && info.compiles && !info.on_host();
  info.strided_results_fail = info.strided_writes_fail && (code & kCodeViaOutKernel);
  info.row_major_results = ((rules & kRuleCompiledResultsRowMajor) && (code & kCodeRowMajor) && !info.on_host()) ||
                           ((rules & kRuleToCopyRowMajor) && info.on_host() && !(code & kCodeKeepsStrides));
  auto int32_it = g_config.int32_args.find(info.name);
  info.int32_args = (rules & kRuleIntArgumentsAsInt32) && int32_it != g_config.int32_args.end() && !info.on_host()
                        ? static_cast<uint64_t>(int32_it->second)
                        : 0;
  auto unscoped = g_known_issues.find(info.name);
  info.issue_unwarned.store(unscoped != g_known_issues.end() && !g_known_issues_warned.count(unscoped->second),
                            std::memory_order_relaxed);
  auto scoped = g_scoped_issue_slot.find(info.name);
  info.known_issue = scoped == g_scoped_issue_slot.end() ? -1 : scoped->second;
  info.checked_dtypes = info.refused_dtypes | (info.known_issue < 0 ? 0 : g_scoped_issues[info.known_issue].dtypes);
  info.unboxed_looks_at = info.checked_dtypes | (info.target_numerics ? kSixtyFourBitTypes : 0);
  auto reason_it = g_config.reasons.find(info.name);
  entry.reason = reason_it == g_config.reasons.end() ? g_config.default_reason : reason_it->second;
}

// This thread's side of the accounting, in one thread_local: in a shared library each
// thread_local read is a call to __tls_get_addr, and `account` and `record_signature` run
// per op (three such calls per op with one variable each). The fields every call reads
// share the first cache line.
struct ThreadAccounting {
  struct Slot {
    const c10::FunctionSchema* schema;
    OpEntry* entry;
  };
  // Inside a NativeCompositeScope (the op the target runs as one kernel is already counted) or
  // an uncounted span (a harness's own device work inside the user's process): nothing counts.
  int composite_depth = 0;
  // The generation of the signature tables that `recent_signatures` belongs to.
  uint64_t signature_generation = 0;
  // The op entries this thread has met (`entry_of`).
  Slot slots[512] = {};
  // The signatures this thread recorded lately (`record_signature`).
  uint64_t recent_signatures[1024] = {};
};
thread_local ThreadAccounting t_accounting;

// An op's entry, made and classified on its first call (under the lock).
[[gnu::noinline]] OpEntry& find_entry(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto [it, inserted] = g_ops.try_emplace(&op.schema());
  if (inserted) classify(op, it->second);
  return it->second;
}

// The vendor's known issue with an op in every dtype, warned on the op's first counted call: a call
// inside a native composite is part of an op the target runs as one kernel (linear's addmm), so
// the target never runs it as itself and has nothing to warn about (one warning per message).
[[gnu::noinline]] void warn_unscoped_issue(OpEntry& entry) {
  std::string warning;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!entry.info.issue_unwarned.exchange(false, std::memory_order_relaxed)) return;
    auto issue = g_known_issues.find(entry.info.name);
    if (issue != g_known_issues.end() && g_known_issues_warned.insert(issue->second).second) warning = issue->second;
  }
  if (!warning.empty()) TORCH_WARN(warning);
}

// The entry of an op that reaches the boxed fallback. Entries are never erased, so each
// thread keeps the ones it has met in a small direct-mapped table and finds them again
// without the lock: one probe per op in the steady state.
OpEntry& entry_of(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* schema = &op.schema();
  ThreadAccounting::Slot& slot = t_accounting.slots[(reinterpret_cast<uintptr_t>(schema) >> 4) & 511];
  if (slot.schema == schema) return *slot.entry;
  OpEntry& entry = find_entry(op);
  slot = {schema, &entry};
  return entry;
}

// A host fallback's call: counted, and warned once per op or refused, as the mode says.
[[gnu::noinline]] const OpInfo& account_fallback(OpEntry& entry) {
  const OpInfo* info = &entry.info;
  entry.fallback.fetch_add(1, std::memory_order_relaxed);
  g_fallback_total.fetch_add(1, std::memory_order_relaxed);
  std::string reason, profile;
  FallbackMode mode;
  bool first;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_config.mode == FallbackMode::Silent) return *info;
    mode = g_config.mode;
    first = mode == FallbackMode::Error || g_config.warned.insert(info->name).second;
    if (!first) return *info;
    reason = entry.reason;
    profile = g_config.profile;
  }
  TORCH_CHECK(mode != FallbackMode::Error, info->name, " would run on the host CPU, not the device, on '",
              profile, "': ", reason, ". TORCHFERRY_FALLBACK=error forbids host fallbacks; set "
              "TORCHFERRY_FALLBACK=warn to allow them, or avoid the op.");
  TORCH_WARN(info->name, " runs on the host CPU, not the device, on '", profile, "': ", reason,
             ". Counted in torch.neuron.get_fallback_ops() (one warning per op; "
             "TORCHFERRY_FALLBACK=silent hides them, =error makes them fail).");
  return *info;
}

const OpInfo& account_entry(OpEntry& entry) {
  const OpInfo& info = entry.info;
  if (t_accounting.composite_depth > 0) return info;  // part of a native op counted as a whole
  if (info.issue_unwarned.load(std::memory_order_relaxed)) [[unlikely]] warn_unscoped_issue(entry);
  if (info.on_host()) [[unlikely]] return account_fallback(entry);
  entry.executed.fetch_add(1, std::memory_order_relaxed);
  g_executed_total.fetch_add(1, std::memory_order_relaxed);
  if (info.syncs) [[unlikely]] count_sync(info.name);
  return info;
}

}  // namespace

KnownOp known_op(const char* name, const char* overload) {
  const c10::OperatorHandle handle = op_handle(name, overload);
  return {handle, &find_entry(handle)};
}

const OpInfo& account(const c10::OperatorHandle& op) { return account_entry(entry_of(op)); }
const OpInfo& account(const KnownOp& op) { return account_entry(*op.entry); }
void count_op(const KnownOp& op) { account_entry(*op.entry); }

void count_sync(const std::string& what) {
  if (t_accounting.composite_depth > 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_syncs[what];
}

namespace {

// A signature this thread has not seen lately: counted under the lock, as a new
// compilation, a persistent-cache hit or a repeat.
[[gnu::noinline]] void record_new_signature(uint64_t signature) {
  std::lock_guard<std::mutex> lock(g_signature_mutex);
  ++g_signatures.calls;
  if (!g_signatures.seen.insert(signature).second) return;
  ++g_signatures.distinct;
  if (g_signatures.persisted.count(signature)) {
    ++g_signatures.cache_hits;
  } else {
    ++g_signatures.compilations;
    g_signatures.unsaved.push_back(signature);
  }
}

}  // namespace

void record_signature(uint64_t signature) {
  ThreadAccounting& mine = t_accounting;
  if (mine.composite_depth > 0) return;
  // Most calls repeat a signature this thread recorded lately: a direct-mapped table of
  // them counts those without the lock (a signature it has lost is looked up again below).
  const uint64_t current = g_signature_generation.load(std::memory_order_relaxed);
  if (mine.signature_generation != current) [[unlikely]] {
    std::fill(std::begin(mine.recent_signatures), std::end(mine.recent_signatures), 0);
    mine.signature_generation = current;
  }
  uint64_t& slot = mine.recent_signatures[signature & 1023];
  if (slot == signature && signature != 0) {
    g_repeat_calls.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slot = signature;
  record_new_signature(signature);
}

void set_target(const std::unordered_map<std::string, int>& codes,
                const std::unordered_map<std::string, std::string>& reasons, int default_code,
                const std::string& default_reason, FallbackMode mode, const std::string& profile,
                bool target_numerics, int rules, const std::unordered_map<std::string, int64_t>& int32_args) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_rules.store(rules, std::memory_order_relaxed);
  g_config.int32_args = int32_args;
  g_config.codes = codes;
  g_config.reasons = reasons;
  g_config.default_code = default_code;
  g_config.default_reason = default_reason;
  g_config.mode = mode;
  g_config.profile = profile;
  g_config.target_numerics = target_numerics;
  g_target_numerics.store(target_numerics, std::memory_order_relaxed);
  g_config.warned.clear();
  // Ops already seen keep their counts; their classification follows the new tables.
  for (auto& [schema, entry] : g_ops) {
    const auto handle = c10::Dispatcher::singleton().findOp(schema->operator_name());
    if (handle) classify(*handle, entry);
  }
}

bool rule_on(Rule rule) { return (g_rules.load(std::memory_order_relaxed) & rule) != 0; }

bool target_numerics_on() { return g_target_numerics.load(std::memory_order_relaxed); }

namespace {
const char* python_name(at::ScalarType type) {
  switch (type) {
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kUInt16: return "torch.uint16";
    case at::kUInt32: return "torch.uint32";
    case at::kUInt64: return "torch.uint64";
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kInt: return "torch.int32";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    default: return c10::toString(type);
  }
}
}  // namespace

void throw_unsupported_dtype(const OpInfo& info, at::ScalarType type) {
  const bool complex = at::isComplexType(type);
  TORCH_CHECK_VALUE(false, "Unsupported PyTorch dtype: ", python_name(type), " (", info.name, " on neuron, as on ",
                    g_config.profile, ": TorchNeuron's own CI lists ",
                    complex ? "the complex variants of PyTorch's op tests failing and skips tests as 'Complex data "
                              "types are not supported on Neuron' (tests/pytorch_tests/failing_test_methods/*.json, "
                              "specs/aten_spec.json)"
                            : "the uint16/uint32/uint64 variants of PyTorch's op tests failing "
                              "(tests/pytorch_tests/failing_test_methods/*.json)",
                    ", and the dtype table of its JAX/XLA path has no such type, torch_neuronx/type_converter_base.py; "
                    "copies and views of such tensors work). Next step: ",
                    complex ? "compute on real tensors, e.g. torch.view_as_real(x) (or .to(torch.float32) for "
                              "the real part), or run this op on the CPU (x.cpu())"
                            : "convert first, e.g. x.to(torch.int32), or run this op on the CPU (x.cpu())",
                    "; a device profile with this rule off (docs/device/fidelity.md) skips the check.");
}

void throw_fallback_out_resize(const OpInfo& info, const at::Tensor& out, const at::Tensor& result) {
  TORCH_CHECK(false, "_copy_from_and_resize now only support copy with same size, or dst.numel() == 0! (",
              info.name, " on neuron, as on ", g_config.profile, ": an op TorchNeuron runs with PyTorch's CPU "
              "fallback copies each out= tensor back with its _copy_from_and_resize, csrc/aten/CopyKernel.cpp, "
              "which refuses a result of another size unless out= is empty; here out= has size ", out.sizes(),
              " and the result ", result.sizes(), ", which the CPU would resize out= to). Next step: pass an "
              "empty out= (torch.empty(0, device=...)) or one of the result's size, or call without out=; "
              "fallback_out_resize = false in a profile gives the CPU's resize (docs/device/fidelity.md).");
}

NativeCompositeScope::NativeCompositeScope(const c10::OperatorHandle& op, uint64_t signature) {
  if (t_accounting.composite_depth == 0) {
    const OpInfo& info = account(op);
    if (info.compiles) record_signature(signature ^ info.name_hash);
  }
  ++t_accounting.composite_depth;
}

NativeCompositeScope::~NativeCompositeScope() { --t_accounting.composite_depth; }

bool in_native_composite() { return t_accounting.composite_depth > 0; }

void enter_uncounted() { ++t_accounting.composite_depth; }

void exit_uncounted() {
  TORCH_CHECK(t_accounting.composite_depth > 0, "torchferry: exit_uncounted without a matching enter_uncounted");
  --t_accounting.composite_depth;
}

void account_ops(const std::vector<std::string>& op_names) {
  for (const std::string& name : op_names) {
    const auto dot = name.find('.', name.find("::"));
    const auto handle = c10::Dispatcher::singleton().findOp(
        {dot == std::string::npos ? name : name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1)});
    TORCH_CHECK_VALUE(handle.has_value(), "no ATen operator named ", name);
    account(*handle);
  }
}

void set_known_issues(const std::unordered_map<std::string, std::string>& warnings,
                      const std::unordered_map<std::string, std::vector<at::ScalarType>>& dtypes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_known_issues.clear();
  g_scoped_issues.clear();
  g_scoped_issue_slot.clear();
  for (const auto& [name, warning] : warnings) {
    auto scope = dtypes.find(name);
    if (scope == dtypes.end() || scope->second.empty()) {
      g_known_issues[name] = warning;
      continue;
    }
    ScopedIssue& issue = g_scoped_issues.emplace_back();
    issue.name = name;
    issue.warning = warning;
    for (at::ScalarType type : scope->second) issue.dtypes |= bit(type);
    g_scoped_issue_slot[name] = static_cast<int>(g_scoped_issues.size()) - 1;
  }
  g_known_issues_warned.clear();
  for (auto& [schema, entry] : g_ops) {  // ops already met take their new slots
    const auto handle = c10::Dispatcher::singleton().findOp(schema->operator_name());
    if (handle) classify(*handle, entry);
  }
}

namespace {
// Warns once per op and topic (rare paths only: they take the lock).
void warn_once(const std::string& key, const std::string& message) {
  static std::unordered_set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!warned.insert(key).second) return;
  }
  TORCH_WARN(message);
}
}  // namespace

void warn_overlapping_write(const OpInfo& info) {
  warn_once("overlap " + info.name,
            info.name + " wrote into a tensor some of whose elements share one memory location (an expanded "
            "tensor, e.g. x.expand(...).add_(1)). The CPU refuses this (\"unsupported operation: more than one "
            "element of the written-to tensor refers to a single memory location\"); TorchNeuron has no such "
            "check (no overlap check in torch_neuronx 98154b8: its kernels compute the result, then write it "
            "into the tensor), so on '" + g_config.profile + "' the write goes through and each shared "
            "location keeps one of the values written, as here. Next step: write into a tensor that owns its "
            "elements (x = x.expand(...).clone()), which behaves the same on every device; a profile with "
            "overlapping_writes = false restores the CPU's error (docs/device/fidelity.md).");
}

void warn_empty_zeros(const OpInfo& info, bool dtype_changed) {
  // A result in another dtype is news of its own, after zeros in the op's dtype.
  warn_once((dtype_changed ? "empty dtype " : "empty ") + info.name,
            info.name + " was called with an empty tensor input and gave zeros" +
                std::string(dtype_changed ? " in torch's default dtype (float32 unless set), not the op's," : "") +
                " as TorchNeuron's torch-mlir kernel does on '" + g_config.profile +
                "' (torch_neuronx/python_ops/torch_mlir/kernel.py, _handle_empty_tensors: no computation, "
                "torch.zeros of the result's shape), where the CPU computes the op (addmm gives its bias, nll_loss "
                "NaN, index_add its input). Next step: skip the op when an input is empty (if x.numel() == 0: "
                "...), or compute it on the CPU; a profile with empty_inputs = false computes what the CPU "
                "computes (docs/device/fidelity.md).");
}

void throw_complex_device_cast(at::ScalarType from, at::ScalarType to, const std::string& op,
                               const std::string& implementation) {
  TORCH_CHECK(false,
              fallback_disabled_message(
                  op, /*executed=*/true, implementation,
                  implementation + ": a cast of a device tensor from " + python_name(from) + " to " + python_name(to) +
                      " into a device tensor runs on the device as a compiled program (TorchNeuron's "
                      "python_ops/cast_policy.py write_neuron_to_neuron: only float64 and int64 bounce through the "
                      "CPU; other casts go to device_cast.py device_cast_neuron_to_neuron, a torch-mlir kernel), "
                      "and its compiled programs take no complex dtype (its CI lists PyTorch's test_to_complex "
                      "failing in every variant: tests/pytorch_tests/failing_test_methods/TestNNDeviceType.json). "
                      "Next step: cast on the CPU and move the result (x.cpu().to(" + python_name(to) + ").to(\"neuron\")), "
                      "or keep real tensors on the device (torch.view_as_real); a profile with complex_dtypes = false "
                      "lets the cast through (docs/device/fidelity.md)"));
}

void throw_strided_output(const OpInfo& info, const at::Tensor& t, KernelOutput how) {
  const bool result = how == KernelOutput::kComposedResult;
  std::ostringstream details;
  details << "ImplementationWrapper: XLA kernel execution failed: Cannot process non-contiguous tensors ("
          << info.name << " writes "
          << (how == KernelOutput::kInPlace ? "in place" : result ? "its result" : "as out=") << " into a non-contiguous tensor of sizes " << t.sizes()
          << " and strides " << t.strides() << ": TorchNeuron's torch-mlir kernel executes into the tensor given, "
          << "and its pipeline takes contiguous outputs only, torch_neuronx/csrc/core/NeuronBindings.cpp "
          << "PrepareKernelTensors; python_ops/torch_mlir/kernel.py _prepare_execution_tensors";
  if (result) {
    details << ". TorchNeuron registers only this op's out= variant, so PyTorch's generated functional variant "
            << "(CompositeExplicitAutogradNonFunctional) allocates the result with the stride order TensorIterator "
            << "takes from the inputs and hands it to that kernel as out=). Next step: make the inputs contiguous "
            << "first (x.contiguous()), or compute into a contiguous out= (torch.empty(shape, device=...))";
  } else {
    details << "). Next step: compute into a fresh tensor and copy it in (view.copy_(result), or view[...] = value, "
            << "which TorchNeuron's copy_ writes through the strides), or make the tensor contiguous first";
  }
  details << "; compiled_strided_writes_fail = false in a profile lets it through (docs/device/fidelity.md).";
  TORCH_CHECK(false, fallback_disabled_message(info.name, /*executed=*/true, "ImplementationWrapper", details.str()));
}

std::string fallback_disabled_message(const std::string& op, bool executed, const std::string& implementation,
                                      const std::string& details) {
  return "CPU fallback disabled because TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1. Operation " + op +
         (executed ? " failed to execute on Neuron" : " failed to be handled by any Neuron implementation") +
         " (last implementation: " + implementation + "). Details: " + details;
}

void warn_lost_writes(const OpInfo& info, const std::string& arguments) {
  warn_once("lost writes " + info.name,
            info.name + " ran as a host fallback and its CPU kernel updated " + arguments +
                ", which its schema does not mark as written: TorchNeuron's CPU fallback on '" + g_config.profile +
                "' (torch_neuronx/csrc/core/NeuronBindings.cpp neuron_cpu_fallback: PyTorch's at::native::cpu_fallback) "
                "runs the kernel on copies and copies back only the marked arguments, so the device tensors keep "
                "their values there (a BatchNorm's running_mean and running_var do not move in training mode; "
                "num_batches_tracked does). Next step: recompute the statistics after training with a pass in "
                "training mode on the CPU (torch.optim.swa_utils.update_bn), or use track_running_stats=False, "
                "GroupNorm or LayerNorm; a profile with fallback_unmarked_writes_lost = false keeps the CPU's "
                "update (docs/device/fidelity.md).");
}

void warn_cat_of_empties(c10::IntArrayRef cpu_sizes) {
  std::ostringstream sizes;
  sizes << cpu_sizes;
  warn_once("cat of empties",
            "aten::cat of tensors that are all empty gave a 1-D empty tensor of shape [0], as TorchNeuron's torch_cat "
            "does on '" + g_config.profile + "' (torch_neuronx/python_ops/torch_mlir/ops/tensor_ops.py: it drops the "
            "empty tensors and returns torch.empty(0) when none is left), where the CPU gives shape " + sizes.str() +
            ": a later .view(), .size(d) or shape check sees another shape there. Next step: skip the cat when every "
            "part is empty (if all(t.numel() == 0 for t in parts): ...); a profile with cat_of_empty_tensors_1d = "
            "false keeps the CPU's shape (docs/device/fidelity.md).");
}

void warn_cast_rounds(at::ScalarType from, at::ScalarType to) {
  const std::string pair = std::string(python_name(from)) + " to " + python_name(to);
  warn_once("cast " + pair,
            "a cast from " + pair + " between device tensors rounded to the nearest integer (ties to even), as "
            "TorchNeuron casts of 32 bits or fewer run on the device on '" + g_config.profile +
            "' (torch_neuronx/python_ops/cast_policy.py write_neuron_to_neuron, python_ops/device_cast.py), where "
            "the CPU truncates toward zero (1.7 gives 2 there, 1 on the CPU; its CI lists PyTorch's "
            "test_float_to_int_conversion_finite as failing for int8, uint8, int16 and int32). The tie rule is "
            "assumed, not in the source. Next step: say which you mean before the cast (x.trunc(), x.floor() or "
            "x.round()); a profile with casts_to_int_round = false truncates as the CPU does "
            "(docs/device/fidelity.md).");
}

void warn_row_major(const OpInfo& info, c10::IntArrayRef cpu_strides) {
  // Each thread remembers the ops it has told about, so the copies this rule makes every step
  // take no lock after the first.
  thread_local std::unordered_set<const OpInfo*> told;
  if (!told.insert(&info).second) return;
  std::ostringstream strides;
  strides << cpu_strides;
  const bool fallback = info.on_host();
  warn_once("row-major " + info.name,
            info.name + " returned a fresh row-major (contiguous) result where the CPU's result has the strides " +
            strides.str() + (fallback ? " (its kernel's layout), as TorchNeuron copies a host fallback's results to "
                                        "the device on '" + g_config.profile + "' (torch_neuronx/python_ops/"
                                        "cast_policy.py copy_cpu_to_neuron makes them contiguous)"
                                      : " (its inputs' stride order), as TorchNeuron's torch-mlir kernel allocates "
                                        "its results on '" + g_config.profile + "' (torch_neuronx/python_ops/"
                                        "torch_mlir/kernel.py, _create_output_tensors_from_original)") +
            ". The values are the CPU's; code that relies on the CPU's strides "
            "(a later .view() across the permuted dims, a stride check) fails or takes another path there, and a "
            "matmul over the result may round otherwise. Next step: use .reshape() or .contiguous() rather than "
            ".view() on such a result; a profile with " +
            (fallback ? "to_copy_row_major" : "compiled_results_row_major") +
            " = false keeps the CPU's strides (docs/device/fidelity.md).");
}

void note_known_issue(const OpInfo& info) {
  if (t_accounting.composite_depth > 0) return;  // part of a native op counted as a whole
  ScopedIssue& issue = g_scoped_issues[info.known_issue];
  if (issue.calls.fetch_add(1, std::memory_order_relaxed) != 0) return;
  std::string warning;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_known_issues_warned.insert(issue.warning).second) warning = issue.warning;
  }
  if (!warning.empty()) TORCH_WARN(warning);
}

void note_graph_known_issues(const std::vector<std::string>& op_names) {
  std::vector<std::string> warnings;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (const std::string& name : op_names) {
      const std::string* warning = nullptr;
      if (auto it = g_known_issues.find(name); it != g_known_issues.end()) {
        warning = &it->second;
      } else if (auto slot = g_scoped_issue_slot.find(name); slot != g_scoped_issue_slot.end()) {
        warning = &g_scoped_issues[slot->second].warning;
      }
      TORCH_CHECK_VALUE(warning != nullptr, name, " is not a known issue of the device profile '", g_config.profile,
                        "'");
      ++g_graph_issue_calls[name];
      if (g_known_issues_warned.insert(*warning).second) warnings.push_back(*warning);
    }
  }
  for (const std::string& warning : warnings) TORCH_WARN(warning);
}

std::unordered_map<std::string, int64_t> graph_known_issue_calls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_graph_issue_calls;
}

std::unordered_map<std::string, int64_t> known_issue_calls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::unordered_map<std::string, int64_t> out;
  for (const ScopedIssue& issue : g_scoped_issues) {
    const int64_t calls = issue.calls.load(std::memory_order_relaxed);
    if (calls > 0) out[issue.name] = calls;
  }
  return out;
}

std::unordered_map<std::string, int64_t> executed_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::unordered_map<std::string, int64_t> out;
  for (const auto& [schema, entry] : g_ops) {
    if (entry.executed > 0) out[entry.info.name] += entry.executed;
  }
  return out;
}

int64_t executed_op_count() { return g_executed_total.load(std::memory_order_relaxed); }

std::unordered_map<std::string, int64_t> fallback_ops() {
  std::unordered_map<std::string, int64_t> out;
  if (g_fallback_total.load(std::memory_order_relaxed) == 0) return out;  // most steps of most runs
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [schema, entry] : g_ops) {
    if (entry.fallback > 0) out[entry.info.name] += entry.fallback;
  }
  return out;
}

// Why each op seen so far ran on the host, or made the host wait for it (an op the target runs
// that reads device values first: one_hot's index range), from the profile.
std::unordered_map<std::string, std::string> fallback_reasons_seen() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::unordered_map<std::string, std::string> out;
  for (const auto& [schema, entry] : g_ops) {
    const bool synced = entry.info.syncs && entry.executed > 0 && !entry.reason.empty() &&
                        entry.reason != g_config.default_reason;  // a reason of its own, not the default
    if (entry.fallback > 0 || synced) out[entry.info.name] = entry.reason;
  }
  return out;
}

std::unordered_map<std::string, int64_t> host_syncs() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_syncs;
}

void clear_op_tracking() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [schema, entry] : g_ops) {
    entry.executed = 0;
    entry.fallback = 0;
  }
  g_executed_total = 0;
  g_fallback_total = 0;
  for (ScopedIssue& issue : g_scoped_issues) issue.calls = 0;
  g_graph_issue_calls.clear();
  g_syncs.clear();
}

std::unordered_map<std::string, int64_t> eager_compile_counts() {
  std::lock_guard<std::mutex> lock(g_signature_mutex);
  return {{"signatures", g_signatures.distinct},
          {"compilations", g_signatures.compilations},
          {"cache_hits", g_signatures.cache_hits},
          {"calls", g_signatures.calls + g_repeat_calls.load(std::memory_order_relaxed)}};
}

void load_persisted_signatures(const std::vector<uint64_t>& signatures) {
  std::lock_guard<std::mutex> lock(g_signature_mutex);
  g_signatures.persisted.insert(signatures.begin(), signatures.end());
}

void forget_seen_signatures() {
  std::lock_guard<std::mutex> lock(g_signature_mutex);
  // What this process compiled is in the persistent cache for whoever runs next (saved from `unsaved`).
  g_signatures.persisted.insert(g_signatures.seen.begin(), g_signatures.seen.end());
  g_signatures.seen.clear();
  g_signature_generation.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> take_unsaved_signatures() {
  std::lock_guard<std::mutex> lock(g_signature_mutex);
  std::vector<uint64_t> out;
  out.swap(g_signatures.unsaved);
  g_signatures.persisted.insert(out.begin(), out.end());
  return out;
}

}  // namespace torchferry
