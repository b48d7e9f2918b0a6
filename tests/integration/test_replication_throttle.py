"""Replication throttles (KIP-73, broker/replication_quota.py) on real brokers: a follower that
was stopped while 12 MiB were written catches up at the throttled rate, first held by its
leader, then by itself, and at full speed once the throttle is gone, each change made while
the brokers run. Progress is the follower's log size on disk; the end, the leader's ISR."""
from __future__ import annotations

import os
import signal
import time

import pytest
from clients import create_topic
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from client_helpers import produce
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
TOPIC = "throttled"
INVALID_CONFIG = 40


def log_size(cluster: LocalCluster, broker_id: int) -> int:
    pdir = cluster.broker_dir(broker_id) / "data" / f"{TOPIC}-0"
    return sum(p.stat().st_size for p in pdir.glob("*.log"))


def alter(cluster: LocalCluster, kind: ConfigResource.Type, name: str, **configs: str | None) -> None:
    """IncrementalAlterConfigs: SET each key given a value, DELETE each given None. A new client
    each time: librdkafka's admin client waits on a stopped or restarted broker it knew (the
    controller it sends topic configs to, the broker of a broker config) for over 30 s."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.DELETE if v is None
                           else AlterConfigOpType.SET) for k, v in configs.items()]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def isr(admin: AdminClient) -> list[int]:
    partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    return sorted(partitions[0].isrs) if 0 in partitions else []


@pytest.mark.slow  # 15 s: make test-long (make test keeps the quota's own tests, tests/broker/test_replication_quota.py)
def test_a_lagging_follower_is_throttled_by_its_leader_then_by_itself_then_not(cluster_factory) -> None:
    c = cluster_factory(2)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    create_topic(c.bootstrap_servers, TOPIC, 1, 2)
    deadline = time.monotonic() + 30
    while len(isr(admin)) < 2:  # the metadata of a new topic reaches the brokers a moment later
        assert time.monotonic() < deadline, "the new topic has no ISR of two"
        time.sleep(0.1)
    leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
    follower = 3 - leader
    TOPIC_, BROKER = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER

    with pytest.raises(KafkaException) as info:  # refused, naming the key, and nothing stored
        alter(c, TOPIC_, TOPIC, leader_replication_throttled_replicas="x:y")
    assert info.value.args[0].code() == INVALID_CONFIG
    assert "leader.replication.throttled.replicas must be the literal '*'" in info.value.args[0].str()

    c.kill_broker(follower, signal.SIGTERM)
    produce(c.bootstrap_servers, TOPIC, [(None, os.urandom(10 * 1024), None) for _ in range(1200)])
    before = log_size(c, follower)
    assert log_size(c, leader) - before > 11 * MiB

    # 1. the leader holds back what it sends: 1 MiB/s
    rate = MiB
    alter(c, BROKER, str(leader), leader_replication_throttled_rate=str(rate))
    alter(c, TOPIC_, TOPIC, leader_replication_throttled_replicas=f"0:{leader}")
    c.start_broker(follower)
    deadline = time.monotonic() + 60
    while (first := log_size(c, follower)) <= before:
        assert time.monotonic() < deadline, "the restarted follower fetched nothing"
        time.sleep(0.05)
    started = time.monotonic()
    while (size := log_size(c, follower)) < first + 4 * MiB:
        assert time.monotonic() < deadline, f"the follower got {size - first} bytes in 60 s"
        time.sleep(0.05)
    took = time.monotonic() - started
    assert took >= 0.5 * (size - first) / rate, f"{size - first} bytes in {took:.1f} s at a throttle of {rate}/s"

    # 2. the follower holds back what it asks for: 10 kB/s, one fetch (1 MiB) and then nothing
    alter(c, BROKER, str(follower), follower_replication_throttled_rate="10000")
    alter(c, TOPIC_, TOPIC, leader_replication_throttled_replicas=None,
          follower_replication_throttled_replicas=f"0:{follower}")
    time.sleep(1.0)
    held_from = log_size(c, follower)
    time.sleep(3.0)
    gained = log_size(c, follower) - held_from
    assert gained <= 2 * MiB, f"the follower fetched {gained} bytes in 3 s at a throttle of 10 kB/s"
    assert isr(admin) == [leader]

    # 3. no throttle: caught up long before 1 MiB every 11 s could bring the rest
    alter(c, BROKER, str(follower), follower_replication_throttled_rate=None)
    deadline = time.monotonic() + 30
    while isr(admin) != [1, 2]:
        assert time.monotonic() < deadline, f"the follower has {log_size(c, follower)} of {log_size(c, leader)} bytes"
        time.sleep(0.2)
    assert log_size(c, follower) == log_size(c, leader)
