"""`odradek ui` given only --zookeeper and --bootstrap-server, as on a host without the brokers'
files: the brokers' registrations name their metrics endpoints, so the charts get points, and the
timeline follows the controller's state-change log over each broker's HTTP route."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clients import create_topic
from ui_process import api_state, metrics_cluster, start_ui, stop_ui

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration

TOPIC = "ui-remote"


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The module's 3-broker cluster, with metrics ports (the shared fixture's brokers have none)."""
    with metrics_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), "ui") as c:
        yield c


def test_remote_dashboard_has_timeline_and_metrics(cluster: LocalCluster, tmp_path: Path) -> None:
    create_topic(cluster.bootstrap_servers, TOPIC, 3, 3)
    port, log = free_port(), tmp_path / "ui.log"
    ui = start_ui(["--zookeeper", cluster.zookeeper_connect, "--bootstrap-server", cluster.bootstrap_servers],
                  port, log)
    try:
        deadline, state = time.monotonic() + 30, {}
        while True:
            state = api_state(port)
            elections = [r for r in state.get("timeline", []) if r.get("topic") == TOPIC]
            charted = {b for b, points in state.get("metrics", {}).get("brokers", {}).items() if len(points) >= 2}
            if elections and charted == {"1", "2", "3"}:
                break
            assert ui.poll() is None and time.monotonic() < deadline, \
                f"no remote timeline or metrics: {json.dumps(state)[:2000]}\n{log.read_text()}"
            time.sleep(0.3)
        assert {b["id"]: b["metrics_url"] for b in state["cluster"]["brokers"]} == \
            {b: cluster.metrics_url(b) for b in cluster.broker_ids}  # registered by each broker
        assert {r["log_broker"] for r in elections} == {state["cluster"]["controller"]}
        assert "state_change_log" not in state["errors"] and "metrics" not in state["errors"]
    finally:
        stop_ui(ui, log)
