"""DeleteTopics, as Kafka's KafkaApis.handleDeleteTopicsRequest and ZkAdminManager.deleteTopics
answer it in the ZooKeeper era: /admin/delete_topics/<topic> is created for each known topic and
the answer comes once the deletion has completed, or REQUEST_TIMED_OUT at the request's timeout
while it goes on (the controller does it: controller/topic_deletion.py; a topic with a replica on
a broker that is down waits for that broker). Kafka's DelayedDeleteTopics answers as soon as the
broker's metadata has dropped the topic, which happens when the deletion starts; waiting for
the marker to go too means a success lets the name be created again at once. With delete.topic.enable=false every
topic is TOPIC_DELETION_DISABLED (INVALID_REQUEST below v3, as Kafka answers).

Unlike Kafka, any broker answers (as CreateTopics here does), not only the controller: the
write is ZooKeeper's, and the wait is on this broker's own metadata and the marker.

Internal topics (__consumer_offsets, __transaction_state) are refused with
INVALID_TOPIC_EXCEPTION, the code Kafka's brokers give for appending to one or deleting its
records. Kafka's brokers let any authorized client delete them and only kafka-topics.sh
refused; odradek's broker refuses them whatever the authorizer allows, so that no client can
drop every group's committed offsets.

With an authorizer, as Kafka's handleDeleteTopicsRequest: each topic needs DELETE (else
TOPIC_AUTHORIZATION_FAILED), checked before whether it exists. Kafka's DESCRIBE check of a topic
named by id never applies here: odradek answers every id UNKNOWN_TOPIC_ID before it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.request_authorization import denied, wire
from odradek.common.internal_topics import is_internal
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

log = logging.getLogger("odradek.broker.admin")

_DELETE_TOPICS = wire(api_keys.DELETE_TOPICS)
_DELETE = _DELETE_TOPICS.check(AclOperation.DELETE, ResourceType.TOPIC)
_DELETE_TOPICS.not_applicable(_DELETE_TOPICS.check(AclOperation.DESCRIBE, ResourceType.TOPIC),
                              "topics named by id are answered UNKNOWN_TOPIC_ID: this broker's metadata "
                              "has no topic ids, so no name is ever withheld")

#: how long an admin request may wait for the metadata to show its effect, whatever it asks
MAX_WAIT_S = 60.0


async def delete_topics(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    if version >= 6:
        asked = [(t.name, t.topic_id) for t in req.topics]
    else:
        asked = [(name, None) for name in req.topic_names]
    results: list[dict[str, Any]] = []
    names = [name for name, _ in asked if name is not None]
    duplicated = {n for n in names if names.count(n) > 1}
    refused = denied(ctx, _DELETE, names)
    to_delete: list[str] = []
    for name, topic_id in asked:
        result: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0,
                                  "error_message": None}
        results.append(result)
        if not ctx.config.delete_topic_enable:
            code = ErrorCode.TOPIC_DELETION_DISABLED if version >= 3 else ErrorCode.INVALID_REQUEST
            result.update(error_code=code, error_message="Topic deletion is disabled.")
        elif name is None:
            # by topic id (v6): this broker's metadata names topics only
            result.update(error_code=ErrorCode.UNKNOWN_TOPIC_ID, error_message=f"Unknown topic id {topic_id}")
        elif name in refused:
            result.update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=None)  # as Kafka
        elif is_internal(name):
            result.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=internal_topic_refusal(name))
        elif name in duplicated:
            result.update(error_code=ErrorCode.INVALID_REQUEST,
                          error_message=f"Topic {name} appears more than once in the request.")
        elif not await _topic_exists(ctx, name):
            result.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          error_message=f"Topic {name} does not exist.")
        else:
            to_delete.append(name)
    if to_delete:
        try:
            # marking twice is harmless, so a lost connection is waited out (a broker busy
            # creating 1,000 partitions lost its session's connection for a moment, and every
            # topic of the request came back UNKNOWN_SERVER_ERROR with no message)
            await asyncio.to_thread(ctx.zk.until_connected, ctx.zk.mark_topics_for_deletion, to_delete,
                                    timeout_s=min(max(req.timeout.total_seconds(), 1.0), MAX_WAIT_S))
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: nothing was asked for sure
            for result in results:
                if result["name"] in to_delete:
                    result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR,
                                  error_message=f"ZooKeeper did not take the deletion: {type(exc).__name__} {exc}".strip())
            to_delete = []
        else:
            log.info("marked topics %s for deletion", to_delete)
    pending = await _wait_until_deleted(ctx, to_delete, req.timeout.total_seconds())
    for result in results:
        if result["name"] in pending:
            result.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                          error_message="The deletion was asked for and goes on (a broker holding a replica may be down); it has not completed yet.")
    return kio_util.encode_response(api_keys.DELETE_TOPICS, version, header.correlation_id,
                                    {"throttle_time": 0, "responses": results})


def internal_topic_refusal(name: str) -> str:
    """Why DeleteTopics refuses an internal topic, in the words a client shows its user."""
    return (f"Topic {name} is an internal topic and cannot be deleted: the brokers keep consumer "
            f"groups' committed offsets (or transactions' state) in it.")


async def _wait_until_deleted(ctx: BrokerContext, topics: list[str], timeout_s: float) -> list[str]:
    """The topics whose deletion has not completed by the timeout: still in this broker's
    metadata (Kafka's DelayedDeleteTopics condition), or still marked in ZooKeeper (the
    controller removes the marker with the topic's znodes, in one multi, once every replica is
    deleted: a broker that is down holds it up). So a success means the name can be reused."""
    deadline = time.monotonic() + max(0.0, min(timeout_s, MAX_WAIT_S))
    pending = list(topics)
    while pending:
        pending = [t for t in pending if ctx.metadata.partitions(t) is not None]
        if not pending:
            try:
                marked = await asyncio.to_thread(ctx.zk.get_topic_deletions)
            except Exception:  # noqa: BLE001 - ZooKeeper unreachable: not known to be done
                marked = set(topics)
            pending = [t for t in topics if t in marked]
        if not pending or time.monotonic() >= deadline:
            return pending
        await asyncio.sleep(0.1)
    return pending


async def _topic_exists(ctx: BrokerContext, name: str) -> bool:
    """As this broker's metadata says (ZooKeeper's word until the controller has spoken)."""
    if ctx.metadata.initialized:
        return ctx.metadata.partitions(name) is not None
    return bool(await asyncio.to_thread(ctx.zk.topic_exists, name))


async def wait_until(pending: Any, timeout_s: float) -> list[str]:
    """Poll ``pending()`` (the names still waited for) until it is empty or the time is up."""
    deadline = time.monotonic() + max(0.0, min(timeout_s, MAX_WAIT_S))
    while True:
        left = pending()
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(0.02)
