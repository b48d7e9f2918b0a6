"""The metadata and admin APIs: ApiVersions, Metadata, CreateTopics, InitProducerId,
DescribeConfigs, DescribeCluster and ElectLeaders. None of them touches a log."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable

from odradek.broker import api_keys
from odradek.broker.config_helper import created_topic_configs, current_broker_config
from odradek.broker.connection import CloseConnection
from odradek.broker.context import BrokerContext
from odradek.broker.metadata_cache import MetadataCache, from_zookeeper
from odradek.broker.topic_admin import (
    INTERNAL_TOPICS,
    TopicError,
    assign_replicas,
    check_fits_in_zookeeper,
    check_partition_count_fits,
    validate_assignment,
    validate_configs,
    validate_new_topic_name,
)
from odradek.broker.topic_admin import is_legal_topic_name as _valid_topic_name
from odradek.common.metadata import LeaderAndIsr, TopicAssignment, TopicPartition
from odradek.controller.events import (
    ElectionNotNeededError,
    ElectionTrigger,
    ElectionType,
    EventPreemptedError,
    NotControllerError,
    ReplicaLeaderElection,
    UnknownPartitionError,
)
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.zk.paths import new_topic_id

log = logging.getLogger("odradek.broker.admin")

_API_KEYS = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(api_keys.VERSIONS.items())]


def api_versions(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    return kio_util.encode_response(api_keys.API_VERSIONS, version, header.correlation_id,
                                    {"error_code": 0, "api_keys": _API_KEYS, "throttle_time": 0})


def unsupported_api_versions(correlation_id: int) -> bytes:
    """A client asking for a newer ApiVersions gets a v0 answer with UNSUPPORTED_VERSION and retries."""
    return kio_util.encode_response(api_keys.API_VERSIONS, 0, correlation_id,
                                    {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _API_KEYS})


#: ZooKeeper reads for a Metadata answer before the first UpdateMetadata; past this the
#: connection is closed and the client retries.
METADATA_FROM_ZOOKEEPER_S = 10.0


def metadata(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes | Awaitable[bytes]:
    """Answered from the metadata cache; a broker the controller has not yet spoken to answers
    from ZooKeeper (metadata_cache.py says why)."""
    if not ctx.metadata.initialized:
        return _metadata_from_zookeeper(ctx, header, req, version)
    missing = _topics_to_create(ctx, ctx.metadata, req, version)
    if missing:
        return _metadata_creating_topics(ctx, ctx.metadata, missing, header, req, version)
    return _metadata_response(ctx, ctx.metadata, header, req, version)


def _topics_to_create(ctx: BrokerContext, cache: MetadataCache, req: Any, version: int) -> list[str]:
    """The topics a Metadata request creates (Kafka's auto.create.topics.enable): those it
    names that do not exist, when the broker allows it and the request does too (Metadata v4+
    carries allow_auto_topic_creation, KIP-204; older clients always allow). A request for
    every topic creates none, and no other API creates topics (FindCoordinator and Produce
    answer unknown topics as unknown)."""
    if not ctx.config.auto_create_topics_enable or (version >= 4 and not req.allow_auto_topic_creation):
        return []
    names = _requested_topics(req, version) or []
    return list(dict.fromkeys(n for n in names if n and cache.partitions(n) is None))


async def _metadata_creating_topics(ctx: BrokerContext, cache: MetadataCache, names: list[str], header: Any,
                                    req: Any, version: int) -> bytes:
    created = await _auto_create_topics(ctx, names)
    return _metadata_response(ctx, cache, header, req, version, created)


async def _auto_create_topics(ctx: BrokerContext, names: list[str]) -> dict[str, int]:
    """Kafka's KafkaApis.createTopic for Metadata: each topic written to ZooKeeper as CreateTopics
    writes it (the controller takes it from there) with num.partitions and
    default.replication.factor, and answered LEADER_NOT_AVAILABLE (the client asks again until
    the controller has elected its leaders); one created meanwhile by another request too. A
    name CreateTopics would refuse gets CreateTopics' error (INVALID_TOPIC_EXCEPTION,
    INVALID_REPLICATION_FACTOR when fewer brokers are alive). Internal topics are created by
    the brokers that use them (the group coordinator creates __consumer_offsets), never here."""
    live = await _live_broker_ids(ctx)
    existing = await _existing_topics_if_needed(ctx, names)
    created: list[str] = []

    def create(name: str) -> int:
        if name in INTERNAL_TOPICS:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            validate_new_topic_name(name, existing | set(created))
            assignment = TopicAssignment(name, new_topic_id(), _default_partitions(
                ctx, name, ctx.config.num_partitions, ctx.config.default_replication_factor, live))
            ctx.zk.create_topic(assignment, {})
            created.append(name)
        except TopicError as exc:
            log.info("not creating topic %s for a Metadata request: %s", name, exc)
            return exc.code
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble, or created meanwhile
            if _topic_exists_error(exc):
                return ErrorCode.LEADER_NOT_AVAILABLE
            log.warning("creating topic %s for a Metadata request failed: %r", name, exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        log.info("created topic %s with %d partitions for a Metadata request (auto.create.topics.enable)",
                 name, len(assignment.partitions))
        return ErrorCode.LEADER_NOT_AVAILABLE

    return {name: await asyncio.to_thread(create, name) for name in names}


def _topic_exists_error(exc: Exception) -> bool:
    """Whether ZooKeeper refused a topic's creation because the topic exists."""
    return type(exc).__name__ in ("NodeExistsError", "TopicExistsError")


