"""Typed records that cross a process boundary as JSON: one ``to_dict``/``from_dict`` rule for all of them.

A worker and its parent (a check worker and the runner, a script's recorders and `ferry check`, a
coverage worker and the sweep) hand each other dataclasses, never loose dicts: each side reads
fields by name, so a renamed field fails where it is read, not as a missing key three modules later.
``Record`` gives a dataclass its JSON form:

- ``to_dict()``: plain JSON values (nested records as dicts, tuples as lists, mappings as dicts,
  enums as their values);
- ``from_dict(data)``: the same record back, nested records, tuples and enums rebuilt from the
  field types; a key the record does not have is refused by name (a bug of the writer's, or a
  record of another version), as ``torchferry.coverage.job.CoverageJob`` does. A missing key takes
  the field's default, and fails by name when the field has none.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

R = TypeVar("R", bound="Record")


class RecordError(TypeError):
    """A record's JSON does not match its fields: a bug of the writer's, never the user's."""


class Record:
    """Mixin of a dataclass that crosses processes as JSON (see the module docstring)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        if not isinstance(data, Mapping):
            raise RecordError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise RecordError(f"unknown {cls.__name__} fields: {', '.join(unknown)} (fields: {', '.join(fields)})")
        missing = [n for n, f in fields.items() if n not in data and f.init
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise RecordError(f"{cls.__name__} lacks the fields {', '.join(missing)}")
        hints = _hints(cls)
        return cls(**{name: _build(hints[name], value, f"{cls.__name__}.{name}")
                      for name, value in data.items() if fields[name].init})


def plain(value: Any) -> Any:
    """``value`` as plain JSON values: records and other dataclasses as dicts, tuples as lists, enums as values."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, Record):
            return value.to_dict()
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(hint: Any, value: Any, where: str) -> Any:
    """``value`` (plain JSON) as the type ``hint`` says: records, tuples, enums and optionals rebuilt."""
    if value is None or hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        for option in options:  # a record (or enum) among the options is rebuilt; plain values pass
            if _is_record(option) and isinstance(value, Mapping) or _is_enum(option):
                try:
                    return _build(option, value, where)
                except (RecordError, ValueError):
                    continue
        return _build(options[0], value, where) if len(options) == 1 else value
    if _is_record(hint):
        return hint.from_dict(value)
    if _is_enum(hint):
        return hint(value)
    if origin is tuple:
        item = args[0] if args else Any
        return tuple(_build(item, v, where) for v in value)
    if origin is list:
        item = args[0] if args else Any
        return [_build(item, v, where) for v in value]
    if origin in (dict, Mapping):
        item = args[1] if len(args) == 2 else Any
        return {k: _build(item, v, where) for k, v in value.items()}
    return value


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Record)


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)
