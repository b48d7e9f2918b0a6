"""Real-client helpers shared by the integration tests (confluent-kafka, acks=all, assign()), and
the continuous producer whose every acknowledged write a failover test checks afterwards."""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from client_helpers import produce
from odradek.admin.admin_client import metadata_request
from odradek.cluster.local_cluster import LocalCluster


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, config: dict[str, str] | None = None) -> None:
    """Created, and every partition's leader known to every broker: CreateTopics answers once
    the topic is in ZooKeeper, as Kafka's does, and a raw request sent to a leader before its
    LeaderAndIsr arrived would be refused (real clients retry that; the tests' raw requests
    do not)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, rf, config=config or {})]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    for server in bootstrap.split(","):
        while True:
            topics = metadata_request(server, [name], 10).topics
            if topics and topics[0].error_code == 0 and len(topics[0].partitions) == partitions \
                    and all(p.leader_id >= 0 for p in topics[0].partitions):
                break
            assert time.monotonic() < deadline, f"{name}: no leader for every partition at {server} after 30 s"
            time.sleep(0.05)


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


class ContinuousProducer:
    """An idempotent acks=all producer writing numbered messages to every partition in turn
    until stopped; remembers what was acknowledged and the order each partition was sent."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120_000})
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.value()] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

    def _run(self) -> None:
        while not self._stop.is_set():
            for _ in range(50):
                try:
                    self.producer.produce(self.topic, value=b"%d" % self.sent, partition=self.sent % self.partitions,
                                          on_delivery=self._on_delivery)
                except BufferError:  # too much unacknowledged (a leader is down): wait, resend this one
                    break
                self.sent += 1
            self.producer.poll(0.01)

    def start(self) -> "ContinuousProducer":
        self._thread.start()
        return self

    def wait_acked(self, count: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} of {count} acknowledged"
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(120) == 0


def check_exactly_once_in_order(bootstrap: str, producer: ContinuousProducer) -> None:
    """Every acknowledged message is in the log once; no message at all is there twice; each
    partition holds its messages in send order."""
    got = consume_all(bootstrap, producer.topic, producer.partitions, len(producer.acked), timeout_s=120)
    values = [v for _, _, _, v in got]
    assert len(values) == len(set(values)), "a message was written twice"
    assert set(producer.acked) <= set(values), "an acknowledged message was lost"
    for p in range(producer.partitions):
        seqs = [int(v) for part, _, _, v in sorted(got) if part == p]
        assert seqs == sorted(seqs), f"partition {p} is out of send order"
        assert all(s % producer.partitions == p for s in seqs)


def ordered_counts(bootstrap: str, topic: str) -> tuple[int, int, int]:
    """(initial_partition_count, undeleted_partition_count, partition count) of a topic as a
    broker answers them (KIP-253's PartitionLeaderEpochsForPartitions; -1s for a plain topic)."""
    from odradek.client.ordered_metadata import OrderedMetadataClient, parse_bootstrap

    client = OrderedMetadataClient(parse_bootstrap(bootstrap), "test")
    try:
        c = client.counts([topic])[topic]
        return c.initial_partition_count, c.undeleted_partition_count, c.partition_count
    finally:
        client.close()
