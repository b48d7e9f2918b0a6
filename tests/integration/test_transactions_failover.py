"""Transactions through the death of their coordinator: a commit whose PrepareCommit is in
`__transaction_state` but whose markers have not all been written when its coordinator is
killed with kill -9 is finished by the next coordinator (it reads the PrepareCommit back and
sends the markers itself), so read_committed consumers get the records; nothing the client
was told committed is lost or left hanging."""
from __future__ import annotations

import os
import signal
import time

import pytest
from clients import create_topic
from cluster_state import metadata
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from polling import wait_until

from odradek.admin.admin_client import send_request
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

FIND_COORDINATOR = 10


def coordinator_of(c: LocalCluster, transactional_id: str) -> int:
    """The broker id of the transactional id's coordinator (FindCoordinator key type 1)."""
    def found() -> int | None:
        try:
            answer = send_request(c.bootstrap_servers.split(",")[0], FIND_COORDINATOR, 3,
                                  {"key": transactional_id, "key_type": 1}, 10)
        except Exception:  # noqa: BLE001 - a broker between lives: ask again
            return None
        return answer.node_id if answer.error_code == 0 else None
    wait_until(lambda: found() is not None, 30, "a transaction coordinator")
    node = found()
    assert node is not None
    return node


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    try:
        for _ in range(6):
            values.extend(m.value() for m in consumer.consume(100, 0.5) if m.error() is None)
    finally:
        consumer.close()
    return values


def test_a_commit_prepared_by_a_coordinator_killed_before_its_markers_is_finished_by_the_next(
        cluster_factory: object) -> None:
    c: LocalCluster = cluster_factory(replica_lag_time_max_ms=2000)  # type: ignore[operator]
    bootstrap = c.bootstrap_servers
    create_topic(bootstrap, "warm-up", 1, 3)
    transactional_id = "txn-failover"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 120000})
    producer.init_transactions(60)
    coordinator = coordinator_of(c, transactional_id)
    data_leader = next(b for b in c.broker_ids if b != coordinator)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("txn-data", num_partitions=1,
                                                replica_assignment=[[data_leader]])]).values():
        future.result(30)
    wait_until(lambda: metadata(bootstrap, "txn-data")[0][0] == data_leader, 30, "the data partition's leader")
    producer.begin_transaction()
    for i in range(20):
        producer.produce("txn-data", b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    pid = c.broker_pid(data_leader)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # its marker cannot be written: the commit stays half done
    try:
        producer.commit_transaction(60)  # answered once PrepareCommit is in the log
        c.kill_broker(coordinator)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: committed_values(bootstrap, "txn-data") == [b"v%d" % i for i in range(20)], 90,
               "the next coordinator to write the commit's marker")
    c.start_broker(coordinator)
