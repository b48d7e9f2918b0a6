"""The consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, TxnOffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete.

Requests are turned into calls on the GroupCoordinator (coordinator/group/group_coordinator.py)
and its answers into responses for the version the client asked for; the rules live there, this
module only translates. FindCoordinator answers for transactional ids too (key type 1), and
creates the coordinator's internal topic (`__consumer_offsets`, `__transaction_state`) the
first time a client looks for one of its coordinators, as Kafka does, answering
COORDINATOR_NOT_AVAILABLE (retriable) until its partitions have leaders.

With an authorizer, as Kafka's KafkaApis: JoinGroup, SyncGroup, Heartbeat and LeaveGroup need
READ on the group, OffsetCommit READ on the group and on each topic, TxnOffsetCommit WRITE on
the transactional id besides, OffsetDelete DELETE on the group and READ on each topic (those
request-wide checks are gates, run by KafkaApis before the handler); OffsetFetch DESCRIBE on each
group and topic (a request for all of a group's offsets leaves out the topics it may not
DESCRIBE); FindCoordinator DESCRIBE on each group or transactional id it looks for (a denied key
creates no internal topic); DescribeGroups DESCRIBE and DeleteGroups DELETE on each group;
ListGroups lists only the groups the principal may DESCRIBE, unless it may DESCRIBE the cluster.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Iterable

from odradek.broker import api_keys
from odradek.broker.config import BrokerConfig
from odradek.broker.context import BrokerContext
from odradek.broker.create_topics import is_topic_exists_error
from odradek.broker.metadata_apis import cache_until_the_controller_speaks
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition_existence import NotKnownYet, unknown_partitions
from odradek.broker.request_authorization import (
    MESSAGES,
    NOT_REQUESTED,
    allowed,
    authorized_operations,
    denied,
    refusal,
    visible,
    wire,
)
from odradek.broker.session import current_session
from odradek.broker.topic_admin import assign_replicas
from odradek.common.metadata import TopicAssignment, TopicPartition
from odradek.coordinator.group.group_coordinator import JoinGroupRequest
from odradek.coordinator.group.group_metadata import OffsetAndMetadata
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.coordinator.partitioning import partition_for
from odradek.coordinator.scheduler import BackgroundTasks
from odradek.coordinator.transaction.transaction_state_manager import TRANSACTION_STATE_TOPIC
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.security.authorization_table import Check, Scope
from odradek.zk.paths import new_topic_id

log = logging.getLogger("odradek.broker.group_apis")

GROUP_KEY, TRANSACTION_KEY = 0, 1

# -- what these APIs authorize (broker/request_authorization.py) ------------------------------------

_READ, _DESCRIBE, _DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
_GROUP, _TOPIC = ResourceType.GROUP, ResourceType.TOPIC
for _key in (api_keys.JOIN_GROUP, api_keys.SYNC_GROUP, api_keys.HEARTBEAT, api_keys.LEAVE_GROUP):
    _wiring = wire(_key)
    _wiring.requires(_wiring.check(_READ, _GROUP), lambda req, _version: req.group_id)
_OFFSET_COMMIT = wire(api_keys.OFFSET_COMMIT)
_OFFSET_COMMIT.requires(_OFFSET_COMMIT.check(_READ, _GROUP), lambda req, _version: req.group_id)
_COMMIT_TOPIC = _OFFSET_COMMIT.check(_READ, _TOPIC)
_TXN_OFFSET_COMMIT = wire(api_keys.TXN_OFFSET_COMMIT)
_TXN_OFFSET_COMMIT.requires(_TXN_OFFSET_COMMIT.check(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID),
                            lambda req, _version: req.transactional_id)
_TXN_OFFSET_COMMIT.requires(_TXN_OFFSET_COMMIT.check(_READ, _GROUP), lambda req, _version: req.group_id)
_TXN_COMMIT_TOPIC = _TXN_OFFSET_COMMIT.check(_READ, _TOPIC)
_OFFSET_DELETE = wire(api_keys.OFFSET_DELETE)
_OFFSET_DELETE.requires(_OFFSET_DELETE.check(_DELETE, _GROUP), lambda req, _version: req.group_id)
_OFFSET_DELETE_TOPIC = _OFFSET_DELETE.check(_READ, _TOPIC)
_OFFSET_FETCH = wire(api_keys.OFFSET_FETCH)
_FETCH_GROUP = _OFFSET_FETCH.check(_DESCRIBE, _GROUP)
_FETCH_NAMED_TOPIC = _OFFSET_FETCH.check(_DESCRIBE, _TOPIC, Scope.EACH)
_FETCH_ALL_TOPICS = _OFFSET_FETCH.check(_DESCRIBE, _TOPIC, Scope.HIDDEN)
_FIND_COORDINATOR = wire(api_keys.FIND_COORDINATOR)
_FIND_CHECKS = {GROUP_KEY: _FIND_COORDINATOR.check(_DESCRIBE, _GROUP),
                TRANSACTION_KEY: _FIND_COORDINATOR.check(_DESCRIBE, ResourceType.TRANSACTIONAL_ID)}
_DESCRIBE_GROUP = wire(api_keys.DESCRIBE_GROUPS).check(_DESCRIBE, _GROUP)
_LIST_GROUP = wire(api_keys.LIST_GROUPS).check(_DESCRIBE, _GROUP)
_DELETE_GROUP = wire(api_keys.DELETE_GROUPS).check(_DELETE, _GROUP)


def _encode(api_key: int, version: int, header: Any, body: dict[str, Any]) -> bytes:
    return kio_util.encode_response(api_key, version, header.correlation_id, {"throttle_time": 0, **body})


def _ms(value: Any) -> int:
    """kio decodes timeouts as timedeltas."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


