"""Built-in workloads, one per file (``llama``, ``gpt2``, ``bert``, ``mlp``; ``tokens`` their shared batches),
the loader for user workloads (``protocol``), models named by the user (``model_source`` resolves the
name, ``hub`` builds it), and what one training step of a model needs, traced without allocating it
(``footprint``: `ferry plan`'s estimate, and the size check of a named model before it is built).

``load_workload(spec, options)`` in :mod:`torchferry.workloads.protocol` resolves a
built-in name, ``path/to/file.py:build`` or ``package.module:build``. Transformers
workloads are rebuilt elsewhere from their saved config; the plain-PyTorch ``mlp`` file
imports only torch so that the reversible-exit loader can import it by path without
torchferry.
"""

BUILTIN = ("llama", "gpt2", "bert", "mlp")
