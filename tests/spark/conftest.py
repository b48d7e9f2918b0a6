"""Spark fixtures: one local[2] SparkSession per test run, and 3-broker clusters on the
session's ZooKeeper (tests/cluster_helpers.py): one shared by every Spark module, and private
ones for the tests that kill brokers."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS, start_cluster
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


@pytest.fixture(scope="session")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-broker cluster shared by the Spark modules' tests (each test uses topics of its own,
    named by topic_name; none kills a broker or changes a broker config), so it is started
    once rather than once a module; stopped at the end of the run."""
    # retention checked every second, so a test can see segments deleted (failOnDataLoss)
    c = start_cluster(zookeeper, tmp_path_factory.mktemp("spark-cluster"),
                      log_retention_check_interval_ms=1000)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def private_cluster(zookeeper: ZooKeeperServer, tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of the test's own, for tests that kill brokers (and wait for ZooKeeper to
    expire the killed broker's session: the shortest it grants)."""
    c = start_cluster(zookeeper, tmp_path / "cluster", zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    try:
        yield c
    finally:
        c.down()
