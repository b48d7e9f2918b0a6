"""KIP-253's removal of drained partitions on a real cluster: an ordered topic grown from 2 to 4
partitions and shrunk back to 2 keeps partitions 2 and 3 (marked for deletion, their leaders
roll their active segments) while they hold records; DeleteRecords to their ends empties them,
their leaders report them and the controller removes them (StopReplica with delete, the
assignment and the znodes), after which the topic can grow again; and a controller killed with
kill -9 while a lower drained partition's report waits for the one above it is followed by one
that finishes the removal."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from clients import create_topic
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from polling import wait_until

from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

ORDERED = {"enable.ordered.delivery": "true"}
REPORTS = "/admin/ordered_partition_removals"


class Zk:
    """Reads of the cluster's ZooKeeper the tests check against."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        self.zk = connect_zk(cluster.zookeeper_connect)
        self.topic = topic

    def znode(self) -> dict[str, Any]:
        return json.loads(self.zk.get(f"/brokers/topics/{self.topic}")[0])

    def state(self, p: int) -> dict[str, Any] | None:
        path = f"/brokers/topics/{self.topic}/partitions/{p}/state"
        return json.loads(self.zk.get(path)[0]) if self.zk.exists(path) else None

    def partition_znode(self, p: int) -> bool:
        return self.zk.exists(f"/brokers/topics/{self.topic}/partitions/{p}") is not None

    def reports(self) -> list[dict[str, Any]]:
        """This topic's removal reports (the module's other tests share the cluster, and their
        topics' reports may still be waiting for the controller)."""
        found = [json.loads(self.zk.get(f"{REPORTS}/{c}")[0]) for c in self.zk.get_children(REPORTS)]
        return [r for r in found if r.get("topic") == self.topic]

    def controller(self) -> int:
        return int(json.loads(self.zk.get("/controller")[0])["brokerid"])

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


def metadata_partitions(admin: AdminClient, topic: str) -> list[int]:
    return sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def replica_dirs(cluster: LocalCluster, topic: str, partition: int) -> list[str]:
    return [str(d) for b in cluster.broker_ids
            for d in (cluster.broker_dir(b) / "data").glob(f"{topic}-{partition}*")]


