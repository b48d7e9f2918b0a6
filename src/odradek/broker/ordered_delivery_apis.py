"""The broker's answers to the ordered delivery APIs (KIP-253 parts 7 and 8; the messages are
protocol/ordered_delivery_api.py's, specified in docs/protocol.md).

ConsumerGroupPosition goes to the group's coordinator, whose position exchange
(coordinator/group/group_positions.py) holds the positions; a broker that does not coordinate
the group answers NOT_COORDINATOR, as it would a Heartbeat. PartitionLeaderEpochsForPartitions
is answered by any broker from the partition state znodes, where the controller writes the
leader epoch maps of an ordered expansion and deletion: one batched ZooKeeper read per request,
in a worker thread (KafkaZkClient blocks), and only for partitions the broker's metadata knows,
so a request naming made-up partitions costs ZooKeeper nothing. DescribeOrderedGroups goes to
the group's coordinator too, and is answered from what the members' ConsumerGroupPosition
requests told the position exchange about their blocks. The first of these requests a broker
answers also puts the exchange's blocks among its Prometheus metrics (it holds none before:
the exchange is made on first use, and server.py knows nothing of KIP-253).

Both are inert for topics without enable.ordered.delivery: such partitions have no maps (both
come back null) and no member asks for their positions. Bytes that are not one of these
requests close the connection (kafka_apis.py's rule for what is not a Kafka request); a request
that decodes always gets an answer.

With an authorizer each is authorized as the Kafka API it resembles (security/authorization_table.py):
ConsumerGroupPosition as Heartbeat (READ on the group, else GROUP_AUTHORIZATION_FAILED),
PartitionLeaderEpochsForPartitions as a client's OffsetForLeaderEpoch (DESCRIBE on each topic,
else TOPIC_AUTHORIZATION_FAILED for its partitions and counts, and nothing of it is read),
DescribeOrderedGroups as DescribeGroups (DESCRIBE on each group).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from weakref import WeakKeyDictionary

from odradek.broker.connection import CloseConnection
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import allowed, denied, refusal, wire
from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.group_positions import GroupPositions
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.errors import ErrorCode
from odradek.protocol.kio_util import EncodedResponse
from odradek.security.acl import AclOperation, ResourceType

log = logging.getLogger("odradek.broker.ordered_delivery_apis")

#: how long a PartitionLeaderEpochsForPartitions waits for ZooKeeper before answering
#: REQUEST_TIMED_OUT (retriable): kazoo queues a read for as long as ZooKeeper is away
ZOOKEEPER_READ_TIMEOUT_S = 10.0

_exchanges: WeakKeyDictionary[GroupCoordinator, GroupPositions] = WeakKeyDictionary()

_READ_GROUP = wire(api.API_CONSUMER_GROUP_POSITION).check(AclOperation.READ, ResourceType.GROUP)
_DESCRIBE_TOPIC = wire(api.API_PARTITION_LEADER_EPOCHS_FOR_PARTITIONS).check(AclOperation.DESCRIBE,
                                                                              ResourceType.TOPIC)
_DESCRIBE_GROUP = wire(api.API_DESCRIBE_ORDERED_GROUPS).check(AclOperation.DESCRIBE, ResourceType.GROUP)


def positions_of(coordinator: GroupCoordinator) -> GroupPositions:
    """The position exchange of a broker's group coordinator (one per coordinator, made on
    first use: it holds nothing until a member of an ordered topic's group asks)."""
    exchange = _exchanges.get(coordinator)
    if exchange is None:
        exchange = _exchanges[coordinator] = GroupPositions(coordinator)
    return exchange


def handle(ctx: BrokerContext, frame: memoryview) -> bytes | Awaitable[bytes]:
    """One request frame (without its size prefix) of either API."""
    try:
        api_key, version, correlation_id, _client_id, request = api.decode_request_frame(frame)
    except Exception as exc:  # noqa: BLE001 - whatever the bytes, the broker stays up
        raise CloseConnection(f"malformed ordered delivery request: {exc!r}") from None
    if isinstance(request, api.ConsumerGroupPositionRequest):
        if not allowed(ctx, _READ_GROUP, request.group_id):
            return _encoded(api_key, version, correlation_id, api.ConsumerGroupPositionResponse(refusal(_READ_GROUP)))
        exchange = _exported(ctx)
        response = exchange.exchange(request, lambda tp: ctx.metadata.partition(tp) is not None)
        return _encoded(api_key, version, correlation_id, response)
    if isinstance(request, api.DescribeOrderedGroupsRequest):
        exchange = _exported(ctx)
        refused = denied(ctx, _DESCRIBE_GROUP, request.groups)
        described = api.DescribeOrderedGroupsResponse({
            g: api.OrderedGroupDescription(refusal(_DESCRIBE_GROUP)) if g in refused else exchange.describe(g)
            for g in request.groups})
        return _encoded(api_key, version, correlation_id, described)
    return _partition_leader_epochs(ctx, api_key, version, correlation_id, request)


