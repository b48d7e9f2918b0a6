"""Shared fixtures: one private ZooKeeper per test session, a private chroot per test."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from odradek.netutil import free_port
from odradek.zk.server import ZooKeeperServer, check_installed


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
def zk_connect(zookeeper: ZooKeeperServer) -> str:
    """A connect string with a chroot of its own, so tests never see each other's znodes."""
    return f"{zookeeper.connect_string}/odradek-test-{uuid.uuid4().hex}"
