"""The dated price table: the shipped ``prices.toml`` with a user's ``--prices FILE`` merged over it.

Loaded and type-checked once, before any worker starts: a price written as a string, a
missing date or source, or an unknown instance is a usage error naming the file, the entry,
the bad value and what is expected, never a traceback minutes into a run. A process parses a
table once (the check's configuration and its cost result ask for the same one): ``load_prices``
keeps the parsed table per file and its modification time, and hands each caller its own copy.
"""

from __future__ import annotations

import copy
import functools
import math
import tomllib
from pathlib import Path
from typing import Any

from torchferry.errors import UsageError

SHIPPED = Path(__file__).with_name("prices.toml")
REQUIRED = ("price_per_hour", "date", "source")
UTILISATIONS = (0.10, 0.25, 0.40, 0.60)  # fractions of an accelerator's peak FLOP/s at which costs are stated


def _number(value: Any) -> bool:
    """A real, finite number: TOML's ``nan`` and ``inf`` are floats that pass every ``> 0`` test but price nothing."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_instance(origin: str, name: str, entry: Any) -> None:
    where = f"{origin}: instance {name!r}"
    if not isinstance(entry, dict):
        raise UsageError(f"{where} is {entry!r}, not a table; write it as [instances.\"{name}\"] with "
                         f"{', '.join(REQUIRED)} (see {SHIPPED}).")
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise UsageError(f"{where} lacks {', '.join(missing)}; every entry needs a price_per_hour, a date and a source.")
    price = entry["price_per_hour"]
    if not _number(price) or price <= 0:
        raise UsageError(f"{where}: price_per_hour = {price!r} ({type(price).__name__}); it must be a positive, finite "
                         f"number of USD per hour, written without quotes (price_per_hour = 2.5).")
    accelerators = entry.get("accelerators", 1)
    if not isinstance(accelerators, int) or isinstance(accelerators, bool) or accelerators < 1:
        raise UsageError(f"{where}: accelerators = {accelerators!r}; it must be a whole number of at least 1.")
    for key in ("date", "source"):
        if not isinstance(entry[key], str) or not entry[key].strip():
            raise UsageError(f"{where}: {key} = {entry[key]!r}; it must be a non-empty string.")
    for key in ("hbm_bandwidth", "link_bandwidth"):
        if key in entry and not (_number(entry[key]) and entry[key] > 0):
            raise UsageError(f"{where}: {key} = {entry[key]!r}; it must be a positive, finite number of bytes per second "
                             f"(the instance's total), written without quotes ({key} = 4.64e13).")
    peaks = entry.get("peak_flops", {})
    if not isinstance(peaks, dict) or not all(_number(v) and v > 0 for v in peaks.values()):
        raise UsageError(f"{where}: peak_flops = {peaks!r}; it must be a table of positive, finite numbers per dtype "
                         "(peak_flops = { bfloat16 = 1e15 }).")
    if peaks and not (isinstance(entry.get("peaks_source"), str) and entry["peaks_source"].strip()):
        raise UsageError(f"{where} has peak_flops but no peaks_source; every peak needs its public source "
                         "(peaks_source = \"https://...\"), as every price does.")


def _read(path: Path, origin: str) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{origin} cannot be read as TOML ({exc}); see {SHIPPED} for the layout.") from exc


def load_prices(path: str | Path | None = None) -> dict:
    """The shipped table, with the user's file (same layout) merged over it; every entry type-checked."""
    return copy.deepcopy(_parsed(str(path) if path else None, _mtime(path)))


def _mtime(path: str | Path | None) -> int | None:
    """The user's file's modification time (a changed file is parsed again); None without one, or when unreadable
    (then the parse reports why)."""
    try:
        return Path(path).stat().st_mtime_ns if path else None
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _parsed(path: str | None, _mtime_ns: int | None) -> dict:
    table = _read(SHIPPED, str(SHIPPED))
    if path:
        origin = f"--prices {str(path)!r}"
        user = _read(Path(path), origin)
        for key in ("meta", "devices", "instances"):
            if key in user and not isinstance(user[key], dict):
                raise UsageError(f"{origin}: [{key}] must be a table (got {user[key]!r}).")
            table.setdefault(key, {}).update(user.get(key, {}))
        for name, entry in user.get("instances", {}).items():
            _check_instance(origin, name, entry)
    for name, entry in table["instances"].items():
        _check_instance(str(SHIPPED), name, entry)
    for device_type, instance in table.get("devices", {}).items():
        if instance not in table["instances"]:
            raise UsageError(f"[devices] {device_type} = {instance!r} names no instance of the price table. "
                             f"Valid: {', '.join(sorted(table['instances']))}.")
    return table


def instance_for(table: dict, device: str, explicit: str | None, option: str) -> str | None:
    """The instance that prices ``device``: the one passed with ``option``, else the table's default for its type."""
    if explicit is None:
        return table.get("devices", {}).get(device.split(":")[0])
    if explicit not in table["instances"]:
        raise UsageError(f"{option} {explicit!r} is not in the price table. Valid: {', '.join(sorted(table['instances']))}; "
                         "add it with --prices FILE.")
    return explicit
