"""The machine-readable rendering of any result model: versioned JSON (``meta.format_version``).

Dataclasses become objects, enums their values, and non-finite floats strings (``"inf"``,
``"nan"``) so that strict parsers accept the file.
"""

from __future__ import annotations

import dataclasses
import json
import math
from enum import Enum
from typing import Any


def to_data(value: Any) -> Any:
    """Plain JSON data from a result model (dataclasses, enums, dicts, lists, numbers, strings)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_data(v) for v in value]
    return value


def render(result: Any) -> str:
    return json.dumps(to_data(result), indent=2) + "\n"
