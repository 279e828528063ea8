"""Device profiles: what a target runs on the host instead of the device, with sources.

A profile is a small TOML file (see profiles/trn2.toml). Users pass their own with
`torchferry.device.enable(profile="path.toml")` or `TORCHFERRY_PROFILE=path.toml`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from torchferry.errors import UsageError

PROFILE_DIR = Path(__file__).with_name("profiles")
DEFAULT_PROFILE = "trn2"


@dataclass(frozen=True, kw_only=True)
class HostFallback:
    op: str
    reason: str
    sources: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class DeviceProfile:
    name: str
    description: str
    memory_bytes: int
    sources: dict[str, str] = field(default_factory=dict)
    host_fallback: tuple[HostFallback, ...] = ()

    def fallback_reasons(self) -> dict[str, str]:
        """op name -> the reason the device reports (sources stay in the profile file)."""
        return {
            entry.op: f"{entry.reason}; sources: {', '.join(entry.sources)} in the {self.name} profile"
            for entry in self.host_fallback
        }


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path = DEFAULT_PROFILE) -> DeviceProfile:
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = PROFILE_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise UsageError(
            f"device profile {str(name_or_path)!r} not found. Shipped profiles: "
            f"{', '.join(shipped_profiles())}; or pass the path of a .toml file (see "
            f"{PROFILE_DIR / 'trn2.toml'} for the format)."
        )
    try:
        data = tomllib.loads(path.read_text())
        sources = dict(data.get("sources", {}))
        entries = tuple(
            HostFallback(op=e["op"], reason=e["reason"], sources=tuple(e["sources"]))
            for e in data.get("host_fallback", [])
        )
        profile = DeviceProfile(
            name=data["name"],
            description=data.get("description", ""),
            memory_bytes=int(data["memory_bytes"]),
            sources=sources,
            host_fallback=entries,
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"device profile {path} is malformed ({type(exc).__name__}: {exc}). It needs `name`, "
            "`memory_bytes`, a [sources] table and [[host_fallback]] entries with op, reason, sources."
        ) from exc
    for entry in profile.host_fallback:
        missing = [s for s in entry.sources if s not in profile.sources]
        if not entry.sources or missing:
            raise UsageError(
                f"device profile {path}: host_fallback entry {entry.op!r} must name at least one "
                f"source from [sources]; unknown: {missing or '(none given)'}."
            )
    return profile
