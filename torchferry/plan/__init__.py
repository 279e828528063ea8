"""`ferry plan`: will a full-size training job fit the target's cores, and what must a step cost at least.

One job per module: ``workload`` (what model), ``layout`` (how it is spread over the ranks, and the
checks on it), ``parallelize`` (FSDP2, TP and activation checkpointing applied to a model),
``counting`` and ``trace`` (one training step traced on FakeTensor at the full world size),
``roofline`` (time and cost bounds from the trace and the price table), ``search``,
``validate`` (the prediction against the built-in device's measured peak) and ``command``.
"""
