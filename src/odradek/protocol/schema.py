"""A tiny declarative codec for Kafka's message schemas.

Kafka's JSON message definitions translate field by field into these types, so a request layout
reads like its schema and the encoding rules live in one place. Both encodings are covered:
classic (int16/int32 length prefixes) and flexible (KIP-482: unsigned-varint "compact" lengths
plus a tagged-field section closing every struct, which the schema spells out explicitly as a
`TaggedFields` field). Encoders append to a list of parts that the caller joins once; decoders
read a memoryview at an offset and return (value, next_offset) so nothing is copied but strings.
Structs decode to tuples in field order: cheap, and the caller names the fields by unpacking.
"""
from __future__ import annotations

import struct
from typing import Any, Sequence


class SchemaError(ValueError):
    """The bytes do not match the schema (truncated, bad length, trailing garbage)."""


class Type:
    """One wire type: `encode` appends bytes to `out`, `decode` reads at `pos`."""

    def encode(self, value: Any, out: list[bytes]) -> None:
        raise NotImplementedError

    def decode(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        raise NotImplementedError


class _Fixed(Type):
    """A fixed-width big-endian number (or bool), via a precompiled struct.Struct."""

    def __init__(self, fmt: str) -> None:
        compiled = struct.Struct(">" + fmt)
        self._pack, self._unpack_from, self.size = compiled.pack, compiled.unpack_from, compiled.size

    def encode(self, value: Any, out: list[bytes]) -> None:
        out.append(self._pack(value))

    def decode(self, buf: memoryview, pos: int) -> tuple[Any, int]:
        return self._unpack_from(buf, pos)[0], pos + self.size


Int8 = _Fixed("b")
Int16 = _Fixed("h")
Int32 = _Fixed("i")
Int64 = _Fixed("q")
Boolean = _Fixed("?")


class _UnsignedVarInt(Type):
    """Protobuf-style base-128 varint, the length/count prefix of flexible versions."""

    def encode(self, value: int, out: list[bytes]) -> None:
        if value < 0:
            raise SchemaError(f"unsigned varint cannot hold {value}")
        parts = bytearray()
        while value >= 0x80:
            parts.append((value & 0x7F) | 0x80)
            value >>= 7
        parts.append(value)
        out.append(bytes(parts))

    def decode(self, buf: memoryview, pos: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            if pos >= len(buf):
                raise SchemaError("truncated varint")
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, pos
            shift += 7
            if shift > 28:
                raise SchemaError("varint longer than 5 bytes")


UnsignedVarInt = _UnsignedVarInt()


def _take(buf: memoryview, pos: int, n: int) -> tuple[memoryview, int]:
    """n bytes at pos, checked: memoryview slicing would silently return fewer."""
    end = pos + n
    if end > len(buf):
        raise SchemaError(f"need {n} bytes at offset {pos}, have {len(buf) - pos}")
    return buf[pos:end], end


class _String(Type):
    """UTF-8 string; classic (int16 length, -1 = null) or compact (uvarint length+1, 0 = null)."""

    def __init__(self, nullable: bool, compact: bool) -> None:
        self.nullable = nullable
        self.compact = compact

    def encode(self, value: str | None, out: list[bytes]) -> None:
        if value is None:
            if not self.nullable:
                raise SchemaError("null for a non-nullable string")
            out.append(b"\x00" if self.compact else b"\xff\xff")
            return
        data = value.encode("utf-8")
        if self.compact:
            UnsignedVarInt.encode(len(data) + 1, out)
        else:
            out.append(Int16._pack(len(data)))
        out.append(data)

    def decode(self, buf: memoryview, pos: int) -> tuple[str | None, int]:
        if self.compact:
            n, pos = UnsignedVarInt.decode(buf, pos)
            n -= 1
        else:
            n, pos = Int16.decode(buf, pos)
        if n < 0:
            if not self.nullable:
                raise SchemaError(f"null at offset {pos} for a non-nullable string")
            return None, pos
        data, pos = _take(buf, pos, n)
        return str(data, "utf-8"), pos


String = _String(nullable=False, compact=False)
NullableString = _String(nullable=True, compact=False)
CompactString = _String(nullable=False, compact=True)
CompactNullableString = _String(nullable=True, compact=True)


class _Bytes(Type):
    """Classic bytes: int32 length then the bytes; -1 is null, allowed only when `nullable`."""

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable

    def encode(self, value: bytes | None, out: list[bytes]) -> None:
        if value is None:
            if not self.nullable:
                raise SchemaError("null for non-nullable bytes")
            out.append(Int32._pack(-1))
            return
        out.append(Int32._pack(len(value)))
        out.append(bytes(value))

    def decode(self, buf: memoryview, pos: int) -> tuple[bytes | None, int]:
        n, pos = Int32.decode(buf, pos)
        if n < 0:
            if not self.nullable:
                raise SchemaError(f"null at offset {pos} for non-nullable bytes")
            return None, pos
        data, pos = _take(buf, pos, n)
        return bytes(data), pos


Bytes = _Bytes(nullable=False)
NullableBytes = _Bytes(nullable=True)


class Array(Type):
    """int32 count then the items; -1 is a null array (None), allowed only when `nullable`."""

    def __init__(self, item: Type, nullable: bool = False) -> None:
        self.item = item
        self.nullable = nullable

    def _encode_count(self, count: int, out: list[bytes]) -> None:
        out.append(Int32._pack(count))

    def _decode_count(self, buf: memoryview, pos: int) -> tuple[int, int]:
        return Int32.decode(buf, pos)

    def encode(self, value: Sequence[Any] | None, out: list[bytes]) -> None:
        if value is None:
            if not self.nullable:
                raise SchemaError("null for a non-nullable array")
            self._encode_count(-1, out)
            return
        self._encode_count(len(value), out)
        encode_item = self.item.encode
        for v in value:
            encode_item(v, out)

    def decode(self, buf: memoryview, pos: int) -> tuple[list[Any] | None, int]:
        count, pos = self._decode_count(buf, pos)
        if count < 0:
            if not self.nullable:
                raise SchemaError(f"null at offset {pos} for a non-nullable array")
            return None, pos
        if count > len(buf) - pos:  # every item takes at least one byte
            raise SchemaError(f"array count {count} exceeds the remaining bytes")
        decode_item = self.item.decode
        items = []
        for _ in range(count):
            v, pos = decode_item(buf, pos)
            items.append(v)
        return items, pos


class CompactArray(Array):
    """Flexible-version array: uvarint count+1, 0 is null."""

    def _encode_count(self, count: int, out: list[bytes]) -> None:
        UnsignedVarInt.encode(count + 1, out)

    def _decode_count(self, buf: memoryview, pos: int) -> tuple[int, int]:
        n, pos = UnsignedVarInt.decode(buf, pos)
        return n - 1, pos


class _TaggedFields(Type):
    """The tagged-field section closing a flexible struct: uvarint count, then per field a uvarint
    tag, uvarint size and raw bytes. Values are {tag: bytes}; unknown tags survive a round trip."""

    def encode(self, value: dict[int, bytes] | None, out: list[bytes]) -> None:
        if not value:
            out.append(b"\x00")
            return
        UnsignedVarInt.encode(len(value), out)
        for tag in sorted(value):
            UnsignedVarInt.encode(tag, out)
            UnsignedVarInt.encode(len(value[tag]), out)
            out.append(bytes(value[tag]))

    def decode(self, buf: memoryview, pos: int) -> tuple[dict[int, bytes], int]:
        count, pos = UnsignedVarInt.decode(buf, pos)
        fields: dict[int, bytes] = {}
        for _ in range(count):
            tag, pos = UnsignedVarInt.decode(buf, pos)
            size, pos = UnsignedVarInt.decode(buf, pos)
            data, pos = _take(buf, pos, size)
            fields[tag] = bytes(data)
        return fields, pos


TaggedFields = _TaggedFields()


class Struct(Type):
    """Named fields in wire order; values are tuples in the same order."""

    def __init__(self, *fields: tuple[str, Type]) -> None:
        self.names = tuple(name for name, _ in fields)
        self.types = tuple(t for _, t in fields)

    def encode(self, value: Sequence[Any], out: list[bytes]) -> None:
        if len(value) != len(self.types):
            raise SchemaError(f"expected {len(self.types)} fields {self.names}, got {len(value)}")
        for t, v in zip(self.types, value):
            t.encode(v, out)

    def decode(self, buf: memoryview, pos: int) -> tuple[tuple[Any, ...], int]:
        values = []
        for t in self.types:
            v, pos = t.decode(buf, pos)
            values.append(v)
        return tuple(values), pos


def encode(t: Type, value: Any) -> bytes:
    """Encode one value to bytes (a single join at the end)."""
    out: list[bytes] = []
    t.encode(value, out)
    return b"".join(out)


def decode(t: Type, buf: bytes | memoryview, pos: int = 0, *, exact: bool = True) -> tuple[Any, int]:
    """Decode one value at pos, turning short reads into SchemaError; with `exact`, the value must
    end the buffer, so a length mismatch between sender and schema is caught, not ignored."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    try:
        value, end = t.decode(view, pos)
    except struct.error as exc:
        raise SchemaError(f"truncated input: {exc}") from exc
    if exact and end != len(view):
        raise SchemaError(f"{len(view) - end} trailing bytes after offset {end}")
    return value, end
