"""A 3-broker cluster driven only through the `odradek` command line, as an operator would.

One cluster (private ZooKeeper, free ports) serves the whole module: starting it costs seconds,
and the tests read as one session at a terminal: create, describe, produce, consume, kill a
broker, watch status, `up` again, `down`.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block
from odradek.zk.server import check_installed

pytestmark = pytest.mark.integration
ODRADEK = str(Path(sys.executable).with_name("odradek"))


def odradek(*args: str, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([ODRADEK, *args], input=stdin, capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"odradek {' '.join(args)}: {proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """`odradek up` on free ports; yields (data dir, bootstrap servers); always `odradek down`."""
    problem = check_installed()
    if problem:
        pytest.skip(problem)
    data_dir = tmp_path_factory.mktemp("cluster")
    base = free_port_block(3)
    odradek("up", "--brokers", "3", "--data-dir", str(data_dir), "--base-port", str(base),
            "--zk-port", str(free_port()), "--metrics-base-port", str(free_port_block(3)))
    try:
        yield data_dir, f"127.0.0.1:{base}"
    finally:
        odradek("down", "--data-dir", str(data_dir), check=False)


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def status(data_dir: Path) -> dict:
    """`status --json`; it exits 3 while the cluster is unhealthy (a broker dead, a partition
    under-replicated), 0 once healthy."""
    proc = odradek("status", "--data-dir", str(data_dir), "--json", check=False)
    state = json.loads(proc.stdout)
    assert proc.returncode == (0 if state["healthy"] else 3), proc.stderr
    return state


def test_up_registers_three_brokers_and_a_controller(cluster: tuple[Path, str]) -> None:
    data_dir, _ = cluster
    state = status(data_dir)
    assert [b["id"] for b in state["live_brokers"]] == [1, 2, 3]
    assert state["controller"] in (1, 2, 3)
    assert json.loads((data_dir / "cluster.json").read_text())["brokers"][0]["pid"]
    # each broker serves Prometheus metrics where cluster.json and `status` say
    for broker in state["live_brokers"]:
        with urllib.request.urlopen(broker["metrics_url"], timeout=10) as response:
            assert b"kafka_server_replicamanager_partitioncount" in response.read()


def test_topic_lifecycle_and_describe_json(cluster: tuple[Path, str]) -> None:
    data_dir, bootstrap = cluster
    odradek("topics", "create", "events", "--partitions", "6", "--replication-factor", "3",
            "--config", "retention.ms=600000", "--bootstrap-server", bootstrap)
    assert "events" in odradek("topics", "list", "--bootstrap-server", bootstrap).stdout.split()

    def all_led() -> bool:
        [topic] = json.loads(odradek("topics", "describe", "events", "--json", "--bootstrap-server", bootstrap).stdout)
        return all(p["leader"] in (1, 2, 3) and len(p["isr"]) == 3 for p in topic["partitions"])

    wait_for(all_led, what="leaders and full ISR for every partition")
    [topic] = json.loads(odradek("topics", "describe", "events", "--json", "--bootstrap-server", bootstrap).stdout)
    assert topic["name"] == "events" and [p["partition"] for p in topic["partitions"]] == list(range(6))
    for p in topic["partitions"]:
        assert sorted(p["replicas"]) == [1, 2, 3] and p["leader_epoch"] >= 0
    table = odradek("topics", "describe", "events", "--bootstrap-server", bootstrap).stdout.splitlines()
    assert table[0].split() == ["Topic", "Partition", "Leader", "LeaderEpoch", "Replicas", "Isr"]
    assert len(table) == 8 and table[-1] == "Configs of topic events: retention.ms=600000"
    state = status(data_dir)
    assert state["partitions"] >= 6 and state["offline_partitions"] == []


@pytest.mark.parametrize("args, error", [
    (["events", "--partitions", "1", "--replication-factor", "1"], "TOPIC_ALREADY_EXISTS"),
    (["too-wide", "--partitions", "1", "--replication-factor", "4"], "INVALID_REPLICATION_FACTOR"),
    (["too-large", "--partitions", "100000", "--replication-factor", "3"], "POLICY_VIOLATION"),
])
def test_create_errors_are_kafka_errors_on_one_line(cluster: tuple[Path, str], args: list[str], error: str) -> None:
    proc = odradek("topics", "create", *args, "--bootstrap-server", cluster[1], check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and error in proc.stderr


def test_produce_then_consume_from_beginning(cluster: tuple[Path, str]) -> None:
    _, bootstrap = cluster
    odradek("topics", "create", "lines", "--partitions", "3", "--replication-factor", "3",
            "--bootstrap-server", bootstrap)
    lines = [f"k{i % 5}:value-{i}" for i in range(200)]
    odradek("produce", "lines", "--key-separator", ":", "--bootstrap-server", bootstrap, stdin="\n".join(lines) + "\n")
    out = odradek("consume", "lines", "--from-beginning", "--max-messages", "200", "--timeout-s", "20",
                  "--print-key", "--bootstrap-server", bootstrap).stdout
    assert sorted(out.splitlines()) == sorted(line.replace(":", "\t", 1) for line in lines)


def test_killed_broker_shows_in_status_and_up_restarts_it(cluster: tuple[Path, str]) -> None:
    data_dir, bootstrap = cluster
    local = LocalCluster.load(data_dir)
    old_pid = local.broker_pid(3)
    local.kill_broker(3)
    # its pid is gone: dead at once, before ZooKeeper expires its session
    assert [b["id"] for b in status(data_dir)["live_brokers"]] == [1, 2]
    wait_for(lambda: status(data_dir)["under_replicated_partitions"], what="under-replicated partitions")
    # once the session expired the controller moves the leaders it had: nothing stays offline
    wait_for(lambda: not status(data_dir)["brokers"][2]["registered"], what="broker 3 deregistered")
    wait_for(lambda: status(data_dir)["offline_partitions"] == [], what="its leaders moved")

    cfg = json.loads((data_dir / "cluster.json").read_text())
    odradek("up", "--brokers", "3", "--data-dir", str(data_dir), "--base-port", str(cfg["base_port"]),
            "--zk-port", str(cfg["zk_port"]), "--metrics-base-port", str(cfg["metrics_base_port"]))
    new_pid = local.broker_pid(3)
    assert new_pid and new_pid != old_pid
    assert local.broker_pid(1) and local.broker_pid(2)
    wait_for(lambda: not status(data_dir)["under_replicated_partitions"], timeout=60, what="ISR to heal")
