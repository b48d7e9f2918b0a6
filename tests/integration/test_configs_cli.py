"""`odradek configs` as kafka-configs.sh, against one real 3-broker cluster: describe lists what a
topic or broker sets itself (a value a topic inherits from a cluster-wide default is not its
own; --all shows every config with its source), a --delete really removes the entry (ZooKeeper,
the CLI and confluent-kafka's describe_configs all show the next layer's value afterwards) and is
refused for a key not set, an unset broker.rack reads null, never "None", and nothing set says so.

The cluster-wide defaults a test sets are removed again before it ends: the module's tests share
the cluster.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from clients import create_topic
from confluent_kafka.admin import AdminClient, ConfigResource

from cli_helpers import assert_one_line_error, run
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk import paths

pytestmark = pytest.mark.integration

# Kafka's ConfigSource numbers, as confluent-kafka's ConfigEntry.source gives them
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 3, 5


def configs(cluster: LocalCluster, *args: str) -> Any:
    """`odradek configs ARGS` that must succeed: its stdout, parsed when --json was given."""
    done = run("configs", *args, "--bootstrap-server", cluster.bootstrap_servers)
    assert done.returncode == 0 and done.stderr == "", done
    return json.loads(done.stdout) if "--json" in args else done.stdout


def client_view(cluster: LocalCluster, kind: str, name: str) -> dict[str, tuple[str | None, int]]:
    """name -> (value, source) as confluent-kafka's AdminClient.describe_configs reports them."""
    resource = ConfigResource(kind, name)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    entries = admin.describe_configs([resource])[resource].result(30)
    return {k: (e.value, int(e.source)) for k, e in entries.items()}


@contextmanager
def cluster_default(cluster: LocalCluster, key: str, value: str) -> Iterator[None]:
    """A cluster-wide broker default set through the CLI for the block, then deleted again."""
    configs(cluster, "alter", "--broker-defaults", "--set", f"{key}={value}")
    try:
        yield
    finally:
        configs(cluster, "alter", "--broker-defaults", "--delete", key)


