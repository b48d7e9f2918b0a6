"""WriteTxnMarkers and TxnOffsetCommit on a real cluster, sent raw as a transaction coordinator
and a transactional producer would: a leader writes a marker (acks=all) whether or not the
producer had a transaction there, fences a deposed coordinator, refuses what it does not lead;
a transaction's offsets stay pending on the group's coordinator until their marker comes."""
from __future__ import annotations

from typing import Any

import pytest
from clients import create_topic, end_offsets_total
from confluent_kafka.admin import AdminClient
from wire import RawConnection, coordinator_connection

from odradek.cluster.local_cluster import LocalCluster
from odradek.coordinator.partitioning import partition_for
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True

WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS, JOIN_GROUP = 27, 28, 9, 18, 11


def replicas(cluster: LocalCluster, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader, replicas) of a partition, from the cluster's metadata."""
    meta = AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(topic, timeout=10)
    p = meta.topics[topic].partitions[partition]
    return p.leader, list(p.replicas)


def connect(cluster: LocalCluster, broker_id: int) -> RawConnection:
    return RawConnection(cluster.host, cluster.broker_port(broker_id), timeout=40)


def markers(conn: RawConnection, producer_id: int, commit: bool, coordinator_epoch: int,
            topics: dict[str, list[int]], producer_epoch: int = 0) -> dict[tuple[str, int], ErrorCode]:
    response = conn.request(WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
         "coordinator_epoch": coordinator_epoch,
         "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]})
    (marker,) = response.markers
    assert marker.producer_id == producer_id
    return {(t.name, p.partition_index): ErrorCode(p.error_code) for t in marker.topics for p in t.partitions}


def test_both_apis_are_advertised(cluster: LocalCluster) -> None:
    conn = connect(cluster, 1)
    try:
        keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in conn.request(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}).api_keys}
    finally:
        conn.close()
    assert keys[WRITE_TXN_MARKERS] == (1, 1) and keys[TXN_OFFSET_COMMIT] == (0, 3)


