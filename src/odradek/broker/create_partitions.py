"""CreatePartitions, as Kafka's ZkAdminManager.createPartitions answers it in the ZooKeeper era:
/brokers/topics/<topic> is rewritten with the larger assignment, conditional on the znode
version read, keeping the topic id and KIP-253's initial_partition_count; the controller's
PartitionModifications watch creates the new partitions (and only them). Their replicas are the
request's, or Kafka's AdminUtils.assignReplicasToBrokers continuing from the existing
partitions (start index: partition 0's first replica, start partition id: the current count),
so leaders keep spreading round-robin. The answer comes once this broker's metadata has a
leader for every new partition (Kafka's DelayedCreatePartitions).

Any broker answers, as for DeleteTopics (delete_topics.py).

The partition count of an internal topic never changes (INVALID_TOPIC_EXCEPTION, as
DeleteTopics refuses them): a group's coordinator is partition abs(hash(group id)) % count of
__consumer_offsets, so another count would send every group to a partition without its
committed offsets. kafka-topics.sh refuses it; Kafka's brokers do not, odradek's do.

A topic with enable.ordered.delivery=true (KIP-253) can also get a lower count: a deletion,
which writes only the znode's undeleted_partition_count (ordered_partition_count.py says why
and what is refused). For such a topic the answer also waits until this broker's metadata has
the new undeleted count from the controller, so a producer asking this broker next routes with
it.

With an authorizer, as Kafka's handleCreatePartitionsRequest: each topic named once needs ALTER
on it, else TOPIC_AUTHORIZATION_FAILED ("The topic authorization is failed.").
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Mapping

from kazoo.exceptions import BadVersionError, NoNodeError

from odradek.broker import api_keys
from odradek.broker.context import BrokerContext
from odradek.broker.delete_topics import wait_until
from odradek.broker.ordered_partition_count import is_ordered, partitions_past_count, plan_ordered
from odradek.broker.request_authorization import denied, wire
from odradek.broker.topic_admin import TopicError, assign_replicas, check_fits_in_zookeeper, check_partition_count_fits
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import TopicAssignment, TopicPartition
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType
from odradek.zk.request_size import JUTE_MAXBUFFER

log = logging.getLogger("odradek.broker.admin")

_ALTER_TOPIC = wire(api_keys.CREATE_PARTITIONS).check(AclOperation.ALTER, ResourceType.TOPIC)


@dataclass(frozen=True)
class Changed:
    """A topic whose count CreatePartitions changed (or, with validate_only, would change)."""

    #: the partition count of a growth; the undeleted_partition_count of a deletion
    count: int
    #: enable.ordered.delivery=true: the answer also waits for the controller's new count
    ordered: bool = False
    #: KIP-253's deletion (an ordered topic's lower count): no partition is created
    deletion: bool = False


async def create_partitions(ctx: BrokerContext, header: Any, req: Any, version: int) -> bytes:
    live = ([b.id for b in ctx.metadata.live_brokers] if ctx.metadata.initialized
            else sorted(await asyncio.to_thread(ctx.zk.get_live_brokers)))
    names = [t.name for t in req.topics]
    refused = denied(ctx, _ALTER_TOPIC, (n for n in names if names.count(n) == 1))
    results: list[dict[str, Any]] = []
    todo = []
    for topic in req.topics:
        results.append({"name": topic.name, "error_code": 0, "error_message": None})
        if topic.name in refused:
            results[-1].update(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                               error_message="The topic authorization is failed.")
        elif names.count(topic.name) == 1:
            todo.append(topic)
    try:
        outcomes: Mapping[str, Changed | Exception] = await asyncio.to_thread(
            _create_partitions, ctx, todo, live, req.validate_only)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble
        log.warning("CreatePartitions of %s failed: %r", [t.name for t in todo], exc)
        outcomes = {t.name: exc for t in todo}
    changed: dict[str, Changed] = {}
    for result in results:
        name = result["name"]
        if name in refused:
            continue
        outcome = outcomes.get(name, TopicError(
            ErrorCode.INVALID_REQUEST, f"Topic {name} appears more than once in the request."))
        if isinstance(outcome, TopicError):
            result.update(error_code=outcome.code, error_message=str(outcome))
        elif isinstance(outcome, Exception):
            result.update(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=str(outcome))
        elif not req.validate_only:
            changed[name] = outcome

    def not_led_yet() -> list[str]:
        """Kafka's DelayedCreatePartitions: every new partition has a leader here; and for an
        ordered topic (KIP-253), this broker has the controller's new undeleted count."""
        out = []
        for name, change in changed.items():
            parts = ctx.metadata.partitions(name) or {}
            if not change.deletion and any(parts.get(p) is None or parts[p].leader < 0
                                           for p in range(change.count)):
                out.append(name)
            elif change.ordered and ctx.metadata.undeleted_partition_count(name) != change.count:
                out.append(name)
        return out

    for name in await wait_until(not_led_yet, req.timeout.total_seconds()):
        message = ("The deletion was recorded; the controller has not applied the new "
                   "undeleted_partition_count yet." if changed[name].deletion
                   else "The partitions were created; their leaders are not known yet.")
        for result in results:
            if result["name"] == name:
                result.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=message)
    return kio_util.encode_response(api_keys.CREATE_PARTITIONS, version, header.correlation_id,
                                    {"throttle_time": 0, "results": results})


