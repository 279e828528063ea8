"""`ferry check`: the decision test (parity, full time, effective cost, reversible exit).

Module map, in reading order: ``command`` (CLI) -> ``config`` (the one frozen, validated
configuration) -> ``runner`` (one worker per device through the harness's worker protocol,
``worker`` inside it) -> ``timing``, ``resume``, ``exit``, ``cost`` (one result each; parity is
the harness's rule, torchferry.harness.parity) -> ``verdict``. The result model is
torchferry.report.check, rendered by torchferry.report.
"""
