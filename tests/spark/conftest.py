"""Spark fixtures: one local[2] SparkSession per test run, and 3-broker clusters on the
session's ZooKeeper (tests/cluster_helpers.py)."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # so tests can import pipelines/


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one SparkSession of the run (local[2], 2 shuffle partitions, quiet logs)."""
    from odradek.spark.session import local_session

    session = local_session("odradek-tests", master="local[2]", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-broker cluster shared by one module's tests (each test uses its own topics)."""
    # retention checked every second, so a test can see segments deleted (failOnDataLoss)
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("spark-cluster"),
                      log_retention_check_interval_ms=1000)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def private_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of the test's own, for tests that kill brokers."""
    c = start_cluster(zookeeper, tmp_path / "cluster")
    try:
        yield c
    finally:
        c.down()
