"""DeleteRecords (API 21, KIP-107): a client moves the log start offset of partitions it names.

Kafka's ReplicaManager.deleteRecords and DelayedDeleteRecords: the leader of each partition
moves its log start to the requested offset (-1: the high watermark) at once, deleting the
segments wholly below it, and followers adopt it from their next Fetch response and report
theirs in the Fetch after (partition.py, fetcher.py). The answer, each partition's new low
watermark, waits until every ISR member has moved, or the request's timeout passes
(REQUEST_TIMED_OUT). Records below the log start are gone for every reader: ListOffsets
earliest answers the new log start, a fetch below it is OFFSET_OUT_OF_RANGE.

With an authorizer, each topic needs DELETE (Kafka's handleDeleteRecordsRequest), else its
partitions answer TOPIC_AUTHORIZATION_FAILED and keep their records.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.partition import DeleteRecordsPolicyError
from odradek.broker.request_authorization import denied, wire
from odradek.common.errors import NotLeaderError
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.log.errors import OffsetOutOfRangeError
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

log = logging.getLogger("odradek.broker.delete_records")

_DELETE_TOPIC = wire(api_keys.DELETE_RECORDS).check(AclOperation.DELETE, ResourceType.TOPIC)

INVALID_LOW_WATERMARK = -1  # Kafka's DeleteRecordsResponse.INVALID_LOW_WATERMARK

# per topic, per partition index: [error_code, low_watermark], filled in as we go
Results = dict[str, dict[int, list[int]]]


def delete_records(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes | Awaitable[bytes]:
    results: Results = {}
    waits: list[tuple[list[int], asyncio.Future[int]]] = []
    refused = denied(ctx, _DELETE_TOPIC, (t.name for t in req.topics))
    for topic in req.topics:
        out = results.setdefault(topic.name, {})
        for p in topic.partitions:
            entry = out[p.partition_index] = [int(ErrorCode.NONE), INVALID_LOW_WATERMARK]
            if refused and topic.name in refused:
                entry[0] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                continue
            error, required = _delete_on_leader(ctx, TopicPartition(topic.name, p.partition_index), p.offset)
            if error is not None:
                entry[0] = int(error)
            else:
                partition = ctx.replica_manager.get(TopicPartition(topic.name, p.partition_index))
                assert partition is not None and required is not None
                waits.append((entry, partition.wait_for_low_watermark(required)))
    if any(not fut.done() for _, fut in waits):
        return _await_low_watermarks(header.correlation_id, version, results, waits,
                                     req.timeout.total_seconds())
    _collect(waits)
    return _response(header.correlation_id, version, results)


def _delete_on_leader(ctx: BrokerContext, tp: TopicPartition, offset: int) -> tuple[ErrorCode | None, int | None]:
    """(error, None) or (None, the offset every ISR member's log start must reach)."""
    if tp.topic == OFFSETS_TOPIC:  # Kafka: "Cannot delete records of internal topic"
        return ErrorCode.INVALID_TOPIC_EXCEPTION, None
    partition = ctx.replica_manager.get(tp)
    if partition is None or not partition.is_leader:
        return ctx.metadata.not_served_error(tp), None
    try:
        return None, partition.delete_records_on_leader(offset)
    except NotLeaderError:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
    except DeleteRecordsPolicyError as exc:
        log.info("DeleteRecords refused: %s", exc)
        return ErrorCode.POLICY_VIOLATION, None
    except OffsetOutOfRangeError as exc:
        log.info("DeleteRecords refused: %s", exc)
        return ErrorCode.OFFSET_OUT_OF_RANGE, None


async def _await_low_watermarks(correlation_id: int, version: int, results: Results,
                                waits: list[tuple[list[int], asyncio.Future[int]]], timeout_s: float) -> bytes:
    await asyncio.wait([fut for _, fut in waits], timeout=max(timeout_s, 0.001))
    _collect(waits)
    return _response(correlation_id, version, results)


def _collect(waits: list[tuple[list[int], asyncio.Future[int]]]) -> None:
    for entry, fut in waits:
        if not fut.done():
            fut.cancel()
            entry[0] = int(ErrorCode.REQUEST_TIMED_OUT)
        elif fut.exception() is not None:  # leadership moved while we waited
            entry[0] = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        else:
            entry[1] = fut.result()


def _response(correlation_id: int, version: int, results: Results) -> bytes:
    return kio_util.encode_response(api_keys.DELETE_RECORDS, version, correlation_id, {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": [
            {"partition_index": index, "low_watermark": low, "error_code": error}
            for index, (error, low) in partitions.items()]}
            for name, partitions in results.items()]})
