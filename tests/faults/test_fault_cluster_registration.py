"""The fault cluster's check that a broker is registered by its running process, on a real
ZooKeeper: a killed broker's registration outlives it until its session expires, and a check
that passed on it let the next fault hit the restarted process during its first connection."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from odradek.faults.cluster import FaultCluster
from odradek.zk.server import ZooKeeperServer

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    client = KazooClient(hosts=f"{zookeeper.connect_string}/fault-registration-{uuid.uuid4().hex[:8]}")
    client.start(30)
    client.ensure_path("/brokers/ids")
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _register(zk: KazooClient, broker_id: int, timestamp_ms: int) -> None:
    path = f"/brokers/ids/{broker_id}"
    data = json.dumps({"host": "10.0.0.1", "port": 9092, "timestamp": str(timestamp_ms)}).encode()
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data)


def test_only_a_registration_written_after_the_process_started_counts(zk: KazooClient) -> None:
    cluster = FaultCluster.__new__(FaultCluster)  # ZooKeeper's view only: no processes, no namespace
    cluster._zk = zk
    started = int(time.time() * 1000)
    cluster._started_ms = {1: started, 2: started}
    _register(zk, 1, started + 5)
    _register(zk, 2, started - 3000)  # the killed process's registration, its session not yet expired
    assert cluster.registered() == {1}
    _register(zk, 2, started + 20)  # the restarted process registered
    _register(zk, 3, 1)  # a broker never started by this cluster: any registration is its own
    assert cluster.registered() == {1, 2, 3}
