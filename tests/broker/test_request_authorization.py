"""How the broker's handlers authorize (broker/request_authorization.py), in process: that every API
the broker serves is wired to its row of the authorization table and makes every check of it; the
shared helpers (each name asked once, a check's `unless`, KIP-679's any-resource question, hidden
resources, the authorized-operations bit fields); the request-wide gates' answers in Kafka's
places; and a few handlers end to end over an AclAuthorizer (tests/integration/test_authorization.py
runs the matrix on real brokers with authenticated clients)."""
from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import odradek.broker.kafka_apis  # noqa: F401 - imports every handler module, which wire their APIs
from odradek.broker import api_keys, describe_log_dirs, group_apis, metadata_apis
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.request_authorization import (
    NOT_REQUESTED,
    WIRED,
    allowed,
    authorized_operations,
    check_request,
    cluster_authorized_operations,
    denied,
    visible,
    wire,
)
from odradek.broker.session import Session, reset_session, set_session
from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.coordinator.group.group_coordinator import GroupSummary
from odradek.protocol import controller_api, kio_util
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch
from odradek.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from odradek.security.acl_authorizer import AclAuthorizer
from odradek.security.authorization_table import API_AUTHORIZATION, Scope

Op, Type = AclOperation, ResourceType
ALICE = "User:alice"


