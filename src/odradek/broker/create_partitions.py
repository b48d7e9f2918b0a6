"""CreatePartitions, as Kafka's ZkAdminManager.createPartitions answers it in the ZooKeeper era:
/brokers/topics/<topic> is rewritten with the larger assignment, conditional on the znode
version read, keeping the topic id and KIP-253's initial_partition_count; the controller's
PartitionModifications watch creates the new partitions (and only them). Their replicas are the
request's, or Kafka's AdminUtils.assignReplicasToBrokers continuing from the existing
partitions (start index: partition 0's first replica, start partition id: the current count),
so leaders keep spreading round-robin. The answer comes once this broker's metadata has a
leader for every new partition (Kafka's DelayedCreatePartitions).

Any broker answers, as for DeleteTopics (delete_topics.py).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.broker import apis
from odradek.broker.context import BrokerContext
from odradek.broker.delete_topics import wait_until
from odradek.broker.topic_admin import TopicError, check_fits_in_zookeeper
from odradek.metadata import TopicAssignment
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.broker.admin")


async def create_partitions(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    live = ([b.id for b in ctx.metadata.live_brokers] if ctx.metadata.initialized
            else sorted(await asyncio.to_thread(ctx.zk.get_live_brokers)))
    names = [t.name for t in req.topics]
    results: list[dict[str, Any]] = []
    grown: dict[str, int] = {}
    for topic in req.topics:
        result: dict[str, Any] = {"name": topic.name, "error_code": 0, "error_message": None}
        results.append(result)
        try:
            if names.count(topic.name) > 1:
                raise TopicError(ErrorCode.INVALID_REQUEST,
                                 f"Topic {topic.name} appears more than once in the request.")
            count = await asyncio.to_thread(_create_partitions, ctx, topic, live, req.validate_only)
            if not req.validate_only:
                grown[topic.name] = count
        except TopicError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
        except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble
            log.warning("CreatePartitions of %s failed: %r", topic.name, exc)
            result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(exc))

    def not_led_yet() -> list[str]:
        """Kafka's DelayedCreatePartitions: every new partition has a leader here."""
        out = []
        for name, count in grown.items():
            parts = ctx.metadata.partitions(name) or {}
            if any(parts.get(p) is None or parts[p].leader < 0 for p in range(count)):
                out.append(name)
        return out

    for name in await wait_until(not_led_yet, req.timeout.total_seconds()):
        for result in results:
            if result["name"] == name:
                result.update(error_code=ErrorCode.REQUEST_TIMED_OUT,
                              error_message="The partitions were created; their leaders are not known yet.")
    return kio_util.encode_response(apis.CREATE_PARTITIONS, version, header.correlation_id,
                                    {"throttle_time": 0, "results": results})


def _create_partitions(ctx: BrokerContext, topic: Any, live: list[int], validate_only: bool) -> int:
    """Blocking: validate, and unless ``validate_only`` write the grown assignment (retried
    when another writer moved the znode between our read and write). The new count."""
    zk = ctx.zk
    for _ in range(5):
        found = zk.get_topic_assignment_and_version(topic.name)
        if found is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{topic.name}' does not exist.")
        if topic.name in zk.get_topic_deletions():
            raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
        current, version = found
        grown = plan_partitions(current, topic.count,
                                None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments],
                                live)
        check_fits_in_zookeeper(grown, {}, ctx.config.zookeeper_jute_maxbuffer)
        if validate_only:
            return topic.count
        try:
            zk.set_topic_assignment(grown, version)
        except BadVersionError:
            continue
        except NoNodeError:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{topic.name}' does not exist.") from None
        log.info("topic %s: %d -> %d partitions %s", topic.name, len(current.partitions), topic.count,
                 {p: list(r) for p, r in grown.partitions.items() if p not in current.partitions})
        return topic.count
    raise TopicError(ErrorCode.UNKNOWN_SERVER_ERROR,
                     f"The assignment of {topic.name} kept changing while partitions were added.")


def plan_partitions(current: TopicAssignment, count: int, assignments: list[list[int]] | None,
                    live: list[int]) -> TopicAssignment:
    """The grown assignment, validated as Kafka's ZkAdminManager.createPartitions does."""
    existing = len(current.partitions)
    if count < existing:
        raise TopicError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic currently has {existing} partitions, which is higher than the "
                         f"requested {count}.")
    if count == existing:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {existing} partitions.")
    rf = len(current.partitions[min(current.partitions)])
    added = count - existing
    if assignments is None:
        new = assign_new_partitions(sorted(live), existing, added, rf, current.partitions[0][0])
    else:
        if len(assignments) != added:
            raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             f"Increasing the number of partitions by {added} but {len(assignments)} "
                             f"assignments provided.")
        new = {}
        for i, replicas in enumerate(assignments):
            if not replicas:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Partition {existing + i} has an empty replica assignment.")
            if len(set(replicas)) != len(replicas):
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate brokers not allowed in replica assignment: {replicas} "
                                 f"for partition id {existing + i}.")
            unknown = sorted(set(replicas) - set(live))
            if unknown:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unknown broker(s) in replica assignment: {unknown}.")
            if len(replicas) != rf:
                raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Inconsistent replication factor between partitions, partition 0 has "
                                 f"{rf} while partition {existing + i} has {len(replicas)}.")
            new[existing + i] = tuple(replicas)
    return TopicAssignment(current.name, current.topic_id, {**current.partitions, **new},
                           current.initial_partition_count or existing)


def assign_new_partitions(brokers: list[int], existing: int, added: int, rf: int,
                          first_replica_of_0: int) -> dict[int, tuple[int, ...]]:
    """AdminUtils.assignReplicasToBrokers (rack-unaware) with the fixed start index and start
    partition id Kafka's createPartitions gives it: partition 0's first replica's position in
    the broker list, and the current partition count."""
    if rf > len(brokers):
        raise TopicError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {rf} larger than available brokers: {len(brokers)}.")
    n = len(brokers)
    start = next((i for i, b in enumerate(brokers) if b >= first_replica_of_0), 0)
    shift = start
    out: dict[int, tuple[int, ...]] = {}
    for p in range(existing, existing + added):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        replicas += [brokers[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(rf - 1)]
        out[p] = tuple(replicas)
    return out
