"""ApiVersions, Metadata and DescribeCluster: what a client learns of the cluster before it asks
anything else (Kafka's KafkaApis.handleApiVersionsRequest, handleTopicMetadataRequest and
handleDescribeCluster). Answered from the broker's metadata cache, none of them touches a log;
a Metadata request may create the topics it names (auto_topic_creation.py)."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable

from odradek.broker import api_keys
from odradek.broker.auto_topic_creation import auto_create_topics
from odradek.broker.connection import CloseConnection
from odradek.broker.context import BrokerContext
from odradek.broker.metadata_cache import MetadataCache, from_zookeeper
from odradek.broker.session import current_session
from odradek.broker.topic_admin import is_legal_topic_name
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import BrokerInfo
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode

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
    created = await auto_create_topics(ctx, names)
    return _metadata_response(ctx, cache, header, req, version, created)


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
        # a topic this request created is answered as created even if the controller's
        # UpdateMetadata for it arrived meanwhile, as Kafka's getTopicMetadata answers it
        parts = cache.partitions(name) if name and name not in (created or {}) else None
        if name is None:
            # asked by topic id (v10+): topics have no ids here yet; a null name is encodable
            # only from v12, so older versions get an empty one with the error
            topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None if version >= 12 else "",
                           "topic_id": None, "is_internal": False, "partitions": []})
            continue
        if parts is None:
            code = (created or {}).get(name) or (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if is_legal_topic_name(name)
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
        topics.append({"error_code": 0, "name": name, "topic_id": None, "is_internal": is_internal(name),
                       "partitions": plist})
    body = {"throttle_time": 0, "cluster_id": ctx.cluster_id, "controller_id": cache.controller_id,
            "brokers": [{"node_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, host, port in reachable_brokers(cache)],
            "topics": topics}
    return kio_util.encode_response(api_keys.METADATA, version, header.correlation_id, body)


def reachable_brokers(cache: MetadataCache) -> list[tuple[BrokerInfo, str, int]]:
    """The live brokers with their address on the listener the request came in on (Kafka's
    MetadataCache.getAliveBrokerNodes(listenerName)); a broker without that listener is left
    out, as Kafka leaves it out."""
    listener = current_session().listener
    return [(b, *address) for b in cache.live_brokers if (address := b.address(listener)) is not None]


def describe_cluster(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    body = {"throttle_time": 0, "error_code": 0, "error_message": None, "cluster_id": ctx.cluster_id,
            "controller_id": ctx.metadata.controller_id,
            "brokers": [{"broker_id": b.id, "host": host, "port": port, "rack": b.rack}
                        for b, host, port in reachable_brokers(ctx.metadata)]}
    return kio_util.encode_response(api_keys.DESCRIBE_CLUSTER, version, header.correlation_id, body)
