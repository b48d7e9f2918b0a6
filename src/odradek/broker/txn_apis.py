"""The transaction APIs a producer sends its transaction coordinator: InitProducerId with a
transactional.id, AddPartitionsToTxn (v4 also from partition leaders, KIP-890's check),
AddOffsetsToTxn and EndTxn.

Requests become calls on the TransactionCoordinator (coordinator/transaction/) and its answers
responses for the version the client asked; the rules live there, this module only
translates, as group_apis.py does for groups.

With an authorizer, as Kafka's KafkaApis: a producer needs WRITE on its transactional id for
each of them (AddOffsetsToTxn READ on the group too); AddPartitionsToTxn v0-3 WRITE on each
topic, where internal topics are always denied and, while any partition is, the others answer
OPERATION_NOT_ATTEMPTED; v4 comes from partition leaders and needs CLUSTER_ACTION on the
cluster. The request-wide checks are gates, which KafkaApis runs before these handlers.
"""
from __future__ import annotations

from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.partition_existence import NotKnownYet, unknown_partitions
from odradek.broker.request_authorization import denied, wire
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.coordinator.partitioning import partition_for
from odradek.coordinator.transaction.transaction_metadata import ProducerIdAndEpoch
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_WRITE, _TXN = AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID
_ADD_PARTITIONS = wire(api_keys.ADD_PARTITIONS_TO_TXN)
_ADD_PARTITIONS.requires(_ADD_PARTITIONS.check(_WRITE, _TXN),
                         lambda req, version: req.v3_and_below_transactional_id if version <= 3 else None)
_ADD_PARTITIONS.requires(_ADD_PARTITIONS.check(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER),
                         lambda _req, version: None if version <= 3 else CLUSTER_NAME)
_ADD_TOPIC = _ADD_PARTITIONS.check(_WRITE, ResourceType.TOPIC)
_ADD_OFFSETS = wire(api_keys.ADD_OFFSETS_TO_TXN)
_ADD_OFFSETS.requires(_ADD_OFFSETS.check(_WRITE, _TXN), lambda req, _version: req.transactional_id)
_ADD_OFFSETS.requires(_ADD_OFFSETS.check(AclOperation.READ, ResourceType.GROUP), lambda req, _version: req.group_id)
_END_TXN = wire(api_keys.END_TXN)
_END_TXN.requires(_END_TXN.check(_WRITE, _TXN), lambda req, _version: req.transactional_id)


def _encode(api_key: int, version: int, header: Any, body: dict[str, Any]) -> bytes:
    return kio_util.encode_response(api_key, version, header.correlation_id, {"throttle_time": 0, **body})


def _fenced(error: ErrorCode, version: int, first_version_knowing_it: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of this request version understands it: versions before it
    was introduced (KIP-588) get INVALID_PRODUCER_EPOCH, which they handle the same way, as
    Kafka's KafkaApis answers them."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version_knowing_it:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _ms(value: Any) -> int:
    """kio decodes timeouts as timedeltas."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


async def init_transactional_producer_id(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """InitProducerId with a transactional.id (without one: init_producer_id.py). v3+ may name
    the id and epoch the producer has (KIP-360), -1 for none."""
    expected = None
    if getattr(req, "producer_id", -1) >= 0:
        expected = ProducerIdAndEpoch(req.producer_id, req.producer_epoch)
    result = await ctx.transaction_coordinator.init_producer_id(req.transactional_id, _ms(req.transaction_timeout),
                                                                expected)
    return _encode(api_keys.INIT_PRODUCER_ID, version, header, {
        "error_code": _fenced(result.error, version, 4), "producer_id": result.producer_id, "producer_epoch": result.producer_epoch})


async def add_partitions_to_txn(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if version <= 3:
        results = await _add_partitions(ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                        req.v3_and_below_producer_epoch, req.v3_and_below_topics, False, version)
        return _encode(api_keys.ADD_PARTITIONS_TO_TXN, version, header, {"results_by_topic_v3_and_below": results})
    answers = []
    for txn in req.transactions:
        topic_results = await _add_partitions(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                              txn.topics, txn.verify_only, version)
        answers.append({"transactional_id": txn.transactional_id, "topic_results": topic_results})
    return _encode(api_keys.ADD_PARTITIONS_TO_TXN, version, header, {"error_code": 0,
                                                                     "results_by_transaction": answers})


async def _add_partitions(ctx: BrokerContext, transactional_id: str, producer_id: int, producer_epoch: int,
                          topics: Any, verify_only: bool, version: int) -> list[dict[str, Any]]:
    """Per topic, per partition answers. As Kafka's handleAddPartitionToTransactionRequest: if
    any topic is unknown, those partitions answer UNKNOWN_TOPIC_OR_PARTITION and the others
    OPERATION_NOT_ATTEMPTED, and nothing is added; so too a topic the producer may not WRITE
    (v0-3, with an authorizer: TOPIC_AUTHORIZATION_FAILED). ``verify_only`` (v4, from a partition
    leader): only check that each partition is in the open transaction (KIP-890)."""
    partitions = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    refused = _unauthorized(ctx, partitions) if version <= 3 and ctx.authorizer is not None else set()
    try:
        unknown = await unknown_partitions(ctx, [tp for tp in partitions if tp.topic not in refused])
    except NotKnownYet:  # retriable: the coordinator is as good as still loading
        return _by_topic(dict.fromkeys(partitions, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    coordinator = ctx.transaction_coordinator
    errors: dict[TopicPartition, ErrorCode]
    if unknown or refused:
        errors = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp.topic in refused
                  else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                  for tp in partitions}
    elif verify_only:
        errors = {tp: coordinator.verify_partition(transactional_id, producer_id, producer_epoch, tp)
                  for tp in partitions}
    else:
        error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
        errors = dict.fromkeys(partitions, _fenced(error, version, 2))
    return _by_topic(errors)


def _unauthorized(ctx: BrokerContext, partitions: list[TopicPartition]) -> set[str]:
    """The topics a producer may not add to its transaction: those it may not WRITE, and
    internal topics always (Kafka filters them out before it asks the authorizer)."""
    internal = {tp.topic for tp in partitions if is_internal(tp.topic)}
    return internal | denied(ctx, _ADD_TOPIC, (tp.topic for tp in partitions if tp.topic not in internal))


def _by_topic(errors: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, error in errors.items():
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "partition_error_code": error})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]


async def add_offsets_to_txn(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """The group's __consumer_offsets partition joins the transaction, so its TxnOffsetCommit
    (to the group coordinator) gets a marker like any other partition of it."""
    offsets = ctx.metadata.partitions(OFFSETS_TOPIC)
    if not offsets:
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE  # the group coordinator's topic is not there yet
    else:
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(req.group_id, len(offsets)))
        error = await ctx.transaction_coordinator.add_partitions(req.transactional_id, req.producer_id,
                                                                 req.producer_epoch, [tp])
    return _encode(api_keys.ADD_OFFSETS_TO_TXN, version, header, {"error_code": _fenced(error, version, 2)})


async def end_txn(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    error = await ctx.transaction_coordinator.end_transaction(req.transactional_id, req.producer_id,
                                                              req.producer_epoch, req.committed)
    return _encode(api_keys.END_TXN, version, header, {"error_code": _fenced(error, version, 2)})