async def _metadata_from_zookeeper(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    topics = _requested_topics(req, version)
    valid = None if topics is None else [t for t in topics if t is not None and _valid_topic_name(t)]
    try:
        cache = await asyncio.wait_for(asyncio.to_thread(from_zookeeper, ctx.zk, valid), METADATA_FROM_ZOOKEEPER_S)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable too: nothing true to say
        raise CloseConnection(f"no metadata yet from the controller or ZooKeeper ({exc!r})") from None
    if ctx.metadata.initialized:  # the controller spoke meanwhile: its word, not the read
        cache = ctx.metadata
    missing = _topics_to_create(ctx, cache, req, version)
    if missing:
        return await _metadata_creating_topics(ctx, cache, missing, header, req, version)
    return _metadata_response(ctx, cache, header, req, version)


def _requested_topics(req: Any, version: int) -> list[str] | None:
    """The topic names a Metadata request asks about; None for all topics."""
    if req.topics is None or (version == 0 and not req.topics):
        return None
    return [t.name for t in req.topics]


def _metadata_response(ctx: BrokerContext, cache: MetadataCache, header: Any, req: Any, version: int,
                       created: dict[str, int] | None = None) -> bytes:
    """The answer from `cache`; `created` has the error of each topic this request tried to
    create (LEADER_NOT_AVAILABLE once written)."""
    live = {b.id for b in cache.live_brokers}
    names = _requested_topics(req, version)
    if names is None:
        names = cache.topics()
    topics = []
    for name in names:
        parts = cache.partitions(name) if name else None
        if name is None:
            # asked by topic id (v10+): topics have no ids here yet; a null name is encodable
            # only from v12, so older versions get an empty one with the error
            topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None if version >= 12 else "",
                           "topic_id": None, "is_internal": False, "partitions": []})
            continue
        if parts is None:
            code = (created or {}).get(name) or (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if _valid_topic_name(name)
                                                 else ErrorCode.INVALID_TOPIC_EXCEPTION)
            topics.append({"error_code": code, "name": name, "topic_id": None, "is_internal": False,
                           "partitions": []})
            continue
        plist = []
        for p, state in sorted(parts.items()):
            leader_live = state.leader in live
            plist.append({
                "error_code": 0 if leader_live else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": p,
                "leader_id": state.leader if leader_live else -1,
                "leader_epoch": state.leader_epoch,
                "replica_nodes": list(state.replicas),
                "isr_nodes": list(state.isr),
                "offline_replicas": [r for r in state.replicas if r not in live],
            })
        topics.append({"error_code": 0, "name": name, "topic_id": None, "is_internal": name == OFFSETS_TOPIC,
                       "partitions": plist})
    body = {"throttle_time": 0, "cluster_id": ctx.cluster_id, "controller_id": cache.controller_id,
            "brokers": [{"node_id": b.id, "host": b.host, "port": b.port, "rack": b.rack} for b in cache.live_brokers],
            "topics": topics}
    return kio_util.encode_response(api_keys.METADATA, version, header.correlation_id, body)


async def _live_broker_ids(ctx: BrokerContext) -> list[int]:
    """The live brokers to assign new replicas to: ZooKeeper's list until the controller has spoken."""
    return ([b.id for b in ctx.metadata.live_brokers] if ctx.metadata.initialized
            else sorted(await asyncio.to_thread(ctx.zk.get_live_brokers)))


async def _existing_topics_if_needed(ctx: BrokerContext, names: list[str]) -> set[str]:
    """Every topic name, for Kafka's '.'/'_' collision rule: read once per request, and only if
    one of ``names`` needs it."""
    if any("." in n or "_" in n for n in names):
        return set(await asyncio.to_thread(ctx.zk.get_all_topics))
    return set()


