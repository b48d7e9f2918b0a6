"""A three-server ZooKeeper ensemble (QuorumPeerMain) against the real Debian package: server
modes, a leader's death, the loss and return of the quorum, and a session that outlives the
quorum's absence."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.retry import ForceRetryError

from odradek.common.netutil import free_port
from odradek.zk.client import RECONNECT_MAX_DELAY_S, KafkaZkClient, reconnect_retry
from odradek.zk.server import ZooKeeperEnsemble, ZooKeeperServer, connect_string_servers, four_letter_word, server_mode

pytestmark = pytest.mark.integration


def wait_for(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - start


def test_ensemble_elects_a_leader_survives_one_death_and_serves_only_with_a_quorum(
        zookeeper_ensemble: ZooKeeperEnsemble) -> None:
    ens = zookeeper_ensemble
    modes = ens.modes()
    assert sorted(modes.values()) == ["follower", "follower", "leader"]
    assert connect_string_servers(ens.connect_string + "/chroot") == [
        (s.host, s.port) for s in ens.servers.values()]
    for server in ens.servers.values():
        assert f"server.{server.server_id}=" in (server.data_dir / "zoo.cfg").read_text()
        assert (server.data_dir / "data" / "myid").read_text().strip() == str(server.server_id)

    leader = ens.leader_id()
    assert leader is not None
    ens.kill(leader)
    ens.wait_for_quorum(30)
    assert ens.modes()[leader] == "down"
    assert ens.pids()[leader] is None
    assert ens.leader_id() not in (None, leader)

    second = next(sid for sid in ens.server_ids if sid not in (leader, ens.leader_id()))
    survivor = next(sid for sid in ens.server_ids if sid not in (leader, second))
    ens.kill(second)
    # alone, the survivor stops serving once it notices it lost its followers
    wait_for(lambda: ens.modes()[survivor] == "not serving", 30, "the survivor to stop serving")
    assert not ens.servers[survivor].is_serving()

    ens.restart(leader)  # two of three: a quorum again
    ens.wait_for_quorum(30)
    ens.restart(second)
    assert sorted(ens.modes().values()) == ["follower", "follower", "leader"]


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    ens = ZooKeeperEnsemble.on_free_ports(tmp_path, 3)
    try:
        ens.start()
        pids = [pid for pid in ens.pids().values() if pid is not None]
        assert len(pids) == 3
    finally:
        ens.stop()
    assert set(ens.modes().values()) == {"down"}
    for pid in pids:  # gone, or its pid already another process's (pids are reused quickly)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert str(tmp_path).encode() not in cmdline


def test_server_mode_of_a_standalone_server_and_of_nothing(zookeeper: ZooKeeperServer) -> None:
    assert server_mode(zookeeper.host, zookeeper.port) == "standalone"
    assert server_mode("127.0.0.1", free_port()) == "down"


def test_reconnect_rounds_are_never_more_than_about_a_second_apart() -> None:
    """kazoo's default doubles the pause up to an hour: after a 20 s outage a broker next
    tried 20 s later and lost its session (see the test below). Thirty failed rounds with ours:"""
    sleeps: list[float] = []
    retry = reconnect_retry()
    retry.sleep_func, retry.interrupt = sleeps.append, None
    failures = iter(range(30))

    def connect_round() -> str:
        if next(failures) < 29:
            raise ForceRetryError("no server answered")
        return "connected"

    assert retry(connect_round) == "connected"
    assert len(sleeps) == 29 and max(sleeps) <= 1.4  # 1 s and its 40% jitter at most
    assert KafkaZkClient("127.0.0.1:1").kazoo._conn_retry.max_delay == RECONNECT_MAX_DELAY_S


@pytest.mark.slow  # 16 s: make test-long (the fault suite's ZooKeeper restarts in make test cover shorter outages)
def test_session_survives_an_outage_longer_than_its_timeout(tmp_path: Path) -> None:
    """ZooKeeper restarts every session's timeout when it serves again, so a client that
    reconnects soon enough keeps its session (and a broker its registration). kazoo's default
    backoff doubled to ~13 s between attempts after a 14 s outage, and the 4 s session
    expired before it came back; ours retries at least every 1.4 s."""
    server = ZooKeeperServer(tmp_path, free_port())
    server.start()
    client = KafkaZkClient(server.connect_string, session_timeout_s=4.0)
    try:
        client.start()
        session = client.session_id
        client.kazoo.create("/mine", ephemeral=True)
        server.kill()
        time.sleep(14)
        server.start()
        wait_for(lambda: client.connected, 10, "the client to reconnect")
        assert client.session_id == session
        assert client.kazoo.exists("/mine") is not None
        assert "zk_ephemerals_count\t1" in four_letter_word(server.host, server.port, "mntr")
    finally:
        assert client.close()
        server.stop()


def test_close_is_bounded_while_zookeeper_is_gone(tmp_path: Path) -> None:
    """A broker closes its session last when it stops; with ZooKeeper gone that must not hang,
    and a request waiting for the reconnect fails instead of waiting for ever."""
    server = ZooKeeperServer(tmp_path, free_port())
    server.start()
    client = KafkaZkClient(server.connect_string, session_timeout_s=4.0)
    try:
        client.start()
        server.kill()
        wait_for(lambda: not client.connected, 10, "the client to notice")
        pending = client.kazoo.get_async("/brokers/ids")
        with pytest.raises(client.kazoo.handler.timeout_exception):
            client.get_controller_info(timeout_s=0.5)
        start = time.monotonic()
        client.close()
        assert time.monotonic() - start < 30
        with pytest.raises(Exception) as failed:
            pending.get(timeout=10)
        assert "Connection" in type(failed.value).__name__
    finally:
        server.stop()


def test_a_request_made_while_zookeeper_is_gone_waits_for_it_rather_than_failing(tmp_path: Path) -> None:
    """``until_connected``, as a starting broker reads its cluster id: ZooKeeper gone for 2 s
    (a server of the ensemble killed, a leader election) is waited out, not turned into
    ConnectionLoss, which made a broker started at that moment exit."""
    import threading

    server = ZooKeeperServer(tmp_path, free_port())
    server.start()
    client = KafkaZkClient(server.connect_string, session_timeout_s=10.0)
    try:
        client.start()
        expected = client.get_or_create_cluster_id()
        server.kill()
        answers: list[str] = []
        reader = threading.Thread(target=lambda: answers.append(
            client.until_connected(client.get_or_create_cluster_id, timeout_s=20)))
        reader.start()
        time.sleep(2)
        assert not answers  # still waiting: nothing to answer it
        server.start()
        reader.join(20)
        assert answers == [expected]
    finally:
        client.close()
        server.stop()


def test_until_connected_runs_a_request_again_after_a_connection_loss() -> None:
    """The request in flight when the connection drops fails with ConnectionLoss; it is asked
    again, and an error that is not about the connection is not."""
    from kazoo.exceptions import ConnectionLoss, NoNodeError

    client = KafkaZkClient(f"127.0.0.1:{free_port()}", session_timeout_s=4.0)  # never started
    calls: list[int] = []

    def lost_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionLoss()
        return "answered"

    assert client.until_connected(lost_once, timeout_s=5) == "answered" and len(calls) == 2

    def missing() -> None:
        calls.append(1)
        raise NoNodeError()

    with pytest.raises(NoNodeError):
        client.until_connected(missing, timeout_s=5)
    assert len(calls) == 3
