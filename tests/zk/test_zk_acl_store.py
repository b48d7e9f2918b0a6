"""zk/zk_acl_store.py against a real ZooKeeper: the ACL tree read in one round, conditional
writes with their notifications in the same multi, retries on a concurrent writer, multis split
under jute.maxbuffer, and the notifications listed, read and purged."""
from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

import pytest

from odradek.zk.client import KafkaZkClient
from odradek.zk.errors import RequestTooLargeError
from odradek.zk.zk_acl_store import (
    CHANGE_EXPIRATION_MS,
    ConcurrentUpdateError,
    ZkAclStore,
    ZnodeWrite,
    obsolete_notifications,
    sequence_of,
)

pytestmark = pytest.mark.integration

ROOT, TOPICS, GROUPS, CHANGES = "/acls", "/acls/Topic", "/acls/Group", "/acl-changes"
PREFIX = f"{CHANGES}/acl_changes_"


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KafkaZkClient]:
    client = KafkaZkClient(zk_connect, 6.0)
    client.start()
    yield client
    client.close()


@pytest.fixture
def store(zk: KafkaZkClient) -> ZkAclStore:
    store = ZkAclStore(zk)
    store.create_paths([TOPICS, ROOT, GROUPS, CHANGES])
    return store


def put(values: Mapping[str, bytes | None], note: bytes | None = b"changed") -> object:
    """A change writing ``values`` whatever is stored, each announced."""
    def change(current: Mapping[str, bytes | None]) -> dict[str, ZnodeWrite]:
        return {p: ZnodeWrite(values[p], (PREFIX, note) if note is not None else None) for p in current}
    return change


def test_pure_helpers() -> None:
    assert sequence_of("acl_changes_0000000012", "acl_changes_") == 12
    assert sequence_of("config_change_0000000012", "acl_changes_") == -1
    assert sequence_of("acl_changes_", "acl_changes_") == -1
    now = 10 * CHANGE_EXPIRATION_MS
    assert obsolete_notifications({"b": now - CHANGE_EXPIRATION_MS - 1, "a": now - CHANGE_EXPIRATION_MS - 5,
                                   "c": now - CHANGE_EXPIRATION_MS, "d": now}, now) == ["a", "b"]


def test_paths_are_created_once_parents_first(store: ZkAclStore, zk: KafkaZkClient) -> None:
    store.create_paths(["/x/y/z", "/x", TOPICS])
    assert zk.kazoo.exists("/x/y/z") is not None


def test_writes_create_set_and_delete_conditionally_with_their_notifications(store: ZkAclStore,
                                                                            zk: KafkaZkClient) -> None:
    a, b = f"{TOPICS}/a", f"{GROUPS}/b"
    written = store.update([a, b], put({a: b"A1", b: b"B1"}))
    assert written == {a: b"A1", b: b"B1"}
    assert store.read([a, b, f"{TOPICS}/none"]) == {a: store.read([a])[a], b: store.read([b])[b]}
    assert store.read([a])[a].data == b"A1" and store.read([a])[a].version == 0
    assert store.update([a], put({a: b"A2"})) == {a: b"A2"}
    assert store.read([a])[a].version == 1
    assert store.update([a, f"{TOPICS}/none"], put({a: None, f"{TOPICS}/none": None})) == {a: None}
    assert zk.kazoo.exists(a) is None
    # no write, no notification
    assert store.update([b], lambda current: {}) == {}
    children = store.notifications(CHANGES, "acl_changes_")
    assert [sequence_of(c, "acl_changes_") for c in children] == [0, 1, 2, 3]
    notes = store.read_notifications(CHANGES, children)
    assert {n.data for n in notes.values()} == {b"changed"} and all(n.ctime_ms > 0 for n in notes.values())


def test_read_all_reads_every_resource_under_each_type_path(store: ZkAclStore) -> None:
    store.update([f"{TOPICS}/t1", f"{TOPICS}/t2", f"{GROUPS}/g"],
                 put({f"{TOPICS}/t1": b"1", f"{TOPICS}/t2": b"2", f"{GROUPS}/g": b"3"}, note=None))
    found = store.read_all([TOPICS, GROUPS, "/acls/Missing"])
    assert {k: {n: v.data for n, v in d.items()} for k, d in found.items()} == {
        TOPICS: {"t1": b"1", "t2": b"2"}, GROUPS: {"g": b"3"}, "/acls/Missing": {}}
    assert store.notifications(CHANGES, "acl_changes_") == []


