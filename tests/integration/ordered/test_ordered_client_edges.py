"""The OrderedProducer's and OrderedConsumer's edges on a real cluster. KIP-253 part 9: on a
compacted ordered topic, a key that an expansion moved gets a tombstone in its old partition (so
compaction there drops the key's old value, which its new values never reach), only while that
partition still holds records from before the split; an OrderedConsumer delivers each key's old
then new value and never those tombstones. And a parent written nothing before the expansion
still has a barrier (OffsetsForLeaderEpoch answers its log end, not -1)."""
from __future__ import annotations

import time

import pytest
from clients import create_topic, ordered_counts
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.client.group_membership import GroupTimeoutError
from odradek.client.ordered_consumer import OrderedConsumer
from odradek.client.ordered_producer import OrderedProducer
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.linear_hashing import partition_for_key

pytestmark = pytest.mark.integration

KEYS = [f"key-{i}".encode() for i in range(20)]
MOVED = [k for k in KEYS if partition_for_key(k, 2, 4) != partition_for_key(k, 2, 2)]


def _counts(bootstrap: str, topic: str) -> tuple[int, ...]:
    """The topic's initial and undeleted count."""
    return ordered_counts(bootstrap, topic)[:2]


def _write(bootstrap: str, topic: str, value: bytes) -> None:
    producer = OrderedProducer({"bootstrap.servers": bootstrap})
    failed: list[object] = []
    for key in KEYS:
        producer.produce(topic, value, key=key, on_delivery=lambda e, m: failed.append(e) if e else None)
    assert producer.flush(30) == 0 and failed == []
    producer.close()


def _tombstones(bootstrap: str, topic: str, partitions: int) -> set[tuple[int, bytes]]:
    """(partition, key) of every null-value record, read with a stock consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{topic}", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found, ends = set(), set()
    try:
        while len(ends) < partitions:
            msg = consumer.poll(10)
            assert msg is not None, "no record nor end of partition within 10 s"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                ends.add(msg.partition())
            elif msg.value() is None:
                found.add((msg.partition(), msg.key()))
    finally:
        consumer.close()
    return found


def _grow(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=10)[topic].result(30)
    wait_until(lambda: _counts(bootstrap, topic) == (2, 4), 30, "the count 4")


def test_moved_keys_get_tombstones_in_their_old_partition_that_ordered_consumers_skip(cluster: LocalCluster) -> None:
    assert MOVED, "no key moves from 2 to 4 partitions"
    bootstrap = cluster.bootstrap_servers
    topic = "compacted"
    create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true", "cleanup.policy": "compact"})
    wait_until(lambda: _counts(bootstrap, topic) == (2, 2), 30, "the counts")
    _write(bootstrap, topic, b"old")
    _grow(bootstrap, topic)
    _write(bootstrap, topic, b"new")
    assert _tombstones(bootstrap, topic, 4) == {(partition_for_key(k, 2, 2), k) for k in MOVED}

    consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": "compacted-readers",
                                "auto.offset.reset": "earliest", "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    seen: dict[bytes, list[bytes | None]] = {}
    try:
        deadline = time.monotonic() + 30
        while sum(map(len, seen.values())) < 2 * len(KEYS) or time.monotonic() < deadline - 28:
            assert time.monotonic() < deadline, f"read {seen}"
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.setdefault(msg.key(), []).append(msg.value())
    finally:
        consumer.close()
    assert seen == {k: [b"old", b"new"] for k in KEYS}


def test_no_tombstone_where_the_old_records_are_already_gone(cluster: LocalCluster) -> None:
    """The choice where KIP-253 part 9 reads backwards: a tombstone only while the ancestor's
    log start is below its split barrier, i.e. while it still has the key's old value to drop."""
    bootstrap = cluster.bootstrap_servers
    topic = "compacted-emptied"  # compact,delete: DeleteRecords is refused where only compact is set
    create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true", "cleanup.policy": "compact,delete"})
    wait_until(lambda: _counts(bootstrap, topic) == (2, 2), 30, "the counts")
    _write(bootstrap, topic, b"old")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    gone = admin.delete_records([TopicPartition(topic, p, -1) for p in range(2)])  # to the end
    for future in gone.values():
        future.result(30)
    _grow(bootstrap, topic)
    _write(bootstrap, topic, b"new")
    assert _tombstones(bootstrap, topic, 4) == set()


