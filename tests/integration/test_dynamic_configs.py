"""Dynamic configs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, /config/changes) and
CreateTopics' name rules, on real brokers with confluent-kafka, raw requests and the CLI.

A config change is observed through what the brokers do (a produce refused with
MESSAGE_TOO_LARGE or NOT_ENOUGH_REPLICAS by each partition's leader), not only through
DescribeConfigs; each topic has one partition led by each broker, so every broker must apply it.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from clients import create_topic
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from wire import RawConnection

from odradek.admin.admin_client import elect_leaders
from odradek.admin.config_command import BROKER, TOPIC, alter, describe
from odradek.admin.errors import AdminError
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

ODRADEK = str(Path(sys.executable).parent / "odradek")
MESSAGE_TOO_LARGE, NOT_ENOUGH_REPLICAS, INVALID_TOPIC, UNKNOWN_TOPIC, INVALID_CONFIG = 10, 19, 17, 3, 40


def produce_errors(bootstrap: str, topic: str, partitions: int, size: int) -> dict[int, int]:
    """Error code (0: none) of one acks=all record of `size` bytes sent to each partition, unretried."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 0,
                         "message.timeout.ms": 10000})
    codes: dict[int, int] = {}
    for p in range(partitions):
        producer.produce(topic, b"x" * size, partition=p,
                         on_delivery=lambda e, m: codes.__setitem__(m.partition(), e.code() if e else 0))
    producer.flush(30)
    return codes


def wait_for_errors(bootstrap: str, topic: str, partitions: int, size: int, expected: int) -> None:
    deadline = time.monotonic() + 30
    while (codes := produce_errors(bootstrap, topic, partitions, size)) != dict.fromkeys(range(partitions), expected):
        assert time.monotonic() < deadline, f"{topic}: produce errors {codes}, expected {expected} everywhere"
        time.sleep(0.2)


def topic_led_by_every_broker(cluster: LocalCluster, name: str, config: dict[str, str] | None = None) -> None:
    create_topic(cluster.bootstrap_servers, name, len(cluster.broker_ids), 3, config)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deadline = time.monotonic() + 30
    while {p.leader for p in admin.list_topics(name, timeout=10).topics[name].partitions.values()} \
            != set(cluster.broker_ids):
        assert time.monotonic() < deadline, "the partitions' leaders are not one per broker"
        time.sleep(0.2)


def incremental(admin: AdminClient, kind: Any, name: str, *ops: tuple[str, str | None, Any],
                validate_only: bool = False) -> None:
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops])
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(30)


def kafka_error(fn: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(KafkaException) as info:
        fn()
    err = info.value.args[0]
    return err.code(), err.str()


def test_a_topic_config_change_applies_on_every_broker_without_a_restart(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic_led_by_every_broker(cluster, "dyn-live")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert produce_errors(bootstrap, "dyn-live", 3, 2000) == {0: 0, 1: 0, 2: 0}
    incremental(admin, ConfigResource.Type.TOPIC, "dyn-live", ("max.message.bytes", "1000", AlterConfigOpType.SET))
    wait_for_errors(bootstrap, "dyn-live", 3, 2000, MESSAGE_TOO_LARGE)
    assert produce_errors(bootstrap, "dyn-live", 3, 100) == {0: 0, 1: 0, 2: 0}

    # the legacy AlterConfigs replaces the whole config: max.message.bytes goes back to its default
    resource = ConfigResource(ConfigResource.Type.TOPIC, "dyn-live", set_config={"min.insync.replicas": "4"})
    admin.alter_configs([resource])[resource].result(30)
    wait_for_errors(bootstrap, "dyn-live", 3, 2000, NOT_ENOUGH_REPLICAS)
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "dyn-live")])
    described = next(iter(configs.values())).result(30)
    assert described["min.insync.replicas"].value == "4" and described["min.insync.replicas"].source == 1
    assert described["max.message.bytes"].source == 5  # DEFAULT_CONFIG again

    incremental(admin, ConfigResource.Type.TOPIC, "dyn-live", ("min.insync.replicas", None, AlterConfigOpType.DELETE))
    wait_for_errors(bootstrap, "dyn-live", 3, 2000, 0)


