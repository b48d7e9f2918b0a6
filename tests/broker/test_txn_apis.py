"""AddPartitionsToTxn's "does this partition exist": a transaction coordinator just restarted
may not have a topic in its metadata cache yet; only ZooKeeper may call it unknown (an
UNKNOWN_TOPIC_OR_PARTITION for an existing topic left librdkafka producers dead of
INVALID_TXN_STATE in a fault run)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.txn_apis import _unknown_partitions
from odradek.common.metadata import TopicAssignment, TopicPartition


class Zk:
    def get_topic_assignments(self, topics: set[str]) -> dict[str, TopicAssignment]:
        known = {"orders": TopicAssignment("orders", "id", {0: (1,), 1: (2,)})}
        return {t: known[t] for t in topics if t in known}


def test_a_topic_the_cache_does_not_know_yet_is_asked_of_zookeeper() -> None:
    ctx = SimpleNamespace(metadata=MetadataCache(), zk=Zk())  # a cache as a restarted broker has it
    asked = [TopicPartition("orders", 1), TopicPartition("orders", 5), TopicPartition("nowhere", 0)]
    unknown = asyncio.run(_unknown_partitions(ctx, asked))  # type: ignore[arg-type]
    assert unknown == {TopicPartition("orders", 5), TopicPartition("nowhere", 0)}
