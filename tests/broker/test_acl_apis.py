"""DescribeAcls, CreateAcls and DeleteAcls (broker/acl_apis.py) in process, every version, over
an AclManager whose ZooKeeper is a dict (the ZooKeeper side has tests/broker/test_acl_manager_zk.py
and tests/zk/test_zk_acl_store.py): Kafka's order of checks, the errors, what is stored in
Kafka's format, and that refused input stores nothing."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker import api_keys
from odradek.broker.acl_apis import ROUTES
from odradek.broker.acl_manager import AclManager, authorizer_from_config
from odradek.broker.config import BrokerConfig
from odradek.broker.session import Session, reset_session, set_session
from odradek.common.errors import StartupRefusedError
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.zk.zk_acl_store import Notification, Versioned, ZnodeWrite

VERSIONS = (1, 2, 3)
TOPIC, GROUP, CLUSTER = int(ResourceType.TOPIC), int(ResourceType.GROUP), int(ResourceType.CLUSTER)
LITERAL, PREFIXED, MATCH, ANY = (int(PatternType.LITERAL), int(PatternType.PREFIXED), int(PatternType.MATCH),
                                 int(PatternType.ANY))
READ, WRITE, ALL = int(AclOperation.READ), int(AclOperation.WRITE), int(AclOperation.ALL)
ALLOW, DENY = int(AclPermissionType.ALLOW), int(AclPermissionType.DENY)


class MemoryStore:
    """ZkAclStore's interface over a dict: znodes with versions, sequential notifications."""

    def __init__(self) -> None:
        self.nodes: dict[str, Versioned] = {}
        self.notes: dict[str, list[bytes]] = {}
        self.updates = 0

    def create_paths(self, paths: Iterable[str]) -> None:
        pass

    def read(self, paths: Iterable[str]) -> dict[str, Versioned]:
        return {p: self.nodes[p] for p in paths if p in self.nodes}

    def read_all(self, type_paths: Iterable[str]) -> dict[str, dict[str, Versioned]]:
        return {t: {p.rpartition("/")[2]: v for p, v in self.nodes.items() if p.rpartition("/")[0] == t}
                for t in type_paths}

    def update(self, paths: Iterable[str], change: Any) -> dict[str, bytes | None]:
        self.updates += 1
        paths = list(paths)
        writes: Mapping[str, ZnodeWrite] = change({p: self.nodes[p].data if p in self.nodes else None for p in paths})
        written: dict[str, bytes | None] = {}
        for path, write in writes.items():
            if write.data is None:
                if self.nodes.pop(path, None) is None:
                    continue
            else:
                old = self.nodes.get(path)
                self.nodes[path] = Versioned(write.data, old.version + 1 if old else 0)
            written[path] = write.data
            if write.notification is not None:
                prefix, data = write.notification
                self.notes.setdefault(prefix, []).append(data)
        return written

    def notifications(self, root: str, prefix: str) -> list[str]:
        return [f"{prefix}{i:010d}" for i in range(len(self.notes.get(f"{root}/{prefix}", [])))]

    def read_notifications(self, root: str, children: Iterable[str]) -> dict[str, Notification]:
        return {}

    def notification_ctimes(self, root: str, children: Iterable[str]) -> dict[str, int]:
        return {}

    def delete_notifications(self, root: str, children: Iterable[str]) -> int:
        return 0


def context(authorizer: AclAuthorizer | None, store: MemoryStore | None = None) -> SimpleNamespace:
    manager = AclManager(None, authorizer, store or MemoryStore()) if authorizer is not None else None
    return SimpleNamespace(authorizer=authorizer, acl_manager=manager)


def call(ctx: Any, api_key: int, version: int, body: dict[str, Any], principal: str = "User:ANONYMOUS") -> Any:
    """One request through its handler as ``principal``; the decoded response."""
    frame = kio_util.encode_request(api_key, version, 7, "test", body)
    header, request = kio_util.decode_request(memoryview(frame)[4:])

    async def run() -> bytes:
        token = set_session(Session(principal, "10.0.0.1"))
        try:
            result = ROUTES[api_key](ctx, header, request, version)
            return result if isinstance(result, bytes) else await result
        finally:
            reset_session(token)

    response = asyncio.run(run())
    correlation_id, decoded = kio_util.decode_response(api_key, version, response[4:])
    assert correlation_id == 7
    return decoded


def creation(name: str = "orders", resource_type: int = TOPIC, pattern: int = LITERAL, principal: str = "User:alice",
             host: str = "*", operation: int = READ, permission: int = ALLOW) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation, "permission_type": permission}


def acl_filter(name: str | None = None, resource_type: int = int(ResourceType.ANY), pattern: int = ANY,
               principal: str | None = None, host: str | None = None, operation: int = int(AclOperation.ANY),
               permission: int = int(AclPermissionType.ANY)) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": operation, "permission_type": permission}


def create(ctx: Any, version: int, *creations: dict[str, Any], principal: str = "User:ANONYMOUS") -> list[tuple[int, str | None]]:
    response = call(ctx, api_keys.CREATE_ACLS, version, {"creations": list(creations)}, principal)
    return [(int(r.error_code), r.error_message) for r in response.results]


