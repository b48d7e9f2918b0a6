"""`odradek ui --data-dir` while brokers are killed and restarted: the dashboard keeps serving,
its consumer-group reader (a child process holding librdkafka's AdminClient) survives being
aborted as librdkafka's assertions abort it, and on a healthy cluster the page shows no error."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from clients import create_topic
from ui_process import api_state, start_ui, stop_ui

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.admin.consumer_group_command import GroupAdmin
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port

pytestmark = pytest.mark.integration

TOPIC = "ui-restarts"
GROUP = "ui-restarts-group"


def _wait(ui: Any, port: int, log: Path, what: str, ok: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict:
    """Polls /api/state until ``ok``; the ui process must stay alive and answer throughout."""
    deadline, state = time.monotonic() + timeout, {}
    while True:
        assert ui.poll() is None, f"odradek ui died (exit {ui.returncode}):\n{log.read_text()}"
        state = api_state(port)
        if ok(state):
            return state
        assert time.monotonic() < deadline, f"{what}: {json.dumps(state)[:3000]}\n{log.read_text()}"
        time.sleep(0.3)


def _healthy(state: dict[str, Any]) -> bool:
    """Every broker live, the group read with its committed offsets, and no error at all."""
    brokers = state.get("cluster", {}).get("brokers", [])
    groups = {g["group"]: g for g in state.get("groups", [])}
    return (len(brokers) == 3 and all(b["live"] for b in brokers) and GROUP in groups
            and "error" not in groups[GROUP] and len(groups[GROUP]["offsets"]) == 3 and state["errors"] == {})


def _reader_pid(ui_pid: int) -> int:
    """The ui's kafka_reader child (started from a worker thread: listed under that thread's task)."""
    for task in Path(f"/proc/{ui_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"odradek.ui.kafka_reader" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    raise AssertionError("odradek ui has no kafka_reader child")


@pytest.mark.parametrize("victims", [(2,), pytest.param((1, 2, 3), marks=pytest.mark.slow)],
                         ids=["one-restart", "every-broker-restarted"])
def test_dashboard_survives_broker_restarts_and_reader_aborts(cluster_factory, tmp_path: Path,
                                                              victims: tuple[int, ...]) -> None:
    cluster: LocalCluster = cluster_factory(3, zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(cluster.bootstrap_servers, TOPIC, 3, 3)
    GroupAdmin(cluster.bootstrap_servers, 10).execute_reset(  # a group with committed offsets, no members
        GROUP, [{"topic": TOPIC, "partition": p, "new": 0} for p in range(3)])
    port, log = free_port(), tmp_path / "ui.log"
    ui = start_ui(["--data-dir", str(cluster.data_dir)], port, log)
    try:
        # --data-dir asks the live brokers ZooKeeper lists: no stale "no live broker to ask"
        _wait(ui, port, log, "no healthy state on a healthy cluster", _healthy)

        for victim in victims:
            cluster.kill_broker(victim)
            _wait(ui, port, log, f"broker {victim} not shown dead", lambda s: any(
                b["id"] == victim and not b["live"] for b in s["cluster"]["brokers"]))
            time.sleep(1.0)  # a Kafka round or two against the dead broker
            cluster.start_broker(victim)
            _wait(ui, port, log, f"broker {victim} not shown live again", lambda s: all(
                b["live"] for b in s["cluster"]["brokers"]))

        # the reader dies as librdkafka's assertions make it die: reported, replaced, served on
        os.kill(_reader_pid(ui.pid), signal.SIGABRT)
        _wait(ui, port, log, "the reader's death not reported",
              lambda s: "SIGABRT" in s["errors"].get("groups", ""))
        _wait(ui, port, log, "not healthy again after the reader's restart", _healthy)
    finally:
        stop_ui(ui, log)
