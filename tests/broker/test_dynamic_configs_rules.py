"""The rules behind dynamic configs and topic names, without a cluster: the config layers
(dynamic_broker_config.py), IncrementalAlterConfigs' operations (zk_admin_manager.py) and
CreateTopics' name rules (topic_admin.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.dynamic_broker_config import (
    DEFAULT_CONFIG,
    DEFAULT_ENTITY,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    DynamicBrokerConfig,
)
from odradek.broker.topic_admin import TopicError, validate_new_topic_name
from odradek.broker.zk_admin_manager import APPEND, DELETE, SET, SUBTRACT, _incremental
from odradek.protocol.errors import ErrorCode
from odradek.spark.options import MARKER_TOPIC
from odradek.zk import admin_zk_client as azk


def test_a_value_comes_from_the_first_layer_that_has_it() -> None:
    config = DynamicBrokerConfig(BrokerConfig(1, "h", 1, "z", Path("d"), log_retention_ms=5000))
    assert [(s.value, s.source) for s in config.topic_synonyms("retention.ms")] == [("5000", STATIC_BROKER_CONFIG)]
    config.update(DEFAULT_ENTITY, {"log.retention.ms": "7000", "broker.id": "9"})  # read-only keys ignored
    config.update("1", {"log.retention.ms": "8000"})
    assert [(s.value, s.source) for s in config.topic_synonyms("retention.ms")] == [
        ("8000", DYNAMIC_BROKER_CONFIG), ("7000", DYNAMIC_DEFAULT_BROKER_CONFIG), ("5000", STATIC_BROKER_CONFIG)]
    assert config.log_config().retention_ms == 8000
    assert config.value("broker.id") == "1"
    assert config.topic_synonyms("segment.ms")[0].source == DEFAULT_CONFIG
    assert list(config.describe(per_broker=False)) == ["log.retention.ms"]  # the <default> resource


def _ops(*ops: tuple[str, int, str | None]) -> list[SimpleNamespace]:
    return [SimpleNamespace(name=n, config_operation=o, value=v) for n, o, v in ops]


def test_incremental_operations_on_list_and_scalar_configs() -> None:
    topic = (azk.TOPICS, "t")
    assert _incremental(topic, {"retention.ms": "5"}, _ops(("cleanup.policy", APPEND, "compact"),
                                                          ("retention.ms", DELETE, None))) == {
        "cleanup.policy": "delete,compact"}
    assert _incremental(topic, {"cleanup.policy": "compact,delete"}, _ops(("cleanup.policy", SUBTRACT, "delete"))) \
        == {"cleanup.policy": "compact"}
    for ops, words in [(_ops(("retention.ms", APPEND, "5")), "retention.ms"),
                       (_ops(("retention.ms", SET, "5"), ("retention.ms", SET, "6")), "duplicate"),
                       (_ops(("no.such", SET, "1")), "no.such"),
                       (_ops(("cleanup.policy", SUBTRACT, "delete")), "cleanup.policy")]:
        with pytest.raises(TopicError, match=words):
            _incremental(topic, {}, ops)
    with pytest.raises(TopicError, match="dynamically: broker.id"):
        _incremental((azk.BROKERS, "1"), {}, _ops(("broker.id", SET, "2")))
    assert _incremental((azk.BROKERS, DEFAULT_ENTITY), {}, _ops(("log.retention.ms", SET, "9"))) == {
        "log.retention.ms": "9"}


def test_topic_names_that_collide_or_are_reserved() -> None:
    with pytest.raises(TopicError) as info:
        validate_new_topic_name("a.b", ["a_b", "c"])
    assert info.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert str(info.value) == "Topic 'a.b' collides with existing topics: a_b"
    validate_new_topic_name("ab", lambda: pytest.fail("topics read for a name without '.' or '_'"))
    for name in ("__consumer_offsets", "__transaction_state", "__odradek_x"):
        with pytest.raises(TopicError):
            validate_new_topic_name(name, [])
    validate_new_topic_name(MARKER_TOPIC, [])  # the Spark sink creates its own commit topic


def test_notifications_are_kafkas_v2_and_v1_is_read() -> None:
    assert azk.encode_notification("topics", "t") == b'{"version":2,"entity_path":"topics/t"}'
    assert azk.decode_notification(b'{"version":1,"entity_type":"brokers","entity_name":"<default>"}') == (
        "brokers", "<default>")
    assert azk.decode_notification(b"not json") is None


class _Result:
    def __init__(self, value: object = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error

    def get(self) -> object:
        if self.error is not None:
            raise self.error
        return self.value


class _FakeKazoo:
    """Just the calls purge_obsolete_notifications makes: znode ctimes, and deletions."""

    def __init__(self, ctimes: dict[str, int]) -> None:
        self.ctimes = ctimes
        self.deleted: list[str] = []

    def exists_async(self, path: str) -> _Result:
        ctime = self.ctimes.get(path.rsplit("/", 1)[1])
        return _Result(None if ctime is None else SimpleNamespace(ctime=ctime))

    def delete_async(self, path: str) -> _Result:
        self.deleted.append(path)
        return _Result()


def test_notifications_older_than_fifteen_minutes_are_purged() -> None:
    now = 100 * 60 * 1000
    kz = _FakeKazoo({"config_change_0000000001": now - azk.CHANGE_EXPIRATION_MS - 1,
                     "config_change_0000000002": now - azk.CHANGE_EXPIRATION_MS + 1000})
    children = [*kz.ctimes, "config_change_0000000003"]  # the last one already deleted by another broker
    assert azk.purge_obsolete_notifications(kz, children, now_ms=now) == 1
    assert kz.deleted == ["/config/changes/config_change_0000000001"]
