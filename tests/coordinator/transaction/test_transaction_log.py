"""The `__transaction_state` records in Kafka's format: the bytes written out field by field
from TransactionLogKey.json and TransactionLogValue.json (v0 classic, v1 flexible), round trips
of both versions, tombstones and what cannot be read."""
from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from odradek.common.metadata import TopicPartition
from odradek.coordinator.transaction import transaction_log
from odradek.coordinator.transaction.transaction_log import (
    TransactionLogValue,
    UnknownRecordError,
    key_bytes,
    metadata_from_log,
    read_key,
    read_value,
    tombstone,
    value_bytes,
)
from odradek.coordinator.transaction.transaction_metadata import (
    IllegalTransactionStateError,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

T = TransactionState
ORDERS0, ORDERS2, AUDIT1 = TopicPartition("orders", 0), TopicPartition("orders", 2), TopicPartition("audit", 1)
UPDATED, STARTED = 1_700_000_000_123, 1_700_000_000_000


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(v: int) -> bytes:
    """One byte: every length in these tests is below 128."""
    assert 0 <= v < 128
    return bytes([v])


def _transit(state: TransactionState, partitions: frozenset[TopicPartition] = frozenset(),
             start: int = STARTED) -> TxnTransitMetadata:
    return TxnTransitMetadata(producer_id=1000, last_producer_id=999, producer_epoch=3, last_producer_epoch=2,
                              txn_timeout_ms=60_000, state=state, topic_partitions=partitions,
                              txn_start_timestamp=start, txn_last_update_timestamp=UPDATED)


PREPARE_COMMIT = _transit(T.PREPARE_COMMIT, frozenset({ORDERS2, AUDIT1, ORDERS0}))
HEAD = i64(1000) + i16(3) + i32(60_000)  # ProducerId, ProducerEpoch, TransactionTimeoutMs
TAIL = i64(UPDATED) + i64(STARTED)  # TransactionLastUpdateTimestampMs, TransactionStartTimestampMs


def test_the_key_is_kafkas() -> None:
    assert key_bytes("my-txn") == i16(0) + i16(6) + b"my-txn"
    assert key_bytes("ü") == i16(0) + i16(2) + "ü".encode()  # a length in UTF-8 bytes


def test_a_value_v0_is_kafkas() -> None:
    expected = (i16(0) + HEAD + i8(2)  # version, ..., TransactionStatus PrepareCommit
                + i32(2)  # TransactionPartitions: 2 topics, each [Topic, PartitionIds]
                + i16(5) + b"audit" + i32(1) + i32(1)
                + i16(6) + b"orders" + i32(2) + i32(0) + i32(2)
                + TAIL)
    assert value_bytes(PREPARE_COMMIT, version=0) == expected


def test_a_value_v1_is_kafkas() -> None:
    expected = (i16(1) + HEAD + i8(2)
                + uvarint(2 + 1)  # a compact array: count + 1
                + uvarint(5 + 1) + b"audit" + uvarint(1 + 1) + i32(1) + uvarint(0)  # each entry's tagged fields
                + uvarint(6 + 1) + b"orders" + uvarint(2 + 1) + i32(0) + i32(2) + uvarint(0)
                + TAIL
                + uvarint(0))  # the value's tagged fields
    assert value_bytes(PREPARE_COMMIT) == expected  # v1 is the default, as Kafka with transaction.version 1


def test_an_empty_transaction_has_a_null_partition_list() -> None:
    empty = _transit(T.EMPTY, start=-1)
    assert value_bytes(empty, version=0) == i16(0) + HEAD + i8(0) + i32(-1) + i64(UPDATED) + i64(-1)
    assert value_bytes(empty, version=1) == i16(1) + HEAD + i8(0) + uvarint(0) + i64(UPDATED) + i64(-1) + uvarint(0)


def test_a_complete_transaction_has_an_empty_partition_list() -> None:
    complete = _transit(T.COMPLETE_COMMIT)
    assert value_bytes(complete, version=0) == i16(0) + HEAD + i8(4) + i32(0) + TAIL
    assert value_bytes(complete, version=1) == i16(1) + HEAD + i8(4) + uvarint(1) + TAIL + uvarint(0)


def test_an_empty_transaction_with_partitions_is_refused() -> None:
    with pytest.raises(IllegalTransactionStateError):
        value_bytes(_transit(T.EMPTY, frozenset({ORDERS0})))


def test_an_unknown_version_is_not_written() -> None:
    with pytest.raises(ValueError):
        value_bytes(PREPARE_COMMIT, version=2)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("state", list(TransactionState), ids=lambda s: s.kafka_name)
def test_a_value_reads_back(version: int, state: TransactionState) -> None:
    partitions = frozenset() if state is T.EMPTY else frozenset({ORDERS0, ORDERS2, AUDIT1})
    read = read_value(value_bytes(_transit(state, partitions), version))
    assert read == TransactionLogValue(1000, 3, 60_000, state, partitions, UPDATED, STARTED)


@pytest.mark.parametrize("transactional_id", ["my-txn", "", "ü-€-𝄞"])
def test_a_key_reads_back(transactional_id: str) -> None:
    assert read_key(key_bytes(transactional_id)) == transactional_id


def test_a_tombstone_removes_the_id() -> None:
    assert tombstone("my-txn") == (key_bytes("my-txn"), None)
    assert read_value(None) is None


def test_the_partitions_of_an_empty_transaction_are_ignored_on_reading() -> None:
    """As Kafka's readTxnRecordValue; Kafka never writes any."""
    value = i16(0) + HEAD + i8(0) + i32(1) + i16(1) + b"t" + i32(1) + i32(0) + TAIL
    read = read_value(value)
    assert read is not None and read.state is T.EMPTY and read.topic_partitions == frozenset()


def test_a_v1_value_with_tagged_fields_reads() -> None:
    """Kafka 4's tagged fields (PreviousProducerId 0, NextProducerId 1, ClientTransactionVersion
    2), and an unknown one inside a partition entry, are skipped."""
    value = (i16(1) + HEAD + i8(1) + uvarint(1 + 1)
             + uvarint(2 + 1) + b"t1" + uvarint(1 + 1) + i32(7) + uvarint(1) + uvarint(9) + uvarint(1) + b"x"
             + TAIL
             + uvarint(2) + uvarint(0) + uvarint(8) + i64(999) + uvarint(2) + uvarint(2) + i16(2))
    assert read_value(value) == TransactionLogValue(1000, 3, 60_000, T.ONGOING, frozenset({TopicPartition("t1", 7)}),
                                                    UPDATED, STARTED)


@pytest.mark.parametrize("value", [
    i16(2) + HEAD + i8(0) + i32(-1) + TAIL,  # a version this broker does not know
    i16(0) + HEAD + i8(8) + i32(-1) + TAIL,  # a state id Kafka does not know
    i16(0) + HEAD + i8(0) + i32(-1) + i64(UPDATED),  # truncated
    i16(1) + HEAD + i8(0) + i32(-1) + TAIL,  # v0 bytes under v1
    b"\x00",
], ids=["version", "state", "truncated", "mislabelled", "short"])
def test_an_unreadable_value_raises(value: bytes) -> None:
    with pytest.raises(UnknownRecordError):
        read_value(value)


@pytest.mark.parametrize("key", [i16(1) + i16(1) + b"x", i16(0) + i16(5) + b"x", b""],
                         ids=["version", "truncated", "empty"])
def test_an_unreadable_key_raises(key: bytes) -> None:
    with pytest.raises(UnknownRecordError):
        read_key(key)


def test_metadata_read_back_has_no_last_producer_and_nothing_pending() -> None:
    stored = read_value(value_bytes(PREPARE_COMMIT))
    assert stored is not None
    txn = metadata_from_log("my-txn", stored)
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.txn_timeout_ms, txn.state) == (
        "my-txn", 1000, 3, 60_000, T.PREPARE_COMMIT)
    assert (txn.last_producer_id, txn.last_producer_epoch, txn.pending_state) == (-1, -1, None)
    assert (txn.topic_partitions, txn.txn_start_timestamp, txn.txn_last_update_timestamp) == (
        {ORDERS0, ORDERS2, AUDIT1}, STARTED, UPDATED)


