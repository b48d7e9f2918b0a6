"""The operator's side of KIP-253 with the real `odradek` command on a real cluster: `topics alter
--partitions` grows and shrinks a topic with enable.ordered.delivery=true (a lower count marks
the partitions past it for deletion), refuses a count below initial_partition_count and any
change while a deletion drains; `topics describe` shows the counts, each partition's parent and
the marked partitions with their records left; `produce` puts each key where linear hashing
says; a plain topic keeps Kafka's behaviour; a confluent-kafka AdminClient shrinks an ordered
topic through the same CreatePartitions path."""
from __future__ import annotations

import json
from typing import Any

import pytest
from clients import consume_all, create_topic
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from cli_helpers import assert_one_line_error, run
from odradek.admin.zookeeper import connect_zk
from odradek.client.ordered_metadata import OrderedMetadataClient, parse_bootstrap
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.linear_hashing import partition_for_key

pytestmark = pytest.mark.integration

ORDERED = "enable.ordered.delivery=true"


def odradek(cluster: LocalCluster, *args: str, stdin: str = "") -> Any:
    return run(*args, "--bootstrap-server", cluster.bootstrap_servers, stdin=stdin)


def every_broker_has(cluster: LocalCluster, topic: str, undeleted: int) -> bool:
    """Whether each broker's metadata has the topic's undeleted count (a producer asks any)."""
    for address in parse_bootstrap(cluster.bootstrap_servers):
        client = OrderedMetadataClient([address], "test")
        try:
            if client.counts([topic])[topic].undeleted_partition_count != undeleted:
                return False
        finally:
            client.close()
    return True


def described(cluster: LocalCluster, topic: str) -> dict[str, Any]:
    proc = odradek(cluster, "topics", "describe", topic, "--json")
    assert proc.returncode == 0, proc.stderr
    [shown] = json.loads(proc.stdout)
    return shown


def test_ordered_topic_grows_shrinks_and_describes_its_tree(cluster: LocalCluster) -> None:
    topic = "ocli-ord"
    proc = odradek(cluster, "topics", "create", topic, "--partitions", "4", "--replication-factor", "2",
                   "--config", ORDERED)
    assert proc.returncode == 0, proc.stderr

    proc = odradek(cluster, "topics", "alter", topic, "--partitions", "6")
    assert (proc.returncode, proc.stdout) == (
        0, f"{topic}: 4 -> 6 partitions; partition 4 takes keys from partition 0, partition 5 from 1\n"), proc.stderr
    wait_until(lambda: every_broker_has(cluster, topic, 6), 30, "every broker's count 6")

    # keyed lines go where linear hashing over (4, 6) puts them, not where h % 6 would
    keys = [f"key-{i}" for i in range(40)]
    expected = {k: partition_for_key(k.encode(), 4, 6) for k in keys}
    assert 5 in expected.values() and any(expected[k] != partition_for_key(k.encode(), 6, 6) for k in keys)
    proc = odradek(cluster, "produce", topic, "--key-separator", ":",
                   stdin="".join(f"{k}:v-{k}\n" for k in keys))
    assert proc.returncode == 0, proc.stderr
    got = consume_all(cluster.bootstrap_servers, topic, 6, len(keys), timeout_s=30)
    assert {key.decode(): partition for partition, _, key, _ in got} == expected

    proc = odradek(cluster, "topics", "alter", topic, "--partitions", "5")
    assert (proc.returncode, proc.stdout) == (
        0, f"{topic}: 6 -> 5 undeleted partitions; partition 5 marked for deletion (it takes no new records "
           f"and is removed once empty)\n"), proc.stderr
    wait_until(lambda: every_broker_has(cluster, topic, 5), 30, "every broker's count 5")

    left = sum(1 for p in expected.values() if p == 5)
    shown = described(cluster, topic)
    assert shown["ordered_delivery"] == {"initial_partition_count": 4, "undeleted_partition_count": 5}
    parts = {p["partition"]: p for p in shown["partitions"]}
    assert [parts[p]["parent"] for p in range(6)] == [None, None, None, None, 0, 1]
    assert [parts[p]["marked_for_deletion"] for p in range(6)] == [False] * 5 + [True]
    assert (parts[5]["records_left"], parts[5]["blocks"]) == (left, [1])
    assert "records_left" not in parts[4]

    proc = odradek(cluster, "topics", "describe", topic)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "Ordered delivery of topic ocli-ord (KIP-253): initial_partition_count 4, undeleted_partition_count 5" \
        in lines
    assert "  partition 4: parent 0" in lines
    assert (f"  partition 5: parent 1; marked for deletion, {left} record{'s' if left > 1 else ''} left; blocks "
            f"partition 1 until read to its end") in lines

    # below the initial count, and any change while partition 5 drains: one line, the broker's words
    assert_one_line_error(odradek(cluster, "topics", "alter", topic, "--partitions", "3"), 1,
                          "INVALID_PARTITIONS", "cannot have fewer than 4 undeleted partitions")
    for count in ("4", "7"):
        assert_one_line_error(odradek(cluster, "topics", "alter", topic, "--partitions", count), 1,
                              "INVALID_PARTITIONS", "partition 5 marked for deletion, not yet removed")
    assert described(cluster, topic)["ordered_delivery"]["undeleted_partition_count"] == 5

    # --partition cannot place a record of an ordered topic
    assert_one_line_error(odradek(cluster, "produce", topic, "--partition", "1", stdin="x\n"), 1,
                          "has ordered delivery", "--partition")