def describe(ctx: Any, version: int, **filter_: Any) -> Any:
    return call(ctx, api_keys.DESCRIBE_ACLS, version, acl_filter(**filter_))


def described(ctx: Any, version: int = 3, **filter_: Any) -> set[tuple[int, str, int, str, str, int, int]]:
    response = describe(ctx, version, **filter_)
    assert int(response.error_code) == 0, response
    return {(int(r.resource_type), r.resource_name, int(r.pattern_type), a.principal, a.host, int(a.operation),
             int(a.permission_type)) for r in response.resources for a in r.acls}


def delete(ctx: Any, version: int, *filters: dict[str, Any]) -> Any:
    return call(ctx, api_keys.DELETE_ACLS, version, {"filters": list(filters)})


def open_authorizer() -> AclAuthorizer:
    return AclAuthorizer(allow_everyone_if_no_acl_found=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_without_an_authorizer_every_api_answers_security_disabled(version: int) -> None:
    ctx = context(None)
    response = describe(ctx, version)
    assert int(response.error_code) == ErrorCode.SECURITY_DISABLED and response.resources == ()
    assert response.error_message == "No Authorizer is configured on the broker"
    assert create(ctx, version, creation(), creation("x")) == [(ErrorCode.SECURITY_DISABLED,
                                                                "No Authorizer is configured.")] * 2
    deleted = delete(ctx, version, acl_filter())
    assert [int(r.error_code) for r in deleted.filter_results] == [ErrorCode.SECURITY_DISABLED]


@pytest.mark.parametrize("version", VERSIONS)
def test_create_describe_delete_round_trip_in_kafkas_format(version: int) -> None:
    store = MemoryStore()
    ctx = context(open_authorizer(), store)
    assert create(ctx, version, creation(), creation(operation=WRITE),
                  creation("fin-", pattern=PREFIXED, principal="User:bob", permission=DENY, host="10.0.0.9"),
                  creation("*", resource_type=GROUP, operation=ALL)) == [(0, None)] * 4
    znode = json.loads(store.nodes["/kafka-acl/Topic/orders"].data)
    assert znode == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write", "host": "*"}]}
    assert json.loads(store.nodes["/kafka-acl-extended/prefixed/Topic/fin-"].data)["acls"] == [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Read", "host": "10.0.0.9"}]
    assert "/kafka-acl/Group/*" in store.nodes
    # one notification per resource changed, in Kafka's two formats
    assert sorted(store.notes["/kafka-acl-changes/acl_changes_"]) == [b"GROUP:*", b"TOPIC:orders"]
    assert [json.loads(n) for n in store.notes["/kafka-acl-extended-changes/acl_changes_"]] == [
        {"version": 1, "resourceType": "TOPIC", "name": "fin-", "patternType": "PREFIXED"}]
    assert len(described(ctx, version)) == 4
    assert described(ctx, version, resource_type=TOPIC, name="orders", pattern=LITERAL, operation=WRITE) == {
        (TOPIC, "orders", LITERAL, "User:alice", "*", WRITE, ALLOW)}
    assert {r[1] for r in described(ctx, version, resource_type=TOPIC, name="fin-1", pattern=MATCH)} == {"fin-"}
    assert {r[1] for r in described(ctx, version, resource_type=GROUP, name="g", pattern=MATCH)} == {"*"}
    assert described(ctx, version, principal="User:nobody") == set()
    # an ACL two filters select is reported under the first; the resource's znode goes with its last ACL
    response = delete(ctx, version, acl_filter("orders", TOPIC, LITERAL, operation=READ),
                      acl_filter("orders", TOPIC, LITERAL), acl_filter("nothing", TOPIC, LITERAL))
    results = [[(m.resource_name, int(m.operation), int(m.error_code)) for m in r.matching_acls]
               for r in response.filter_results]
    assert results == [[("orders", READ, 0)], [("orders", WRITE, 0)], []]
    assert "/kafka-acl/Topic/orders" not in store.nodes
    assert len(described(ctx, version)) == 2
    response = delete(ctx, version, acl_filter())
    assert sorted(m.resource_name for m in response.filter_results[0].matching_acls) == ["*", "fin-"]
    assert store.nodes == {} and described(ctx, version) == set()


@pytest.mark.parametrize("version", VERSIONS)
def test_bad_bindings_get_invalid_request_and_nothing_of_theirs_is_stored(version: int) -> None:
    store = MemoryStore()
    ctx = context(open_authorizer(), store)
    bad = [creation(resource_type=int(ResourceType.ANY)), creation(pattern=MATCH), creation(pattern=ANY),
           creation(operation=int(AclOperation.ANY)), creation(permission=int(AclPermissionType.ANY)),
           creation(principal="alice"), creation("my-cluster", resource_type=CLUSTER), creation(""),
           creation("a/b"), creation(".."), creation("x\x01")]
    results = create(ctx, version, *bad)
    assert [code for code, _ in results] == [ErrorCode.INVALID_REQUEST] * len(bad), results
    assert all(message for _, message in results)
    assert store.nodes == {} and store.updates == 0
    # a good binding beside bad ones is stored, as in Kafka
    assert create(ctx, version, creation(principal="alice"), creation())[1] == (0, None)
    assert list(store.nodes) == ["/kafka-acl/Topic/orders"]


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_codes_refuse_the_whole_request(version: int) -> None:
    """Where Kafka closes the connection (parse failure), every entry gets INVALID_REQUEST."""
    store = MemoryStore()
    ctx = context(open_authorizer(), store)
    results = create(ctx, version, creation(), creation(operation=0))
    assert [code for code, _ in results] == [ErrorCode.INVALID_REQUEST] * 2
    assert store.nodes == {}
    response = describe(ctx, version, resource_type=0)
    assert int(response.error_code) == ErrorCode.INVALID_REQUEST
    assert create(ctx, version, creation()) == [(0, None)]
    response = delete(ctx, version, acl_filter(), acl_filter(pattern=0))
    assert [int(r.error_code) for r in response.filter_results] == [ErrorCode.INVALID_REQUEST] * 2
    assert list(store.nodes) == ["/kafka-acl/Topic/orders"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_cluster_permission_comes_first(version: int) -> None:
    """ALTER on the cluster to create and delete, DESCRIBE to describe (ALTER implies it)."""
    store = MemoryStore()
    auth = AclAuthorizer(super_users=["User:admin"])
    ctx = context(auth, store)
    assert create(ctx, version, creation(), principal="User:mallory") == [
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
    assert store.nodes == {}
    response = call(ctx, api_keys.DESCRIBE_ACLS, version, acl_filter(), "User:mallory")
    assert int(response.error_code) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert create(ctx, version, creation("kafka-cluster", CLUSTER, principal="User:ops", operation=int(AclOperation.ALTER)),
                  principal="User:admin") == [(0, None)]
    assert int(call(ctx, api_keys.DESCRIBE_ACLS, version, acl_filter(), "User:ops").error_code) == 0
    assert create(ctx, version, creation(), principal="User:ops") == [(0, None)]
    response = call(ctx, api_keys.DELETE_ACLS, version, {"filters": [acl_filter()]}, "User:mallory")
    assert [int(r.error_code) for r in response.filter_results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert len(store.nodes) == 2


def test_a_create_applies_at_once_on_the_broker_that_wrote_it() -> None:
    auth = AclAuthorizer()
    ctx = context(auth)
    assert not auth.authorize("User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert create(ctx, 3, creation(), principal="User:ANONYMOUS") == [
        (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
    auth.super_users = frozenset({"User:ANONYMOUS"})
    assert create(ctx, 3, creation()) == [(0, None)]
    assert auth.authorize("User:alice", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, "orders")


def test_a_stored_znode_that_cannot_be_read_fails_its_bindings_only() -> None:
    store = MemoryStore()
    store.nodes["/kafka-acl/Topic/broken"] = Versioned(b"{not json", 3)
    ctx = context(open_authorizer(), store)
    results = create(ctx, 3, creation("broken"), creation("fine"))
    assert results[0][0] == ErrorCode.UNKNOWN_SERVER_ERROR and "cannot be read" in (results[0][1] or "")
    assert results[1] == (0, None)
    assert store.nodes["/kafka-acl/Topic/broken"].data == b"{not json"
    response = delete(ctx, 3, acl_filter("broken", TOPIC, LITERAL))
    assert int(response.filter_results[0].error_code) == ErrorCode.UNKNOWN_SERVER_ERROR


def test_a_zookeeper_failure_fails_every_binding() -> None:
    class Failing(MemoryStore):
        def update(self, paths: Iterable[str], change: Any) -> dict[str, bytes | None]:
            raise ConnectionError("ZooKeeper went away")

    auth = open_authorizer()
    ctx = context(auth, Failing())
    results = create(ctx, 3, creation(), creation(principal="bad"))
    assert results[0] == (ErrorCode.UNKNOWN_SERVER_ERROR, "Failed to create ACLs: ZooKeeper went away")
    assert results[1][0] == ErrorCode.INVALID_REQUEST
    assert auth.describe(auth_filter_any()) == []


def auth_filter_any() -> Any:
    from odradek.security.acl import ANY_FILTER

    return ANY_FILTER


def config(**security: object) -> BrokerConfig:
    return BrokerConfig(1, "h", 1, "z", Path("/tmp/x"), **security)  # type: ignore[arg-type]


def test_authorizer_from_config() -> None:
    assert authorizer_from_config(config()) is None
    for name in ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"):
        auth = authorizer_from_config(config(authorizer_class_name=name, super_users="User:a; User:b",
                                             allow_everyone_if_no_acl_found=True))
        assert auth is not None and auth.super_users == {"User:a", "User:b"} and auth.allow_everyone_if_no_acl_found
    with pytest.raises(StartupRefusedError, match="StandardAuthorizer"):
        authorizer_from_config(config(authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer"))
    with pytest.raises(StartupRefusedError, match="principalType:principalName"):
        authorizer_from_config(config(authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
                                      super_users="admin"))
