"""A restarted broker never tells a client that an existing topic does not exist.

The controller broker is killed and restarted a second later: its port opens seconds before the
new controller's UpdateMetadata reaches it. Every Metadata answer it gives meanwhile (asked
over the wire, as `kcat -L -b` asks exactly one broker) must list the topic, and a
confluent-kafka producer bootstrapped from that broker alone keeps delivering: librdkafka
marks a topic it is told does not exist as gone and fails every produce() to it.
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


class MetadataProbe:
    """Asks one broker for the topic's metadata, over and over, on fresh connections while the
    broker is down; records every topic error code it is answered."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.answers: list[tuple[int, int]] = []  # (topic error code, partition count)
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
    assert producer.errors == []
    check_exactly_once_in_order(c.bootstrap_servers, producer)
