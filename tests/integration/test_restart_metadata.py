"""A restarted broker never tells a client that an existing topic does not exist.

The controller broker is killed and restarted a second later: its port opens seconds before the
new controller's UpdateMetadata reaches it. Every Metadata answer it gives meanwhile (asked
over the wire, as `kcat -L -b` asks exactly one broker) must list the topic, and a
confluent-kafka producer bootstrapped from that broker alone keeps delivering: librdkafka
marks a topic it is told does not exist as gone and fails every produce() to it.

FindCoordinator is answered the same way: never "creating __consumer_offsets" for a topic that
exists (three such answers make librdkafka's coordinator request give up its retries and wait
for a broker state change, which may never come: a send_offsets_to_transaction hangs).
"""
from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import pytest
from clients import ContinuousProducer, check_exactly_once_in_order, create_topic
from cluster_state import controller_id
from wire import RawConnection

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration

TOPIC = "restart-metadata"
GROUP = "restart-metadata-group"
FIND_COORDINATOR = 10


def find_group_coordinator(conn: RawConnection) -> tuple[int, str | None]:
    """(error code, error message) of FindCoordinator v2 for GROUP, as librdkafka asks it."""
    response = conn.request(FIND_COORDINATOR, 2, {"key": GROUP, "key_type": 0})
    return int(response.error_code), response.error_message


class MetadataProbe:
    """Asks one broker for the topic's metadata, over and over, on fresh connections while the
    broker is down; records every topic error code it is answered."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.answers: list[tuple[int, int]] = []  # (topic error code, partition count)
        self.coordinator_answers: list[tuple[int, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn: RawConnection | None = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = RawConnection(self.host, self.port, timeout=30)
                for version in (4, 12):  # kcat's and the current clients' versions
                    body = {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                            "include_topic_authorized_operations": False}
                    response = conn.request(3, version, body)
                    topic = response.topics[0]
                    self.answers.append((int(topic.error_code), len(topic.partitions)))
                self.coordinator_answers.append(find_group_coordinator(conn))
            except (OSError, ConnectionError):
                if conn is not None:
                    conn.close()
                conn = None
            time.sleep(0.05)
        if conn is not None:
            conn.close()

    def start(self) -> "MetadataProbe":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def test_restarted_controller_broker_never_answers_unknown_topic(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(3, zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(c.bootstrap_servers, TOPIC, 6, 3)
    conn = RawConnection(c.host, c.broker_port(c.broker_ids[0]), timeout=30)
    try:
        deadline = time.monotonic() + 60  # the first FindCoordinator creates __consumer_offsets
        while find_group_coordinator(conn)[0] != ErrorCode.NONE and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        conn.close()
    victim = controller_id(c)
    # bootstrapped from the victim alone: its answers are all this producer hears at first
    producer = ContinuousProducer(f"{c.host}:{c.broker_port(victim)}", TOPIC, 6).start()
    producer.wait_acked(200)
    c.kill_broker(victim, signal.SIGKILL)
    time.sleep(1.0)
    probe = MetadataProbe(c.host, c.broker_port(victim)).start()
    try:
        c.start_broker(victim)
        c.wait_ready(c.broker_ids, 60)
        acked_before = len(producer.acked)
        producer.wait_acked(acked_before + 500, timeout_s=60)
    finally:
        probe.stop()
        producer.stop()
    unknown = [a for a in probe.answers if a[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert probe.answers, "the restarted broker never answered Metadata"
    assert unknown == [], f"{len(unknown)} of {len(probe.answers)} answers said the topic does not exist"
    assert all(count == 6 for _, count in probe.answers)
    creating = [a for a in probe.coordinator_answers if a[1] and a[1].startswith("creating")]
    assert probe.coordinator_answers and creating == [], \
        f"{len(creating)} of {len(probe.coordinator_answers)} FindCoordinator answers: {creating[:1]}"
    assert producer.errors == []
    check_exactly_once_in_order(c.bootstrap_servers, producer)
