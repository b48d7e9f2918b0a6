"""A broker never takes another broker's data (Kafka's log-dir `.lock` and meta.properties).

The operator's mistake this guards against, with real processes: a second broker started on a
running broker's data dir (`odradek broker --id 9 ... --data-dir <broker 1's>`) would take every
log there as a stray one (not assigned to broker 9) and delete it, losing acknowledged records.
"""
from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from cli_helpers import ODRADEK, assert_one_line_error, run
from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.admin.admin_client import create_topic
from odradek.common.netutil import free_port

RECORDS = 100


def _rogue(broker_id: int, zookeeper: str, data_dir: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`odradek broker` started by mistake on ``data_dir``; it must refuse, so it exits by itself."""
    return subprocess.run([ODRADEK, "broker", "--id", str(broker_id), "--listen", f"127.0.0.1:{free_port()}",
                           "--zookeeper", zookeeper, "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=timeout)


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    acked = []
    for i in range(RECORDS):
        producer.produce(topic, f"r{i}".encode(), on_delivery=lambda err, msg: acked.append(err))
    producer.flush(30)
    assert acked == [None] * RECORDS


def _high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def _data(cluster, broker_id: int) -> Path:
    return cluster.broker_dir(broker_id) / "data"


def test_a_broker_started_on_a_running_brokers_data_dir_is_refused_and_deletes_nothing(cluster_factory) -> None:
    cluster = cluster_factory(brokers=1)
    topic = "kept-while-running"
    create_topic(cluster.bootstrap_servers, topic, 1, 1)
    _produce(cluster.bootstrap_servers, topic)
    before = sorted(p.name for p in _data(cluster, 1).iterdir())

    proc = _rogue(9, cluster.zookeeper_connect, _data(cluster, 1))

    assert_one_line_error(proc, 1, "broker 9", f"in use by process {cluster.broker_pid(1)}")
    assert sorted(p.name for p in _data(cluster, 1).iterdir()) == before
    assert _high_watermark(cluster.bootstrap_servers, topic) == RECORDS
    assert "FileNotFoundError" not in (cluster.broker_dir(1) / "broker.log").read_text()


def test_a_stopped_brokers_data_dir_refuses_another_broker_id_and_another_cluster(cluster_factory, zookeeper) -> None:
    cluster = cluster_factory(brokers=1, zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    topic = "kept-while-stopped"
    create_topic(cluster.bootstrap_servers, topic, 1, 1)
    _produce(cluster.bootstrap_servers, topic)
    meta = (_data(cluster, 1) / "meta.properties").read_text()
    assert "version=0" in meta.splitlines() and "broker.id=1" in meta.splitlines()
    assert any(line.startswith("cluster.id=") for line in meta.splitlines())
    cluster.kill_broker(1)
    # a deletion a crash interrupted: garbage of this broker's, left alone by a broker refused
    (_data(cluster, 1) / f"{topic}-9.0123abcd-delete").mkdir()
    before = sorted(p.name for p in _data(cluster, 1).iterdir())

    other_id = _rogue(9, cluster.zookeeper_connect, _data(cluster, 1))
    assert_one_line_error(other_id, 1, "broker.id 9", "broker.id 1", "meta.properties")
    other_cluster = _rogue(1, f"{zookeeper.connect_string}/odradek-other-{uuid.uuid4().hex[:8]}", _data(cluster, 1))
    assert other_cluster.returncode == 1, other_cluster.stderr
    last = other_cluster.stderr.splitlines()[-1]
    assert last.startswith("odradek: error: broker 1: the cluster's id") and "meta.properties" in last, last
    assert "Traceback" not in other_cluster.stderr
    assert sorted(p.name for p in _data(cluster, 1).iterdir()) == before
    assert (_data(cluster, 1) / "meta.properties").read_text() == meta

    cluster.start_broker(1)
    cluster.wait_ready([1], timeout=60)
    assert _high_watermark(cluster.bootstrap_servers, topic) == RECORDS


def test_a_broker_id_in_use_is_an_operators_mistake_not_an_internal_error(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(brokers=1)
    proc = _rogue(1, cluster.zookeeper_connect, tmp_path / "fresh")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("odradek: error: broker 1: ") and "another live broker" in last, last
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    # the live broker is untouched
    assert run("topics", "list", "--bootstrap-server", cluster.bootstrap_servers).returncode == 0
