"""Which partitions a transaction coordinator may leave without their marker: only those
ZooKeeper no longer has (topic deleted, partition removed), never one the broker's own
metadata merely does not know yet (a broker just started)."""
from __future__ import annotations

import asyncio

from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.txn_marker_channel import TxnMarkerChannel
from odradek.common.metadata import TopicAssignment, TopicPartition


class Zk:
    def __init__(self, assignments: dict[str, TopicAssignment]) -> None:
        self.assignments = assignments
        self.reads = 0

    def get_topic_assignments(self, topics: set[str]) -> dict[str, TopicAssignment]:
        self.reads += 1
        return {t: self.assignments[t] for t in topics if t in self.assignments}


def test_only_what_zookeeper_no_longer_has_is_deleted() -> None:
    zk = Zk({"kept": TopicAssignment("kept", "id", {0: (1, 2), 1: (2, 3)})})
    channel = TxnMarkerChannel(1, MetadataCache(), zk)  # an empty cache: a broker just started

    asked = {TopicPartition("kept", 1), TopicPartition("kept", 2), TopicPartition("gone", 0)}
    assert asyncio.run(channel.partitions_deleted(asked)) == {TopicPartition("kept", 2), TopicPartition("gone", 0)}
    assert zk.reads == 1  # one batched read, not one per partition
