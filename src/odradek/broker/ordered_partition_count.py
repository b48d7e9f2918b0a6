"""CreatePartitions on a topic with enable.ordered.delivery=true (KIP-253): where a lower count
is not refused, as Kafka refuses it, but is KIP-253's deletion.

Why the broker writes only a count. Kafka's CreatePartitions rewrites the topic znode and leaves
the rest to the controller's PartitionModifications watch; a deletion does the same with one
field: ``undeleted_partition_count`` becomes the requested count, the assignment stays whole
(the marked partitions still hold records their keys' consumers must read), and the controller
(controller/ordered_partitions.py) marks the partitions at or past the count with
leader_epoch_before_deletion and bumps the others. The write is conditional on the znode version
CreatePartitions read, as a growth is, so a count decided on a znode another writer changed
meanwhile (a growth, the controller writing a count) is decided again on the new one.

What is refused, each INVALID_PARTITIONS with the reason in the response's error message:
- a count below ``initial_partition_count``: linear hashing has no bucket below the count the
  topic was created with (common/linear_hashing.py);
- any change of the count while an earlier deletion drains (partitions past the undeleted count
  still exist): a second deletion would move keys whose earlier records are still in a marked
  partition to yet another partition, and a growth back over a marked index would make a
  partition undeleted again with old records in front of its keys' new ones; the controller
  would mark such added partitions at once, which is never what the operator asked for;
- any change while the controller has not yet applied an earlier growth (the znode's count is
  below its partition count, and no partition past the count has a state znode yet): what the
  count means is not settled until it has;
- the count the topic already has (Kafka's own words).

A topic without ordered delivery never gets here: CreatePartitions refuses a lower count for it
exactly as Kafka does.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from odradek.broker.topic_admin import TopicError
from odradek.common.metadata import TopicAssignment
from odradek.protocol.errors import ErrorCode

#: the topic config that turns KIP-253 on (the controller reads the same key)
ENABLE_ORDERED_DELIVERY = "enable.ordered.delivery"


def is_ordered(config: Mapping[str, str]) -> bool:
    """Whether a topic's own config has enable.ordered.delivery=true (off by default, as in the
    KIP), read as the controller reads it."""
    value = config.get(ENABLE_ORDERED_DELIVERY)
    return value is not None and value.strip().lower() == "true"


def initial_count(current: TopicAssignment) -> int:
    """The topic's initial_partition_count; a znode written before the field existed is taken at
    its current count, what the controller backfills into it."""
    return current.initial_partition_count or len(current.partitions)


def undeleted_count(current: TopicAssignment) -> int:
    """The partitions taking new records: the znode's undeleted_partition_count, or every
    partition where it has none (an ordered topic never grown nor shrunk)."""
    if current.undeleted_partition_count is None:
        return len(current.partitions)
    return current.undeleted_partition_count


def partitions_past_count(current: TopicAssignment) -> list[int]:
    """The partitions at or past the undeleted count (marked for deletion, or added by a
    growth the controller has not applied yet): those whose state znodes tell the two apart."""
    count = undeleted_count(current)
    return sorted(p for p in current.partitions if p >= count)


def plan_ordered(current: TopicAssignment, count: int, assignments_given: bool,
                 created_past_count: Collection[int]) -> TopicAssignment | None:
    """What CreatePartitions does to an ordered topic whose znode is ``current``: the znode to
    write for a deletion, None for a growth (planned as Kafka's, ``plan_partitions``), or a
    TopicError. ``created_past_count``: the partitions past the undeleted count that have a
    state znode (a deletion drains while any does)."""
    name = current.name
    initial = initial_count(current)
    undeleted = undeleted_count(current)
    total = len(current.partitions)
    if count < initial:
        raise TopicError(ErrorCode.INVALID_PARTITIONS,
                         f"Topic {name} has ordered delivery (KIP-253) and was created with {initial} "
                         f"partitions (its initial_partition_count): it cannot have fewer than {initial} "
                         f"undeleted partitions, {count} requested.")
    if undeleted < total:
        past = partitions_past_count(current)
        if created_past_count:
            raise TopicError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic {name} has {undeleted} undeleted partitions and "
                             f"{_partitions(past)} marked for deletion, not yet removed: its partition "
                             f"count cannot change until {'it is' if len(past) == 1 else 'they are'} "
                             f"(a marked partition is removed once empty).")
        raise TopicError(ErrorCode.INVALID_PARTITIONS,
                         f"The controller is still adding {_partitions(past)} to topic {name}: its "
                         f"partition count cannot change until they are created; try again.")
    if count == undeleted:
        raise TopicError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {undeleted} partitions.")
    if count > undeleted:
        return None
    if assignments_given:
        raise TopicError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Decreasing the number of undeleted partitions of topic {name} from {undeleted} "
                         f"to {count} takes no replica assignment.")
    return dataclasses.replace(current, undeleted_partition_count=count, initial_partition_count=initial)


def _partitions(numbers: list[int]) -> str:
    """``partition 5`` / ``partitions 5, 6``: the partitions a message names."""
    return f"partition{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}"