async def create_topics(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    live = await _live_broker_ids(ctx)
    results = []
    created: list[str] = []
    existing = await _existing_topics_if_needed(ctx, [t.name for t in req.topics])
    # the defaults a new topic's configs fall back to (CreateTopics v5+ lists them)
    broker_config = await asyncio.to_thread(current_broker_config, ctx) if version >= 5 and req.topics else None
    for topic in req.topics:
        result: dict[str, Any] = {"name": topic.name, "topic_id": None, "error_code": 0, "error_message": None,
                                  "num_partitions": -1, "replication_factor": -1, "configs": []}
        try:
            assignment, configs = _plan_topic(ctx, topic, live, existing | set(created))
            check_fits_in_zookeeper(assignment, configs, ctx.config.zookeeper_jute_maxbuffer)
            result.update(num_partitions=len(assignment.partitions),
                          replication_factor=len(assignment.partitions[0]),
                          configs=created_topic_configs(broker_config, configs) if version >= 5 else [])
            if not req.validate_only:
                await asyncio.to_thread(ctx.zk.create_topic, assignment, configs)
                created.append(topic.name)
                log.info("created topic %s with %d partitions", topic.name, len(assignment.partitions))
        except TopicError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
        except Exception as exc:  # ZooKeeper trouble, or the name was taken meanwhile
            code = ErrorCode.TOPIC_ALREADY_EXISTS if _topic_exists_error(exc) else ErrorCode.UNKNOWN_SERVER_ERROR
            result.update(error_code=code, error_message=f"Topic '{topic.name}' already exists."
                          if code == ErrorCode.TOPIC_ALREADY_EXISTS else str(exc))
        results.append(result)
    if created:
        await _wait_for_leaders(ctx, created, req.timeout.total_seconds())
    return kio_util.encode_response(api_keys.CREATE_TOPICS, version, header.correlation_id,
                                    {"throttle_time": 0, "topics": results})


def _plan_topic(ctx: BrokerContext, topic: Any, live: list[int],
                existing: set[str]) -> tuple[TopicAssignment, dict[str, str]]:
    validate_new_topic_name(topic.name, existing)
    if ctx.metadata.partitions(topic.name) is not None:
        raise TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
    configs = validate_configs({c.name: c.value for c in topic.configs})
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise TopicError(ErrorCode.INVALID_REQUEST,
                             "Both replica assignment and partition count or replication factor were set")
        partitions = validate_assignment({a.partition_index: list(a.broker_ids) for a in topic.assignments}, set(live))
    else:
        count = ctx.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        rf = ctx.config.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
        partitions = _default_partitions(ctx, topic.name, count, rf, live)
    min_isr = int(configs.get("min.insync.replicas", ctx.config.min_insync_replicas))
    if min_isr > len(partitions[0]):
        raise TopicError(ErrorCode.INVALID_CONFIG,
                         f"min.insync.replicas {min_isr} is larger than the replication factor {len(partitions[0])}")
    return TopicAssignment(topic.name, new_topic_id(), partitions), configs


def _default_partitions(ctx: BrokerContext, name: str, count: int, rf: int,
                        live: list[int]) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware assignment of a new topic, once its znode is known to fit."""
    check_partition_count_fits(name, count, rf, ctx.config.zookeeper_jute_maxbuffer)
    return assign_replicas(live, count, rf)


async def _wait_for_leaders(ctx: BrokerContext, topics: list[str], timeout_s: float) -> None:
    """Kafka answers CreateTopics once the topic's metadata reached this broker (or on timeout)."""
    deadline = time.monotonic() + max(0.0, min(timeout_s, 30.0))
    while time.monotonic() < deadline:
        if all((parts := ctx.metadata.partitions(t)) and all(s.leader >= 0 for s in parts.values()) for t in topics):
            return
        await asyncio.sleep(0.02)


async def init_producer_id(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    body: dict[str, Any] = {"throttle_time": 0, "error_code": 0, "producer_id": -1, "producer_epoch": -1}
    if req.transactional_id is not None:
        body["error_code"] = ErrorCode.INVALID_REQUEST  # transactions are not supported
    elif getattr(req, "producer_id", -1) >= 0 and req.producer_epoch < 0x7FFF - 1:
        body.update(producer_id=req.producer_id, producer_epoch=req.producer_epoch + 1)
    elif getattr(req, "producer_id", -1) >= 0:
        # the epoch is exhausted: a fresh id, as Kafka does, rather than wrapping to a fenced 0
        body.update(producer_id=await ctx.next_producer_id(), producer_epoch=0)
    else:
        body.update(producer_id=await ctx.next_producer_id(), producer_epoch=0)
    return kio_util.encode_response(api_keys.INIT_PRODUCER_ID, version, header.correlation_id, body)


def describe_cluster(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    body = {"throttle_time": 0, "error_code": 0, "error_message": None, "cluster_id": ctx.cluster_id,
            "controller_id": ctx.metadata.controller_id,
            "brokers": [{"broker_id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                        for b in ctx.metadata.live_brokers]}
    return kio_util.encode_response(api_keys.DESCRIBE_CLUSTER, version, header.correlation_id, body)


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
        elected = {tp: r.leader for tp, r in outcome.items() if isinstance(r, LeaderAndIsr)}
        results = {tp: (_ELECTION_ERRORS.get(type(r), not_available), str(r)) for tp, r in outcome.items()
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
