"""`ferry coverage`: what share of transformers' causal-LM architectures run unmodified on a device (issue 6).

Module map: ``command`` (CLI) -> ``config`` (validated before any case; ``methods``: torchferry's
method or the vendor's) -> ``job`` (one architecture's typed job) -> ``shard`` (``--shard K/N``'s
split) -> ``sweep`` (worker processes through the harness's worker protocol, ``worker`` inside them,
stepping a suite's model as a ``workload`` and reading its ``predict``-ions for the target) ->
``store`` (rows as they finish) -> ``results`` (summary, headline, baseline). ``configs`` holds the
shrinking rules; ``suites`` the model families. The result model is torchferry.report.coverage.
"""
