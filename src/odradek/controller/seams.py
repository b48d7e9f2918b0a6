"""The two narrow seams between the controller's decisions and the outside world.

The controller core never touches kazoo or sockets: everything it reads or writes in ZooKeeper
goes through ``ControllerZk`` and everything it tells brokers goes through ``BrokerChannel``.
Both are Protocols so production code (zk/client.py, controller_channel.py), the simulation and
the unit tests' recording fakes can be swapped without the core knowing (Kafka's
``ZkPartitionStateMachine`` / ``MockControllerBrokerRequestBatch`` split, made explicit).
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Protocol

from odradek.common.metadata import BrokerInfo, LeaderAndIsr, ReplicaAssignment, TopicAssignment, TopicPartition
from odradek.protocol.controller_api import ControllerRequest, Response
from odradek.zk.errors import ControllerMovedError
from odradek.zk.paths import PartitionRemovalReport

__all__ = ["BrokerChannel", "ControllerMovedError", "ControllerZk", "PendingLeaderAndIsrWrites"]


class PendingLeaderAndIsrWrites(Protocol):
    """LeaderAndIsr writes sent and not yet answered (zk.client.PendingLeaderAndIsrWrites)."""

    def result(self) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Waits for the writes (call once): ``update_leader_and_isr``'s result."""
        ...


class ControllerZk(Protocol):
    """Batched, epoch-fenced ZooKeeper access for the controller.

    Every write is conditional on the controller epoch znode version the controller was elected
    with; losing that fence raises ``ControllerMovedError``. Per-partition failures are returned
    as exception entries so one bad znode does not fail a whole batch. The controller treats any
    exception entry from ``update_leader_and_isr`` as "re-read and retry" (bounded): a version
    conflict resolves on the re-read, a vanished znode turns into a missing-state error there.
    """

    def get_live_brokers(self) -> dict[int, BrokerInfo]: ...

    def get_all_topics(self) -> set[str]: ...

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]: ...

    def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]: ...

    def get_partition_states(
        self, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """States of the partitions whose state znode exists; missing znodes are absent."""
        ...

    def create_partition_states(
        self, states: dict[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """One multi for the whole batch; a created znode comes back with zk_version 0."""
        ...

    def update_leader_and_isr(
        self, states: dict[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Conditional on each state's zk_version; success returns it with zk_version + 1."""
        ...

    def start_update_leader_and_isr(
        self, states: dict[TopicPartition, LeaderAndIsr]
    ) -> PendingLeaderAndIsrWrites:
        """``update_leader_and_isr`` in two halves: sends the writes and returns them pending,
        so the controller can decide other partitions' changes while ZooKeeper applies these."""
        ...

    def get_preferred_replica_election(self) -> set[TopicPartition] | None:
        """The partitions /admin/preferred_replica_election names; None when it does not exist
        (malformed contents read as no partitions)."""
        ...

    def delete_preferred_replica_election(self) -> None:
        """Fenced delete once the election it asked for ran; already gone is fine."""
        ...

    def pop_isr_change_notifications(self) -> set[TopicPartition]:
        """Read and delete the /isr_change_notification children."""
        ...

    def get_topic_deletions(self) -> set[str]:
        """The topics marked for deletion (children of /admin/delete_topics)."""
        ...

    def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        """Fenced removal of deletion markers; already gone is fine."""
        ...

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Fenced removal of each topic's znodes, its config and its marker last
        (TopicDeletionManager's DeletionClient.deleteTopic)."""
        ...

    def get_partition_reassignments(self) -> dict[TopicPartition, tuple[int, ...]] | None:
        """The targets /admin/reassign_partitions asks for; None when it does not exist
        (malformed contents read as no partitions)."""
        ...

    def set_partition_reassignments(
        self, remaining: Mapping[TopicPartition, Iterable[int]]
    ) -> None:
        """Fenced: rewrite /admin/reassign_partitions with ``remaining``, or delete it when
        empty; already gone is fine."""
        ...

    def set_replica_assignments(
        self, changes: Mapping[TopicPartition, ReplicaAssignment]
    ) -> None:
        """Fenced: the partitions' replicas, adding and removing replicas in their topic znodes
        (KIP-455), the topics' other partitions kept as stored."""
        ...

    def backfill_topic_znodes(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """Fenced: give topic znodes without initial_partition_count (KIP-253) or a topic id
        both; returns the assignments as now stored."""
        ...

    def set_undeleted_partition_counts(self, counts: Mapping[str, int]
                                       ) -> dict[str, TopicAssignment]:
        """Fenced: KIP-253's undeleted_partition_count into each topic znode, conditional on
        the version read; returns the assignments as now stored, without the topics whose
        znode changed meanwhile (unwritten: their change is the next event)."""
        ...

    def get_partition_removals(self) -> dict[str, PartitionRemovalReport | None]:
        """KIP-253: the leaders' reports of drained partitions marked for deletion, by child
        name of /admin/ordered_partition_removals (None: malformed)."""
        ...

    def delete_partition_removals(self, names: Iterable[str]) -> None:
        """Fenced removal of reports; already gone is fine."""
        ...

    def remove_partitions(self, topic: str, partitions: Iterable[int], reports: Iterable[str],
                          rewrite: Mapping[TopicPartition, LeaderAndIsr] | None = None
                          ) -> TopicAssignment | None:
        """Fenced, one multi: the partitions leave the topic znode (conditional on the version
        read; the leader epochs of their state znodes raise its removed_leader_epochs), their
        state and partition znodes and ``reports`` go, and the states of ``rewrite`` are set
        at their zk_version; the assignment as stored afterwards, or None when a znode is gone
        or changed (nothing written)."""
        ...


class BrokerChannel(Protocol):
    """One queue per live broker; ``send`` never blocks the controller's event thread."""

    def add_broker(self, info: BrokerInfo) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def send(
        self, broker_id: int, request: ControllerRequest,
        callback: Callable[[Response | Exception], None] | None = None
    ) -> None: ...
