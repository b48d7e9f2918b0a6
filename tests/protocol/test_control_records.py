"""Transaction markers (control batches): built as Kafka builds them, read back, and refused
cleanly when garbled; cross-checked against kafka-python's reader."""
import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from odradek.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_FLAG,
    GZIP,
    HEADER_SIZE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    ControlMarker,
    CorruptRecordError,
    build_batch,
    build_control_batch,
    build_filtered_batch,
    check_crc,
    control_marker,
    decode_records,
    iter_batches,
    iter_batches_with_markers,
    validate_batches,
)


def only_header(raw: bytes) -> BatchHeader:
    (h,) = iter_batches(raw)
    return h


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("coordinator_epoch", [0, 7, 2**31 - 1])
def test_a_marker_reads_back_as_built(commit: bool, coordinator_epoch: int) -> None:
    raw = build_control_batch(4242, 3, commit, coordinator_epoch, timestamp_ms=1234, base_offset=17)
    h = only_header(raw)
    assert control_marker(raw, h) == ControlMarker(commit, coordinator_epoch)
    assert (h.producer_id, h.producer_epoch, h.base_offset, h.max_timestamp) == (4242, 3, 17, 1234)


def test_marker_key_and_value_are_kafkas_bytes() -> None:
    commit = build_control_batch(1, 0, True, 5, timestamp_ms=1000)
    abort = build_control_batch(1, 0, False, 0x01020304, timestamp_ms=1000)
    # key: int16 version 0, int16 type; value: int16 version 0, int32 coordinator epoch
    assert decode_records(commit) == [(0, 1000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", [])]
    assert decode_records(abort) == [(0, 1000, b"\x00\x00\x00\x00", b"\x00\x00\x01\x02\x03\x04", [])]
    assert (CONTROL_ABORT, CONTROL_COMMIT) == (0, 1)


def test_a_marker_is_one_transactional_control_record_without_sequence() -> None:
    raw = build_control_batch(9, 2, False, 1)
    h = only_header(raw)
    assert h.attributes == TRANSACTIONAL_FLAG | CONTROL_FLAG  # uncompressed, CreateTime
    assert h.is_control and h.is_transactional
    assert (h.base_sequence, h.record_count, h.last_offset_delta) == (-1, 1, 0)
    assert check_crc(raw)
    assert validate_batches(raw) == [h]


def test_kafka_python_reads_the_marker() -> None:
    for commit in (True, False):
        batch = DefaultRecordBatch(build_control_batch(9, 2, commit, 1, timestamp_ms=1000))
        assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
        (record,) = list(batch)
        assert (record.version, record.commit, record.abort) == (0, commit, not commit)


def test_data_batches_have_no_marker() -> None:
    plain = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")])
    txn = build_batch([(b"k", b"v")], producer_id=1, producer_epoch=0, base_sequence=0,
                      attributes=TRANSACTIONAL_FLAG)
    assert control_marker(plain, only_header(plain)) is None
    assert only_header(txn).is_transactional
    assert control_marker(txn, only_header(txn)) is None


def test_an_unknown_control_type_and_an_empty_control_batch_have_no_marker() -> None:
    leader_change = build_batch([(struct.pack(">hh", 0, 2), b"whatever")], producer_id=1,
                                attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)
    assert control_marker(leader_change, only_header(leader_change)) is None
    marker = build_control_batch(1, 0, True, 0)
    h = only_header(marker)
    emptied = build_filtered_batch(marker, h, b"", [], None)  # what a cleaner could leave
    assert only_header(emptied).record_count == 0
    assert control_marker(emptied, only_header(emptied)) is None


def test_a_newer_value_version_is_read_as_version_0() -> None:
    raw = build_batch([(struct.pack(">hh", 1, CONTROL_ABORT), struct.pack(">hi", 1, 9) + b"more")],
                      producer_id=1, attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)
    assert control_marker(raw, only_header(raw)) == ControlMarker(False, 9)


@pytest.mark.parametrize("key, value", [
    (None, b"\x00\x00\x00\x00\x00\x01"),  # null key
    (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),  # key too short for a type
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01"),  # negative key version
    (b"\x00\x00\x00\x01", None),  # commit without a value
    (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x01"),  # value too short for the epoch
])
def test_a_malformed_marker_record_is_corrupt(key: bytes | None, value: bytes | None) -> None:
    raw = build_batch([(key, value)], producer_id=1, attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG)
    with pytest.raises(CorruptRecordError):
        control_marker(raw, only_header(raw))


def test_a_truncated_or_garbled_marker_raises_corrupt_and_nothing_else() -> None:
    raw = build_control_batch(1, 0, True, 3)
    h = only_header(raw)
    for cut in range(HEADER_SIZE, len(raw)):  # every truncation of the record
        with pytest.raises(CorruptRecordError):
            control_marker(raw[:cut], h)
    for pos in range(HEADER_SIZE, len(raw)):  # every byte of the record set to 0xff, then 0x00
        for byte in (0xFF, 0x00):
            garbled = bytearray(raw)
            garbled[pos] = byte
            try:
                control_marker(garbled, h)
            except CorruptRecordError:
                pass


def test_a_gzip_control_batch_that_does_not_decompress_is_corrupt() -> None:
    raw = bytearray(build_control_batch(1, 0, True, 3))
    h = only_header(bytes(raw))._replace(attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG | GZIP)
    with pytest.raises(CorruptRecordError):
        control_marker(raw, h)


def test_build_batch_takes_flags_but_no_codec() -> None:
    with pytest.raises(ValueError):
        build_batch([(None, b"x")], attributes=GZIP)


def test_iter_batches_with_markers_pairs_each_header_with_its_marker() -> None:
    data = build_batch([(None, b"a"), (None, b"b")], producer_id=5, producer_epoch=0, base_sequence=0,
                       attributes=TRANSACTIONAL_FLAG)
    buf = data + build_control_batch(5, 0, False, 2, base_offset=2)
    got = [(h.base_offset, h.is_control, m) for h, m in iter_batches_with_markers(buf)]
    assert got == [(0, False, None), (2, True, ControlMarker(False, 2))]
