"""Checks every length and count in a Kafka message against the bytes that follow it, and
every null against the schema, before kio decodes the message.

kio's native reader sizes an array's storage from the count on the wire before reading an
element: an int32 count of 2^31-1 in any request makes it ask for 32 GiB, and Rust aborts the
whole process when an allocation fails, so one 60-byte frame would kill the broker (the protocol
fuzzer, odradek.fuzz, sends such frames). Apache Kafka refuses such a message as Kafka's
``readArraySize`` does: a count or length larger than the bytes left is malformed. kio also
reads a null (count or length -1) where the schema allows none as None, which handlers then
iterate or echo back and fail on; Kafka's generated readers refuse those
as malformed too, and so does this. The checks
are compiled once per message class from kio's own schema (the field types kio's writer
dispatches on), and a run of fixed-size fields, or an array of fixed-size structs, is skipped
in one step, so a request costs a few microseconds per variable-size element.
"""
from __future__ import annotations

import dataclasses
import struct
import types
import typing
from functools import cache
from typing import Any, Callable

from odradek.protocol.schema import SchemaError, UnsignedVarInt

# (buffer, offset, end) -> offset after the value; raises WireBoundsError
Check = Callable[[Any, int, int], int]

_FIXED = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
          "uuid": 16}
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


class WireBoundsError(SchemaError):
    """A length or count says more than the message holds."""


class UnknownTaggedField(Exception):
    """A tagged field whose tag the schema does not know (a newer client's field): Kafka's
    readers skip it (KIP-482), kio's raises KeyError, so ``checked`` cuts it out first."""

    def __init__(self, count_at: int, count_end: int, count: int, start: int, end: int) -> None:
        super().__init__(f"unknown tagged field at offset {start}")
        self.count_at, self.count_end, self.count = count_at, count_end, count
        self.start, self.end = start, end

    def cut(self, buf: Any) -> bytes:
        """``buf`` without the field, its section's count one less."""
        count: list[bytes] = []
        UnsignedVarInt.encode(self.count - 1, count)
        return b"".join((bytes(buf[:self.count_at]), *count, bytes(buf[self.count_end:self.start]),
                         bytes(buf[self.end:])))


def check_message(cls: type, buf: Any, offset: int = 0) -> int:
    """Check the message of kio class ``cls`` at ``offset``; the offset after it. Raises
    UnknownTaggedField at the first tagged field the schema does not know (``checked`` cuts
    them out)."""
    return _compiled(cls)(buf, offset, len(buf))


def checked(cls: type, buf: Any, offset: int = 0) -> tuple[Any, int]:
    """``check_message``, with every tagged field the schema does not know cut out, as Kafka's
    readers skip them: (the message's bytes, the offset after it). ``buf`` itself unless a
    field was cut. One pass per unknown field: clients of today send none."""
    while True:
        try:
            return buf, check_message(cls, buf, offset)
        except UnknownTaggedField as unknown:
            buf = unknown.cut(buf)


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    value, pos = UnsignedVarInt.decode(buf, pos)
    if pos > end:
        raise WireBoundsError(f"varint ending at offset {pos}, past the end of its field ({end})")
    return value, pos


def _fits(pos: int, n: int, end: int, what: str) -> int:
    if n > end - pos:
        raise WireBoundsError(f"{what} of {n} at offset {pos} with {end - pos} bytes left")
    return pos + n


def _skip(n: int) -> Check:
    def check(buf: Any, pos: int, end: int) -> int:
        return _fits(pos, n, end, "field")
    return check


def _null(what: str, pos: int) -> WireBoundsError:
    return WireBoundsError(f"null {what} at offset {pos}, where the schema allows none")


def _sized(kind: str, flexible: bool, nullable: bool) -> Check:
    """A string, bytes or records: int16 (strings) or int32 length, or a varint length + 1;
    a negative length (zero, compact) is null."""
    if flexible:
        def compact(buf: Any, pos: int, end: int) -> int:
            n, pos = _uvarint(buf, pos, end)
            if n == 0 and not nullable:
                raise _null(kind, pos)
            return _fits(pos, n - 1, end, kind) if n > 1 else pos
        return compact
    width, unpack = (2, _I16) if kind == "string" else (4, _I32)

    def legacy(buf: Any, pos: int, end: int) -> int:
        _fits(pos, width, end, kind + " length")
        (n,) = unpack(buf, pos)
        pos += width
        if n < 0 and not nullable:
            raise _null(kind, pos)
        return _fits(pos, n, end, kind) if n > 0 else pos
    return legacy


