"""The harness core that every measuring command (check, coverage) is built on.

Module map, in reading order: ``modes`` (the one set of mode names), ``devices`` (resolution,
availability, sync and peak memory through torch.accelerator and the device module),
``window`` (the one measurement window: ops, fallbacks, memory, compile figures and an
emulating device's predictions over a span of work), ``parity`` (the fp64-relative rule and its tolerance, resolved once), ``prices`` (the
dated price table, type-checked), ``protocol`` (the parent side of the one worker protocol:
own session, process-group kill, per-phase timeouts), ``worker`` (the worker side and the one
case runner), ``launch`` (ranks through torch.distributed.run). Importing it imports no torch.
"""
