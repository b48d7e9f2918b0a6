"""KIP-253's produce side on a real cluster: the leaders' fence (a record is never appended to a
partition its key does not belong to under the topic's current count) and the OrderedProducer,
which keeps every key's records in order while the topic grows."""
from __future__ import annotations

import threading
from typing import Any

import pytest
from clients import create_topic, ordered_counts
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.client.ordered_producer import OrderedProducer
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.linear_hashing import partition_for_key
from odradek.protocol.declared_partition_counts import with_declared_counts

pytestmark = pytest.mark.integration

ORDERED = {"enable.ordered.delivery": "true"}


def _read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[bytes, bytes]]]:
    """Every record of every partition, (key, value) in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        while len(at_end) < partitions:
            msg = consumer.poll(10)
            assert msg is not None, f"no record nor end of partition within 10 s (ends seen: {at_end})"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            out[msg.partition()].append((msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def _counts(bootstrap: str, topic: str) -> tuple[int, ...]:
    """The topic's initial and undeleted count."""
    return ordered_counts(bootstrap, topic)[:2]


def _expand(bootstrap: str, topic: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_partitions([NewPartitions(topic, total)], operation_timeout=10)[topic].result(30)


def test_plain_clients_are_fenced_by_key_and_a_stale_declared_count_appends_nothing(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "fence", 4, 2, ORDERED)
    wait_until(lambda: _counts(bootstrap, "fence") == (4, 4), 30, "the counts of fence")
    keys = [f"k{i}".encode() for i in range(40)]

    # librdkafka's default partitioner (CRC32) routes some keys elsewhere: each such record is
    # refused with INVALID_RECORD (its ErrorMessage names the key's partition; confluent-kafka
    # shows only the code's text); the others are written
    reports: list[tuple[bytes, int, Any]] = []
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key in keys:
        plain.produce("fence", b"v", key=key, on_delivery=lambda e, m: reports.append((m.key(), m.partition(), e)))
        plain.flush(30)
    refused = [(k, p, e) for k, p, e in reports if e is not None]
    assert refused, "CRC32 and murmur2 agreed on all 40 keys"
    assert all(e.code() == KafkaError.INVALID_RECORD for _, _, e in refused)
    assert all(e is None for k, p, e in reports if p == partition_for_key(k, 4, 4))

    # murmur2_random agrees with linear hashing while the count is initial x 2^L: all written
    murmur = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    errors: list[Any] = []
    for key in keys:
        murmur.produce("fence", b"m", key=key, on_delivery=lambda e, m: errors.append(e) if e else None)
    murmur.flush(30)
    assert errors == []

    # a producer declaring a count the topic no longer has is refused outright
    _expand(bootstrap, "fence", 5)
    wait_until(lambda: _counts(bootstrap, "fence") == (4, 5), 30, "the count 5 on every broker")
    stale = Producer({"bootstrap.servers": bootstrap, "client.id": with_declared_counts("stale", {"fence": 4})})
    stale_reports: list[Any] = []
    for key in keys:
        stale.produce("fence", b"s", key=key, partition=partition_for_key(key, 4, 4),
                      on_delivery=lambda e, m: stale_reports.append(e))
    stale.flush(30)
    assert len(stale_reports) == len(keys)
    assert all(e is not None and e.code() == KafkaError.FENCED_LEADER_EPOCH for e in stale_reports)

    # nothing anywhere is in a partition its key does not belong to, and no stale record was written
    written = _read_all(bootstrap, "fence", 5)
    for partition, records in written.items():
        for key, value in records:
            assert value != b"s"
            assert partition_for_key(key, 4, 4) == partition, (key, partition)


def test_ordered_producer_keeps_each_key_in_order_while_the_topic_grows(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "grow", 4, 2, ORDERED)
    wait_until(lambda: _counts(bootstrap, "grow") == (4, 4), 30, "the counts of grow")
    producer = OrderedProducer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    keys = [f"key-{i}".encode() for i in range(20)]
    acked: dict[bytes, list[int]] = {k: [] for k in keys}
    failures: list[Any] = []
    stop = threading.Event()
    unreported: list[int] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            acked[msg.key()].append(int(msg.value()))

    def produce() -> None:
        try:
            seq = 0
            while not stop.is_set() or seq < 2000:
                for key in keys:
                    producer.produce("grow", str(seq).encode(), key=key, on_delivery=report)
                seq += 1
                producer.poll(0)
            unreported.append(producer.flush(60))
        except BaseException as exc:  # the test fails on it below
            failures.append(exc)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        for total in (5, 8):
            wait_until(lambda: sum(map(len, acked.values())) > 2000 * total, 60, "records acknowledged")
            _expand(bootstrap, "grow", total)
            wait_until(lambda t=total: _counts(bootstrap, "grow") == (4, t), 30, f"count {total}")
    finally:
        stop.set()
        writer.join(120)
    assert not writer.is_alive()
    assert unreported == [0]
    assert failures == []
    assert producer._topics["grow"].undeleted == 8  # type: ignore[union-attr]
    assert len(producer) == 0
    producer.close()

    # read back: every key's records in the order of its partitions' history (KIP-253's order
    # for consumers: a partition's records before those of the partition that took the key from
    # it), which must be its produce order with nothing missing or doubled
    written = _read_all(bootstrap, "grow", 8)
    for key in keys:
        history = list(dict.fromkeys(partition_for_key(key, 4, n) for n in (4, 5, 8)))
        in_order = [int(v) for p in history for k, v in written[p] if k == key]
        assert in_order == acked[key] == list(range(len(in_order))), key
        elsewhere = [p for p, records in written.items() if p not in history and any(k == key for k, _ in records)]
        assert elsewhere == [], (key, elsewhere)
