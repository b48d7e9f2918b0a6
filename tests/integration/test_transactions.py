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
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


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


def test_pipelined_first_batches_of_transactions_are_appended_in_order(cluster: LocalCluster) -> None:
    """Without linger, records produced a millisecond apart are requests of their own, several
    in flight to a partition; the first ones of each transaction wait on KIP-890's check with
    the coordinator, and none may overtake another (one that did killed the producer with
    OUT_OF_ORDER_SEQUENCE_NUMBER, a fatal error)."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-pipelined", 6, 3)
    producer = transactional(bootstrap, "txn-pipelined-producer", **{"linger.ms": 0, "acks": "all"})
    for txn in range(40):
        producer.begin_transaction()
        for i in range(60):
            producer.produce("txn-pipelined", b"%d-%d" % (txn, i), partition=i % 6)
            producer.poll(0)
            time.sleep(0.001)
        producer.commit_transaction(30)
    values = read_all(bootstrap, "txn-pipelined", 6, "read_committed", expected=2400, timeout_s=60)
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for value in values:
        txn, i = map(int, value.split(b"-"))
        by_partition.setdefault(i % 6, []).append((txn, i))
    assert len(values) == 2400
    assert all(entries == sorted(entries) for entries in by_partition.values())


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
        cluster: LocalCluster) -> None:
    """A producer killed mid-transaction leaves it open: read_committed consumers stop at its
    first record until the coordinator aborts it, transaction.timeout.ms plus at most one
    abort check later."""
    bootstrap = cluster.bootstrap_servers
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
    # 3 s of timeout and a check every 500 ms (conftest.py): far less than the 30 s allowed here
    wait_until(lambda: read_all(bootstrap, "txn-hanging", 1, "read_committed", timeout_s=2) == [b"after"],
               30, "the abandoned transaction to be aborted")


def test_consume_transform_produce_copies_every_record_exactly_once_through_an_abort(cluster: LocalCluster) -> None:
    """The exactly-once pattern (KIP-98, KIP-447): each batch read is written and its offsets
    committed in one transaction; a transaction aborted midway leaves neither its output nor its
    offsets, and the copier, rewound to the committed offsets, copies those records again."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "eos-in", 2, 3)
    create_topic(bootstrap, "eos-out", 2, 3)
    source = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(200):
        source.produce("eos-in", b"record-%03d" % i, partition=i % 2)
    assert source.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-copier", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe(["eos-in"])
    producer = transactional(bootstrap, "eos-copier-producer")
    copied = rounds = 0
    aborted_once = False
    deadline = time.monotonic() + 60
    while copied < 200 and time.monotonic() < deadline:
        batch = [m for m in consumer.consume(50, 1.0) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        for m in batch:
            producer.produce("eos-out", m.value().upper(), partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        rounds += 1
        if rounds == 2 and not aborted_once:
            aborted_once = True
            producer.abort_transaction(30)
            # the consumer's position is not the committed offset after an abort (KAFKA-17582):
            # the application rewinds it
            committed = consumer.committed(consumer.assignment(), 30)
            for tp in committed:
                consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
            continue
        producer.commit_transaction(30)
        copied += len(batch)
    assert aborted_once and copied == 200
    out = read_all(bootstrap, "eos-out", 2, "read_committed", expected=200)
    assert sorted(out) == sorted(b"RECORD-%03d" % i for i in range(200))  # each once, none of the aborted round twice
    committed = consumer.committed([TopicPartition("eos-in", p) for p in range(2)], 30)
    assert sorted(tp.offset for tp in committed) == [100, 100]
    consumer.close()


def test_kafka_python_and_aiokafka_transactional_producers_commit_and_abort(cluster: LocalCluster) -> None:
    """The pure-Python clients' transactions against the same coordinator: kafka-python's
    KafkaProducer and aiokafka's AIOKafkaProducer each commit one transaction and abort one;
    a read_committed consumer sees exactly the committed records."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "txn-python", 2, 3)
    kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-kafka-python")
    kp.init_transactions()
    kp.begin_transaction()
    for i in range(10):
        kp.send("txn-python", b"kp-committed-%d" % i, partition=i % 2)
    kp.commit_transaction()
    kp.begin_transaction()
    for i in range(5):
        kp.send("txn-python", b"kp-aborted-%d" % i, partition=i % 2)
    kp.flush()
    kp.abort_transaction()
    kp.close()

    async def aiokafka_rounds() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="txn-aiokafka")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send("txn-python", b"aio-committed-%d" % i, partition=i % 2)
            await producer.begin_transaction()
            for i in range(5):
                await producer.send_and_wait("txn-python", b"aio-aborted-%d" % i, partition=i % 2)
            await producer.abort_transaction()
        finally:
            await producer.stop()
    asyncio.run(aiokafka_rounds())

    committed = read_all(bootstrap, "txn-python", 2, "read_committed", expected=20)
    assert sorted(committed) == sorted([b"kp-committed-%d" % i for i in range(10)]
                                       + [b"aio-committed-%d" % i for i in range(10)])
    everything = read_all(bootstrap, "txn-python", 2, "read_uncommitted", expected=30)
    assert sum(b"aborted" in v for v in everything) == 10
