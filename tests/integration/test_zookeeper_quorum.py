"""Brokers on a three-server ZooKeeper ensemble (`odradek up --zookeeper-nodes 3`), with real
processes: one ZooKeeper server's death is invisible to Kafka clients; the quorum's loss stops
only what needs ZooKeeper (elections, topic creation), never the produce and fetch paths of
partitions that have leaders; when the quorum returns the brokers still hold their sessions
and the controller works. And a broker told to stop while the quorum is gone still stops:
its controlled shutdown gives up after controlled.shutdown.max.retries x retry.backoff.ms."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import ContinuousProducer, check_exactly_once_in_order, consume_all, create_topic
from cluster_state import full_isr
from kazoo.client import KazooClient
from polling import wait_until

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.admin.admin_client import describe_topics
from odradek.cluster.local_cluster import LocalCluster, pid_alive
from odradek.common.netutil import free_port_block
from odradek.common.process import process_alive
from odradek.zk.server import ZooKeeperEnsemble, check_installed

pytestmark = pytest.mark.integration
ODRADEK = str(Path(sys.executable).with_name("odradek"))
#: the brokers' ZooKeeper sessions: the shortest ZooKeeper grants, so that the quorum's loss
#: outlasts several of them in a few seconds
SESSION_TIMEOUT_MS = SHORT_SESSION_TIMEOUT_MS
#: KafkaServer.controlledShutdown's bound at the defaults (3 attempts, 5 s backoff), plus a
#: generous margin for closing the ZooKeeper session and the broker's own teardown on a busy host
SHUTDOWN_DEADLINE_S = 3 * 5 + 30


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """3 brokers on a private 3-server ensemble, free ports; `down` (by pid) afterwards."""
    problem = check_installed()
    if problem:
        pytest.fail(problem)
    c = LocalCluster(tmp_path / "cluster", 3, base_port=free_port_block(3), zk_port=free_port_block(3),
                     zookeeper_nodes=3, broker_args={"zookeeper_session_timeout_ms": SESSION_TIMEOUT_MS,
                                                     "min_insync_replicas": 2})
    try:
        c.up(timeout=90)
        yield c
    finally:
        c.down()


def leadership(c: LocalCluster, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch), from a Metadata request."""
    return {p["partition"]: (p["leader"], p["leader_epoch"])
            for p in describe_topics(c.bootstrap_servers, [topic])[0]["partitions"]}


def registrations(c: LocalCluster) -> dict[int, int]:
    """broker id -> czxid of its /brokers/ids znode (its broker epoch: a new one after any
    re-registration)."""
    zk = KazooClient(hosts=c.zookeeper_connect)
    zk.start(10)
    try:
        return {int(b): zk.exists(f"/brokers/ids/{b}").czxid for b in zk.get_children("/brokers/ids")}
    finally:
        zk.stop()
        zk.close()


def lose_quorum(ens: ZooKeeperEnsemble) -> tuple[int, int, int]:
    """kill -9 two servers, the leader first; returns (first, second, survivor) once the
    survivor has stopped serving."""
    first = ens.leader_id()
    assert first is not None
    ens.kill(first)
    ens.wait_for_quorum(30)
    second = ens.leader_id()
    assert second is not None and second != first
    ens.kill(second)
    survivor = next(s for s in ens.server_ids if s not in (first, second))
    wait_until(lambda: ens.modes()[survivor] == "not serving", 30, "the last ZooKeeper server to stop serving")
    return first, second, survivor


def test_zookeeper_server_deaths_and_quorum_loss_change_no_leader(cluster: LocalCluster) -> None:
    c, ens = cluster, cluster.zookeeper_ensemble()
    create_topic(c.bootstrap_servers, "zkq", 6, 3)
    wait_until(lambda: full_isr(c, "zkq", 3), 30, "full ISRs")
    before = leadership(c, "zkq")
    sessions = registrations(c)
    producer = ContinuousProducer(c.bootstrap_servers, "zkq", 6).start()
    try:
        producer.wait_acked(1000)

        # one server of three dies (the leader: the other two elect a new one)
        first = ens.leader_id()
        assert first is not None
        ens.kill(first)
        ens.wait_for_quorum(30)
        producer.wait_acked(len(producer.acked) + 2000)
        assert sorted(ens.modes().values()) == ["down", "follower", "leader"]
        assert leadership(c, "zkq") == before

        # a second one dies: no quorum, for three session timeouts
        ens.restart(first)
        ens.wait_for_quorum(30)
        _, second, survivor = lose_quorum(ens)
        lost_at = time.monotonic()
        acked = len(producer.acked)
        time.sleep(3 * SESSION_TIMEOUT_MS / 1000)
        producer.wait_acked(acked + 2000)
        read = consume_all(c.bootstrap_servers, "zkq", 6, len(producer.acked), timeout_s=60)
        assert len(read) >= acked + 2000
        assert leadership(c, "zkq") == before
        assert ens.modes()[survivor] == "not serving", "the quorum came back on its own"
        assert all(c.broker_pid(b) for b in c.broker_ids)
        print(f"quorum lost for {time.monotonic() - lost_at:.1f} s; {len(producer.acked) - acked} writes "
              f"acknowledged meanwhile")

        # the quorum returns: the brokers kept their sessions, the controller works
        ens.restart(first)
        ens.restart(second)
        ens.wait_for_quorum(30)
        wait_until(lambda: registrations(c) == sessions, 30, "every broker registered with its old session")
        create_topic(c.bootstrap_servers, "after-quorum", 3, 3)
        wait_until(lambda: full_isr(c, "after-quorum", 3), 30, "leaders and ISRs of a topic created afterwards")
        producer.wait_acked(len(producer.acked) + 1000)
        assert leadership(c, "zkq") == before
    finally:
        producer.stop()
    assert not producer.errors
    check_exactly_once_in_order(c.bootstrap_servers, producer)


