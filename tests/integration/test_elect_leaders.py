"""Preferred and unclean leader elections with real processes: ElectLeaders from confluent-kafka,
kafka-python and the CLI, the ZooKeeper-era /admin/preferred_replica_election znode, and the
controller's automatic leader rebalance after a broker comes back."""
from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from clients import create_topic
from cluster_state import controller_id, full_isr, leaders, zk
from kafka.admin import KafkaAdminClient
from polling import wait_until
from wire import RawConnection

from cluster_helpers import start_cluster
from odradek.admin.admin_client import elect_leaders
from odradek.broker import api_keys
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.metadata import TopicPartition
from odradek.zk import paths
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

BALANCED = "balanced"  # every partition led by its preferred replica throughout


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's 3-broker cluster, where nothing but the elections under test moves a leader
    back to its preferred replica (auto.leader.rebalance.enable=false)."""
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("elect"), 3, auto_leader_rebalance_enable=False)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def balanced(cluster: LocalCluster) -> str:
    """A 6-partition RF-3 topic whose every partition is led by its preferred replica."""
    create_topic(cluster.bootstrap_servers, BALANCED, 6, 3)
    wait_until(lambda: full_isr(cluster, BALANCED, 3), 30, "leaders and full ISRs")
    return BALANCED


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


def test_elect_leaders_moves_leadership_back_to_preferred_replicas(cluster: LocalCluster) -> None:
    """A dead preferred replica is PREFERRED_LEADER_NOT_AVAILABLE; once back, it leads again only
    when asked: through the ZooKeeper-era znode (an empty one is dropped) or ElectLeaders, which
    reports only the partitions that needed an election."""
    c = cluster
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
    # ElectLeaders answers once the elections are in ZooKeeper; brokers' metadata follows
    wait_until(lambda: all(leader == preferred for leader, preferred in leaders(c, "pref").values()), 10,
               "every leader preferred in metadata")


def test_elect_leaders_answers_election_not_needed_and_unknown_partition(cluster: LocalCluster, balanced: str) -> None:
    again = elect_leaders(cluster.bootstrap_servers, [(balanced, 0), (balanced, 42)])
    assert again[(balanced, 0)].startswith("ELECTION_NOT_NEEDED")
    assert again[(balanced, 42)].startswith("UNKNOWN_TOPIC_OR_PART")


def test_kafka_python_elect_leaders_reaches_the_controller(cluster: LocalCluster, balanced: str) -> None:
    """kafka-python speaks another version of the API; it too reaches the controller."""
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        response = kp.elect_leaders(0, {balanced: [1]}, raise_errors=False)
    finally:
        kp.close()
    assert [(r[0], [tuple(p[:2]) for p in r[1]]) for r in response.replica_election_results] == [(balanced, [(1, 84)])]


def test_a_broker_that_is_not_the_controller_answers_elect_leaders_not_controller(
        cluster: LocalCluster, balanced: str) -> None:
    controller = controller_id(cluster)
    other = next(b for b in cluster.broker_ids if b != controller)
    conn = RawConnection("127.0.0.1", cluster.broker_port(other))
    try:
        raw = conn.request(api_keys.ELECT_LEADERS, 1, {"election_type": 0, "timeout": 5000,
                                                   "topic_partitions": [{"topic": balanced, "partitions": [2]}]})
    finally:
        conn.close()
    assert [(r.topic, [(p.partition_id, int(p.error_code)) for p in r.partition_result])
            for r in raw.replica_election_results] == [(balanced, [(2, 41)])]


def test_cli_elect_leaders_counts_the_partitions_of_a_topic_or_of_every_topic(
        cluster: LocalCluster, balanced: str) -> None:
    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "elect-leaders", "--bootstrap-server",
                          cluster.bootstrap_servers, "--topic", balanced], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "preferred leader election: 0 elected, 6 not needed, 0 failed"
    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "elect-leaders", "--bootstrap-server",
                          cluster.bootstrap_servers], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "preferred leader election: 0 elected, 0 failed, every other partition needed none"


def test_cli_elect_leaders_rejects_partition_without_topic() -> None:
    out = subprocess.run([sys.executable, "-m", "odradek", "topics", "elect-leaders", "--partition", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip() == "odradek: error: topics elect-leaders: --partition needs --topic"
