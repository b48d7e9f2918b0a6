"""The metadata and admin APIs through confluent-kafka's AdminClient: DescribeCluster,
DescribeConfigs, ListOffsets, and min.insync.replicas enforcement on acks=all."""
from __future__ import annotations

import time
from typing import Callable

import pytest
from clients import create_topic, produce_acks_all
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def test_describe_cluster_lists_live_brokers_and_controller(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    desc = admin.describe_cluster(request_timeout=10).result(30)
    assert sorted(n.id for n in desc.nodes) == cluster.broker_ids
    assert desc.controller.id in cluster.broker_ids
    assert desc.cluster_id


def test_describe_configs_shows_topic_overrides_and_defaults(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "cfg-topic", 1, 3, {"retention.ms": "3600000", "min.insync.replicas": "2"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfg-topic")
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["min.insync.replicas"].value == "2"
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default
    missing = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(KafkaException):
        admin.describe_configs([missing])[missing].result(30)


def test_list_offsets_earliest_latest_and_by_timestamp(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "offsets", 1, 3)
    before = int(time.time() * 1000) - 1
    produce_acks_all(cluster.bootstrap_servers, "offsets", 50)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    tp = TP("offsets", 0)

    def offset(spec: OffsetSpec) -> int:
        return admin.list_offsets({tp: spec})[tp].result(30).offset

    assert offset(OffsetSpec.earliest()) == 0
    assert offset(OffsetSpec.latest()) == 50
    assert offset(OffsetSpec.for_timestamp(before)) == 0
    assert offset(OffsetSpec.for_timestamp(int(time.time() * 1000) + 60_000)) == -1


def test_acks_all_below_min_insync_replicas_is_refused(cluster_factory: Callable[..., LocalCluster]) -> None:
    """With one of three replicas dead and min.insync.replicas=3, acks=all must fail with
    NOT_ENOUGH_REPLICAS and store nothing; acks=1 still works."""
    c = cluster_factory(zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(c.bootstrap_servers, "strict", 1, 3, {"min.insync.replicas": "3"})
    produce_acks_all(c.bootstrap_servers, "strict", 5)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    leader = admin.list_topics("strict", timeout=10).topics["strict"].partitions[0].leader
    victim = next(b for b in c.broker_ids if b != leader)
    c.kill_broker(victim)
    deadline = time.monotonic() + 30

    def isr() -> list[int]:
        try:
            return admin.list_topics("strict", timeout=10).topics["strict"].partitions[0].isrs
        except KafkaException:  # asked the dead broker: librdkafka moves on to another
            return [victim]

    while victim in isr():
        assert time.monotonic() < deadline, "dead replica never left the ISR"
        time.sleep(0.2)

    errors: list[int] = []
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "retries": 0,
                         "message.timeout.ms": 5000})
    producer.produce("strict", b"refused", on_delivery=lambda e, m: errors.append(e.code() if e else 0))
    producer.flush(30)
    assert errors == [19]  # NOT_ENOUGH_REPLICAS
    tp = TP("strict", 0)
    assert admin.list_offsets({tp: OffsetSpec.latest()})[tp].result(30).offset == 5

    ok: list[object] = []
    weak = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "1"})
    weak.produce("strict", b"fine", on_delivery=lambda e, m: ok.append(e))
    weak.flush(30)
    assert ok == [None]


def test_a_topic_too_large_for_zookeeper_is_refused_and_nothing_is_written(cluster: LocalCluster) -> None:
    """100,000 partitions at RF 3 are a 1.59 MB assignment znode, over ZooKeeper's jute.maxbuffer:
    CreateTopics answers POLICY_VIOLATION with the limit and the ways around it (also with
    validate_only), writes nothing to ZooKeeper, and the cluster goes on creating topics."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    from odradek.admin.zookeeper import connect_zk

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for validate_only in (True, False):
        future = admin.create_topics([NewTopic("too-large", 100_000, 3)], validate_only=validate_only,
                                     request_timeout=60)["too-large"]
        with pytest.raises(KafkaException) as refused:
            future.result(90)
        error = refused.value.args[0]
        assert error.code() == KafkaError.POLICY_VIOLATION
        assert "jute.maxbuffer" in error.str() and "several topics" in error.str()
    zk = connect_zk(cluster.zookeeper_connect)
    try:
        assert not zk.exists("/brokers/topics/too-large")
        assert not zk.exists("/config/topics/too-large")
    finally:
        zk.stop()
        zk.close()
    create_topic(cluster.bootstrap_servers, "after-too-large", 2, 3)
    assert "after-too-large" in admin.list_topics(timeout=10).topics
