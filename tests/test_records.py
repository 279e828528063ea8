"""Typed records across processes (torchferry.records): the JSON form round-trips and refuses what it does not know."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

import pytest

from torchferry.harness.devices import Memory
from torchferry.harness.window import Compiled, GraphBreak, Ops, Predictions, Reading
from torchferry.records import Record, RecordError


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Inner(Record):
    name: str
    sizes: tuple[int, ...] = ()


@dataclass
class Outer(Record):
    inner: Inner
    colour: Colour
    many: list[Inner] = field(default_factory=list)
    by_name: dict[str, Inner] = field(default_factory=dict)
    maybe: Inner | None = None
    either: Inner | Colour | None = None
    free: dict = field(default_factory=dict)


def test_a_nested_record_round_trips_through_json_with_its_types():
    outer = Outer(inner=Inner("a", (1, 2)), colour=Colour.BLUE, many=[Inner("b")], by_name={"c": Inner("c", (3,))},
                  maybe=Inner("d"), either=Colour.RED, free={"k": [1, 2]})
    back = Outer.from_dict(json.loads(json.dumps(outer.to_dict())))
    assert back == outer
    assert isinstance(back.inner.sizes, tuple) and isinstance(back.colour, Colour) and isinstance(back.either, Colour)


def test_an_unknown_field_is_refused_by_name():
    with pytest.raises(RecordError, match="unknown Inner fields: colour"):
        Inner.from_dict({"name": "a", "colour": "red"})


def test_a_missing_field_without_default_is_refused_by_name_and_a_defaulted_one_takes_its_default():
    with pytest.raises(RecordError, match="Outer lacks the fields inner, colour"):
        Outer.from_dict({})
    assert Inner.from_dict({"name": "x"}) == Inner("x")


def test_the_windows_reading_has_one_json_form():
    reading = Reading(device="neuron:0", ops=Ops(10, {"aten::nonzero": 2}), memory=Memory(1024, "host RSS"),
                      compiled=Compiled("neuron", 2, 1, (GraphBreak("why", "x.py:3 in f", 1),), {"why": 1},
                                        ({"graph_name": "g0", "cache": "miss"},)),
                      predictions=Predictions(profile="trn2", capacity_bytes=1 << 30, numerics="target", signatures=3,
                                              compilations=2, cache_hits=1, calls=5, host_syncs={"item": 1},
                                              fallback_reasons={"aten::nonzero": "data-dependent"},
                                              known_issues=({"op": "aten::qr", "calls": 1},)))
    back = Reading.from_dict(json.loads(json.dumps(reading.to_dict())))
    assert back == reading
    assert back.ops.fallback_share == reading.ops.fallback_share and back.compiled.break_count == 1
