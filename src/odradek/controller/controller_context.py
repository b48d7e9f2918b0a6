"""What the active controller knows about the cluster, behind methods.

Kafka's ControllerContext is a bag of public ``var``s and mutable maps every manager writes to,
which makes it hard to see who changes what. Here every read and write is a named method, so the
invariants (e.g. shutting-down brokers are live but not electable) live in one place. Only the
controller's event thread touches it, so it needs no locks.
"""
from __future__ import annotations

from typing import Callable, Iterable, KeysView

from odradek.common.metadata import (
    BrokerInfo,
    LeaderAndIsr,
    PartitionOrdering,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
    new_tuple,
)
from odradek.controller.states import PartitionReplica, PartitionStatus, ReplicaStatus

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
#: KIP-253: the topic config that turns ordered delivery across expansion and deletion on
ENABLE_ORDERED_DELIVERY = "enable.ordered.delivery"

#: TopicPartition and PartitionReplica are NamedTuples, so plain sorted() orders them by
#: (topic, partition[, replica]) with C tuple comparisons: no key function per element.


class ControllerContext:
    """The controller's cache of ZooKeeper plus the two state machines' states."""

    def __init__(self, unclean_leader_election_default: Callable[[], bool] = lambda: False) -> None:
        """``unclean_leader_election_default`` reads the controller's broker's
        unclean.leader.election.enable, for topics that do not set it (Kafka's LogConfig
        defaults come from the broker's KafkaConfig the same way)."""
        self._unclean_default = unclean_leader_election_default
        self._reset()

    def clear(self) -> None:
        """Forget everything: a resigned controller must not act on stale knowledge."""
        self._reset()

    def _reset(self) -> None:
        self._epoch = 0
        self._epoch_zk_version = 0
        self._live_brokers: dict[int, BrokerInfo] = {}
        self._shutting_down: set[int] = set()
        #: brokers that re-registered before we saw them go (bounced), while their old
        #: incarnation is handled as dead: their logs are still there (see Controller)
        self.returning_brokers: frozenset[int] = frozenset()
        self._topic_ids: dict[str, str] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}
        #: KIP-253: the topics whose config has enable.ordered.delivery=true
        self._ordered: set[str] = set()
        self._assignment: dict[TopicPartition, tuple[int, ...]] = {}
        self._leadership: dict[TopicPartition, LeaderAndIsr] = {}
        #: whether any cached state carries KIP-253's maps (if not, nothing has to keep them)
        self.has_orderings = False
        self._fresh: set[TopicPartition] = set()
        self._partition_states: dict[TopicPartition, PartitionStatus] = {}
        self._replica_states: dict[PartitionReplica, ReplicaStatus] = {}
        # topic deletion (TopicDeletionManager): queued, started (partitions went
        # NonExistent), and halted until a broker returns or a replica's deletion is retried
        self._topics_to_be_deleted: set[str] = set()
        self._topics_with_deletion_started: set[str] = set()
        self._topics_ineligible_for_deletion: set[str] = set()
        #: KIP-253: drained partitions of ordered topics whose replicas are being deleted
        #: (partition_removal.py): like a topic being deleted, not elected, not told to serve
        self._removing: set[TopicPartition] = set()
        #: partitions being reassigned: (adding, removing) replicas (KIP-455); their full
        #: replica list (RS = ORS + TRS) is in _assignment like every other partition's, and only
        #: there, so the two cannot disagree
        self._reassigning: dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        #: KIP-253: each topic's initial_partition_count and undeleted_partition_count as
        #: stored (the latter None: every partition undeleted)
        self._initial_counts: dict[str, int] = {}
        self._undeleted_counts: dict[str, int | None] = {}
        #: KIP-253: per topic, the highest leader epoch of each removed partition number
        #: (TopicAssignment.removed_leader_epochs)
        self._removed_epochs: dict[str, dict[int, int]] = {}
        #: the count brokers are told, once the controller applied it (a refused count in the
        #: znode is never advertised)
        self._applied_counts: dict[str, int] = {}
        #: the topic's partition count when its count was applied: partitions past it are an
        #: expansion's (ordered_partitions.plan)
        self._applied_totals: dict[str, int] = {}
        #: KIP-253: the leaderEpochAfterCreation a partition of an ordered expansion gets when
        #: its state znode is created, decided once the existing partitions' epochs are bumped
        self._creation_ordering: dict[TopicPartition, PartitionOrdering] = {}

    # -- controller epoch -------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def epoch_zk_version(self) -> int:
        """The /controller_epoch znode version every fenced write is conditional on."""
        return self._epoch_zk_version

    def set_epoch(self, epoch: int, epoch_zk_version: int) -> None:
        self._epoch = epoch
        self._epoch_zk_version = epoch_zk_version

    # -- brokers ----------------------------------------------------------------------------
    def set_live_brokers(self, brokers: Iterable[BrokerInfo]) -> None:
        self._live_brokers = {b.id: b for b in brokers}

    def add_live_broker(self, info: BrokerInfo) -> None:
        """Also replaces a bounced broker's registration (and so its broker epoch)."""
        self._live_brokers[info.id] = info

    def remove_live_broker(self, broker_id: int) -> None:
        self._live_brokers.pop(broker_id, None)
        self._shutting_down.discard(broker_id)

    def broker_info(self, broker_id: int) -> BrokerInfo | None:
        return self._live_brokers.get(broker_id)

    def broker_epoch(self, broker_id: int) -> int | None:
        info = self._live_brokers.get(broker_id)
        return info.epoch if info is not None else None

    def live_or_shutting_down_brokers(self) -> tuple[BrokerInfo, ...]:
        """Every registered broker, sorted: what UpdateMetadata advertises."""
        return tuple(self._live_brokers[b] for b in sorted(self._live_brokers))

    def live_or_shutting_down_broker_ids(self) -> frozenset[int]:
        return frozenset(self._live_brokers)

    @property
    def registered_broker_ids(self) -> KeysView[int]:
        """A live view of the registered (live or shutting-down) brokers, for the per-replica
        membership checks of a failover, which would otherwise copy the set each time."""
        return self._live_brokers.keys()

    def live_broker_ids(self) -> frozenset[int]:
        """Brokers that may lead: registered and not in controlled shutdown."""
        return frozenset(self._live_brokers.keys() - self._shutting_down)

    def add_shutting_down_broker(self, broker_id: int) -> None:
        self._shutting_down.add(broker_id)

    def shutting_down_broker_ids(self) -> frozenset[int]:
        return frozenset(self._shutting_down)

    def is_replica_online(
        self, replica: int, tp: TopicPartition, include_shutting_down: bool = False
    ) -> bool:
        """Kafka's isReplicaOnline; ``tp`` is kept for when log-dir failures are tracked."""
        del tp
        if include_shutting_down:
            return replica in self._live_brokers
        return replica in self._live_brokers and replica not in self._shutting_down

    # -- topics, configs and assignments ----------------------------------------------------
    def put_topic(self, assignment: TopicAssignment) -> None:
        """A partial assignment (only some partitions, no counts) leaves the counts known."""
        self._topic_ids[assignment.name] = assignment.topic_id
        if assignment.initial_partition_count is not None:
            self._initial_counts[assignment.name] = assignment.initial_partition_count
            self._undeleted_counts[assignment.name] = assignment.undeleted_partition_count
            self._removed_epochs[assignment.name] = dict(assignment.removed_leader_epochs)
        for partition, replicas in assignment.partitions.items():
            tp = TopicPartition(assignment.name, partition)
            self._assignment[tp] = tuple(replicas)
            if partition in assignment.adding_replicas or partition in assignment.removing_replicas:
                self._reassigning[tp] = (assignment.adding_replicas.get(partition, ()),
                                         assignment.removing_replicas.get(partition, ()))

    def remove_topic(self, topic: str) -> None:
        """Drop the topic and everything known about its partitions and replicas."""
        self._topics_to_be_deleted.discard(topic)
        self._topics_with_deletion_started.discard(topic)
        self._topics_ineligible_for_deletion.discard(topic)
        self._removing = {tp for tp in self._removing if tp.topic != topic}
        self._topic_ids.pop(topic, None)
        self._topic_configs.pop(topic, None)
        self._ordered.discard(topic)
        self._initial_counts.pop(topic, None)
        self._undeleted_counts.pop(topic, None)
        self._removed_epochs.pop(topic, None)
        self._applied_counts.pop(topic, None)
        self._applied_totals.pop(topic, None)
        for tp in self.partitions_for_topic(topic):
            del self._assignment[tp]
            self._creation_ordering.pop(tp, None)
            self._leadership.pop(tp, None)
            self._partition_states.pop(tp, None)
            self._reassigning.pop(tp, None)
        for pr in [pr for pr in self._replica_states if pr.tp.topic == topic]:
            del self._replica_states[pr]

    def all_topics(self) -> frozenset[str]:
        return frozenset(self._topic_ids)

    def topic_id(self, topic: str) -> str | None:
        return self._topic_ids.get(topic)

    # -- topic deletion (Kafka's ControllerContext.topicsToBeDeleted and friends) ------------
    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        """A topic being deleted whole takes over the removal of its drained partitions."""
        topics = set(topics)
        self._topics_to_be_deleted.update(topics)
        if self._removing:
            self._removing = {tp for tp in self._removing if tp.topic not in topics}

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self._topics_to_be_deleted

    def topics_queued_for_deletion(self) -> frozenset[str]:
        return frozenset(self._topics_to_be_deleted)

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self._topics_with_deletion_started.update(topics)

    def is_topic_deletion_started(self, topic: str) -> bool:
        return topic in self._topics_with_deletion_started

    def mark_topics_ineligible_for_deletion(self, topics: Iterable[str]) -> frozenset[str]:
        """Halt the deletion of those of ``topics`` that are queued; returns them."""
        halted = frozenset(topics) & self._topics_to_be_deleted
        self._topics_ineligible_for_deletion |= halted
        return halted

    def mark_topics_eligible_for_deletion(self, topics: Iterable[str]) -> None:
        self._topics_ineligible_for_deletion.difference_update(topics)

    def is_topic_ineligible_for_deletion(self, topic: str) -> bool:
        return topic in self._topics_ineligible_for_deletion

    # -- KIP-253: removal of drained partitions (partition_removal.py) -----------------------
    def begin_partition_removal(self, tps: Iterable[TopicPartition]) -> None:
        self._removing.update(tps)

    def is_partition_being_removed(self, tp: TopicPartition) -> bool:
        return tp in self._removing

    def partitions_being_removed(self) -> frozenset[TopicPartition]:
        return frozenset(self._removing)

    def is_being_deleted(self, tp: TopicPartition) -> bool:
        """Whether the partition's replicas are being deleted: its topic is queued for
        deletion, or it is a drained partition being removed. Either way it is not elected,
        its ISR not shrunk, its replicas not told to serve again."""
        return tp.topic in self._topics_to_be_deleted or tp in self._removing

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> None:
        """Forget removed partitions and their replicas (the topic stays)."""
        for tp in tps:
            self._removing.discard(tp)
            self._assignment.pop(tp, None)
            self._creation_ordering.pop(tp, None)
            self._leadership.pop(tp, None)
            self._partition_states.pop(tp, None)
            self._reassigning.pop(tp, None)
            for pr in [pr for pr in self._replica_states if pr.tp == tp]:
                del self._replica_states[pr]

    def replicas_for_topic(self, topic: str) -> list[PartitionReplica]:
        return self.replicas_for_partitions(self.partitions_for_topic(topic))

    def put_topic_config(self, topic: str, config: dict[str, str]) -> None:
        self._topic_configs[topic] = dict(config)
        value = config.get(ENABLE_ORDERED_DELIVERY)
        if value is not None and value.strip().lower() == "true":
            self._ordered.add(topic)
        else:
            self._ordered.discard(topic)

    def unclean_leader_election_enabled(self, topic: str) -> bool:
        """Kafka 2.4's default is false: availability over durability must be opted into."""
        value = self._topic_configs.get(topic, {}).get(UNCLEAN_LEADER_ELECTION)
        if value is None:
            return self._unclean_default()
        return value.strip().lower() == "true"

    # -- ordered delivery (KIP-253) ---------------------------------------------------------
    def is_ordered(self, topic: str) -> bool:
        """Whether the topic has enable.ordered.delivery=true (off by default, as in the KIP)."""
        return topic in self._ordered

    def ordered_topics(self) -> frozenset[str]:
        """The topics with enable.ordered.delivery=true (usually none: then no request carries
        KIP-253's count)."""
        return frozenset(self._ordered)

    def initial_partition_count(self, topic: str) -> int | None:
        return self._initial_counts.get(topic)

    def set_undeleted_partition_count(self, topic: str, count: int | None) -> None:
        self._undeleted_counts[topic] = count

    def set_removed_leader_epochs(self, topic: str, epochs: dict[int, int]) -> None:
        self._removed_epochs[topic] = dict(epochs)

    def first_leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch a new partition starts at: 0, or above the last epoch of a
        partition a KIP-253 deletion removed under the same number (TopicAssignment.
        removed_leader_epochs says why)."""
        removed = self._removed_epochs.get(tp.topic, {}).get(tp.partition)
        return 0 if removed is None else removed + 1

    def stored_undeleted_partition_count(self, topic: str) -> int | None:
        """As the topic znode has it (None: absent)."""
        return self._undeleted_counts.get(topic)

    def set_applied_partition_count(self, topic: str, count: int, total: int) -> None:
        self._applied_counts[topic] = count
        self._applied_totals[topic] = total

    def applied_partition_total(self, topic: str) -> int | None:
        return self._applied_totals.get(topic)

    def undeleted_partition_count(self, topic: str) -> int | None:
        """The count brokers are told for an ordered topic: the last one the controller
        applied, else the znode's when it is valid, else every partition; None for every other
        topic, whose requests stay Kafka's."""
        if not self.is_ordered(topic):
            return None
        applied = self._applied_counts.get(topic)
        if applied is not None:
            return applied
        total = len(self.partitions_for_topic(topic))
        count = self._undeleted_counts.get(topic)
        initial = self._initial_counts.get(topic)
        if count is None or count > total or (initial is not None and count < initial):
            return total or None
        return count

    def put_creation_ordering(self, tp: TopicPartition, ordering: PartitionOrdering) -> None:
        self._creation_ordering[tp] = ordering

    def drop_creation_ordering(self, tp: TopicPartition) -> None:
        self._creation_ordering.pop(tp, None)

    def creation_ordering(self, tp: TopicPartition) -> PartitionOrdering | None:
        return self._creation_ordering.get(tp)

    def needs_creation_ordering(self, tp: TopicPartition) -> bool:
        """A partition of an ordered topic past its initial count is only created with its
        leaderEpochAfterCreation: without it no consumer could tell when the partition's keys
        stopped going to its parent."""
        initial = self._initial_counts.get(tp.topic)
        return initial is not None and tp.partition >= initial and self.is_ordered(tp.topic)

    def partition_replica_assignment(self, tp: TopicPartition) -> tuple[int, ...]:
        return self._assignment.get(tp, ())

    def update_partition_replica_assignment(
        self, tp: TopicPartition, replicas: Iterable[int]
    ) -> None:
        self._assignment[tp] = tuple(replicas)

    # -- partition reassignment (Kafka's ControllerContext.partitionsBeingReassigned) ---------
    def partition_full_replica_assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        """The replicas with, while reassigned, those being added and removed."""
        moving = self._reassigning.get(tp)
        replicas = self._assignment.get(tp, ())
        return ReplicaAssignment(replicas, *moving) if moving else ReplicaAssignment(replicas)

    def update_partition_full_replica_assignment(self, tp: TopicPartition,
                                                 assignment: ReplicaAssignment) -> None:
        self._assignment[tp] = assignment.replicas
        if assignment.is_being_reassigned:
            self._reassigning[tp] = (assignment.adding, assignment.removing)
        else:
            self._reassigning.pop(tp, None)

    def partitions_being_reassigned(self) -> list[TopicPartition]:
        return sorted(self._reassigning)

    def is_being_reassigned(self, tp: TopicPartition) -> bool:
        return tp in self._reassigning

    def all_partitions(self) -> list[TopicPartition]:
        return sorted(self._assignment)

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self._assignment if tp.topic == topic)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, replicas in self._assignment.items() if broker_id in replicas)

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> list[PartitionReplica]:
        ids = set(broker_ids)
        return sorted(new_tuple(PartitionReplica, (tp, r))
                      for tp, replicas in self._assignment.items() for r in replicas if r in ids)

    def replicas_for_partitions(self, tps: Iterable[TopicPartition]) -> list[PartitionReplica]:
        return [new_tuple(PartitionReplica, (tp, r))
                for tp in tps for r in self.partition_replica_assignment(tp)]

    # -- leadership cache -------------------------------------------------------------------
    def start_event(self) -> None:
        """A new event begins: what earlier events read or wrote may be stale by now."""
        self._fresh.clear()

    def put_partition_leadership(self, tp: TopicPartition, leader_and_isr: LeaderAndIsr) -> None:
        """Called with what was just read from or written to ZooKeeper, so the entry counts
        as fresh for the rest of the event (leadership_reads.py).

        KIP-253's maps are sticky: a partition leader rewriting its ISR writes the state
        without them (brokers do not know them), so a state read without maps keeps the maps
        cached before, and the controller's next write of the partition puts them back
        (Controller._process_isr_change_notification does so at once)."""
        if leader_and_isr[5] is None:
            leader_and_isr = self.with_known_ordering(tp, leader_and_isr)
        else:
            self.has_orderings = True
        self._leadership[tp] = leader_and_isr
        self._fresh.add(tp)

    def with_known_ordering(self, tp: TopicPartition, stored: LeaderAndIsr) -> LeaderAndIsr:
        """``stored`` with the KIP-253 maps cached for ``tp`` when it has none (a leader's
        ISR write dropped them): what the controller decides a write on, so its writes keep
        them."""
        if stored[5] is None:
            cached = self._leadership.get(tp)
            if cached is not None and cached[5] is not None:
                return stored._replace(ordering=cached[5])
        return stored

    def is_fresh(self, tp: TopicPartition) -> bool:
        """Whether ``tp``'s leadership was read or written during the current event."""
        return tp in self._fresh

    def partition_leadership(self, tp: TopicPartition) -> LeaderAndIsr | None:
        return self._leadership.get(tp)

    def partitions_with_leadership(self) -> list[TopicPartition]:
        """Partitions with a leader, but for topics being deleted (Kafka's partitionsWithLeaders)."""
        deleting = self._topics_to_be_deleted
        removing = self._removing
        return sorted(tp for tp in self._leadership if tp.topic not in deleting
                      and tp not in removing)

    def partitions_led_by(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, lai in self._leadership.items() if lai.leader == broker_id)

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        """Partitions whose recorded leader is not an online replica
        (KafkaController.onBrokerFailure)."""
        live = self.live_broker_ids()  # is_replica_online, without a call per partition
        deleting = self._topics_to_be_deleted
        removing = self._removing
        return sorted(tp for tp, lai in self._leadership.items()
                      if lai.leader not in live and tp.topic not in deleting
                      and tp not in removing)

    # -- state machine states ---------------------------------------------------------------
    def partition_state(self, tp: TopicPartition) -> PartitionStatus:
        return self._partition_states.get(tp, PartitionStatus.NON_EXISTENT)

    def put_partition_state(self, tp: TopicPartition, state: PartitionStatus) -> None:
        if state is PartitionStatus.NON_EXISTENT:
            self._partition_states.pop(tp, None)
        else:
            self._partition_states[tp] = state

    def swap_partition_states(self, tps: list[TopicPartition],
                              state: PartitionStatus) -> list[PartitionStatus]:
        """Put ``state`` for every partition; returns their previous states, in order
        (``swap_replica_states`` for partitions)."""
        states = self._partition_states
        get = states.get
        previous = [get(tp, PartitionStatus.NON_EXISTENT) for tp in tps]
        if state is PartitionStatus.NON_EXISTENT:
            for tp in tps:
                states.pop(tp, None)
        else:
            states.update(dict.fromkeys(tps, state))
        return previous

    def partitions_to_bring_online(self) -> list[TopicPartition]:
        """New or Offline partitions, but for topics queued for deletion
        (PartitionStateMachine.triggerOnlinePartitionStateChange's filter)."""
        deleting = self._topics_to_be_deleted
        removing = self._removing
        return sorted(tp for tp, s in self._partition_states.items()
                      if (s is PartitionStatus.NEW or s is PartitionStatus.OFFLINE)
                      and tp.topic not in deleting and tp not in removing)

    def replica_state(self, replica: PartitionReplica) -> ReplicaStatus:
        return self._replica_states.get(replica, ReplicaStatus.NON_EXISTENT)

    def put_replica_state(self, replica: PartitionReplica, state: ReplicaStatus) -> None:
        if state is ReplicaStatus.NON_EXISTENT:
            self._replica_states.pop(replica, None)
        else:
            self._replica_states[replica] = state

    def replica_states(self, replicas: list[PartitionReplica]) -> list[ReplicaStatus]:
        """The state of each replica, in order (one call per batch, like swap_replica_states)."""
        get = self._replica_states.get
        return [get(r, ReplicaStatus.NON_EXISTENT) for r in replicas]

    def swap_replica_states(self, replicas: list[PartitionReplica],
                            state: ReplicaStatus) -> list[ReplicaStatus]:
        """Put ``state`` for every replica; returns their previous states, in order. One call
        for a whole transition: a controller failover moves tens of thousands of replicas."""
        previous = self.replica_states(replicas)
        if state is ReplicaStatus.NON_EXISTENT:
            for r in replicas:
                self._replica_states.pop(r, None)
        else:
            self._replica_states.update(dict.fromkeys(replicas, state))
        return previous
