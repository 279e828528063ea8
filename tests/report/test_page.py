"""The shared HTML page shell: one self-contained document whose policy allows scripts only on a page
that carries its own, with the title escaped."""

from __future__ import annotations

from torchferry.report.page import page


def test_a_page_without_a_script_forbids_scripts_and_escapes_its_title():
    html = page("check", "llama <train>", "<p id='x'>body</p>", style=".go{color:green}")
    assert "script-src" not in html and "<script>" not in html
    assert "<title>ferry check: llama &lt;train&gt;</title>" in html and "<h1>ferry check: llama &lt;train&gt;</h1>" in html
    assert ".go{color:green}" in html and "<p id='x'>body</p>" in html
    assert html.rstrip().endswith("</body></html>")


def test_a_page_with_a_script_allows_inline_scripts_only():
    html = page("coverage", "neuron", "<table></table>", script="sort();")
    assert "default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'unsafe-inline'" in html
    assert "<script>\nsort();\n</script>" in html
