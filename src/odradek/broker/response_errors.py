"""The error codes an encoded response carries, for the broker's request error counts
(Kafka's kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=...,error=...).

Kafka counts them from each response's ``errorCounts()``: the top-level error, if the response
has one, and every topic's and partition's, NONE included. The broker's handlers describe their
responses as nested dicts that kio encodes, so the codes are read back from the encoded bytes
rather than collected by every handler: kio decodes a response 20-30 times faster than it
builds one from dicts, so reading it back adds a few per cent to an API that is not on the
replication path. The two that are get cheaper treatment: Produce is counted by KafkaApis from
the per-partition results it already holds, and Fetch responses (fast_paths.fetch_response's
buffers) are read by a small parser over their header chunks, record data never touched.

The ZooKeeper-era controller APIs and ApiVersions (whose response header never changes) carry
their top-level error in the first two bytes after the correlation id; partition errors of a
LeaderAndIsr or StopReplica answer are not counted (Kafka counts them; operators alert on the
controller's own metrics instead).
"""
from __future__ import annotations

import struct
import typing
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode

from odradek.broker import api_keys
from odradek.protocol import controller_api, kio_util

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
#: after the size prefix and the correlation id of a response with header v0
_TOP_LEVEL_AT = 8

#: (field name, whether it is an error code rather than entities holding some) of the fields
#: of an entity class that lead to error codes; fields that cannot are left out
_Plan = tuple[tuple[str, bool], ...]


def error_codes(api_key: int, version: int, response: bytes | list[Any]) -> list[int]:
    """Every error code of one response as encoded for the client (with its size prefix);
    ValueError or struct.error if the bytes are not what ``api_key`` answers."""
    if api_key == api_keys.FETCH and isinstance(response, list):
        return fetch_error_codes(version, response)
    raw = response if isinstance(response, bytes) else b"".join(response)
    if api_key == api_keys.API_VERSIONS or api_key in controller_api.VERSIONS:
        return [_I16.unpack_from(raw, _TOP_LEVEL_AT)[0]]
    _, body = kio_util.decode_response(api_key, version, memoryview(raw)[4:])
    codes: list[int] = []
    _walk(body, codes)
    return codes


def _walk(entity: Any, out: list[int]) -> None:
    cls: type = type(entity)
    for name, is_error in _plan(cls):
        value = getattr(entity, name)
        if is_error:
            out.append(int(value))
        elif value is None:
            continue
        elif isinstance(value, tuple):
            for item in value:
                _walk(item, out)
        else:
            _walk(value, out)


@cache
def _plan(cls: type) -> _Plan:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in fields(cls):
        hint = hints[f.name]
        if hint is KioErrorCode:
            plan.append((f.name, True))
            continue
        nested = _nested_entity(hint)
        if nested is not None and _plan(nested):
            plan.append((f.name, False))
    return tuple(plan)


def _nested_entity(hint: Any) -> Any:
    """The entity class inside ``X``, ``tuple[X, ...]`` or ``X | None``, if X is one."""
    if is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        found = _nested_entity(arg)
        if found is not None:
            return found
    return None


def fetch_error_codes(version: int, chunks: list[Any]) -> list[int]:
    """The top-level and per-partition error codes of a FetchResponse v4-v12 as
    fast_paths.fetch_response lays it out: chunk 0 the size prefix, then header chunks
    alternating with the record data of partitions that have some; only the header chunks are
    read (each partition's records size is in them, its records are not). Every Fetch answer
    passes here, so the common shapes (no aborted transactions, no tagged fields, one-byte
    lengths) take the short way, a few byte tests per partition."""
    head = chunks[1] if len(chunks) == 2 else b"".join(chunks[1::2])
    flexible = version >= 12
    pos = 9 if flexible else 8  # correlation id, the header's tagged fields, throttle time
    unpack = _I16.unpack_from
    codes = [unpack(head, pos)[0] if version >= 7 else 0]
    if version >= 7:
        pos += 6  # error code, session id
    topics, pos = _length(head, pos, flexible)
    fixed = 22 + (8 if version >= 5 else 0)  # index, error, high watermark, LSO, log start
    preferred = 4 if version >= 11 else 0  # the preferred read replica
    for _ in range(topics):
        name_size, pos = _string_size(head, pos, flexible)
        partitions, pos = _length(head, pos + name_size, flexible)
        for _ in range(partitions):
            codes.append(unpack(head, pos + 4)[0])
            pos += fixed
            if flexible:
                if head[pos]:  # aborted transactions (fast_paths sends none: one byte, null)
                    pos = _skip_aborted(head, pos, flexible)
                else:
                    pos += 1
                pos += preferred
                while head[pos] & 0x80:  # the records size; the records are not in head
                    pos += 1
                pos += 1
                pos = _skip_tags(head, pos) if head[pos] else pos + 1
            else:
                pos = pos + 4 if head[pos] == 0xFF else _skip_aborted(head, pos, flexible)  # null: -1
                pos += preferred + 4  # ... and the records size
        if flexible:
            pos = _skip_tags(head, pos)
    return codes


def _skip_aborted(head: bytes, pos: int, flexible: bool) -> int:
    aborted, pos = _length(head, pos, flexible)
    for _ in range(max(aborted, 0)):  # producer id, first offset
        pos += 16
        if flexible:
            pos = _skip_tags(head, pos)
    return pos


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _length(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length; -1 for null."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _string_size(buf: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n, pos = _uvarint(buf, pos)
        return max(n - 1, 0), pos
    return max(_I16.unpack_from(buf, pos)[0], 0), pos + 2


def _skip_tags(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)  # tag
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos
