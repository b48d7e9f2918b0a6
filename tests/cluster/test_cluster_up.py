"""`odradek up` / `down` on a data dir that already holds a cluster: cluster.json is the truth.

Real ZooKeeper and broker processes, driven only through the command line. Whether anything
is left running is checked by pid: every process whose command line names the test's data dir
(ZooKeeper's config and a broker's --data-dir both live under it), read from /proc.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import assert_one_line_error, run
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block
from odradek.common.process import process_alive
from odradek.zk.server import check_installed

pytestmark = pytest.mark.integration


def processes_under(data_dir: Path) -> list[int]:
    """Live pids whose command line mentions `data_dir`: what an `up` there left running."""
    needle = str(data_dir.resolve()).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes() and process_alive(int(entry.name)):
                    pids.append(int(entry.name))
            except OSError:  # exited while we looked
                pass
    return pids


def up(data_dir: Path, *flags: str) -> list[str]:
    proc = run("up", "--data-dir", str(data_dir), *flags, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def actions(lines: list[str]) -> dict[str, str]:
    """{"broker 1": "started", "zookeeper server 1": "already running", ...} from `up`'s output."""
    return {m[1]: m[2] for line in lines if (m := re.match(r"(broker \d+|zookeeper server \d+): ([a-z ]+),", line))}


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir for one test; whatever runs from it afterwards is stopped by pid (and the
    test fails if `down` was expected to have done that already)."""
    if check_installed():
        pytest.fail(str(check_installed()))
    path = tmp_path / "cluster"
    yield path
    leftovers = processes_under(path)
    for pid in leftovers:
        os.killpg(pid, signal.SIGKILL)
    assert not leftovers, f"processes left running from {path}: {leftovers}"


def new_cluster_flags(brokers: int) -> list[str]:
    return ["--base-port", str(free_port_block(brokers + 1)), "--zk-port", str(free_port()),
            "--metrics-base-port", "0"]


def test_up_reuses_its_record_grows_only_when_asked_and_down_twice(data_dir: Path) -> None:
    assert actions(up(data_dir, "--brokers", "1", *new_cluster_flags(1))) == {
        "zookeeper server 1": "started", "broker 1": "started"}
    recorded = json.loads((data_dir / "cluster.json").read_text())

    # again, without flags: everything already runs, on the recorded ports
    again = up(data_dir)
    assert actions(again) == {"zookeeper server 1": "already running", "broker 1": "already running"}
    assert f"bootstrap servers: 127.0.0.1:{recorded['base_port']}" in again
    assert json.loads((data_dir / "cluster.json").read_text()) == recorded

    # flags that contradict cluster.json are refused, naming the flag, the record and what to do
    other_port = str(recorded["base_port"] + 7)
    assert_one_line_error(run("up", "--data-dir", str(data_dir), "--base-port", other_port), 1,
                          f"--base-port {other_port}", f"--base-port {recorded['base_port']}", "leave --base-port out")
    assert_one_line_error(run("up", "--data-dir", str(data_dir), "--brokers", "2"), 1,
                          "--brokers 2", "--brokers 1", "--add-broker")
    assert json.loads((data_dir / "cluster.json").read_text()) == recorded

    # a broker that cannot be added (its log dir is a file) is stopped again; the rest keeps running
    running = LocalCluster.load(data_dir).running()
    (data_dir / "broker-2").mkdir()
    (data_dir / "broker-2" / "data").write_text("not a directory")
    failed = run("up", "--data-dir", str(data_dir), "--add-broker", timeout=120)
    assert failed.returncode == 1 and "broker 2 exited" in failed.stderr, failed.stderr
    assert "stopped what it had started (broker 2 pid" in failed.stderr
    assert LocalCluster.load(data_dir).running() == running
    assert json.loads((data_dir / "cluster.json").read_text()) == recorded
    (data_dir / "broker-2" / "data").unlink()

    # growing is explicit: the next id on the next port, recorded
    assert actions(up(data_dir, "--add-broker")) == {
        "zookeeper server 1": "already running", "broker 1": "already running", "broker 2": "started"}
    grown = json.loads((data_dir / "cluster.json").read_text())
    assert [(b["id"], b["port"]) for b in grown["brokers"]] == [(1, recorded["base_port"]), (2, recorded["base_port"] + 1)]

    # a broker that died is restarted as recorded
    cluster = LocalCluster.load(data_dir)
    cluster.kill_broker(2)
    # too short to wait out the killed process's registration: the error names broker 2 and shows its log
    short = run("up", "--data-dir", str(data_dir), "--timeout-s", "0.3", timeout=120)
    assert short.returncode == 1 and "no controller" not in short.stderr, short.stderr
    assert "broker 2 has not registered yet: /brokers/ids/2 is still its previous process's" in short.stderr
    assert f"tail of {data_dir / 'broker-2' / 'broker.log'}:" in short.stderr
    assert "broker-1" not in short.stderr
    assert actions(up(data_dir))["broker 2"] == "restarted"
    pids = [pid for _, pid in cluster.running()]
    assert len(pids) == 3

    # a record that lost broker 2 (as an older `up --brokers 1` wrote it): `down` still stops it
    state = json.loads((data_dir / "cluster.json").read_text())
    state["brokers"] = state["brokers"][:1]
    (data_dir / "cluster.json").write_text(json.dumps(state))
    first = run("down", "--data-dir", str(data_dir))
    assert first.returncode == 0 and "stopped the cluster in" in first.stdout, first.stderr
    assert "broker 2 (pid" in first.stdout and "ZooKeeper" in first.stdout
    assert not any(process_alive(pid) for pid in pids) and not processes_under(data_dir)
    second = run("down", "--data-dir", str(data_dir))
    assert second.returncode == 0 and "nothing is running" in second.stdout, second.stderr


def test_a_taken_port_is_refused_before_anything_starts(data_dir: Path) -> None:
    flags = new_cluster_flags(2)
    taken = int(flags[1]) + 1  # broker 2's port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        proc = run("up", "--data-dir", str(data_dir), "--brokers", "2", *flags)
    assert_one_line_error(proc, 1, f"127.0.0.1:{taken} (broker 2)", "nothing was started", "--base-port")
    metrics = free_port_block(2) + 1  # broker 2's metrics port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", metrics))
        holder.listen()
        proc = run("up", "--data-dir", str(data_dir), "--brokers", "2", *flags[:4], "--metrics-base-port",
                   str(metrics - 1))
    assert_one_line_error(proc, 1, f"127.0.0.1:{metrics} (broker 2 metrics)", "--metrics-base-port")
    assert not processes_under(data_dir)
    assert not (data_dir / "cluster.json").exists()


@pytest.mark.parametrize("flags, status, fragment", [
    (["--brokers", "3", "--base-port", "70000"], 1, "--base-port 70000"),
    (["--brokers", "0"], 2, "positive integer"),
    (["--add-broker"], 1, "no cluster in"),
    ([], 1, "--brokers is required"),
])
def test_invalid_values_are_refused_before_anything_starts(
        tmp_path: Path, flags: list[str], status: int, fragment: str) -> None:
    data_dir = tmp_path / "cluster"
    assert_one_line_error(run("up", "--data-dir", str(data_dir), *flags), status, fragment)
    assert not data_dir.exists()


def test_a_failed_up_stops_what_it_started(data_dir: Path) -> None:
    """Broker 2 cannot start (its log dir is a file): ZooKeeper and broker 1, which this `up`
    started, are stopped again by pid, and the error says so."""
    (data_dir / "broker-2").mkdir(parents=True)
    (data_dir / "broker-2" / "data").write_text("not a directory")
    proc = run("up", "--data-dir", str(data_dir), "--brokers", "2", "--timeout-s", "30", *new_cluster_flags(2),
               timeout=120)
    assert proc.returncode == 1, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("odradek: error: `up` failed; it stopped what it had started (ZooKeeper"), first
    assert "broker 2 exited" in first
    stopped = [int(pid) for pid in re.findall(r"pid (\d+)", first)]
    assert len(stopped) == 3 and not any(process_alive(pid) for pid in stopped)
    assert not processes_under(data_dir)
    assert not (data_dir / "cluster.json").exists()  # a first `up` that failed leaves no record


@pytest.mark.slow
def test_ensemble_up_restarts_a_server_whose_recorded_port_is_free_again(data_dir: Path) -> None:
    """With `--zookeeper-nodes 3` the quorum and election ports are recorded too: a dead
    server's port held by another process is refused before anything starts, and once it is
    free `up` restarts that server alone."""
    flags = ["--base-port", str(free_port_block(2)), "--zk-port", str(free_port_block(3)), "--metrics-base-port", "0"]
    assert set(actions(up(data_dir, "--brokers", "1", "--zookeeper-nodes", "3", *flags)).values()) == {"started"}
    assert_one_line_error(run("up", "--data-dir", str(data_dir), "--zookeeper-nodes", "1"), 1,
                          "--zookeeper-nodes 1", "--zookeeper-nodes 3")
    ensemble = LocalCluster.load(data_dir).zookeeper_ensemble()
    election_port = ensemble.peers[1].election_port
    ensemble.kill(2)
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the killed server's TIME_WAITs
        deadline = time.monotonic() + 5
        while True:  # the killed server's sockets close a moment after it exits
            try:
                holder.bind(("127.0.0.1", election_port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        holder.listen()
        proc = run("up", "--data-dir", str(data_dir))
    assert_one_line_error(proc, 1, f"127.0.0.1:{election_port} (ZooKeeper server 2 election)", "cluster.json")
    assert actions(up(data_dir)) == {"zookeeper server 1": "already running", "zookeeper server 2": "restarted",
                                     "zookeeper server 3": "already running", "broker 1": "already running"}
    assert actions(up(data_dir, "--add-broker"))["broker 2"] == "started"
    assert "stopped the cluster in" in run("down", "--data-dir", str(data_dir)).stdout
    assert "nothing is running" in run("down", "--data-dir", str(data_dir)).stdout
