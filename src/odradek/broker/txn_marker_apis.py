"""WriteTxnMarkers (KIP-98): a transaction coordinator has the leaders of a transaction's
partitions write its COMMIT or ABORT marker (Kafka's KafkaApis.handleWriteTxnMarkersRequest).

Each partition of each marker: this broker must lead it (no replica here is
UNKNOWN_TOPIC_OR_PARTITION, a follower NOT_LEADER_OR_FOLLOWER, as Kafka answers), the ISR must
be large enough (NOT_ENOUGH_REPLICAS), and its producer state must take the marker
(Partition.append_marker: an older producer epoch is INVALID_PRODUCER_EPOCH, an older
coordinator epoch TRANSACTION_COORDINATOR_FENCED; a producer with no transaction there is no
error, Kafka writes every partition's marker). Kafka appends markers with acks=all, so the answer
waits until the ISR has each one; one not there within the request timeout is
REQUEST_TIMED_OUT, which the coordinator retries like every error but the fencing ones.
Markers may come again (the coordinator retries until acknowledged): writing one twice is
harmless, a transaction ends once.

Once a marker is on a `__consumer_offsets` partition, the group coordinator settles the offsets
the producer committed in the transaction (GroupCoordinator.handle_txn_completion). Errors are
answered per partition, grouped by producer id as Kafka's response map is.

With an authorizer only a principal with CLUSTER_ACTION on the cluster (a broker) may send it,
as in Kafka 3.7; any other is answered CLUSTER_AUTHORIZATION_FAILED on every partition (a gate
KafkaApis runs before this handler).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.partition import Partition
from odradek.broker.producer_state import ProducerStateError
from odradek.broker.request_authorization import wire
from odradek.common.errors import NotLeaderError
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.log.errors import CorruptRecordError
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

log = logging.getLogger("odradek.broker.txn_marker_apis")

_WRITE_TXN_MARKERS = wire(api_keys.WRITE_TXN_MARKERS)
_WRITE_TXN_MARKERS.requires(_WRITE_TXN_MARKERS.check(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER))

#: how long a marker waits for the ISR (Kafka's request.timeout.ms, its delayed produce's timeout)
MARKER_ACKS_TIMEOUT_MS = 30_000


class _Written:
    """One partition's marker in the log, awaiting the ISR: its answer goes into ``results``."""

    __slots__ = ("results", "tp", "partition", "offset")

    def __init__(self, results: dict[TopicPartition, ErrorCode], tp: TopicPartition, partition: Partition,
                 offset: int) -> None:
        self.results, self.tp, self.partition, self.offset = results, tp, partition, offset


async def write_txn_markers(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """Every marker's partitions appended now, in request order, then answered together once
    the ISR has them all (or the timeout passes)."""
    markers: list[tuple[Any, dict[TopicPartition, ErrorCode]]] = []
    written: list[_Written] = []
    for marker in req.markers:
        results: dict[TopicPartition, ErrorCode] = {}
        markers.append((marker, results))
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, index)
                error, partition, offset = _append(ctx, tp, marker)
                results[tp] = error  # NONE for now where written: the ISR decides
                if partition is not None:
                    written.append(_Written(results, tp, partition, offset))
    if written:
        await _await_isr(written, MARKER_ACKS_TIMEOUT_MS / 1000)
    for marker, results in markers:
        _complete_offsets(ctx, marker, results)
    return kio_util.encode_response(api_keys.WRITE_TXN_MARKERS, version, header.correlation_id,
                                    {"markers": _by_producer(markers)})


def _append(ctx: BrokerContext, tp: TopicPartition, marker: Any) -> tuple[ErrorCode, Partition | None, int]:
    """Write one partition's marker: (error, the partition and the marker's offset once
    written)."""
    partition = ctx.replica_manager.get(tp)
    if partition is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, -1
    if not partition.is_leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None, -1
    if marker.producer_id < 0:  # Kafka would write it; no transaction has a producer id below 0
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None, -1
    if len(partition.isr) < partition.min_insync_replicas:
        return ErrorCode.NOT_ENOUGH_REPLICAS, None, -1
    try:
        offset = partition.append_marker(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                         marker.coordinator_epoch)
    except ProducerStateError as exc:  # an older producer epoch, a deposed coordinator
        log.info("%s: %s marker refused: %s", tp, "COMMIT" if marker.transaction_result else "ABORT", exc)
        return exc.error, None, -1
    except NotLeaderError:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None, -1
    except (OSError, CorruptRecordError) as exc:  # the disk, not the request
        log.error("%s: writing a transaction marker failed: %r", tp, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, None, -1
    return ErrorCode.NONE, partition, offset


async def _await_isr(written: list[_Written], timeout_s: float) -> None:
    """acks=all for every marker written, as Produce waits (KafkaApis._await_acks)."""
    futures = [w.partition.wait_for_high_watermark(w.offset) for w in written]
    await asyncio.wait(futures, timeout=timeout_s)
    for w, fut in zip(written, futures):
        if not fut.done():
            fut.cancel()
            w.results[w.tp] = ErrorCode.REQUEST_TIMED_OUT
        elif fut.exception() is not None:
            w.results[w.tp] = ErrorCode.NOT_LEADER_OR_FOLLOWER  # the leadership moved first
        elif len(w.partition.isr) < w.partition.min_insync_replicas:
            w.results[w.tp] = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def _complete_offsets(ctx: BrokerContext, marker: Any, results: dict[TopicPartition, ErrorCode]) -> None:
    """The marker is on these offsets partitions (and their ISR): the group coordinator makes
    the producer's pending offsets there committed or drops them (Kafka's
    onTransactionCompleted). Its failure is that partition's UNKNOWN_SERVER_ERROR, as in
    Kafka: the coordinator sends the marker again."""
    done = [tp for tp, error in results.items() if tp.topic == OFFSETS_TOPIC and error == ErrorCode.NONE]
    if not done:
        return
    try:
        ctx.group_coordinator.handle_txn_completion(marker.producer_id, {tp.partition for tp in done},
                                                    marker.transaction_result)
    except Exception:  # noqa: BLE001 - one bad group must not take the answer down
        log.exception("settling the offsets of producer %d after its marker failed", marker.producer_id)
        results.update(dict.fromkeys(done, ErrorCode.UNKNOWN_SERVER_ERROR))


def _by_producer(markers: list[tuple[Any, dict[TopicPartition, ErrorCode]]]) -> list[dict[str, Any]]:
    """The response's markers: one per producer id (Kafka answers from a map keyed by it),
    each partition's error by topic."""
    by_producer: dict[int, dict[str, dict[int, ErrorCode]]] = {}
    for marker, results in markers:
        topics = by_producer.setdefault(marker.producer_id, {})
        for tp, error in results.items():
            topics.setdefault(tp.topic, {})[tp.partition] = error
    return [{"producer_id": producer_id, "topics": [
        {"name": name, "partitions": [{"partition_index": p, "error_code": e} for p, e in partitions.items()]}
        for name, partitions in topics.items()]} for producer_id, topics in by_producer.items()]
