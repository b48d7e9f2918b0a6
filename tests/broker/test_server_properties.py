"""Reading Kafka's server.properties keys (BrokerConfig.from_file, parse_properties): the
listener keys, Kafka's precedence of the retention units, unknown keys warned about, and
the values odradek refuses. A broker started from such a file: tests/integration/test_broker_properties.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, parse_properties


@pytest.mark.parametrize("text, address", [
    ("listeners=PLAINTEXT://10.0.0.1:9093", ("10.0.0.1", 9093)),
    ("listeners=PLAINTEXT://0.0.0.0:9092\nadvertised.listeners=PLAINTEXT://kafka1.example:9092",
     ("kafka1.example", 9092)),
    ("listeners=PLAINTEXT://[::1]:9092", ("::1", 9092)),
    ("host.name=h1\nport=9094", ("h1", 9094)),
    ("host.name=h1", ("h1", 9092)),
    ("advertised.host.name=h2\nport=9095", ("h2", 9095)),
])
def test_the_listener_keys_give_the_address_the_broker_binds_and_registers(
        text: str, address: tuple[str, int]) -> None:
    values, unknown = parse_properties(text)
    assert (values["host"], values["port"]) == address and unknown == []
    assert "advertised_host" not in values and "advertised_port" not in values


@pytest.mark.parametrize("text, bound, advertised", [
    ("listeners=PLAINTEXT://h:9092\nadvertised.listeners=PLAINTEXT://h:9093", ("h", 9092), ("h", 9093)),
    ("listeners=PLAINTEXT://h1:9092\nadvertised.listeners=PLAINTEXT://h2:9092", ("h1", 9092), ("h2", 9092)),
    ("listeners=PLAINTEXT://0.0.0.0:9092\nadvertised.listeners=PLAINTEXT://kafka1:29092",
     ("kafka1", 9092), ("kafka1", 29092)),
    ("host.name=h1\nport=9092\nadvertised.port=29092", ("h1", 9092), ("h1", 29092)),
])
def test_an_advertised_address_other_than_the_listener_is_registered_for_a_port_forward(
        text: str, bound: tuple[str, int], advertised: tuple[str, int]) -> None:
    values, _ = parse_properties(text)
    assert (values["host"], values["port"]) == bound
    assert (values["advertised_host"], values["advertised_port"]) == advertised


@pytest.mark.parametrize("text, fragment", [
    ("listeners=PLAINTEXT://0.0.0.0:9092", "wildcard"),
    ("listeners=CLIENTS://h:9092", "CLIENTS has no security protocol"),
    ("listeners=PLAINTEXT://h:9092,PLAINTEXT://h:9093", "given twice"),
    ("listeners=A://h:9092,SSL://h:9093\nlistener.security.protocol.map=A:PLAINTEXT,SSL:SSL\n"
     "inter.broker.listener.name=B", "inter.broker.listener.name=B: no listener of that name"),
    ("listeners=A://h:9092\nlistener.security.protocol.map=A:TLS", "NAME:PROTOCOL"),
    ("listeners=A://h:9092,B://h:9092\nlistener.security.protocol.map=A:SSL,B:SSL\n"
     "inter.broker.listener.name=A", "the same address"),
    ("listeners=PLAINTEXT://h:9092\nadvertised.listeners=SSL://h:9093", "SSL is not one of the listeners"),
    ("listeners=PLAINTEXT://h:x", "not a number"),
    ("log.dirs=/a,/b", "one directory"),
    ("num.partitions=two", "num.partitions=two: an integer is expected"),
    ("delete.topic.enable=yes", "true or false"),
    ("min.insync.replicas=0", "min.insync.replicas must be at least 1"),
    ("log.message.timestamp.type=Now", "log.message.timestamp.type"),
    ("broker.id 1", "line 1"),
])
def test_a_value_odradek_cannot_use_is_refused_with_its_key(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_properties(text)


def test_retention_units_follow_kafkas_precedence() -> None:
    assert parse_properties("log.retention.ms=5\nlog.retention.hours=1")[0]["log_retention_ms"] == 5
    assert parse_properties("log.retention.hours=1\nlog.retention.minutes=2")[0]["log_retention_ms"] == 120_000
    assert parse_properties("log.retention.hours=-1\nlog.roll.hours=2")[0] == {
        "log_retention_ms": -1, "log_roll_ms": 7_200_000}


def test_unknown_keys_are_one_warning_and_a_missing_key_names_them(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"broker.id=3\nlisteners=PLAINTEXT://h:9092\nlog.dirs={tmp_path}\nzookeeper.connect=zk:2181/k\n"
                     "num.io.threads=8\nqueued.max.requests=9\nlog.cleanup.policy=compact\n")
    warnings: list[str] = []
    config = BrokerConfig.from_file(props, warnings.append)
    assert (config.broker_id, config.zookeeper, config.data_dir, config.log_cleanup_policy) == (
        3, "zk:2181/k", tmp_path, "compact")
    assert len(warnings) == 1 and "num.io.threads, queued.max.requests" in warnings[0]
    props.write_text("broker.idd=3\n")
    with pytest.raises(ValueError, match=r"missing broker.id, listeners, zookeeper.connect, log.dirs \(.*broker.idd"):
        BrokerConfig.from_file(props, warnings.append)
    # flags win over the file, and stand in for what it lacks
    config = BrokerConfig.from_file(props, warnings.append, broker_id=4, host="h", port=1, zookeeper="zk",
                                    data_dir=tmp_path)
    assert config.broker_id == 4