def produce_to(bootstrap: str, topic: str, partitions: range, per_partition: int) -> None:
    """Unkeyed records, placed by partition: any client may put those anywhere below the count."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    failed: list[object] = []
    for p in partitions:
        for i in range(per_partition):
            producer.produce(topic, b"v%d" % i, partition=p,
                             on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(30) == 0 and not failed, failed


def delete_to_end(admin: AdminClient, topic: str, partitions: list[int], bootstrap: str) -> None:
    """DeleteRecords to the end, asked again on NOT_LEADER_OR_FOLLOWER: right after a broker
    restart librdkafka may still send it to the partition's previous leader (a retriable
    error an application retries too). One admin client was seen answering it for 40 s
    running, its leaders never re-read, so each retry goes through a new client, as an
    application re-reading the leaders would."""
    deadline = time.monotonic() + 40
    left = list(partitions)
    while left:
        futures = admin.delete_records([TopicPartition(topic, p, -1) for p in left],
                                       request_timeout=30, operation_timeout=20)
        retry = []
        for tp, future in futures.items():
            try:
                future.result(40)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION or time.monotonic() > deadline:
                    raise
                retry.append(tp.partition)
        left = retry
        if left:
            time.sleep(0.5)
            admin = AdminClient({"bootstrap.servers": bootstrap})  # the old one's results are in


def grown_then_shrunk(cluster: LocalCluster, admin: AdminClient, topic: str, zk: Zk,
                      via: tuple[int, ...] = (4,)) -> None:
    """``topic``: 2 ordered partitions grown to 4 (through the counts ``via``) with records in
    each, then shrunk to 2."""
    create_topic(cluster.bootstrap_servers, topic, 2, 2, ORDERED)
    for count in via:
        admin.create_partitions([NewPartitions(topic, count)], operation_timeout=30)[topic].result(60)
        wait_until(lambda count=count: zk.znode().get("undeleted_partition_count") == count
                   and zk.state(count - 1) is not None, 30, f"the growth to {count} applied")
    wait_until(lambda: metadata_partitions(admin, topic) == [0, 1, 2, 3], 30, "4 partitions in Metadata")
    produce_to(cluster.bootstrap_servers, topic, range(4), 5)
    admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=30)[topic].result(60)
    wait_until(lambda: all("leader_epoch_before_deletion" in (zk.state(p) or {}) for p in (2, 3)),
               30, "partitions 2 and 3 marked")
    # records left: nothing is removed, and the leaders roll the segments (retention's way)
    for p in (2, 3):
        data = cluster.broker_dir((zk.state(p) or {})["leader"]) / "data" / f"{topic}-{p}"
        wait_until(lambda data=data: len(list(data.glob("*.log"))) == 2, 30, f"partition {p}'s segment rolled")


def read_values(consumer: Consumer, want: int, timeout_s: float) -> list[bytes]:
    """Up to ``want`` values polled within ``timeout_s`` (a partition's absence is an error
    event the application ignores, as it would)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def test_drained_partitions_are_removed_and_the_topic_grows_again(cluster: LocalCluster) -> None:
    """Also: a plain consumer alive through the removal reads the partition created again
    under the removed number. Clients ignore metadata whose leader epoch is below the highest
    they saw for a partition number (KIP-320): its epochs start above the removed one's."""
    topic = "orm-drain"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    zk = Zk(cluster, topic)
    reader = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "orm-drain-reader",
                       "enable.auto.commit": False, "auto.offset.reset": "earliest",
                       "topic.metadata.refresh.interval.ms": 1000})
    try:
        grown_then_shrunk(cluster, admin, topic, zk, via=(3, 4))  # (partition 2's epoch bumped)
        assert zk.reports() == [] and sorted(zk.znode()["partitions"]) == ["0", "1", "2", "3"]
        reader.assign([TopicPartition(topic, 2, 0)])
        assert read_values(reader, 5, 30) == [b"v%d" % i for i in range(5)]
        removed_epoch = (zk.state(2) or {})["leader_epoch"]
        assert removed_epoch > 0

        delete_to_end(admin, topic, [2, 3], cluster.bootstrap_servers)
        wait_until(lambda: metadata_partitions(admin, topic) == [0, 1], 30, "2 partitions in Metadata")
        assert read_values(reader, 1, 2) == []  # (it goes on polling while partition 2 is gone)
        wait_until(lambda: sorted(zk.znode()["partitions"]) == ["0", "1"], 30, "the assignment shrunk")
        for p in (2, 3):
            assert zk.state(p) is None and not zk.partition_znode(p), p
            wait_until(lambda p=p: not replica_dirs(cluster, topic, p), 30, f"partition {p}'s replicas deleted")
        assert zk.znode()["undeleted_partition_count"] == 2
        assert zk.znode()["removed_partition_leader_epochs"] == {"2": removed_epoch, "3": zk.znode()[
            "removed_partition_leader_epochs"]["3"]}
        assert zk.reports() == []
        assert zk.state(0) is not None and zk.state(1) is not None  # the rest untouched

        # the deletion is complete: the topic grows again, the new partition with its map
        admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=30)[topic].result(60)
        wait_until(lambda: "leader_epoch_after_creation" in (zk.state(2) or {}), 30, "partition 2 created again")
        assert zk.znode()["undeleted_partition_count"] == 3
        wait_until(lambda: metadata_partitions(admin, topic) == [0, 1, 2], 30, "3 partitions in Metadata")
        assert (zk.state(2) or {})["leader_epoch"] > removed_epoch
        produce_to(cluster.bootstrap_servers, topic, range(2, 3), 1)
        assert read_values(reader, 1, 30) == [b"v0"], "the long-lived consumer never read the new partition 2"
    finally:
        reader.close()
        zk.close()


@pytest.mark.slow  # 16 s, most of it a killed broker's session: make test-long (the controller
# simulation deposes the controller before each of the removal's writes in make test)
def test_a_controller_killed_while_a_report_waits_is_followed_by_one_that_removes(
        cluster: LocalCluster) -> None:
    topic = "orm-failover"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    zk = Zk(cluster, topic)
    try:
        grown_then_shrunk(cluster, admin, topic, zk)
        # partition 2 drained first: reported, but it waits for partition 3 above it
        delete_to_end(admin, topic, [2], cluster.bootstrap_servers)
        wait_until(lambda: [r["partition"] for r in zk.reports()] == [2], 30, "partition 2's report")
        assert sorted(zk.znode()["partitions"]) == ["0", "1", "2", "3"] and zk.state(2) is not None

        controller = zk.controller()
        cluster.kill_broker(controller)
        wait_until(lambda: zk.zk.exists("/controller") is not None and zk.controller() != controller,
                   30, "a new controller")
        # (the killed broker may hold replicas of 2 and 3: their deletion waits for it)
        cluster.start_broker(controller)
        cluster.wait_ready([controller], 60)
        # the new controller re-read the report; once 3 drains both go
        delete_to_end(admin, topic, [3], cluster.bootstrap_servers)
        wait_until(lambda: sorted(zk.znode()["partitions"]) == ["0", "1"], 30, "2 and 3 removed")
        assert zk.state(2) is None and zk.state(3) is None and zk.reports() == []
        wait_until(lambda: metadata_partitions(admin, topic) == [0, 1], 30, "2 partitions in Metadata")
        for p in (2, 3):
            wait_until(lambda p=p: not replica_dirs(cluster, topic, p), 30, f"partition {p}'s replicas deleted")
    finally:
        zk.close()
