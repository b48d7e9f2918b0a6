"""Starting a real cluster for a test: broker processes on the session's ZooKeeper, in a chroot,
data dir and free ports of their own, so tests never collide with each other or with a cluster
a user left running on the default ports."""
from __future__ import annotations

import uuid
from pathlib import Path

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port_block
from odradek.zk.server import ZooKeeperServer

#: zookeeper.session.timeout.ms of the test clusters
SESSION_TIMEOUT_MS = 4000
#: ZooKeeper's least (minSessionTimeout in the zoo.cfg of odradek.zk.server), as the fault runs
#: use: for the clusters of tests that kill or freeze a broker and then only wait for ZooKeeper
#: to expire its session (a new leader, controller or ISR; a restarted broker's registration)
SHORT_SESSION_TIMEOUT_MS = 2000


def start_cluster(zookeeper: ZooKeeperServer, data_dir: Path, brokers: int = 3, ports_per_broker: int = 1,
                  **broker_args: object) -> LocalCluster:
    """``ports_per_broker`` > 1 keeps that many blocks of ``brokers`` free ports, for further
    listeners at {port+brokers}, {port+2*brokers} ... (LocalCluster's port placeholders)."""
    chroot = f"/odradek-it-{uuid.uuid4().hex[:12]}"
    cluster = LocalCluster(data_dir, brokers, base_port=free_port_block(brokers * ports_per_broker),
                           zookeeper=zookeeper.connect_string + chroot,
                           broker_args={"zookeeper_session_timeout_ms": SESSION_TIMEOUT_MS, **broker_args})
    try:
        cluster.up(timeout=60)
    except BaseException:
        cluster.down()
        raise
    return cluster
