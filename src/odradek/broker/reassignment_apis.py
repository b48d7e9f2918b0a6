"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455), run by the controller.

Admin clients send both to the controller broker (Metadata's controller_id); any other broker
answers NOT_CONTROLLER, as Kafka's do, and the client looks again. AlterPartitionReassignments
is answered once the reassignments are started (onPartitionReassignment's phases U and A), not when
they complete: a move of gigabytes takes minutes. ListPartitionReassignments shows the
partitions still moving, with the replicas being added and removed.

With an authorizer, as Kafka: ALTER on the cluster to alter, DESCRIBE to list, else
CLUSTER_AUTHORIZATION_FAILED (gates KafkaApis runs before these handlers).
"""
from __future__ import annotations

from typing import Any, cast

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import wire
from odradek.common.metadata import ReplicaAssignment, TopicPartition
from odradek.controller.events import (
    AlterPartitionReassignments,
    EventPreemptedError,
    InvalidReplicaAssignmentError,
    ListPartitionReassignments,
    NoReassignmentInProgressError,
    NotControllerError,
    UnknownPartitionError,
)
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

for _key, _operation in ((api_keys.ALTER_PARTITION_REASSIGNMENTS, AclOperation.ALTER),
                        (api_keys.LIST_PARTITION_REASSIGNMENTS, AclOperation.DESCRIBE)):
    _wiring = wire(_key)
    _wiring.requires(_wiring.check(_operation, ResourceType.CLUSTER))

_ERRORS = {
    UnknownPartitionError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    InvalidReplicaAssignmentError: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    NoReassignmentInProgressError: ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
}


def _request_error(outcome: Exception) -> ErrorCode:
    """What ended the whole request: not (or no longer) the controller, or no answer."""
    if isinstance(outcome, (NotControllerError, EventPreemptedError)):
        return ErrorCode.NOT_CONTROLLER
    if isinstance(outcome, TimeoutError):
        return ErrorCode.REQUEST_TIMED_OUT
    return ErrorCode.UNKNOWN_SERVER_ERROR


async def alter_partition_reassignments(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    targets: dict[TopicPartition, tuple[int, ...] | None] = {}
    for topic in req.topics:
        for p in topic.partitions:
            replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
            targets[TopicPartition(topic.name, p.partition_index)] = replicas
    outcome = await ctx.ask_controller(lambda done: AlterPartitionReassignments(targets, done))
    error, message = ErrorCode.NONE, None
    results: dict[TopicPartition, tuple[int, str | None]] = {}
    if isinstance(outcome, Exception):
        error, message = _request_error(outcome), str(outcome)
    else:
        started = cast("dict[TopicPartition, Exception | None]", outcome)  # AlterPartitionReassignments' answer
        for tp, result in started.items():
            if result is None:
                results[tp] = (ErrorCode.NONE, None)
            else:
                results[tp] = (_ERRORS.get(type(result), ErrorCode.UNKNOWN_SERVER_ERROR), str(result))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, (code, text) in sorted(results.items()):
        by_topic.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": code, "error_message": text})
    return kio_util.encode_response(api_keys.ALTER_PARTITION_REASSIGNMENTS, version, header.correlation_id, {
        "throttle_time": 0, "error_code": error, "error_message": message,
        "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})


async def list_partition_reassignments(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    wanted = None if req.topics is None else frozenset(
        TopicPartition(t.name, p) for t in req.topics for p in t.partition_indexes)
    outcome = await ctx.ask_controller(lambda done: ListPartitionReassignments(wanted, done))
    body: dict[str, Any] = {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None, "topics": []}
    if isinstance(outcome, Exception):
        body.update(error_code=_request_error(outcome), error_message=str(outcome))
    else:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        moving = cast("dict[TopicPartition, ReplicaAssignment]", outcome)  # ListPartitionReassignments' answer
        for tp, assignment in sorted(moving.items()):
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "replicas": list(assignment.replicas),
                "adding_replicas": list(assignment.adding), "removing_replicas": list(assignment.removing)})
        body["topics"] = [{"name": t, "partitions": ps} for t, ps in by_topic.items()]
    return kio_util.encode_response(api_keys.LIST_PARTITION_REASSIGNMENTS, version, header.correlation_id, body)
