"""What this broker knows of the cluster, as the controller's UpdateMetadata requests told it.

Metadata requests from clients are answered from here, never from ZooKeeper, so a client sees the
controller's decisions in the order the controller made them.
"""
from __future__ import annotations

from odradek.metadata import BrokerInfo, PartitionState, TopicPartition


class MetadataCache:
    def __init__(self) -> None:
        self.controller_id = -1
        self.controller_epoch = -1
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, dict[int, PartitionState]] = {}

    def update(self, controller_id: int, controller_epoch: int, live_brokers: tuple[BrokerInfo, ...],
               states: tuple[PartitionState, ...], deleted: set[TopicPartition] = frozenset()) -> None:  # type: ignore[assignment]
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self._brokers = {b.id: b for b in live_brokers}
        for state in states:
            self._topics.setdefault(state.tp.topic, {})[state.tp.partition] = state
        for tp in deleted:
            parts = self._topics.get(tp.topic)
            if parts is not None:
                parts.pop(tp.partition, None)
                if not parts:
                    del self._topics[tp.topic]

    @property
    def live_brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.id)

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self._brokers.get(broker_id)

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def partitions(self, topic: str) -> dict[int, PartitionState] | None:
        return self._topics.get(topic)

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        return self._topics.get(tp.topic, {}).get(tp.partition)