def test_a_plain_topic_keeps_kafkas_refusal_and_describe(cluster: LocalCluster) -> None:
    topic = "ocli-plain"
    create_topic(cluster.bootstrap_servers, topic, 3, 2)
    assert_one_line_error(odradek(cluster, "topics", "alter", topic, "--partitions", "2"), 1,
                          "INVALID_PARTITIONS", "Topic currently has 3 partitions, which is higher than the requested 2.")
    proc = odradek(cluster, "topics", "alter", topic, "--partitions", "4")
    assert (proc.returncode, proc.stdout) == (0, f"topic {topic} now has 4 partitions\n"), proc.stderr
    shown = described(cluster, topic)
    assert "ordered_delivery" not in shown
    assert all(set(p) == {"partition", "leader", "leader_epoch", "replicas", "isr"} for p in shown["partitions"])
    proc = odradek(cluster, "topics", "describe", topic)
    assert proc.returncode == 0 and "Ordered delivery" not in proc.stdout, proc.stderr
    proc = odradek(cluster, "produce", topic, "--partition", "3", stdin="a\nb\n")
    assert proc.returncode == 0, proc.stderr
    assert [p for p, _, _, _ in consume_all(cluster.bootstrap_servers, topic, 4, 2, timeout_s=30)] == [3, 3]


def test_admin_client_shrinks_an_ordered_topic_through_create_partitions(cluster: LocalCluster) -> None:
    topic = "ocli-admin"
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, topic, 2, 2, {"enable.ordered.delivery": "true"})
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=30)[topic].result(60)
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        def znode() -> dict[str, Any]:
            return json.loads(zk.get(f"/brokers/topics/{topic}")[0])

        def state(p: int) -> dict[str, Any] | None:
            path = f"/brokers/topics/{topic}/partitions/{p}/state"
            return json.loads(zk.get(path)[0]) if zk.exists(path) else None

        wait_until(lambda: znode().get("undeleted_partition_count") == 4 and state(3) is not None, 30,
                   "the growth to 4 applied")
        # validate_only: checked, not written
        admin.create_partitions([NewPartitions(topic, 3)], validate_only=True, operation_timeout=30)[topic].result(60)
        assert znode()["undeleted_partition_count"] == 4
        admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=30)[topic].result(60)
        assert (znode()["undeleted_partition_count"], len(znode()["partitions"])) == (3, 4)
        wait_until(lambda: "leader_epoch_before_deletion" in (state(3) or {}), 30, "partition 3 marked")
        with pytest.raises(KafkaException) as refused:
            admin.create_partitions([NewPartitions(topic, 1)], operation_timeout=30)[topic].result(60)
        assert "cannot have fewer than 2" in refused.value.args[0].str()
    finally:
        zk.stop()
        zk.close()


def test_consume_group_reads_an_ordered_topic_through_its_barriers_and_commits(cluster: LocalCluster) -> None:
    """`consume --group` on an ordered topic is an OrderedConsumer: after an expansion it reads
    the new partition from its start (nothing written before it joined is skipped) and commits
    what it printed, which `groups describe` shows."""
    topic = "ocli-read"
    assert odradek(cluster, "topics", "create", topic, "--partitions", "2", "--replication-factor", "2",
                   "--config", ORDERED).returncode == 0
    lines = "".join(f"key-{i}:{i}\n" for i in range(20))
    assert odradek(cluster, "produce", topic, "--key-separator", ":", stdin=lines).returncode == 0
    assert odradek(cluster, "topics", "alter", topic, "--partitions", "3").returncode == 0
    wait_until(lambda: every_broker_has(cluster, topic, 3), 30, "every broker's count 3")
    more = "".join(f"key-{i}:{20 + i}\n" for i in range(20))
    assert odradek(cluster, "produce", topic, "--key-separator", ":", stdin=more).returncode == 0

    proc = odradek(cluster, "consume", topic, "--group", "ocli-readers", "--from-beginning", "--print-key",
                   "--timeout-s", "3")
    assert proc.returncode == 0, proc.stderr
    read = [line.split("\t") for line in proc.stdout.splitlines()]
    by_key: dict[str, list[int]] = {}
    for key, value in read:
        by_key.setdefault(key, []).append(int(value))
    assert by_key == {f"key-{i}": [i, 20 + i] for i in range(20)}  # each key in order, nothing skipped

    proc = odradek(cluster, "groups", "describe", "ocli-readers", "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    rows = (shown[0] if isinstance(shown, list) else shown)["offsets"]
    assert {(r["partition"], r["lag"]) for r in rows if r["topic"] == topic} == {(0, 0), (1, 0), (2, 0)}
