"""KIP-253's controller steps on a real cluster: CreatePartitions on a topic with
enable.ordered.delivery=true writes undeleted_partition_count, bumps the existing partitions'
leader epochs and creates the new ones with leader_epoch_after_creation; a lower count in the
topic znode marks partitions for deletion (leader_epoch_before_deletion, bumps); a plain topic
grows as in Kafka, its znodes without any of these fields."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest
from clients import create_topic
from confluent_kafka.admin import AdminClient, NewPartitions

from odradek.admin.zookeeper import connect_zk
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration


def _wait_for(read: Any, predicate: Any, what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if predicate(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}; last read {value}")
        time.sleep(0.1)


def test_ordered_expansion_and_deletion_marking_write_kip253s_znodes(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    create_topic(bootstrap, "ord", 2, 2, {"enable.ordered.delivery": "true"})
    create_topic(bootstrap, "plain", 2, 2)
    zk = connect_zk(cluster.zookeeper_connect)

    def topic(name: str) -> dict[str, Any]:
        return json.loads(zk.get(f"/brokers/topics/{name}")[0])

    def states(name: str, count: int) -> dict[int, dict[str, Any]]:
        out = {}
        for p in range(count):
            path = f"/brokers/topics/{name}/partitions/{p}/state"
            if zk.exists(path):
                out[p] = json.loads(zk.get(path)[0])
        return out

    try:
        before = _wait_for(lambda: states("ord", 2), lambda s: len(s) == 2, "ord is created")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_partitions([NewPartitions("ord", 4), NewPartitions("plain", 3)],
                                          operation_timeout=10)
        for future in futures.values():
            future.result(30)

        grown = _wait_for(lambda: states("ord", 4), lambda s: len(s) == 4, "ord's new partitions")
        assert topic("ord")["undeleted_partition_count"] == 4
        assert topic("ord")["initial_partition_count"] == 2
        epochs = {str(p): before[p]["leader_epoch"] for p in (0, 1)}
        for p in (2, 3):
            assert grown[p]["leader_epoch_after_creation"] == epochs
        for p in (0, 1):
            assert grown[p]["leader_epoch"] > before[p]["leader_epoch"]
            assert grown[p]["leader"] == before[p]["leader"]  # a same-leader bump

        plain = _wait_for(lambda: states("plain", 3), lambda s: len(s) == 3, "plain grows")
        assert "undeleted_partition_count" not in topic("plain")
        assert all(set(s) == {"version", "leader", "leader_epoch", "isr", "controller_epoch"}
                   for s in plain.values())

        # the CLI's deletion write (a later piece): the count lowered in the topic znode
        data, stat = zk.get("/brokers/topics/ord")
        lowered = {**json.loads(data), "undeleted_partition_count": 3}
        zk.set("/brokers/topics/ord", json.dumps(lowered).encode(), version=stat.version)
        # (a bump that lost a race with a leader's ISR write lands in a later round)
        marked = _wait_for(lambda: states("ord", 4),
                           lambda s: "leader_epoch_before_deletion" in s[3] and all(
                               s[p]["leader_epoch"] > grown[p]["leader_epoch"] for p in range(3)),
                           "3 is marked and 0-2 bumped")
        assert marked[3]["leader_epoch_before_deletion"] == {
            str(p): grown[p]["leader_epoch"] for p in range(3)}
        for p in range(3):
            assert marked[p]["leader_epoch"] == grown[p]["leader_epoch"] + 1
        assert marked[3]["leader_epoch"] == grown[3]["leader_epoch"]
    finally:
        zk.stop()
        zk.close()
