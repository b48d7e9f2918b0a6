"""Idempotent producers (KIP-98) against real clusters: a retried batch is answered with the offset
it first got and stored once, a sequence gap or a fenced epoch stores nothing, and the state the
leader checks against is on every replica, so it holds across a leader kill and a full restart."""
from __future__ import annotations

import time
from typing import Callable

import pytest
from clients import consume_all, create_topic, produce_acks_all
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, OffsetSpec
from wire import RawConnection

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.errors import ErrorCode, is_retriable
from odradek.protocol.records import build_batch

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def init_producer_id(conn: RawConnection, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
    resp = conn.request(22, 4, {"transactional_id": None, "transaction_timeout": 60_000,
                                "producer_id": producer_id, "producer_epoch": epoch})
    assert resp.error_code == ErrorCode.NONE
    return int(resp.producer_id), int(resp.producer_epoch)


def produce(conn: RawConnection, topic: str, records: bytes) -> tuple[int, int]:
    """(error code, base offset) of an acks=all produce to partition 0."""
    resp = conn.request(0, 9, {"acks": -1, "timeout": 10_000, "transactional_id": None, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    part = resp.responses[0].partition_responses[0]
    return int(part.error_code), int(part.base_offset)


def batch(pid: int, seq: int, values: list[bytes], epoch: int = 0) -> bytes:
    return build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def leader_of(bootstrap: str, topic: str, timeout: float = 10.0) -> int:
    """Partition 0's leader as a client sees it, asked again until a broker knows it:
    CreateTopics answers once the broker that took it knows the leaders, and the broker asked
    here may hear from the controller a moment later (as in Kafka; seen once in CI)."""
    deadline = time.monotonic() + timeout
    while True:
        topic_md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(
            topic, timeout=timeout).topics[topic]
        if 0 in topic_md.partitions and topic_md.partitions[0].leader >= 0:
            return topic_md.partitions[0].leader
        assert time.monotonic() < deadline, f"no leader for {topic}-0: {topic_md.error}"
        time.sleep(0.1)


def latest_offset(bootstrap: str, topic: str) -> int:
    tp = TP(topic, 0)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future it answers
    return admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30).offset


def leader_conn(c: LocalCluster, topic: str) -> RawConnection:
    return RawConnection(c.host, c.broker_port(leader_of(c.bootstrap_servers, topic)))


def values_of(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return [v for _, _, _, v in sorted(consume_all(bootstrap, topic, 1, expected))]


def test_a_resent_batch_gets_its_first_offset_and_is_stored_once(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "idem-dup", 1, 3)
    conn = leader_conn(cluster, "idem-dup")
    pid, epoch = init_producer_id(conn)
    assert pid >= 0 and epoch == 0
    first = batch(pid, 0, [b"a", b"b", b"c"])
    second = batch(pid, 3, [b"d", b"e"])
    assert produce(conn, "idem-dup", first) == (ErrorCode.NONE, 0)
    assert produce(conn, "idem-dup", first) == (ErrorCode.NONE, 0)
    assert produce(conn, "idem-dup", second) == (ErrorCode.NONE, 3)
    assert produce(conn, "idem-dup", first) == (ErrorCode.NONE, 0)  # still among the last five
    assert produce(conn, "idem-dup", second) == (ErrorCode.NONE, 3)
    conn.close()
    assert latest_offset(bootstrap, "idem-dup") == 5
    assert values_of(bootstrap, "idem-dup", 5) == [b"a", b"b", b"c", b"d", b"e"]


def test_a_sequence_gap_or_a_fenced_epoch_stores_nothing(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "idem-gap", 1, 3)
    conn = leader_conn(cluster, "idem-gap")
    pid, _ = init_producer_id(conn)
    assert produce(conn, "idem-gap", batch(pid, 0, [b"a"])) == (ErrorCode.NONE, 0)
    assert produce(conn, "idem-gap", batch(pid, 5, [b"gap"]))[0] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(conn, "idem-gap", batch(pid, 1, [b"b"])) == (ErrorCode.NONE, 1)
    # a new epoch of the same producer id fences the old one
    assert init_producer_id(conn, pid, 0) == (pid, 1)
    assert produce(conn, "idem-gap", batch(pid, 0, [b"c"], epoch=1)) == (ErrorCode.NONE, 2)
    assert produce(conn, "idem-gap", batch(pid, 2, [b"zombie"], epoch=0))[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    conn.close()
    assert latest_offset(bootstrap, "idem-gap") == 3
    assert values_of(bootstrap, "idem-gap", 3) == [b"a", b"b", b"c"]


def send_until_answered(c: LocalCluster, live: list[int], topic: str, records: bytes,
                        timeout_s: float = 60) -> tuple[int, int]:
    """Produce to each live broker in turn until one answers other than with a retriable error:
    what a client does while a new leader is being elected."""
    deadline = time.monotonic() + timeout_s
    while True:
        for broker_id in live:
            try:
                conn = RawConnection(c.host, c.broker_port(broker_id))
            except OSError:
                continue
            try:
                error, offset = produce(conn, topic, records)
            finally:
                conn.close()
            if not is_retriable(error):
                return error, offset
        assert time.monotonic() < deadline, "no broker accepted the produce"
        time.sleep(0.2)


@pytest.mark.slow  # 13 s: make test-long (make test keeps the retry and the leader kill apart)
def test_a_retry_after_a_leader_kill_and_a_full_restart_is_still_a_duplicate(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory()
    create_topic(c.bootstrap_servers, "idem-failover", 1, 3)
    conn = leader_conn(c, "idem-failover")
    pid, _ = init_producer_id(conn)
    values = [b"v%d" % i for i in range(12)]
    batches = [batch(pid, seq, values[seq:seq + 3]) for seq in range(0, 12, 3)]
    for i, b in enumerate(batches):  # acks=all: every replica holds each batch when answered
        assert produce(conn, "idem-failover", b) == (ErrorCode.NONE, 3 * i)
    conn.close()

    old_leader = leader_of(c.bootstrap_servers, "idem-failover")
    c.kill_broker(old_leader)
    live = [b for b in c.broker_ids if b != old_leader]
    assert send_until_answered(c, live, "idem-failover", batches[-1]) == (ErrorCode.NONE, 9)
    assert send_until_answered(c, live, "idem-failover", batch(pid, 13, [b"gap"]))[0] == \
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    for broker_id in live:
        c.kill_broker(broker_id)
    c.up(timeout=60)  # every replica rebuilds its producer state from its log
    assert send_until_answered(c, c.broker_ids, "idem-failover", batches[-1]) == (ErrorCode.NONE, 9)
    assert send_until_answered(c, c.broker_ids, "idem-failover", batches[-2]) == (ErrorCode.NONE, 6)
    assert send_until_answered(c, c.broker_ids, "idem-failover", batch(pid, 12, [b"v12"])) == (ErrorCode.NONE, 12)
    assert latest_offset(c.bootstrap_servers, "idem-failover") == 13
    assert values_of(c.bootstrap_servers, "idem-failover", 13) == values + [b"v12"]


def assert_dense_and_complete(bootstrap: str, topic: str, partitions: int, sent: set[bytes]) -> None:
    got = consume_all(bootstrap, topic, partitions, len(sent))
    assert sorted(v for _, _, _, v in got) == sorted(sent)
    for p in range(partitions):
        offsets = sorted(o for part, o, _, _ in got if part == p)
        assert offsets == list(range(len(offsets)))
    tps = [TP(topic, p) for p in range(partitions)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps})
    assert sum(f.result(30).offset for f in ends.values()) == len(sent)  # nothing stored twice


def test_confluent_kafka_idempotent_producer_5000_messages(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "idem-ck", 3, 3)
    acked = produce_acks_all(cluster.bootstrap_servers, "idem-ck", 5000, prefix="ck")
    assert len({(p, o) for p, o, _, _ in acked}) == 5000
    assert_dense_and_complete(cluster.bootstrap_servers, "idem-ck", 3, {v for _, _, _, v in acked})


def test_kafka_python_idempotent_producer_5000_messages(cluster: LocalCluster) -> None:
    from kafka import KafkaProducer

    create_topic(cluster.bootstrap_servers, "idem-kp", 3, 3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", enable_idempotence=True)
    futures = [producer.send("idem-kp", key=b"k%d" % i, value=b"v%d" % i) for i in range(5000)]
    producer.flush(60)
    metas = [f.get(timeout=10) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in metas}) == 5000
    assert_dense_and_complete(cluster.bootstrap_servers, "idem-kp", 3, {b"v%d" % i for i in range(5000)})


def test_confluent_kafka_producing_through_a_leader_kill_writes_nothing_twice_or_out_of_order(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(c.bootstrap_servers, "idem-kill", 2, 3)
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120_000})
    errors: list[object] = []
    acked: list[int] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(1)

    n = 20_000
    for i in range(n):
        producer.produce("idem-kill", value=b"%06d" % i, partition=i % 2, on_delivery=on_delivery)
        producer.poll(0)
        if i == n // 2:
            while len(acked) < n // 4:
                producer.poll(0.1)
            c.kill_broker(leader_of(c.bootstrap_servers, "idem-kill"))
    assert producer.flush(120) == 0
    assert errors == []
    got = consume_all(c.bootstrap_servers, "idem-kill", 2, n, timeout_s=90)
    for p in range(2):
        values = [v for part, _, _, v in sorted(got) if part == p]
        assert values == [b"%06d" % i for i in range(p, n, 2)]  # each once, in the order sent
