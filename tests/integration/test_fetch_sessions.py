"""Incremental fetch sessions over the wire: after a full fetch, an incremental one returns only
partitions with something new."""
from __future__ import annotations

import pytest
from clients import create_topic
from confluent_kafka.admin import AdminClient
from wire import RawConnection

from odradek.cluster.local_cluster import LocalCluster
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch

pytestmark = pytest.mark.integration
#: `cluster` is the shared one (conftest.py): this module's topics, groups and transactional
#: ids are its own, and it neither kills nor reconfigures that cluster's brokers
SHARE_CLUSTER = True


def fetch(conn: RawConnection, session_id: int, epoch: int, partitions: list[tuple[int, int]]) -> object:
    return conn.request(1, 12, {
        "max_wait": 0, "min_bytes": 1, "session_id": session_id, "session_epoch": epoch,
        "topics": [{"topic": "sessions", "partitions": [
            {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20} for p, o in partitions]}]
        if partitions else [],
        "forgotten_topics_data": []})


def test_incremental_fetch_returns_only_changed_partitions(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    create_topic(cluster.bootstrap_servers, "sessions", 3, 1)
    leaders = {p.id: p.leader for p in admin.list_topics("sessions", timeout=10).topics["sessions"].partitions.values()}
    # a broker leading at least one partition; fetch the partitions it leads
    broker = leaders[0]
    mine = sorted(p for p, leader in leaders.items() if leader == broker)
    conn = RawConnection(cluster.host, cluster.broker_port(broker))
    full = fetch(conn, 0, 0, [(p, 0) for p in mine])
    assert full.error_code == ErrorCode.NONE and full.session_id > 0
    assert sorted(p.partition_index for t in full.responses for p in t.partitions) == mine
    idle = fetch(conn, full.session_id, 1, [])
    assert [p for t in idle.responses for p in t.partitions] == []  # nothing new anywhere
    produced = conn.request(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "sessions", "partition_data": [{"index": mine[0], "records": build_batch([(None, b"x")])}]}]})
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    changed = fetch(conn, full.session_id, 2, [])
    assert [(p.partition_index, p.high_watermark) for t in changed.responses for p in t.partitions] == [(mine[0], 1)]
    assert changed.responses[0].partitions[0].records
    stale = fetch(conn, full.session_id, 2, [])
    assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
