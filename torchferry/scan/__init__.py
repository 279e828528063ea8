"""`ferry scan`: find the code that ties a project to CUDA, and fix what is safe to fix.

Run it as ``ferry scan PATH...`` (``--fix`` rewrites, ``--diff`` previews,
``--format json|sarif`` for machines). The pieces: :mod:`command` (CLI), :mod:`rules` (one
module per rule), :mod:`engine` (libcst walk and rewrite), :mod:`syntax` (Python's own syntax tree,
for detection), :mod:`sources` (files and notebooks in and out), :mod:`rewrite` (the safe fixes),
and what rules ask of the code: :mod:`slots` (where torch consumes a device string), :mod:`tensors`
(which expressions hold tensors), :mod:`regions` (the code that runs every step), :mod:`host_ops`
(the device profile's data-dependent ops as Python calls), :mod:`reach` (which branches only CUDA takes). The result model (rules, findings, results) is torchferry/report/scan.py
and its renderers torchferry/report/scan_render.py.
"""
