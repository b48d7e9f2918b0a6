"""Shared fixtures: one private ZooKeeper per test session, a private chroot per test, and
librdkafka's protocol errors turned into test failures (librdkafka_guard.py)."""
from __future__ import annotations

import gc
import os
import signal
import uuid
from collections.abc import Iterator

import librdkafka_guard

librdkafka_guard.install()  # before any test module imports confluent_kafka's clients

# A suite started in the background without job control (`(pytest &)`) inherits SIGINT ignored,
# and so would every command it starts: the tests that stop a `--watch` with Ctrl-C waited 30 s
# and failed. Caught here, SIGINT is back to the default in each child (exec resets a caught
# signal, not an ignored one).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402

from odradek.common.netutil import PORT_SHARE_ENV, free_port  # noqa: E402

# `make test` runs two pytest-xdist workers (gw0, gw1): each draws free ports from its own share of
# the port range, as do the ZooKeepers and brokers it starts, so the two never race for one port.
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    os.environ[PORT_SHARE_ENV] = (f"{int(os.environ['PYTEST_XDIST_WORKER'][2:])}/"
                                  f"{int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))}")
from odradek.zk.server import ZooKeeperEnsemble, ZooKeeperServer, check_installed  # noqa: E402


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper on a free port; `make test` installs java and the jars first."""
    problem = check_installed()
    if problem:
        pytest.fail(problem)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"), free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A private three-server ensemble on free ports for a test that kills and restarts its
    servers (ensemble.kill(server_id), ensemble.restart(server_id)); every server is stopped
    by pid afterwards, also when the test fails."""
    problem = check_installed()
    if problem:
        pytest.fail(problem)
    ensemble = ZooKeeperEnsemble.on_free_ports(tmp_path_factory.mktemp("zookeeper-ensemble"), 3)
    try:
        ensemble.start()
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A connect string with a chroot of its own, so tests never see each other's znodes."""
    return f"{zookeeper.connect_string}/odradek-test-{uuid.uuid4().hex}"


@pytest.fixture(autouse=True)
def no_librdkafka_protocol_errors() -> Iterator[None]:
    """Fails a test during which a confluent-kafka client logged a protocol error: librdkafka
    only logs them (and drops the response), so counting records would not notice."""
    librdkafka_guard.take_protocol_errors()
    yield
    errors = librdkafka_guard.take_protocol_errors()
    assert not errors, "librdkafka protocol errors:\n" + "\n".join(errors[:20])


@pytest.fixture
def collector_off() -> Iterator[None]:
    """CPython's cycle collector off for the test, so only reference counting frees anything:
    an object still alive at the end was kept by a reference cycle (common/gc_policy.py)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


#: the fault runs (tests/faults/test_*fault_run.py) each start a ZooKeeper ensemble, three
#: brokers and their clients and judge timings: one at a time, never two side by side
FAULT_RUNS = "fault-runs"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test`'s pytest-xdist groups (--dist loadgroup): each test file is one group, so its
    module-scoped cluster starts once, on one worker; the fault runs are one group, and the
    Spark tests another, so a single SparkSession serves them (tests/spark/conftest.py)."""
    for item in items:
        path = item.path.relative_to(config.rootpath).as_posix()
        if path.startswith("tests/faults/") and path.endswith("fault_run.py"):
            group = FAULT_RUNS
        elif path.startswith("tests/spark/"):
            group = "spark"
        else:
            group = path
        item.add_marker(pytest.mark.xdist_group(group))