class CountingAuthorizer(AclAuthorizer):
    """An AclAuthorizer that records every question asked of it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[AclOperation, ResourceType, str]] = []

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        self.asked.append((operation, resource_type, name))
        return super().authorize(principal, host, operation, resource_type, name)


def grant(auth: AclAuthorizer, resource_type: ResourceType, name: str, *operations: AclOperation,
          pattern: PatternType = PatternType.LITERAL, permission: AclPermissionType = AclPermissionType.ALLOW,
          principal: str = ALICE) -> None:
    resource = ResourcePattern(resource_type, name, pattern)
    auth.apply(resource, auth.acls(resource) | {AccessControlEntry(principal, "*", op, permission)
                                                for op in operations})


@pytest.fixture(autouse=True)
def as_alice() -> Iterator[None]:
    token = set_session(Session(ALICE, "127.0.0.1"))
    yield
    reset_session(token)


def context(auth: AclAuthorizer | None, **more: Any) -> Any:
    return SimpleNamespace(authorizer=auth, **more)


# -- the wiring covers every API ------------------------------------------------------------------

def served_api_keys() -> set[int]:
    return set(api_keys.ADVERTISED) | set(controller_api.VERSIONS)


def test_every_api_the_broker_serves_is_wired_to_its_table_row() -> None:
    """A new API without a `wire(api_key)` in its handler's module fails here: the broker would serve
    it to every principal once an authorizer is configured."""
    unwired = served_api_keys() - set(WIRED)
    assert not unwired, (f"API keys {sorted(unwired)} are served but their handlers make no checks of "
                         f"security/authorization_table.py: wire them (broker/request_authorization.py)")
    assert set(WIRED) <= set(API_AUTHORIZATION)


@pytest.mark.parametrize("api_key", sorted(API_AUTHORIZATION))
def test_each_wiring_takes_every_check_of_its_row(api_key: int) -> None:
    if api_key not in WIRED:
        pytest.skip("not served by this broker")
    wiring = WIRED[api_key]
    missing = set(wiring.row.checks) - wiring.taken - set(wiring.moot)
    assert not missing, f"{wiring.row.name}: checks of the table no handler makes: {missing}"
    assert all(reason for reason in wiring.moot.values())


def test_asking_for_a_check_the_row_lacks_fails_at_once() -> None:
    with pytest.raises(LookupError, match="JoinGroup"):
        wire(api_keys.JOIN_GROUP).check(Op.WRITE, Type.TOPIC)
    with pytest.raises(LookupError, match="2 checks"):  # two DESCRIBE TOPIC checks: the scope tells them apart
        wire(api_keys.METADATA).check(Op.DESCRIBE, Type.TOPIC)
    assert wire(api_keys.METADATA).check(Op.DESCRIBE, Type.TOPIC, Scope.HIDDEN).scope is Scope.HIDDEN


# -- the helpers ----------------------------------------------------------------------------------

READ_TOPIC = wire(api_keys.FETCH).check(Op.READ, Type.TOPIC)
CREATE_TOPIC = wire(api_keys.CREATE_TOPICS).check(Op.CREATE, Type.TOPIC)
LIST_GROUP = wire(api_keys.LIST_GROUPS).check(Op.DESCRIBE, Type.GROUP)
DESCRIBE_CLUSTER = wire(api_keys.DESCRIBE_CLUSTER).check(Op.DESCRIBE, Type.CLUSTER)


def test_without_an_authorizer_everything_is_allowed() -> None:
    ctx = context(None)
    assert allowed(ctx, READ_TOPIC, "anything")
    assert denied(ctx, READ_TOPIC, ["a", "b"]) == frozenset()
    assert visible(ctx, LIST_GROUP, ["g2", "g1"], str) == ["g2", "g1"]
    assert gate(ctx, api_keys.JOIN_GROUP, 5, JOIN) is None


def test_each_distinct_name_is_asked_once_and_denials_are_what_acls_say() -> None:
    auth = CountingAuthorizer()
    grant(auth, Type.TOPIC, "orders", Op.READ)
    grant(auth, Type.TOPIC, "pay-", Op.READ, pattern=PatternType.PREFIXED)
    grant(auth, Type.TOPIC, "pay-secret", Op.READ, permission=AclPermissionType.DENY)
    names = ["orders", "orders", "pay-in", "pay-secret", "other", "orders", "pay-in"]
    assert denied(context(auth), READ_TOPIC, names) == {"pay-secret", "other"}
    assert sorted(name for _, _, name in auth.asked) == ["orders", "other", "pay-in", "pay-secret"]


def test_an_unless_permission_exempts_the_whole_request_before_any_name() -> None:
    auth = CountingAuthorizer()
    assert denied(context(auth), CREATE_TOPIC, ["t1", "t2"]) == {"t1", "t2"}
    auth.asked.clear()
    grant(auth, Type.CLUSTER, CLUSTER_NAME, Op.CREATE)
    assert denied(context(auth), CREATE_TOPIC, ["t1", "t2"]) == frozenset()
    assert auth.asked == [(Op.CREATE, Type.CLUSTER, CLUSTER_NAME)]


def test_super_users_and_implied_operations() -> None:
    auth = AclAuthorizer(super_users=[ALICE])
    assert denied(context(auth), READ_TOPIC, ["x"]) == frozenset()
    auth = AclAuthorizer()
    grant(auth, Type.TOPIC, "t", Op.WRITE)
    assert allowed(context(auth), wire(api_keys.LIST_OFFSETS).check(Op.DESCRIBE, Type.TOPIC), "t")  # WRITE implies it
    assert not allowed(context(auth), READ_TOPIC, "t")


def test_visible_hides_in_order_and_cluster_describe_shows_all() -> None:
    auth = AclAuthorizer()
    grant(auth, Type.GROUP, "g-", Op.DESCRIBE, pattern=PatternType.PREFIXED)
    groups = ["x", "g-2", "y", "g-1"]
    assert visible(context(auth), LIST_GROUP, groups, str) == ["g-2", "g-1"]
    grant(auth, Type.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)
    assert visible(context(auth), LIST_GROUP, groups, str) == groups


def bits(*operations: AclOperation) -> int:
    return sum(1 << int(op) for op in operations)


def test_authorized_operations_are_kafkas_bit_fields() -> None:
    every_topic_op = bits(Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                          Op.ALTER_CONFIGS)
    assert authorized_operations(context(None), Type.TOPIC, "t") == every_topic_op == 3576
    auth = AclAuthorizer()
    grant(auth, Type.TOPIC, "t", Op.READ)
    assert authorized_operations(context(auth), Type.TOPIC, "t") == bits(Op.READ, Op.DESCRIBE)
    grant(auth, Type.GROUP, "g", Op.ALL)
    assert authorized_operations(context(auth), Type.GROUP, "g") == bits(Op.READ, Op.DESCRIBE, Op.DELETE)
    assert cluster_authorized_operations(context(auth), DESCRIBE_CLUSTER) == 0
    grant(auth, Type.CLUSTER, CLUSTER_NAME, Op.ALTER)  # ALTER implies DESCRIBE
    assert cluster_authorized_operations(context(auth), DESCRIBE_CLUSTER) == bits(Op.ALTER, Op.DESCRIBE)
    assert NOT_REQUESTED == -2**31


# -- request-wide gates ---------------------------------------------------------------------------

def decoded(api_key: int, version: int, body: dict[str, Any]) -> Any:
    frame = kio_util.encode_request(api_key, version, 7, "test", body)
    return kio_util.decode_request(frame[4:])


def gate(ctx: Any, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """The gate's answer as a client reads it (None: on to the handler)."""
    _header, request = decoded(api_key, version, body)
    response = check_request(ctx, api_key, version, 7, request)
    return None if response is None else kio_util.decode_response(api_key, version, response[4:])[1]


