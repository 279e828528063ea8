"""`ferry plan`: will a full-size training job fit the target's cores, and what must a step cost at least.

One job per module: ``workload`` (what model), ``layout`` (how it is spread over the ranks, and the
checks on it), ``roofline`` (time and cost bounds from the trace and the price table), ``validate``
(the prediction against the built-in device's measured peak) and ``command``. The step itself is traced
by torchferry.workloads.footprint (the model on meta, the layout applied, the trace and its counters),
which every command that sizes a model shares.
"""
