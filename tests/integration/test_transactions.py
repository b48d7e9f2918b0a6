"""Transactions with real clients on a real cluster (KIP-98): confluent-kafka's transactional
producer commits and aborts across partitions, a read_committed consumer sees exactly the
committed records (a read_uncommitted one, the control, sees the aborted ones too), a second
instance of a transactional.id fences the first, and a transaction its producer abandoned is
aborted after its timeout so the consumers' last stable offset moves on."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from clients import create_topic
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from polling import wait_until

from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration


def transactional(bootstrap: str, transactional_id: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **config})
    producer.init_transactions(60)
    return producer


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int | None = None,
             timeout_s: float = 20.0) -> list[bytes]:
    """Every value in the partitions from offset 0, at ``isolation``; until ``expected`` values
    came, or (None) until a second passes with nothing new."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if expected is None and time.monotonic() - quiet_since > 1.0:
                    break
                if expected is not None and len(values) >= expected:
                    break
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
            quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values


def test_read_committed_sees_committed_transactions_and_never_aborted_ones(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-basic", 3, 3)
    producer = transactional(bootstrap, "txn-basic-producer")
    producer.begin_transaction()
    for i in range(30):
        producer.produce("txn-basic", b"committed-%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(12):
        producer.produce("txn-basic", b"aborted-%d" % i, partition=i % 3)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("txn-basic", b"last", partition=1)
    producer.commit_transaction(30)

    committed = read_all(bootstrap, "txn-basic", 3, "read_committed", expected=31)
    assert sorted(committed) == sorted([b"committed-%d" % i for i in range(30)] + [b"last"])
    everything = read_all(bootstrap, "txn-basic", 3, "read_uncommitted", expected=43)
    assert len(everything) == 43 and sum(v.startswith(b"aborted-") for v in everything) == 12


def test_a_second_instance_of_a_transactional_id_fences_the_first(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-zombie", 1, 3)
    zombie = transactional(bootstrap, "txn-zombie-producer")
    zombie.begin_transaction()
    zombie.produce("txn-zombie", b"zombie")
    zombie.flush(30)
    successor = transactional(bootstrap, "txn-zombie-producer")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("txn-zombie", b"successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    assert read_all(bootstrap, "txn-zombie", 1, "read_committed") == [b"successor"]


def test_an_abandoned_transaction_is_aborted_after_its_timeout_and_consumers_move_on(
        cluster_factory: object) -> None:
    """A producer killed mid-transaction leaves it open: read_committed consumers stop at its
    first record until the coordinator aborts it, transaction.timeout.ms plus at most one
    abort check later."""
    c = cluster_factory(transaction_abort_timed_out_transaction_cleanup_interval_ms=1000)  # type: ignore[operator]
    bootstrap = c.bootstrap_servers
    create_topic(bootstrap, "txn-hanging", 1, 3)
    script = textwrap.dedent(f"""
        import os, signal
        from confluent_kafka import Producer
        p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "txn-hanging-producer",
                      "transaction.timeout.ms": 3000}})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce("txn-hanging", b"abandoned")
        p.flush(30)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert run.returncode == -9, run.stderr.decode()[-2000:]
    after = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    after.produce("txn-hanging", b"after")
    assert after.flush(30) == 0
    # 3 s of timeout and a check each second: far less than the 30 s allowed here
    wait_until(lambda: read_all(bootstrap, "txn-hanging", 1, "read_committed", timeout_s=2) == [b"after"],
               30, "the abandoned transaction to be aborted")