# -- FindCoordinator ---------------------------------------------------------------------------

class InternalTopicCreator:
    """Creates a coordinator's internal topic once, on first use (`__consumer_offsets` for
    groups, `__transaction_state` for transactions, as Kafka's AutoTopicCreationManager
    does): its configured partition count, its configured replication factor or the live broker
    count if fewer (with a warning), compacted, and its min.insync.replicas where the
    replication factor allows (for offsets 2 once there are three replicas: with two, a single
    broker's loss would stop every commit)."""

    def __init__(self, topic: str, settings: Callable[[BrokerConfig], tuple[int, int, int, int]]) -> None:
        """``settings``: (partitions, replication factor, min.insync.replicas, segment bytes)."""
        self.topic = topic
        self._settings = settings
        self._tasks = BackgroundTasks()  # held, and a failure logged
        self._creating: asyncio.Task[None] | None = None

    def ensure(self, ctx: BrokerContext) -> None:
        if self._creating is None or self._creating.done():
            self._creating = self._tasks.spawn(self._create(ctx), f"creating {self.topic}")

    async def _create(self, ctx: BrokerContext) -> None:
        partitions, wanted_rf, min_isr, segment_bytes = self._settings(ctx.config)
        live = sorted(b.id for b in ctx.metadata.live_brokers)
        if not live:
            return
        rf = min(wanted_rf, len(live))
        if rf < wanted_rf:
            log.warning("creating %s with replication factor %d: only %d live brokers, fewer than the %d "
                        "configured", self.topic, rf, len(live), wanted_rf)
        configs = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
                   "min.insync.replicas": str(max(1, min(min_isr, rf)))}
        assignment = TopicAssignment(self.topic, new_topic_id(), assign_replicas(live, partitions, rf))
        try:
            await asyncio.to_thread(ctx.zk.create_topic, assignment, configs)
            log.info("created %s: %d partitions, replication factor %d", self.topic, partitions, rf)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: the next FindCoordinator retries
            if not is_topic_exists_error(exc):  # else another broker made it first
                log.warning("creating %s failed: %r", self.topic, exc)


def _offsets_topic_settings(cfg: BrokerConfig) -> tuple[int, int, int, int]:
    return (cfg.offsets_topic_num_partitions, cfg.offsets_topic_replication_factor,
            2 if cfg.offsets_topic_replication_factor >= 3 else 1, cfg.offsets_topic_segment_bytes)


