"""The one HTML page shell of every command's report.

A report is one self-contained file (inline styles, inline SVG plots, no network), opened from a CI
artifact or a laptop alike. Its Content-Security-Policy allows nothing it does not carry: no fetch,
and a script only where the page brings its own (coverage's sortable tables).
"""

from __future__ import annotations

from html import escape

STYLE = """body{font-family:system-ui,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
.plots{display:flex;flex-wrap:wrap;gap:12px} section{margin-bottom:2em} code{background:#f4f4f4}"""


def page(command: str, title: str, body: str, style: str = "", script: str = "") -> str:
    """The whole document for `ferry COMMAND`: ``title`` is plain text, ``body``, ``style`` and
    ``script`` are markup, CSS and JavaScript added to the shared ones."""
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:" + ("; script-src 'unsafe-inline'" if script else "")
    heading = f"ferry {command}: {escape(title)}"
    scripts = f"<script>\n{script.strip()}\n</script>\n" if script else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
            f"<title>{heading}</title>\n<style>\n{STYLE}\n{style.strip()}\n</style></head><body>\n"
            f"<h1>{heading}</h1>\n{body}\n{scripts}</body></html>\n")