def test_a_child_of_a_parent_written_nothing_is_read(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = "idle-parents"
    create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true"})
    wait_until(lambda: _counts(bootstrap, topic) == (2, 2), 30, "the counts")
    _grow(bootstrap, topic)
    children = [k for k in KEYS if partition_for_key(k, 2, 4) >= 2]  # 0 and 1 are never written
    producer = OrderedProducer({"bootstrap.servers": bootstrap})
    for key in children:
        producer.produce(topic, b"first", key=key)
    assert producer.flush(30) == 0
    producer.close()
    consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": "idle-readers",
                                "auto.offset.reset": "earliest", "heartbeat.interval.ms": 300})
    consumer.subscribe([topic])
    seen: dict[bytes, bytes] = {}
    try:
        deadline = time.monotonic() + 30
        while len(seen) < len(children):
            assert time.monotonic() < deadline, f"read {sorted(seen)}"
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen[msg.key()] = msg.value()
    finally:
        consumer.close()
    assert seen == dict.fromkeys(children, b"first")


def test_an_assignment_reads_the_partition_count_itself(cluster: LocalCluster) -> None:
    """A member takes a marked partition at or past the topic's partition count as removed (and
    so drained); the count must be the one of the assignment's layout, not a heartbeat's
    reading from before an expansion (a fault run's member, 34 s without a heartbeat, read
    past a deletion barrier so)."""
    bootstrap = cluster.bootstrap_servers
    topic = "counted-readers"
    create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true"})
    _grow(bootstrap, topic)
    consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": "counted-readers",
                                "auto.offset.reset": "earliest", "heartbeat.interval.ms": 10000})
    consumer._latest_totals[topic] = 2  # as a heartbeat read it before the expansion
    counts_at_assign: list[int] = []
    consumer.subscribe([topic], on_assign=lambda c, ps: counts_at_assign.append(consumer._latest_totals[topic]))
    try:
        deadline = time.monotonic() + 30
        while not counts_at_assign:
            assert time.monotonic() < deadline, "no assignment"
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert counts_at_assign == [4]


def test_a_join_that_times_out_is_retried_not_raised(cluster: LocalCluster) -> None:
    """No coordinator for a minute (a fault run cut one off) must not end the application's
    consumer: poll() returns nothing and joins again. The first join is made to time out as a
    coordinator out of reach would (a minute per try is too long for a test); the rest is real."""
    bootstrap = cluster.bootstrap_servers
    topic = "patient-readers"
    create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true"})
    wait_until(lambda: _counts(bootstrap, topic) == (2, 2), 30, "the counts")
    _write(bootstrap, topic, b"v")
    consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": "patient-readers",
                                "auto.offset.reset": "earliest"})
    real_join, tries = consumer._member.join, []

    def join(topics: list[str], timeout_s: float = 60) -> object:
        tries.append(timeout_s)
        if len(tries) == 1:
            raise GroupTimeoutError("group patient-readers not joined within 61 s: connection to the "
                                    "coordinator failed: timed out")
        return real_join(topics, timeout_s)

    consumer._member.join = join  # type: ignore[method-assign]
    consumer.subscribe([topic])
    seen = 0
    try:
        deadline = time.monotonic() + 30
        while seen < len(KEYS):
            assert time.monotonic() < deadline, f"read {seen} of {len(KEYS)}"
            msg = consumer.poll(0.2)
            seen += msg is not None and not msg.error()
    finally:
        consumer.close()
    assert len(tries) == 2


def test_a_member_owning_a_parent_hurries_its_position_exchange_after_its_assignment(cluster: LocalCluster) -> None:
    """A member given a partition another's gate may wait on (here the parents of an
    expansion's partitions) exchanges positions four times an interval for a few intervals
    after its assignment, so it hears at once that its position is wanted; a member of a topic
    never grown does not, and the hurry ends."""
    bootstrap = cluster.bootstrap_servers
    hurried_at_assign: dict[str, bool] = {}
    consumers = {}
    for topic, grow in (("hurried-parents", True), ("calm-parents", False)):
        create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true"})
        if grow:
            _grow(bootstrap, topic)
        consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-readers",
                                    "auto.offset.reset": "earliest", "heartbeat.interval.ms": 200})
        consumer.subscribe([topic], on_assign=lambda c, ps, topic=topic: hurried_at_assign.setdefault(
            topic, c._hurried()))
        consumers[topic] = consumer
    try:
        deadline = time.monotonic() + 30
        while len(hurried_at_assign) < 2:
            assert time.monotonic() < deadline, f"assignments: {hurried_at_assign}"
            for consumer in consumers.values():
                consumer.poll(0.1)
        assert hurried_at_assign == {"hurried-parents": True, "calm-parents": False}
        grown = consumers["hurried-parents"]

        def calm() -> bool:
            grown.poll(0.1)
            return not grown._hurried()
        wait_until(calm, 10, "the hurry to end")
    finally:
        for consumer in consumers.values():
            consumer.close()
