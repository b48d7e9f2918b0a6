"""Kafka's internal topics are protected, with real processes and real clients: DeleteTopics and
CreatePartitions of __consumer_offsets are refused by the brokers (kafka-python's and
confluent-kafka's admin clients get INVALID_TOPIC_EXCEPTION) and by `odradek topics`, and a
group's committed offsets survive every attempt; CreateTopics and Metadata auto-creation never
make a name reserved for internal topics; `topics list` marks them and --exclude-internal
leaves them out. Last, the operator's walk that wiped them: `topics delete $(topics list)`."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from clients import create_topic
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.errors import InvalidTopicError
from polling import wait_until
from wire import RawConnection

from cli_helpers import assert_one_line_error, run
from client_helpers import produce
from cluster_helpers import start_cluster
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.errors import ErrorCode
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

OFFSETS = "__consumer_offsets"
#: fewer offsets partitions than Kafka's 50, so the coordinator's topic is made quickly
OFFSETS_PARTITIONS = 6
GROUP = "it-keeper"
TOPIC = "it-data"


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three brokers that create topics a Metadata request names (auto.create.topics.enable), so
    the refusal to auto-create an internal name is a refusal and not the setting."""
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("internal"), 3, auto_create_topics_enable=True,
                      offsets_topic_num_partitions=OFFSETS_PARTITIONS)
    try:
        yield c
    finally:
        c.down()


def _committed(bootstrap: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as an admin client describes them (OffsetFetch)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])[GROUP]
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(30).topic_partitions}


def _offsets_partition_count(cluster: LocalCluster) -> int:
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        return len(json.loads(zk.get(f"/brokers/topics/{OFFSETS}")[0])["partitions"])
    finally:
        zk.stop()
        zk.close()


def _znodes(cluster: LocalCluster, *paths: str) -> list[bool]:
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        return [zk.exists(p) is not None for p in paths]
    finally:
        zk.stop()
        zk.close()


@pytest.fixture(scope="module")
def committed_group(cluster: LocalCluster) -> dict[tuple[str, int], int]:
    """A group with committed offsets (which makes the brokers create __consumer_offsets)."""
    bs = cluster.bootstrap_servers
    create_topic(bs, TOPIC, 2, 3)
    produce(bs, TOPIC, [(None, b"v%d" % i, None) for i in range(10)])
    consumer = Consumer({"bootstrap.servers": bs, "group.id": GROUP, "enable.auto.commit": False})
    wanted = [TopicPartition(TOPIC, 0, 7), TopicPartition(TOPIC, 1, 3)]

    def commit() -> bool:
        try:
            consumer.commit(offsets=wanted, asynchronous=False)
        except KafkaException:
            return False  # the coordinator's topic is still being created
        return True

    try:
        wait_until(commit, 60, "the group's first commit")
    finally:
        consumer.close()
    before = _committed(bs)
    assert before == {(TOPIC, 0): 7, (TOPIC, 1): 3}
    return before


def test_the_brokers_refuse_to_delete_an_internal_topic_and_the_offsets_stay(
        cluster: LocalCluster, committed_group: dict[tuple[str, int], int]) -> None:
    bs = cluster.bootstrap_servers
    kp = KafkaAdminClient(bootstrap_servers=bs.split(","), client_id="it-internal")
    try:
        with pytest.raises(InvalidTopicError) as refused:
            kp.delete_topics([OFFSETS], timeout_ms=10_000)
        assert "internal topic" in str(refused.value)
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": bs})  # outlives its futures (else they fail _DESTROY)
    future = admin.delete_topics([OFFSETS], operation_timeout=10)[OFFSETS]
    with pytest.raises(KafkaException) as confluent_refused:
        future.result(30)
    assert confluent_refused.value.args[0].code() == ErrorCode.INVALID_TOPIC_EXCEPTION
    # no deletion was even asked of the controller, and the offsets are where they were
    assert _znodes(cluster, f"/brokers/topics/{OFFSETS}", f"/admin/delete_topics/{OFFSETS}") == [True, False]
    assert _committed(bs) == committed_group


def test_topics_delete_refuses_an_internal_topic_and_still_deletes_the_others(
        cluster: LocalCluster, committed_group: dict[tuple[str, int], int]) -> None:
    bs = cluster.bootstrap_servers
    alone = run("topics", "delete", OFFSETS, "--bootstrap-server", bs)
    assert_one_line_error(alone, 1, "topic __consumer_offsets is an internal topic", "cannot be deleted")
    assert alone.stdout == ""
    create_topic(bs, "it-doomed", 1, 3)
    mixed = run("topics", "delete", "it-doomed", OFFSETS, "--bootstrap-server", bs)
    assert_one_line_error(mixed, 1, OFFSETS, "cannot be deleted")
    assert "it-doomed" not in mixed.stderr
    assert mixed.stdout == "deleted topic it-doomed\n"
    assert _znodes(cluster, "/brokers/topics/it-doomed", f"/brokers/topics/{OFFSETS}") == [False, True]
    assert _committed(bs) == committed_group


