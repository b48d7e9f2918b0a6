"""The operators' transaction APIs (KIP-664), what kafka-transactions.sh and `odradek
transactions` send: DescribeProducers, answered by any replica of each partition from its
producer state (producer_state.py), and ListTransactions and DescribeTransactions, answered by
transaction coordinators from the ids they hold (coordinator/transaction/). All three only read.

As Kafka's KafkaApis: DescribeProducers refuses a whole topic with an illegal name
(INVALID_TOPIC_EXCEPTION) or one the metadata lacks (UNKNOWN_TOPIC_OR_PARTITION), and each
partition this broker hosts no replica of with NOT_LEADER_OR_FOLLOWER (the topic exists) or
UNKNOWN_TOPIC_OR_PARTITION; a follower answers from its own producer state, which trails the
leader's by what it has not fetched yet. ListTransactions lists only this broker's own ids (a
client asks every broker); DescribeTransactions answers each id that this broker coordinates.

kio cannot read back the DescribeTransactions that Kafka (and this module) sends for an id
with no transaction yet: its start time is -1, which kio's reader refuses as a negative
timestamp. `read_describe_transactions_response` reads it instead (for the tools and the
fuzzer's oracle).

With an authorizer, as Kafka's KafkaApis: DescribeProducers needs READ on each topic (after its
name is found legal; else TOPIC_AUTHORIZATION_FAILED on each partition), DescribeTransactions
DESCRIBE on each transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and shows only
the topics the principal may DESCRIBE, ListTransactions lists only the ids it may DESCRIBE.
"""
from __future__ import annotations

import datetime
from typing import Any, NamedTuple

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.partition import Partition
from odradek.broker.request_authorization import denied, refusal, visible, wire
from odradek.broker.topic_admin import TopicError, validate_topic_name
from odradek.common.metadata import TopicPartition
from odradek.coordinator.transaction.transaction_coordinator import TransactionDescription
from odradek.protocol import kio_util, schema
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)

_READ_PRODUCERS = wire(api_keys.DESCRIBE_PRODUCERS).check(AclOperation.READ, ResourceType.TOPIC)
_DESCRIBE_TRANSACTIONS = wire(api_keys.DESCRIBE_TRANSACTIONS)
_DESCRIBE_ID = _DESCRIBE_TRANSACTIONS.check(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)
_DESCRIBE_TXN_TOPIC = _DESCRIBE_TRANSACTIONS.check(AclOperation.DESCRIBE, ResourceType.TOPIC)
_LIST_ID = wire(api_keys.LIST_TRANSACTIONS).check(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID)


def _encode(api_key: int, version: int, header: Any, body: dict[str, Any]) -> bytes:
    return kio_util.encode_response(api_key, version, header.correlation_id, {"throttle_time": 0, **body})


# -- DescribeProducers (API 61) -------------------------------------------------------------------

