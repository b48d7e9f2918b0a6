"""DeleteRecords (KIP-107) on a real RF-3 cluster through confluent-kafka's AdminClient: the
leader moves its log start, every replica follows and drops the segments below it, readers see
the new log start, and bad requests get Kafka's error codes and change nothing."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from clients import create_topic
from cluster_state import full_isr
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from polling import wait_until
from wire import RawConnection

from client_helpers import produce
from cluster_helpers import start_cluster
from odradek.broker import api_keys
from odradek.cluster.local_cluster import LocalCluster
from odradek.log.checkpoint import read_offset
from odradek.log.log import LOG_START_FILE
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

SMALL_SEGMENTS = {"segment.bytes": "1024"}


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's 3-broker cluster, its log cleaners checking every 200 ms (compacted topic)."""
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("delete-records"), log_cleaner_backoff_ms=200)
    try:
        yield c
    finally:
        c.down()


def new_topic(cluster: LocalCluster, records: int, config: dict[str, str] | None = None) -> str:
    topic = f"delrec-{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, topic, 1, 3, {**SMALL_SEGMENTS, **(config or {})})
    wait_until(lambda: full_isr(cluster, topic, 3), 30, "a full ISR")
    produce(cluster.bootstrap_servers, topic,
            [(b"k%d" % i, b"value-%04d" % i + b"." * 60, None) for i in range(records)],
            **{"linger.ms": 0, "batch.num.messages": 1})
    return topic


def delete(cluster: LocalCluster, topic: str, offset: int, timeout: float = 10.0) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=timeout + 5,
                                   operation_timeout=timeout)
    return next(iter(futures.values())).result(timeout + 10).low_watermark


def error_of(cluster: LocalCluster, topic: str, offset: int, timeout: float = 10.0) -> int:
    with pytest.raises(KafkaException) as info:
        delete(cluster, topic, offset, timeout)
    return info.value.args[0].code()


def log_starts(cluster: LocalCluster, topic: str) -> dict[int, tuple[int | None, int]]:
    """broker -> (checkpointed log start, base offset of its first segment file)"""
    out = {}
    for b in cluster.broker_ids:
        pdir = cluster.broker_dir(b) / "data" / f"{topic}-0"
        bases = sorted(int(p.name.split(".")[0]) for p in pdir.glob("*.log"))
        out[b] = (read_offset(pdir / LOG_START_FILE), bases[0])
    return out