def odradek(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ODRADEK, *args], capture_output=True, text=True, timeout=timeout)


def recorded_pids(data_dir: Path) -> list[int]:
    state = json.loads((data_dir / "cluster.json").read_text())
    return [p for p in [b["pid"] for b in state["brokers"]] + [z["pid"] for z in state["zookeeper_servers"]] if p]


@pytest.mark.slow  # 45 s: make test-long (make test keeps the ensemble's deaths and quorum loss)
def test_cli_ensemble_status_restart_and_a_bounded_stop_without_quorum(tmp_path: Path) -> None:
    """`up --zookeeper-nodes 3`, `status` with each server's mode, `up` restarting a killed
    server, then the quorum killed: a SIGTERM'd broker exits after its bounded controlled
    shutdown and `odradek down` returns, stopping every process."""
    if check_installed():
        pytest.fail(str(check_installed()))
    data_dir = tmp_path / "cluster"
    up = ["up", "--brokers", "3", "--zookeeper-nodes", "3", "--data-dir", str(data_dir),
          "--base-port", str(free_port_block(3)), "--zk-port", str(free_port_block(3)),
          "--metrics-base-port", "0"]
    started: list[int] = []
    try:
        proc = odradek(*up)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count("zookeeper server ") == 3
        started = recorded_pids(data_dir)
        status = json.loads(odradek("status", "--data-dir", str(data_dir), "--json").stdout)
        assert sorted(s["mode"] for s in status["zookeeper_servers"]) == ["follower", "follower", "leader"]
        assert len(status["live_brokers"]) == 3

        c = LocalCluster.load(data_dir)
        ens = c.zookeeper_ensemble()
        # partitions broker 1 leads, so its controlled shutdown has leadership to move
        proc = odradek("topics", "create", "led", "--partitions", "6", "--replication-factor", "3",
                       "--bootstrap-server", c.bootstrap_servers)
        assert proc.returncode == 0, proc.stderr
        wait_until(lambda: full_isr(c, "led", 3), 30, "full ISRs")
        victim = ens.leader_id()
        assert victim is not None
        os.kill(ens.pids()[victim], signal.SIGKILL)
        wait_until(lambda: ens.modes()[victim] == "down" and ens.leader_id() is not None, 30,
                   "the killed server down and a new leader")
        text = odradek("status", "--data-dir", str(data_dir)).stdout
        assert f"{ens.servers[victim].connect_string} down" in text
        proc = odradek(*up)  # restarts only what died
        assert proc.returncode == 0, proc.stderr
        started += recorded_pids(data_dir)
        assert "down" not in ens.modes().values()

        lose_quorum(ens)
        proc = odradek("status", "--data-dir", str(data_dir), "--timeout-s", "2")
        assert proc.returncode == 1
        assert proc.stderr.startswith("odradek: error: ") and "not serving" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1

        broker = c.broker_pid(1)
        assert broker is not None
        start = time.monotonic()
        os.kill(broker, signal.SIGTERM)
        wait_until(lambda: not pid_alive(broker), SHUTDOWN_DEADLINE_S, "the SIGTERM'd broker to exit")
        print(f"broker 1 exited {time.monotonic() - start:.1f} s after SIGTERM with the quorum lost")
        log = (c.broker_dir(1) / "broker.log").read_text()
        assert "controlled shutdown" in log and "stopping anyway" in log.split("shutting down")[-1]

        proc = odradek("down", "--data-dir", str(data_dir))
        assert proc.returncode == 0, proc.stderr
        assert "stopped the cluster" in proc.stdout
        assert not [p for p in started if process_alive(p)]  # zombies (exited, not yet reaped) count as gone
    finally:
        for pid in started:  # whatever `down` left behind (the test failed), by pid
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
