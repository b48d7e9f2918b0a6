"""ElectLeaders (KIP-460; Kafka's KafkaApis.handleElectLeaders): preferred or unclean leader
elections the controller runs for the partitions a client names, answered once this broker's
metadata shows the new leaders (Kafka's DelayedElectLeader).

With an authorizer, ALTER on the cluster is needed (a gate KafkaApis runs before this handler):
denied, the request's error and every partition it names are CLUSTER_AUTHORIZATION_FAILED."""
from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import wire
from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.controller.events import (
    ElectionNotNeededError,
    ElectionTrigger,
    ElectionType,
    EventPreemptedError,
    NotControllerError,
    ReplicaLeaderElection,
    UnknownPartitionError,
)
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

_ELECT_LEADERS = wire(api_keys.ELECT_LEADERS)
_ELECT_LEADERS.requires(_ELECT_LEADERS.check(AclOperation.ALTER, ResourceType.CLUSTER))


async def elect_leaders(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """ElectLeaders (KIP-460), run by the controller: clients send it to the controller broker
    (Metadata's controller_id); any other broker answers NOT_CONTROLLER. As in Kafka, a request
    for every partition (null topic_partitions) leaves out those that needed no election, and
    the answer waits, up to its timeout, until this broker's metadata shows the new leaders."""
    requested_all = req.topic_partitions is None
    if requested_all:
        cache = ctx.metadata
        tps = frozenset(TopicPartition(t, p) for t in cache.topics() for p in cache.partitions(t) or {})
    else:
        tps = frozenset(TopicPartition(t.topic, p) for t in req.topic_partitions for p in t.partitions)
    results: dict[TopicPartition, tuple[int, str | None]]
    try:
        election_type = ElectionType(req.election_type) if version >= 1 else ElectionType.PREFERRED
    except ValueError:
        results = {tp: (ErrorCode.INVALID_REQUEST, f"unknown election type {req.election_type}") for tp in tps}
        return _elect_leaders_response(header, version, ErrorCode.INVALID_REQUEST, results)
    outcome = await ctx.ask_controller(
        lambda done: ReplicaLeaderElection(tps, election_type, ElectionTrigger.ADMIN, done))
    if isinstance(outcome, Exception):
        code = (ErrorCode.NOT_CONTROLLER if isinstance(outcome, (NotControllerError, EventPreemptedError))
                else ErrorCode.REQUEST_TIMED_OUT if isinstance(outcome, TimeoutError)
                else ErrorCode.UNKNOWN_SERVER_ERROR)
        results = {tp: (code, str(outcome)) for tp in tps}
    else:
        not_available = (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election_type is ElectionType.PREFERRED
                         else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        # ReplicaLeaderElection's callback: each partition's new leadership or its error
        per_partition = cast("dict[TopicPartition, LeaderAndIsr | Exception]", outcome)
        elected = {tp: r.leader for tp, r in per_partition.items() if isinstance(r, LeaderAndIsr)}
        results = {tp: (_ELECTION_ERRORS.get(type(r), not_available), str(r)) for tp, r in per_partition.items()
                   if isinstance(r, Exception) and not (requested_all and isinstance(r, ElectionNotNeededError))}
        for tp in await _wait_for_elected(ctx, elected, req.timeout.total_seconds()):
            results[tp] = (ErrorCode.REQUEST_TIMED_OUT, f"leader {elected[tp]} not yet known to this broker")
        results.update({tp: (ErrorCode.NONE, None) for tp in elected if tp not in results})
    return _elect_leaders_response(header, version, ErrorCode.NONE, results)


_ELECTION_ERRORS = {ElectionNotNeededError: ErrorCode.ELECTION_NOT_NEEDED,
                    UnknownPartitionError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


async def _wait_for_elected(ctx: BrokerContext, elected: dict[TopicPartition, int], timeout_s: float) -> list[TopicPartition]:
    """Kafka's DelayedElectLeader: the partitions whose new leader this broker still does not know."""
    deadline = time.monotonic() + max(0.0, timeout_s)
    while True:
        pending = [tp for tp, leader in elected.items() if _known_leader(ctx, tp) != leader]
        if not pending or time.monotonic() >= deadline:
            return pending
        await asyncio.sleep(0.02)


def _known_leader(ctx: BrokerContext, tp: TopicPartition) -> int | None:
    state = (ctx.metadata.partitions(tp.topic) or {}).get(tp.partition)
    return None if state is None else state.leader


def _elect_leaders_response(header: Any, version: int, error: int,
                            results: dict[TopicPartition, tuple[int, str | None]]) -> bytes:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for tp, (code, message) in sorted(results.items()):
        by_topic.setdefault(tp.topic, []).append(
            {"partition_id": tp.partition, "error_code": code, "error_message": message})
    return kio_util.encode_response(api_keys.ELECT_LEADERS, version, header.correlation_id, {
        "throttle_time": 0, "error_code": error,
        "replica_election_results": [{"topic": t, "partition_result": r} for t, r in by_topic.items()]})
