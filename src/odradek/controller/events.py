"""The closed set of events the controller's single thread processes.

Watch-triggered events carry no payload: they mean "something under this znode changed, go
re-read ZooKeeper", so a duplicate or a late one is harmless (Kafka's ``case object BrokerChange``).
Only events started by an API call carry data and a callback, and only they can be preempted.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Mapping

from odradek.common.metadata import TopicPartition

#: Receives either the result of the request or the exception that ended it.
Callback = Callable[[object], None]


class EventPreemptedError(Exception):
    """The event was dropped from the queue before it ran (``clear_and_put``, e.g. on session
    expiry), so whoever waits on its callback gets an answer instead of hanging."""


class NotControllerError(Exception):
    """An API event reached a broker that is not (or no longer) the active controller."""


@dataclass(frozen=True, slots=True)
class Startup:
    """This broker won the controller election (Kafka's ZookeeperLeaderElector, run elsewhere)
    with this epoch.

    Failover runs as an event so it is serialized with every watch event on the one thread.
    """

    epoch: int
    epoch_zk_version: int
    #: time.time() of the election win, for the timing log (not part of the event's identity)
    fired: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class BrokerChange:
    """Children of /brokers/ids changed."""

    #: time.time() when the watch fired, for the timing log (not part of the event's identity)
    fired: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class TopicChange:
    """Children of /brokers/topics changed."""

    #: time.time() when the watch fired, for the timing log (not part of the event's identity)
    fired: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class IsrChangeNotification:
    """A leader wrote a child under /isr_change_notification after changing an ISR."""

    #: time.time() when the watch fired, for the timing log (not part of the event's identity)
    fired: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    """Children of /admin/delete_topics changed."""


@dataclass(frozen=True, slots=True)
class TopicDeletionStopReplicaResponseReceived:
    """A broker answered a StopReplica with delete (Kafka's event of the same name).

    ``error_code`` is the request's error (-1: no answer, e.g. the broker was removed from the
    channel); ``partition_errors`` the per-partition codes. ``broker_epoch`` is the incarnation
    the request was sent to: an answer from an earlier one is ignored, since that broker has
    been handled as dead and its replicas' deletion restarted."""

    broker_id: int
    broker_epoch: int
    partitions: tuple[TopicPartition, ...]
    error_code: int
    partition_errors: Mapping[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionRemovalReports:
    """KIP-253: children of /admin/ordered_partition_removals changed (a leader reported a
    drained partition marked for deletion)."""

@dataclass(frozen=True, slots=True)
class PartitionModifications:
    """/brokers/topics/T's data changed: partitions may have been added (CreatePartitions)."""

    topic: str


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """/admin/reassign_partitions was created or changed."""


class InvalidReplicaAssignmentError(Exception):
    """A reassignment's target is not a valid replica list (INVALID_REPLICA_ASSIGNMENT)."""


class NoReassignmentInProgressError(Exception):
    """A cancellation for a partition that is not being reassigned (NO_REASSIGNMENT_IN_PROGRESS)."""


@dataclass(frozen=True, slots=True)
class AlterPartitionReassignments:
    """Start, replace or cancel (target None) partitions' reassignments (KIP-455's API).

    The callback receives ``dict[TopicPartition, Exception | None]`` (None: started, or
    nothing to do), or the exception that ended the event."""

    targets: Mapping[TopicPartition, tuple[int, ...] | None]
    callback: Callback


@dataclass(frozen=True, slots=True)
class ListPartitionReassignments:
    """The reassignments in progress, of ``partitions`` or (None) of all partitions.

    The callback receives ``dict[TopicPartition, ReplicaAssignment]``, or the exception
    that ended the event."""

    partitions: frozenset[TopicPartition] | None
    callback: Callback


class ElectionType(enum.IntEnum):
    """What an election asks for; the values are the ElectLeaders API's election_type."""

    PREFERRED = 0  # move leadership back to the first assigned replica
    UNCLEAN = 1  # elect a leaderless partition's first live replica, even out of the ISR


class ElectionTrigger(enum.Enum):
    """Who asked (Kafka's ElectionTrigger): an admin client's ElectLeaders, an admin tool's
    /admin/preferred_replica_election znode, or the controller's own leader rebalance."""

    ADMIN = "admin"
    ZOOKEEPER = "zookeeper"
    AUTO = "auto"


class ElectionNotNeededError(Exception):
    """The partition already has the leader the election would give it (ELECTION_NOT_NEEDED)."""


class UnknownPartitionError(Exception):
    """The controller knows no such partition (UNKNOWN_TOPIC_OR_PARTITION)."""


@dataclass(frozen=True, slots=True)
class ReplicaLeaderElection:
    """Elect leaders on request (KafkaController.onPreferredReplicaElection, generalised as
    Kafka 2.4's ReplicaLeaderElection to unclean elections of leaderless partitions).

    A ZOOKEEPER election reads its partitions from /admin/preferred_replica_election. The
    callback receives ``dict[TopicPartition, LeaderAndIsr | Exception]``: the new leadership,
    ``ElectionNotNeededError``, ``UnknownPartitionError`` or ``StateChangeFailedError`` (no
    eligible replica) per partition; or the exception that ended the event
    (``NotControllerError`` when not, or no longer, the controller).
    """

    partitions: frozenset[TopicPartition] = frozenset()
    election_type: ElectionType = ElectionType.PREFERRED
    trigger: ElectionTrigger = ElectionTrigger.ADMIN
    callback: Callback | None = None


@dataclass(frozen=True, slots=True)
class AutoLeaderRebalance:
    """The periodic leader imbalance check (auto.leader.rebalance.enable): each broker that
    leads too few of the partitions it is preferred for gets them back."""


@dataclass(frozen=True, slots=True)
class ControlledShutdown:
    """A broker asks to shut down cleanly (KafkaController.shutdownBroker).

    broker_epoch fences requests from an older incarnation of the broker. The callback
    receives the set of partitions the broker still leads (empty means it may stop).
    """

    broker_id: int
    broker_epoch: int
    callback: Callback


@dataclass(frozen=True, slots=True)
class Resign:
    """Another broker became controller (the /controller znode changed under us)."""


@dataclass(frozen=True, slots=True)
class Expire:
    """The ZooKeeper session expired: our ephemeral /controller znode is gone."""


ControllerEvent = (
    Startup
    | BrokerChange
    | TopicChange
    | IsrChangeNotification
    | TopicDeletion
    | TopicDeletionStopReplicaResponseReceived
    | PartitionModifications
    | PartitionRemovalReports
    | PartitionReassignment
    | AlterPartitionReassignments
    | ListPartitionReassignments
    | ReplicaLeaderElection
    | AutoLeaderRebalance
    | ControlledShutdown
    | Resign
    | Expire
)


def preempt(event: ControllerEvent) -> None:
    """Answer a dropped event's waiter, if it has one, with ``EventPreemptedError``."""
    match event:
        case (ControlledShutdown(callback=callback) | ReplicaLeaderElection(callback=callback)
              | AlterPartitionReassignments(callback=callback)
              | ListPartitionReassignments(callback=callback)):
            if callback is not None:
                callback(EventPreemptedError(f"{event!r} was preempted"))
        case _:
            pass
