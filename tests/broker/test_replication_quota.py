"""The replication throttles' parts without a cluster (broker/replication_quota.py): Kafka's
SimpleRate meter on a fake clock, which partitions a throttled-replicas value names for a
broker, the values AlterConfigs refuses, and how configs reach the two quotas."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.dynamic_broker_config import DEFAULT_ENTITY, DynamicBrokerConfig
from odradek.broker.replication_quota import (
    ALL_PARTITIONS,
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    UNLIMITED,
    ReplicationQuotaManager,
    ReplicationQuotas,
    SimpleRate,
    throttled_partitions,
)
from odradek.broker.topic_admin import TopicError, validate_configs
from odradek.broker.zk_admin_manager import APPEND, SUBTRACT, _incremental
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.zk import admin_zk_client as azk


def test_the_rate_is_the_windows_bytes_over_at_least_one_window() -> None:
    rate = SimpleRate(num_samples=3, window_s=1.0)
    assert rate.rate(100.0) == 0.0
    rate.record(500, 100.0)
    assert rate.rate(100.0) == 500.0  # over one window, not over 0 s
    rate.record(500, 100.5)  # same sample
    assert rate.rate(100.5) == 1000.0
    rate.record(1000, 101.2)  # the next sample
    assert rate.rate(102.0) == pytest.approx(2000 / 2.0)
    # a sample is forgotten num_samples windows after its last record
    assert rate.rate(103.49) == pytest.approx(2000 / 3.49)
    assert rate.rate(103.5) == pytest.approx(1000 / 2.3)  # only the sample of 101.2 is left
    assert rate.rate(104.2) == 0.0


def test_the_ring_of_samples_reuses_its_slots() -> None:
    rate = SimpleRate(num_samples=2, window_s=1.0)
    for second in range(10):
        rate.record(100, 50.0 + second)
    assert rate.rate(59.0) == pytest.approx(200 / 1.0)  # samples of 58 and 59; 57's ended 2 windows ago
    assert rate.rate(59.5) == pytest.approx(200 / 1.5)


def test_a_quota_is_exceeded_only_above_its_bound_and_never_unbounded() -> None:
    now = [10.0]
    quota = ReplicationQuotaManager("leader", 11, 1.0, clock=lambda: now[0])
    quota.record(10 * 1024 * 1024)
    assert quota.bound == UNLIMITED and not quota.is_quota_exceeded()
    quota.update_quota(1024 * 1024)
    assert quota.is_quota_exceeded()
    now[0] += 10.0  # 10 MiB over 10 s: exactly the bound, not above it
    assert not quota.is_quota_exceeded()
    quota.record(1)
    assert quota.is_quota_exceeded()


def test_throttled_replicas_name_partitions_of_this_broker() -> None:
    assert throttled_partitions(LEADER_REPLICAS, "0:1, 1:2,2:1,,", 1) == frozenset({0, 2})
    assert throttled_partitions(LEADER_REPLICAS, "0:1", 3) == frozenset()
    assert throttled_partitions(LEADER_REPLICAS, " * ", 3) is ALL_PARTITIONS
    assert throttled_partitions(LEADER_REPLICAS, "x:y", 1) == frozenset()  # written by hand: ignored
    quota = ReplicationQuotaManager("follower")
    assert not quota.active
    quota.mark_throttled("t", frozenset({0, 2}))
    quota.mark_throttled("u", ALL_PARTITIONS)
    assert quota.active
    assert [quota.is_throttled(TopicPartition(t, p)) for t, p in [("t", 0), ("t", 1), ("u", 7), ("v", 0)]] == [
        True, False, True, False]
    quota.remove_throttle("t")
    quota.mark_throttled("u", frozenset())
    assert not quota.active


@pytest.mark.parametrize("value", ["x:y", "0:1,2", "0:-1", "*,0:1", "0:1:2"])
def test_a_bad_throttled_replicas_value_is_invalid_config_naming_the_key(value: str) -> None:
    with pytest.raises(TopicError) as info:
        validate_configs({FOLLOWER_REPLICAS: value})
    assert info.value.code == ErrorCode.INVALID_CONFIG
    assert f"for configuration {FOLLOWER_REPLICAS}" in str(info.value)
    assert "[partitionId]:[brokerId]" in str(info.value)


def test_throttled_replicas_values_kafka_accepts() -> None:
    for value in ["", "*", " * ", "0:1", "0:1, 1:2", "0:1,,1:2"]:
        assert validate_configs({LEADER_REPLICAS: value}) == {LEADER_REPLICAS: value}


def test_incremental_append_and_subtract_on_a_throttled_replicas_list() -> None:
    def ops(op: int, value: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(name=LEADER_REPLICAS, config_operation=op, value=value)]

    topic = (azk.TOPICS, "t")
    assert _incremental(topic, {}, ops(APPEND, "0:1")) == {LEADER_REPLICAS: "0:1"}  # from the empty default
    assert _incremental(topic, {LEADER_REPLICAS: "0:1"}, ops(APPEND, "1:2,0:1")) == {LEADER_REPLICAS: "0:1,1:2"}
    assert _incremental(topic, {LEADER_REPLICAS: "0:1,1:2"}, ops(SUBTRACT, "0:1")) == {LEADER_REPLICAS: "1:2"}
    with pytest.raises(TopicError, match=LEADER_REPLICAS):
        _incremental(topic, {}, ops(APPEND, "x:y"))


def test_configs_reach_the_leader_and_follower_quotas() -> None:
    quotas = ReplicationQuotas(broker_id=2)
    config = DynamicBrokerConfig(BrokerConfig(2, "h", 1, "z", Path("d")))
    quotas.update_rates(config.value)
    assert (quotas.leader.bound, quotas.follower.bound) == (UNLIMITED, UNLIMITED)
    config.update(DEFAULT_ENTITY, {"leader.replication.throttled.rate": "1000",
                                   "follower.replication.throttled.rate": "3000"})
    config.update("2", {"follower.replication.throttled.rate": "2000"})  # this broker's own wins
    quotas.update_rates(config.value)
    assert (quotas.leader.bound, quotas.follower.bound) == (1000, 2000)

    quotas.update_topic("t", {LEADER_REPLICAS: "0:2,1:3", FOLLOWER_REPLICAS: "1:2", "retention.ms": "5"})
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert (quotas.leader.is_throttled(tp0), quotas.leader.is_throttled(tp1)) == (True, False)
    assert (quotas.follower.is_throttled(tp0), quotas.follower.is_throttled(tp1)) == (False, True)
    quotas.update_topic("t", {FOLLOWER_REPLICAS: "*"})  # the whole config: the leader list is gone
    assert not quotas.leader.active and quotas.follower.is_throttled(tp0)
    quotas.update_topic("t", {})
    assert not quotas.follower.active
