"""What one training step of a model needs, traced on FakeTensor without allocating it: memory per
category at the step's peak, FLOPs, bytes moved and collectives. `ferry plan`'s estimate, and the size
check of every command that builds a model by name, so that both give the same number for the same model.

``model`` (the model on the meta device, its batch and loss, the config's sizes checked), ``parallelize``
(FSDP2, TP and activation checkpointing applied), ``counting`` (FLOPs, bytes, collectives per op),
``trace`` (one step of one rank under the fake process group, with its predicted time and progress) and
``fit`` (a named model's need on each side of a run against the host's memory and the device's capacity).
"""
