"""One real cluster for every KIP-253 integration module in this package.

Starting a 3-broker cluster costs 2-5 s of a loaded 2-core machine and stopping it another
half second, once per module with tests/integration/conftest.py's module-scoped `cluster`; the
modules here share one instead (each test uses its own topic and group names), which keeps
`make test` inside its 15 minutes. The one cluster carries what each module needed of its own:

- Prometheus metrics on every broker (the ordered group blocks' series);
- group.initial.rebalance.delay.ms 100: members that join together still form one generation
  (KIP-134's delay), without Kafka's 3 s wait before every new group's first generation;
- replica.lag.time.max.ms far above any wait: a follower stalled by a same-leader leader-epoch
  bump stays in the ISR, so an acks=all produce then never comes back instead of coming back
  late (a broker's death still shrinks the ISR: the controller takes dead replicas out);
- ZooKeeper sessions of 4 s, as every test cluster: a killed broker's session expires soon.

Some modules kill brokers (a controller, a group coordinator); before each module every broker
is running again, so no module inherits another's failure.

tests/integration/test_ordered_consumer.py stays outside, on a cluster with Kafka's 3 s initial
rebalance delay, which its timing (the backlog its slow partitions build between alters) was
tuned on.

The package has an __init__.py so that its package-scoped cluster is torn down after its last
module rather than at the end of the session.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port_block
from odradek.zk.server import ZooKeeperServer

BROKERS = 3
BROKER_ARGS: dict[str, object] = {"zookeeper_session_timeout_ms": 4000, "group_initial_rebalance_delay_ms": 100,
                                  "replica_lag_time_max_ms": 600_000}


@pytest.fixture(scope="package")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three brokers on a private ZooKeeper chroot, shared by the package's modules."""
    c = LocalCluster(tmp_path_factory.mktemp("ordered") / "cluster", BROKERS, base_port=free_port_block(BROKERS),
                     zookeeper=f"{zookeeper.connect_string}/odradek-ordered-{uuid.uuid4().hex[:12]}",
                     broker_args=BROKER_ARGS, metrics_base_port=free_port_block(BROKERS))
    try:
        c.up(timeout=60)
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module", autouse=True)
def every_broker_running(cluster: LocalCluster) -> None:
    """Restarts the brokers an earlier module killed and left down, and waits until the
    cluster is ready again (registered, a controller, metadata everywhere)."""
    stopped = [b for b in cluster.broker_ids if cluster.broker_pid(b) is None]
    for broker_id in stopped:
        cluster.start_broker(broker_id)
    if stopped:
        cluster.wait_ready(cluster.broker_ids, 90, stopped)
