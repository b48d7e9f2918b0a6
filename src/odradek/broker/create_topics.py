"""CreateTopics, as Kafka's ZkAdminManager.createTopics answers it in the ZooKeeper era: each topic
checked (name, configs, replica assignment, size) and written to ZooKeeper, config and assignment
in one transaction; the controller's TopicChange watch creates its partitions. The answer comes
once this broker's metadata has the new topics' leaders (Kafka's DelayedCreatePartitions).

The reads and rules a new topic needs (the live brokers, the existing names, the default
assignment, "it exists already") are shared with the topics a Metadata request creates
(auto_topic_creation.py).

With an authorizer, as Kafka's handleCreateTopicsRequest: a topic needs CREATE on itself unless
the principal may CREATE on the cluster (else TOPIC_AUTHORIZATION_FAILED, "Authorization
failed."); one it may create but not DESCRIBE_CONFIGS is created all the same, answered without
its configs, partition count and replication factor, and with TOPIC_AUTHORIZATION_FAILED as its
topic_config_error_code (v5+)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kazoo.exceptions import NodeExistsError

from odradek.broker import api_keys
from odradek.broker.config_helper import created_topic_configs, current_broker_config
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import denied, wire
from odradek.broker.topic_admin import (
    TopicError,
    assign_replicas,
    check_fits_in_zookeeper,
    check_partition_count_fits,
    validate_assignment,
    validate_configs,
    validate_new_topic_name,
)
from odradek.common.metadata import TopicAssignment
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.zk.errors import TopicExistsError
from odradek.zk.paths import new_topic_id

log = logging.getLogger("odradek.broker.admin")

_CREATE_TOPICS = wire(api_keys.CREATE_TOPICS)
_CREATE = _CREATE_TOPICS.check(AclOperation.CREATE, ResourceType.TOPIC)
_DESCRIBE_CONFIGS = _CREATE_TOPICS.check(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC)


async def create_topics(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    live = await live_broker_ids(ctx)
    results = []
    created: list[str] = []
    existing = await existing_topics_if_needed(ctx, [t.name for t in req.topics])
    # the defaults a new topic's configs fall back to (CreateTopics v5+ lists them)
    broker_config = await asyncio.to_thread(current_broker_config, ctx) if version >= 5 and req.topics else None
    names = [t.name for t in req.topics]
    refused = denied(ctx, _CREATE, names)
    undescribed = denied(ctx, _DESCRIBE_CONFIGS, names)
    for topic in req.topics:
        result: dict[str, Any] = {"name": topic.name, "topic_id": None, "error_code": 0, "error_message": None,
                                  "num_partitions": -1, "replication_factor": -1, "configs": [],
                                  "topic_config_error_code": ErrorCode.NONE}
        if topic.name in refused:
            result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed.",
                          topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic.name in undescribed
                          else ErrorCode.NONE)
            results.append(result)
            continue
        try:
            assignment, configs = _plan_topic(ctx, topic, live, existing | set(created))
            check_fits_in_zookeeper(assignment, configs, ctx.config.zookeeper_jute_maxbuffer)
            if topic.name in undescribed:  # created, but its settings not shown (Kafka's ZkAdminManager)
                result.update(topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            else:
                result.update(num_partitions=len(assignment.partitions),
                              replication_factor=len(assignment.partitions[0]),
                              configs=created_topic_configs(broker_config, configs) if broker_config is not None
                              else [])
            if not req.validate_only:
                await asyncio.to_thread(ctx.zk.create_topic, assignment, configs)
                created.append(topic.name)
                log.info("created topic %s with %d partitions", topic.name, len(assignment.partitions))
        except TopicError as exc:
            result.update(error_code=exc.code, error_message=str(exc), topic_config_error_code=ErrorCode.NONE)
        except Exception as exc:  # ZooKeeper trouble, or the name was taken meanwhile
            code = ErrorCode.TOPIC_ALREADY_EXISTS if is_topic_exists_error(exc) else ErrorCode.UNKNOWN_SERVER_ERROR
            result.update(error_code=code, error_message=f"Topic '{topic.name}' already exists."
                          if code == ErrorCode.TOPIC_ALREADY_EXISTS else str(exc), topic_config_error_code=ErrorCode.NONE)
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
        partitions = default_partitions(ctx, topic.name, count, rf, live)
    min_isr = int(configs.get("min.insync.replicas", ctx.config.min_insync_replicas))
    if min_isr > len(partitions[0]):
        raise TopicError(ErrorCode.INVALID_CONFIG,
                         f"min.insync.replicas {min_isr} is larger than the replication factor {len(partitions[0])}")
    return TopicAssignment(topic.name, new_topic_id(), partitions), configs


async def _wait_for_leaders(ctx: BrokerContext, topics: list[str], timeout_s: float) -> None:
    """Kafka answers CreateTopics once the topic's metadata reached this broker (or on timeout)."""
    deadline = time.monotonic() + max(0.0, min(timeout_s, 30.0))
    while time.monotonic() < deadline:
        if all((parts := ctx.metadata.partitions(t)) and all(s.leader >= 0 for s in parts.values()) for t in topics):
            return
        await asyncio.sleep(0.02)


# -- shared with the topics a Metadata request creates (auto_topic_creation.py) --------------------


async def live_broker_ids(ctx: BrokerContext) -> list[int]:
    """The live brokers to assign new replicas to: ZooKeeper's list until the controller has spoken."""
    return ([b.id for b in ctx.metadata.live_brokers] if ctx.metadata.initialized
            else sorted(await asyncio.to_thread(ctx.zk.get_live_brokers)))


async def existing_topics_if_needed(ctx: BrokerContext, names: list[str]) -> set[str]:
    """Every topic name, for Kafka's '.'/'_' collision rule: read once per request, and only if
    one of ``names`` needs it."""
    if any("." in n or "_" in n for n in names):
        return set(await asyncio.to_thread(ctx.zk.get_all_topics))
    return set()


def default_partitions(ctx: BrokerContext, name: str, count: int, rf: int,
                       live: list[int]) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware assignment of a new topic, once its znode is known to fit."""
    check_partition_count_fits(name, count, rf, ctx.config.zookeeper_jute_maxbuffer)
    return assign_replicas(live, count, rf)


def is_topic_exists_error(exc: Exception) -> bool:
    """Whether ZooKeeper refused a topic's creation because the topic exists: the client's
    TopicExistsError (zk/client.py's create_topic), or a bare NodeExistsError of a znode."""
    return isinstance(exc, (NodeExistsError, TopicExistsError))
