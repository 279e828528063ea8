"""The machine-readable report: the result model as versioned JSON (``meta.format_version``)."""

from __future__ import annotations

import json
import math
from typing import Any

from torchferry.check.results import CheckReport


def _clean(value: Any) -> Any:
    """JSON has no NaN/Infinity: they become strings so that strict parsers accept the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def render(report: CheckReport) -> str:
    return json.dumps(_clean(report.to_dict()), indent=2, sort_keys=False) + "\n"
