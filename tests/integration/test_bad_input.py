"""What a client sends must never crash a broker or change stored data: each bad request gets
the Kafka error code a client expects, or (for bytes that are not a request) a closed connection."""
from __future__ import annotations

import struct

import pytest
from clients import consume_all, create_topic, end_offsets_total, produce_acks_all, segment_bytes
from confluent_kafka.admin import AdminClient, NewTopic
from wire import RawConnection

from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol import controller_api
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


@pytest.fixture(scope="module")
def topic(cluster: LocalCluster) -> str:
    create_topic(cluster.bootstrap_servers, "bad-input", 3, 3)
    produce_acks_all(cluster.bootstrap_servers, "bad-input", 300)
    return "bad-input"


def raw(cluster: LocalCluster, broker_id: int = 1) -> RawConnection:
    return RawConnection(cluster.host, cluster.broker_port(broker_id))


def assert_broker_healthy(cluster: LocalCluster) -> None:
    for b in cluster.broker_ids:
        conn = raw(cluster, b)
        resp = conn.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert resp.error_code == ErrorCode.NONE
        conn.close()


def produce_raw(conn: RawConnection, topic: str, partition: int, records: bytes, acks: int = -1) -> int:
    resp = conn.request(0, 9, {"acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return int(resp.responses[0].partition_responses[0].error_code)


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


@pytest.mark.parametrize("garbage", [
    struct.pack(">i", -5) + b"xxxx",                      # negative size
    struct.pack(">i", 2**31 - 1) + b"x" * 100,             # oversized frame
    struct.pack(">i", 3) + b"\x00\x03\x00",                # a frame too short for a header
    struct.pack(">i", 12) + b"\x00\x00\x00\x09\x00\x00\x00\x01\xff\xff\xff\xff",  # produce v9 body missing
])
def test_garbage_framing_closes_the_connection_and_the_broker_stays_up(cluster: LocalCluster, garbage: bytes) -> None:
    conn = raw(cluster)
    conn.send_bytes(garbage)
    assert conn.is_closed_by_peer()
    assert_broker_healthy(cluster)


def test_truncated_frame_then_disconnect_leaves_broker_up(cluster: LocalCluster) -> None:
    conn = raw(cluster)
    conn.send_bytes(struct.pack(">i", 1000) + b"\x00\x03")
    conn.close()
    assert_broker_healthy(cluster)


def test_unknown_api_key_closes_connection(cluster: LocalCluster) -> None:
    conn = raw(cluster)
    conn.send_bytes(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    assert conn.is_closed_by_peer()
    assert_broker_healthy(cluster)


def test_api_versions_newer_than_supported_gets_v0_unsupported_version(cluster: LocalCluster) -> None:
    conn = raw(cluster)
    conn.send_bytes(struct.pack(">ihhih", 10, 18, 99, 7, -1))
    frame = conn.read_frame()
    corr, error = struct.unpack_from(">ih", frame, 0)
    assert (corr, error) == (7, ErrorCode.UNSUPPORTED_VERSION)


def test_produce_to_missing_topic_is_unknown_topic(cluster: LocalCluster) -> None:
    conn = raw(cluster)
    assert produce_raw(conn, "no-such-topic", 0, build_batch([(None, b"x")])) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_to_a_follower_is_not_leader(cluster: LocalCluster, topic: str) -> None:
    leader = leader_of(cluster, topic, 0)
    follower = next(b for b in cluster.broker_ids if b != leader)
    before = segment_bytes(cluster, follower, topic, 0)
    conn = raw(cluster, follower)
    assert produce_raw(conn, topic, 0, build_batch([(None, b"x")])) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert segment_bytes(cluster, follower, topic, 0) == before


def test_corrupt_batch_is_rejected_and_stores_nothing(cluster: LocalCluster, topic: str) -> None:
    leader = leader_of(cluster, topic, 1)
    before = segment_bytes(cluster, leader, topic, 1)
    batch = bytearray(build_batch([(b"k", b"value")]))
    batch[-1] ^= 0xFF  # breaks the CRC
    conn = raw(cluster, leader)
    assert produce_raw(conn, topic, 1, bytes(batch)) == ErrorCode.CORRUPT_MESSAGE
    assert produce_raw(conn, topic, 1, b"\x00" * 30) == ErrorCode.CORRUPT_MESSAGE  # not a batch at all
    assert segment_bytes(cluster, leader, topic, 1) == before


def test_a_keyless_record_for_a_compacted_topic_is_invalid_record(cluster: LocalCluster) -> None:
    """Kafka's LogValidator: a compacted topic keeps the latest record per key, so a record with
    no key is refused (INVALID_RECORD) and nothing of its batch is stored; keyed ones go in."""
    create_topic(cluster.bootstrap_servers, "compacted-bad", 1, 3, {"cleanup.policy": "compact"})
    leader = leader_of(cluster, "compacted-bad", 0)
    conn = raw(cluster, leader)
    assert produce_raw(conn, "compacted-bad", 0, build_batch([(b"k", b"v"), (None, b"x")])) == ErrorCode.INVALID_RECORD
    assert produce_raw(conn, "compacted-bad", 0, build_batch([(b"k", b"v")])) == ErrorCode.NONE
    assert [(k, v) for _, _, k, v in consume_all(cluster.bootstrap_servers, "compacted-bad", 1, 1)] == [(b"k", b"v")]


def test_invalid_acks_value(cluster: LocalCluster, topic: str) -> None:
    leader = leader_of(cluster, topic, 2)
    conn = raw(cluster, leader)
    assert produce_raw(conn, topic, 2, build_batch([(None, b"x")]), acks=5) == ErrorCode.INVALID_REQUIRED_ACKS


def test_fetch_out_of_range_offset(cluster: LocalCluster, topic: str) -> None:
    leader = leader_of(cluster, topic, 0)
    conn = raw(cluster, leader)
    resp = conn.request(1, 12, {"max_wait": 0, "min_bytes": 1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 10**9, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    assert resp.responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


@pytest.mark.parametrize("name,partitions,rf,code", [
    ("bad/name", 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("x" * 250, 1, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ("too-many-replicas", 1, 4, ErrorCode.INVALID_REPLICATION_FACTOR),
    ("zero-partitions", 0, 1, ErrorCode.INVALID_PARTITIONS),
])
def test_create_topics_rejects_bad_requests(cluster: LocalCluster, name: str, partitions: int, rf: int,
                                            code: ErrorCode) -> None:
    conn = raw(cluster)
    resp = conn.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                                            "assignments": [], "configs": []}], "timeout": 5000,
                                "validate_only": False})
    assert resp.topics[0].error_code == code
    assert resp.topics[0].error_message
    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=10)
    assert name not in md.topics


def test_create_existing_topic_is_topic_already_exists(cluster: LocalCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    with pytest.raises(Exception) as err:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    assert err.value.args[0].code() == 36  # TOPIC_ALREADY_EXISTS
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3


def test_unknown_topic_config_is_invalid_config(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    with pytest.raises(Exception) as err:
        admin.create_topics([NewTopic("bad-config", 1, 1, config={"no.such.config": "1"})])["bad-config"].result(30)
    assert err.value.args[0].code() == 40  # INVALID_CONFIG


def test_leader_and_isr_from_an_older_controller_epoch_is_ignored(cluster: LocalCluster, topic: str) -> None:
    """A deposed controller (older epoch) cannot change a broker's view (epoch fencing, KAFKA-6082)."""
    from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition

    leader = leader_of(cluster, topic, 0)
    conn = raw(cluster, leader)
    stale = controller_api.LeaderAndIsrRequest(
        controller_id=99, controller_epoch=0, broker_epoch=-1,
        partition_states=(PartitionState(TopicPartition(topic, 0), 0, 99, 1000, (99,), 1000, (99,)),),
        live_leaders=(BrokerInfo(99, "127.0.0.1", 1),))
    conn.send_bytes(controller_api.encode_request(stale, 1, "zombie"))
    frame = conn.read_frame()
    corr, body = controller_api.parse_response_header(controller_api.API_LEADER_AND_ISR, 2, frame)
    response = controller_api.decode_response(controller_api.API_LEADER_AND_ISR, 2, body)
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert leader_of(cluster, topic, 0) == leader
    # and the partition still takes writes from real clients
    written = produce_acks_all(cluster.bootstrap_servers, topic, 10, prefix="after-zombie")
    assert len(written) == 10
    # every record of the topic is readable, these 10 included (the topic's other tests wrote
    # the rest: read up to the high watermarks, which a wrong guess of their count would wait
    # out for the whole timeout)
    read = consume_all(cluster.bootstrap_servers, topic, 3, end_offsets_total(cluster.bootstrap_servers, topic, 3))
    assert {(p, o) for p, o, _, _ in written} <= {(p, o) for p, o, _, _ in read}
    assert_broker_healthy(cluster)
