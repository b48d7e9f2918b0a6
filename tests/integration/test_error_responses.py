"""Responses on error paths, as real clients read them.

A response that carries an error code for one partition must still parse for every client:
Apache Kafka fills fields that its schemas allow to be null (a Fetch partition's records), and
librdkafka drops the whole response when they are null, so the other partitions in it stall.
Each test drives an error path with confluent-kafka (the autouse guard in tests/conftest.py
fails it on any librdkafka protocol-error log line), kafka-python and aiokafka, and checks that
the partitions without an error are still served.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from wire import RawConnection

from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True

TOPIC = "error-paths"
PAST_THE_END = 10_000


def _fill(cluster: LocalCluster) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for p in (0, 1):
        for i in range(5):
            producer.produce(TOPIC, value=f"p{p}-{i}".encode(), partition=p)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def filled(cluster: LocalCluster) -> str:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([NewTopic(TOPIC, num_partitions=2, replica_assignment=[[1, 2, 3], [1, 3, 2]])]).values():
        future.result(30)
    _fill(cluster)
    return TOPIC


def test_fetch_error_partition_carries_empty_records_in_every_version(cluster: LocalCluster, filled: str) -> None:
    conn = RawConnection(cluster.host, cluster.broker_port(1))
    try:
        for version in range(4, 13):
            body = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": filled, "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "log_start_offset": -1,
                         "current_leader_epoch": -1},
                        {"partition": 1, "fetch_offset": PAST_THE_END, "partition_max_bytes": 1 << 20,
                         "log_start_offset": -1, "current_leader_epoch": -1}]}],
                    "forgotten_topics_data": [], "rack_id": ""}
            response = conn.request(1, version, body)
            parts = {p.partition_index: p for t in response.responses for p in t.partitions}
            assert parts[0].error_code == ErrorCode.NONE and parts[0].records, version
            assert parts[1].error_code == ErrorCode.OFFSET_OUT_OF_RANGE, version
            assert parts[1].records == b"", f"Fetch v{version}: null records on an error partition"
    finally:
        conn.close()


def test_confluent_consumer_reads_the_other_partition_of_an_out_of_range_fetch(cluster: LocalCluster,
                                                                                filled: str) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([CkTopicPartition(filled, 0, 0), CkTopicPartition(filled, 1, PAST_THE_END)])
        seen: dict[int, set[int]] = {0: set(), 1: set()}
        deadline = time.monotonic() + 30
        while (len(seen[0]) < 5 or len(seen[1]) < 5) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen[msg.partition()].add(msg.offset())
        # partition 1 was reset to the earliest offset after OFFSET_OUT_OF_RANGE
        assert seen == {0: set(range(5)), 1: set(range(5))}
    finally:
        consumer.close()


def test_kafka_python_consumer_recovers_from_out_of_range(cluster: LocalCluster, filled: str) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000)
    try:
        tps = [KpTopicPartition(filled, 0), KpTopicPartition(filled, 1)]
        consumer.assign(tps)
        consumer.seek(tps[0], 0)
        consumer.seek(tps[1], PAST_THE_END)
        seen = {(m.partition, m.offset) for _, m in zip(range(10), consumer)}
        assert seen == {(p, o) for p in (0, 1) for o in range(5)}
    finally:
        consumer.close()


def test_aiokafka_consumer_recovers_from_out_of_range(cluster: LocalCluster, filled: str) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    async def read() -> set[tuple[int, int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [AioTopicPartition(filled, 0), AioTopicPartition(filled, 1)]
            consumer.assign(tps)
            consumer.seek(tps[0], 0)
            consumer.seek(tps[1], PAST_THE_END)
            seen: set[tuple[int, int]] = set()
            deadline = time.monotonic() + 30
            while len(seen) < 10 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                seen.update((m.partition, m.offset) for msgs in batches.values() for m in msgs)
            return seen
        finally:
            await consumer.stop()

    assert asyncio.run(read()) == {(p, o) for p in (0, 1) for o in range(5)}


def test_unknown_topic_is_a_clean_error_for_every_client(cluster: LocalCluster) -> None:
    """Metadata for a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION, parsed by all three."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic_md = admin.list_topics("no-such-topic", timeout=10).topics["no-such-topic"]
    assert topic_md.error is not None and topic_md.error.code() == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        assert not consumer.partitions_for_topic("no-such-topic")  # None or an empty set
    finally:
        consumer.close()

    async def aio() -> object:
        from aiokafka import AIOKafkaConsumer
        c = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
        await c.start()
        try:
            return c.partitions_for_topic("no-such-topic")
        finally:
            try:
                await c.stop()
            except asyncio.CancelledError:  # aiokafka 0.14: stop() of a consumer never assigned
                pass                         # re-raises the cancellation of its own idle task

    assert asyncio.run(aio()) is None


def test_admin_errors_parse_in_librdkafka(cluster: LocalCluster, filled: str) -> None:
    """CreateTopics (exists, bad config) and DescribeConfigs (unknown topic) answered with errors."""
    from confluent_kafka.admin import ConfigResource
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(filled, 1, 1), NewTopic("bad-config", 1, 1,
                                                                    config={"cleanup.policy": "nonsense"})])
    for name, future in futures.items():
        with pytest.raises(KafkaException):
            future.result(30)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "no-such-topic")
    with pytest.raises(KafkaException):
        admin.describe_configs([resource])[resource].result(30)
    admin.poll(0)  # deliver librdkafka's log to the guard


def test_create_topics_answers_parse_in_kafka_python_and_aiokafka(cluster: LocalCluster, filled: str) -> None:
    """A created topic (with its configs, CreateTopics v5+) and an existing one (an error)."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    from kafka.errors import TopicAlreadyExistsError
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        admin.create_topics([KpNewTopic("kp-created", 1, 1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KpNewTopic(filled, 1, 1)])
    finally:
        admin.close()

    async def aio() -> list[int]:
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.admin import NewTopic as AioNewTopic
        client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await client.start()
        try:
            response = await client.create_topics([AioNewTopic("aio-created", 1, 1), AioNewTopic(filled, 1, 1)])
            return sorted(error for _name, error, *_rest in response.topic_errors)
        finally:
            await client.close()

    assert asyncio.run(aio()) == [ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS]
