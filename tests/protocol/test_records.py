"""Record-batch v2 helpers, cross-checked against kafka-python's independent implementation."""
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from odradek.protocol.records import (
    HEADER_SIZE,
    CorruptRecordError,
    build_batch,
    check_crc,
    decode_records,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batches,
)


def test_build_batch_is_readable_by_kafka_python():
    records = [(b"k", b"v"), (None, b"x" * 300), (b"", None)] + [(None, b"%d" % i) for i in range(200)]
    raw = build_batch(records, base_offset=7, timestamp_ms=1_700_000_000_000)
    batch = DefaultRecordBatch(raw)
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    assert got == [(7 + i, 1_700_000_000_000, k, v) for i, (k, v) in enumerate(records)]


def test_decode_and_validate_kafka_python_batch():
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=2000, key=b"a", value=b"b", headers=[("h", b"1")])
    builder.append(1, timestamp=2005, key=None, value=b"c" * 200, headers=[])
    raw = bytes(builder.build())
    (header,) = validate_batches(raw)
    assert (header.base_timestamp, header.max_timestamp, header.record_count) == (2000, 2005, 2)
    assert header.last_offset == 1 and header.size == len(raw)
    assert decode_records(raw) == [(0, 2000, b"a", b"b", [("h", b"1")]),
                                   (1, 2005, None, b"c" * 200, [])]


def test_header_fields():
    raw = build_batch([(None, b"1"), (None, b"2")], base_offset=10, timestamp_ms=5,
                      producer_id=42, producer_epoch=3, base_sequence=9)
    (h,) = iter_batches(raw)
    assert (h.position, h.size, h.base_offset, h.last_offset_delta, h.last_offset) == (
        0, len(raw), 10, 1, 11)
    assert (h.magic, h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (
        2, 42, 3, 9, 2)
    assert (h.base_timestamp, h.max_timestamp, h.partition_leader_epoch) == (5, 5, -1)
    assert not h.is_transactional and not h.is_control


def test_attribute_flags():
    raw = bytearray(build_batch([(None, b"v")]))
    struct.pack_into(">h", raw, 21, 0x30)
    (h,) = iter_batches(raw)
    assert h.is_transactional and h.is_control


def test_rewriting_offset_and_epoch_keeps_crc_valid():
    raw = bytearray(build_batch([(None, b"v")]))
    set_base_offset(raw, 0, 123456789)
    set_partition_leader_epoch(raw, 0, 17)
    (h,) = validate_batches(raw)
    assert (h.base_offset, h.partition_leader_epoch) == (123456789, 17)
    assert check_crc(raw)


def test_iter_batches_stops_at_partial_tail():
    one, two = build_batch([(None, b"a")]), build_batch([(None, b"b")], base_offset=1)
    buf = one + two
    for cut in (len(one), len(one) + 5, len(one) + HEADER_SIZE, len(buf) - 1):
        assert [h.base_offset for h in iter_batches(buf[:cut])] == [0]
    assert [(h.position, h.base_offset) for h in iter_batches(buf)] == [(0, 0), (len(one), 1)]


def test_iter_batches_rejects_bad_magic_and_length():
    bad_magic = bytearray(build_batch([(None, b"a")]))
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bad_magic))
    short = bytearray(build_batch([(None, b"a")]))
    struct.pack_into(">i", short, 8, 48)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(short))


def test_validate_batches_rejects_crc_partial_and_empty():
    good = build_batch([(None, b"abc")])
    corrupt = bytearray(good)
    corrupt[-2] ^= 0xFF
    assert not check_crc(corrupt)
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(good + bytes(corrupt))
    with pytest.raises(CorruptRecordError, match="incomplete"):
        validate_batches(good + good[:-1])
    with pytest.raises(CorruptRecordError):
        validate_batches(b"")
    assert len(validate_batches(memoryview(good + good))) == 2


def test_build_batch_needs_records():
    with pytest.raises(ValueError):
        build_batch([])


def test_has_keyless_record_reads_key_lengths_in_every_batch_compressed_or_not():
    from odradek.protocol.records import has_keyless_record

    def gzip_batch(keys):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=1, is_transactional=0,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        for i, key in enumerate(keys):
            builder.append(i, timestamp=2000, key=key, value=b"v" * 100, headers=[("h", b"1")])
        return bytes(builder.build())

    keyed = build_batch([(b"k%d" % i, b"v" * 200) for i in range(50)])
    assert not has_keyless_record(keyed)
    assert not has_keyless_record(keyed + build_batch([(b"", b"an empty key is a key")]))
    assert has_keyless_record(keyed + build_batch([(b"k", b"v"), (None, b"v")]))
    assert not has_keyless_record(gzip_batch([b"a", b"b"]))
    assert has_keyless_record(gzip_batch([b"a", None]))
    assert not has_keyless_record(b"\x00" * 10)  # not a batch: left to the log's own checks
