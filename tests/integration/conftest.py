"""Real clusters for integration tests: broker processes on the session's ZooKeeper.

Each cluster gets its own chroot, free ports and data dir, and is torn down by pid, so tests
never collide with each other or with a cluster a user left running on the default ports.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One 3-broker cluster shared by the tests of a module (each test uses its own topics)."""
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("cluster"))
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def cluster_factory(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[object]:
    """Start private clusters for tests that kill or restart brokers; all stopped afterwards."""
    started: list[LocalCluster] = []

    def make(brokers: int = 3, **broker_args: object) -> LocalCluster:
        c = start_cluster(zookeeper, tmp_path / f"cluster-{len(started)}", brokers, **broker_args)
        started.append(c)
        return c

    try:
        yield make
    finally:
        for c in started:
            c.down()
