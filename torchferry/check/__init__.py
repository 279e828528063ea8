"""`ferry check`: the decision test (parity, full time, effective cost, reversible exit).

Module map, in reading order: ``command`` (CLI) -> ``runner`` (one subprocess per device,
``worker`` inside it) -> ``parity``, ``timing``, ``resume``, ``exit``, ``cost`` (one result
each) -> ``verdict`` -> ``results`` (the one result model, rendered by ``torchferry.report``).
"""
