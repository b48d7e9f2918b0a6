"""`odradek topics` in the shapes kafka-topics.sh users type, with the real command on a real
cluster: --topic wherever a topic is positional, partitions and replication factor left to the
brokers' num.partitions and default.replication.factor, several topics or a regular expression
in `describe`, every topic's outcome of a multi-topic `delete`, --if-exists, a --json list
always, empty results said in words, and Kafka's error names."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from cli_helpers import assert_one_line_error, run
from client_helpers import produce
from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

#: the brokers' defaults for a topic created without them: not librdkafka's or Kafka's (1 and 1)
NUM_PARTITIONS, DEFAULT_RF = 4, 2


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("shapes"), 3, num_partitions=NUM_PARTITIONS,
                      default_replication_factor=DEFAULT_RF)
    try:
        yield c
    finally:
        c.down()


def topics(cluster: LocalCluster, *args: str) -> tuple[int, str, str]:
    """`odradek topics ARGS` against the cluster: (exit status, stdout, stderr)."""
    proc = run("topics", *args, "--bootstrap-server", cluster.bootstrap_servers)
    return proc.returncode, proc.stdout, proc.stderr


def described(cluster: LocalCluster, *args: str) -> dict[str, list[dict]]:
    """`topics describe ARGS --json` as topic -> its partitions (the list the README documents)."""
    status, out, err = topics(cluster, "describe", *args, "--json")
    assert status == 0, err
    shown = json.loads(out)
    assert isinstance(shown, list)
    return {t["name"]: t["partitions"] for t in shown}


def test_an_empty_cluster_says_so_and_a_topic_takes_the_brokers_defaults(cluster: LocalCluster) -> None:
    assert topics(cluster, "list", "--exclude-internal") == (0, "no topics other than internal ones\n", "")
    assert topics(cluster, "describe") == (0, "no topics\n", "")
    assert topics(cluster, "list", "--json") == (0, "[]\n", "")
    assert topics(cluster, "describe", "--json") == (0, "[]\n", "")

    created = topics(cluster, "create", "shp-defaults")
    assert created == (0, f"created topic shp-defaults ({NUM_PARTITIONS} partitions, replication factor "
                          f"{DEFAULT_RF})\n", "")
    # one of the two given, the other the broker's
    assert topics(cluster, "create", "--topic", "shp-rf3", "--replication-factor", "3")[1] == (
        f"created topic shp-rf3 ({NUM_PARTITIONS} partitions, replication factor 3)\n")
    assert topics(cluster, "create", "shp-p2", "--partitions", "2")[1] == (
        f"created topic shp-p2 (2 partitions, replication factor {DEFAULT_RF})\n")
    shapes = {name: (len(parts), {len(p["replicas"]) for p in parts})
              for name, parts in described(cluster, "shp-defaults", "shp-rf3", "shp-p2").items()}
    assert shapes == {"shp-defaults": (NUM_PARTITIONS, {DEFAULT_RF}), "shp-rf3": (NUM_PARTITIONS, {3}),
                      "shp-p2": (2, {DEFAULT_RF})}


def test_topic_given_as_kafka_topics_sh_spells_it(cluster: LocalCluster) -> None:
    assert topics(cluster, "create", "--topic", "shp-opt", "--partitions", "1", "--replication-factor", "3")[0] == 0
    produce(cluster.bootstrap_servers, "shp-opt", [(None, b"v%d" % i, None) for i in range(5)])
    assert list(described(cluster, "--topic", "shp-opt")) == ["shp-opt"]
    status, out, err = topics(cluster, "alter", "--topic", "shp-opt", "--partitions", "2")
    assert (status, out) == (0, "topic shp-opt now has 2 partitions\n"), err
    status, out, err = topics(cluster, "delete-records", "--topic", "shp-opt", "--partition", "0", "--all", "--json")
    assert status == 0 and json.loads(out)[0]["low_watermark"] == 5, err
    assert_one_line_error(run("topics", "alter", "shp-opt", "--topic", "shp-opt", "--partitions", "3"), 2,
                          "--topic", "not allowed with")
    # kafka-console-producer.sh's and kafka-console-consumer.sh's --topic
    sent = run("produce", "--topic", "shp-opt", "--partition", "1", "--bootstrap-server", cluster.bootstrap_servers,
               stdin="by-option\n")
    assert sent.returncode == 0, sent.stderr
    read = run("consume", "--topic", "shp-opt", "--partition", "1", "--from-beginning", "--max-messages", "1",
               "--bootstrap-server", cluster.bootstrap_servers)
    assert (read.returncode, read.stdout) == (0, "by-option\n"), read.stderr
    assert topics(cluster, "delete", "--topic", "shp-opt") == (0, "deleted topic shp-opt\n", "")
    assert "shp-opt" not in described(cluster)


def test_describe_several_topics_or_a_pattern(cluster: LocalCluster) -> None:
    for name in ("shp-many-a", "shp-many-b", "shp-other"):
        assert topics(cluster, "create", name, "--partitions", "1", "--replication-factor", "1")[0] == 0
    assert list(described(cluster, "shp-many-b", "shp-other")) == ["shp-many-b", "shp-other"]
    assert list(described(cluster, "shp-many-.*")) == ["shp-many-a", "shp-many-b"]
    assert list(described(cluster, "--topic", "shp-many-a,shp-other")) == ["shp-many-a", "shp-other"]
    assert list(described(cluster, "shp-many-a")) == ["shp-many-a"]  # a list of one, not an object
    # the table has every topic's rows; a name that matches nothing fails the command after it
    status, out, err = topics(cluster, "describe", "shp-many-a", "shp-nosuch", "shp-none-.*")
    assert status == 1 and out.splitlines()[1].split()[0] == "shp-many-a" and len(out.splitlines()) == 2
    assert err == ("odradek: error: topics 'shp-nosuch', 'shp-none-.*' do not exist (odradek topics list "
                   "shows the topics)\n")
    assert topics(cluster, "describe", "shp-many-a", "--under-replicated", "--offline") == (
        0, "no under-replicated or offline partitions\n", "")
    assert_one_line_error(run("topics", "describe", "shp-(", "--bootstrap-server", cluster.bootstrap_servers), 1,
                          "neither a topic name nor a regular expression")


def test_delete_reports_every_topic(cluster: LocalCluster) -> None:
    for name in ("shp-del-a", "shp-del-b"):
        assert topics(cluster, "create", name, "--partitions", "1", "--replication-factor", "1")[0] == 0
    status, out, err = topics(cluster, "delete", "shp-del-a", "shp-nosuch")
    assert (status, out) == (1, "deleted topic shp-del-a\n")
    assert err == "odradek: error: topic 'shp-nosuch' does not exist (odradek topics list shows the topics)\n"
    assert "shp-del-a" not in described(cluster)
    assert topics(cluster, "delete", "shp-del-b", "shp-nosuch", "--if-exists") == (
        0, "deleted topic shp-del-b\ntopic 'shp-nosuch' does not exist: nothing to delete\n", "")
    assert topics(cluster, "alter", "shp-nosuch", "--partitions", "3", "--if-exists") == (
        0, "topic 'shp-nosuch' does not exist: nothing altered\n", "")


def test_errors_carry_kafkas_names(cluster: LocalCluster) -> None:
    proc = run("topics", "alter", "shp-nosuch", "--partitions", "3", "--bootstrap-server", cluster.bootstrap_servers)
    assert_one_line_error(proc, 1, "UNKNOWN_TOPIC_OR_PARTITION: ")
    assert "UNKNOWN_TOPIC_OR_PART:" not in proc.stderr
    assert topics(cluster, "create", "shp-dup", "--partitions", "1")[0] == 0
    assert_one_line_error(run("topics", "create", "shp-dup", "--bootstrap-server", cluster.bootstrap_servers), 1,
                          "TOPIC_ALREADY_EXISTS: ")
    assert topics(cluster, "create", "shp-dup", "--if-not-exists") == (0, "topic shp-dup already exists\n", "")
