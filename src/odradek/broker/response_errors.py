"""The error codes an encoded response carries, for the broker's request error counts
(Kafka's kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=...,error=...).

Kafka counts them from each response's ``errorCounts()``: the top-level error, if the response
has one, and every topic's and partition's, NONE included. Nothing is decoded again: responses
built from dicts by kio_util.encode_response carry the codes build() set
(kio_util.EncodedResponse); Produce is counted by KafkaApis from the per-partition results it
already holds; Fetch responses (fast_paths.fetch_response's buffers) are read by a small parser
over their header chunks, record data never touched.

The ZooKeeper-era controller APIs and ApiVersions (whose response header never changes) carry
their top-level error in the first two bytes after the correlation id; partition errors of a
LeaderAndIsr or StopReplica answer are not counted (Kafka counts them; operators alert on the
controller's own metrics instead).
"""
from __future__ import annotations

import struct
from typing import Any

from odradek.broker import api_keys
from odradek.protocol import controller_api
from odradek.protocol.kio_util import EncodedResponse
from odradek.protocol.schema import UnsignedVarInt

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
#: after the size prefix and the correlation id of a response with header v0
_TOP_LEVEL_AT = 8


def error_codes(api_key: int, version: int, response: bytes | list[Any]) -> list[int]:
    """Every error code of one response as encoded for the client (with its size prefix);
    ValueError or struct.error if the bytes are not what ``api_key`` answers. A response of
    none of the kinds above counts nothing."""
    if isinstance(response, EncodedResponse):
        return response.error_codes
    if api_key == api_keys.FETCH and isinstance(response, list):
        return fetch_error_codes(version, response)
    if api_key == api_keys.API_VERSIONS or api_key in controller_api.VERSIONS:
        raw = response if isinstance(response, bytes) else b"".join(response)
        return [_I16.unpack_from(raw, _TOP_LEVEL_AT)[0]]
    return []


def fetch_error_codes(version: int, chunks: list[Any]) -> list[int]:
    """The top-level and per-partition error codes of a FetchResponse v4-v12 as
    fast_paths.fetch_response lays it out: chunk 0 the size prefix, then header chunks
    alternating with the record data of partitions that have some; only the header chunks are
    read (each partition's records size is in them, its records are not). Every Fetch answer
    passes here, so the common shapes (no aborted transactions, no tagged fields, one-byte
    lengths) take the short way, a few byte tests per partition."""
    head = memoryview(chunks[1] if len(chunks) == 2 else b"".join(chunks[1::2]))  # one view, read in place
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


def _skip_aborted(head: memoryview, pos: int, flexible: bool) -> int:
    aborted, pos = _length(head, pos, flexible)
    for _ in range(max(aborted, 0)):  # producer id, first offset
        pos += 16
        if flexible:
            pos = _skip_tags(head, pos)
    return pos


_uvarint = UnsignedVarInt.decode


def _length(buf: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length; -1 for null."""
    if flexible:
        n, pos = _uvarint(buf, pos)
        return n - 1, pos
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _string_size(buf: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        n, pos = _uvarint(buf, pos)
        return max(n - 1, 0), pos
    return max(_I16.unpack_from(buf, pos)[0], 0), pos + 2


def _skip_tags(buf: memoryview, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)  # tag
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos
