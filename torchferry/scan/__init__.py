"""`ferry scan`: find the code that ties a project to CUDA, and fix what is safe to fix.

Run it as ``ferry scan PATH...`` (``--fix`` rewrites, ``--diff`` previews,
``--format json|sarif`` for machines). The pieces: :mod:`rules` (one module per
rule), :mod:`engine` (libcst walk and rewrite), :mod:`sources` (files and notebooks
in and out). The result model (rules, findings, results) is torchferry/report/scan.py
and its renderers torchferry/report/scan_render.py.
"""
