"""Device profiles: what a target runs on the device, what on the host, and why, with sources.

A profile is a small TOML file (see profiles/trn2.toml): the device memory, the
data-dependent ops the target runs on the host (`[[host_fallback]]`, each with a
reason and sources), the default numerics, and optionally `native_ops`, a table
generated from the target's source (profiles/trn2_ops.toml, written by
tools/gen_trn2_profile.py). With that table, every op the device executes that the
target does not implement is a *predicted host fallback*. Optionally `known_issues`
(profiles/trn2_known_issues.toml, written by the same script): the ops the target's
vendor skips in its own CI, each warned about once when a workload runs it. Users pass their own
profile with `torchferry.device.enable(profile="path.toml")` or
`TORCHFERRY_PROFILE=path.toml`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError

PROFILE_DIR = Path(__file__).with_name("profiles")
DEFAULT_PROFILE = "trn2"
NUMERICS_MODES = ("target", "host")

# The target's refusals the device reproduces (the profile's [rules], each on unless the
# profile turns it off): name -> (bit shared with neuron.h `Rule`, what it does, source). Bit 0: a
# rule of the compile backend or the process group, read in Python (`target.rule_on`), not by the core.
RULES = {
    "memory_format": (1, "Tensor.contiguous(memory_format=channels_last or channels_last_3d) on a device "
                      "tensor raises, and so does Tensor.to / Module.to with such a format where the device is "
                      "either end (a move from the CPU included); creating and cloning in channels_last stay allowed",
                      "torch_neuronx/python_ops/cast_policy.py (validate_neuron_memory_format), "
                      "python_ops/contiguous.py, csrc/core/NeuronBindings.cpp (contiguous_autograd_neuron), "
                      "python_ops/to_copy.py (ToCopyNeuronImpl), _build_config.py (no fallback for an op it "
                      "implements); tests/operations/test_to_copy_basic.py, tests/pytorch_tests/specs/ddp_spec.json "
                      "(test_channels_last_contig: 'aten::_to_copy - RuntimeError: CPU fallback disabled')"),
    "complex_dtypes": (2, "ops the target compiles raise on complex device tensors; copies, views and "
                       "host fallbacks work", "tests/pytorch_tests/failing_test_methods/*.json (complex variants "
                       "listed failing), tests/pytorch_tests/specs/aten_spec.json ('Complex data types are not "
                       "supported on Neuron'); the JAX/XLA path's table, torch_neuronx/type_converter_base.py "
                       "(TORCH_TO_JAX_BASE), has no complex type"),
    "unsigned_dtypes": (4, "ops the target compiles raise on uint16/uint32/uint64 device tensors; copies, "
                        "views and host fallbacks work", "tests/pytorch_tests/failing_test_methods/*.json "
                        "(uint16/32/64 variants listed failing: test_cat_out_fast_path, test_random_*); the JAX/XLA "
                        "path's table, torch_neuronx/type_converter_base.py (TORCH_TO_JAX_BASE), has none"),
    "empty_inputs": (8, "an op the target runs through its torch-mlir kernel, called with an empty tensor input, "
                     "returns zeros of the result's shape in torch's default dtype (float32), where the CPU computes "
                     "the op; a reduction without an identity (max, amax, argmax, ..., std_mean) raises; other "
                     "reductions and scatter give what the CPU gives; in-place ops untouched",
                     "torch_neuronx/python_ops/torch_mlir/kernel.py (TorchMlirKernel.__call__, "
                     "_handle_empty_tensors), python_ops/shared/config.py (ReductionOps, IndexOps)"),
    "overlapping_writes": (16, "an op the target compiles writes into a tensor whose elements share memory (an "
                           "expanded tensor) with a warning once per op, where the CPU raises",
                           "torch_neuronx (no overlap check anywhere in the package: python_ops/torch_mlir/kernel.py "
                           "writes results into the tensor given; the CPU's TensorIterator runs "
                           "assert_no_internal_overlap)"),
    "as_strided_bounds_first": (32, "as_strided with a negative stride, or with fewer or more strides than sizes, "
                                "checks the storage bounds first, as the target does: PyTorch's bounds error "
                                "('Storage size calculation overflowed ...', 'dimensionality of sizes (2) must "
                                "match dimensionality of strides (1)') where the CPU says 'Negative strides are "
                                "not supported' or 'mismatch in length of strides and shape'",
                                "torch_neuronx/csrc/aten/TensorShape.cpp (as_strided_neuron: "
                                "checkInBoundsForStorage before setStrided)"),
    "fallback_out_resize": (64, "an op the target runs with PyTorch's CPU fallback, given a non-empty out= tensor "
                            "of another size than its result, raises the target's '_copy_from_and_resize now only "
                            "support copy with same size, or dst.numel() == 0!' where the CPU resizes out=",
                            "torch_neuronx/csrc/aten/CopyKernel.cpp (_copy_from_and_resize_neuron), "
                            "csrc/core/NeuronBindings.cpp (neuron_cpu_fallback: at::native::cpu_fallback copies "
                            "each written argument back with _copy_from_and_resize)"),
    "compiled_out_written_after": (128, "an op the target compiles computes into an output of its own, then resizes "
                                   "its out= tensor with a plain resize_ and writes the result into it: no 'out "
                                   "tensor will be resized' / 'An output with one or more elements was resized' "
                                   "warning, an out= of another shape reshaped to the result's, and no error for "
                                   "an out= that is also an input, where the CPU warns, writes through out= or raises",
                                   "torch_neuronx/python_ops/torch_mlir/kernel.py (_prepare_execution_tensors: "
                                   "provided.resize_), python_ops/handlers/output.py (_copy_to_output, "
                                   "_resize_output: out.resize_), python_ops/base.py (_resize_output_if_needed)"),
    "compiled_results_row_major": (256, "a functional op the target runs through its torch-mlir kernel returns a "
                                   "fresh row-major (contiguous) result whatever its inputs' strides, where the "
                                   "CPU's TensorIterator gives a permuted input's stride order to the result",
                                   "torch_neuronx/python_ops/torch_mlir/kernel.py (_create_output_tensors_from_"
                                   "original: io_tensor.empty(shape, dtype, device) for one result, empty_like(..., "
                                   "memory_format=torch.contiguous_format) for several)"),
    "host_index_writes": (512, "an indexed write (x[idx] = v, index_put_) with a non-0-dim index tensor on the host "
                          "raises 'Non-scalar tensor arg1[0] is on cpu device, expected neuron' in every build (no "
                          "fallback); reads (x[idx]) take host indices, as CUDA's do",
                          "torch_neuronx/python_ops/base.py (OperationImplementation.can_handle, called outside the "
                          "try of Operation.__call__), python_ops/torch_mlir/ops/indexing.py (_index_put_impl_), "
                          "python_ops/torch_mlir/ops/index.py (IndexMLIRImpl.can_handle: the indexed tensor only); "
                          "tests/pytorch_tests/failing_test_methods/TestTensorCreation.json (test_dstack, "
                          "test_hstack_column_stack, test_vstack_row_stack: x[cpu_mask] = 0 on a device tensor)"),
    "int_arguments_as_int32": (1024, "an op TorchNeuron runs through its torch-mlir kernel, given a Python int beyond "
                               "int32 in an argument its registration does not keep static (`x < 2**40`, "
                               "`torch.full(shape, 2**40)`), raises 'value cannot be converted to type int32 without "
                               "overflow' (the snapshot's build: its fallback-only-for-unimplemented default)",
                               "torch_neuronx/python_ops/processors/argument_processor.py (preprocess_inputs, "
                               "preprocess_kwargs: torch.tensor(v, dtype=torch.int32)), python_ops/torch_mlir/kernel.py "
                               "(TorchMlirKernel.__call__), python_ops/base.py (Operation.__call__), _build_config.py; "
                               "the ops' static arguments: @register_aten in python_ops/torch_mlir/ops/*.py"),
    "casts_to_int_round": (2048, "a cast between device tensors from float16, bfloat16 or float32 to int8, uint8, "
                           "int16 or int32 (x.to(torch.int32), .int(), copy_) rounds to the nearest integer where the "
                           "CPU truncates toward zero (ties to even assumed); casts to or from 64-bit types and "
                           "casts across the host boundary truncate, as on the CPU",
                           "torch_neuronx/python_ops/cast_policy.py (write_neuron_to_neuron: casts of 32 bits or "
                           "fewer on the device, 64-bit ones through the CPU), python_ops/device_cast.py "
                           "(DeviceCastMLIRImpl: a compiled x.to(dtype)), python_ops/torch_mlir/ops/to_copy.py; "
                           "tests/pytorch_tests/failing_test_methods/TestTensorCreation.json "
                           "(test_float_to_int_conversion_finite int8, uint8, int16, int32 listed failing; bool and "
                           "int64, the CPU-bounced cast, not)"),
    "cat_of_empty_tensors_1d": (4096, "torch.cat of tensors that are all empty returns a 1-D empty tensor, shape "
                                "(0,), in the first tensor's dtype, where the CPU keeps their shape ((4, 0, 32, 32))",
                                "torch_neuronx/python_ops/torch_mlir/ops/tensor_ops.py (torch_cat: drops the empty "
                                "tensors, returns torch.empty(0) when none is left), python_ops/torch_mlir/kernel.py "
                                "(TorchMlirKernel: results inferred by running torch_cat on meta tensors, "
                                "infer_outputs_from_meta; all of them empty: _create_zeros_like_original); "
                                "tests/pytorch_tests/failing_test_methods/TestTensorCreation.json (test_cat_empty "
                                "listed; test_cat_empty_legacy, whose empty tensors are already (0,), not)"),
    "fallback_unmarked_writes_lost": (8192, "an op the target runs with PyTorch's CPU fallback works on copies of "
                                      "its arguments and copies back only those its schema marks as written: the "
                                      "running_mean and running_var a BatchNorm updates in training mode "
                                      "(native_batch_norm, whose schema does not mark them) keep their values",
                                      "torch_neuronx/csrc/core/NeuronBindings.cpp (neuron_cpu_fallback: "
                                      "at::native::cpu_fallback, whose copy-back takes the arguments with a write "
                                      "alias), no native_batch_norm kernel in the native table (trn2_ops.toml); "
                                      "tests/pytorch_tests/failing_test_methods/TestNNDeviceType.json "
                                      "(test_batchnorm_update_stats, test_batchnorm_simple_average float32, "
                                      "test_InstanceNorm1d/2d/3d_general: the running statistics)"),
    "allocations_by_numel": (16384, "torch.empty and torch.empty_strided on the device (and what is built on "
                             "them: zeros, ones, full, the like-functions) allocate a storage of the tensor's "
                             "number of elements (one element when it has none) whatever its strides, and lay a "
                             "row-major tensor out without clamping sizes of zero: torch.empty((5, 0)) has strides "
                             "(0, 1) where the CPU's are (1, 1), and torch.empty_strided((2, 3, 4), (2, 4, 6)) a "
                             "storage of 24 elements where the CPU's has 29, too small for the view its strides "
                             "describe",
                             "torch_neuronx/csrc/aten/NeuronNativeFunctions.cpp (empty_strided_neuron: "
                             "multiply_integers(size) * itemsize, at least one element; empty_neuron: "
                             "get_strides_for_memory_format, c10 TensorType::contiguousStridesOf); "
                             "tests/pytorch_tests/failing_test_methods/TestTensorCreation.json (test_empty_strided, "
                             "test_empty_tensor_props)"),
    "compiled_strided_writes_fail": (32768, "an op TorchNeuron runs through its torch-mlir kernel, writing in place "
                                    "or into out= a non-contiguous device tensor of 32 bits or fewer "
                                    "(x[:, 0].fill_(1), x.t().mul_(2), torch.add(a, b, out=x[:, :2]) with the "
                                    "result's shape) fails: 'XLA kernel execution failed: Cannot process "
                                    "non-contiguous tensors', where the CPU writes through the view; so does a "
                                    "functional op it registers only as that out= kernel whose result takes a "
                                    "permuted input's stride order (x.t() == y.t(), x.t() / 2, x.t() ** 2: "
                                    "PyTorch's generated composite hands that result to the kernel as out=), and "
                                    "zeros_like/full_like of a permuted tensor (empty_like keeps the order, then "
                                    "zero_/fill_ in place); float64 and int64 results (computed in a 32-bit copy, "
                                    "then copied in), copies (copy_, x[:, 0] = v), host fallbacks and the parts "
                                    "of an op the target runs whole pass",
                                    "torch_neuronx/python_ops/auto_registration.py (create_wrapper_function: an "
                                    "in-place op is called with out=self), python_ops/torch_mlir/kernel.py "
                                    "(_prepare_execution_tensors: the out= tensor given is the execution output "
                                    "unless its dtype is narrowed; _execute_async), csrc/core/NeuronBindings.cpp "
                                    "(_submit_xla_task_to_pipeline -> PrepareKernelTensors(outputs): 'Cannot "
                                    "process non-contiguous tensors'; inputs get a prologue, outputs none; the "
                                    "sync path's _nrt_add_tensor_to_tensor_set refuses them too), "
                                    "python_ops/torch_mlir/op_impl.py (the error becomes a failed result, which "
                                    "the snapshot's build raises; python_ops/base.py's CPU fallback, a release "
                                    "build's path, refuses a non-contiguous out= as well), trn2_ops.toml (eq, "
                                    "div, pow... registered as .out only)"),
    "to_copy_row_major": (65536, "TorchNeuron's _to_copy makes every copy on the device row-major: a cast or copy "
                          "of a permuted device tensor (x.permute(0, 3, 1, 2).float()) is contiguous there, where "
                          "PyTorch's keeps the stride order (a move from the host keeps it here: not modelled); "
                          "and so is a predicted host "
                          "fallback's result, which PyTorch's CPU fallback moves to the device with it "
                          "(F.hardswish(x.t())); the ops TorchNeuron registers as explicit CPU fallbacks "
                          "(torch.linalg.qr and kin) keep the CPU's strides, as there",
                          "torch_neuronx/python_ops/to_copy.py (ToCopyNeuronImpl: io_tensor.empty(shape) for a "
                          "device-to-device copy, cast_policy.copy_cpu_to_neuron, contiguous, for a move), "
                          "csrc/core/NeuronBindings.cpp neuron_cpu_fallback (PyTorch's at::native::cpu_fallback "
                          "moves results with .to(device)); python_ops/cpu_fallback_registrations.py "
                          "(_to_neuron_with_strides) and its test tests/python_ops/test_cpu_fallback_registrations.py "
                          "(strides preserved)"),
    # torch.compile(backend="neuron"): what TorchNeuron's lowering refuses (compile/lowering.py).
    "compiled_no_outputs": (0, "a compiled graph with no tensor output (after None outputs are dropped) fails to "
                            "compile: 'No outputs found in the module, expected at least one output'",
                            "torch_neuronx/neuron_dynamo_backend/fx/fx_transform.py (convert_fx_to_stablehlo), "
                            "fx/passes/remove_none_outputs.py"),
    "compiled_higher_order_ops": (0, "a compiled graph holding a higher-order operator TorchNeuron does not "
                                  "legalize (cond, map_impl, invoke_subgraph, auto_functionalized_v2, scan, ...) "
                                  "fails to compile: 'Higher-order operation ... not implemented in the FxImporter'",
                                  "torch_neuronx/neuron_dynamo_backend/fx/fx_transform.py (fx.stateless_fx_import "
                                  "with NeuronFxImporter, fx/fx_importer.py), fx/passes/flex_attention_legalization"
                                  ".py; torch-mlir's FxImporter._import_hop"),
    "compiled_float64": (0, "float64 in a compiled graph computes in float32 in every op (the whole StableHLO "
                         "module is converted), not only in the ops the eager device narrows",
                         "torch_neuronx/neuron_dynamo_backend/fx/fx_transform.py (dtype_conversion_pass), "
                         "fx/passes/dtype_conversion.py"),
    "compiled_dynamic_shapes": (0, "a compiled graph with symbolic sizes or values (unbacked symbols from "
                                "capture_scalar_outputs or data-dependent ops, runtime asserts) fails to compile",
                                "torch_neuronx/neuron_dynamo_backend/fx/passes/dynamic_shape_analysis.py "
                                "(DynamicShapeAnalysis); tests/pytorch_tests/specs/dynamo_spec.json ('failed to "
                                "legalize operation torch.runtime.assert')"),
    "compiled_boolean_index_put": (0, "index_put with a boolean index in a compiled graph, unless it is a "
                                   "where (one value) or one boolean and one integer index, fails: 'Boolean "
                                   "index_put is not supported in torch.compile on Neuron'",
                                   "torch_neuronx/neuron_dynamo_backend/decompositions.py (index_put_decomposition)"),
    # The `neuron` process group: what TorchNeuron's ProcessGroupNeuron refuses (distributed_rules.py).
    "pg_point_to_point": (0, "send, recv, isend, irecv and batch_isend_irecv raise 'No backend type associated "
                          "with device type neuron'; recv from any source raises NotImplementedError",
                          "torch_neuronx/distributed/backend.py (ProcessGroupNeuron has no send/recv; "
                          "recv_anysource raises NotImplementedError); tests/pytorch_tests/specs/"
                          "common_c10d_spec.json ('Temporarily not supported send_recv')"),
    "pg_all_to_all": (0, "all_to_all_single with split sizes other than none or all ones, all_to_all on a group "
                      "of another size than 4, 8, 16 or a multiple of 32, or with tensors of different shapes, "
                      "is refused",
                      "torch_neuronx/distributed/backend.py (alltoall_base: 'Only even split sizes are "
                      "supported'; alltoall), python_ops/xla_ops/all_to_all_xla.py (AllToAllXlaOp.can_handle)"),
    "pg_default_group_barrier": (0, "barrier on a group other than the default one, and monitored_barrier, raise "
                                 "NotImplementedError",
                                 "torch_neuronx/distributed/backend.py (barrier: 'Barrier is implemented only for "
                                 "default group'; monitored_barrier)"),
    "pg_reduce_ops": (0, "collectives with a reduce op other than SUM, AVG, MIN, MAX (or PREMUL_SUM, applied "
                      "as SUM) are refused: PRODUCT and the bitwise ops",
                      "torch_neuronx/python_ops/xla_ops/reduce_functions.py (SUPPORTED_REDUCE_OPS), "
                      "all_reduce_xla.py and reduce_scatter_xla.py (can_handle), distributed/backend.py"),
    "pg_complex_tensors": (0, "collectives of complex tensors (those DDP's reducer and the functional collectives "
                           "pass unchanged) fail to compile", "tests/pytorch_tests/specs/ddp_spec.json ('Compilation "
                           "error occurred on Neuron for operation=all_reduce - complex params not supported'), "
                           "specs/dtensor_spec.json ('NEFF compilation failed with return code 70 for complex64')"),
    "pg_empty_tensors": (0, "all_reduce, reduce_scatter and all_gather of empty tensors (all_gather: a zero first "
                         "dimension) are refused; the collectives that skip empty tensors themselves still do",
                         "torch_neuronx/distributed/utils.py (_validate_no_zero_dim0), python_ops/xla_ops/"
                         "all_reduce_xla.py, reduce_scatter_xla.py, all_gather_xla.py (can_handle)"),
}

# Classification codes shared with Target.cpp: kind | COMPILES | SYNCS | EMPTY_ZEROS | ROW_MAJOR | EMPTY_RAISES |
# UNMARKED_WRITES | TORCH_MLIR | VIA_OUT_KERNEL | KEEPS_STRIDES.
NATIVE, METADATA, HOST_COPY, HOST_PREDICTED = 0, 1, 2, 3
COMPILES, SYNCS, EMPTY_ZEROS, ROW_MAJOR, EMPTY_RAISES, UNMARKED_WRITES = 4, 8, 16, 32, 64, 128
# The op runs through TorchNeuron's torch-mlir kernel (python_ops/torch_mlir/), whose execution output is the
# out= (or in-place) tensor given (compiled_strided_writes_fail).
TORCH_MLIR = 256
# A functional op TorchNeuron registers only as its torch-mlir out= kernel: PyTorch's generated composite for a
# structured op (CompositeExplicitAutogradNonFunctional, torchgen's `default_backend_functional`) allocates the
# result with the strides its meta function asks for (TensorIterator: the inputs' stride order) and hands it to
# that kernel as out= (compiled_strided_writes_fail).
VIA_OUT_KERNEL = 512
# A host fallback TorchNeuron registers explicitly (python_ops/cpu_fallback_registrations.py: linalg_qr and kin),
# whose results keep the CPU kernel's strides on the device (_to_neuron_with_strides: as_strided over the copied
# storage); other fallbacks' results are copied contiguous (to_copy_row_major).
KEEPS_STRIDES = 1024
# CPU kernels that write into arguments their schema does not mark as written (native_functions.yaml:
# native_batch_norm updates running_mean and running_var in training mode, `Tensor? running_mean` without
# `(a!)`); a backend's at::native::cpu_fallback copies back only the marked ones (CPUFallback.cpp).
UNMARKED_WRITERS = frozenset({"aten::native_batch_norm", "aten::native_batch_norm.out"})
# TorchNeuron's torch-mlir kernel skips the computation when a positional tensor argument is empty
# (torch_mlir/kernel.py, TorchMlirKernel.__call__ -> _handle_empty_tensors): reductions with an identity
# return it in the result's dtype (sum 0, prod 1, mean/std/var NaN: what the CPU computes); those without
# one (max, min, amax, amin, argmax, argmin, std_mean, var_mean) raise "Cannot perform ... on empty tensor
# (no identity value)", which the snapshot's build, falling back only for unimplemented ops, passes to
# the caller (EMPTY_RAISES); scatter and scatter_add with an empty index return the input (as the CPU);
# every other op returns zeros of the result's shape made by `torch.zeros(shape, device=...)`, in torch's
# default dtype whatever the op's (`_create_zeros_like_original`; EMPTY_ZEROS). By base name, as
# python_ops/shared/config.py (ReductionOps, IndexOps) matches them.
TORCH_MLIR_SOURCES = "python_ops/torch_mlir/"
EMPTY_AS_CPU = frozenset({"sum", "add", "prod", "product", "all", "any", "norm", "mean", "std", "var",
                          "scatter", "scatter_add"})
EMPTY_NO_IDENTITY = frozenset({"max", "min", "amax", "amin", "argmax", "argmin", "std_mean", "var_mean"})

# Ops through which this device realises an op the target implements itself; they
# are judged as that op.
TARGET_EQUIVALENTS = {
    # PyTorch's convolution calls the *_overrideable ops for any PrivateUse1 device;
    # TorchNeuron registers convolution and convolution_backward themselves.
    "aten::convolution_overrideable": "aten::convolution",
    "aten::convolution_backward_overrideable": "aten::convolution_backward",
    # The device picks the CPU's SDPA kernel (same numbers as the CPU); TorchNeuron's
    # csrc/aten/SdpBackendSelection.cpp picks its overrideable kernel for 4-D inputs.
    "aten::_scaled_dot_product_flash_attention_for_cpu": "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward":
        "aten::_scaled_dot_product_fused_attention_overrideable_backward",
    # copy_ reaches the device as _copy_from; TorchNeuron implements copy_ itself.
    "aten::_copy_from": "aten::copy_",
}
# Native ops that move bytes (NRT copies), not compiled programs.
TRANSFERS = frozenset({"aten::copy_", "aten::_to_copy", "aten::clone", "aten::_copy_from_and_resize"})
# Reads of a device value by the host: item(), bool(t), int(t), float(t).
SCALAR_READS = frozenset({"aten::_local_scalar_dense"})


@dataclass(frozen=True, kw_only=True)
class HostFallback:
    op: str
    reason: str
    sources: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class NativeOps:
    """What the target registers for its device, generated from its source (op -> source file)."""

    path: Path
    source_repository: str
    source_commit: str
    native: dict[str, str]
    cpu_fallback: dict[str, str]
    metadata: dict[str, str]
    # torch-mlir op -> {"argnums": [...], "argnames": [...]}: the arguments its registration keeps static
    torch_mlir_static: dict[str, dict[str, list]] = field(default_factory=dict)


KNOWN_ISSUE_KINDS = {
    "fails": "the op does not run there",
    "slow": "compiling or running it is slow enough that the vendor's CI skips it",
    "accuracy": "its results differ from the CPU's",
}


@dataclass(frozen=True, kw_only=True)
class KnownIssue:
    """An op the target vendor's own CI skips or expects to fail, with the vendor's reason."""

    op: str  # as the vendor names it: "aten::remainder" means every overload
    kind: str  # one of KNOWN_ISSUE_KINDS
    reason: str
    scope: str  # which of the vendor's tests skip it
    source: str  # the vendor's file(s)
    # The dtypes the vendor's reason scopes it to ("bfloat16 gradient mismatch"), else those its tests
    # ran: the op is a known issue only when it runs on a device tensor of one of them. Empty: every dtype.
    dtypes: tuple[str, ...] = ()
    # The ATen overloads its tests called ("aten::clamp_min.Tensor"): the others are not known issues.
    # Empty: every overload of `op`.
    overloads: tuple[str, ...] = ()

    def names(self) -> list[str]:
        """The ATen overload names this issue covers."""
        return list(self.overloads) or expand(self.op)

    def warning(self, commit: str) -> str:
        where = f"; in {', '.join(self.dtypes)} only" if self.dtypes else ""
        where += f"; overloads {', '.join(self.overloads)}" if self.overloads else ""
        return (f"{self.op} is a known issue of TorchNeuron {commit[:7]}: {self.reason} ({self.kind}: "
                f"{KNOWN_ISSUE_KINDS[self.kind]}{where}; {self.scope}; source: {self.source}). Listed by "
                "torchferry.device.known_issues() (one warning per op); test this op on the real device.")


@dataclass(frozen=True, kw_only=True)
class KnownIssues:
    """The target's known issues, generated from its vendor's test evidence (profiles/*_known_issues.toml)."""

    path: Path
    source_commit: str
    issues: tuple[KnownIssue, ...]

    @cached_property
    def by_op(self) -> dict[str, KnownIssue]:
        """Every ATen overload name -> its known issue (read at every measurement-window reading)."""
        return {name: issue for issue in self.issues for name in issue.names()}

    def warnings(self) -> dict[str, str]:
        """Every ATen overload name -> the warning its first call gives (one text per vendor op)."""
        return {name: issue.warning(self.source_commit) for name, issue in self.by_op.items()}

    def dtype_scopes(self) -> dict[str, list[object]]:
        """Every ATen overload name of a dtype-scoped issue -> its `torch.dtype`s."""
        import torch

        return {name: [getattr(torch, d) for d in issue.dtypes]
                for name, issue in self.by_op.items() if issue.dtypes}


@dataclass(frozen=True, kw_only=True)
class DeviceProfile:
    name: str
    description: str
    memory_bytes: int
    sources: dict[str, str] = field(default_factory=dict)
    host_fallback: tuple[HostFallback, ...] = ()
    numerics: str = "host"
    native_ops: NativeOps | None = None
    known_issues: KnownIssues | None = None
    rules: dict[str, bool] = field(default_factory=dict)

    def rules_mask(self) -> int:
        """The [rules] in force as the bits the C++ core reads (neuron.h `Rule`)."""
        return sum(RULES[name][0] for name, on in self.rules.items() if on)

    def fallback_reasons(self) -> dict[str, str]:
        """op -> reason for the ops the profile names as host fallbacks: its data-dependent
        entries the target does not run natively, and the target's explicit CPU fallbacks."""
        reasons = {e.op: self._reason(e) for e in self.host_fallback if not self._native(e.op)}
        if self.native_ops:
            commit = self.native_ops.source_commit[:7]
            for op, source in self.native_ops.cpu_fallback.items():
                reasons[op] = f"registered as an explicit CPU fallback in TorchNeuron {commit} ({source})"
        return reasons

    def _reason(self, entry: HostFallback) -> str:
        return f"{entry.reason}; sources: {', '.join(entry.sources)} in the {self.name} profile"

    def predicted_fallback_reason(self) -> str | None:
        """Why an op the target does not register runs on the host (None: no native table)."""
        if self.native_ops is None:
            return None
        return (f"not implemented in TorchNeuron {self.native_ops.source_commit[:7]} (no PrivateUse1 "
                f"kernel in {self.native_ops.source_repository}, see {self.native_ops.path.name})")

    def _native(self, op: str) -> bool:
        return self.native_ops is not None and any(name in self.native_ops.native for name in expand(op))

    def host_reason(self, op: str) -> str | None:
        """Why the device runs ``op`` (a full ATen name) on the host, or None when the target runs it itself: the
        classification the C++ core is given (``op_codes``), so a scan and the device never disagree."""
        codes, reasons, default, default_reason = self._codes
        code = codes.get(op, default)
        if code & 3 not in (HOST_COPY, HOST_PREDICTED):
            return None
        return reasons.get(op, default_reason) or f"a host fallback in the {self.name} profile"

    @cached_property
    def _codes(self) -> tuple[dict[str, int], dict[str, str], int, str]:
        return self.op_codes()

    def int32_arguments(self) -> dict[str, int]:
        """op -> the arguments the int_arguments_as_int32 rule checks (`int32_argument_masks`); none without a native table."""
        if self.native_ops is None:
            return {}
        return int32_argument_masks(self.native_ops.native, self.native_ops.torch_mlir_static)

    def op_codes(self) -> tuple[dict[str, int], dict[str, str], int, str]:
        """(op -> code, op -> host reason, default code, default reason) for the C++ core."""
        codes: dict[str, int] = {}
        if self.native_ops is None:
            default, default_reason = NATIVE | COMPILES, ""
        else:
            default, default_reason = HOST_PREDICTED, self.predicted_fallback_reason() or ""
            for op, source in self.native_ops.native.items():
                codes[op] = NATIVE if op in TRANSFERS or "/csrc/" in source else NATIVE | COMPILES
                if TORCH_MLIR_SOURCES in source and op not in TRANSFERS:
                    codes[op] |= TORCH_MLIR
            for op in self.native_ops.metadata:
                codes.update(dict.fromkeys(expand(op), METADATA))
            for op in self.native_ops.cpu_fallback:
                codes[op] = HOST_PREDICTED | KEEPS_STRIDES
        for op in SCALAR_READS:
            codes[op] = codes.get(op, NATIVE) | SYNCS
        reasons = {}
        for entry in self.host_fallback:
            for op in expand(entry.op):
                # Native with a data-dependent size: the device runs it, the host reads the size.
                codes[op] = codes[op] | SYNCS if self._native(op) and codes.get(op, default) & 3 == NATIVE else HOST_COPY
        for op, reason in self.fallback_reasons().items():
            reasons.update(dict.fromkeys(expand(op), reason))
        for entry in self.host_fallback:  # one the target runs: why the host waits for it (host_syncs' reason)
            if self._native(entry.op):
                reasons.update(dict.fromkeys(expand(entry.op), self._reason(entry)))
        for op, target in TARGET_EQUIVALENTS.items():
            if target in codes:
                codes[op] = codes[target]
        if self.native_ops is not None:
            # A backend that implements only the out= variant of a structured op gets the
            # functional and in-place variants from PyTorch's generated composite (empty +
            # the out= kernel); this device runs the CPU's kernel for them directly.
            for op, delegate in structured_delegates().items():
                if op not in codes and delegate in codes:
                    codes[op] = codes[delegate]
                    if codes[op] & TORCH_MLIR and not _writes_or_aliases(op):
                        codes[op] |= VIA_OUT_KERNEL
            for op, code in empty_input_codes(self.native_ops.native).items():
                codes[op] = codes.get(op, default) | code
            for op in UNMARKED_WRITERS:
                codes[op] = codes.get(op, default) | UNMARKED_WRITES
                if self.rules.get("fallback_unmarked_writes_lost") and codes[op] & 3 in (HOST_COPY, HOST_PREDICTED):
                    reasons[op] = (reasons.get(op, default_reason) + "; the fallback copies back only the arguments "
                                   "its schema marks as written, so a BatchNorm's running_mean and running_var do "
                                   "not move in training mode there (fallback_unmarked_writes_lost). Fix: recompute "
                                   "them after training in a training-mode pass on the CPU "
                                   "(torch.optim.swa_utils.update_bn), or use track_running_stats=False, GroupNorm "
                                   "or LayerNorm")
            for op in row_major_ops(self.native_ops.native):
                codes[op] = codes.get(op, default) | ROW_MAJOR
        return codes, reasons, default, default_reason


def empty_input_codes(native: dict[str, str]) -> dict[str, int]:
    """op -> what the target does when a positional tensor argument is empty, for the ops it runs through its
    torch-mlir kernel (themselves, or their structured delegate: `div.Tensor` runs `div.out`): EMPTY_RAISES for
    the reductions without an identity, EMPTY_ZEROS for the rest but those of EMPTY_AS_CPU and the in-place
    variants (whether TorchNeuron writes the zeros into `self` is not in its source)."""
    import torch

    mlir = {op for op, source in native.items() if TORCH_MLIR_SOURCES in source}
    delegates = structured_delegates()
    found = {}
    for op in sorted(aten_ops()):
        if op not in mlir and delegates.get(op) not in mlir:
            continue
        base = op.split("::")[-1].split(".")[0].lower()
        if base in EMPTY_NO_IDENTITY:
            found[op] = EMPTY_RAISES
            continue
        if base in EMPTY_AS_CPU:
            continue
        name, _, overload = op.partition(".")
        schema = torch._C._get_schema(name, overload)
        if any(a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only for a in schema.arguments):
            continue  # in place
        found[op] = EMPTY_ZEROS
    return found


def _writes_or_aliases(op: str) -> bool:
    """Whether the op writes an argument (in place, out=) or returns a view: its schema marks an alias."""
    import torch

    name, _, overload = op.partition(".")
    schema = torch._C._get_schema(name, overload)
    return any(a.alias_info is not None for a in (*schema.arguments, *schema.returns))


def row_major_ops(native: dict[str, str]) -> list[str]:
    """The functional ops the target registers from its torch-mlir kernel, which allocates their results
    row-major (`_create_output_tensors_from_original`). Not their in-place and out= variants (those write
    the tensor given), nor ops it reaches only through a structured delegate (PyTorch allocates that
    result), nor ops that return a view."""
    found = []
    for op, source in sorted(native.items()):
        if TORCH_MLIR_SOURCES not in source or op not in aten_ops():
            continue
        if _writes_or_aliases(op):
            continue  # in place, out= or a view
        found.append(op)
    return found


def int32_argument_masks(native: dict[str, str], static: dict[str, dict[str, list]]) -> dict[str, int]:
    """op -> the arguments (bit i: schema argument i) in which the target turns a Python int into an int32 tensor,
    so that one beyond int32 fails (int_arguments_as_int32 rule): those of an op it registers from its torch-mlir
    kernel (or reaches through such a structured delegate) but the ones the registration keeps static
    (`static_argnums`, positions of the registered overload's positional arguments, and `static_argnames`)."""
    import torch

    def schema(op: str) -> Any:
        name, _, overload = op.partition(".")
        return torch._C._get_schema(name, overload)

    registered = {full: op for op, source in native.items() if TORCH_MLIR_SOURCES in source for full in expand(op)}
    statics = {full: spec for op, spec in static.items() for full in expand(op)}
    delegates = structured_delegates()
    masks = {}
    for op in sorted(aten_ops()):
        via = op if op in registered else delegates.get(op)
        if via not in registered:
            continue
        spec = statics.get(via, {"argnums": [], "argnames": []})
        positional = [a.name for a in schema(via).arguments if not a.kwarg_only]
        kept = {positional[i] for i in spec["argnums"] if i < len(positional)} | set(spec["argnames"])
        masks[op] = sum(1 << i for i, a in enumerate(schema(op).arguments) if a.name not in kept and i < 64)
    return masks


@cache
def aten_ops() -> frozenset[str]:
    """Every operator name in this torch, with overload ("aten::add.Tensor", "aten::relu")."""
    import torch

    return frozenset(torch._C._dispatch_get_all_op_names())


@cache
def structured_delegates() -> dict[str, str]:
    """op -> the out= op that implements it (`structured_delegate` in native_functions.yaml)."""
    import torchgen

    text = (Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml").read_text()
    delegates, current = {}, None
    for line in text.splitlines():
        if line.startswith("- func: "):
            current = "aten::" + line[len("- func: "):].split("(", 1)[0]
        elif current and line.strip().startswith("structured_delegate:"):
            delegates[current] = "aten::" + line.split(":", 1)[1].strip()
    return delegates


@cache
def _overloads() -> dict[str, tuple[str, ...]]:
    """Bare operator name -> its overloads, sorted: `expand` runs per op at device start and per reading."""
    index: dict[str, list[str]] = {}
    for name in aten_ops():
        index.setdefault(name.split(".", 1)[0], []).append(name)
    return {base: tuple(sorted(names)) for base, names in index.items()}


def expand(op: str) -> list[str]:
    """A full name stays itself; a bare name ("aten::nonzero") means all its overloads."""
    if "." in op.removeprefix("aten::"):
        return [op]
    return list(_overloads().get(op, ()))


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml") if not p.stem.endswith(("_ops", "_known_issues")))


def _line_of(text: str, needle: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    return 0


def load_native_ops(path: Path) -> NativeOps:
    text = path.read_text()
    try:
        data = tomllib.loads(text)
        native_ops = NativeOps(
            path=path,
            source_repository=data["source_repository"],
            source_commit=data["source_commit"],
            native=dict(data["native"]),
            cpu_fallback=dict(data.get("cpu_fallback", {})),
            metadata=dict(data.get("metadata", {})),
            torch_mlir_static={op: {"argnums": list(spec["argnums"]), "argnames": list(spec["argnames"])}
                               for op, spec in data.get("torch_mlir_static", {}).items()},
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"native-op table {path} is malformed ({type(exc).__name__}: {exc}). It needs "
            "source_repository, source_commit and a [native] table of op = source file; regenerate "
            "it with tools/gen_trn2_profile.py."
        ) from exc
    for table in ("native", "cpu_fallback", "metadata"):
        for op, source in getattr(native_ops, table).items():
            line = _line_of(text, f'"{op}" =')
            if not expand(op):
                raise UsageError(
                    f"{path}:{line}: [{table}] entry {op!r} names no ATen op of this torch. Fix the "
                    "name (e.g. 'aten::add.Tensor'), or regenerate the table with "
                    "tools/gen_trn2_profile.py for this torch version."
                )
            if not str(source).strip():
                raise UsageError(f"{path}:{line}: [{table}] entry {op!r} has no source file; every entry "
                                 "names the file of the target's source it comes from.")
    return native_ops


def load_known_issues(path: Path) -> KnownIssues:
    text = path.read_text()
    try:
        data = tomllib.loads(text)
        issues = tuple(KnownIssue(op=op, kind=e["kind"], reason=e["reason"], scope=e["scope"], source=e["source"],
                                  dtypes=tuple(e.get("dtypes", ())), overloads=tuple(e.get("overloads", ())))
                       for op, e in sorted(data["known_issues"].items()))
        known = KnownIssues(path=path, source_commit=data["source_commit"], issues=issues)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"known-issue table {path} is malformed ({type(exc).__name__}: {exc}). It needs source_commit and "
            "[known_issues.\"aten::op\"] tables of kind, reason, scope and source; regenerate it with "
            "tools/gen_trn2_profile.py."
        ) from exc
    for issue in known.issues:
        line = _line_of(text, f'"{issue.op}"]')
        if issue.kind not in KNOWN_ISSUE_KINDS:
            raise UsageError(f"{path}:{line}: known issue {issue.op!r} has kind {issue.kind!r}; valid kinds: "
                             f"{', '.join(KNOWN_ISSUE_KINDS)}.")
        if not expand(issue.op):
            raise UsageError(f"{path}:{line}: known issue {issue.op!r} names no ATen op of this torch. Fix the name "
                             "or regenerate the table with tools/gen_trn2_profile.py for this torch version.")
        strays = [name for name in issue.overloads
                  if name not in aten_ops() or not (name == issue.op or name.startswith(issue.op + "."))]
        if strays:
            raise UsageError(f"{path}:{line}: known issue {issue.op!r} has overloads {strays!r} that are not ATen "
                             f"overloads of {issue.op} in this torch (e.g. \"{issue.op}.Tensor\"). Fix the names, or "
                             "drop `overloads` to mean every overload.")
        bad = [d for d in issue.dtypes if not _is_dtype_name(d)]
        if bad:
            raise UsageError(f"{path}:{line}: known issue {issue.op!r} has dtypes {bad!r}, not torch dtype names "
                             "(e.g. \"bfloat16\", \"float16\"). Fix the names, or drop `dtypes` to mean every dtype.")
    return known


def _is_dtype_name(name: object) -> bool:
    import torch

    return isinstance(name, str) and isinstance(getattr(torch, name, None), torch.dtype)


def profile_path(name_or_path: str | Path = DEFAULT_PROFILE) -> Path:
    """The TOML file of a shipped profile's name or of a path; a UsageError naming the shipped ones when absent."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PROFILE_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise UsageError(
            f"device profile {str(name_or_path)!r} not found. Shipped profiles: "
            f"{', '.join(shipped_profiles())}; or pass the path of a .toml file (see "
            f"{PROFILE_DIR / 'trn2.toml'} for the format)."
        )
    return path


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> DeviceProfile:
    path = profile_path(name_or_path)
    text = path.read_text()
    try:
        data = tomllib.loads(text)
        entries = tuple(
            HostFallback(op=e["op"], reason=e["reason"], sources=tuple(e["sources"]))
            for e in data.get("host_fallback", [])
        )
        profile = DeviceProfile(
            name=data["name"],
            description=data.get("description", ""),
            memory_bytes=int(data["memory_bytes"]),
            sources=dict(data.get("sources", {})),
            host_fallback=entries,
            numerics=data.get("numerics", "host"),
            native_ops=load_native_ops(path.with_name(data["native_ops"])) if "native_ops" in data else None,
            rules={name: bool(data.get("rules", {}).get(name, False)) for name in RULES},
            known_issues=(load_known_issues(path.with_name(data["known_issues"])) if "known_issues" in data
                          else None),
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"device profile {path} is malformed ({type(exc).__name__}: {exc}). It needs `name`, "
            "`memory_bytes`, a [sources] table and [[host_fallback]] entries with op, reason, sources."
        ) from exc
    for name, value in data.get("rules", {}).items():
        if name not in RULES or not isinstance(value, bool):
            raise UsageError(f"device profile {path}:{_line_of(text, name)}: [rules] {name} = {value!r}: "
                             f"each rule is true or false, and the rules are {', '.join(RULES)}.")
    if profile.numerics not in NUMERICS_MODES:
        raise UsageError(f"device profile {path}:{_line_of(text, 'numerics')}: numerics = "
                         f"{profile.numerics!r} is not one of {', '.join(NUMERICS_MODES)}.")
    for entry in profile.host_fallback:
        line = _line_of(text, f'"{entry.op}"')
        missing = [s for s in entry.sources if s not in profile.sources]
        if not entry.sources or missing:
            raise UsageError(
                f"device profile {path}:{line}: host_fallback entry {entry.op!r} must name at least one "
                f"source from [sources]; unknown: {missing or '(none given)'}."
            )
        if not expand(entry.op):
            raise UsageError(
                f"device profile {path}:{line}: host_fallback entry {entry.op!r} names no ATen op of this "
                "torch. Use an operator name as the dispatcher spells it, e.g. 'aten::nonzero' (all "
                "overloads) or 'aten::repeat_interleave.Tensor'."
            )
    return profile
