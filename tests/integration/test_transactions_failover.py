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
from test_transactions import read_all

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
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


def test_a_commit_prepared_by_a_coordinator_killed_before_its_markers_is_finished_by_the_next(
        cluster_factory: object) -> None:
    c: LocalCluster = cluster_factory(replica_lag_time_max_ms=2000,  # type: ignore[operator]
                                      zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
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
    wait_until(lambda: read_all(bootstrap, "txn-data", 1, "read_committed", timeout_s=3) == [b"v%d" % i for i in range(20)], 90,
               "the next coordinator to write the commit's marker")
    c.start_broker(coordinator)


@pytest.mark.slow  # 12 s: make test-long (make test keeps both clients' commits and aborts, test_transactions.py)
def test_kafka_python_and_aiokafka_transactions_carry_on_through_a_leader_kill(cluster_factory: object) -> None:
    """kafka-python's and aiokafka's transactional producers commit transactions one after the
    other while the leader of their partitions is killed with kill -9 and restarted: each
    error is handled as the client documents it (an abortable one: abort and go on), no
    producer is made again, and read_committed holds every record of every transaction the
    client was told committed, once, and none of the others."""
    import asyncio
    import threading

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError

    c: LocalCluster = cluster_factory()  # type: ignore[operator]
    bootstrap = c.bootstrap_servers
    create_topic(bootstrap, "txn-py-kill", 2, 3)
    stop = threading.Event()
    committed: dict[str, list[bytes]] = {"kp": [], "aio": []}
    attempted: dict[str, list[bytes]] = {"kp": [], "aio": []}

    def kafka_python() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-py-kill-kp")
        producer.init_transactions()
        n = 0
        while not stop.is_set():
            values = [b"kp-%d-%d" % (n, i) for i in range(5)]
            n += 1
            attempted["kp"] += values
            producer.begin_transaction()
            try:
                for i, value in enumerate(values):
                    producer.send("txn-py-kill", value, partition=i % 2)
                producer.commit_transaction()
                committed["kp"] += values
            except PyKafkaError:
                producer.abort_transaction()
            time.sleep(0.05)
        producer.close()

    async def aiokafka() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-py-kill-aio")
        await producer.start()
        n = 0
        try:
            while not stop.is_set():
                values = [b"aio-%d-%d" % (n, i) for i in range(5)]
                n += 1
                attempted["aio"] += values
                async with producer.transaction():
                    for i, value in enumerate(values):
                        await producer.send("txn-py-kill", value, partition=i % 2)
                committed["aio"] += values
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()

    errors: list[BaseException] = []

    def run(target: object) -> threading.Thread:
        def body() -> None:
            try:
                target()  # type: ignore[operator]
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)
        thread = threading.Thread(target=body)
        thread.start()
        return thread

    threads = [run(kafka_python), run(lambda: asyncio.run(aiokafka()))]
    try:
        wait_until(lambda: len(committed["kp"]) >= 20 and len(committed["aio"]) >= 20, 60, "transactions before")
        leader = metadata(bootstrap, "txn-py-kill")[0][0]
        c.kill_broker(leader)
        time.sleep(3)
        c.start_broker(leader)
        done = {k: len(v) for k, v in committed.items()}
        try:
            wait_until(lambda: all(len(committed[k]) >= done[k] + 50 for k in done), 90,
                       "transactions after the restart")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: records committed before the restart {done}, since "
                                 f"{ {k: len(v) - done[k] for k, v in committed.items()} }") from None
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    assert not errors, errors
    expected = committed["kp"] + committed["aio"]
    values = read_all(bootstrap, "txn-py-kill", 2, "read_committed", expected=len(expected), timeout_s=60)
    assert sorted(values) == sorted(expected)   # each once, and none of a transaction not committed
    assert len(attempted["kp"]) + len(attempted["aio"]) >= len(expected)


COPIER = """
import sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, slow = sys.argv[1], sys.argv[2] == "slow"
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-kill-copier", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                     "session.timeout.ms": 6000})  # the killed instance's member leaves the group soon
consumer.subscribe(["eos-kill-in"])
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-kill-copier"})
producer.init_transactions(60)
idle_since = time.monotonic()
while time.monotonic() - idle_since < 15:  # the rebalance after a kill included
    batch = [m for m in consumer.consume(20, 0.5) if m.error() is None]
    if not batch:
        continue
    idle_since = time.monotonic()
    producer.begin_transaction()
    for m in batch:
        producer.produce("eos-kill-out", m.value().upper(), partition=m.partition())
    if slow:
        time.sleep(0.2)  # a transaction open for a while: the kill lands inside one
    producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    print("committed", len(batch), flush=True)
consumer.close()
"""


@pytest.mark.slow
def test_a_copier_killed_mid_transaction_and_restarted_copies_every_record_exactly_once(cluster: LocalCluster) -> None:
    """The consume-transform-produce copier killed with kill -9 inside a transaction, then
    started again under the same transactional.id and group: the new instance fences the old
    one (its open transaction is aborted), resumes at the committed offsets, and the output is
    the input exactly once, in order per partition."""
    import subprocess
    import sys

    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "eos-kill-in", 2, 3)
    create_topic(bootstrap, "eos-kill-out", 2, 3)
    source = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(1000):
        source.produce("eos-kill-in", b"r-%04d" % i, partition=i % 2)
    assert source.flush(30) == 0
    first = subprocess.Popen([sys.executable, "-c", COPIER, bootstrap, "slow"], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        for _ in range(10):  # ten transactions committed, the eleventh open
            assert first.stdout.readline().startswith("committed")
        first.kill()
    finally:
        first.kill()
        first.wait()
    second = subprocess.run([sys.executable, "-c", COPIER, bootstrap, "fast"], capture_output=True, text=True,
                            timeout=180)
    assert second.returncode == 0, second.stderr[-2000:]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition("eos-kill-out", p, 0) for p in range(2)])
    got: dict[int, list[bytes]] = {0: [], 1: []}
    deadline = time.monotonic() + 30
    while sum(map(len, got.values())) < 1000 and time.monotonic() < deadline:
        for m in consumer.consume(200, 0.5):
            if m.error() is None:
                got[m.partition()].append(m.value())
    consumer.close()
    for p in (0, 1):  # exactly once and in order, per partition
        assert got[p] == [b"R-%04d" % i for i in range(p, 1000, 2)], (p, len(got[p]))
