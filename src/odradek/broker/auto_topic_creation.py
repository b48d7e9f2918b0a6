"""Kafka's AutoTopicCreationManager: the topics a Metadata request names and auto.create.topics.enable
lets it create (metadata_apis.py decides which), written to ZooKeeper as CreateTopics writes
them (create_topics.py plans them)."""
from __future__ import annotations

import asyncio
import logging

from odradek.broker.context import BrokerContext
from odradek.broker.create_topics import (
    default_partitions,
    existing_topics_if_needed,
    is_topic_exists_error,
    live_broker_ids,
)
from odradek.broker.topic_admin import TopicError, validate_new_topic_name
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import TopicAssignment
from odradek.protocol.errors import ErrorCode
from odradek.zk.paths import new_topic_id

log = logging.getLogger("odradek.broker.admin")


async def auto_create_topics(ctx: BrokerContext, names: list[str]) -> dict[str, int]:
    """Kafka's KafkaApis.createTopic for Metadata: each topic written to ZooKeeper as CreateTopics
    writes it (the controller takes it from there) with num.partitions and
    default.replication.factor, and answered LEADER_NOT_AVAILABLE (the client asks again until
    the controller has elected its leaders); one created meanwhile by another request too. A
    name CreateTopics would refuse gets CreateTopics' error (INVALID_TOPIC_EXCEPTION,
    INVALID_REPLICATION_FACTOR when fewer brokers are alive). Internal topics are created by
    the brokers that use them (the group coordinator creates __consumer_offsets with its own
    partition count, replication factor and cleanup.policy=compact), never here: a Metadata
    request for one is answered UNKNOWN_TOPIC_OR_PARTITION until its coordinator made it.
    Kafka's AutoTopicCreationManager creates them here with their internal settings; odradek
    keeps one path for each, so no client's Metadata request decides when it is made."""
    live = await live_broker_ids(ctx)
    existing = await existing_topics_if_needed(ctx, names)
    created: list[str] = []

    def create(name: str) -> int:
        if is_internal(name):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            validate_new_topic_name(name, existing | set(created))
            assignment = TopicAssignment(name, new_topic_id(), default_partitions(
                ctx, name, ctx.config.num_partitions, ctx.config.default_replication_factor, live))
            ctx.zk.create_topic(assignment, {})
            created.append(name)
        except TopicError as exc:
            log.info("not creating topic %s for a Metadata request: %s", name, exc)
            return exc.code
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble, or created meanwhile
            if is_topic_exists_error(exc):
                return ErrorCode.LEADER_NOT_AVAILABLE
            log.warning("creating topic %s for a Metadata request failed: %r", name, exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        log.info("created topic %s with %d partitions for a Metadata request (auto.create.topics.enable)",
                 name, len(assignment.partitions))
        return ErrorCode.LEADER_NOT_AVAILABLE

    return {name: await asyncio.to_thread(create, name) for name in names}
