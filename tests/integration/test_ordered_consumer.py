"""KIP-253 end to end on a real cluster: a producer writes keys with per-key sequence numbers while
the topic grows, a group of three consumers reads it, slow on the partitions that existed first
(so the members reading the new partitions would run ahead), and the group's delivery order,
every member's deliveries merged in the order they happened, is judged per key.

With OrderedProducer and OrderedConsumer on an ordered topic each key's records arrive in
sequence with nothing missing; with stock confluent-kafka clients on a plain topic the same run
delivers keys out of order (docs/architecture.md keeps the comparison)."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from clients import create_topic, ordered_counts
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.client.ordered_consumer import OrderedConsumer
from odradek.client.ordered_metadata import OrderedMetadataClient, parse_bootstrap
from odradek.client.ordered_producer import OrderedProducer
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}".encode() for i in range(20)]


class GroupDeliveries:
    """Every member's deliveries in one list, in the order poll() returned them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bytes, int, int]] = []   # (member, key, seq, partition)

    def record(self, member: str, msg: Any) -> None:
        with self.lock:
            self.seen.append((member, msg.key(), int(msg.value()), msg.partition()))

    def first_deliveries(self, key: bytes) -> list[int]:
        """The key's sequence numbers in the order of their first delivery to the group."""
        with self.lock:
            seqs = [s for _, k, s, _ in self.seen if k == key]
        return list(dict.fromkeys(seqs))

    def count(self) -> int:
        with self.lock:
            return len({(k, s) for _, k, s, _ in self.seen})



def _counts(bootstrap: str, topic: str) -> tuple[int, ...]:
    """The topic's undeleted and partition count."""
    return ordered_counts(bootstrap, topic)[1:]


#: seconds each delivered record of an initial partition costs its member: the parents lag, so
#: the members reading the partitions an expansion creates are ahead of them
PARENT_DELAY_S = 0.025
INITIAL = 2
#: partition 0, the parent of partition 2 (2 -> 3), and partition 3, which the shrink marks for
#: deletion (its keys go back to partition 1, fast): without the gates partition 2's and
#: partition 1's members would deliver keys ahead of their earlier records
SLOW_PARTITIONS = (0, 3)