def _array(item: Check, item_size: int | None, flexible: bool, nullable: bool,
           tagged_after: int | None = None) -> Check:
    """An array: int32 count (negative: null) or varint count + 1 (0: null); each element takes at
    least one byte, fixed-size ones exactly ``item_size``. ``tagged_after``: the elements are
    flexible structs of that many fixed-size bytes and then their tagged fields, which are
    nearly always none (a single zero byte): read without a call per element."""
    least = max(1, item_size or tagged_after or 0)

    def check(buf: Any, pos: int, end: int) -> int:
        if flexible:
            n, pos = _uvarint(buf, pos, end)
            n -= 1
        else:
            _fits(pos, 4, end, "array count")
            (n,) = _I32(buf, pos)
            pos += 4
        if n <= 0:
            if n < 0 and not nullable:
                raise _null("array", pos)
            return pos
        if n * least > end - pos:
            raise WireBoundsError(f"array of {n} at offset {pos} with {end - pos} bytes left")
        if item_size is not None:
            return pos + n * item_size
        if tagged_after is not None:
            for _ in range(n):
                pos += tagged_after
                if pos < end and buf[pos] == 0:
                    pos += 1
                else:
                    pos = item(buf, pos - tagged_after, end)
            return pos
        for _ in range(n):
            pos = item(buf, pos, end)
        return pos
    return check


def _tagged(known: dict[int, Check]) -> Check:
    """The tagged-field section closing a flexible struct: count, then (tag, size, value)."""
    def check(buf: Any, pos: int, end: int) -> int:
        count_at = pos
        n, pos = _uvarint(buf, pos, end)
        count_end = pos
        if n > end - pos:
            raise WireBoundsError(f"{n} tagged fields at offset {pos} with {end - pos} bytes left")
        for _ in range(n):
            start = pos
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            field_end = _fits(pos, size, end, "tagged field")
            if tag not in known:
                raise UnknownTaggedField(count_at, count_end, n, start, field_end)
            try:
                known[tag](buf, pos, field_end)
            except UnknownTaggedField:  # cutting it would leave this field's size wrong
                raise WireBoundsError(f"an unknown tagged field inside tagged field {tag}") from None
            pos = field_end
        return pos
    return check


def _nullable_entity(entity: Check) -> Check:
    """KIP-893's nullable struct: an int8 marker (-1 null) before the struct."""
    def check(buf: Any, pos: int, end: int) -> int:
        _fits(pos, 1, end, "struct marker")
        return pos + 1 if buf[pos] == 0xFF else entity(buf, pos + 1, end)
    return check


def _sequence(checks: list[Check]) -> Check:
    def check(buf: Any, pos: int, end: int) -> int:
        for c in checks:
            pos = c(buf, pos, end)
        return pos
    return check


def _nested(hint: Any) -> tuple[type | None, bool, bool]:
    """(entity class inside the hint or None, whether it is a tuple, whether it is nullable)."""
    args = typing.get_args(hint)
    nullable = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    inner = next((a for a in args if a is not type(None)), hint) if nullable else hint
    is_tuple = typing.get_origin(inner) is tuple
    element = typing.get_args(inner)[0] if is_tuple else inner
    return (element if isinstance(element, type) and dataclasses.is_dataclass(element) else None), is_tuple, nullable


@cache
def _compiled(cls: type) -> Check:
    return _entity(cls)[0]


@cache
def _entity(cls: type) -> tuple[Check, int | None, int | None]:
    """The check of one struct; its size when every field is fixed-size and it is not
    flexible; the size of its fields when it is flexible and they are all fixed-size."""
    flexible = bool(getattr(cls, "__flexible__", False))
    hints = typing.get_type_hints(cls)
    checks: list[Check] = []
    tags: dict[int, Check] = {}
    run = 0  # fixed-size bytes not yet emitted as one skip
    total: int | None = 0  # the struct's size while every field is fixed-size
    for f in dataclasses.fields(cls):
        nested, is_tuple, nullable = _nested(hints[f.name])
        kind = f.metadata.get("kafka_type")
        size: int | None = None
        if nested is not None:
            inner, inner_size, inner_tagged_after = _entity(nested)
            if is_tuple:
                check = _array(inner, inner_size, flexible, nullable, inner_tagged_after)
            elif nullable:
                check = _nullable_entity(inner)
            else:
                check, size = inner, inner_size
        elif kind in _FIXED:
            size = _FIXED[kind]
            check = _array(_skip(size), size, flexible, nullable) if is_tuple else _skip(size)
            if is_tuple:
                size = None
        elif kind in ("string", "bytes", "records"):
            legacy = cls.__name__ == "RequestHeader" and f.name == "client_id"  # always int16 length
            tagged = f.metadata.get("tag") is not None  # kio reads a tagged field's null as its value
            item = _sized(kind, flexible and not legacy, (nullable and not is_tuple) or tagged)
            check = _array(item, None, flexible, nullable) if is_tuple else item
        else:
            raise TypeError(f"{cls.__qualname__}.{f.name}: no bounds check for kafka type {kind!r}")
        tag = f.metadata.get("tag")
        if tag is not None:
            tags[tag] = check
            continue
        if size is not None:
            run += size
            total = None if total is None else total + size
            continue
        total = None
        if run:
            checks.append(_skip(run))
            run = 0
        checks.append(check)
    if run:
        checks.append(_skip(run))
    if flexible:
        checks.append(_tagged(tags))
        return _sequence(checks), None, total
    return _sequence(checks), total, None
