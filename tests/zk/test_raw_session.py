"""The raw-socket multi-read (opcode 22) against the real ZooKeeper, compared with kazoo."""
from __future__ import annotations

import socket

import pytest
from kazoo.client import KazooClient

from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.zk import paths
from odradek.zk.client import KafkaZkClient
from odradek.zk.raw_session import RawSession


@pytest.fixture
def kazoo(zk_connect: str):
    client = KazooClient(hosts=zk_connect)
    client.start(10)
    client.ensure_path("/")
    yield client
    client.stop()
    client.close()


def test_matches_kazoo_get_including_missing_and_empty(kazoo: KazooClient, zk_connect: str) -> None:
    names = [f"/n{i}" for i in range(2500)]
    # every 7th is missing, every 11th empty
    for start in range(0, len(names), 500):
        tx = kazoo.transaction()
        for i in range(start, min(start + 500, len(names))):
            if i % 7:
                tx.create(names[i], b"" if i % 11 == 0 else f"value-{i}".encode() * (i % 5 + 1))
        assert not [r for r in tx.commit() if isinstance(r, Exception)]
    kazoo.set("/n1", b"changed")
    reader = RawSession(zk_connect)
    try:
        got = reader.get_data_many(names + ["/n1"])  # 3 pipelined requests, one partial
        for name, result in zip(names + ["/n1"], got):
            if int(name[2:]) % 7 == 0:
                assert result is None
                continue
            data, stat = kazoo.get(name)
            assert result == (data, stat)
        assert got[1][1].version == 1 and got[1][0] == b"changed"
        # the session stays usable for another call
        assert reader.get_data_many(["/n1"])[0][0] == b"changed"
    finally:
        reader.close()


def test_reconnects_after_its_socket_breaks(kazoo: KazooClient, zk_connect: str) -> None:
    kazoo.create("/x", b"1")
    reader = RawSession(zk_connect)
    try:
        assert reader.get_data_many(["/x"])[0][0] == b"1"
        reader._sock.close()  # as if the server dropped an idle session
        kazoo.set("/x", b"2")
        assert reader.get_data_many(["/x"])[0][0] == b"2"
    finally:
        reader.close()


def test_client_partition_states_use_multi_read(zk_connect: str) -> None:
    zk = KafkaZkClient(zk_connect)
    zk.start()
    try:
        tps = [TopicPartition("t", p) for p in range(1200)]
        states = {tp: LeaderAndIsr(1, tp.partition, (1, 2), 1) for tp in tps if tp.partition % 100 != 3}
        zk.kazoo.ensure_path(paths.topic_partitions_path("t"))
        ordered = [tp for tp in tps if tp in states]
        for start in range(0, len(ordered), 400):
            tx = zk.kazoo.transaction()
            for tp in ordered[start:start + 400]:
                tx.create(paths.partition_path(tp))
                tx.create(paths.partition_state_path(tp), paths.encode_leader_and_isr(states[tp]))
            assert not [r for r in tx.commit() if isinstance(r, Exception)]
        got = zk.get_partition_states(tps)
        assert zk._raw is not None and not zk._raw.unsupported
        assert got == states
    finally:
        zk.close()


def test_fenced_multis_answer_like_kazoo_transactions(kazoo: KazooClient, zk_connect: str) -> None:
    from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError, RuntimeInconsistency

    from odradek.zk.raw_session import OP_DELETE, OP_SET_DATA

    for path in ("/epoch", "/a", "/b", "/c"):
        kazoo.create(path, b"0")
    session = RawSession(zk_connect)
    try:
        ok, stale, missing = session.fenced_multis("/epoch", 0, [
            [(OP_SET_DATA, "/a", b"1", 0), (OP_SET_DATA, "/b", b"1", 0), (OP_DELETE, "/c", b"", 0)],
            [(OP_SET_DATA, "/b", b"2", 0)],         # runs after the first: /b is at version 1
            [(OP_SET_DATA, "/a", b"2", 1), (OP_SET_DATA, "/nope", b"", 0), (OP_SET_DATA, "/b", b"2", 1)],
        ])
        assert ok[0] is True and ok[3] is True
        assert (ok[1].version, ok[2].version) == (1, 1)
        assert [type(r) for r in stale] == [RolledBackError, BadVersionError]
        assert [type(r) for r in missing] == [RolledBackError, RolledBackError, NoNodeError,
                                              RuntimeInconsistency]
        assert kazoo.get("/a")[0] == b"1" and not kazoo.exists("/c")
        [fenced] = session.fenced_multis("/epoch", 7, [[(OP_SET_DATA, "/a", b"x", 1)]])
        assert isinstance(fenced[0], BadVersionError) and kazoo.get("/a")[0] == b"1"
    finally:
        session.close()