def watermarks(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()


def first_read(cluster: LocalCluster, topic: str, reset: str) -> tuple[int, bytes] | int:
    """(offset, value) of the first record a consumer starting at offset 0 gets, or the error code."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": reset})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                return msg.error().code()
            return msg.offset(), msg.value()
        raise AssertionError("nothing read")
    finally:
        consumer.close()


def test_every_replica_moves_its_log_start_and_readers_see_it(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, 100)
    before = log_starts(cluster, topic)
    assert all(base == 0 for _, base in before.values())

    assert delete(cluster, topic, 57) == 57   # answered once every ISR member is there

    starts = log_starts(cluster, topic)
    assert {b: s for b, (s, _) in starts.items()} == {b: 57 for b in cluster.broker_ids}
    assert all(0 < base <= 57 for _, base in starts.values()), starts  # segments below are gone
    assert watermarks(cluster, topic) == (57, 100)                 # ListOffsets earliest
    assert first_read(cluster, topic, "earliest")[0] == 57         # a fetch below it resets
    assert first_read(cluster, topic, "error") == KafkaError._AUTO_OFFSET_RESET
    assert delete(cluster, topic, 10) == 57                        # the log start never moves back
    assert delete(cluster, topic, -1) == 100                       # -1: the high watermark
    assert watermarks(cluster, topic) == (100, 100)
    produce(cluster.bootstrap_servers, topic, [(b"k", b"after", None)])
    assert first_read(cluster, topic, "earliest") == (100, b"after")


def test_bad_requests_get_kafkas_errors_and_change_nothing(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, 20)
    compact_only = new_topic(cluster, 20, {"cleanup.policy": "compact"})
    assert error_of(cluster, topic, 21) == KafkaError.OFFSET_OUT_OF_RANGE   # past the high watermark
    assert error_of(cluster, compact_only, 5) == KafkaError.POLICY_VIOLATION
    # librdkafka finds no leader for an unknown topic and does not ask (the wire test is below)
    assert error_of(cluster, "delrec-no-such-topic", 0) == KafkaError._NOENT
    assert watermarks(cluster, topic) == (0, 20) and watermarks(cluster, compact_only) == (0, 20)

    # over the wire: a broker that does not lead the partition, an offset below -1, v0
    leader = cluster_leader(cluster, topic)
    follower = next(b for b in cluster.broker_ids if b != leader)
    body = {"timeout": 5000, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 3}]}]}
    conn = RawConnection("127.0.0.1", cluster.broker_port(follower))
    try:
        for version in (0, 2):
            result = conn.request(api_keys.DELETE_RECORDS, version, body).topics[0].partitions[0]
            assert (result.error_code, result.low_watermark) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    finally:
        conn.close()
    conn = RawConnection("127.0.0.1", cluster.broker_port(leader))
    try:
        low = {"timeout": 5000, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": -2}]}]}
        assert conn.request(api_keys.DELETE_RECORDS, 1, low).topics[0].partitions[0].error_code == \
            ErrorCode.OFFSET_OUT_OF_RANGE
        offsets_topic = {"timeout": 5000, "topics": [{"name": "__consumer_offsets",
                                                      "partitions": [{"partition_index": 0, "offset": 0}]}]}
        assert conn.request(api_keys.DELETE_RECORDS, 0, offsets_topic).topics[0].partitions[0].error_code == \
            ErrorCode.INVALID_TOPIC_EXCEPTION
        unknown = {"timeout": 5000, "topics": [{"name": "delrec-no-such-topic",
                                                "partitions": [{"partition_index": 0, "offset": 0}]}]}
        assert conn.request(api_keys.DELETE_RECORDS, 2, unknown).topics[0].partitions[0].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        conn.close()
    assert watermarks(cluster, topic) == (0, 20)


def test_compacted_topic_with_delete_policy(cluster: LocalCluster) -> None:
    """cleanup.policy=compact,delete: DeleteRecords moves the log start of a log the cleaner has
    compacted, and the cleaner goes on compacting above it; every key's latest value stays."""
    topic = new_topic(cluster, 0, {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.01"})

    def write(round_: int) -> None:
        produce(cluster.bootstrap_servers, topic, [(b"k%d" % k, b"r%d-%d" % (round_, k) + b"." * 60, None)
                                                   for k in range(10)],
                **{"linger.ms": 0, "batch.num.messages": 1, "enable.idempotence": False})

    for round_ in range(4):
        write(round_)
    wait_until(lambda: len(read_values(cluster, topic, count=True)) < 40, 30, "the leader's cleaner")
    assert delete(cluster, topic, 25) == 25
    write(4)
    wait_until(lambda: len(read_values(cluster, topic, count=True)) <= 10 + 5, 30, "a clean above the log start")
    values = read_values(cluster, topic)
    assert values == {b"k%d" % k: b"r4-%d" % k + b"." * 60 for k in range(10)}
    assert watermarks(cluster, topic) == (25, 50)
    assert {s for s, _ in log_starts(cluster, topic).values()} == {25}


def read_values(cluster: LocalCluster, topic: str, count: bool = False) -> dict[bytes, bytes] | list[int]:
    """key -> latest value from the log start to the high watermark (``count``: the offsets read)."""
    _, high = watermarks(cluster, topic)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out: dict[bytes, bytes] = {}
    offsets: list[int] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while (not offsets or offsets[-1] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out[msg.key()] = msg.value()
                offsets.append(msg.offset())
        return offsets if count else out
    finally:
        consumer.close()


def cluster_leader(cluster: LocalCluster, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def test_answer_waits_for_the_isr_and_times_out(cluster: LocalCluster) -> None:
    """A paused follower (still in the ISR) holds the answer back: REQUEST_TIMED_OUT after the
    request's timeout, though the leader has moved; once it runs again, it catches up."""
    topic = new_topic(cluster, 30)
    leader = cluster_leader(cluster, topic)
    follower = next(b for b in cluster.broker_ids if b != leader)
    pid = cluster.broker_pid(follower)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        assert error_of(cluster, topic, 12, timeout=1.0) == KafkaError.REQUEST_TIMED_OUT
        assert log_starts(cluster, topic)[leader][0] == 12
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: log_starts(cluster, topic)[follower][0] == 12, 20, "the follower's log start")
    assert delete(cluster, topic, 12) == 12


def test_cli_delete_records(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, 10)
    cli = [sys.executable, "-m", "odradek", "topics", "delete-records"]
    server = ["--bootstrap-server", cluster.bootstrap_servers]
    out = subprocess.run(cli + [topic, "--partition", "0", "--before", "4", "--json"] + server,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"topic": topic, "partition": 0, "low_watermark": 4, "error": None}]
    out = subprocess.run(cli + [topic, "--partition", "0", "--all"] + server, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].split() == [topic, "0", "10"]
    out = subprocess.run(cli + [topic, "--partition", "0", "--before", "99"] + server, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().startswith("odradek: error:") and "OFFSET_OUT_OF_RANGE" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_follower_that_missed_the_deletion_starts_over_at_the_leaders_log_start(cluster: LocalCluster) -> None:
    """A follower stopped while records were written and deleted past its log end cannot
    fetch what it lacks: it empties its log, starts at the leader's log start and rejoins."""
    topic = new_topic(cluster, 10)
    leader = cluster_leader(cluster, topic)
    follower = next(b for b in cluster.broker_ids if b != leader)
    cluster.kill_broker(follower, signal.SIGTERM)
    wait_until(lambda: cluster.broker_pid(follower) is None, 30, "the follower to stop")
    produce(cluster.bootstrap_servers, topic, [(b"k", b"v%d" % i, None) for i in range(40)],
            **{"linger.ms": 0, "batch.num.messages": 1})
    assert delete(cluster, topic, -1) == 50   # the ISR without the stopped follower
    cluster.start_broker(follower)
    wait_until(lambda: full_isr(cluster, topic, 3), 60, "the follower back in the ISR")
    assert log_starts(cluster, topic)[follower][0] == 50
    produce(cluster.bootstrap_servers, topic, [(b"k", b"after", None)])
    assert delete(cluster, topic, -1) == 51
