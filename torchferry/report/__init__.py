"""Result models and their renderers, for every command; imports no command (layering: .importlinter).

Module map: ``meta`` (the shared ``meta`` and ``failure`` blocks), ``comparison`` (one tensor
judged by the parity rule), ``check``, ``coverage``, ``plan`` and ``scan`` (each command's
result model and ``FORMAT_VERSION``), ``core`` (the reporter protocol and the one atomic writer),
``jsonreport`` (any model as versioned JSON), ``text``/``htmlreport`` (check), ``coverage_render``,
``plan_render`` and ``scan_render`` (the other commands), ``page`` (the one HTML page frame), ``svg``
(inline plots).
"""
