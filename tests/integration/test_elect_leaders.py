"""Preferred and unclean leader elections with real processes: ElectLeaders from confluent-kafka,
kafka-python and the CLI, the ZooKeeper-era /admin/preferred_replica_election znode, and the
controller's automatic leader rebalance after a broker comes back."""
from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
from clients import create_topic
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from test_failover import controller_of, full_isr, wait_until, zk
from wire import RawConnection

from odradek.admin.admin_client import elect_leaders
from odradek.broker import api_keys
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.metadata import TopicPartition
from odradek.zk import paths

pytestmark = pytest.mark.integration


def leaders(c: LocalCluster, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, preferred replica)."""
    md = AdminClient({"bootstrap.servers": c.bootstrap_servers}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, p.replicas[0]) for p in md.topics[topic].partitions.values()}


def stop_broker(c: LocalCluster, topic: str, victim: int) -> list[int]:
    """SIGTERM ``victim`` (its session closes, so leadership moves at once) and wait until it
    leads nothing; returns the partitions it is the preferred replica of."""
    c.kill_broker(victim, signal.SIGTERM)
    wait_until(lambda: all(leader not in (victim, -1) for leader, _ in leaders(c, topic).values()), 30,
               f"leaders to move off broker {victim}")
    return sorted(p for p, (_, preferred) in leaders(c, topic).items() if preferred == victim)


def restart(c: LocalCluster, topic: str) -> None:
    c.up(timeout=60)
    wait_until(lambda: full_isr(c, topic, 3), 60, "the restarted broker to rejoin every ISR")


def test_elect_leaders_moves_leadership_back_to_preferred_replicas(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(auto_leader_rebalance_enable=False)
    create_topic(c.bootstrap_servers, "pref", 6, 3)
    # not the controller: librdkafka would keep sending ElectLeaders to the dead one for a minute
    victim = next(b for b in c.broker_ids if b != controller_id(c))
    mine = stop_broker(c, "pref", victim)
    assert mine
    dead = elect_leaders(c.bootstrap_servers, [("pref", p) for p in mine])
    assert all(err.startswith("PREFERRED_LEADER_NOT_AVAILABLE") for err in dead.values()), dead

    restart(c, "pref")
    assert all(leaders(c, "pref")[p][0] != victim for p in mine)  # nothing moved leadership back yet

    # The ZooKeeper-era tools' way, for the first partition: the controller deletes the znode when done.
    client = zk(c)
    try:
        client.create(paths.PREFERRED_REPLICA_ELECTION,
                      paths.encode_preferred_election([TopicPartition("pref", mine[0])]), makepath=True)
        wait_until(lambda: client.exists(paths.PREFERRED_REPLICA_ELECTION) is None, 30, "the znode to go")
    finally:
        client.stop()
    wait_until(lambda: leaders(c, "pref")[mine[0]][0] == victim, 10, "the znode's election to reach metadata")
    client = zk(c)
    try:  # an empty (malformed) request is dropped too, so the tool can write a correct one
        client.create(paths.PREFERRED_REPLICA_ELECTION, b"")
        wait_until(lambda: client.exists(paths.PREFERRED_REPLICA_ELECTION) is None, 30, "the empty znode to go")
    finally:
        client.stop()

    # ElectLeaders for every partition reports only those that needed an election.
    results = elect_leaders(c.bootstrap_servers, None)
    assert results == {("pref", p): None for p in mine[1:]}
    assert all(leader == preferred for leader, preferred in leaders(c, "pref").values())

    again = elect_leaders(c.bootstrap_servers, [("pref", 0), ("pref", 42)])
    assert again[("pref", 0)].startswith("ELECTION_NOT_NEEDED")
    assert again[("pref", 42)].startswith("UNKNOWN_TOPIC_OR_PART")

    # kafka-python speaks another version of the API; it too reaches the controller.
    kp = KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
    try:
        response = kp.elect_leaders(0, {"pref": [1]}, raise_errors=False)
    finally:
        kp.close()
    assert [(r[0], [tuple(p[:2]) for p in r[1]]) for r in response.replica_election_results] == [("pref", [(1, 84)])]

    # A broker that is not the controller answers NOT_CONTROLLER.
    controller = controller_id(c)
    other = next(b for b in c.broker_ids if b != controller)
    conn = RawConnection("127.0.0.1", c.broker_port(other))
    try:
        raw = conn.request(api_keys.ELECT_LEADERS, 1, {"election_type": 0, "timeout": 5000,
                                                   "topic_partitions": [{"topic": "pref", "partitions": [2]}]})
    finally:
        conn.close()
    assert [(r.topic, [(p.partition_id, int(p.error_code)) for p in r.partition_result])
            for r in raw.replica_election_results] == [("pref", [(2, 41)])]

    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "elect-leaders", "--bootstrap-server",
                          c.bootstrap_servers, "--topic", "pref"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "preferred leader election: 0 elected, 6 not needed, 0 failed"
    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "elect-leaders", "--bootstrap-server",
                          c.bootstrap_servers], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "preferred leader election: 0 elected, 0 failed, every other partition needed none"


def test_controller_rebalances_leaders_after_a_broker_returns(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(leader_imbalance_check_interval_seconds=1)
    create_topic(c.bootstrap_servers, "rebalance", 6, 3)
    assert stop_broker(c, "rebalance", next(b for b in c.broker_ids if b != controller_id(c)))
    restart(c, "rebalance")
    wait_until(lambda: all(leader == preferred for leader, preferred in leaders(c, "rebalance").values()), 30,
               "the controller to move leadership back to the preferred replicas")
    log = (c.broker_dir(controller_id(c)) / "broker.log").read_text()
    assert "preferred leader election (auto)" in log


def controller_id(c: LocalCluster) -> int:
    client = zk(c)
    try:
        return controller_of(client)[0]
    finally:
        client.stop()


def test_cli_elect_leaders_rejects_partition_without_topic() -> None:
    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "elect-leaders", "--partition", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == "odradek: error: topics elect-leaders: --partition needs --topic"
