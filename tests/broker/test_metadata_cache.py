"""The broker's metadata cache before the controller's first UpdateMetadata: retriable errors,
and the answer read from ZooKeeper meanwhile."""
from __future__ import annotations

import pytest

from odradek.broker.metadata_cache import MetadataCache, from_zookeeper
from odradek.common.metadata import BrokerInfo, LeaderAndIsr, PartitionState, TopicAssignment, TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient

TP = TopicPartition("t", 0)


def test_an_empty_cache_calls_every_partition_not_leader_until_the_controller_speaks() -> None:
    cache = MetadataCache()
    assert not cache.initialized
    assert cache.not_served_error(TP) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    cache.update(1, 1, (BrokerInfo(1, "h", 1),), (PartitionState(TP, 1, 1, 0, (1,), 0, (1,)),))
    assert cache.initialized
    assert cache.not_served_error(TP) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert cache.not_served_error(TopicPartition("gone", 0)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.integration
def test_from_zookeeper_reads_what_an_update_metadata_would_carry(zk_connect: str) -> None:
    zk = KafkaZkClient(zk_connect, 6.0)
    zk.start()
    try:
        zk.register_broker(BrokerInfo(1, "127.0.0.1", 9092))
        zk.register_broker(BrokerInfo(2, "127.0.0.1", 9093))
        _, zk.epoch_zk_version = zk.try_become_controller(1)
        zk.create_topic(TopicAssignment("t", paths.new_topic_id(), {0: (1, 2), 1: (2, 1)}), {})
        zk.create_topic(TopicAssignment("other", paths.new_topic_id(), {0: (1,)}), {})
        zk.create_partition_states({TopicPartition("t", 0): LeaderAndIsr(1, 3, (1, 2), 1)})
        cache = from_zookeeper(zk, ["t", "missing"])
        assert cache.controller_id == 1
        assert [b.id for b in cache.live_brokers] == [1, 2]
        assert cache.topics() == ["t"]
        parts = cache.partitions("t")
        assert parts is not None
        assert (parts[0].leader, parts[0].leader_epoch, parts[0].isr, parts[0].replicas) == (1, 3, (1, 2), (1, 2))
        assert (parts[1].leader, parts[1].replicas) == (-1, (2, 1))  # no state yet: no leader
        assert from_zookeeper(zk, None).topics() == ["other", "t"]
    finally:
        zk.close()
