"""`ferry scan PATH...`: report migration hazards, and with `--fix` rewrite the safe ones.

    ferry scan train.py                       # terminal report, grouped by file
    ferry scan src/ --diff                    # show the safe rewrites, change nothing
    ferry scan src/ --fix --diff              # show them, then write them
    ferry scan src/ --format sarif -o scan.sarif --fail-on warning

Exit status: NEGATIVE_RESULT when open findings at or above --fail-on remain or a file
could not be parsed (its hazards are unknown), USAGE for bad arguments or missing paths,
SUCCESS otherwise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchferry.env import Environment
from torchferry.errors import OutputError, UsageError
from torchferry.status import ExitStatus

FORMATS = ("text", "json", "sarif")
FAIL_ON = ("error", "warning", "info", "never")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="Python files, notebooks (.ipynb) or directories (searched for both)")
    parser.add_argument("--fix", action="store_true",
                        help="rewrite the findings that have a safe, behaviour-preserving fix, in place")
    parser.add_argument("--diff", action="store_true",
                        help="print the safe rewrites as a unified diff (before the report); "
                             "without --fix nothing is written")
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default: text)")
    parser.add_argument("-o", "--output", default="-", metavar="FILE",
                        help="write the report to FILE, atomically ('-' = stdout, the default)")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="error",
                        help="exit with status 3 when open findings of this severity or worse remain "
                             "(default: error; 'never' = only usage errors fail)")


def _render(result, fmt: str) -> str:  # noqa: ANN001 - ScanResult, imported lazily
    if fmt == "text":
        from torchferry.scan.text_report import render

        return render(result)
    if fmt == "json":
        from torchferry.scan.json_report import to_dict
    else:
        from torchferry.scan.sarif_report import to_dict
    return json.dumps(to_dict(result), indent=2)


def _write(text: str, output: str, env: Environment) -> None:
    if output == "-":
        env.out(text)
        return
    from torchferry.scan.sources import atomic_write

    path = Path(output)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, (text + "\n").encode("utf-8"))
    except OSError as exc:
        raise OutputError(f"ferry scan: cannot write the report to {output}: {exc.strerror}; "
                          "choose a writable path with --output.") from exc
    env.err(f"ferry scan: report written to {output}")


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    from torchferry.scan.model import ScanResult, Severity
    from torchferry.scan.rules import RULES
    from torchferry.scan.sources import discover, scan_file

    if args.diff and args.format != "text" and args.output == "-":
        raise UsageError(f"ferry scan: --diff and --format {args.format} would both go to stdout; "
                         "add --output FILE for the report.")
    files = discover(args.paths)
    results = [scan_file(path, RULES, fix=args.fix or args.diff, write=args.fix) for path in files]
    result = ScanResult(results, fixes_applied=args.fix)
    if args.diff:
        diff = "".join(r.diff for r in results)
        env.out(diff.rstrip("\n") if diff else "ferry scan: no safe rewrites.")
    for file in result.unparseable:
        env.err(f"ferry scan: {file.path}: {file.error}; not scanned there, not changed.")
    _write(_render(result, args.format), args.output, env)
    if args.fail_on != "never":
        threshold = Severity(args.fail_on).rank
        if result.unparseable or any(f.severity.rank >= threshold for f in result.open_findings()):
            return ExitStatus.NEGATIVE_RESULT
    return ExitStatus.SUCCESS
