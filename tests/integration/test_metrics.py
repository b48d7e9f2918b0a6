"""Prometheus metrics scraped from a live cluster, under the names Prometheus' JMX exporter
gives Kafka's MBeans: partition and leader counts add up across brokers, exactly one broker is
the active controller, produce and fetch traffic shows per topic and per API, a consumer group's
lag is the coordinator's high watermark minus its commit, a frozen follower shows as ISR
shrinks and under-replicated partitions on the leaders and, woken, as ISR expansions."""
from __future__ import annotations

import os
import re
import signal
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import create_topic, produce_acks_all
from cluster_state import leaders
from confluent_kafka import Consumer, Producer, TopicPartition
from polling import wait_until

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port_block
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape(url: str) -> dict[str, float]:
    """'name{labels}' -> value, for every sample of one broker's /metrics."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples


def total(c: LocalCluster, name: str) -> float:
    return sum(scrape(c.metrics_url(b)).get(name, 0.0) for b in c.broker_ids)  # type: ignore[arg-type]


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path / "cluster", 3, base_port=free_port_block(3),
                     zookeeper=f"{zookeeper.connect_string}/odradek-metrics-{uuid.uuid4().hex[:8]}",
                     broker_args={"zookeeper_session_timeout_ms": 12000, "replica_lag_time_max_ms": 1000,
                                  "group_initial_rebalance_delay_ms": 0},
                     metrics_base_port=free_port_block(3))
    try:
        c.up(timeout=60)
        yield c
    finally:
        c.down()


def test_metrics_follow_the_cluster(cluster: LocalCluster) -> None:
    c, topic = cluster, "measured"
    create_topic(c.bootstrap_servers, topic, 6, 3)
    produced = produce_acks_all(c.bootstrap_servers, topic, 200)
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "lagging",
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    end_of_0 = 1 + max(o for p, o, _, _ in produced if p == 0)

    def settled() -> bool:
        return (total(c, "kafka_server_replicamanager_leadercount") >= 6 + 50
                and total(c, 'kafka_consumergroup_lag{consumergroup="lagging",partition="0",topic="measured"}') > 0)
    wait_until(settled, 30, "leaders of every partition and the group's lag")
    assert total(c, "kafka_server_replicamanager_partitioncount") == (6 + 50) * 3  # with __consumer_offsets
    assert total(c, "kafka_server_replicamanager_leadercount") == 6 + 50
    assert total(c, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert total(c, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    bytes_in = total(c, f'kafka_server_brokertopicmetrics_bytesin_total{{topic="{topic}"}}')
    assert bytes_in >= sum(len(v) for _, _, _, v in produced)
    assert total(c, f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{topic}"}}') == 200
    assert total(c, f'kafka_server_brokertopicmetrics_bytesout_total{{topic="{topic}"}}') > 0  # followers fetch
    assert total(c, 'kafka_network_requestmetrics_requests_total{request="Produce",version="9"}') > 0
    assert total(c, 'kafka_network_requestmetrics_totaltimems_count{request="Produce"}') > 0
    assert total(c, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert total(c, "kafka_controller_kafkacontroller_globalpartitioncount") == 6 + 50
    # the controller's elections: the new topics' first leaders
    assert total(c, "kafka_controller_controllerstats_leaderelectionrateandtimems_count") > 0
    # the lag, counted once (by the coordinator) against every replica's high watermark
    assert total(c, 'kafka_consumergroup_lag{consumergroup="lagging",partition="0",topic="measured"}') == end_of_0 - 1

    victim = next(b for b in c.broker_ids if scrape(c.metrics_url(b))[  # type: ignore[arg-type]
        "kafka_controller_kafkacontroller_activecontrollercount"] == 0)
    alive = [b for b in c.broker_ids if b != victim]

    def alive_sum(name: str) -> float:
        return sum(scrape(c.metrics_url(b)).get(name, 0.0) for b in alive)  # type: ignore[arg-type]

    # a follower frozen past replica.lag.time.max.ms (but not its ZooKeeper session) falls
    # behind the partitions written meanwhile and leaves their ISRs; woken, it comes back.
    # Written: the partitions the live brokers lead (a write to one the frozen broker leads
    # would only wait, and the flush with it)
    written = sorted(p for p, (leader, _) in leaders(c, topic).items() if leader != victim)
    assert written
    os.kill(c.broker_pid(victim), signal.SIGSTOP)  # type: ignore[arg-type]
    try:
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": 1})
        for i in range(60):
            producer.produce(topic, b"while frozen", partition=written[i % len(written)])
        producer.flush(10)
        wait_until(lambda: alive_sum("kafka_server_replicamanager_isrshrinks_total") > 0
                   and alive_sum("kafka_server_replicamanager_underreplicatedpartitions") > 0, 8,
                   "ISR shrinks on the leaders")
    finally:
        os.kill(c.broker_pid(victim), signal.SIGCONT)  # type: ignore[arg-type]
    wait_until(lambda: alive_sum("kafka_server_replicamanager_isrexpands_total") > 0
               and alive_sum("kafka_server_replicamanager_underreplicatedpartitions") == 0, 30, "ISR expansions")