def _member(ordered: bool, bootstrap: str, topic: str, group: str, name: str, deliveries: GroupDeliveries,
            stop: threading.Event, errors: list[Any]) -> threading.Thread:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
              "auto.offset.reset": "earliest", "heartbeat.interval.ms": 300, "session.timeout.ms": 6000}

    def run() -> None:
        if ordered:
            consumer: Any = OrderedConsumer(config)
        else:  # librdkafka sees new partitions only at a metadata refresh: make it prompt
            consumer = Consumer({**config, "topic.metadata.refresh.interval.ms": 500})
        try:
            consumer.subscribe([topic])
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    errors.append(msg.error())
                    continue
                deliveries.record(name, msg)
                if msg.partition() in SLOW_PARTITIONS:
                    time.sleep(PARENT_DELAY_S)
        except BaseException as exc:  # the test fails on it
            errors.append(exc)
        finally:
            consumer.close()

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _watch_blocks(bootstrap: str, group: str, stop: threading.Event, seen: set[tuple[int, int]]) -> threading.Thread:
    """Samples DescribeOrderedGroups (what `odradek groups describe` shows): (blocked, waits_on)."""
    def run() -> None:
        client = OrderedMetadataClient(parse_bootstrap(bootstrap), "watcher")
        try:
            while not stop.is_set():
                described = (client.describe_groups([group]) or {}).get(group)
                if described is not None:
                    seen.update((tp.partition, b.waits_on) for tp, b in described.blocked.items())
                time.sleep(0.1)
        finally:
            client.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _run(cluster: LocalCluster, ordered: bool, topic: str,
         blocks: set[tuple[int, int]] | None = None) -> tuple[GroupDeliveries, dict[bytes, int], list[Any]]:
    """Produce ~130 records/s for 8 s while the topic goes 2 -> 3 -> 4 partitions (and, if
    ordered, back to 3: partition 3 marked for deletion); read it all."""
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic, INITIAL, 2, {"enable.ordered.delivery": "true"} if ordered else None)
    if ordered:
        wait_until(lambda: _counts(bootstrap, topic) == (2, 2), 30, "the topic's counts")
    deliveries = GroupDeliveries()
    stop_consumers, stop_producing = threading.Event(), threading.Event()
    errors: list[Any] = []
    members = [_member(ordered, bootstrap, topic, f"readers-{topic}", f"m{i}", deliveries, stop_consumers, errors)
               for i in range(3)]
    sent = {k: 0 for k in KEYS}

    def produce() -> None:
        config = {"bootstrap.servers": bootstrap, "linger.ms": 5}
        producer: Any = (OrderedProducer(config) if ordered
                         else Producer({**config, "topic.metadata.refresh.interval.ms": 500}))
        try:
            while not stop_producing.is_set():
                for key in KEYS:
                    producer.produce(topic, str(sent[key]).encode(), key=key,
                                     on_delivery=lambda e, m: errors.append(e) if e else None)
                    sent[key] += 1
                producer.poll(0)
                time.sleep(0.15)
            assert producer.flush(60) == 0
        except BaseException as exc:
            errors.append(exc)

    wait_until(lambda: all(m.is_alive() for m in members), 10, "the members to start")
    writer = threading.Thread(target=produce)
    writer.start()
    watcher = _watch_blocks(bootstrap, f"readers-{topic}", stop_consumers, blocks) if blocks is not None else None
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for total in (3, 4, 3) if ordered else (3, 4):
            time.sleep(2)
            admin.create_partitions([NewPartitions(topic, total)], operation_timeout=10)[topic].result(30)
        time.sleep(2)
        stop_producing.set()
        writer.join(90)
        total_sent = sum(sent.values())
        wait_until(lambda: deliveries.count() >= total_sent, 90, f"all {total_sent} records delivered")
    finally:
        stop_producing.set()
        stop_consumers.set()
        for thread in (writer, *members, *([watcher] if watcher else [])):
            thread.join(60)
    return deliveries, sent, errors


def _out_of_order(deliveries: GroupDeliveries, sent: dict[bytes, int]) -> dict[bytes, list[int]]:
    """Per key, the sequence numbers first delivered before one of their predecessors."""
    out = {}
    for key in KEYS:
        order = deliveries.first_deliveries(key)
        late = [s for i, s in enumerate(order) if s != i]
        if late or len(order) != sent[key]:
            out[key] = late[:5]
    return out


def test_a_group_delivers_every_key_in_order_while_the_topic_grows(cluster: LocalCluster) -> None:
    blocks: set[tuple[int, int]] = set()
    deliveries, sent, errors = _run(cluster, True, "ordered", blocks)
    assert errors == []
    # operators saw the waits: partition 2 on its parent 0 (slow), partition 1 on 3 (marked, slow)
    assert {(2, 0), (1, 3)} <= blocks, blocks
    assert _out_of_order(deliveries, sent) == {}
    moved = {k for _, k, _, p in deliveries.seen if p >= INITIAL}
    assert moved, "no key moved to a new partition: the run tested nothing"
    back = {k for k in moved if any(p == 3 for _, kk, _, p in deliveries.seen if kk == k)}
    assert back, "no key of the partition marked for deletion: the shrink tested nothing"


@pytest.mark.slow  # 22 s: make test-long; make test keeps the ordered run
def test_stock_clients_on_a_plain_topic_deliver_keys_out_of_order(cluster: LocalCluster) -> None:
    """The comparison: the same run with confluent-kafka's Producer and Consumer on a topic
    without ordered delivery (as Kafka, Redpanda and every Kafka-compatible system behave)."""
    deliveries, sent, errors = _run(cluster, False, "plain")
    assert errors == []
    assert _out_of_order(deliveries, sent), "stock clients kept every key in order this time"