def _exported(ctx: BrokerContext) -> GroupPositions:
    """The coordinator's position exchange, its blocks exported in the broker's metrics (once)."""
    exchange = positions_of(ctx.group_coordinator)
    if ctx.metrics is not None:
        ctx.metrics.export_ordered_groups(exchange.blocked_summary)
    return exchange


def _encoded(api_key: int, version: int, correlation_id: int, response: api.Response) -> EncodedResponse:
    """The response with its error codes attached, for the broker's request error counts."""
    encoded = EncodedResponse(api.encode_response(api_key, version, correlation_id, response))
    encoded.error_codes = api.error_codes(response)
    return encoded


async def _partition_leader_epochs(ctx: BrokerContext, api_key: int, version: int, correlation_id: int,
                                   request: api.PartitionLeaderEpochsForPartitionsRequest) -> bytes:
    answers: dict[TopicPartition, api.PartitionLeaderEpochs] = {}
    known = []
    refused = denied(ctx, _DESCRIBE_TOPIC, request.topic_names())
    for tp in request.partitions:
        if tp.topic in refused:
            answers[tp] = api.PartitionLeaderEpochs(refusal(_DESCRIBE_TOPIC))
        elif ctx.metadata.partition(tp) is None:
            answers[tp] = api.PartitionLeaderEpochs(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        else:
            known.append(tp)
    if known:
        answers.update(await _read_epochs(ctx, known))
    ordered = {tp: answers[tp] for tp in request.partitions}  # the request's order
    counts = {topic: api.TopicPartitionCounts(refusal(_DESCRIBE_TOPIC)) if topic in refused else _counts(ctx, topic)
              for topic in request.topic_names()}
    return _encoded(api_key, version, correlation_id,
                    api.PartitionLeaderEpochsForPartitionsResponse(ordered, counts=counts))


def _counts(ctx: BrokerContext, topic: str) -> api.TopicPartitionCounts:
    """A topic's counts from this broker's metadata, which the controller's LeaderAndIsr and
    UpdateMetadata keep (the same counts this broker's produce fence checks against)."""
    partitions = ctx.metadata.partitions(topic)
    if not partitions:
        return api.TopicPartitionCounts(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    counts = ctx.metadata.ordered_partition_counts(topic) or (api.UNKNOWN, api.UNKNOWN)
    return api.TopicPartitionCounts(ErrorCode.NONE, *counts, len(partitions))


async def _read_epochs(ctx: BrokerContext, tps: list[TopicPartition]) -> dict[TopicPartition, api.PartitionLeaderEpochs]:
    """The maps of each partition's state znode (one batched read); a partition whose znode is
    gone (deleted meanwhile) is UNKNOWN_TOPIC_OR_PARTITION, and every partition gets
    REQUEST_TIMED_OUT when ZooKeeper does not answer in time."""
    try:
        if not ctx.zk.connected:
            raise TimeoutError("not connected to ZooKeeper")
        states: dict[TopicPartition, LeaderAndIsr] = await asyncio.wait_for(
            asyncio.to_thread(ctx.zk.get_partition_states, tps), ZOOKEEPER_READ_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble is the client's to retry
        log.warning("cannot read the partition states of %d partitions from ZooKeeper: %r", len(tps), exc)
        return dict.fromkeys(tps, api.PartitionLeaderEpochs(ErrorCode.REQUEST_TIMED_OUT))
    answers = {}
    for tp in tps:
        state = states.get(tp)
        if state is None:
            answers[tp] = api.PartitionLeaderEpochs(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        ordering = state.ordering
        after = dict(ordering.after_creation) if ordering is not None and ordering.after_creation else None
        before = dict(ordering.before_deletion) if ordering is not None and ordering.before_deletion else None
        answers[tp] = api.PartitionLeaderEpochs(ErrorCode.NONE, after, before)
    return answers
