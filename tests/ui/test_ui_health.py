"""The dashboard during an outage, without a cluster: brokers found dead by the poller's probes
count as dead in the grid and its summary, a grid ZooKeeper no longer answers for is marked
stale with the time it was last read, a ZooKeeper read that hangs holds the poll loop no longer
than an interval, and what the page says about a failure is in plain words (model.health,
model.cluster_state's ``down`` and ``stale``, Poller._read_zk, plain_words)."""
from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.handlers.threading import KazooTimeoutError

from odradek.common.metadata import BrokerInfo, LeaderAndIsr, TopicAssignment
from odradek.common.netutil import free_port
from odradek.ui import model, plain_words
from odradek.ui.plain_words import ZooKeeperSilent
from odradek.ui.poller import ClusterSource, Poller, ZkReader
from odradek.zk import paths

ZK = "127.0.0.1:1/odradek"


def _view(ports: dict[int, int]) -> model.ZkView:
    """Brokers registered on 127.0.0.1 at ``ports``; partition p of topic t led by broker p + 1."""
    assignment = TopicAssignment("t", paths.new_topic_id(), {p: (p + 1,) for p in range(len(ports))})
    return model.ZkView(
        controller=paths.encode_controller(1, 0), controller_epoch=paths.encode_controller_epoch(3),
        brokers={b: paths.encode_broker_info(BrokerInfo(b, "127.0.0.1", port), 0) for b, port in ports.items()},
        topics={"t": paths.encode_topic_assignment(assignment)},
        states={("t", p): paths.encode_leader_and_isr(LeaderAndIsr(p + 1, 0, (p + 1,), 1)) for p in range(len(ports))})


def test_brokers_found_dead_count_as_dead_and_the_summary_follows() -> None:
    view = _view({1: 9001, 2: 9002, 3: 9003})
    state = model.cluster_state(view, (1, 2, 3, 4), down={2: "does not answer on 127.0.0.1:9002"})
    brokers = {b["id"]: b for b in state["brokers"]}
    assert {b: v["live"] for b, v in brokers.items()} == {1: True, 2: False, 3: True, 4: False}
    assert brokers[2]["reason"] == "does not answer on 127.0.0.1:9002" and brokers[1]["reason"] is None
    assert brokers[4]["reason"] == "is not registered in ZooKeeper"
    assert state["summary"]["live_brokers"] == 2 and state["summary"]["offline"] == 1  # the partition 2 led
    assert state["controller"] == 1 and not state["stale"]
    health = model.health(state, None, 100.0, 100.5, 1.0)
    assert health["status"] == model.DEGRADED and not health["stale"]
    assert health["problems"] == ["broker 2 does not answer on 127.0.0.1:9002", "broker 4 is not registered in ZooKeeper"]
    healthy = model.health(model.cluster_state(view), None, 100.0, 100.5, 1.0)
    assert healthy["status"] == model.LIVE and healthy["problems"] == []


def test_a_stale_grid_says_when_it_was_read_and_a_stopped_cluster_shows_stopped() -> None:
    view = _view({1: 9001, 2: 9002})
    silent = plain_words.zookeeper_silent(ZK)
    assert silent == "ZooKeeper at 127.0.0.1:1 does not answer"
    running = model.cluster_state(view, stale=True)
    assert running["stale"] and running["controller"] is None  # nobody can tell who leads now
    health = model.health(running, silent, 100.0, 130.0, 1.0)
    assert health["status"] == model.STALE and health["stale"] and health["problems"] == [silent]
    assert (health["read_at"], health["checked_at"]) == (100_000, 130_000)

    stopped = model.cluster_state(view, (1, 2), stale=True,
                                  down={1: "does not answer on 127.0.0.1:9001", 2: "does not answer on 127.0.0.1:9002"})
    assert stopped["summary"]["live_brokers"] == 0 and stopped["summary"]["offline"] == 2
    health = model.health(stopped, silent, 100.0, 130.0, 1.0)
    assert health["status"] == model.STOPPED and health["problems"][0] == silent and len(health["problems"]) == 3
    assert model.health(None, None, None, 1.0, 1.0)["status"] == model.READING  # nothing read yet: not live


