"""The harness core that every measuring command (check, coverage, plan) is built on.

Module map, in reading order: ``modes`` (the one set of mode names), ``options`` (the one
vocabulary of the commands' flags: meaning, unit, range, the sources each applies to) and
``bounds`` (the numeric ranges it checks), ``devices`` (resolution, availability, sync and peak
memory through torch.accelerator and the device module), ``window`` (the one measurement window:
ops, fallbacks, memory, compile figures and an emulating device's predictions over a span of
work), ``case`` (a model on one device: copies, steps, probes and the typed capture), ``parity``
(the fp64-relative rule and its tolerance, resolved once), ``portable`` (the digest and output
naming a torchferry-free process shares), ``prices`` (the dated price table, type-checked),
``protocol`` (the parent side of the one worker protocol: own session, process-group kill,
per-phase timeouts), ``worker`` (the worker side and the one case runner), ``launch`` (ranks
through torch.distributed.run), ``outlock`` (one writer per output folder), ``signals``
(SIGTERM and SIGHUP stop a command as Ctrl-C does). Importing it imports no torch.
"""
