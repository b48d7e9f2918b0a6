"""Admin requests within librdkafka's limits: a long CreateTopics is one capped request and then
polling, never a socket.timeout.ms librdkafka refuses (it allows at most 300,000 ms). No cluster:
the polling and the client are replaced where they would touch the network."""
from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from odradek.admin import admin_client as admin
from odradek.admin.admin_client import MAX_SOCKET_TIMEOUT_MS, create_topic
from odradek.admin.errors import AdminError
from odradek.common.netutil import free_port


class _Future:
    def __init__(self, error: KafkaError | None) -> None:
        self.error = error

    def result(self, timeout: float) -> None:
        if self.error is not None:
            raise KafkaException(self.error)


class _RecordingAdmin:
    """Stands in for AdminClient: records the config and the create_topics options."""

    made: list[dict[str, Any]] = []
    error: KafkaError | None = None

    def __init__(self, conf: dict[str, Any]) -> None:
        self.made.append({"conf": conf})

    def create_topics(self, topics: list[Any], **options: Any) -> dict[str, _Future]:
        self.made[-1]["options"] = options
        return {t.topic: _Future(self.error) for t in topics}


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    polled: dict[str, Any] = {}
    _RecordingAdmin.made = []
    monkeypatch.setattr(admin, "AdminClient", _RecordingAdmin)
    monkeypatch.setattr(admin, "_wait_until_every_broker_knows",
                        lambda bootstrap, topic, partitions, deadline, answered=True, progress=None, zk=None:
                        polled.update(topic=topic, answered=answered))
    return polled


def test_a_long_timeout_builds_a_client_librdkafka_accepts() -> None:
    """Built for real (it connects to nothing until asked): socket.timeout.ms is capped at
    librdkafka's maximum, so a 100,000-partition topic's 400 s builds a client, where the
    uncapped value raises from librdkafka's configuration."""
    client = admin.admin_client(f"127.0.0.1:{free_port()}", request_timeout=400.0)
    assert client is not None
    with pytest.raises(KafkaException):
        admin.AdminClient({"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": MAX_SOCKET_TIMEOUT_MS + 1})


def test_create_topic_caps_the_request_and_polls_after_a_timed_out_answer(recording) -> None:
    _RecordingAdmin.error = KafkaError(KafkaError._TIMED_OUT)
    create_topic("127.0.0.1:1", "big", 100, 3, timeout=1000.0)
    made = _RecordingAdmin.made[-1]
    assert made["conf"]["socket.timeout.ms"] == MAX_SOCKET_TIMEOUT_MS
    assert made["options"]["request_timeout"] <= MAX_SOCKET_TIMEOUT_MS / 1000 - 10
    assert made["options"]["operation_timeout"] == made["options"]["request_timeout"]
    assert recording == {"topic": "big", "answered": False}


def test_create_topic_without_a_timeout_gives_a_large_topic_longer(recording) -> None:
    """`odradek topics create` passes no timeout: 30 s for a small topic, 4 ms per partition
    for a large one (50,000 partitions took 44-98 s to create on 2 cores)."""
    _RecordingAdmin.error = None
    create_topic("127.0.0.1:1", "small", 6, 3)
    assert _RecordingAdmin.made[-1]["options"]["request_timeout"] == 30.0
    create_topic("127.0.0.1:1", "large", 50_000, 3)
    assert _RecordingAdmin.made[-1]["options"]["request_timeout"] == 200.0
    assert recording == {"topic": "large", "answered": True}


def test_create_topic_reports_a_refusal_without_polling(recording) -> None:
    _RecordingAdmin.error = KafkaError(KafkaError.POLICY_VIOLATION, "too large for ZooKeeper")
    with pytest.raises(AdminError, match="POLICY_VIOLATION: too large for ZooKeeper"):
        create_topic("127.0.0.1:1", "big", 100_000, 3, timeout=30.0)
    assert recording == {}
