"""ApiVersions, Metadata and DescribeCluster: what a client learns of the cluster before it asks
anything else (Kafka's KafkaApis.handleApiVersionsRequest, handleTopicMetadataRequest and
handleDescribeCluster). Answered from the broker's metadata cache, none of them touches a log;
a Metadata request may create the topics it names (auto_topic_creation.py).

With an authorizer, as Kafka's handleTopicMetadataRequest: a request for every topic leaves out
those the principal may not DESCRIBE; a topic named without DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED whether it exists or not (its existence is not disclosed), and one
that would be created without CREATE on it (or on the cluster) too. Asked for (v8+), each
topic's authorized operations and (v8-10) the cluster's are the bit fields Kafka computes.
DescribeCluster is never refused: without DESCRIBE on the cluster its authorized operations
are 0."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from odradek.broker import api_keys
from odradek.broker.auto_topic_creation import auto_create_topics
from odradek.broker.connection import CloseConnection
from odradek.broker.context import BrokerContext
from odradek.broker.metadata_cache import MetadataCache, from_zookeeper
from odradek.broker.request_authorization import (
    NOT_REQUESTED,
    authorized_operations,
    cluster_authorized_operations,
    denied,
    visible,
    wire,
)
from odradek.broker.session import current_session
from odradek.broker.topic_admin import is_legal_topic_name
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import BrokerInfo
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.security.authorization_table import Scope

_METADATA = wire(api_keys.METADATA)
_DESCRIBE_NAMED = _METADATA.check(AclOperation.DESCRIBE, ResourceType.TOPIC, Scope.EACH)
_DESCRIBE_LISTED = _METADATA.check(AclOperation.DESCRIBE, ResourceType.TOPIC, Scope.HIDDEN)
_CREATE_TOPIC = _METADATA.check(AclOperation.CREATE, ResourceType.TOPIC)
wire(api_keys.API_VERSIONS)  # answered to anyone, before authentication too
_DESCRIBE_CLUSTER = wire(api_keys.DESCRIBE_CLUSTER).check(AclOperation.DESCRIBE, ResourceType.CLUSTER)
#: Metadata's DESCRIBE on the cluster for IncludeClusterAuthorizedOperations is the same question
_CLUSTER_OPERATIONS_CHECK = _DESCRIBE_CLUSTER

_API_KEYS = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(api_keys.ADVERTISED.items())]


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
    refused = _refused(ctx, ctx.metadata, req, version)
    missing = _topics_to_create(ctx, ctx.metadata, req, version, refused)
    if missing:
        return _metadata_creating_topics(ctx, ctx.metadata, missing, header, req, version, refused)
    return _metadata_response(ctx, ctx.metadata, header, req, version, refused=refused)


def _auto_creation(ctx: BrokerContext, req: Any, version: int) -> bool:
    """Whether a Metadata request creates the missing topics it names: the broker allows it and
    the request does too (Metadata v4+ carries allow_auto_topic_creation, KIP-204; older
    clients always allow)."""
    return ctx.config.auto_create_topics_enable and (version < 4 or req.allow_auto_topic_creation)


def _topics_to_create(ctx: BrokerContext, cache: MetadataCache, req: Any, version: int,
                      refused: frozenset[str]) -> list[str]:
    """The topics a Metadata request creates (Kafka's auto.create.topics.enable): those it
    names that do not exist and the principal may describe and create, when creating applies
    (_auto_creation). A request for every topic creates none, and no other API creates topics
    (FindCoordinator and Produce answer unknown topics as unknown)."""
    if not _auto_creation(ctx, req, version):
        return []
    names = _requested_topics(req, version) or []
    return list(dict.fromkeys(n for n in names if n and n not in refused and cache.partitions(n) is None))


def _refused(ctx: BrokerContext, cache: MetadataCache, req: Any, version: int) -> frozenset[str]:
    """The named topics answered TOPIC_AUTHORIZATION_FAILED (empty without an authorizer): those
    the principal may not DESCRIBE, and those it may but that do not exist, would be created
    and that it may not CREATE (without CREATE on the cluster)."""
    names = _requested_topics(req, version)
    if ctx.authorizer is None or not names:
        return frozenset()
    named = [n for n in names if n is not None]
    refused = denied(ctx, _DESCRIBE_NAMED, named)
    if _auto_creation(ctx, req, version):
        missing = [n for n in named if n not in refused and cache.partitions(n) is None]
        refused |= denied(ctx, _CREATE_TOPIC, missing)
    return refused


async def _metadata_creating_topics(ctx: BrokerContext, cache: MetadataCache, names: list[str], header: Any,
                                    req: Any, version: int, refused: frozenset[str]) -> bytes:
    created = await auto_create_topics(ctx, names)
    return _metadata_response(ctx, cache, header, req, version, created, refused)


async def cache_until_the_controller_speaks(ctx: BrokerContext, topics: list[str] | None) -> MetadataCache:
    """For a broker the controller has not yet spoken to: ``topics`` (None: all) read from
    ZooKeeper, or the broker's own cache if the controller spoke meanwhile (its word, not the
    read). ZooKeeper unreachable too closes the connection: nothing true to say."""
    try:
        cache = await asyncio.wait_for(asyncio.to_thread(from_zookeeper, ctx.zk, topics), METADATA_FROM_ZOOKEEPER_S)
    except Exception as exc:  # noqa: BLE001 - the client retries on another connection
        raise CloseConnection(f"no metadata yet from the controller or ZooKeeper ({exc!r})") from None
    return ctx.metadata if ctx.metadata.initialized else cache


async def _metadata_from_zookeeper(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    topics = _requested_topics(req, version)
    valid = None if topics is None else [t for t in topics if t is not None and is_legal_topic_name(t)]
    cache = await cache_until_the_controller_speaks(ctx, valid)
    refused = _refused(ctx, cache, req, version)
    missing = _topics_to_create(ctx, cache, req, version, refused)
    if missing:
        return await _metadata_creating_topics(ctx, cache, missing, header, req, version, refused)
    return _metadata_response(ctx, cache, header, req, version, refused=refused)


def _requested_topics(req: Any, version: int) -> list[str] | None:
    """The topic names a Metadata request asks about; None for all topics."""
    if req.topics is None or (version == 0 and not req.topics):
        return None
    return [t.name for t in req.topics]


def _metadata_response(ctx: BrokerContext, cache: MetadataCache, header: Any, req: Any, version: int,
                       created: dict[str, int] | None = None, refused: frozenset[str] = frozenset()) -> bytes:
    """The answer from `cache`; `created` has the error of each topic this request tried to
    create (LEADER_NOT_AVAILABLE once written), `refused` the named topics denied (_refused)."""
    live = {b.id for b in cache.live_brokers}
    names = _requested_topics(req, version)
    if names is None:
        names = visible(ctx, _DESCRIBE_LISTED, cache.topics(), _same)
    topic_operations = version >= 8 and req.include_topic_authorized_operations
    topics = []
    for name in names:
        if refused and name in refused:
            # not disclosed whether it exists: no partitions, not internal, no id
            topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "topic_id": None,
                           "is_internal": False, "partitions": []})
            continue
        # a topic this request created is answered as created even if the controller's
        # UpdateMetadata for it arrived meanwhile, as Kafka's getTopicMetadata answers it
        parts = cache.partitions(name) if name and name not in (created or {}) else None
        if name is None:
            # asked by topic id (v10+): topics have no ids here yet; a null name is encodable
            # only from v12, so older versions get an empty one with the error
            topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None if version >= 12 else "",
                           "topic_id": None, "is_internal": False, "partitions": []})
            continue
        operations = authorized_operations(ctx, ResourceType.TOPIC, name) if topic_operations else NOT_REQUESTED
        if parts is None:
            code = (created or {}).get(name) or (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if is_legal_topic_name(name)
                                                 else ErrorCode.INVALID_TOPIC_EXCEPTION)
            topics.append({"error_code": code, "name": name, "topic_id": None, "is_internal": False,
                           "partitions": [], "topic_authorized_operations": operations})
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
        topics.append({"error_code": 0, "name": name, "topic_id": None, "is_internal": is_internal(name),
                       "partitions": plist, "topic_authorized_operations": operations})
    cluster_operations = NOT_REQUESTED
    if 8 <= version <= 10 and req.include_cluster_authorized_operations:
        cluster_operations = cluster_authorized_operations(ctx, _CLUSTER_OPERATIONS_CHECK)
    body = {"throttle_time": 0, "cluster_id": ctx.cluster_id, "controller_id": cache.controller_id,
            "brokers": [{"node_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, host, port in reachable_brokers(cache)],
            "topics": topics, "cluster_authorized_operations": cluster_operations}
    return kio_util.encode_response(api_keys.METADATA, version, header.correlation_id, body)


def _same(name: str) -> str:
    return name


def reachable_brokers(cache: MetadataCache) -> list[tuple[BrokerInfo, str, int]]:
    """The live brokers with their address on the listener the request came in on (Kafka's
    MetadataCache.getAliveBrokerNodes(listenerName)); a broker without that listener is left
    out, as Kafka leaves it out."""
    listener = current_session().listener
    return [(b, *address) for b in cache.live_brokers if (address := b.address(listener)) is not None]


def describe_cluster(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    operations = (cluster_authorized_operations(ctx, _DESCRIBE_CLUSTER) if req.include_cluster_authorized_operations
                  else NOT_REQUESTED)
    body = {"throttle_time": 0, "error_code": 0, "error_message": None, "cluster_id": ctx.cluster_id,
            "controller_id": ctx.metadata.controller_id,
            "brokers": [{"broker_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, host, port in reachable_brokers(ctx.metadata)],
            "cluster_authorized_operations": operations}
    return kio_util.encode_response(api_keys.DESCRIBE_CLUSTER, version, header.correlation_id, body)
