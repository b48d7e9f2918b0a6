"""`odradek status` as a health check, against real broker processes: exit 0 for a healthy
cluster, 3 for an unhealthy one, a broker killed with SIGKILL dead at once (its pid is gone
although ZooKeeper keeps its registration until the session expires), and preferred-leader
imbalance after leaders moved.

One cluster serves the module, with a ZooKeeper session timeout long enough (8 s) that the
status runs right after a SIGKILL (about a second of them) certainly read the dead broker's
registration still there, and short enough that the test then waits little for its expiry.
The tests run in order: the last one kills a broker for good.
"""
from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from clients import create_topic
from cluster_state import full_isr, leaders
from polling import wait_until

from cli_helpers import Running, run
from cluster_helpers import start_cluster
from odradek.admin.admin_client import elect_leaders
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

TOPIC = "spread"  # 6 partitions, RF 3: each broker is the preferred replica of 2


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("health"), 3, zookeeper_session_timeout_ms=8_000)
    try:
        create_topic(c.bootstrap_servers, TOPIC, 6, 3)
        wait_until(lambda: full_isr(c, TOPIC, 3), 30, "full ISRs")
        yield c
    finally:
        c.down()


def status(c: LocalCluster, *extra: str) -> tuple[int, dict[str, Any]]:
    """`odradek status --data-dir --json`: (exit status, the JSON)."""
    proc = run("status", "--data-dir", str(c.data_dir), "--json", *extra)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def status_text(c: LocalCluster) -> subprocess.CompletedProcess[str]:
    proc = run("status", "--data-dir", str(c.data_dir))
    assert "Traceback" not in proc.stderr and proc.stderr == "", proc.stderr
    return proc


def test_a_healthy_cluster_exits_0(cluster: LocalCluster) -> None:
    code, state = status(cluster)
    assert (code, state["healthy"], state["unhealthy_reasons"]) == (0, True, [])
    assert state["dead_brokers"] == [] and state["offline_partitions"] == [] == state["under_replicated_partitions"]
    assert state["preferred_replica_imbalance_count"] == 0
    assert [(b["broker"], b["preferred_partitions"], b["not_led"]) for b in state["leader_imbalance_per_broker"]] \
        == [(1, 2, 0), (2, 2, 0), (3, 2, 0)]
    assert [b["pid"] for b in state["brokers"]] == [cluster.broker_pid(b) for b in (1, 2, 3)]
    text = status_text(cluster)
    assert text.returncode == 0
    assert "healthy:            yes\n" in text.stdout and "leader imbalance:   0\n" in text.stdout
    # from ZooKeeper alone (no data dir) the same verdict
    proc = run("status", "--zookeeper", cluster.zookeeper_connect)
    assert proc.returncode == 0 and proc.stdout.startswith("healthy:            yes\n"), proc.stdout + proc.stderr


def test_leaders_moved_off_a_broker_show_as_imbalance_until_elected_back(cluster: LocalCluster) -> None:
    """A controlled shutdown (SIGTERM) moves broker 3's leaders away; back, it leads nothing:
    the partitions it is preferred for are imbalanced, which alone is not unhealthy."""
    preferred_by_3 = sorted(p for p, (_, preferred) in leaders(cluster, TOPIC).items() if preferred == 3)
    assert len(preferred_by_3) == 2
    pid = cluster.broker_pid(3)
    cluster.kill_broker(3, signal.SIGTERM)
    code, state = status(cluster)
    assert code == 3 and state["dead_brokers"] == [3]
    assert f"broker 3: process {pid} is gone" in state["unhealthy_reasons"]
    assert "6 partitions under-replicated" in state["unhealthy_reasons"]

    cluster.start_broker(3)
    cluster.wait_ready(cluster.broker_ids, timeout=60)
    wait_until(lambda: status(cluster)[0] == 0, 60, "broker 3 back in every ISR")
    code, state = status(cluster)
    assert code == 0 and state["preferred_replica_imbalance_count"] == 2
    assert [b for b in state["leader_imbalance_per_broker"] if b["not_led"]] == [
        {"broker": 3, "preferred_partitions": 2, "not_led": 2, "percentage": 100.0}]
    text = status_text(cluster)
    assert text.returncode == 0
    assert ("leader imbalance:   2 partitions not led by their preferred replica: broker 3 leads 0 of the 2 "
            "it is preferred for (imbalance 100%)\n") in text.stdout

    elect_leaders(cluster.bootstrap_servers, [(TOPIC, p) for p in preferred_by_3])
    wait_until(lambda: status(cluster)[1]["preferred_replica_imbalance_count"] == 0, 30, "the imbalance gone")


def test_a_killed_broker_is_dead_at_once_and_status_exits_3(cluster: LocalCluster) -> None:
    """Last: SIGKILL leaves the broker's registration in ZooKeeper until its session expires;
    status names it dead at once from its recorded pid, its partitions offline (it led them)
    or under-replicated, and exits 3, also from --watch. Once the session expired the
    controller has moved its leaders, and the verdict stays unhealthy."""
    code, state = status(cluster)
    assert code == 0
    victim = next(b for b in (1, 2, 3) if b != state["controller"])
    led = sorted(f"{TOPIC}-{p}" for p, (leader, _) in leaders(cluster, TOPIC).items() if leader == victim)
    assert led
    pid = cluster.broker_pid(victim)
    cluster.kill_broker(victim)

    code, state = status(cluster)
    dead = next(b for b in state["brokers"] if b["id"] == victim)
    assert dead["registered"] and not dead["live"], "the session expired before status ran: machine too slow?"
    assert code == 3 and not state["healthy"] and state["dead_brokers"] == [victim]
    assert (f"broker {victim}: process {pid} is gone; its ZooKeeper session has not expired yet"
            in state["unhealthy_reasons"])
    assert victim not in [b["id"] for b in state["live_brokers"]]
    assert state["offline_partitions"] == led
    assert sorted(state["under_replicated_partitions"]) == sorted(f"{TOPIC}-{p}" for p in range(6)
                                                                  if f"{TOPIC}-{p}" not in led)
    text = status_text(cluster)
    assert text.returncode == 3
    assert f"  - broker {victim}: process {pid} is gone; its ZooKeeper session has not expired yet\n" in text.stdout
    assert f"dead brokers:       {victim} (" in text.stdout

    watcher = Running("status", "--data-dir", str(cluster.data_dir), "--watch", "0.5")
    err = ""
    try:
        wait_until(lambda: any(line.split() == ["healthy:", "no"] for line in watcher.lines), 30,
                   "a frame saying the cluster is unhealthy")
    finally:
        err = watcher.interrupt()
    assert watcher.proc.returncode == 3 and "Traceback" not in err

    wait_until(lambda: not status(cluster)[1]["brokers"][victim - 1]["registered"], 60, "the session to expire")
    wait_until(lambda: status(cluster)[1]["offline_partitions"] == [], 30, "the controller to move its leaders")
    code, state = status(cluster)
    assert code == 3 and f"broker {victim}: process {pid} is gone" in state["unhealthy_reasons"]
    assert len(state["under_replicated_partitions"]) == 6