@pytest.fixture
def fenced_client(zk_connect: str):
    """A KafkaZkClient whose controller writes are fenced on the current /controller_epoch."""
    zk = KafkaZkClient(zk_connect)
    zk.start()
    zk.kazoo.ensure_path(paths.CONTROLLER_EPOCH)
    zk.epoch_zk_version = zk.kazoo.exists(paths.CONTROLLER_EPOCH).version
    yield zk
    zk.close()


def test_client_resends_through_kazoo_when_the_raw_reply_is_lost(fenced_client: KafkaZkClient) -> None:
    zk = fenced_client
    tp = TopicPartition("t", 0)
    zk.kazoo.ensure_path(paths.partition_path(tp))
    zk.kazoo.create(paths.partition_state_path(tp),
                    paths.encode_leader_and_isr(LeaderAndIsr(1, 0, (1, 2), 1)))
    assert zk._raw is not None
    zk._raw._sock = socket.socket()  # never connected: the send fails, nothing was written
    result = zk.update_leader_and_isr({tp: LeaderAndIsr(2, 1, (2,), 1, 0)})
    assert result[tp] == LeaderAndIsr(2, 1, (2,), 1, 1)
    assert zk.get_partition_state(tp) == result[tp]


def test_fenced_creates_return_paths_without_the_chroot(kazoo: KazooClient, zk_connect: str) -> None:
    from kazoo.exceptions import NodeExistsError, RolledBackError

    from odradek.zk.raw_session import OP_CREATE

    kazoo.create("/epoch", b"0")
    kazoo.create("/taken", b"")
    session = RawSession(zk_connect)
    try:
        made, clash = session.fenced_multis("/epoch", 0, [
            [(OP_CREATE, "/p", b"", -1), (OP_CREATE, "/p/c", b"data", -1)],
            [(OP_CREATE, "/q", b"", -1), (OP_CREATE, "/taken", b"", -1)],
        ])
        assert made == [True, "/p", "/p/c"]
        assert [type(r) for r in clash] == [RolledBackError, RolledBackError, NodeExistsError]
        assert kazoo.get("/p/c")[0] == b"data" and not kazoo.exists("/q")
        assert kazoo.get_acls("/p/c")[0] == kazoo.get_acls("/taken")[0]  # open ACL, as kazoo's
    finally:
        session.close()


def test_started_writes_are_collected_later_across_a_read_and_in_any_order(
        kazoo: KazooClient, zk_connect: str) -> None:
    from odradek.zk.raw_session import OP_SET_DATA

    for path in ("/overlap-epoch", "/w1", "/w2"):
        kazoo.create(path, b"0")
    session = RawSession(zk_connect)
    try:
        first = session.start_fenced_multis("/overlap-epoch", 0, [[(OP_SET_DATA, "/w1", b"1", 0)]])
        second = session.start_fenced_multis("/overlap-epoch", 0, [[(OP_SET_DATA, "/w2", b"1", 0)],
                                                                   [(OP_SET_DATA, "/w2", b"2", 1)]])
        # a read on the same session meanwhile: it sees both writes, their replies are kept
        assert [d for d, _ in session.get_data_many(["/w1", "/w2"])] == [b"1", b"2"]
        [[check, stat2], [_, stat3]] = second()
        [[_, stat1]] = first()
        assert check is True and (stat1.version, stat2.version, stat3.version) == (1, 1, 2)
        assert session._stash == {}
    finally:
        session.close()


def test_client_started_update_lets_the_caller_work_before_collecting(
        fenced_client: KafkaZkClient) -> None:
    zk = fenced_client
    tps = [TopicPartition("started", p) for p in range(1500)]  # two batches
    others = [TopicPartition("untouched", p) for p in range(3)]
    for tp in tps + others:
        zk.kazoo.ensure_path(paths.partition_path(tp))
    zk.create_partition_states({tp: LeaderAndIsr(1, 0, (1, 2), 1) for tp in tps + others})
    pending = zk.start_update_leader_and_isr({tp: LeaderAndIsr(2, 1, (2,), 1, 0) for tp in tps})
    # the caller reads other partitions meanwhile (whether another session already sees the
    # pending writes is up to ZooKeeper: only their replies say they are committed)
    assert zk.get_partition_states(others) == {tp: LeaderAndIsr(1, 0, (1, 2), 1, 0) for tp in others}
    assert pending.result() == {tp: LeaderAndIsr(2, 1, (2,), 1, 1) for tp in tps}
    assert zk.get_partition_states(tps[:3]) == {tp: LeaderAndIsr(2, 1, (2,), 1, 1) for tp in tps[:3]}
