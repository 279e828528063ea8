"""`ferry scan PATH...`: report migration hazards, and with `--fix` rewrite the safe ones.

    ferry scan train.py                       # terminal report, grouped by file
    ferry scan src/ --diff                    # show the safe rewrites, change nothing
    ferry scan src/ --fix --diff              # show them, then write them
    ferry scan src/ --fix --backup            # keep each original as <name>.bak
    ferry scan src/ --format sarif -o scan.sarif --fail-on warning
    ferry scan . --jobs 4 --max-file-size 5   # 4 files at a time; scan files up to 5 MB

Exit status: OUTPUT_ERROR when --fix left a safe fix unwritten (a read-only file without
--force, a file that cannot be written) or the report cannot be written; NEGATIVE_RESULT
when open findings at or above --fail-on remain or a file could not be parsed (its hazards
are unknown); USAGE for bad arguments or missing paths; SUCCESS otherwise.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from torchferry.env import Environment
from torchferry.errors import OutputError, UsageError
from torchferry.harness import options
from torchferry.status import ExitStatus

FORMATS = ("text", "json", "sarif")
FAIL_ON = ("error", "warning", "info", "never")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="Python files, notebooks (.ipynb) or directories (searched for both)")
    parser.add_argument("--fix", action="store_true",
                        help="rewrite the findings that have a safe, behaviour-preserving fix, in place "
                             "(read-only files are skipped)")
    parser.add_argument("--force", action="store_true", help="with --fix, rewrite read-only files too")
    parser.add_argument("--backup", action="store_true",
                        help="with --fix, keep each original file as <name>.bak (an existing .bak is never replaced)")
    parser.add_argument("--diff", action="store_true",
                        help="print the safe rewrites as a unified diff (before the report); "
                             "without --fix nothing is written")
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default: text)")
    parser.add_argument("-j", "--jobs", type=_jobs, default=None, metavar="N",
                        help="files scanned in parallel (default: the CPUs this process may use); "
                             "the report is the same for every N")
    parser.add_argument("--max-file-size", type=_megabytes, default=None, metavar="MB",
                        help="report files above MB megabytes as skipped instead of scanning them "
                             "(default: 1; 0 = scan every size)")
    parser.add_argument("--include-generated", action="store_true",
                        help="scan generated files too (a leading comment says '@generated', 'DO NOT EDIT', "
                             "'automatically generated' ...); by default they are reported as skipped")
    parser.add_argument("--select", type=_rule_ids, default=None, metavar="IDS",
                        help="run only these rules, by id, comma-separated (e.g. --select TF001,TF002); the report "
                             "lists only them (default: every rule; `docs/scan.md` lists the ids)")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="error",
                        help="exit with status 3 when open findings of this severity or worse remain "
                             "(default: error; 'never' = only usage errors fail)")
    options.add_arguments(parser, "scan", {"output": parser})


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of jobs; give a whole number >= 1 (e.g. --jobs 2)")
    return jobs


def _rule_ids(value: str) -> tuple[str, ...]:
    """The ids --select names, each checked against the rules (their table is read only here: it is light)."""
    from torchferry.scan.rules import RULES

    known = [rule.id for rule in RULES]
    ids = tuple(dict.fromkeys(part.strip().upper() for part in value.split(",") if part.strip()))
    unknown = [i for i in ids if i not in known]
    if not ids or unknown:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) if unknown else repr(value)} names no rule; give rule ids separated by commas, "
            f"from {', '.join(known)} (e.g. --select TF001,TF002)")
    return ids


def _megabytes(value: str) -> float:
    try:
        size = float(value)
    except ValueError:
        size = -1.0
    if not size >= 0 or size == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a size in MB; give a number >= 0 "
                                         "(e.g. --max-file-size 5, or 0 for no limit)")
    return size


def _render(result, fmt: str, argv: Sequence[str]) -> str:  # noqa: ANN001 - ScanResult, imported lazily
    from torchferry.report import scan_render

    if fmt == "text":
        return scan_render.render_text(result)
    if fmt == "json":
        return json.dumps(scan_render.to_json(result, argv), indent=2)
    return json.dumps(scan_render.to_sarif(result), indent=2)


def _write(text: str, output: str, env: Environment) -> None:
    if output == "-":
        env.out(text)
        return
    from torchferry.report.core import write_atomic

    path = Path(output)
    try:
        write_atomic(path, text + "\n")
    except OSError as exc:
        raise OutputError(f"cannot write the report to {output}: {exc.strerror}; "
                          "choose a writable path with --output.") from exc
    env.err(f"ferry scan: report written to {output}")


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    options.apply_defaults(args, "scan")
    from torchferry.report.scan import ScanResult, Severity
    from torchferry.scan.rules import RULES
    from torchferry.scan.sources import (DEFAULT_MAX_BYTES, SKIPPED_DIRS, Limits, WritePolicy, default_jobs, discover,
                                         scan_files)

    if args.diff and args.format != "text" and args.output == "-":
        raise UsageError(f"--diff and --format {args.format} would both go to stdout; "
                         "add --output FILE for the report.")
    if (args.force or args.backup) and not args.fix:
        raise UsageError(f"{'--force' if args.force else '--backup'} only applies to --fix; add --fix, or drop it.")
    skipped: list[str] = []
    files = discover(args.paths, skipped)
    for note in skipped:
        env.err(f"ferry scan: {note}")
    if not files:
        env.err(f"ferry scan: nothing to scan: no Python file or notebook under {', '.join(args.paths)}"
                + (f" ({len(skipped)} skipped, above)" if skipped else " (scanned: .py and .ipynb files; hidden folders, "
                   f"{', '.join(sorted(SKIPPED_DIRS))} are left out)") + ".")
    write = WritePolicy(force=args.force, backup=args.backup) if args.fix else None
    if args.max_file_size is None:
        max_bytes: int | None = DEFAULT_MAX_BYTES
    else:
        max_bytes = round(args.max_file_size * 1e6) or None
    limits = Limits(max_bytes=max_bytes, include_generated=args.include_generated)
    rules = tuple(r for r in RULES if args.select is None or r.id in args.select)
    results = scan_files(files, rules, fix=args.fix or args.diff, write=write, limits=limits,
                         jobs=args.jobs or default_jobs())
    result = ScanResult(results, rules=rules, fixes_applied=args.fix)
    if args.diff:
        diff = "".join(r.diff for r in results)
        env.out(diff.rstrip("\n") if diff else "ferry scan: no safe rewrites.")
    for file in result.unparseable:
        env.err(f"ferry scan: {file.path}: {file.error}; not scanned there, not changed.")
    for file in result.skipped:
        env.err(f"ferry scan: {file.path}: {file.skipped}.")
    for file in result.not_written:
        env.err(f"ferry scan: {file.path}: fixes not written: {file.not_written}.")
    _write(_render(result, args.format, getattr(args, "_argv", ())), args.output, env)
    if result.not_written:
        return ExitStatus.OUTPUT_ERROR
    if args.fail_on != "never":
        threshold = Severity(args.fail_on).rank
        if result.unparseable or any(f.severity.rank >= threshold for f in result.open_findings()):
            return ExitStatus.NEGATIVE_RESULT
    return ExitStatus.SUCCESS