JOIN = {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
        "protocol_type": "consumer", "protocols": []}


def test_a_denied_group_request_is_answered_by_the_gate() -> None:
    auth = AclAuthorizer()
    join = JOIN
    answer = gate(context(auth), api_keys.JOIN_GROUP, 5, join)
    assert answer.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED and answer.generation_id == -1
    grant(auth, Type.GROUP, "g", Op.READ)
    assert gate(context(auth), api_keys.JOIN_GROUP, 5, join) is None
    commit = {"group_id": "g", "generation_id_or_member_epoch": 1, "member_id": "m", "group_instance_id": None,
              "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""},
                                                       {"partition_index": 1, "committed_offset": 5,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    assert gate(context(auth), api_keys.OFFSET_COMMIT, 8, commit) is None  # the topics are the handler's
    answer = gate(context(AclAuthorizer()), api_keys.OFFSET_COMMIT, 8, commit)
    assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.GROUP_AUTHORIZATION_FAILED] * 2


def produce_body(transactional_id: str | None, attributes: int) -> dict[str, Any]:
    batch = build_batch([(b"k", b"v")], producer_id=4, producer_epoch=0, base_sequence=0, attributes=attributes)
    return {"transactional_id": transactional_id, "acks": -1, "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}


def test_transactional_records_need_write_on_their_transactional_id() -> None:
    auth = AclAuthorizer()
    assert gate(context(auth), api_keys.PRODUCE, 9, produce_body(None, 0)) is None  # topics: the handler's
    for txn_id in (None, "tx"):
        answer = gate(context(auth), api_keys.PRODUCE, 9, produce_body(txn_id, TRANSACTIONAL_FLAG))
        assert [p.error_code for t in answer.responses for p in t.partition_responses] == [
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    grant(auth, Type.TRANSACTIONAL_ID, "tx", Op.WRITE)
    assert gate(context(auth), api_keys.PRODUCE, 9, produce_body("tx", TRANSACTIONAL_FLAG)) is None


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_any_topic() -> None:
    auth = AclAuthorizer()
    body = {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
    answer = gate(context(auth), api_keys.INIT_PRODUCER_ID, 4, body)
    assert (answer.error_code, answer.producer_id) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1)
    grant(auth, Type.TOPIC, "some-", Op.WRITE, pattern=PatternType.PREFIXED)  # KIP-679
    assert gate(context(auth), api_keys.INIT_PRODUCER_ID, 4, body) is None
    answer = gate(context(auth), api_keys.INIT_PRODUCER_ID, 4, {**body, "transactional_id": "tx"})
    assert answer.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_cluster_operations_answer_every_partition_named() -> None:
    body = {"election_type": 0, "timeout": 1000,
            "topic_partitions": [{"topic": "t", "partitions": [0, 1]}]}
    answer = gate(context(AclAuthorizer()), api_keys.ELECT_LEADERS, 2, body)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for r in answer.replica_election_results for p in r.partition_result] == [
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 2
    body = {"timeout": 1000, "topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}
    answer = gate(context(AclAuthorizer()), api_keys.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert [p.error_code for t in answer.responses for p in t.partitions] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    v4 = {"transactions": [{"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "verify_only": True,
                            "topics": [{"name": "t", "partitions": [0]}]}]}
    answer = gate(context(AclAuthorizer()), api_keys.ADD_PARTITIONS_TO_TXN, 4, v4)  # a leader's: CLUSTER_ACTION
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    broker = AclAuthorizer(super_users=[ALICE])
    assert gate(context(broker), api_keys.ADD_PARTITIONS_TO_TXN, 4, v4) is None


# -- handlers -------------------------------------------------------------------------------------

def ask(handler: Any, ctx: Any, api_key: int, version: int, body: dict[str, Any]) -> Any:
    header, request = decoded(api_key, version, body)
    response = handler(ctx, header, request, version)
    return kio_util.decode_response(api_key, version, response[4:])[1]


def metadata_context(auth: AclAuthorizer | None, auto_create: bool = True) -> Any:
    cache = MetadataCache()
    cache.update(1, 1, (BrokerInfo(1, "h", 9092),),
                 tuple(PartitionState(TopicPartition(t, 0), 1, 1, 0, (1,), 0, (1,)) for t in ("orders", "secret")))
    return context(auth, metadata=cache, cluster_id="c", config=SimpleNamespace(auto_create_topics_enable=auto_create))


def metadata_request(topics: list[str] | None, **flags: bool) -> dict[str, Any]:
    return {"topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": True, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False, **flags}


def test_metadata_hides_lists_refuses_and_creates_nothing_unauthorized() -> None:
    auth = AclAuthorizer()
    grant(auth, Type.TOPIC, "orders", Op.READ)
    grant(auth, Type.TOPIC, "new-", Op.DESCRIBE, pattern=PatternType.PREFIXED)
    ctx = metadata_context(auth)
    answer = ask(metadata_apis.metadata, ctx, api_keys.METADATA, 9, metadata_request(None))
    assert [t.name for t in answer.topics] == ["orders"]
    # named: no DESCRIBE, or DESCRIBE without CREATE on a topic that would be created (ctx has no
    # ZooKeeper: a creation attempt would fail the test)
    answer = ask(metadata_apis.metadata, ctx, api_keys.METADATA, 9,
                 metadata_request(["secret", "orders", "new-topic", "nowhere"], include_topic_authorized_operations=True,
                                  include_cluster_authorized_operations=True))
    by_name = {t.name: t for t in answer.topics}
    assert {n: t.error_code for n, t in by_name.items()} == {
        "secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "orders": ErrorCode.NONE,
        "new-topic": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "nowhere": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert by_name["secret"].partitions == () and by_name["orders"].topic_authorized_operations == bits(
        Op.READ, Op.DESCRIBE)
    assert by_name["secret"].topic_authorized_operations == NOT_REQUESTED
    assert answer.cluster_authorized_operations == 0
    # without auto-creation a described missing topic is just unknown
    answer = ask(metadata_apis.metadata, metadata_context(auth, auto_create=False), api_keys.METADATA, 9,
                 metadata_request(["new-topic"]))
    assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_without_an_authorizer_lists_all_and_reports_every_operation_when_asked() -> None:
    ctx = metadata_context(None)
    answer = ask(metadata_apis.metadata, ctx, api_keys.METADATA, 10,
                 metadata_request(None, include_topic_authorized_operations=True,
                                  include_cluster_authorized_operations=True))
    assert sorted(t.name for t in answer.topics) == ["orders", "secret"]
    assert {t.topic_authorized_operations for t in answer.topics} == {3576}
    assert answer.cluster_authorized_operations == authorized_operations(ctx, Type.CLUSTER, CLUSTER_NAME)
    answer = ask(metadata_apis.metadata, ctx, api_keys.METADATA, 10, metadata_request(None))
    assert answer.cluster_authorized_operations == NOT_REQUESTED
    assert {t.topic_authorized_operations for t in answer.topics} == {NOT_REQUESTED}


class Groups:
    """The group coordinator calls the group handlers make, answered from a dict."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.created_topics = 0

    def list_groups(self, _states: set[str]) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        return ErrorCode.NONE, [("app-1", "consumer", "Stable"), ("ops", "consumer", "Empty"),
                                ("app-2", "consumer", "Empty")]

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        return ErrorCode.NONE, GroupSummary("Stable", "consumer", "range", ())

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        self.deleted += group_ids
        return dict.fromkeys(group_ids, ErrorCode.NONE)


def test_group_listing_description_and_deletion() -> None:
    import asyncio

    auth = AclAuthorizer()
    grant(auth, Type.GROUP, "app-", Op.DESCRIBE, Op.DELETE, pattern=PatternType.PREFIXED)
    groups = Groups()
    ctx = context(auth, group_coordinator=groups)
    listed = ask(group_apis.list_groups, ctx, api_keys.LIST_GROUPS, 4, {"states_filter": []})
    assert [g.group_id for g in listed.groups] == ["app-1", "app-2"]
    described = ask(group_apis.describe_groups, ctx, api_keys.DESCRIBE_GROUPS, 5,
                    {"groups": ["app-1", "ops"], "include_authorized_operations": True})
    assert [(g.group_id, g.error_code, g.authorized_operations) for g in described.groups] == [
        ("app-1", ErrorCode.NONE, bits(Op.DESCRIBE, Op.DELETE)),
        ("ops", ErrorCode.GROUP_AUTHORIZATION_FAILED, NOT_REQUESTED)]
    described = ask(group_apis.describe_groups, ctx, api_keys.DESCRIBE_GROUPS, 5,
                    {"groups": ["app-1"], "include_authorized_operations": False})
    assert described.groups[0].authorized_operations == NOT_REQUESTED
    header, request = decoded(api_keys.DELETE_GROUPS, 2, {"groups_names": ["ops", "app-2", "ops"]})
    response = asyncio.run(group_apis.delete_groups(ctx, header, request, 2))
    results = kio_util.decode_response(api_keys.DELETE_GROUPS, 2, response[4:])[1].results
    assert [(r.group_id, r.error_code) for r in results] == [("app-2", ErrorCode.NONE),
                                                              ("ops", ErrorCode.GROUP_AUTHORIZATION_FAILED)]
    assert groups.deleted == ["app-2"]


def test_find_coordinator_refuses_denied_keys_without_creating_the_internal_topic() -> None:
    ctx = context(AclAuthorizer(), metadata=MetadataCache())  # no __consumer_offsets: creating would need more
    answer = ask(group_apis.find_coordinator, ctx, api_keys.FIND_COORDINATOR, 4,
                 {"key_type": 0, "coordinator_keys": ["g1", "g2"]})
    assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
        ("g1", ErrorCode.GROUP_AUTHORIZATION_FAILED, -1), ("g2", ErrorCode.GROUP_AUTHORIZATION_FAILED, -1)]
    answer = ask(group_apis.find_coordinator, ctx, api_keys.FIND_COORDINATOR, 3, {"key_type": 1, "key": "tx"})
    assert answer.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_describe_log_dirs_needs_describe_on_the_cluster() -> None:
    ctx = context(AclAuthorizer())
    for version in (1, 4):
        answer = ask(describe_log_dirs.describe_log_dirs, ctx, api_keys.DESCRIBE_LOG_DIRS, version, {"topics": None})
        assert answer.results == ()
        if version >= 3:
            assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_fetch_authorizes_every_partition_of_the_session_on_every_fetch(tmp_path: Any) -> None:
    """A consumer's incremental fetch names nothing, yet a topic whose READ was revoked answers
    TOPIC_AUTHORIZATION_FAILED on it (Kafka's fetch contexts authorize the whole session); a
    follower without CLUSTER_ACTION gets the error on every partition."""
    from odradek.broker.fetch_handler import FetchHandler
    from odradek.broker.partition import Partition
    from odradek.log.log import Log, LogConfig

    tps = [TopicPartition("open", 0), TopicPartition("secret", 0)]
    partitions = {}
    for tp in tps:
        partitions[tp] = Partition(tp, Log.open(tmp_path / f"{tp.topic}-0", LogConfig()), broker_id=1)
        partitions[tp].apply_state(PartitionState(tp, 1, 1, 1, (1,), 0, (1,)))
    auth = AclAuthorizer()
    grant(auth, Type.TOPIC, "open", Op.READ)
    grant(auth, Type.TOPIC, "secret", Op.READ)
    ctx = context(auth, replica_manager=SimpleNamespace(get=partitions.get), metadata=MetadataCache(),
                  replication_quotas=None, metrics=None)
    handler = FetchHandler(ctx)

    def fetch(session_id: int, epoch: int, named: list[TopicPartition], replica_id: int = -1) -> dict[str, int]:
        body = {"replica_id": replica_id, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
                "topics": [{"topic": tp.topic, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]} for tp in named]}
        header, request = decoded(api_keys.FETCH, 12, body)
        response = handler.authorized(ctx, header, request, 12)
        raw = response if isinstance(response, bytes) else b"".join(bytes(b) for b in response)  # type: ignore[union-attr]
        answer = kio_util.decode_response(api_keys.FETCH, 12, raw[4:])[1]
        fetch.session_id = answer.session_id  # type: ignore[attr-defined]
        return {f"{t.topic}-{p.partition_index}": p.error_code for t in answer.responses for p in t.partitions}

    assert fetch(0, 0, tps) == {"open-0": ErrorCode.NONE, "secret-0": ErrorCode.NONE}
    session_id = fetch.session_id  # type: ignore[attr-defined]
    assert session_id > 0
    assert fetch(session_id, 1, []) == {}  # nothing new to tell
    auth.apply(ResourcePattern(Type.TOPIC, "secret", PatternType.LITERAL), [])  # READ revoked
    assert fetch(session_id, 2, []) == {"secret-0": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert fetch(session_id, 3, []) == {"secret-0": ErrorCode.TOPIC_AUTHORIZATION_FAILED}  # every time
    grant(auth, Type.TOPIC, "secret", Op.READ)
    assert fetch(session_id, 4, []) == {"secret-0": ErrorCode.NONE}  # told again once allowed
    assert fetch(0, -1, tps, replica_id=2) == dict.fromkeys(["open-0", "secret-0"], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    grant(auth, Type.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION)
    assert fetch(0, -1, tps, replica_id=2) == dict.fromkeys(["open-0", "secret-0"], ErrorCode.NONE)


def _gated_cases() -> list[tuple[int, int]]:
    return [(key, version) for key, wiring in sorted(WIRED.items()) if wiring.gates and key in api_keys.VERSIONS
            for version in range(api_keys.VERSIONS[key][0], api_keys.VERSIONS[key][1] + 1)]


@pytest.mark.parametrize(("api_key", "version"), _gated_cases())
def test_every_gate_denial_decodes_with_the_error_in_every_place(api_key: int, version: int) -> None:
    """Every version of every API with a request-wide check, a request naming one of everything,
    no ACL at all: the gate's answer decodes and each error code in it is the denial's."""
    from test_failed_handler_responses import _codes, _sample

    body = _sample(kio_util.request_class(api_key, version))
    if api_key == api_keys.PRODUCE:  # the one gate that looks at the records: a transaction's batch
        body["topic_data"][0]["partition_data"][0]["records"] = build_batch([(b"k", b"v")], producer_id=1,
                                                                            producer_epoch=0, base_sequence=0,
                                                                            attributes=TRANSACTIONAL_FLAG)
    _header, request = decoded(api_key, version, body)
    response = check_request(context(AclAuthorizer()), api_key, version, 7, request)
    assert response is not None, "everything is denied: the gate must answer"
    codes = set(_codes(kio_util.decode_response(api_key, version, response[4:])[1]))
    assert len(codes) == 1 and codes <= AUTHORIZATION_ERRORS, codes


AUTHORIZATION_ERRORS = {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
