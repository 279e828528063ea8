"""`ferry check`: the decision test (parity, full time, effective cost, reversible exit) of one source.

Module map, in reading order:

- ``command`` (the CLI: options from the one table, torchferry.harness.options) -> ``config`` (the one
  frozen, validated ``CheckConfig``) and ``sources`` (what runs: a build() workload or a model by
  name, or a script command, typed) -> ``lifecycle`` (the one report lifecycle every source runs);
- the two pipelines it runs: ``runner`` (a built workload, one worker per device through the
  harness's worker protocol; ``worker`` inside each, ``warm`` before them) and ``script`` (an
  unchanged script run on each side, its recorders in every process of the command);
- one module per result, each owning its capture half and its judgement for both sources:
  ``parity`` (with ``convergence``, a script's), ``timing``, ``resume``, ``exit`` (with ``exit_loader``, run where torchferry is
  absent), ``cost``, ``rehearsal`` (with ``profiling``, the device's trace activities), and ``streams``
  (one random stream on both sides of any accelerator) ->
  ``verdict``.

The result model is torchferry.report.check, rendered by torchferry.report.
"""
