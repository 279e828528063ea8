"""`ferry coverage`: what share of transformers' causal-LM architectures run unmodified on a device (issue 6).

Module map: ``command`` (CLI) -> ``config`` (validated before any case) -> ``sweep`` (worker
processes through the harness's worker protocol, ``worker`` inside them) -> ``store`` (rows as
they finish) -> ``results`` (summary, headline, baseline). ``configs`` holds the shrinking rules.
The result model is torchferry.report.coverage.
"""