def _transaction_topic_settings(cfg: BrokerConfig) -> tuple[int, int, int, int]:
    return (cfg.transaction_state_log_num_partitions, cfg.transaction_state_log_replication_factor,
            cfg.transaction_state_log_min_isr, cfg.transaction_state_log_segment_bytes)


_CREATORS = {GROUP_KEY: InternalTopicCreator(OFFSETS_TOPIC, _offsets_topic_settings),
             TRANSACTION_KEY: InternalTopicCreator(TRANSACTION_STATE_TOPIC, _transaction_topic_settings)}


def find_coordinator(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes | Awaitable[bytes]:
    """Answered from the metadata cache, as Metadata is; a broker the controller has not yet
    spoken to answers from ZooKeeper, also as Metadata does (metadata_cache.py says why): its
    empty cache would call an existing coordinator topic missing. Such an answer made
    librdkafka's coordinator request give up its FindCoordinator retries (three answers in
    300 ms) and wait for a broker state change that never came, so a
    send_offsets_to_transaction hung for minutes (librdkafka never checks that request's
    timeout, its issue #5456)."""
    if version >= 4:
        keys = list(req.coordinator_keys)
    else:
        keys = [req.key]
    key_type = req.key_type if version >= 1 else GROUP_KEY
    creator = _CREATORS.get(key_type)
    refused = denied(ctx, _FIND_CHECKS[key_type], keys) if creator is not None else frozenset()
    if creator is None or not keys or len(refused) == len(set(keys)):  # nothing to create the topic for
        return _find_coordinator_response(ctx.metadata, header, version, keys, key_type, refused)
    if not ctx.metadata.initialized:
        return _find_coordinator_from_zookeeper(ctx, header, version, keys, key_type, creator, refused)
    return _answer_from_cache(ctx, header, version, keys, key_type, creator, refused)


async def _creating_internal_topic(ctx: BrokerContext, header: Any, version: int, keys: list[str],
                                   key_type: int, creator: InternalTopicCreator, refused: frozenset[str]) -> bytes:
    """Starts creating the coordinator's topic (on the event loop, where its task runs) and
    answers at once: COORDINATOR_NOT_AVAILABLE, which clients retry."""
    creator.ensure(ctx)
    return _find_coordinator_response(ctx.metadata, header, version, keys, key_type, refused)


async def _find_coordinator_from_zookeeper(ctx: BrokerContext, header: Any, version: int, keys: list[str],
                                           key_type: int, creator: InternalTopicCreator,
                                           refused: frozenset[str]) -> bytes:
    """The answer from the coordinator topic's state in ZooKeeper. A topic missing there too is
    created by the first broker the controller has spoken to (creating needs the live brokers):
    until then COORDINATOR_NOT_AVAILABLE, as for any topic being created."""
    cache = await cache_until_the_controller_speaks(ctx, [creator.topic])
    if cache is ctx.metadata and cache.partitions(creator.topic) is None:
        return await _creating_internal_topic(ctx, header, version, keys, key_type, creator, refused)
    return _find_coordinator_response(cache, header, version, keys, key_type, refused)


def _answer_from_cache(ctx: BrokerContext, header: Any, version: int, keys: list[str], key_type: int,
                       creator: InternalTopicCreator, refused: frozenset[str]) -> bytes | Awaitable[bytes]:
    """The answer from the metadata cache (creating the coordinator's topic if it is missing)."""
    if ctx.metadata.partitions(creator.topic) is None:
        return _creating_internal_topic(ctx, header, version, keys, key_type, creator, refused)
    return _find_coordinator_response(ctx.metadata, header, version, keys, key_type, refused)


def _find_coordinator_response(cache: MetadataCache, header: Any, version: int, keys: list[str],
                               key_type: int, refused: frozenset[str] = frozenset()) -> bytes:
    """``refused``: the keys the principal may not DESCRIBE (GROUP_AUTHORIZATION_FAILED or
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, without a coordinator)."""
    answers = [_coordinator_for(cache, key, key_type) if key not in refused
               else _denied_key(key_type) for key in keys]
    if version >= 4:
        return _encode(api_keys.FIND_COORDINATOR, version, header, {"coordinators": [
            {"key": key, "node_id": node, "host": host, "port": port, "error_code": error, "error_message": message}
            for key, (error, message, node, host, port) in zip(keys, answers)]})
    error, message, node, host, port = answers[0]
    return _encode(api_keys.FIND_COORDINATOR, version, header, {
        "error_code": error, "error_message": message, "node_id": node, "host": host, "port": port})


def _denied_key(key_type: int) -> tuple[int, str | None, int, str, int]:
    error = refusal(_FIND_CHECKS[key_type])
    return error, MESSAGES[error], -1, "", -1


def _coordinator_for(cache: MetadataCache, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    """(error, message, node id, host, port) of the coordinator for one key: the leader of the
    key's partition of the coordinator's topic."""
    creator = _CREATORS.get(key_type)
    if creator is None:
        return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1
    if key_type == TRANSACTION_KEY and not key:
        return ErrorCode.INVALID_REQUEST, "an empty transactional.id", -1, "", -1
    partitions = cache.partitions(creator.topic)
    if partitions is None:  # being created (find_coordinator started it)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {creator.topic}", -1, "", -1
    state = partitions.get(partition_for(key, len(partitions)))
    broker = None if state is None else cache.broker(state.leader)
    if broker is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"the key's {creator.topic} partition has no leader", -1, "", -1
    address = broker.address(current_session().listener)  # the client's listener's (Kafka's getAliveBrokerNode)
    if address is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator has no listener of the client's", -1, "", -1
    return ErrorCode.NONE, None, broker.id, address[0], address[1]


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------

def join_group_request(header: Any, req: Any, version: int, peer: str) -> JoinGroupRequest:
    """The JoinGroup as the coordinator takes it: before v1 the rebalance timeout is the session
    timeout, v4 brought MEMBER_ID_REQUIRED (KIP-394) and v9 skip_assignment."""
    return JoinGroupRequest(
        group_id=req.group_id, member_id=req.member_id, group_instance_id=getattr(req, "group_instance_id", None),
        protocol_type=req.protocol_type, protocols=tuple((p.name, p.metadata) for p in req.protocols),
        session_timeout_ms=_ms(req.session_timeout),
        rebalance_timeout_ms=_ms(getattr(req, "rebalance_timeout", req.session_timeout)),
        client_id=header.client_id or "", client_host="/" + peer.rpartition(":")[0],
        require_known_member_id=version >= 4, supports_skip_assignment=version >= 9)


async def join_group(ctx: BrokerContext, header: Any, req: Any, version: int, peer: str) -> bytes:
    result = await ctx.group_coordinator.join_group(join_group_request(header, req, version, peer))
    return _encode(api_keys.JOIN_GROUP, version, header, {
        "error_code": result.error, "generation_id": result.generation_id,
        "protocol_type": result.protocol_type, "protocol_name": result.protocol_name if version >= 7
        else (result.protocol_name or ""), "leader": result.leader_id, "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [{"member_id": m, "group_instance_id": i, "metadata": data} for m, i, data in result.members]})


async def sync_group(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if version >= 5 and (req.protocol_type is None or req.protocol_name is None):
        # Kafka's KafkaApis: from v5 both are mandatory
        return _encode(api_keys.SYNC_GROUP, version, header, {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                                          "assignment": b""})
    result = await ctx.group_coordinator.sync_group(
        req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None),
        getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
        {a.member_id: a.assignment for a in req.assignments})
    return _encode(api_keys.SYNC_GROUP, version, header, {
        "error_code": result.error, "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
        "assignment": result.assignment})


def heartbeat(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    error = ctx.group_coordinator.heartbeat(req.group_id, req.member_id, getattr(req, "group_instance_id", None),
                                            req.generation_id)
    return _encode(api_keys.HEARTBEAT, version, header, {"error_code": error})


def leave_group(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        leaving = [(req.member_id, None)]
    error, results = ctx.group_coordinator.leave_group(req.group_id, leaving)
    if version < 3 and error == ErrorCode.NONE and results:
        error = results[0]
    return _encode(api_keys.LEAVE_GROUP, version, header, {
        "error_code": error,
        "members": [{"member_id": m, "group_instance_id": i, "error_code": e}
                    for (m, i), e in zip(leaving, results)]})


# -- OffsetCommit, OffsetFetch, OffsetDelete ---------------------------------------------------

async def _not_committable(ctx: BrokerContext, offsets: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
    """The answer of each partition of an offset commit that must not be committed: those
    that do not exist (partition_existence.py) UNKNOWN_TOPIC_OR_PARTITION, or every one,
    retriable, when that cannot be told now."""
    try:
        return dict.fromkeys(await unknown_partitions(ctx, offsets), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    except NotKnownYet:
        return dict.fromkeys(offsets, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _unauthorized_topics(ctx: BrokerContext, check: Check, offsets: dict[TopicPartition, OffsetAndMetadata]
                         ) -> dict[TopicPartition, ErrorCode]:
    """The partitions of ``offsets`` in topics the principal may not READ, taken out of it:
    TOPIC_AUTHORIZATION_FAILED, as Kafka answers them before it looks at anything else."""
    refused = denied(ctx, check, (tp.topic for tp in offsets))
    if not refused:
        return {}
    out = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in offsets if tp.topic in refused}
    for tp in out:
        del offsets[tp]
    return out


async def offset_commit(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    now = ctx.group_coordinator.clock.milliseconds()
    offsets = {TopicPartition(t.name, p.partition_index): OffsetAndMetadata(
        p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata or "", now)
        for t in req.topics for p in t.partitions}
    unauthorized = _unauthorized_topics(ctx, _COMMIT_TOPIC, offsets)
    results = await _not_committable(ctx, offsets)
    results.update(unauthorized)
    known = {tp: o for tp, o in offsets.items() if tp not in results}
    if known:
        results.update(await ctx.group_coordinator.commit_offsets(
            req.group_id, req.member_id if version >= 1 else "", getattr(req, "group_instance_id", None),
            req.generation_id_or_member_epoch if version >= 1 else -1, known))
    return _encode(api_keys.OFFSET_COMMIT, version, header, {"topics": _by_topic(
        results, lambda tp, e: {"partition_index": tp.partition, "error_code": e})})


async def txn_offset_commit(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """TxnOffsetCommit (KIP-98; v3 adds the consumer's member, instance and generation, KIP-447):
    offsets of partitions that do not exist are UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
    KafkaApis answers; the rest go to the group coordinator, pending in the transaction."""
    now = ctx.group_coordinator.clock.milliseconds()
    offsets = {TopicPartition(t.name, p.partition_index): OffsetAndMetadata(
        p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata or "", now)
        for t in req.topics for p in t.partitions}
    unauthorized = _unauthorized_topics(ctx, _TXN_COMMIT_TOPIC, offsets)
    results = await _not_committable(ctx, offsets)
    known = {tp: o for tp, o in offsets.items() if tp not in results}
    results.update(unauthorized)
    error = await _verify_offsets_partition(ctx, req) if known else None
    if error is not None:
        results.update(dict.fromkeys(known, error))
    elif known:
        results.update(await ctx.group_coordinator.commit_txn_offsets(
            req.group_id, req.producer_id, req.producer_epoch, known, member_id=getattr(req, "member_id", ""),
            group_instance_id=getattr(req, "group_instance_id", None),
            generation_id=getattr(req, "generation_id", -1)))
    if version < 2:
        # producers older than Kafka 2.3's fail on COORDINATOR_LOAD_IN_PROGRESS here (KAFKA-7296)
        results = {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE if e == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else e
                   for tp, e in results.items()}
    return _encode(api_keys.TXN_OFFSET_COMMIT, version, header, {"topics": _by_topic(
        results, lambda tp, e: {"partition_index": tp.partition, "error_code": e})})


async def _verify_offsets_partition(ctx: BrokerContext, req: Any) -> ErrorCode | None:
    """KIP-890 part 1 for offsets, as a partition leader's for records (txn_verification.py):
    the first TxnOffsetCommit of a transaction to the group's offsets partition is checked
    with the transaction coordinator, so a late one, arriving after its transaction ended,
    cannot open a transaction there that no marker would end. None: go ahead (also when this
    broker does not lead the partition: the group coordinator answers NOT_COORDINATOR)."""
    tp = TopicPartition(OFFSETS_TOPIC, ctx.group_coordinator.manager.partition_for(req.group_id))
    partition = ctx.replica_manager.get(tp)
    if partition is None or not partition.is_leader or req.producer_id < 0 \
            or not partition.needs_verification(req.producer_id, req.producer_epoch):
        return None
    guard = partition.verifications.start(req.producer_id)
    answer = await ctx.txn_verifier.verify(req.transactional_id, req.producer_id, req.producer_epoch, [tp])
    error = answer.get(tp, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if error == ErrorCode.NONE and not partition.verifications.holds(req.producer_id, guard):
        error = ErrorCode.INVALID_TXN_STATE  # its transaction ended while it was checked
    if error == ErrorCode.NONE:
        return None
    # retriable for a producer as COORDINATOR_NOT_AVAILABLE, which TxnOffsetCommit answers have
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if error == ErrorCode.NOT_ENOUGH_REPLICAS else error


def offset_fetch(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    stable = getattr(req, "require_stable", False)
    if version >= 8:
        groups = [_fetch_group(ctx, g.group_id, g.topics, stable, version) for g in req.groups]
        return _encode(api_keys.OFFSET_FETCH, version, header, {"groups": [
            {"group_id": g.group_id, "error_code": error, "topics": topics}
            for g, (error, topics) in zip(req.groups, groups)]})
    error, topics = _fetch_group(ctx, req.group_id, req.topics, stable, version)
    return _encode(api_keys.OFFSET_FETCH, version, header, {"error_code": error, "topics": topics})


def _fetch_group(ctx: BrokerContext, group_id: str, topics: Any, require_stable: bool,
                 version: int) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """One group's offsets. With an authorizer: the group needs DESCRIBE (else
    GROUP_AUTHORIZATION_FAILED alone), each topic named too (else TOPIC_AUTHORIZATION_FAILED
    for its partitions); all the group's offsets asked for leaves out the topics it may not
    DESCRIBE."""
    partitions = None if topics is None else [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    unauthorized: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, Any]
    if not allowed(ctx, _FETCH_GROUP, group_id):
        error, offsets = refusal(_FETCH_GROUP), {}
    else:
        if partitions:
            refused = denied(ctx, _FETCH_NAMED_TOPIC, (tp.topic for tp in partitions))
            if refused:
                unauthorized = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in partitions if tp.topic in refused}
                partitions = [tp for tp in partitions if tp not in unauthorized]
        error, offsets = ctx.group_coordinator.fetch_offsets(group_id, partitions, require_stable)
        if topics is None and error == ErrorCode.NONE and ctx.authorizer is not None:
            hidden = denied(ctx, _FETCH_ALL_TOPICS, (tp.topic for tp in offsets))
            offsets = {tp: o for tp, o in offsets.items() if tp.topic not in hidden}
    if error != ErrorCode.NONE:
        # from v2 the group's error stands alone; before, each partition carries it
        offsets = {} if version >= 2 else dict.fromkeys([*(partitions or []), *unauthorized], error)
    else:
        offsets = {**offsets, **unauthorized}

    def entry(tp: TopicPartition, o: Any) -> dict[str, Any]:
        found = isinstance(o, OffsetAndMetadata)
        return {"partition_index": tp.partition, "committed_offset": o.offset if found else -1,
                "committed_leader_epoch": o.leader_epoch if found else -1,
                "metadata": o.metadata if found else "", "error_code": o if isinstance(o, ErrorCode) else 0}
    return error, _by_topic(offsets, entry)


def offset_delete(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    partitions = [TopicPartition(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    refused = denied(ctx, _OFFSET_DELETE_TOPIC, (tp.topic for tp in partitions))
    error, results = ctx.group_coordinator.delete_offsets(req.group_id,
                                                          [tp for tp in partitions if tp.topic not in refused])
    if refused and error == ErrorCode.NONE:
        results.update({tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in partitions if tp.topic in refused})
    return _encode(api_keys.OFFSET_DELETE, version, header, {"error_code": error, "topics": _by_topic(
        results, lambda tp, e: {"partition_index": tp.partition, "error_code": e})})


def _by_topic(per_partition: dict[TopicPartition, Any], entry: Any) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, value in sorted(per_partition.items()):
        topics.setdefault(tp.topic, []).append(entry(tp, value))
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


# -- ListGroups, DescribeGroups, DeleteGroups --------------------------------------------------

def list_groups(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    states = set(getattr(req, "states_filter", ()) or ())
    error, groups = ctx.group_coordinator.list_groups(states)
    groups = visible(ctx, _LIST_GROUP, groups, lambda g: g[0])  # DESCRIBE on the cluster shows them all
    return _encode(api_keys.LIST_GROUPS, version, header, {"error_code": error, "groups": [
        {"group_id": g, "protocol_type": t, "group_state": s} for g, t, s in sorted(groups)]})


def describe_groups(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """Each group the principal may DESCRIBE (else GROUP_AUTHORIZATION_FAILED); v3+ asked for
    it, a described group's authorized operations as Kafka's bit field."""
    described = []
    refused = denied(ctx, _DESCRIBE_GROUP, req.groups)
    operations_wanted = version >= 3 and req.include_authorized_operations
    for group_id in req.groups:
        if group_id in refused:
            described.append({"error_code": refusal(_DESCRIBE_GROUP), "group_id": group_id, "group_state": "",
                              "protocol_type": "", "protocol_data": "", "members": []})
            continue
        error, summary = ctx.group_coordinator.describe_group(group_id)
        described.append({
            "error_code": error, "group_id": group_id, "group_state": summary.state,
            "protocol_type": summary.protocol_type, "protocol_data": summary.protocol_name,
            "authorized_operations": authorized_operations(ctx, ResourceType.GROUP, group_id)
            if operations_wanted and error == ErrorCode.NONE else NOT_REQUESTED,
            "members": [{"member_id": m, "group_instance_id": i, "client_id": c, "client_host": h,
                         "member_metadata": md, "member_assignment": a}
                        for m, i, c, h, md, a in summary.members]})
    return _encode(api_keys.DESCRIBE_GROUPS, version, header, {"groups": described})


async def delete_groups(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    """The groups the principal may DELETE are deleted; the others answer
    GROUP_AUTHORIZATION_FAILED, after them (as Kafka lists them)."""
    refused = denied(ctx, _DELETE_GROUP, req.groups_names)
    results = await ctx.group_coordinator.delete_groups([g for g in req.groups_names if g not in refused])
    results.update((g, refusal(_DELETE_GROUP)) for g in dict.fromkeys(req.groups_names) if g in refused)
    return _encode(api_keys.DELETE_GROUPS, version, header, {"results": [
        {"group_id": g, "error_code": e} for g, e in results.items()]})


ROUTES: dict[int, Any] = {
    api_keys.FIND_COORDINATOR: find_coordinator,
    api_keys.SYNC_GROUP: sync_group,
    api_keys.HEARTBEAT: heartbeat,
    api_keys.LEAVE_GROUP: leave_group,
    api_keys.OFFSET_COMMIT: offset_commit,
    api_keys.TXN_OFFSET_COMMIT: txn_offset_commit,
    api_keys.OFFSET_FETCH: offset_fetch,
    api_keys.OFFSET_DELETE: offset_delete,
    api_keys.LIST_GROUPS: list_groups,
    api_keys.DESCRIBE_GROUPS: describe_groups,
    api_keys.DELETE_GROUPS: delete_groups,
}