def _create_partitions(ctx: BrokerContext, topics: list[Any], live: list[int],
                       validate_only: bool) -> dict[str, Changed | TopicError]:
    """Blocking: validate every topic and unless ``validate_only`` write the grown
    assignments (or, for an ordered topic's lower count, the lowered undeleted count). Per
    topic what changed or its TopicError. One read of /admin/delete_topics and of the topics'
    configs, one batched read of the topic znodes (and of the state znodes past an ordered
    topic's undeleted count, where it has partitions there) and one pipelined round of
    conditional writes; the topics another writer moved between our read and write go round
    again."""
    zk = ctx.zk
    jute = ctx.config.zookeeper_jute_maxbuffer
    out: dict[str, Changed | TopicError] = {}
    remaining = {t.name: t for t in topics}
    deletions = zk.get_topic_deletions() if remaining else set()
    ordered = {name for name, config in zk.get_topic_configs(remaining).items()
               if is_ordered(config)} if remaining else set()
    for _ in range(5):
        if not remaining:
            return out
        found = zk.get_topic_assignments_and_versions(remaining)
        # KIP-253: a partition past the undeleted count with a state znode is marked for
        # deletion (or about to be); without one it is a growth not yet applied
        past = [TopicPartition(name, p) for name in remaining if name in ordered and name in found
                for p in partitions_past_count(found[name][0])]
        created = zk.get_partition_states(past) if past else {}
        writes: list[tuple[TopicAssignment, int]] = []
        deleting: set[str] = set()
        for name, topic in remaining.items():
            try:
                if name not in found:
                    raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     f"The topic '{name}' does not exist.")
                if is_internal(name):
                    raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                     f"The number of partitions of the internal topic {name} cannot be "
                                     f"changed: each group's (or transaction's) state is found by that count.")
                if name in deletions:
                    raise TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
                current, version = found[name]
                if current.adding_replicas or current.removing_replicas:
                    # Kafka's ReassignmentInProgressException: the controller rewrites this
                    # znode as the reassignment goes on
                    raise TopicError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                                     f"A partition reassignment is in progress for the topic '{name}'.")
                shrunk = None
                if name in ordered:
                    shrunk = plan_ordered(current, topic.count, bool(topic.assignments),
                                          [tp.partition for tp in created if tp.topic == name])
                if shrunk is not None:
                    grown = shrunk
                    deleting.add(name)
                else:
                    grown = plan_partitions(
                        current, topic.count,
                        None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments],
                        live, jute)
                    check_fits_in_zookeeper(grown, {}, jute)
            except TopicError as exc:
                out[name] = exc
                continue
            if validate_only:
                out[name] = Changed(topic.count, name in ordered, name in deleting)
            else:
                writes.append((grown, version))
        written = zk.set_topic_assignments(writes) if writes else {}
        moved = {}
        for grown, _ in writes:
            name, error = grown.name, written[grown.name]
            if isinstance(error, BadVersionError):
                moved[name] = remaining[name]
            elif isinstance(error, NoNodeError):
                out[name] = TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                       f"The topic '{name}' does not exist.")
            elif name in deleting:
                current = found[name][0]
                log.info("topic %s: undeleted_partition_count %d -> %s; partitions %s are to be marked "
                         "for deletion", name, len(current.partitions), grown.undeleted_partition_count,
                         [p for p in grown.partitions if p >= (grown.undeleted_partition_count or 0)])
                out[name] = Changed(grown.undeleted_partition_count or 0, True, True)
            else:
                current = found[name][0]
                log.info("topic %s: %d -> %d partitions %s", name, len(current.partitions),
                         len(grown.partitions), {p: list(r) for p, r in grown.partitions.items()
                                                 if p not in current.partitions})
                out[name] = Changed(len(grown.partitions), name in ordered)
        remaining = moved
    for name in remaining:
        out[name] = TopicError(ErrorCode.UNKNOWN_SERVER_ERROR,
                               f"The assignment of {name} kept changing while partitions were added.")
    return out


def plan_partitions(current: TopicAssignment, count: int, assignments: list[list[int]] | None,
                    live: list[int], jute_maxbuffer: int = JUTE_MAXBUFFER) -> TopicAssignment:
    """The grown assignment, validated as Kafka's ZkAdminManager.createPartitions does; a
    count whose assignment could never fit in ZooKeeper is refused before any is made."""
    existing = len(current.partitions)
    if count < existing:
        raise TopicError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic currently has {existing} partitions, which is higher than the "
                         f"requested {count}.")
    if count == existing:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {existing} partitions.")
    rf = len(current.partitions[min(current.partitions)])
    check_partition_count_fits(current.name, count, rf, jute_maxbuffer, ErrorCode.INVALID_PARTITIONS)
    added = count - existing
    if assignments is None:
        # AdminUtils.assignReplicasToBrokers continuing Kafka's createPartitions way: start
        # index at partition 0's first replica's position, partition ids from the current count
        brokers = sorted(live)
        first = current.partitions[0][0]
        start = next((i for i, b in enumerate(brokers) if b >= first), 0)
        new = assign_replicas(brokers, added, rf, fixed_start_index=start,
                              start_partition_id=existing)
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
    return dataclasses.replace(current, partitions={**current.partitions, **new},
                               initial_partition_count=current.initial_partition_count or existing)
