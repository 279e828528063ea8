"""`ferry coverage`: what share of transformers' causal-LM architectures run unmodified on a device (issue 6)."""
