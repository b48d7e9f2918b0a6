"""`odradek configs` shows what kafka-configs.sh shows: a resource's own configs by their source
(a topic's inherited cluster default is not its own), null for an unset value, one line for
nothing, and Kafka's error names from the protocol's registry."""
from __future__ import annotations

from typing import Any

from odradek.admin.config_command import BROKER, TOPIC, _error, format_configs, shown_configs, unset_keys


def entry(name: str, value: str | None, source: str) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source, "read_only": False, "sensitive": False,
            "synonyms": [] if value is None else [{"name": name, "value": value, "source": source}]}


TOPIC_ENTRIES = [entry("segment.bytes", "1024", "DEFAULT_CONFIG"),
                 entry("retention.ms", "5000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                 entry("max.message.bytes", "2000", "DYNAMIC_TOPIC_CONFIG"),
                 entry("cleanup.policy", "compact", "DYNAMIC_TOPIC_CONFIG")]
BROKER_ENTRIES = [entry("log.retention.ms", "5000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                  entry("log.cleaner.backoff.ms", "1000", "DYNAMIC_BROKER_CONFIG"),
                  entry("broker.rack", None, "DEFAULT_CONFIG")]


def test_a_topic_shows_only_its_own_configs_sorted_and_all_with_all() -> None:
    assert [e["name"] for e in shown_configs(TOPIC_ENTRIES, TOPIC, "t", False)] == [
        "cleanup.policy", "max.message.bytes"]
    assert [e["name"] for e in shown_configs(TOPIC_ENTRIES, TOPIC, "t", True)] == [
        "cleanup.policy", "max.message.bytes", "retention.ms", "segment.bytes"]


def test_a_broker_shows_its_own_dynamic_configs_and_the_defaults_theirs() -> None:
    assert [e["name"] for e in shown_configs(BROKER_ENTRIES, BROKER, "1", False)] == ["log.cleaner.backoff.ms"]
    assert [e["name"] for e in shown_configs(BROKER_ENTRIES, BROKER, "", False)] == ["log.retention.ms"]


def test_only_a_key_the_resource_sets_itself_can_be_deleted() -> None:
    assert unset_keys(TOPIC_ENTRIES, TOPIC, "t", ["retention.ms", "cleanup.policy", "nope"]) == [
        "retention.ms", "nope"]
    assert unset_keys(BROKER_ENTRIES, BROKER, "1", ["log.cleaner.backoff.ms", "log.retention.ms"]) == [
        "log.retention.ms"]
    assert unset_keys(BROKER_ENTRIES, BROKER, "", ["log.retention.ms"]) == []


def test_an_unset_value_prints_as_null_never_none() -> None:
    text = format_configs("broker 1", shown_configs(BROKER_ENTRIES, BROKER, "1", True), True, BROKER, "1")
    assert "  broker.rack=null sensitive=false synonyms={}" in text.splitlines()
    assert "None" not in text


def test_nothing_set_says_so() -> None:
    assert format_configs("topic t", [], False, TOPIC, "t") == "no configs set on topic t; --all shows every config"
    assert format_configs("broker 2", [], False, BROKER, "2") == \
        "no dynamic configs set on broker 2; --all shows every config"
    assert format_configs("the cluster-wide broker defaults", [], True, BROKER, "") == \
        "no cluster-wide broker defaults set"


def test_error_names_come_from_the_protocol_registry() -> None:
    assert str(_error(3, "Topic t does not exist", "")) == "UNKNOWN_TOPIC_OR_PARTITION: Topic t does not exist"
    assert str(_error(40, None, "cannot alter 't'")) == "INVALID_CONFIG: cannot alter 't'"
    assert str(_error(9999, "odd", "")) == "error code 9999: odd"
