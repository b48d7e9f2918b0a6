"""Record-batch v2 header helpers shared by the log and the broker.

The broker treats record batches as opaque bytes: it only ever reads the fixed 61-byte header
and rewrites the two fields the CRC does not cover (baseOffset, partitionLeaderEpoch). Records
are decoded only by `decode_records`, which exists for tests and the CLI.
"""
from __future__ import annotations

import struct
import time
from typing import Iterator, NamedTuple

import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted in batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CRC_START = 21  # the CRC covers attributes .. end of batch
MAGIC = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")

COMPRESSION_MASK = 0x07
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20

Buffer = bytes | bytearray | memoryview


class CorruptRecordError(Exception):
    """A record batch failed validation (length, magic or CRC)."""


class BatchHeader(NamedTuple):
    """The fixed header of one batch plus where it sits in the buffer it was read from."""

    position: int
    size: int  # whole batch, including baseOffset and batchLength
    base_offset: int
    last_offset_delta: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)


def _header_at(view: memoryview, pos: int) -> BatchHeader | None:
    """Parse the header at pos; None when the batch is not complete in view."""
    if len(view) - pos < HEADER_SIZE:
        return None
    (base, length, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, seq,
     count) = _HEADER.unpack_from(view, pos)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {pos} has batchLength {length} < {MIN_BATCH_LENGTH}")
    if magic != MAGIC:
        raise CorruptRecordError(f"batch at {pos} has magic {magic}, only v2 is supported")
    if lod < 0 or count < 0:  # offsets would run backwards (the log end offset with them)
        raise CorruptRecordError(f"batch at {pos} has lastOffsetDelta {lod} and {count} records")
    size = length + LOG_OVERHEAD
    if pos + size > len(view):
        return None
    return BatchHeader(pos, size, base, lod, epoch, magic, crc, attrs, base_ts, max_ts, pid,
                       pepoch, seq, count)


def iter_batches(buf: Buffer) -> Iterator[BatchHeader]:
    """Yield the headers of the complete batches in buf, stopping silently at a partial tail.

    A partial tail is normal (a fetch response cut at max_bytes, a torn write); a bad length or
    magic is not, so those raise CorruptRecordError. CRCs are not checked here.
    """
    view = memoryview(buf)
    pos = 0
    while (header := _header_at(view, pos)) is not None:
        yield header
        pos += header.size


def check_crc(view: Buffer) -> bool:
    """True when the stored CRC-32C of the single batch in view matches its content."""
    view = memoryview(view)
    (stored,) = _UINT32.unpack_from(view, 17)
    return crc32c.crc32c(view[CRC_START:]) == stored


def validate_batches(buf: Buffer) -> list[BatchHeader]:
    """Headers of all batches in buf; raise CorruptRecordError unless every batch is whole and
    its CRC matches. This is the produce-path check, so it slices memoryviews and never copies."""
    view = memoryview(buf)
    headers = []
    pos = 0
    end = len(view)
    while pos < end:
        header = _header_at(view, pos)
        if header is None:
            raise CorruptRecordError(f"incomplete batch at position {pos} of {end} bytes")
        if crc32c.crc32c(view[pos + CRC_START:pos + header.size]) != header.crc:
            raise CorruptRecordError(f"CRC mismatch in batch at position {pos}")
        headers.append(header)
        pos += header.size
    if not headers:
        raise CorruptRecordError("no record batch")
    return headers


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Rewrite baseOffset of the batch at pos; the CRC does not cover it."""
    _INT64.pack_into(buf, pos, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch of the batch at pos; the CRC does not cover it."""
    _INT32.pack_into(buf, pos + 12, epoch)


set_leader_epoch = set_partition_leader_epoch  # the name architecture.md uses


def _write_varint(out: bytearray, value: int) -> None:
    """Zigzag varint/varlong, as Kafka's ByteUtils.writeVarint/writeVarlong."""
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag & ~0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = view[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def build_batch(records: list[tuple[bytes | None, bytes | None]], base_offset: int = 0,
                timestamp_ms: int | None = None, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """Encode an uncompressed v2 batch of (key, value) records, all stamped timestamp_ms
    (default: now). Tests and the benchmark need real batches without a Kafka client."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        rec = bytearray(b"\x00")  # attributes
        _write_varint(rec, 0)  # timestampDelta
        _write_varint(rec, delta)
        _write_bytes(rec, key)
        _write_bytes(rec, value)
        _write_varint(rec, 0)  # headers
        _write_varint(body, len(rec))
        body += rec
    batch = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD, -1, MAGIC, 0, 0,
                      len(records) - 1, ts, ts, producer_id, producer_epoch, base_sequence,
                      len(records))
    _UINT32.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def decode_records(batch: Buffer) -> list[Record]:
    """(offset, timestamp, key, value, headers) of each record in one uncompressed batch."""
    view = memoryview(batch)
    header = _header_at(view, 0)
    if header is None:
        raise CorruptRecordError("incomplete batch")
    if header.attributes & COMPRESSION_MASK:
        raise CorruptRecordError("compressed batches are not decoded")
    out: list[Record] = []
    pos = HEADER_SIZE
    for _ in range(header.record_count):
        _, pos = _read_varint(view, pos)  # record length
        pos += 1  # attributes
        ts_delta, pos = _read_varint(view, pos)
        offset_delta, pos = _read_varint(view, pos)
        key, pos = _read_nullable(view, pos)
        value, pos = _read_nullable(view, pos)
        count, pos = _read_varint(view, pos)
        headers = []
        for _ in range(count):
            name, pos = _read_nullable(view, pos)
            hvalue, pos = _read_nullable(view, pos)
            headers.append(((name or b"").decode(), hvalue))
        out.append((header.base_offset + offset_delta, header.base_timestamp + ts_delta, key,
                    value, headers))
    return out


def _read_nullable(view: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(view, pos)
    if length < 0:
        return None, pos
    return bytes(view[pos:pos + length]), pos + length
