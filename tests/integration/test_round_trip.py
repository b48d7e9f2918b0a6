"""Unmodified Kafka clients against a real 3-broker cluster: confluent-kafka, kafka-python, kcat."""
from __future__ import annotations

import shutil
import subprocess
from typing import Callable

import pytest
from clients import consume_all, create_topic, produce_acks_all, segment_bytes, wait_identical_replicas

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def test_acks_all_round_trip_10000_messages_rf3_replicas_byte_identical(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "rt-all", 6, 3)
    acked = produce_acks_all(bootstrap, "rt-all", 10_000)
    assert len(acked) == 10_000
    got = consume_all(bootstrap, "rt-all", 6, 10_000)
    assert sorted(got) == sorted(acked)
    # per-partition offsets are dense from 0: nothing lost, nothing doubled
    for p in range(6):
        offsets = sorted(o for part, o, _, _ in got if part == p)
        assert offsets == list(range(len(offsets)))
    wait_identical_replicas(cluster, "rt-all", 6)
    assert segment_bytes(cluster, 1, "rt-all", 0)  # the replicas are not identical by being empty


def test_kafka_python_idempotent_producer_and_consumer(cluster: LocalCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "rt-kp", 3, 3)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")  # idempotent by default
    futures = [producer.send("rt-kp", key=b"k%d" % i, value=b"v%d" % i) for i in range(2000)]
    producer.flush(60)
    metas = [f.get(timeout=10) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in metas}) == 2000
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    consumer.assign([KTP("rt-kp", p) for p in range(3)])
    consumer.seek_to_beginning()
    values = sorted(m.value for m in consumer)
    consumer.close()
    assert values == sorted(b"v%d" % i for i in range(2000))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by `make test`")
def test_kcat_produce_consume_and_metadata(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "rt-kcat", 2, 3)
    lines = "".join(f"line {i}\n" for i in range(100))
    subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", "rt-kcat", "-p", "1", "-X", "acks=all"],
                   input=lines.encode(), check=True, timeout=30)
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", "rt-kcat", "-p", "1", "-o", "beginning", "-e"],
                         capture_output=True, check=True, timeout=30).stdout.decode()
    assert out == lines
    meta = subprocess.run(["kcat", "-L", "-b", bootstrap, "-t", "rt-kcat"], capture_output=True, check=True,
                          timeout=30).stdout.decode()
    assert "3 brokers" in meta and "topic \"rt-kcat\" with 2 partitions" in meta
    assert "(controller)" in meta


def test_whole_cluster_kill_and_restart_keeps_every_acknowledged_message(cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(c.bootstrap_servers, "restart", 4, 3)
    acked = produce_acks_all(c.bootstrap_servers, "restart", 5000, prefix="before")
    for broker_id in c.broker_ids:
        c.kill_broker(broker_id)  # SIGKILL: no clean shutdown, no final flush or checkpoint
    c.up(timeout=60)
    got = consume_all(c.bootstrap_servers, "restart", 4, len(acked), timeout_s=90)
    assert sorted(got) == sorted(acked)
    more = produce_acks_all(c.bootstrap_servers, "restart", 500, prefix="after")
    assert len(more) == 500
    wait_identical_replicas(c, "restart", 4)