def test_describe_lists_what_the_resource_sets_itself_and_all_every_config(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "cfg-own", 1, 3, {"max.message.bytes": "2000"})
    create_topic(cluster.bootstrap_servers, "cfg-none", 1, 3)
    with cluster_default(cluster, "log.cleaner.delete.retention.ms", "86400001"):
        assert configs(cluster, "describe", "--topic", "cfg-own") == (
            "Dynamic configs for topic cfg-own are:\n"
            "  max.message.bytes=2000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=2000, "
            f"DEFAULT_CONFIG:message.max.bytes={1024 * 1024 + 12}}}\n")
        own = configs(cluster, "describe", "--topic", "cfg-own", "--json")
        assert [(e["name"], e["value"], e["source"]) for e in own] == [
            ("max.message.bytes", "2000", "DYNAMIC_TOPIC_CONFIG")]
        every = {e["name"]: e for e in configs(cluster, "describe", "--topic", "cfg-own", "--all", "--json")}
        assert (every["delete.retention.ms"]["value"], every["delete.retention.ms"]["source"]) == (
            "86400001", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        assert every["segment.bytes"]["source"] == "DEFAULT_CONFIG"
        assert set(every["max.message.bytes"]) == {"name", "value", "source", "read_only", "sensitive", "synonyms"}
        seen = client_view(cluster, "topic", "cfg-own")
        assert seen["delete.retention.ms"] == ("86400001", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert seen["max.message.bytes"] == ("2000", DYNAMIC_TOPIC_CONFIG)

        # a topic setting nothing, and a broker with no dynamic config of its own: the cluster
        # default is theirs only by inheritance
        assert configs(cluster, "describe", "--topic", "cfg-none") == \
            "no configs set on topic cfg-none; --all shows every config\n"
        assert configs(cluster, "describe", "--topic", "cfg-none", "--json") == []
        assert configs(cluster, "describe", "--broker", "1") == \
            "no dynamic configs set on broker 1; --all shows every config\n"
        assert configs(cluster, "describe", "--broker-defaults") == (
            "Dynamic configs for the cluster-wide broker defaults are:\n"
            "  log.cleaner.delete.retention.ms=86400001 sensitive=false "
            "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.delete.retention.ms=86400001}\n")
    assert configs(cluster, "describe", "--broker-defaults") == "no cluster-wide broker defaults set\n"


def test_delete_removes_the_topics_own_value_while_a_cluster_default_holds(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "cfg-del", 1, 3, {"retention.ms": "60000"})
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        with cluster_default(cluster, "log.retention.ms", "1209600000"):
            done = run("configs", "alter", "--topic", "cfg-del", "--delete", "retention.ms",
                       "--bootstrap-server", cluster.bootstrap_servers)
            assert (done.returncode, done.stdout) == (0, "altered configs of topic cfg-del: -retention.ms\n"), done
            data, stat = zk.get(paths.topic_config_path("cfg-del"))
            assert "retention.ms" not in paths.decode_topic_config(data)
            assert configs(cluster, "describe", "--topic", "cfg-del") == \
                "no configs set on topic cfg-del; --all shows every config\n"
            # the value now comes from the cluster default, and says so
            assert client_view(cluster, "topic", "cfg-del")["retention.ms"] == (
                "1209600000", DYNAMIC_DEFAULT_BROKER_CONFIG)

            # kafka-configs.sh's rule: a key the topic does not set cannot be deleted, and nothing is written
            again = run("configs", "alter", "--topic", "cfg-del", "--delete", "retention.ms",
                        "--bootstrap-server", cluster.bootstrap_servers)
            assert_one_line_error(again, 1, "Invalid config(s): retention.ms", "topic cfg-del")
            assert again.stdout == ""
            by_topics = run("topics", "alter", "cfg-del", "--delete-config", "retention.ms",
                            "--bootstrap-server", cluster.bootstrap_servers)  # kafka-topics.sh's way, same rule
            assert_one_line_error(by_topics, 1, "Invalid config(s): retention.ms", "topic cfg-del")
            assert zk.get(paths.topic_config_path("cfg-del"))[1].version == stat.version
    finally:
        zk.stop()
        zk.close()
    every = {e["name"]: e for e in configs(cluster, "describe", "--topic", "cfg-del", "--all", "--json")}
    assert (every["retention.ms"]["value"], every["retention.ms"]["source"]) == ("604800000", "DEFAULT_CONFIG")
    assert client_view(cluster, "topic", "cfg-del")["retention.ms"] == ("604800000", DEFAULT_CONFIG)


def test_a_broker_config_is_set_and_deleted(cluster: LocalCluster) -> None:
    configs(cluster, "alter", "--broker", "2", "--set", "log.cleaner.backoff.ms=1000")
    assert configs(cluster, "describe", "--broker", "2", "--json") == [
        {"name": "log.cleaner.backoff.ms", "value": "1000", "source": "DYNAMIC_BROKER_CONFIG",
         "read_only": False, "sensitive": False,
         "synonyms": [{"name": "log.cleaner.backoff.ms", "value": "1000", "source": "DYNAMIC_BROKER_CONFIG"},
                      {"name": "log.cleaner.backoff.ms", "value": "15000", "source": "DEFAULT_CONFIG"}]}]
    assert client_view(cluster, "broker", "2")["log.cleaner.backoff.ms"] == ("1000", DYNAMIC_BROKER_CONFIG)
    assert configs(cluster, "describe", "--broker", "3", "--json") == []  # broker 2's own, not broker 3's

    configs(cluster, "alter", "--broker", "2", "--delete", "log.cleaner.backoff.ms")
    assert configs(cluster, "describe", "--broker", "2") == \
        "no dynamic configs set on broker 2; --all shows every config\n"
    assert client_view(cluster, "broker", "2")["log.cleaner.backoff.ms"] == ("15000", DEFAULT_CONFIG)
    assert_one_line_error(run("configs", "alter", "--broker", "2", "--delete", "log.cleaner.backoff.ms",
                              "--bootstrap-server", cluster.bootstrap_servers),
                          1, "Invalid config(s): log.cleaner.backoff.ms", "broker 2")


def test_an_unset_broker_rack_reads_null_never_none(cluster: LocalCluster) -> None:
    text = configs(cluster, "describe", "--broker", "1", "--all")
    assert "  broker.rack=null sensitive=false synonyms={}" in text.splitlines()
    assert "None" not in text
    every = {e["name"]: e for e in configs(cluster, "describe", "--broker", "1", "--all", "--json")}
    assert (every["broker.rack"]["value"], every["broker.rack"]["synonyms"]) == (None, [])
    assert client_view(cluster, "broker", "1")["broker.rack"] == (None, DEFAULT_CONFIG)


def test_config_mistakes_are_one_line(cluster: LocalCluster) -> None:
    bs = ("--bootstrap-server", cluster.bootstrap_servers)
    create_topic(cluster.bootstrap_servers, "cfg-bad", 1, 3, {"retention.ms": "60000"})
    for args, fragments in [
        (("describe", "--topic", "cfg-nowhere"), ("UNKNOWN_TOPIC_OR_PARTITION", "cfg-nowhere")),
        (("alter", "--topic", "cfg-nowhere", "--delete", "retention.ms"), ("UNKNOWN_TOPIC_OR_PARTITION",)),
        (("alter", "--broker-defaults", "--delete", "log.retention.ms"),
         ("Invalid config(s): log.retention.ms", "cluster-wide broker defaults")),
        (("alter", "--topic", "cfg-bad", "--set", "retention.ms=1", "--delete", "retention.ms"),
         ("retention.ms given more than once",)),
        (("alter", "--topic", "cfg-bad", "--set", "retention.ms=1", "--set", "retention.ms=2"),
         ("retention.ms given more than once",)),
        (("alter", "--topic", "cfg-bad", "--set", "retention.ms=soon"), ("INVALID_CONFIG", "retention.ms")),
    ]:
        failed = run("configs", *args, *bs)
        assert_one_line_error(failed, 1, *fragments)
        assert failed.stdout == ""
    assert client_view(cluster, "topic", "cfg-bad")["retention.ms"] == ("60000", DYNAMIC_TOPIC_CONFIG)
