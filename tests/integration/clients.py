"""Real-client helpers shared by the integration tests (confluent-kafka, acks=all, assign())."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from client_helpers import produce
from odradek.cluster.local_cluster import LocalCluster


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, rf, config=config or {})]).values():
        future.result(30)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 60) -> list[tuple[int, int, bytes, bytes]]:
    """(partition, offset, key, value) of every message, read from the beginning with assign()."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def end_offsets_total(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of the partitions' high watermarks: how many records a read from offset 0 gets
    (while nothing trimmed the logs' starts)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        consumer.close()


def produce_acks_all(bootstrap: str, topic: str, n: int, prefix: str = "m") -> list[tuple[int, int, bytes, bytes]]:
    """Produce n keyed messages with acks=all; returns the acknowledged (partition, offset, key, value)."""
    return produce(bootstrap, topic, [(f"{prefix}-k{i}".encode(), f"{prefix}-v{i}".encode() * 3, None)
                                      for i in range(n)])  # type: ignore[return-value]


def segment_bytes(cluster: LocalCluster, broker_id: int, topic: str, partition: int) -> bytes:
    pdir = cluster.broker_dir(broker_id) / "data" / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(pdir.glob("*.log")))


def wait_identical_replicas(cluster: LocalCluster, topic: str, partitions: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        differing = [p for p in range(partitions)
                     if len({segment_bytes(cluster, b, topic, p) for b in cluster.broker_ids}) != 1]
        if not differing or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert differing == [], f"partitions whose replicas differ: {differing}"
