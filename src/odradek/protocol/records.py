"""Record-batch v2 header helpers shared by the log and the broker.

The broker treats record batches as opaque bytes: it only ever reads the fixed 61-byte header
and rewrites the two fields the CRC does not cover (baseOffset, partitionLeaderEpoch). Records
are decoded only by `decode_records` (tests and the CLI) and by the log cleaner, which reads
keys with `iter_records` and writes a batch it filtered with `build_filtered_batch`, and the
one record of a transaction marker is read by `control_marker` (written by `build_control_batch`).
"""
from __future__ import annotations

import gzip
import struct
import time
import zlib
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
GZIP = 1  # the one codec the standard library has; snappy (2), lz4 (3), zstd (4) need packages
TIMESTAMP_TYPE_FLAG = 0x08  # set: LogAppendTime
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
# KIP-534: baseTimestamp holds the batch's delete horizon (tombstones go after it), set by the
# log cleaner the first time it cleans a batch holding tombstones
DELETE_HORIZON_FLAG = 0x40
NO_TIMESTAMP = -1

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

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534's delete horizon when the cleaner set one, else None."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG else None


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
    stored: int = _UINT32.unpack_from(view, 17)[0]
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
                producer_epoch: int = -1, base_sequence: int = -1, attributes: int = 0) -> bytes:
    """Encode an uncompressed v2 batch of (key, value) records, all stamped timestamp_ms
    (default: now). Tests and the benchmark need real batches without a Kafka client, and the
    broker its transaction markers. `attributes` takes flags only (transactional, control):
    the records are never compressed, so a codec there would mislabel them."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    if attributes & COMPRESSION_MASK:
        raise ValueError("build_batch writes uncompressed batches only")
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
    _HEADER.pack_into(batch, 0, base_offset, len(batch) - LOG_OVERHEAD, -1, MAGIC, 0, attributes,
                      len(records) - 1, ts, ts, producer_id, producer_epoch, base_sequence,
                      len(records))
    _UINT32.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


# -- transaction markers (Kafka's EndTransactionMarker) ------------------------------------------

CONTROL_ABORT = 0  # ControlRecordType ids, the int16 after the control record key's version
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version (0), type
_END_TXN_VALUE = struct.Struct(">hi")  # version (0), coordinator epoch


class ControlMarker(NamedTuple):
    """What a transaction marker says: how the producer's transaction ended, and the epoch of
    the transaction coordinator that wrote it (a newer coordinator fences an older one)."""

    commit: bool
    coordinator_epoch: int


def build_control_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                        timestamp_ms: int | None = None, base_offset: int = 0) -> bytes:
    """One transaction marker batch, byte for byte what Kafka's MemoryRecords.withEndTransactionMarker
    writes: transactional and control, no sequence, one record whose key is the control type and
    whose value holds the coordinator epoch. Consumers (librdkafka, the Java client) read the key
    to skip the marker and to drop an aborted transaction's records."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value)], base_offset=base_offset, timestamp_ms=timestamp_ms,
                       producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=-1,
                       attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)


def control_marker(batch: Buffer, header: BatchHeader) -> ControlMarker | None:
    """The marker of one control batch (`batch` starts at the batch), None for a data batch, an
    empty one (the cleaner's: Kafka reads it as a transaction already cleaned away) or a control
    type other than commit/abort (Kafka's consumers skip those). Raises CorruptRecordError when
    the control record cannot be read, never IndexError and the like on short garbage."""
    if not header.is_control or header.record_count == 0:
        return None
    try:
        key, value = _first_key_value(memoryview(records_section(batch, header)))
    except (UnsupportedCompressionError, IndexError, ValueError, EOFError, OSError, zlib.error) as exc:
        raise CorruptRecordError(f"control batch at offset {header.base_offset}: {exc}") from None
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} has a short key")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:  # ControlRecordType.parse refuses these; newer versions only append fields
        raise CorruptRecordError(f"control record key version {version} at {header.base_offset}")
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return None
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise CorruptRecordError(f"transaction marker at offset {header.base_offset} has a short value")
    _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)  # later versions parse as version 0
    return ControlMarker(control_type == CONTROL_COMMIT, coordinator_epoch)


