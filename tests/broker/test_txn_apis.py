"""AddPartitionsToTxn's, OffsetCommit's and TxnOffsetCommit's "does this partition exist": a
broker just restarted may not have a topic in its metadata cache yet; only ZooKeeper may call
it unknown (an UNKNOWN_TOPIC_OR_PARTITION for an existing topic left librdkafka producers dead
of INVALID_TXN_STATE in a fault run, and failed a copier's transaction)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from odradek.broker.group_apis import _not_committable
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition_existence import unknown_partitions
from odradek.common.metadata import TopicAssignment, TopicPartition
from odradek.protocol.errors import ErrorCode


class Zk:
    def get_topic_assignments(self, topics: set[str]) -> dict[str, TopicAssignment]:
        known = {"orders": TopicAssignment("orders", "id", {0: (1,), 1: (2,)})}
        return {t: known[t] for t in topics if t in known}


def test_a_topic_the_cache_does_not_know_yet_is_asked_of_zookeeper() -> None:
    ctx = SimpleNamespace(metadata=MetadataCache(), zk=Zk())  # a cache as a restarted broker has it
    asked = [TopicPartition("orders", 1), TopicPartition("orders", 5), TopicPartition("nowhere", 0)]
    unknown = asyncio.run(unknown_partitions(ctx, asked))  # type: ignore[arg-type]
    assert unknown == {TopicPartition("orders", 5), TopicPartition("nowhere", 0)}


class DeadZk:
    def get_topic_assignments(self, topics: set[str]) -> dict[str, TopicAssignment]:
        raise ConnectionError("ZooKeeper unreachable")


def test_an_offset_commit_is_told_to_retry_when_zookeeper_cannot_say() -> None:
    ctx = SimpleNamespace(metadata=MetadataCache(), zk=Zk())
    asked = [TopicPartition("orders", 0), TopicPartition("nowhere", 0)]
    assert asyncio.run(_not_committable(ctx, asked)) == {  # type: ignore[arg-type]
        TopicPartition("nowhere", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    ctx = SimpleNamespace(metadata=MetadataCache(), zk=DeadZk())
    assert asyncio.run(_not_committable(ctx, asked)) == dict.fromkeys(  # type: ignore[arg-type]
        asked, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)   # none committed
