"""The ordered delivery APIs (KIP-253: ConsumerGroupPosition 10000, PartitionLeaderEpochsForPartitions
10001) against real brokers on a real ZooKeeper: advertised in ApiVersions without disturbing
librdkafka, kafka-python or aiokafka (each produces and consumes with a group); answered over the
wire by the group's coordinator and from the partition state znodes; and garbage in their place
answered with a closed connection while the broker stays up."""
from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from collections.abc import Callable

import pytest
from clients import create_topic
from cluster_state import known_everywhere
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kazoo.client import KazooClient
from polling import wait_until
from wire import RawConnection, coordinator_connection

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.errors import ErrorCode
from odradek.protocol.schema import Array, Bytes, Int16, Int32, String, Struct, encode

pytestmark = pytest.mark.integration

RECORDS = 50
_ASSIGNMENT = Struct(("version", Int16), ("topics", Array(Struct(("topic", String), ("partitions", Array(Int32))))),
                     ("user_data", Bytes))


def new_topic(c: LocalCluster, prefix: str, partitions: int = 3) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap_servers, name, partitions, 3)
    wait_until(lambda: known_everywhere(c, name), 30, f"every broker to know {name}")
    return name


def call(conn: RawConnection, request: api.Request) -> api.Response:
    conn.send_bytes(api.encode_request(request, 77, "test"))
    correlation_id, body = api.parse_response_header(conn.read_frame())
    assert correlation_id == 77
    return api.decode_response(api.api_key_of(request), 0, body)


def assert_broker_healthy(c: LocalCluster, broker_id: int) -> None:
    assert c.broker_pid(broker_id) is not None
    conn = RawConnection(c.host, c.broker_port(broker_id))
    try:
        assert conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
    finally:
        conn.close()


# -- ApiVersions, and the clients that read it ---------------------------------------------------

