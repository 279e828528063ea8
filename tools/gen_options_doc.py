"""Write the options table (torchferry.harness.options) into docs/check/cli.md, between its markers.

    python tools/gen_options_doc.py

tests/cli/test_flags.py fails while the document's table is not the table's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torchferry.harness.options import markdown_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "check" / "cli.md"
BEGIN, END = "<!-- options table: tools/gen_options_doc.py -->", "<!-- end of the options table -->"


def main() -> int:
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        print(f"{DOC}: the markers {BEGIN!r} and {END!r} are missing; add them where the table goes", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{markdown_table()}{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