def test_a_concurrent_writer_makes_the_change_read_and_computed_again(store: ZkAclStore, zk: KafkaZkClient) -> None:
    path = f"{TOPICS}/contended"
    store.update([path], put({path: b"0"}, note=None))
    calls: list[bytes | None] = []

    def append(current: Mapping[str, bytes | None]) -> dict[str, ZnodeWrite]:
        calls.append(current[path])
        if len(calls) == 1:  # another writer gets there between our read and our write
            zk.kazoo.set(path, b"0+other")
        return {path: ZnodeWrite((current[path] or b"") + b"+mine", (PREFIX, b"x"))}

    assert store.update([path], append) == {path: b"0+other+mine"}
    assert calls == [b"0", b"0+other"]
    assert zk.kazoo.get(path)[0] == b"0+other+mine"
    assert len(store.notifications(CHANGES, "acl_changes_")) == 1  # the failed multi wrote none


def test_retries_are_bounded(zk: KafkaZkClient) -> None:
    store = ZkAclStore(zk, max_retries=2)
    store.create_paths([TOPICS, CHANGES])
    path = f"{TOPICS}/always-contended"
    zk.kazoo.create(path, b"0")

    def lose(current: Mapping[str, bytes | None]) -> dict[str, ZnodeWrite]:
        zk.kazoo.set(path, b"other")
        return {path: ZnodeWrite(b"mine", (PREFIX, b"x"))}

    with pytest.raises(ConcurrentUpdateError):
        store.update([path], lose)
    assert zk.kazoo.get(path)[0] == b"other"


def test_a_missing_type_directory_is_created_on_the_retry(store: ZkAclStore, zk: KafkaZkClient) -> None:
    path = "/acls/TransactionalId/tx"
    assert store.update([path], put({path: b"T"})) == {path: b"T"}
    assert zk.kazoo.get(path)[0] == b"T"


def test_many_writes_are_split_into_multis_that_fit(zk_connect: str) -> None:
    client = KafkaZkClient(zk_connect, 6.0, jute_maxbuffer=64 * 1024)  # a 48 KiB budget
    client.start()
    try:
        store = ZkAclStore(client)
        store.create_paths([TOPICS, CHANGES])
        paths = [f"{TOPICS}/r{i}" for i in range(40)]
        big = {p: b"x" * 4000 for p in paths}  # ~160 KB in all: four multis at least
        assert store.update(paths, put(big)) == big
        assert len(store.read_all([TOPICS])[TOPICS]) == 40
        assert len(store.notifications(CHANGES, "acl_changes_")) == 40
        with pytest.raises(RequestTooLargeError):
            store.update([f"{TOPICS}/huge"], put({f"{TOPICS}/huge": b"x" * 60_000}))
        assert client.kazoo.exists(f"{TOPICS}/huge") is None
    finally:
        client.close()


def test_notifications_are_purged_and_one_already_gone_is_fine(store: ZkAclStore, zk: KafkaZkClient) -> None:
    for _ in range(3):
        zk.kazoo.create(PREFIX, b"n", sequence=True)
    children = store.notifications(CHANGES, "acl_changes_")
    ctimes = store.notification_ctimes(CHANGES, children + ["acl_changes_9999999999"])
    assert set(ctimes) == set(children)
    zk.kazoo.delete(f"{CHANGES}/{children[0]}")  # another broker purged it first
    assert store.delete_notifications(CHANGES, children) == 2
    assert store.notifications(CHANGES, "acl_changes_") == []
    assert store.notifications("/no-such-root", "acl_changes_") == []


def test_concurrent_updates_from_two_sessions_lose_nothing(zk_connect: str, store: ZkAclStore) -> None:
    """Two clients appending to one znode: every append lands (conditional writes, retried)."""
    path = f"{TOPICS}/shared"
    clients = [KafkaZkClient(zk_connect, 6.0) for _ in range(2)]
    for c in clients:
        c.start()
    try:
        def appender(client: KafkaZkClient, tag: str) -> None:
            s = ZkAclStore(client, max_retries=50)
            for i in range(10):
                s.update([path], lambda cur: {path: ZnodeWrite((cur[path] or b"") + f"{tag}{i},".encode())})

        threads = [threading.Thread(target=appender, args=(c, tag)) for c, tag in zip(clients, "ab")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        items = clients[0].kazoo.get(path)[0].decode().rstrip(",").split(",")
        assert sorted(items) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])
    finally:
        for c in clients:
            c.close()