def describe_producers(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    topics = []
    refused = denied(ctx, _READ_PRODUCERS, (t.name for t in req.topics))
    for topic in req.topics:
        error, message = _topic_error(ctx, topic.name, refused)
        partitions = []
        for index in topic.partition_indexes:
            if error is not None:
                partitions.append(_partition_error(index, error, message))
            else:
                partitions.append(_active_producers(ctx, TopicPartition(topic.name, index)))
        topics.append({"name": topic.name, "partitions": partitions})
    return _encode(api_keys.DESCRIBE_PRODUCERS, version, header, {"topics": topics})


def _topic_error(ctx: BrokerContext, name: str, refused: frozenset[str]) -> tuple[ErrorCode | None, str | None]:
    """Kafka's checks of the topic, before any partition: a legal name, READ on it (not in
    ``refused``), known to the metadata."""
    try:
        validate_topic_name(name)
    except TopicError as exc:
        return exc.code, str(exc)
    if name in refused:
        return refusal(_READ_PRODUCERS), None
    if not ctx.metadata.partitions(name):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    return None, None


def _partition_error(index: int, error: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"partition_index": index, "error_code": error, "error_message": message, "active_producers": []}


def _active_producers(ctx: BrokerContext, tp: TopicPartition) -> dict[str, Any]:
    """Kafka's Partition.activeProducerState: every producer id the replica's state holds."""
    partition = ctx.replica_manager.get(tp)
    if partition is None:
        return _partition_error(tp.partition, ctx.metadata.not_served_error(tp))
    return {"partition_index": tp.partition, "error_code": ErrorCode.NONE, "error_message": None,
            "active_producers": producer_states(partition)}


def producer_states(partition: Partition) -> list[dict[str, Any]]:
    """Each producer as DescribeProducers names it (Kafka's UnifiedLog.activeProducers): its
    epoch, the last sequence and timestamp of its last batch here (-1 when all it has here is
    a marker), the coordinator epoch of its last marker, and the first offset of its
    transaction open here (-1: none)."""
    out = []
    for producer_id, entry in partition.producers.producers.copy().items():
        batches = entry.batches  # one read: a new epoch replaces the deque
        last = batches[-1] if batches else None
        first = entry.txn_first_offset
        out.append({"producer_id": producer_id, "producer_epoch": entry.epoch,
                    "last_sequence": last.last_seq if last is not None else -1,
                    "last_timestamp": last.timestamp if last is not None else -1,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": first if first is not None else -1})
    return out


# -- ListTransactions (API 66) --------------------------------------------------------------------

def list_transactions(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """The ids this broker coordinates; v1's duration filter (-1: none) where the version has it."""
    listing = ctx.transaction_coordinator.list_transactions(
        frozenset(int(p) for p in req.producer_id_filters), req.state_filters,
        int(getattr(req, "duration_filter", -1)))
    shown = visible(ctx, _LIST_ID, listing.transactions, lambda t: t.transactional_id)
    return _encode(api_keys.LIST_TRANSACTIONS, version, header, {
        "error_code": listing.error, "unknown_state_filters": listing.unknown_state_filters,
        "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                "transaction_state": t.state.kafka_name} for t in shown]})


# -- DescribeTransactions (API 65) ----------------------------------------------------------------

def describe_transactions(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """Each id in request order, described by this broker's coordinator (or its error)."""
    coordinator = ctx.transaction_coordinator
    refused = denied(ctx, _DESCRIBE_ID, req.transactional_ids)
    states = [_refused_id(t) if t in refused else _described(coordinator.describe_transaction(t))
              for t in req.transactional_ids]
    if ctx.authorizer is not None:  # only the topics the principal may DESCRIBE
        hidden = denied(ctx, _DESCRIBE_TXN_TOPIC, (topic["topic"] for s in states for topic in s["topics"]))
        for state in states:
            state["topics"] = [topic for topic in state["topics"] if topic["topic"] not in hidden]
    return _encode(api_keys.DESCRIBE_TRANSACTIONS, version, header, {"transaction_states": states})


def _refused_id(transactional_id: str) -> dict[str, Any]:
    return {"error_code": refusal(_DESCRIBE_ID), "transactional_id": transactional_id, "transaction_state": "",
            "transaction_timeout": 0, "transaction_start_time": _EPOCH, "producer_id": 0, "producer_epoch": 0,
            "topics": []}


def _described(d: TransactionDescription) -> dict[str, Any]:
    """One id's entry; with an error the other fields are the schema's zero values, as Kafka
    leaves them."""
    if d.error != ErrorCode.NONE or d.state is None:
        return {"error_code": d.error, "transactional_id": d.transactional_id, "transaction_state": "",
                "transaction_timeout": 0, "transaction_start_time": _EPOCH, "producer_id": 0,
                "producer_epoch": 0, "topics": []}
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(d.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {"error_code": ErrorCode.NONE, "transactional_id": d.transactional_id,
            "transaction_state": d.state.kafka_name, "transaction_timeout": d.txn_timeout_ms,
            "transaction_start_time": _EPOCH + datetime.timedelta(milliseconds=d.txn_start_timestamp),
            "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
            "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()]}


class DescribedTransaction(NamedTuple):
    """One entry of a DescribeTransactions v0 response, as read back; ``start_ms`` -1 for none."""

    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


_TOPIC_DATA = schema.Struct(("topic", schema.CompactString), ("partitions", schema.CompactArray(schema.Int32)),
                            ("tags", schema.TaggedFields))
_TRANSACTION_STATE = schema.Struct(
    ("error_code", schema.Int16), ("transactional_id", schema.CompactString),
    ("transaction_state", schema.CompactString), ("transaction_timeout_ms", schema.Int32),
    ("transaction_start_time_ms", schema.Int64), ("producer_id", schema.Int64), ("producer_epoch", schema.Int16),
    ("topics", schema.CompactArray(_TOPIC_DATA)), ("tags", schema.TaggedFields))
_DESCRIBE_TRANSACTIONS_V0 = schema.Struct(
    ("correlation_id", schema.Int32), ("header_tags", schema.TaggedFields),  # response header v1
    ("throttle_time_ms", schema.Int32), ("transaction_states", schema.CompactArray(_TRANSACTION_STATE)),
    ("tags", schema.TaggedFields))


def read_describe_transactions_response(frame: bytes | memoryview) -> tuple[int, list[DescribedTransaction]]:
    """(correlation id, entries) of a DescribeTransactions v0 response frame (without its size
    prefix); schema.SchemaError if it is not one, trailing bytes included."""
    (correlation_id, _, _, states, _), _end = schema.decode(_DESCRIBE_TRANSACTIONS_V0, frame)
    return correlation_id, [
        DescribedTransaction(code, transactional_id, state, timeout_ms, start_ms, producer_id, epoch,
                             tuple((topic, p) for topic, partitions, _ in topics for p in partitions))
        for code, transactional_id, state, timeout_ms, start_ms, producer_id, epoch, topics, _ in states]