def test_failures_are_told_in_plain_words() -> None:
    for exc in (ZooKeeperSilent(), ConnectionLoss(), KazooTimeoutError("Connection time-out")):
        assert plain_words.describe(exc, ZK) == "ZooKeeper at 127.0.0.1:1 does not answer"
    assert plain_words.describe(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert plain_words.plain("AdminError: cannot reach a:1: [Errno 111] Connection refused; b:2: KeyError: 'x'") == \
        "cannot reach a:1: Connection refused; b:2: 'x'"
    assert plain_words.plain("ListGroups: UNKNOWN_TOPIC_OR_PARTITION") == "ListGroups: UNKNOWN_TOPIC_OR_PARTITION"
    assert plain_words.plain("ListGroups: _TIMED_OUT: Local: Timed out") == "ListGroups: Timed out"  # librdkafka's
    assert plain_words.plain("ClientConnectorError") == "failed for a reason the dashboard could not tell"
    url = "http://127.0.0.1:9101/metrics"
    assert plain_words.http_failure(2, url, aiohttp.ServerDisconnectedError()) == \
        "broker 2 does not answer on 127.0.0.1:9101"
    assert plain_words.http_failure(2, url, asyncio.TimeoutError()) == "broker 2 does not answer on 127.0.0.1:9101"
    response = aiohttp.ClientResponseError(None, (), status=503)  # type: ignore[arg-type]
    assert plain_words.http_failure(2, url, response) == "broker 2 answered HTTP 503 on 127.0.0.1:9101"
    [failed] = model.parse_state_changes(['{"kind": "failed", "error": "LeaderElectionError: no in-sync replica"}'], 1)
    assert failed["error"] == "no in-sync replica"  # the state-change log keeps the class name; the page does not


def test_a_reader_that_is_not_connected_asks_nothing() -> None:
    client = KazooClient(hosts="127.0.0.1:1")  # never started: kazoo would queue requests for ever
    with pytest.raises(ZooKeeperSilent):
        ZkReader(client).read(5.0)


class HangingReader:
    """A ZkReader whose reads answer ``view`` until ``hang`` is set, then wait for ``release``
    (ZooKeeper that stopped answering, as a kazoo request waits while its client reconnects)."""

    def __init__(self, view: model.ZkView) -> None:
        self.view, self.calls = view, 0
        self.hang, self.release = threading.Event(), threading.Event()

    def read(self, timeout: float) -> model.ZkView:
        self.calls += 1
        if self.hang.is_set():
            self.release.wait(30)
        return self.view


def test_a_hanging_zookeeper_read_does_not_hold_the_poll_and_the_grid_goes_stale() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        live_port, dead_port = server.sockets[0].getsockname()[1], free_port()
        reader = HangingReader(_view({1: live_port, 2: dead_port}))
        poller = Poller(ClusterSource(ZK, expected_brokers=(1, 2)), zk_interval=0.2, timeout=5.0)
        poller.zk_reader = reader  # type: ignore[assignment]
        try:
            def section(name: str) -> Any:
                import json
                return json.loads(poller.sections[name])

            await asyncio.wait_for(poller._read_zk(), 10)
            first = section("health")
            brokers = {b["id"]: b for b in section("cluster")["brokers"]}
            assert brokers[1]["live"] and not brokers[2]["live"]  # registered, but its port is closed
            assert first["status"] == model.DEGRADED
            assert first["problems"] == [f"broker 2 does not answer on 127.0.0.1:{dead_port}"]

            reader.hang.set()
            for _ in range(3):  # each poll returns although the read it started still waits
                await asyncio.wait_for(poller._read_zk(), 10)
            stale = section("health")
            assert stale["status"] == model.STALE and stale["problems"][0] == "ZooKeeper at 127.0.0.1:1 does not answer"
            assert stale["read_at"] == first["read_at"] and stale["checked_at"] > first["checked_at"]
            assert reader.calls == 2  # one read in flight at a time, not one more per poll
            cluster = section("cluster")
            assert cluster["stale"] and cluster["controller"] is None
            assert [b["live"] for b in cluster["brokers"]] == [True, False]  # broker 1 still answers

            server.close()
            await server.wait_closed()
            await asyncio.wait_for(poller._read_zk(), 10)
            stopped = section("health")
            assert stopped["status"] == model.STOPPED and section("cluster")["summary"]["live_brokers"] == 0
            assert f"broker 1 does not answer on 127.0.0.1:{live_port}" in stopped["problems"]

            reader.hang.clear()
            reader.release.set()  # ZooKeeper answers again: the waiting read lands, the grid is fresh
            for _ in range(50):  # a poll waits one interval for it; a loaded machine may need a few
                await asyncio.wait_for(poller._read_zk(), 10)
                if section("health")["read_at"] > first["read_at"]:
                    break
            assert section("health")["read_at"] > first["read_at"] and not section("cluster")["stale"]
        finally:
            reader.release.set()
            server.close()
            await poller.stop()

    asyncio.run(scenario())