def test_api_versions_advertises_both_apis_at_v0(cluster: LocalCluster) -> None:
    conn = RawConnection(cluster.host, cluster.broker_port(1))
    try:
        for version in (0, 3):
            body = {"client_software_name": "t", "client_software_version": "1"} if version else {}
            keys = {k.api_key: (k.min_version, k.max_version) for k in conn.request(18, version, body).api_keys}
            assert keys[10000] == (0, 0) and keys[10001] == (0, 0)
            assert keys[0] == (3, 9)  # Kafka's own are advertised as before
    finally:
        conn.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([KafkaTopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def _librdkafka(bootstrap: str, topic: str, group: str, values: list[bytes]) -> set[bytes]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(topic, v, key=v)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < len(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                seen.add(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def _kafka_python(bootstrap: str, topic: str, group: str, values: list[bytes]) -> set[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
    for v in values:
        producer.send(topic, value=v, key=v)
    producer.flush(30)
    producer.close(10)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    try:
        while len(seen) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                seen.update(r.value for r in records)
        consumer.commit()
    finally:
        consumer.close()
    return seen


def _aiokafka(bootstrap: str, topic: str, group: str, values: list[bytes]) -> set[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> set[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for v in values:
                await producer.send(topic, value=v, key=v)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        try:
            while len(seen) < len(values) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen.update(r.value for r in records)
            await consumer.commit()
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, str, str, list[bytes]], set[bytes]]] = {
    "librdkafka": _librdkafka, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_plain_clients_produce_and_consume_in_a_group_against_the_advertisement(cluster: LocalCluster,
                                                                                client: str) -> None:
    """Each client reads ApiVersions (with keys 10000 and 10001 in it) on every connection it
    makes; librdkafka's protocol errors would fail the test (tests/conftest.py)."""
    boot, topic, group = cluster.bootstrap_servers, new_topic(cluster, client), f"g-{uuid.uuid4().hex[:8]}"
    values = [f"{client}-{i}".encode() for i in range(RECORDS)]
    assert CLIENTS[client](boot, topic, group, values) == set(values)
    committed = _committed(boot, group, topic, 3)  # a partition without records has no commit (< 0)
    assert sum(max(0, offset) for offset in committed.values()) == RECORDS, committed


# -- ConsumerGroupPosition over the wire ----------------------------------------------------------

def join_and_sync(conn: RawConnection, group: str, owned: list[TopicPartition]) -> tuple[str, int]:
    """A one-member group whose member owns ``owned``: (member id, generation)."""
    def join(member_id: str) -> object:
        return conn.request(11, 5, {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 5_000,
                                    "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
                                    "protocols": [{"name": "range", "metadata": b""}]})
    first = join("")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED  # type: ignore[attr-defined]
    joined = join(first.member_id)  # type: ignore[attr-defined]
    assert joined.error_code == ErrorCode.NONE  # type: ignore[attr-defined]
    member_id, generation = joined.member_id, joined.generation_id  # type: ignore[attr-defined]
    topics: dict[str, list[int]] = {}
    for tp in owned:
        topics.setdefault(tp.topic, []).append(tp.partition)
    sync = conn.request(14, 5, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                                "assignments": [{"member_id": member_id,
                                                 "assignment": encode(_ASSIGNMENT, (0, list(topics.items()), b""))}]})
    assert sync.error_code == ErrorCode.NONE
    return member_id, generation


def test_consumer_group_position_is_answered_by_the_coordinator(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster, "positions"), f"g-{uuid.uuid4().hex[:8]}"
    t0, t1, t2 = (TopicPartition(topic, p) for p in range(3))
    conn, coordinator = coordinator_connection(cluster.host, cluster.broker_port(cluster.broker_ids[0]), group)
    try:
        member, generation = join_and_sync(conn, group, [t0, t1])

        def position(reported: dict[TopicPartition, int] | None = None, requested: tuple[TopicPartition, ...] = (),
                     generation_id: int = generation, member_id: str = member) -> api.ConsumerGroupPositionResponse:
            resp = call(conn, api.ConsumerGroupPositionRequest(
                group, generation_id, member_id, None,
                {tp: api.ReportedPosition(p, 0) for tp, p in (reported or {}).items()}, requested))
            assert isinstance(resp, api.ConsumerGroupPositionResponse)
            return resp

        asked = position(requested=(t0, t2, TopicPartition("no-such-topic", 0)))
        assert asked.error_code == ErrorCode.NONE
        assert {tp: (r.position, r.error_code) for tp, r in asked.positions.items()} == {
            t0: (-1, 0), t2: (-1, 0), TopicPartition("no-such-topic", 0): (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
        assert asked.wanted == (t0,)  # its own partition someone (itself) waits on; t2 is nobody's
        position(reported={t0: 42, t1: 7}, requested=(t0, t2))
        answered = position(requested=(t0, t2))
        assert answered.positions[t0].position == 42 and answered.positions[t2].position == -1
        assert position(generation_id=generation + 1).error_code == ErrorCode.ILLEGAL_GENERATION
        assert position(member_id="stranger").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    finally:
        conn.close()
    other = next(b for b in cluster.broker_ids if b != coordinator)
    elsewhere = RawConnection(cluster.host, cluster.broker_port(other))
    try:
        resp = call(elsewhere, api.ConsumerGroupPositionRequest(group, generation, member, None, {}, (t0,)))
        assert resp.error_code == ErrorCode.NOT_COORDINATOR  # type: ignore[union-attr]
    finally:
        elsewhere.close()


# -- PartitionLeaderEpochsForPartitions over the wire ---------------------------------------------

def test_partition_leader_epochs_are_read_from_the_partition_state_znodes(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "epochs")
    # the maps the controller writes at an ordered expansion and deletion, written here the same
    # way (extra fields in the state znode) since this test is about the read
    zk = KazooClient(hosts=cluster.zookeeper_connect)
    zk.start(15)
    try:
        path = f"/brokers/topics/{topic}/partitions/2/state"
        data, _ = zk.get(path)
        state = json.loads(data)
        state.update(leader_epoch_after_creation={"0": 3, "1": 0}, leader_epoch_before_deletion={"0": 4})
        zk.set(path, json.dumps(state).encode())
    finally:
        zk.stop()
        zk.close()
    conn = RawConnection(cluster.host, cluster.broker_port(cluster.broker_ids[-1]))
    try:
        resp = call(conn, api.PartitionLeaderEpochsForPartitionsRequest(
            (TopicPartition(topic, 0), TopicPartition(topic, 2), TopicPartition(topic, 9),
             TopicPartition("no-such-topic", 0))))
    finally:
        conn.close()
    assert isinstance(resp, api.PartitionLeaderEpochsForPartitionsResponse)
    assert resp.partitions == {
        TopicPartition(topic, 0): api.PartitionLeaderEpochs(0, None, None),  # a plain partition: no maps
        TopicPartition(topic, 2): api.PartitionLeaderEpochs(0, {0: 3, 1: 0}, {0: 4}),
        TopicPartition(topic, 9): api.PartitionLeaderEpochs(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        TopicPartition("no-such-topic", 0): api.PartitionLeaderEpochs(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    }


# -- garbage ---------------------------------------------------------------------------------------

def _header(api_key: int, version: int = 0) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, -1) + b"\x00"


_VALID_POSITION = api.encode_request(api.ConsumerGroupPositionRequest(
    "g", 1, "m", None, {TopicPartition("t", 0): api.ReportedPosition(1, 0)}, (TopicPartition("t", 1),)), 1, "c")[4:]
_VALID_EPOCHS = api.encode_request(api.PartitionLeaderEpochsForPartitionsRequest((TopicPartition("t", 0),)), 1,
                                   "c")[4:]
GARBAGE = {
    "position-truncated": _VALID_POSITION[:-3],
    "epochs-truncated": _VALID_EPOCHS[:-2],
    "position-trailing-bytes": _VALID_POSITION + b"\x00\x00",
    "epochs-count-2^32": _header(10001) + b"\xff\xff\xff\xff\x0f",
    "position-string-2^28": _header(10000) + b"\xff\xff\xff\x7f",
    "epochs-invalid-utf8": _header(10001) + b"\x02\x02\xff\x02" + struct.pack(">i", 0) + b"\x00\x00",
    "epochs-varint-too-long": _header(10001) + b"\xff\xff\xff\xff\xff\xff\x01",
    "epochs-v1": _header(10001, 1) + _VALID_EPOCHS[len(_header(10001)):],
    "position-no-body": _header(10000),
    "position-random": _header(10000) + bytes(range(7, 250, 3)),
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_closes_the_connection_and_the_broker_stays_up(cluster: LocalCluster, name: str) -> None:
    conn = RawConnection(cluster.host, cluster.broker_port(1))
    try:
        frame = GARBAGE[name]
        conn.send_bytes(struct.pack(">i", len(frame)) + frame)
        assert conn.is_closed_by_peer()
    finally:
        conn.close()
    assert_broker_healthy(cluster, 1)
