"""Hand-written encoders for the three messages on the replication hot path.

kio encodes any message but costs 60-100 us per Produce/Fetch response in pure Python
(docs/benchmarks-history.md), which bounds acks=all throughput: each acknowledged batch costs
one Produce response and two follower Fetch round trips. These encoders write the same bytes with
struct, and Fetch responses come back as a list of buffers so record data is never copied
(`transport.writelines`). tests/protocol/test_fast_paths.py checks every version against kio.

A partition answered with an error still carries records, empty ones, as Apache Kafka always
sends: the schema allows null records, but librdkafka reads a null (size -1) as an invalid
MessageSetSize and drops the whole response, so every other partition in it waited for the
next fetch.
"""
from __future__ import annotations

import struct
from typing import Iterable, Mapping, Sequence

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PRODUCE_PART_V3 = struct.Struct(">ihqq")       # index, error, base_offset, log_append_time
_PRODUCE_PART_V5 = struct.Struct(">ihqqq")      # ... log_start_offset
_FETCH_PART = struct.Struct(">ihqq")            # index, error, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED_TXN = struct.Struct(">qq")             # producer_id, first_offset

# (partition, error_code, base_offset, log_start_offset)
ProducePartition = tuple[int, int, int, int]
# (partition, error_code, high_watermark, log_start_offset, records: b"" with an error,
#  last_stable_offset, aborted transactions as (producer_id, first_offset) or None: the list a
#  read_committed fetch gets, null for read_uncommitted)
FetchPartition = tuple[int, int, int, int, "bytes | memoryview", int, "Sequence[tuple[int, int]] | None"]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(s: str, flexible: bool) -> bytes:
    raw = s.encode()
    return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _count(n: int, flexible: bool) -> bytes:
    return _uvarint(n + 1) if flexible else _I32.pack(n)


def _frame(parts: list[bytes | memoryview]) -> list[bytes | memoryview]:
    parts[0] = _I32.pack(sum(len(p) for p in parts[1:]))
    return parts


def produce_response(version: int, correlation_id: int,
                     topics: Sequence[tuple[str, Sequence[ProducePartition]]],
                     messages: Mapping[tuple[str, int], str] | None = None, throttle_time_ms: int = 0) -> bytes:
    """ProduceResponse v3-v9 with its header and size prefix; ``messages`` the ErrorMessage
    (v8+, KIP-467) of a partition whose error needs words, by (topic, partition);
    ``throttle_time_ms`` how long a client quota throttles the client."""
    flexible = version >= 9
    out: list[bytes | memoryview] = [b"", _I32.pack(correlation_id) + (b"\0" if flexible else b"")]
    out.append(_count(len(topics), flexible))
    for name, partitions in topics:
        out.append(_string(name, flexible))
        out.append(_count(len(partitions), flexible))
        for index, error, base_offset, log_start in partitions:
            if version >= 5:
                out.append(_PRODUCE_PART_V5.pack(index, error, base_offset, -1, log_start))
            else:
                out.append(_PRODUCE_PART_V3.pack(index, error, base_offset, -1))
            if version >= 8:  # no record errors, then the error message (null unless given)
                message = messages.get((name, index)) if messages else None
                if message is None:
                    out.append(b"\x01\x00" if flexible else b"\0\0\0\0\xff\xff")
                else:
                    out.append((b"\x01" if flexible else b"\0\0\0\0") + _string(message, flexible))
            if flexible:
                out.append(b"\0")
        if flexible:
            out.append(b"\0")
    out.append(_I32.pack(throttle_time_ms))
    if flexible:
        out.append(b"\0")
    return b"".join(_frame(out))


def fetch_response(version: int, correlation_id: int, topics: Iterable[tuple[str, Sequence[FetchPartition]]],
                   error_code: int = 0, session_id: int = 0, throttle_time_ms: int = 0) -> list[bytes | memoryview]:
    """FetchResponse v4-v12 as buffers for writelines; record data is referenced, not copied;
    ``throttle_time_ms`` how long a client quota throttles the client."""
    flexible = version >= 12
    topics = list(topics)
    head = bytearray(_I32.pack(correlation_id))
    if flexible:
        head += b"\0"
    head += _I32.pack(throttle_time_ms)
    if version >= 7:
        head += _I16.pack(error_code) + _I32.pack(session_id)
    head += _count(len(topics), flexible)
    out: list[bytes | memoryview] = [b""]
    for name, partitions in topics:
        head += _string(name, flexible)
        head += _count(len(partitions), flexible)
        for index, error, hw, log_start, records, lso, aborted in partitions:
            head += _FETCH_PART.pack(index, error, hw, lso)
            if version >= 5:
                head += _I64.pack(log_start)
            if aborted is None:
                head += b"\0" if flexible else b"\xff\xff\xff\xff"
            else:
                head += _uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    head += _ABORTED_TXN.pack(producer_id, first_offset)
                    if flexible:
                        head += b"\0"
            if version >= 11:
                head += b"\xff\xff\xff\xff"  # preferred read replica: none
            head += _uvarint(len(records) + 1) if flexible else _I32.pack(len(records))
            if len(records):
                out.append(bytes(head))
                out.append(records)
                head = bytearray()
            if flexible:
                head += b"\0"
        if flexible:
            head += b"\0"
    if flexible:
        head += b"\0"
    out.append(bytes(head))
    return _frame(out)


def follower_fetch_request(correlation_id: int, client_id: str, replica_id: int, max_wait_ms: int,
                           max_bytes: int, topics: Sequence[tuple[str, Sequence[tuple[int, int, int, int, int]]]],
                           session_id: int = 0, session_epoch: int = -1,
                           forgotten: Sequence[tuple[str, Sequence[int]]] = ()) -> bytes:
    """FetchRequest v12 from a follower. Partitions: (partition, current_leader_epoch,
    fetch_offset, log_start_offset, partition_max_bytes); `forgotten` leaves a fetch session."""
    cid = client_id.encode()
    out: list[bytes | memoryview] = [
        b"", struct.pack(">hhih", 1, 12, correlation_id, len(cid)), cid, b"\0",
        struct.pack(">iiiibii", replica_id, max_wait_ms, 1, max_bytes, 0, session_id, session_epoch),
        _uvarint(len(topics) + 1)]
    for name, partitions in topics:
        out.append(_string(name, True))
        out.append(_uvarint(len(partitions) + 1))
        for partition, leader_epoch, fetch_offset, log_start, partition_max in partitions:
            out.append(struct.pack(">iiqiqi", partition, leader_epoch, fetch_offset, -1, log_start, partition_max))
            out.append(b"\0")
        out.append(b"\0")
    out.append(_uvarint(len(forgotten) + 1))
    for name, forgotten_partitions in forgotten:
        out.append(_string(name, True))
        out.append(_uvarint(len(forgotten_partitions) + 1))
        out.append(b"".join(_I32.pack(p) for p in forgotten_partitions))
        out.append(b"\0")
    out.append(b"\x01\0")  # empty rack id, no tagged fields
    return b"".join(_frame(out))
