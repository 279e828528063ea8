"""The typed record one process of an unchanged script leaves (check/script/recorder.py writes it; the runner reads it).

Its parts are the result modules' own types: the final parameters (check/parity.py), the checkpoints
written (check/exit.py), the rehearsal (check/rehearsal.py), so that each result judges its part of a
script's record as it judges a built workload's capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchferry.check.convergence import FinalParameters, ModuleTrace
from torchferry.check.exit import CheckpointWrite
from torchferry.check.rehearsal import Placement, RehearsalRecord
from torchferry.harness.devices import Memory
from torchferry.records import Record


@dataclass(kw_only=True)
class ScriptError(Record):
    """The uncaught exception that ended the process: its slug, type and message, and the user's line."""

    kind: str
    type: str
    message: str
    traceback: str
    file: str | None
    line: int | None
    code: str | None
    step: int
    at_s: float = 0.0  # when it was raised, from the spawn: the first rank that raised is the cause
    placement: Placement | None = None


@dataclass(kw_only=True)
class ScriptRecord(Record):
    """What one process of the command recorded (check/script/runner.py reads it; the result modules judge it)."""

    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    argv: list[str]
    started_s: float
    seed: int | None
    noise: bool  # the reference's noise run: every parameter moved by one ulp before training
    script_seeded: bool = False
    steps: int = 0  # optimizer steps
    backwards: int = 0  # backward() calls on a scalar
    forwards: int = 0  # calls of an outermost module before any backward: an inference script's steps
    forward_ends_s: list[float] = field(default_factory=list)
    step_ends_s: list[float] = field(default_factory=list)
    backward_ends_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)  # one per backward() on a scalar
    loss_steps: list[int] = field(default_factory=list)  # the optimizer steps done before each loss
    grad_norms: list[float | None] = field(default_factory=list)  # one per optimizer step
    checkpoints: list[CheckpointWrite] = field(default_factory=list)
    kept_files: list[str] = field(default_factory=list)  # files of the user's the script overwrote, copied first
    parameters: list[FinalParameters] = field(default_factory=list)  # one per optimizer that stepped
    buffers: FinalParameters | None = None  # the floating-point buffers of the models that stepped
    device: str | None = None  # where the losses lived
    peak_memory: Memory | None = None
    stopped: str | None = None  # why the record was written: None (the process ended), --steps N, error, ...
    error: ScriptError | None = None
    rehearsal: RehearsalRecord | None = None
    ended_s: float | None = None
    waiting_at: str | None = None  # the user's line the main thread was at when the parent asked for the record
    first_backward_shapes: list[list] | None = None
    first_backward_dtypes: list[str] | None = None  # floating dtypes the first backward's graph saved ("bfloat16")
    modules: ModuleTrace | None = None  # the first forward's module outputs and the first backward's gradients
    flops_per_step: float | None = None  # FLOPs per step over one iteration after step 1, in a run asked to count them
    counted_step: int | None = None  # the first step the FLOPs were counted in (its time is the counter's too)
    steps_counted: int = 0  # the steps the count spanned: one per optimizer that steps in an iteration
    flops_skipped: str | None = None  # why a run asked to count did not

    @property
    def inference(self) -> bool:
        """The script called its model and never backward: its steps are the model's calls."""
        return bool(self.forwards and not self.backwards)

    @property
    def ends_s(self) -> list[float]:
        """When each of the script's steps ended: optimizer steps; else backward calls; else (inference) calls of the
        model."""
        return self.step_ends_s if self.steps else self.backward_ends_s if self.backwards else self.forward_ends_s

    @property
    def trained(self) -> bool:
        return bool(self.losses or self.steps or self.forwards or self.checkpoints or self.error)
