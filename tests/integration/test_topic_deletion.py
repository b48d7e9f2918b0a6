"""Topic deletion and partition expansion with real processes and real clients: a topic deleted
and created again shows nothing old; a deletion waits for a broker that is down (and survives
the controller being killed meanwhile) and completes when it is back, deleting that broker's
copy; CreatePartitions grows a topic that is being written to, refuses what Kafka refuses with
Kafka's codes and answers each topic of a request on its own; delete.topic.enable=false."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clients import consume_all, create_topic
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions
from wire import RawConnection

from client_helpers import produce
from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def _odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=120)


def _partition_dirs(cluster: LocalCluster, broker_id: int, topic: str) -> list[Path]:
    data = cluster.broker_dir(broker_id) / "data"
    return sorted(p for p in data.glob(f"{topic}-*") if p.name.rpartition("-")[2].isdigit())


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.1)


def _error_code(future) -> int:
    with pytest.raises(KafkaException) as refused:
        future.result(30)
    return refused.value.args[0].code()


def _values(cluster: LocalCluster, topic: str, partitions: int, expected: int) -> list[bytes]:
    return sorted(v for _, _, _, v in consume_all(cluster.bootstrap_servers, topic, partitions, expected,
                                                  timeout_s=8 if expected == 0 else 30))


def test_a_topic_deleted_and_created_again_shows_nothing_old(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "again", 3, 3)
    produce(cluster.bootstrap_servers, "again", [(b"k%d" % i, b"old-%d" % i, None) for i in range(30)])
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        old_id = json.loads(zk.get("/brokers/topics/again")[0])["topic_id"]
        done = _odradek("topics", "delete", "again", "--bootstrap-server", cluster.bootstrap_servers)
        assert done.returncode == 0, done.stderr
        _wait(lambda: zk.exists("/brokers/topics/again") is None, 10, "the topic znode goes")
        assert zk.exists("/config/topics/again") is None and zk.get_children("/admin/delete_topics") == []
        for broker in cluster.broker_ids:
            _wait(lambda b=broker: not _partition_dirs(cluster, b, "again"), 10, f"broker {broker} deletes its logs")
        missing = _odradek("topics", "delete", "again", "--bootstrap-server", cluster.bootstrap_servers)
        assert missing.returncode == 1 and missing.stderr.count("\n") == 1
        assert "does not exist" in missing.stderr
        create_topic(cluster.bootstrap_servers, "again", 3, 3)
        new_id = json.loads(zk.get("/brokers/topics/again")[0])["topic_id"]
    finally:
        zk.stop()
        zk.close()
    assert new_id != old_id
    assert _values(cluster, "again", 3, 0) == []
    produce(cluster.bootstrap_servers, "again", [(b"n", b"new", None)])
    assert _values(cluster, "again", 3, 1) == [b"new"]
    for broker in cluster.broker_ids:
        for pdir in _partition_dirs(cluster, broker, "again"):
            assert f"topic_id: {new_id}" in (pdir / "partition.metadata").read_text()


@pytest.mark.slow  # 15 s: make test-long (make test keeps deletion, and the controller simulation kills at every step)
def test_deletion_waits_for_a_dead_broker_through_a_controller_kill(cluster_factory) -> None:
    c: LocalCluster = cluster_factory(3)
    create_topic(c.bootstrap_servers, "doomed", 2, 3)
    produce(c.bootstrap_servers, "doomed", [(b"k%d" % i, b"old-%d" % i, None) for i in range(20)])
    zk = connect_zk(c.zookeeper_connect)
    try:
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        down = next(b for b in c.broker_ids if b != controller)
        others = [b for b in c.broker_ids if b != down]
        c.kill_broker(down)
        _wait(lambda: str(down) not in zk.get_children("/brokers/ids"), 15, f"broker {down} expires")
        asked = _odradek("topics", "delete", "doomed", "--timeout-s", "3", "--bootstrap-server", c.bootstrap_servers)
        assert asked.returncode == 1 and "not complete" in asked.stderr and asked.stderr.count("\n") == 1
        for broker in others:  # the live replicas are deleted at once ...
            _wait(lambda b=broker: not _partition_dirs(c, b, "doomed"), 15, f"broker {broker} deletes its logs")
        # ... but the topic waits for the dead broker's replica
        assert zk.exists("/brokers/topics/doomed") and zk.exists("/admin/delete_topics/doomed")
        assert len(_partition_dirs(c, down, "doomed")) == 2
        # the controller dies too; its successor reads the marker and keeps waiting
        c.kill_broker(controller)
        _wait(lambda: zk.exists("/controller") is not None
              and json.loads(zk.get("/controller")[0])["brokerid"] not in (controller, down), 20,
              "another controller is elected")
        time.sleep(1)
        assert zk.exists("/brokers/topics/doomed") and zk.exists("/admin/delete_topics/doomed")
        c.start_broker(down)
        c.start_broker(controller)
        c.wait_ready(c.broker_ids, 60)
        _wait(lambda: zk.exists("/brokers/topics/doomed") is None, 30, "the deletion completes")
        assert zk.exists("/admin/delete_topics/doomed") is None
        assert zk.exists("/config/topics/doomed") is None
        _wait(lambda: not _partition_dirs(c, down, "doomed"), 10, "the returned broker deletes its logs")
        # renamed away at once, removed on the log manager's background thread (delete_many)
        _wait(lambda: not list((c.broker_dir(down) / "data").glob("doomed-*")), 10,
              "the renamed-away directories are removed")
    finally:
        zk.stop()
        zk.close()
    create_topic(c.bootstrap_servers, "doomed", 2, 3)
    assert _values(c, "doomed", 2, 0) == []


def test_create_partitions_grows_a_topic_being_written(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "grow", 2, 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    acked: list[tuple[int, bytes]] = []
    errors: list[object] = []
    stop = threading.Event()

    def write() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5,
                             "topic.metadata.refresh.interval.ms": 500})

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked.append((msg.partition(), msg.value()))

        i = 0
        while not stop.is_set():
            producer.produce("grow", value=b"v%d" % i, on_delivery=delivered)  # no key: all partitions
            producer.poll(0.005)
            i += 1
        assert producer.flush(30) == 0

    writer = threading.Thread(target=write)
    writer.start()
    try:
        _wait(lambda: len(acked) > 50, 20, "records are acknowledged")
        validate = admin.create_partitions([NewPartitions("grow", 3)], validate_only=True)["grow"]
        validate.result(30)
        admin.create_partitions([NewPartitions("grow", 4)], operation_timeout=10)["grow"].result(30)
        _wait(lambda: {p for p, _ in acked} >= {0, 1, 2, 3}, 30, "records reach the new partitions")
    finally:
        stop.set()
        writer.join(60)
    assert errors == []
    values = _values(cluster, "grow", 4, len(acked))
    assert values == sorted(v for _, v in acked)
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        stored = json.loads(zk.get("/brokers/topics/grow")[0])
    finally:
        zk.stop()
        zk.close()
    assert len(stored["partitions"]) == 4 and stored["initial_partition_count"] == 2


def test_create_partitions_refusals_are_kafkas_errors_and_change_nothing(cluster: LocalCluster) -> None:
    """No fewer or as many partitions as the topic has, no broker that does not exist, no unknown
    topic, and no count whose assignment could never fit in one znode."""
    create_topic(cluster.bootstrap_servers, "grow-refused", 4, 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        before = zk.get("/brokers/topics/grow-refused")[1]
        refused = admin.create_partitions([NewPartitions("grow-refused", 3)])["grow-refused"]
        assert _error_code(refused) == KafkaError.INVALID_PARTITIONS
        same = admin.create_partitions([NewPartitions("grow-refused", 4)])["grow-refused"]
        assert _error_code(same) == KafkaError.INVALID_PARTITIONS
        bad = NewPartitions("grow-refused", 5, replica_assignment=[[1, 99]])
        assert _error_code(admin.create_partitions([bad])["grow-refused"]) == KafkaError.INVALID_REPLICA_ASSIGNMENT
        assert _error_code(admin.create_partitions([NewPartitions("no-such", 2)])["no-such"]) == \
            KafkaError.UNKNOWN_TOPIC_OR_PART
        # a count whose assignment could never fit in one znode: refused at once, with why
        # (sent raw: librdkafka stops at 100,000 partitions)
        conn = RawConnection(cluster.host, cluster.broker_port(1))
        try:
            huge = conn.request(37, 1, {"topics": [{"name": "grow-refused", "count": 2**31 - 1, "assignments": None}],
                                        "timeout": 5000, "validate_only": False}).results[0]
        finally:
            conn.sock.close()
        assert huge.error_code == KafkaError.INVALID_PARTITIONS and "too large for ZooKeeper" in huge.error_message
        assert zk.get("/brokers/topics/grow-refused")[1].version == before.version
    finally:
        zk.stop()
        zk.close()


def test_create_partitions_answers_each_topic_of_a_request_on_its_own(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "grow-mixed", 4, 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    mixed = admin.create_partitions([NewPartitions("grow-mixed", 5), NewPartitions("no-such", 2)],
                                    operation_timeout=10)
    mixed["grow-mixed"].result(30)
    assert _error_code(mixed["no-such"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        assert len(json.loads(zk.get("/brokers/topics/grow-mixed")[0])["partitions"]) == 5
    finally:
        zk.stop()
        zk.close()


def test_cli_topics_alter_adds_partitions_and_refuses_fewer_in_one_line(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "grow-cli", 5, 2)
    cli = _odradek("topics", "alter", "grow-cli", "--partitions", "6", "--bootstrap-server", cluster.bootstrap_servers)
    assert cli.returncode == 0, cli.stderr
    smaller = _odradek("topics", "alter", "grow-cli", "--partitions", "2", "--bootstrap-server",
                       cluster.bootstrap_servers)
    assert smaller.returncode == 1 and "INVALID_PARTITIONS" in smaller.stderr and smaller.stderr.count("\n") == 1
    [described] = json.loads(_odradek("topics", "describe", "grow-cli", "--json", "--bootstrap-server",
                                    cluster.bootstrap_servers).stdout)
    assert len(described["partitions"]) == 6


def test_delete_topic_disabled_refuses_and_keeps_the_topic(cluster_factory) -> None:
    c: LocalCluster = cluster_factory(1, delete_topic_enable=False)
    create_topic(c.bootstrap_servers, "kept", 1, 1)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    assert _error_code(admin.delete_topics(["kept"])["kept"]) == KafkaError.TOPIC_DELETION_DISABLED
    zk = connect_zk(c.zookeeper_connect)
    try:
        zk.create("/admin/delete_topics/kept")  # as an old admin tool would: the controller removes it
        _wait(lambda: zk.get_children("/admin/delete_topics") == [], 10, "the marker is removed")
        assert zk.exists("/brokers/topics/kept")
    finally:
        zk.stop()
        zk.close()
    assert admin.list_topics(timeout=10).topics.get("kept") is not None


def test_kafka_python_and_aiokafka_delete_topics_and_create_partitions(cluster: LocalCluster) -> None:
    """The versions these clients pick (kafka-python: DeleteTopics v3, CreatePartitions v1;
    aiokafka likewise) are advertised and answered."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    create_topic(cluster.bootstrap_servers, "kp-topic", 1, 2)
    create_topic(cluster.bootstrap_servers, "aio-topic", 1, 2)
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=30000)
    try:
        kp.create_partitions({"kp-topic": KpNewPartitions(total_count=3)})
        kp.delete_topics(["kp-topic"], timeout_ms=20000)
    finally:
        kp.close()

    async def with_aiokafka() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_topics(["aio-topic"], timeout_ms=20000)
        finally:
            await admin.close()

    asyncio.run(with_aiokafka())
    topics = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10).topics
    assert "kp-topic" not in topics and "aio-topic" not in topics