def test_each_change_of_a_transaction_is_written_and_read_back_as_it_was_completed() -> None:
    """What a coordinator taking over the partition reads is the metadata as it stood."""
    txn = TransactionMetadata("my-txn", 1000, -1, 60_000, now_ms=100)
    steps: list[Callable[[], object]] = [
        lambda: txn.prepare_increment_producer_epoch(60_000, None, 100),
        lambda: txn.prepare_add_partitions([ORDERS0, AUDIT1], 200),
        lambda: txn.prepare_abort_or_commit(T.PREPARE_ABORT, 300),
        lambda: txn.prepare_complete(400),
    ]
    for step in steps:
        transit = step()
        assert isinstance(transit, TxnTransitMetadata)
        stored = read_value(value_bytes(transit))
        txn.complete_transition(transit)
        assert stored is not None
        back = metadata_from_log("my-txn", stored)
        assert (back.state, back.producer_id, back.producer_epoch, back.topic_partitions, back.txn_start_timestamp,
                back.txn_last_update_timestamp, back.txn_timeout_ms) == (
            txn.state, txn.producer_id, txn.producer_epoch, txn.topic_partitions, txn.txn_start_timestamp,
            txn.txn_last_update_timestamp, txn.txn_timeout_ms)


def test_the_versions_are_kafkas() -> None:
    assert (transaction_log.KEY_VERSION, transaction_log.VALUE_VERSION) == (0, 1)