def test_a_leader_writes_a_marker_and_fences_an_older_coordinator(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "txn-markers", 1, 3)
    leader, ids = replicas(cluster, "txn-markers", 0)
    conn = connect(cluster, leader)
    follower = connect(cluster, next(b for b in ids if b != leader))
    try:
        # no transaction of this producer here: Kafka writes the marker anyway
        assert markers(conn, 900001, True, 5, {"txn-markers": [0], "no-such-topic": [0]}) == {
            ("txn-markers", 0): ErrorCode.NONE, ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert end_offsets_total(cluster.bootstrap_servers, "txn-markers", 1) == 1  # replicated: acks=all
        assert markers(conn, 900001, True, 5, {"txn-markers": [0]}) == {("txn-markers", 0): ErrorCode.NONE}
        assert markers(conn, 900001, False, 4, {"txn-markers": [0]}) == \
            {("txn-markers", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
        assert markers(follower, 900001, True, 5, {"txn-markers": [0]}) == \
            {("txn-markers", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}
        assert end_offsets_total(cluster.bootstrap_servers, "txn-markers", 1) == 2
    finally:
        conn.close()
        follower.close()


def fetch_offset(conn: RawConnection, group: str, topic: str, stable: bool) -> tuple[int, int]:
    """(committed offset, partition error) of partition 0, by OffsetFetch v7."""
    response: Any = conn.request(OFFSET_FETCH, 7, {"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0]}], "require_stable": stable})
    assert response.error_code == 0
    p = response.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def open_offsets_transaction(cluster: LocalCluster, transactional_id: str, group: str) -> tuple[int, int]:
    """InitProducerId and AddOffsetsToTxn at the id's transaction coordinator: (producer id, epoch)."""
    from polling import wait_until

    from odradek.admin.admin_client import send_request

    first = cluster.bootstrap_servers.split(",")[0]
    found: dict[str, object] = {}

    def coordinator() -> bool:
        answer = send_request(first, 10, 3, {"key": transactional_id, "key_type": 1}, 10)
        found["address"] = f"{answer.host}:{answer.port}"
        return answer.error_code == 0
    wait_until(coordinator, 30, "a transaction coordinator")
    address = str(found["address"])
    init = send_request(address, 22, 4, {"transactional_id": transactional_id, "transaction_timeout": 60000,
                                         "producer_id": -1, "producer_epoch": -1}, 10)
    assert init.error_code == 0, init
    added = send_request(address, 25, 3, {"transactional_id": transactional_id, "producer_id": init.producer_id,
                                          "producer_epoch": init.producer_epoch, "group_id": group}, 10)
    assert added.error_code == 0, added
    return init.producer_id, init.producer_epoch


def test_a_transactions_offsets_are_pending_until_its_commit_marker(cluster: LocalCluster) -> None:
    create_topic(cluster.bootstrap_servers, "txn-offsets", 1, 3)
    group = "txn-offsets-group"
    conn, _coordinator = coordinator_connection(cluster.host, cluster.broker_port(1), group)
    pid, epoch = open_offsets_transaction(cluster, "txn-offsets-producer", group)  # KIP-890: a real one
    try:
        committed = conn.request(TXN_OFFSET_COMMIT, 3, {
            "transactional_id": "txn-offsets-producer", "group_id": group, "producer_id": pid,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "txn-offsets", "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
        assert fetch_offset(conn, group, "txn-offsets", stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
        assert fetch_offset(conn, group, "txn-offsets", stable=False) == (-1, ErrorCode.NONE)
        offsets_partitions = len(AdminClient({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(
            "__consumer_offsets", timeout=10).topics["__consumer_offsets"].partitions)
        offsets_partition = partition_for(group, offsets_partitions)
        # the group's coordinator leads its offsets partition: the marker goes there
        assert markers(conn, pid, True, 0, {"__consumer_offsets": [offsets_partition]}, producer_epoch=epoch) == \
            {("__consumer_offsets", offsets_partition): ErrorCode.NONE}
        assert fetch_offset(conn, group, "txn-offsets", stable=True) == (42, ErrorCode.NONE)
    finally:
        conn.close()


def test_a_txn_offset_commit_of_a_stale_generation_or_unknown_member_is_refused(cluster: LocalCluster) -> None:
    """KIP-447: a zombie copier, from a generation the group has left behind or a member it has
    removed, cannot commit offsets in its transaction; the current member can."""
    create_topic(cluster.bootstrap_servers, "txn-generations", 1, 3)
    group = "txn-generations-group"
    conn, _coordinator = coordinator_connection(cluster.host, cluster.broker_port(1), group)
    pid, epoch = open_offsets_transaction(cluster, "txn-generations-producer", group)

    def join(member_id: str) -> Any:
        return conn.request(JOIN_GROUP, 5, {
            "group_id": group, "session_timeout": 30_000, "rebalance_timeout": 5_000, "member_id": member_id,
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})

    def commit(generation: int, member_id: str) -> ErrorCode:
        response = conn.request(TXN_OFFSET_COMMIT, 3, {
            "transactional_id": "txn-generations-producer", "group_id": group, "producer_id": pid,
            "producer_epoch": epoch, "generation_id": generation, "member_id": member_id,
            "group_instance_id": None, "topics": [{"name": "txn-generations", "partitions": [
                {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        return ErrorCode(response.topics[0].partitions[0].error_code)

    try:
        first = join("")
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
        joined = join(first.member_id)
        assert joined.error_code == ErrorCode.NONE
        member, generation = joined.member_id, joined.generation_id
        assert commit(generation + 1, member) == ErrorCode.ILLEGAL_GENERATION
        assert commit(generation, "a-member-the-group-never-had") == ErrorCode.UNKNOWN_MEMBER_ID
        assert fetch_offset(conn, group, "txn-generations", stable=False) == (-1, ErrorCode.NONE)  # nothing kept
        assert commit(generation, member) == ErrorCode.NONE
    finally:
        conn.close()
