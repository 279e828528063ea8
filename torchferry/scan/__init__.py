"""`ferry scan`: find the code that ties a project to CUDA, and fix what is safe to fix.

Run it as ``ferry scan PATH...`` (``--fix`` rewrites, ``--diff`` previews,
``--format json|sarif`` for machines). The pieces: :mod:`model` (rules, findings,
results), :mod:`rules` (one module per rule), :mod:`engine` (libcst walk and
rewrite), :mod:`sources` (files and notebooks in and out), and one renderer per
output format (:mod:`text_report`, :mod:`json_report`, :mod:`sarif_report`).
"""
