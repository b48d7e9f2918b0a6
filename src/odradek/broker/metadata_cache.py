"""What this broker knows of the cluster, as the controller's UpdateMetadata requests told it.

Metadata requests from clients are answered from here, so a client sees the controller's
decisions in the order the controller made them.

A broker that has just started knows nothing until the controller's first UpdateMetadata
reaches it: seconds, when the controller broker itself was restarted (the new controller is
elected only when the old one's ZooKeeper session ends). Answering from the empty cache would
tell clients that existing topics do not exist, and librdkafka then fails every produce() to
such a topic until the application re-creates its producer. So, as Apache Kafka's KRaft brokers do not
serve from metadata they have not caught up with, a broker answers no client from an empty
cache: until the first UpdateMetadata, Metadata requests are answered from ZooKeeper itself
(`from_zookeeper`), which holds the state the controller would send, and partitions this broker
does not serve are NOT_LEADER_OR_FOLLOWER (retriable everywhere), never
UNKNOWN_TOPIC_OR_PARTITION.

Metadata requests are not held until the UpdateMetadata comes: responses on a connection go
back in request order, so everything a client pipelined behind the Metadata request, a retried
Produce too, would stay in flight with it for seconds; reading ZooKeeper answers at once.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, AbstractSet

from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.protocol.errors import ErrorCode

#: Kafka's LeaderAndIsr.LeaderDuringDelete: UpdateMetadata's leader for a partition of a topic
#: being deleted (controller/request_batch.py)
LEADER_DURING_DELETE = -2

if TYPE_CHECKING:
    from odradek.zk.client import KafkaZkClient


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id = -1
        self.controller_epoch = -1
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, dict[int, PartitionState]] = {}
        self._initialized = False
        #: KIP-253: each ordered topic's undeleted_partition_count, as the controller's last
        #: LeaderAndIsr or UpdateMetadata naming the topic said (topics without ordered
        #: delivery are never named, and have no entry)
        self._undeleted_counts: dict[str, int] = {}
        self._initial_counts: dict[str, int] = {}

    @property
    def initialized(self) -> bool:
        """Whether a controller's UpdateMetadata has reached this broker since it started."""
        return self._initialized

    def not_served_error(self, tp: TopicPartition) -> ErrorCode:
        """The error for a request about a partition this broker does not lead: unknown only
        when the controller has told us the cluster and tp is not in it (as Kafka's
        ReplicaManager answers), retriable otherwise."""
        if self.initialized and self.partition(tp) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def update(self, controller_id: int, controller_epoch: int, live_brokers: tuple[BrokerInfo, ...],
               states: tuple[PartitionState, ...], deleted: AbstractSet[TopicPartition] = frozenset()) -> None:
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self._initialized = True
        self._brokers = {b.id: b for b in live_brokers}
        gone = set(deleted)
        for state in states:
            if state.leader == LEADER_DURING_DELETE:
                gone.add(state.tp)  # its topic is being deleted: clients stop seeing it
            else:
                self._topics.setdefault(state.tp.topic, {})[state.tp.partition] = state
        for tp in gone:
            parts = self._topics.get(tp.topic)
            if parts is not None:
                parts.pop(tp.partition, None)
                if not parts:
                    del self._topics[tp.topic]
                    self._undeleted_counts.pop(tp.topic, None)
                    self._initial_counts.pop(tp.topic, None)

    def record_partition_counts(self, counts: Iterable[tuple[str, int, int]]) -> None:
        """KIP-253: the undeleted_partition_count and initial_partition_count of ordered
        topics, from a controller request this broker applied (call it in the same loop
        callback that applied the request's leader epochs, so that a record is never checked
        against one without the other)."""
        for topic, undeleted, initial in counts:
            self._undeleted_counts[topic] = undeleted
            self._initial_counts[topic] = initial

    def undeleted_partition_count(self, topic: str) -> int | None:
        """KIP-253: the ordered topic's count as last told by the controller; None for a topic
        without ordered delivery (or not heard of yet)."""
        return self._undeleted_counts.get(topic)

    def ordered_partition_counts(self, topic: str) -> tuple[int, int] | None:
        """KIP-253: (initial_partition_count, undeleted_partition_count) of an ordered topic,
        what linear hashing needs to say where a key belongs; None for any other topic."""
        undeleted = self._undeleted_counts.get(topic)
        return None if undeleted is None else (self._initial_counts[topic], undeleted)

    @property
    def live_brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.id)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def offline_and_all_partitions(self) -> tuple[int, int]:
        """(partitions without a live leader, all partitions), in one walk (for the metrics)."""
        offline = total = 0
        for states in self._topics.values():
            for state in states.values():
                total += 1
                offline += state.leader not in self._brokers
        return offline, total

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def partitions(self, topic: str) -> dict[int, PartitionState] | None:
        return self._topics.get(topic)

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        return self._topics.get(tp.topic, {}).get(tp.partition)


def from_zookeeper(zk: KafkaZkClient, topics: Iterable[str] | None) -> MetadataCache:
    """A cache read from ZooKeeper, for the named topics (None: all): what the controller would
    send in an UpdateMetadata, read directly. Blocking; for a broker whose controller has not
    spoken yet."""
    cache = MetadataCache()
    names = zk.get_all_topics() if topics is None else set(topics)
    assignments = zk.get_topic_assignments(names)
    tps = [TopicPartition(a.name, p) for a in assignments.values() for p in a.partitions]
    states = zk.get_partition_states(tps)
    partition_states = []
    for tp in tps:
        replicas = assignments[tp.topic].partitions[tp.partition]
        state = states.get(tp)
        if state is None:  # created, no leader elected yet
            partition_states.append(PartitionState(tp, -1, -1, -1, (), -1, replicas))
        else:
            partition_states.append(PartitionState(tp, state.controller_epoch, state.leader, state.leader_epoch,
                                                   state.isr, state.zk_version, replicas))
    controller_id = zk.get_controller_id()
    cache.update(-1 if controller_id is None else controller_id, -1,
                 tuple(zk.get_live_brokers().values()), tuple(partition_states))
    return cache
