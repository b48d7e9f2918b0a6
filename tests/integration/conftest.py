"""Real clusters for integration tests: broker processes on the session's ZooKeeper.

Each cluster gets its own chroot, free ports and data dir, and is torn down by pid, so tests
never collide with each other or with a cluster a user left running on the default ports.

Starting a 3-broker cluster and stopping it costs a few seconds of a loaded 2-core machine, so
the modules whose tests only create topics of their own share one while the run is in this
directory: such a module sets ``SHARE_CLUSTER = True`` and promises that its topics, groups and
transactional ids are named as no other sharing module names them, that it kills none of the
brokers, and that it leaves no broker config changed. Each of them starts on a ready cluster,
and one that leaves a broker stopped fails (the broker is started again for the next). The
shared cluster is start_cluster's, its coordinators looking for timed-out transactions every
500 ms instead of Kafka's 10 s (for the tests of transaction timeouts; every other transaction
of the sharing modules has a 60 s timeout).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster_helpers import start_cluster
from odradek.cluster.local_cluster import LocalCluster
from odradek.zk.server import ZooKeeperServer

#: the shared cluster while it runs: started by the first sharing module, stopped once the run
#: leaves this directory (pytest_runtest_teardown) or at the latest by shared_cluster_slot
_shared: list[LocalCluster] = []


def _stop_shared() -> None:
    while _shared:
        _shared.pop().down()


@pytest.fixture(scope="session")
def shared_cluster_slot(zookeeper: ZooKeeperServer) -> Iterator[list[LocalCluster]]:
    """Holds the shared cluster; stops it at the session's end if it still runs then, before
    the session's ZooKeeper stops."""
    try:
        yield _shared
    finally:
        _stop_shared()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test of this directory (and its fixtures' teardown) the shared cluster
    stops, so the tests that follow get the machine to themselves."""
    try:
        return (yield)
    finally:
        if nextitem is not None and Path(__file__).parent not in Path(nextitem.path).parents:
            _stop_shared()


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, zookeeper: ZooKeeperServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One 3-broker cluster shared by the tests of a module (each test uses its own topics);
    the shared one for a module that sets SHARE_CLUSTER = True."""
    if getattr(request.module, "SHARE_CLUSTER", False):
        slot: list[LocalCluster] = request.getfixturevalue("shared_cluster_slot")
        if not slot:
            slot.append(start_cluster(zookeeper, tmp_path_factory.mktemp("shared-cluster"),
                                      transaction_abort_timed_out_transaction_cleanup_interval_ms=500))
        shared = slot[0]
        shared.wait_ready(shared.broker_ids, 60)
        yield shared
        # a module that broke its promise fails here; the next one gets every broker back
        stopped = [b for b in shared.broker_ids if shared.broker_pid(b) is None]
        for broker_id in stopped:
            shared.start_broker(broker_id)
        if stopped:
            shared.wait_ready(shared.broker_ids, 90, stopped)
        assert not stopped, f"{request.module.__name__} left brokers {stopped} of the shared cluster stopped"
        return
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
