"""`odradek ui` as a process for the dashboard's tests: started on a port once it serves, its
/api/state read, and stopped as an operator's Ctrl-C stops it; and the cluster with metrics
ports those tests read (the shared fixture's brokers have none)."""
from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port_block
from odradek.zk.server import ZooKeeperServer


@contextlib.contextmanager
def metrics_cluster(zookeeper: ZooKeeperServer, data_dir: Path, name: str) -> Iterator[LocalCluster]:
    """A 3-broker cluster whose brokers serve /metrics, stopped at the end."""
    c = LocalCluster(data_dir, 3, base_port=free_port_block(3),
                     zookeeper=f"{zookeeper.connect_string}/odradek-{name}-{uuid.uuid4().hex[:8]}",
                     broker_args={"zookeeper_session_timeout_ms": 4000}, metrics_base_port=free_port_block(3))
    try:
        c.up(timeout=60)
        yield c
    finally:
        c.down()


def start_ui(where: list[str], port: int, log: Path, interval_s: float = 0.5) -> subprocess.Popen:
    """`odradek ui` reading the cluster ``where`` names (--data-dir, or --zookeeper and
    --bootstrap-server), once it serves; stop it with stop_ui."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "odradek", "ui", *where, "--port", str(port),
                                 "--interval-s", str(interval_s)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=2):
                return proc
        except (urllib.error.URLError, OSError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"odradek ui did not serve on port {port}:\n{log.read_text()}")
            time.sleep(0.2)


def api_state(port: int) -> dict[str, Any]:
    """Every section of the dashboard on ``port`` (/api/state)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/state", timeout=5) as response:
        return json.loads(response.read())


def stop_ui(ui: subprocess.Popen, log: Path) -> None:
    """SIGTERM, as an operator's Ctrl-C: the dashboard must end cleanly."""
    ui.send_signal(signal.SIGTERM)
    try:
        ui.wait(10)
    except subprocess.TimeoutExpired:
        ui.kill()
        ui.wait()
    assert ui.returncode == 0, log.read_text()