def iter_batches_with_markers(buf: Buffer) -> Iterator[tuple[BatchHeader, ControlMarker | None]]:
    """Each complete batch's header with its marker (None for data batches), as
    ProducerStateManager.update and rebuild take them; CorruptRecordError as control_marker."""
    view = memoryview(buf)
    for h in iter_batches(view):
        yield h, control_marker(view[h.position:h.position + h.size], h) if h.is_control else None


def _first_key_value(section: memoryview) -> tuple[bytes | None, bytes | None]:
    """Key and value of the first record, checked against the record's and the section's end."""
    length, body = _read_varint(section, 0)
    end = body + length
    if length < 0 or end > len(section):
        raise ValueError("the record runs past its batch")
    pos = _skip_varint(section, _skip_varint(section, body + 1))  # attributes, timestamp/offset deltas
    key, pos = _read_bounded(section, pos, end)
    value, _ = _read_bounded(section, pos, end)
    return key, value


def _read_bounded(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(view, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise ValueError("a field runs past its record")
    return bytes(view[pos:pos + length]), pos + length


class RawRecord(NamedTuple):
    """One record of a batch as the cleaner needs it: where it sits in the (decompressed)
    records section, its key and whether it is a tombstone, without copying the rest."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    has_value: bool
    start: int  # the record's length varint
    body: int  # its attributes byte, after the length
    rest: int  # first byte after timestampDelta (offsetDelta, key, value, headers follow)
    end: int


class UnsupportedCompressionError(Exception):
    """A batch compressed with a codec this process cannot decompress (snappy, lz4, zstd)."""


def records_section(batch: Buffer, header: BatchHeader) -> bytes | memoryview:
    """The records of one batch, decompressed; UnsupportedCompressionError for other codecs."""
    body = memoryview(batch)[HEADER_SIZE:header.size]
    codec = header.attributes & COMPRESSION_MASK
    if codec == 0:
        return body
    if codec == GZIP:
        return gzip.decompress(body)
    raise UnsupportedCompressionError(f"compression codec {codec} is not available")


def iter_records(section: Buffer, count: int) -> Iterator[RawRecord]:
    """The `count` records of a decompressed records section, in order."""
    view = memoryview(section)
    pos = 0
    for _ in range(count):
        length, body = _read_varint(view, pos)
        ts_delta, rest = _read_varint(view, body + 1)  # after the record's attributes byte
        _, p = _read_varint(view, rest)  # offsetDelta
        key, p = _read_nullable(view, p)
        value_length, _ = _read_varint(view, p)
        offset_delta = _read_varint(view, rest)[0]
        yield RawRecord(offset_delta, ts_delta, key, value_length >= 0, pos, body, rest, body + length)
        pos = body + length


def iter_key_values(section: Buffer, count: int) -> Iterator[tuple[bytes | None, bytes | None]]:
    """(key, value) of each of the `count` records of a decompressed records section, skipping
    everything else: a group coordinator reading back __consumer_offsets needs only these."""
    view = memoryview(section)
    pos = 0
    for _ in range(count):
        length, body = _read_varint(view, pos)
        p = _skip_varint(view, _skip_varint(view, body + 1))  # attributes, timestampDelta, offsetDelta
        key, p = _read_nullable(view, p)
        value, _ = _read_nullable(view, p)
        yield key, value
        pos = body + length


def _skip_varint(view: memoryview, pos: int) -> int:
    while view[pos] & 0x80:
        pos += 1
    return pos + 1


def has_keyless_record(buf: Buffer) -> bool:
    """Whether some record in `buf` has a null key: Kafka's LogValidator refuses those for a
    compacted topic (INVALID_RECORD), where a keyless record could never be compacted away.
    Batches this process cannot decompress, or cannot parse, are left to the log's own checks."""
    try:
        return any(key is None for key in record_keys(buf))
    except (UnsupportedCompressionError, ValueError, IndexError, EOFError, OSError):
        return False


def record_keys(buf: Buffer) -> Iterator[memoryview | None]:
    """The key of every record in `buf` (one or more batches), None for a null key, each a view
    into the (decompressed) records: nothing past the key is decoded, nothing is copied.
    Raises UnsupportedCompressionError, or ValueError/IndexError/EOFError/OSError on bytes that
    do not parse."""
    view = memoryview(buf)
    for h in iter_batches(view):
        section = memoryview(records_section(view[h.position:h.position + h.size], h))
        pos = 0
        for _ in range(h.record_count):
            length, body = _read_varint(section, pos)
            # past attributes, timestampDelta and offsetDelta: the key's length, -1 for null
            key_length, key_at = _read_varint(section, _skip_varint(section, _skip_varint(section, body + 1)))
            if key_length < 0:
                yield None
            else:
                if key_at + key_length > body + length:
                    raise ValueError("a record's key runs past the record")
                yield section[key_at:key_at + key_length]
            pos = body + length


def build_filtered_batch(batch: Buffer, header: BatchHeader, section: Buffer,
                         kept: list[RawRecord], delete_horizon_ms: int | None) -> bytes:
    """The batch with only the `kept` records (Kafka's MemoryRecords.filterTo with
    buildRetainedRecordsInto): same baseOffset and lastOffsetDelta (so the producer's last
    sequence survives), producer id/epoch/base sequence, leader epoch, attributes and codec;
    maxTimestamp recomputed from the kept records unless the batch uses LogAppendTime.
    With a delete horizon, KIP-534: baseTimestamp becomes the horizon, the flag is set and the
    records' timestamp deltas are rewritten against it so each record keeps its timestamp.
    No kept record: Kafka's empty batch (writeEmptyHeader), which keeps the offsets and the
    producer's metadata of a batch that must stay (an idempotent producer's last)."""
    view = memoryview(section)
    attributes = header.attributes
    if not kept:
        return _pack_batch(header, attributes & (TIMESTAMP_TYPE_FLAG | TRANSACTIONAL_FLAG | CONTROL_FLAG),
                           NO_TIMESTAMP, header.max_timestamp, b"", 0)
    base_ts = header.base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
        new_base = delete_horizon_ms
    else:
        new_base = base_ts
    body = bytearray()
    max_ts = NO_TIMESTAMP
    for r in kept:
        ts = base_ts + r.timestamp_delta
        max_ts = max(max_ts, ts)
        if new_base == base_ts:
            body += view[r.start:r.end]
            continue
        rec = bytearray(view[r.body:r.body + 1])  # the record's attributes
        _write_varint(rec, ts - new_base)
        rec += view[r.rest:r.end]
        _write_varint(body, len(rec))
        body += rec
    if attributes & TIMESTAMP_TYPE_FLAG:
        max_ts = header.max_timestamp
    codec = attributes & COMPRESSION_MASK
    if codec == GZIP:
        body = bytearray(gzip.compress(bytes(body), mtime=0))
    elif codec:
        raise UnsupportedCompressionError(f"compression codec {codec} is not available")
    return _pack_batch(header, attributes, new_base, max_ts, body, len(kept))


def _pack_batch(h: BatchHeader, attributes: int, base_ts: int, max_ts: int, body: Buffer,
                count: int) -> bytes:
    batch = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(batch, 0, h.base_offset, len(batch) - LOG_OVERHEAD, h.partition_leader_epoch,
                      MAGIC, 0, attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id,
                      h.producer_epoch, h.base_sequence, count)
    _UINT32.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def decode_records(batch: Buffer) -> list[Record]:
    """(offset, timestamp, key, value, headers) of each record in one batch (gzip decompressed)."""
    view = memoryview(batch)
    header = _header_at(view, 0)
    if header is None:
        raise CorruptRecordError("incomplete batch")
    try:
        section = memoryview(records_section(view, header))
    except UnsupportedCompressionError:
        raise CorruptRecordError("compressed batches are not decoded") from None
    out: list[Record] = []
    for r in iter_records(section, header.record_count):
        pos = r.rest
        _, pos = _read_varint(section, pos)  # offsetDelta
        key, pos = _read_nullable(section, pos)
        value, pos = _read_nullable(section, pos)
        count, pos = _read_varint(section, pos)
        headers = []
        for _ in range(count):
            name, pos = _read_nullable(section, pos)
            hvalue, pos = _read_nullable(section, pos)
            headers.append(((name or b"").decode(), hvalue))
        out.append((header.base_offset + r.offset_delta, header.base_timestamp + r.timestamp_delta,
                    key, value, headers))
    return out


def _read_nullable(view: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(view, pos)
    if length < 0:
        return None, pos
    return bytes(view[pos:pos + length]), pos + length
