"""The records of the `__transaction_state` topic, in Kafka's own format (TransactionLog.scala,
TransactionLogKey.json and TransactionLogValue.json of Kafka 3.x), so its contents read the
same as on Apache Kafka:

    key v0    TransactionLogKey     transactional id
    value v0  TransactionLogValue   classic encoding
    value v1  TransactionLogValue   flexible (compact lengths, tagged fields): what Kafka writes
                                    once transaction.version >= 1

Each key and value is prefixed by its version (int16), as MessageUtil.toVersionPrefixedBytes
writes it. A null value is a tombstone: the transactional id expired. Log compaction keeps only
the newest record per id, so a coordinator taking over a partition reads it quickly.

The last producer id and epoch are not in the log (Kafka 3.x writes neither): an id read back
has none, so a KIP-360 retry of an epoch bump that spans a change of coordinator is fenced.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from odradek.common.metadata import TopicPartition
from odradek.coordinator.transaction.transaction_metadata import (
    IllegalTransactionStateError,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.protocol.schema import (
    Array,
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    SchemaError,
    String,
    Struct,
    TaggedFields,
    decode,
    encode,
)

KEY_VERSION = 0
#: the version written: 1 (flexible) as Kafka with transaction.version 1; 0 is read too
VALUE_VERSION = 1

_VERSION = Int16
_KEY_V0 = Struct(("transactional_id", String))
_PARTITIONS_V0 = Struct(("topic", String), ("partition_ids", Array(Int32)))
_VALUE_V0 = Struct(("producer_id", Int64), ("producer_epoch", Int16), ("transaction_timeout_ms", Int32),
                   ("transaction_status", Int8), ("transaction_partitions", Array(_PARTITIONS_V0, nullable=True)),
                   ("transaction_last_update_timestamp_ms", Int64), ("transaction_start_timestamp_ms", Int64))
_PARTITIONS_V1 = Struct(("topic", CompactString), ("partition_ids", CompactArray(Int32)), ("_tagged", TaggedFields))
_VALUE_V1 = Struct(("producer_id", Int64), ("producer_epoch", Int16), ("transaction_timeout_ms", Int32),
                   ("transaction_status", Int8),
                   ("transaction_partitions", CompactArray(_PARTITIONS_V1, nullable=True)),
                   ("transaction_last_update_timestamp_ms", Int64), ("transaction_start_timestamp_ms", Int64),
                   ("_tagged", TaggedFields))
_VALUES: dict[int, Struct] = {0: _VALUE_V0, 1: _VALUE_V1}


class UnknownRecordError(ValueError):
    """A key or value this broker cannot read: an unknown version, bytes that do not parse, or
    an unknown transaction state id."""


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """A transactional id as its last record describes it. ``topic_partitions`` is empty for an
    Empty transaction whatever the record holds (Kafka's readTxnRecordValue ignores them)."""

    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_last_update_timestamp: int
    txn_start_timestamp: int


def key_bytes(transactional_id: str) -> bytes:
    return encode(_VERSION, KEY_VERSION) + encode(_KEY_V0, (transactional_id,))


def value_bytes(transit: TxnTransitMetadata, version: int = VALUE_VERSION) -> bytes:
    """Kafka's TransactionLog.valueToBytes: an Empty transaction has a null partition list (and
    may have no partitions: IllegalTransactionStateError), any other a list per topic, empty
    once complete. Topics and partitions are sorted: Kafka writes them in hash-map order, which
    readers do not depend on."""
    if version not in _VALUES:
        raise ValueError(f"no transaction log value version {version}")
    if transit.state is TransactionState.EMPTY and transit.topic_partitions:
        raise IllegalTransactionStateError(f"an Empty transaction has no partitions to write: {transit}")
    partitions = None if transit.state is TransactionState.EMPTY else _by_topic(transit.topic_partitions, version)
    fields: tuple[Any, ...] = (transit.producer_id, transit.producer_epoch, transit.txn_timeout_ms, transit.state.value,
                               partitions, transit.txn_last_update_timestamp, transit.txn_start_timestamp)
    if version >= 1:
        fields += ({},)  # no tagged fields
    return encode(_VERSION, version) + encode(_VALUES[version], fields)


def _by_topic(partitions: Iterable[TopicPartition], version: int) -> list[tuple[Any, ...]]:
    topics: defaultdict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        topics[tp.topic].append(tp.partition)
    if version >= 1:
        return [(topic, sorted(ids), {}) for topic, ids in sorted(topics.items())]
    return [(topic, sorted(ids)) for topic, ids in sorted(topics.items())]


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    """The record that removes an expired transactional id."""
    return key_bytes(transactional_id), None


def read_key(key: bytes) -> str:
    """The transactional id of a record's key; UnknownRecordError for another key version
    (Kafka skips such a record with a warning: a leftover of an aborted upgrade)."""
    try:
        version, pos = decode(_VERSION, key, exact=False)
        if version == KEY_VERSION:
            (transactional_id,), _ = decode(_KEY_V0, key, pos)
            return str(transactional_id)
    except SchemaError as exc:
        raise UnknownRecordError(f"unreadable transaction log key: {exc}") from None
    raise UnknownRecordError(f"unknown transaction log key version {version}")


def read_value(value: bytes | None) -> TransactionLogValue | None:
    """A record's value, None for a tombstone; UnknownRecordError if it cannot be read (Kafka
    throws for an unknown version or state id, failing that partition's load)."""
    if value is None:
        return None
    try:
        version, pos = decode(_VERSION, value, exact=False)
        schema = _VALUES.get(version)
        if schema is None:
            raise UnknownRecordError(f"unknown transaction log value version {version}")
        fields, _ = decode(schema, value, pos, exact=False)
        state = TransactionState.from_id(fields[3])
    except SchemaError as exc:
        raise UnknownRecordError(f"unreadable transaction log value: {exc}") from None
    except IllegalTransactionStateError as exc:
        raise UnknownRecordError(str(exc)) from None
    producer_id, epoch, timeout_ms, _status, partitions, last_update, start = fields[:7]
    topic_partitions = frozenset() if state is TransactionState.EMPTY or partitions is None else frozenset(
        TopicPartition(entry[0], p) for entry in partitions for p in entry[1])
    return TransactionLogValue(producer_id, epoch, timeout_ms, state, topic_partitions, last_update, start)


def metadata_from_log(transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
    """The metadata of an id read back from the log (Kafka's readTxnRecordValue): no last
    producer id or epoch, no pending change. A transaction found in PrepareCommit or
    PrepareAbort is the loader's to complete (prepare_complete, then its markers)."""
    return TransactionMetadata(transactional_id, value.producer_id, value.producer_epoch, value.txn_timeout_ms,
                               value.state, now_ms=value.txn_last_update_timestamp,
                               topic_partitions=value.topic_partitions, txn_start_timestamp=value.txn_start_timestamp)
