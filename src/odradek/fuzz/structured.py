"""Well-formed requests with adversarial field values, built from kio's schema classes.

Byte mutations mostly break a frame's structure, so the decoder rejects it before a handler
runs. These requests decode, and carry what a handler must survive: boundary integers,
negative sizes and epochs, empty, long, unicode and path-like names, nulls where a field is
nullable, empty and repeated arrays, garbage where records go. One walker serves two drivers:
a ``random.Random`` per case for volume, and Hypothesis (``HypothesisChoices``) in the tests, so a
failing request shrinks to a minimal one.
"""
from __future__ import annotations

import dataclasses
import datetime
import random
import types
import typing
import uuid
from functools import cache
from typing import Any, Protocol, Sequence

from odradek.broker import api_keys
from odradek.fuzz import templates
from odradek.protocol import kio_util

INT_BOUNDS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


class Choices(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...
    def pick(self, options: Sequence[Any]) -> Any: ...


class RandomChoices:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.rng.randrange(len(options))]


class HypothesisChoices:
    """Draws from a Hypothesis ``data`` object (``st.data()``): shrinkable choices."""

    def __init__(self, data: Any) -> None:
        from hypothesis import strategies as st

        self._data, self._st = data, st

    def integer(self, lo: int, hi: int) -> int:
        return self._data.draw(self._st.integers(lo, hi))

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self._data.draw(self._st.integers(0, len(options) - 1))]


def _names(t: templates.Topology, api_key: int) -> list[str]:
    """Topic-ish names; a Produce, DeleteRecords or WriteTxnMarkers never names the guarded
    topic, whose data must not change."""
    return [t.sink if api_key in (api_keys.PRODUCE, api_keys.DELETE_RECORDS, api_keys.WRITE_TXN_MARKERS) else t.guarded, t.sink, "fuzz-new-topic", "", "x" * 249, "x" * 250, "a" * 300, "t\u00f3pic-\u00fc",
            "\U0001f600", "../escape", "..", ".", "a/b", "with space", "nul\x00byte", "\ud7ff", "__consumer_offsets"]


@cache
def _plan(cls: type) -> tuple[tuple[str, str, Any, bool, bool], ...]:
    """Per field: (name, kafka type or "entity", nested class, is a tuple, nullable)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nested = kio_util._nested_entity(hint)
        args = typing.get_args(hint)
        nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
        inner = next((a for a in args if a is not type(None)), hint) if nullable else hint
        is_tuple = typing.get_origin(inner) is tuple
        kind = "entity" if nested is not None else f.metadata.get("kafka_type", "")
        out.append((f.name, kind, nested, is_tuple, nullable))
    return tuple(out)


class Walker:
    def __init__(self, choices: Choices, topology: templates.Topology, api_key: int) -> None:
        self.c = choices
        self.names = _names(topology, api_key)

    def integer(self, kind: str, name: str) -> int:
        bits = INT_BOUNDS[kind]
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        how = self.c.integer(0, 5)
        if how == 0:
            return self.c.pick([lo, -2, -1, 0, 1, hi])
        if how == 1:
            return self.c.integer(lo, hi)
        if how == 2 and bits >= 32:
            return self.c.pick([1 << 20, 1 << 30, 1_700_000_000_000 if bits == 64 else 1 << 24])
        return self.c.integer(-1, 8)  # partition indexes, epochs, offsets, ids of this topology

    def string(self) -> str:
        if self.c.integer(0, 3) == 0:
            return "".join(chr(self.c.integer(0x20, 0x7e)) for _ in range(self.c.integer(0, 12)))
        return self.c.pick(self.names)

    def records(self) -> bytes | None:
        how = self.c.integer(0, 4)
        if how == 0:
            return None
        if how == 1:
            return bytes(self.c.integer(0, 255) for _ in range(self.c.integer(0, 70)))
        if how == 2:
            return b""
        return templates.batch(self.c.integer(1, 3), producer_id=self.c.pick([-1, 7, 4242]),
                               producer_epoch=self.c.pick([-1, 0, 1]), base_sequence=self.c.pick([-1, 0, 5]))

    def scalar(self, kind: str, name: str) -> Any:
        if kind in INT_BOUNDS:
            return self.integer(kind, name)
        if kind == "bool":
            return self.c.integer(0, 1) == 1
        if kind == "string":
            return self.string()
        if kind == "timedelta_i32":
            return datetime.timedelta(milliseconds=self.c.pick([0, 1, 10, 1000, 60_000, (1 << 31) - 1]))
        if kind == "timedelta_i64":  # OffsetCommit v2-4's retention time; -1 is "broker default"
            return datetime.timedelta(milliseconds=self.c.pick([-1, 0, 1, 60_000, (1 << 40)]))
        if kind == "uuid":
            return self.c.pick([uuid.UUID(int=0), uuid.UUID(int=1), uuid.UUID(int=(1 << 128) - 1)])
        if kind == "records":
            return self.records()
        if kind == "bytes":  # group protocol metadata and assignments: opaque to the broker
            return bytes(self.c.integer(0, 255) for _ in range(self.c.integer(0, 24)))
        if kind == "float64":  # client quota values: byte rates, percentages, and what no quota can be
            return self.c.pick([0.0, 1.0, 1.5, 1048576.0, 200.0, -1.0, 1e300, float("nan"), float("inf")])
        raise ValueError(f"no generator for kafka type {kind!r}")

    def entity(self, cls: type, depth: int = 0) -> Any:
        kwargs: dict[str, Any] = {}
        for name, kind, nested, is_tuple, nullable in _plan(cls):
            if nullable and self.c.integer(0, 5) == 0:
                kwargs[name] = None
            elif kind == "entity":
                n = 0 if depth > 3 else self.c.pick([0, 1, 1, 1, 2, 3])
                kwargs[name] = tuple(self.entity(nested, depth + 1) for _ in range(n))
            elif is_tuple:
                kwargs[name] = tuple(self.scalar(kind, name) for _ in range(self.c.pick([0, 1, 2, 3])))
            else:
                value = self.scalar(kind, name)
                kwargs[name] = value if value is not None or nullable else b""
        return cls(**kwargs)


def request(choices: Choices, topology: templates.Topology, api_key: int, version: int) -> bytes:
    """One request (the frame without size prefix) with values from ``choices``."""
    walker = Walker(choices, topology, api_key)
    cls = kio_util.request_class(api_key, version)
    body = walker.entity(cls)
    client_id = None if choices.integer(0, 9) == 0 else walker.string()
    header = {"request_api_key": api_key, "request_api_version": version,
              "correlation_id": choices.integer(-(1 << 31), (1 << 31) - 1), "client_id": client_id}
    return kio_util.encode_entity(cls.__header_schema__, header, body)[4:]