def test_the_partition_count_of_an_internal_topic_never_changes(
        cluster: LocalCluster, committed_group: dict[tuple[str, int], int]) -> None:
    bs = cluster.bootstrap_servers
    kp = KafkaAdminClient(bootstrap_servers=bs.split(","), client_id="it-internal")
    try:
        with pytest.raises(InvalidTopicError) as refused:
            kp.create_partitions({OFFSETS: KpNewPartitions(60)}, timeout_ms=10_000)
        assert "cannot be changed" in str(refused.value)
    finally:
        kp.close()
    admin = AdminClient({"bootstrap.servers": bs})
    future = admin.create_partitions([NewPartitions(OFFSETS, 60)], operation_timeout=10,
                                     validate_only=True)[OFFSETS]
    with pytest.raises(KafkaException) as confluent_refused:
        future.result(30)
    assert confluent_refused.value.args[0].code() == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert_one_line_error(run("topics", "alter", OFFSETS, "--partitions", "60", "--bootstrap-server", bs), 1,
                          "internal topic", "partition count cannot change")
    assert _offsets_partition_count(cluster) == OFFSETS_PARTITIONS
    assert _committed(bs) == committed_group


def test_no_client_creates_a_name_reserved_for_internal_topics(cluster: LocalCluster) -> None:
    bs = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs})
    for name in ("__transaction_state", "__odradek_anything"):
        future = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=10)[name]
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, name
    # a Metadata request that may create topics creates an ordinary one, never an internal one
    host, _, port = bs.split(",")[0].rpartition(":")
    conn = RawConnection(host, int(port))
    try:
        asked = [{"topic_id": None, "name": n} for n in ("__transaction_state", "it-auto-made")]
        answer = conn.request(3, 12, {"topics": asked, "allow_auto_topic_creation": True,
                                      "include_topic_authorized_operations": False})
    finally:
        conn.close()
    codes = {t.name: t.error_code for t in answer.topics}
    assert codes["__transaction_state"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert codes["it-auto-made"] == ErrorCode.LEADER_NOT_AVAILABLE  # being created
    assert _znodes(cluster, "/brokers/topics/__transaction_state", "/brokers/topics/it-auto-made") == [False, True]


def test_topics_list_marks_internal_topics_and_can_leave_them_out(
        cluster: LocalCluster, committed_group: dict[tuple[str, int], int]) -> None:
    bs = cluster.bootstrap_servers
    listed = run("topics", "list", "--bootstrap-server", bs)
    assert listed.returncode == 0, listed.stderr
    assert f"{OFFSETS} (internal)" in listed.stdout.splitlines() and TOPIC in listed.stdout.splitlines()
    plain = run("topics", "list", "--exclude-internal", "--bootstrap-server", bs).stdout.splitlines()
    assert TOPIC in plain and not [line for line in plain if "__" in line or "internal" in line]
    as_json = json.loads(run("topics", "list", "--json", "--bootstrap-server", bs).stdout)
    assert {"name": OFFSETS, "internal": True} in as_json and {"name": TOPIC, "internal": False} in as_json
    described = json.loads(run("topics", "describe", "--json", "--bootstrap-server", bs).stdout)
    assert {t["name"]: t["internal"] for t in described}[OFFSETS] is True
    without = json.loads(run("topics", "describe", "--exclude-internal", "--json", "--bootstrap-server", bs).stdout)
    assert TOPIC in {t["name"] for t in without} and OFFSETS not in {t["name"] for t in without}


def test_deleting_everything_topics_list_prints_keeps_the_internal_topic(
        cluster: LocalCluster, committed_group: dict[tuple[str, int], int]) -> None:
    """The walk that lost every group's offsets: `odradek topics delete $(odradek topics list)`."""
    bs = cluster.bootstrap_servers
    everything = run("topics", "list", "--bootstrap-server", bs).stdout.split()
    assert OFFSETS in everything and TOPIC in everything
    wiped = run("topics", "delete", *everything, "--bootstrap-server", bs)
    assert_one_line_error(wiped, 1, OFFSETS, "cannot be deleted")
    assert wiped.stdout.startswith("deleted topics ") and TOPIC in wiped.stdout
    left = json.loads(run("topics", "list", "--json", "--bootstrap-server", bs).stdout)
    assert left == [{"name": OFFSETS, "internal": True}]
    assert _offsets_partition_count(cluster) == OFFSETS_PARTITIONS
    assert _znodes(cluster, f"/admin/delete_topics/{OFFSETS}") == [False]
