"""Built-in workloads, one per file (``llama``, ``gpt2``, ``bert``, ``mlp``; ``tokens`` their shared batches),
the loader for user workloads (``protocol``), and models named by the user (``model_source`` resolves the
name, ``hub`` builds it).

``load_workload(spec, options)`` in :mod:`torchferry.workloads.protocol` resolves a
built-in name, ``path/to/file.py:build`` or ``package.module:build``. Transformers
workloads are rebuilt elsewhere from their saved config; the plain-PyTorch ``mlp`` file
imports only torch so that the reversible-exit loader can import it by path without
torchferry.
"""

BUILTIN = ("llama", "gpt2", "bert", "mlp")