def test_a_cluster_default_broker_config_reaches_topics_without_their_own(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic_led_by_every_broker(cluster, "dyn-default")
    create_topic(bootstrap, "dyn-own", 1, 3, {"max.message.bytes": "5000"})
    alter(bootstrap, BROKER, "", {"message.max.bytes": "1000"}, [])
    try:
        wait_for_errors(bootstrap, "dyn-default", 3, 2000, MESSAGE_TOO_LARGE)
        assert produce_errors(bootstrap, "dyn-own", 1, 2000) == {0: 0}  # its own setting wins
        entry = next(e for e in describe(bootstrap, TOPIC, "dyn-default") if e["name"] == "max.message.bytes")
        assert entry["value"] == "1000" and entry["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
        assert entry["synonyms"] == [
            {"name": "message.max.bytes", "value": "1000", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG"},
            {"name": "message.max.bytes", "value": str(1024 * 1024 + 12), "source": "DEFAULT_CONFIG"}]
        broker = {e["name"]: e for e in describe(bootstrap, BROKER, "2")}
        assert broker["message.max.bytes"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
        assert broker["zookeeper.session.timeout.ms"]["source"] == "STATIC_BROKER_CONFIG"
        assert broker["broker.id"]["read_only"] and not broker["log.retention.ms"]["read_only"]
    finally:
        alter(bootstrap, BROKER, "", {}, ["message.max.bytes"])
    wait_for_errors(bootstrap, "dyn-default", 3, 2000, 0)


def test_bad_config_changes_are_refused_and_change_nothing(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "dyn-bad", 1, 3, {"retention.ms": "1000000"})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        def stored() -> tuple[bytes, list[str]]:
            return zk.get("/config/topics/dyn-bad")[0], sorted(zk.get_children("/config/changes"))

        before = stored()
        t, b, set_, append = ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER, AlterConfigOpType.SET, \
            AlterConfigOpType.APPEND
        for kind, name, ops, code, words in [
            (t, "dyn-bad", [("no.such.config", "1", set_)], INVALID_CONFIG, "no.such.config"),
            (t, "dyn-bad", [("retention.ms", "5", set_), ("segment.bytes", "abc", set_)], INVALID_CONFIG,
             "segment.bytes"),
            (t, "dyn-bad", [("retention.ms", "5", append)], INVALID_CONFIG, "retention.ms"),
            (t, "dyn-bad", [("cleanup.policy", "shred", set_)], INVALID_CONFIG, "cleanup.policy"),
            (t, "dyn-missing", [("retention.ms", "5", set_)], UNKNOWN_TOPIC, "dyn-missing"),
            (t, "../dyn-bad", [("retention.ms", "5", set_)], INVALID_TOPIC, "characters"),
            (b, "1", [("broker.id", "7", set_)], INVALID_CONFIG, "broker.id"),
            (b, "1", [("min.insync.replicas", "0", set_)], INVALID_CONFIG, "min.insync.replicas"),
        ]:
            got = kafka_error(lambda: incremental(admin, kind, name, *ops))
            assert got[0] == code and words in got[1], (ops, got)
        legacy = ConfigResource(t, "dyn-bad", set_config={"retention.ms": "soon"})
        got = kafka_error(lambda: admin.alter_configs([legacy])[legacy].result(30))
        assert got[0] == INVALID_CONFIG and "retention.ms" in got[1]
        incremental(admin, t, "dyn-bad", ("retention.ms", "5", set_), validate_only=True)
        assert stored() == before
        assert describe(bootstrap, TOPIC, "dyn-bad", keys=["retention.ms"])[0]["value"] == "1000000"
        with pytest.raises(AdminError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            describe(bootstrap, TOPIC, "../dyn-bad")
    finally:
        zk.stop()
        zk.close()


def test_colliding_internal_and_reserved_topic_names_are_refused(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    create_topic(cluster.bootstrap_servers, "dyn.names", 1, 1)
    futures = admin.create_topics([NewTopic(n, 1, 1) for n in
                                   ("dyn_names", "dyn.pair", "dyn_pair", "__consumer_offsets",
                                    "__transaction_state", "__odradek_mine")])
    errors = {}
    for name, future in futures.items():
        try:
            future.result(30)
            errors[name] = None
        except KafkaException as exc:
            errors[name] = (exc.args[0].code(), exc.args[0].str())
    assert errors["dyn_names"] == (INVALID_TOPIC, "Topic 'dyn_names' collides with existing topics: dyn.names")
    assert errors["dyn.pair"] is None  # the first of a colliding pair in one request is created
    assert errors["dyn_pair"] == (INVALID_TOPIC, "Topic 'dyn_pair' collides with existing topics: dyn.pair")
    for name in ("__consumer_offsets", "__transaction_state"):
        assert errors[name][0] == INVALID_TOPIC and "internal topic" in errors[name][1]
    assert errors["__odradek_mine"][0] == INVALID_TOPIC and "reserved" in errors["__odradek_mine"][1]
    assert "dyn_names" not in admin.list_topics(timeout=10).topics


def test_create_topics_answers_the_configs_the_topic_will_have(cluster: LocalCluster) -> None:
    """CreateTopics v5+ lists each config with its source: the topic's own, else its broker
    synonym's value (odradek's log.segment.bytes default is 128 MiB, not Kafka's 1 GiB)."""
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    conn = RawConnection(host, int(port))
    try:
        response = conn.request(19, 7, {"topics": [{"name": "dyn-planned", "num_partitions": 1,
                                                    "replication_factor": 1, "assignments": [],
                                                    "configs": [{"name": "retention.ms", "value": "5000"}]}],
                                        "timeout": 10000, "validate_only": True})
    finally:
        conn.close()
    configs = {c.name: (c.value, int(c.config_source)) for c in response.topics[0].configs}
    assert configs["retention.ms"] == ("5000", 1) and configs["segment.bytes"] == (str(128 * 1024 * 1024), 5)


def odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ODRADEK, *args], capture_output=True, text=True, timeout=60)


def test_cli_alters_and_describes_topic_configs(cluster: LocalCluster) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap_servers)
    create_topic(cluster.bootstrap_servers, "dyn-cli", 1, 3)
    done = odradek("topics", "alter", "dyn-cli", "--config", "retention.ms=60000", "--config",
                   "max.message.bytes=2000", *bs)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "altered configs of topic dyn-cli: retention.ms=60000, max.message.bytes=2000\n"
    text = odradek("configs", "describe", "--topic", "dyn-cli", *bs).stdout.splitlines()
    assert text[0] == "Dynamic configs for topic dyn-cli are:"
    assert text[1].startswith("  max.message.bytes=2000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                              "max.message.bytes=2000, DEFAULT_CONFIG:message.max.bytes=")
    assert text[2].startswith("  retention.ms=60000 ") and len(text) == 3
    table = odradek("topics", "describe", "dyn-cli", *bs).stdout.splitlines()
    assert table[-1] == "Configs of topic dyn-cli: max.message.bytes=2000,retention.ms=60000"
    assert json.loads(odradek("topics", "describe", "dyn-cli", "--json", *bs).stdout)[0]["configs"] == {
        "max.message.bytes": "2000", "retention.ms": "60000"}

    assert odradek("topics", "alter", "dyn-cli", "--delete-config", "max.message.bytes", *bs).returncode == 0
    entries = json.loads(odradek("configs", "describe", "--topic", "dyn-cli", "--json", *bs).stdout)
    assert [(e["name"], e["value"], e["source"]) for e in entries] == [
        ("retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG")]
    every = json.loads(odradek("configs", "describe", "--topic", "dyn-cli", "--all", "--json", *bs).stdout)
    assert {e["name"] for e in every} >= {"cleanup.policy", "min.insync.replicas", "delete.retention.ms"}


def test_cli_alters_and_describes_a_broker_config(cluster: LocalCluster) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap_servers)
    assert odradek("configs", "alter", "--broker", "3", "--set", "log.cleaner.backoff.ms=1000", *bs).returncode == 0
    broker = json.loads(odradek("configs", "describe", "--broker", "3", "--json", *bs).stdout)
    assert broker == [{"name": "log.cleaner.backoff.ms", "value": "1000", "source": "DYNAMIC_BROKER_CONFIG",
                       "read_only": False, "sensitive": False,
                       "synonyms": [{"name": "log.cleaner.backoff.ms", "value": "1000", "source": "DYNAMIC_BROKER_CONFIG"},
                                    {"name": "log.cleaner.backoff.ms", "value": "15000", "source": "DEFAULT_CONFIG"}]}]
    assert odradek("configs", "alter", "--broker", "3", "--delete", "log.cleaner.backoff.ms", *bs).returncode == 0
    assert odradek("configs", "describe", "--broker-defaults", *bs).stdout == "no cluster-wide broker defaults set\n"


def test_cli_config_errors_are_one_line(cluster: LocalCluster) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap_servers)
    create_topic(cluster.bootstrap_servers, "dyn-cli-bad", 1, 3)
    for args, words in [
        (("configs", "alter", "--broker-defaults", "--set", "log.retention.ms=soon"), "INVALID_CONFIG"),
        (("topics", "alter", "dyn-nowhere", "--config", "retention.ms=1"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("topics", "alter", "dyn-cli-bad", "--config", "retention.msec=1"), "retention.msec"),
        (("topics", "alter", "dyn-cli-bad"), "nothing to change"),
    ]:
        failed = odradek(*args, *bs)
        assert failed.returncode == 1 and failed.stdout == "" and len(failed.stderr.splitlines()) == 1, failed
        assert failed.stderr.startswith("odradek: error: ") and words in failed.stderr


def test_a_broker_started_after_a_change_applies_it(cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(brokers=2)
    create_topic(c.bootstrap_servers, "dyn-late", 2, 2)
    c.kill_broker(2, signal.SIGTERM)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    incremental(admin, ConfigResource.Type.TOPIC, "dyn-late", ("max.message.bytes", "1000", AlterConfigOpType.SET))
    wait_for_errors(c.bootstrap_servers, "dyn-late", 2, 2000, MESSAGE_TOO_LARGE)  # broker 1 leads both
    c.start_broker(2)
    c.wait_ready([1, 2], timeout=60)
    deadline = time.monotonic() + 30
    while {p.leader for p in admin.list_topics("dyn-late", timeout=10).topics["dyn-late"].partitions.values()} \
            != {1, 2}:
        assert time.monotonic() < deadline, "broker 2 never led a partition again"
        elect_leaders(c.bootstrap_servers, [("dyn-late", 0), ("dyn-late", 1)], timeout=10)
        time.sleep(0.5)
    assert produce_errors(c.bootstrap_servers, "dyn-late", 2, 2000) == {0: MESSAGE_TOO_LARGE, 1: MESSAGE_TOO_LARGE}
