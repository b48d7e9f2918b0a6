"""AclAuthorizer's decision, one Kafka rule per test: who is allowed and denied what with which
ACLs, authorizeByResourceType, DescribeAcls/DeleteAcls/CreateAcls over the cache, and the per-API
authorization table against the APIs the broker serves."""
from __future__ import annotations

import pytest

from odradek.broker import api_keys
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    ANY_ENTRY_FILTER,
    ANY_FILTER,
    CLUSTER_NAME,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from odradek.security.acl_authorizer import AclAuthorizer, parse_super_users
from odradek.security.authorization_table import API_AUTHORIZATION, Scope

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.7"


def ace(principal: str = ALICE, op: Op = Op.READ, perm: AclPermissionType = ALLOW,
        host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def topic(name: str, pattern_type: PatternType = LITERAL) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, pattern_type)


def authorizer(*acls: tuple[ResourcePattern, AccessControlEntry], allow_if_none: bool = False,
               super_users: tuple[str, ...] = ()) -> AclAuthorizer:
    auth = AclAuthorizer(super_users, allow_if_none)
    by_resource: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for resource, entry in acls:
        by_resource.setdefault(resource, set()).add(entry)
    auth.load(by_resource)
    return auth


def may(auth: AclAuthorizer, op: Op = Op.READ, name: str = "orders", principal: str = ALICE, host: str = HOST,
        resource_type: ResourceType = TOPIC) -> bool:
    return auth.authorize(principal, host, op, resource_type, name)


# -- the basic matrix -------------------------------------------------------------------------------

def test_an_allow_acl_allows_its_principal_only() -> None:
    auth = authorizer((topic("orders"), ace()))
    assert may(auth)
    assert not may(auth, principal=BOB)
    assert not may(auth, Op.WRITE)
    assert not may(auth, name="payments")  # another topic has no ACL: denied by default


def test_no_acl_at_all_is_decided_by_allow_everyone_if_no_acl_found() -> None:
    assert not may(authorizer())
    assert may(authorizer(allow_if_none=True))
    assert may(authorizer(allow_if_none=True), Op.ALTER, principal=BOB)


def test_allow_everyone_applies_only_where_no_acl_exists() -> None:
    """An ACL for someone else on the resource is an ACL: the flag no longer decides."""
    auth = authorizer((topic("orders"), ace(BOB)), allow_if_none=True)
    assert not may(auth)
    assert may(auth, name="payments")
    # a prefixed ACL counts too
    auth = authorizer((topic("ord", PREFIXED), ace(BOB)), allow_if_none=True)
    assert not may(auth)


def test_deny_wins_over_allow() -> None:
    auth = authorizer((topic("orders"), ace()), (topic("orders"), ace(perm=DENY)))
    assert not may(auth)


def test_deny_from_any_matching_pattern_wins() -> None:
    auth = authorizer((topic("orders"), ace(op=Op.ALL)), (topic("ord", PREFIXED), ace(perm=DENY)))
    assert not may(auth)
    assert may(auth, Op.WRITE)
    auth = authorizer((topic("orders"), ace()), (topic("*"), ace("User:*", perm=DENY, host=HOST)))
    assert not may(auth)


def test_a_deny_for_someone_else_does_not_deny() -> None:
    auth = authorizer((topic("orders"), ace()), (topic("orders"), ace(BOB, perm=DENY)))
    assert may(auth)
    assert not may(auth, principal=BOB)


def test_deny_of_all_denies_every_operation() -> None:
    auth = authorizer((topic("orders"), ace(op=Op.ALL)), (topic("orders"), ace(op=Op.ALL, perm=DENY)))
    assert not any(may(auth, op) for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.DELETE))


def test_allow_of_all_allows_every_operation() -> None:
    auth = authorizer((topic("orders"), ace(op=Op.ALL)))
    ops = (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
    assert all(may(auth, op) for op in ops)
    assert not may(auth, principal=BOB)


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_read_write_delete_alter_imply_describe(granted: Op) -> None:
    auth = authorizer((topic("orders"), ace(op=granted)))
    assert may(auth, Op.DESCRIBE)


@pytest.mark.parametrize("granted", [Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.CLUSTER_ACTION,
                                     Op.IDEMPOTENT_WRITE])
def test_other_operations_do_not_imply_describe(granted: Op) -> None:
    auth = authorizer((topic("orders"), ace(op=granted)))
    assert not may(auth, Op.DESCRIBE)


def test_alter_configs_implies_describe_configs_and_nothing_implies_the_reverse() -> None:
    assert may(authorizer((topic("orders"), ace(op=Op.ALTER_CONFIGS))), Op.DESCRIBE_CONFIGS)
    assert not may(authorizer((topic("orders"), ace(op=Op.ALTER))), Op.DESCRIBE_CONFIGS)
    assert not may(authorizer((topic("orders"), ace(op=Op.DESCRIBE_CONFIGS))), Op.ALTER_CONFIGS)
    assert not may(authorizer((topic("orders"), ace(op=Op.DESCRIBE))), Op.READ)


def test_implications_are_for_allow_only() -> None:
    """A DENY of READ does not deny DESCRIBE (Kafka checks DENY for the operation itself or ALL): with
    ALLOW READ next to it, DESCRIBE is still allowed through the implication."""
    auth = authorizer((topic("orders"), ace(op=Op.READ)), (topic("orders"), ace(op=Op.READ, perm=DENY)))
    assert not may(auth, Op.READ)
    assert may(auth, Op.DESCRIBE)
    auth = authorizer((topic("orders"), ace(op=Op.READ)), (topic("orders"), ace(op=Op.DESCRIBE, perm=DENY)))
    assert not may(auth, Op.DESCRIBE)
    assert may(auth, Op.READ)


# -- patterns, principals, hosts ----------------------------------------------------------------------

def test_prefixed_acl_applies_to_names_it_prefixes() -> None:
    auth = authorizer((topic("fin-", PREFIXED), ace()))
    assert may(auth, name="fin-payments")
    assert may(auth, name="fin-")  # the prefix itself
    assert not may(auth, name="fin")  # shorter than the prefix
    assert not may(auth, name="finance")
    assert not may(auth, name="x-fin-payments")  # contains it, but not as a prefix


def test_prefixed_acls_of_several_lengths_all_apply() -> None:
    auth = authorizer((topic("f", PREFIXED), ace()), (topic("fin-", PREFIXED), ace(op=Op.WRITE)),
                      (topic("fin-pay", PREFIXED), ace(op=Op.DELETE, perm=DENY)))
    assert may(auth, Op.READ, "fin-payments") and may(auth, Op.WRITE, "fin-payments")
    assert not may(auth, Op.DELETE, "fin-payments")
    assert may(auth, Op.READ, "fox") and not may(auth, Op.WRITE, "fox")


def test_a_prefixed_pattern_is_not_a_literal_one() -> None:
    auth = authorizer((topic("orders", PREFIXED), ace()))
    assert may(auth, name="orders") and may(auth, name="orders-2")
    auth = authorizer((topic("orders"), ace()))
    assert not may(auth, name="orders-2")


def test_prefixed_star_is_a_prefix_not_a_wildcard() -> None:
    auth = authorizer((topic("*", PREFIXED), ace()))
    assert may(auth, name="*x")
    assert not may(auth, name="orders")


def test_prefixes_of_another_resource_type_do_not_apply() -> None:
    auth = authorizer((ResourcePattern(GROUP, "fin-", PREFIXED), ace()))
    assert not may(auth, name="fin-payments")
    assert may(auth, name="fin-payments", resource_type=GROUP)


def test_wildcard_resource_applies_to_every_name_of_its_type() -> None:
    auth = authorizer((topic("*"), ace()))
    assert may(auth, name="orders") and may(auth, name="anything")
    assert not may(auth, name="g", resource_type=GROUP)


def test_wildcard_principal_applies_to_every_user() -> None:
    auth = authorizer((topic("orders"), ace("User:*")))
    assert may(auth) and may(auth, principal=BOB)
    assert may(auth, principal="User:*")


def test_a_principal_of_another_type_is_not_a_user() -> None:
    auth = authorizer((topic("orders"), ace("Group:alice")))
    assert not may(auth)
    assert may(auth, principal="Group:alice")


def test_host_must_match_or_be_the_wildcard() -> None:
    auth = authorizer((topic("orders"), ace(host=HOST)))
    assert may(auth, host=HOST)
    assert not may(auth, host="10.0.0.8")
    auth = authorizer((topic("orders"), ace()), (topic("orders"), ace(perm=DENY, host="10.0.0.8")))
    assert may(auth, host=HOST)
    assert not may(auth, host="10.0.0.8")


def test_super_users_are_allowed_everything_even_against_deny() -> None:
    auth = authorizer((topic("orders"), ace("User:admin", Op.ALL, DENY)), super_users=("User:admin",))
    assert may(auth, Op.DELETE, principal="User:admin")
    assert may(auth, Op.CLUSTER_ACTION, CLUSTER_NAME, "User:admin", resource_type=CLUSTER)
    assert auth.authorize_by_resource_type("User:admin", HOST, Op.WRITE, TOPIC)
    assert not may(auth, principal="User:other")


def test_super_users_config_parses_like_kafka() -> None:
    assert parse_super_users(" User:admin ; User:broker;") == {"User:admin", "User:broker"}
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError):
        parse_super_users("admin")
    auth = AclAuthorizer.from_config({"super.users": "User:admin", "allow.everyone.if.no.acl.found": "TRUE"})
    assert auth.is_super_user("User:admin") and auth.allow_everyone_if_no_acl_found
    assert not AclAuthorizer.from_config({}).allow_everyone_if_no_acl_found
    with pytest.raises(ValueError):
        AclAuthorizer.from_config({"allow.everyone.if.no.acl.found": "yes"})


def test_filter_values_are_not_questions() -> None:
    auth = authorizer()
    with pytest.raises(ValueError):
        may(auth, Op.ANY)
    with pytest.raises(ValueError):
        may(auth, resource_type=ResourceType.ANY)


# -- the cache ------------------------------------------------------------------------------------------

def test_apply_replaces_and_removes_a_resources_acls() -> None:
    auth = authorizer()
    auth.apply(topic("fin-", PREFIXED), [ace()])
    assert may(auth, name="fin-x")
    auth.apply(topic("fin-", PREFIXED), [ace(op=Op.WRITE)])
    assert not may(auth, name="fin-x") and may(auth, Op.WRITE, "fin-x")
    auth.apply(topic("fin-", PREFIXED), [])
    assert not may(auth, Op.WRITE, "fin-x")
    assert auth.acls(topic("fin-", PREFIXED)) == frozenset()
    assert auth.matching_acls(TOPIC, "fin-x") == []
    auth.apply(topic("fin-", PREFIXED), [])  # removing what is not there is nothing


def test_a_prefix_length_stays_while_another_prefix_of_it_remains() -> None:
    auth = authorizer((topic("ab", PREFIXED), ace()), (topic("cd", PREFIXED), ace()))
    auth.apply(topic("ab", PREFIXED), [])
    assert may(auth, name="cde") and not may(auth, name="abc")


def test_apply_refuses_what_cannot_be_stored() -> None:
    auth = authorizer()
    with pytest.raises(ValueError):
        auth.apply(ResourcePattern(TOPIC, "x", PatternType.MATCH), [ace()])
    with pytest.raises(ValueError):
        auth.apply(ResourcePattern(ResourceType.ANY, "x", LITERAL), [ace()])


# -- authorizeByResourceType ----------------------------------------------------------------------------

def by_type(auth: AclAuthorizer, op: Op = Op.WRITE, principal: str = ALICE,
            resource_type: ResourceType = TOPIC) -> bool:
    return auth.authorize_by_resource_type(principal, HOST, op, resource_type)


def test_by_resource_type_any_allowed_resource_is_enough() -> None:
    assert by_type(authorizer((topic("orders"), ace(op=Op.WRITE))))
    assert by_type(authorizer((topic("fin-", PREFIXED), ace(op=Op.WRITE))))
    assert by_type(authorizer((topic("orders"), ace(op=Op.ALL))))
    assert by_type(authorizer((topic("orders"), ace("User:*", Op.WRITE))))
    assert not by_type(authorizer((topic("orders"), ace(op=Op.READ))))
    assert not by_type(authorizer((topic("orders"), ace(BOB, Op.WRITE))))
    assert not by_type(authorizer((topic("orders"), ace(op=Op.WRITE))), resource_type=GROUP)
    assert not by_type(authorizer((topic("orders"), ace(op=Op.WRITE, host="10.9.9.9"))))
    assert not by_type(authorizer())


def test_by_resource_type_ignores_implications() -> None:
    assert not by_type(authorizer((topic("orders"), ace(op=Op.WRITE))), Op.DESCRIBE)


def test_by_resource_type_denies() -> None:
    # a wildcard DENY denies the whole type, even with allow.everyone.if.no.acl.found
    auth = authorizer((topic("orders"), ace(op=Op.WRITE)), (topic("*"), ace(op=Op.WRITE, perm=DENY)),
                      allow_if_none=True)
    assert not by_type(auth)
    # a literal DENY on the allowed name
    assert not by_type(authorizer((topic("orders"), ace(op=Op.WRITE)), (topic("orders"), ace(op=Op.WRITE, perm=DENY))))
    # a DENY on another name leaves the allowed one
    assert by_type(authorizer((topic("orders"), ace(op=Op.WRITE)), (topic("other"), ace(op=Op.WRITE, perm=DENY))))
    # a prefixed DENY dominates the literal and prefixed ALLOWs it prefixes
    assert not by_type(authorizer((topic("fin-pay"), ace(op=Op.WRITE)),
                                  (topic("fin-pay-x", PREFIXED), ace(op=Op.WRITE)),
                                  (topic("fin-", PREFIXED), ace(op=Op.ALL, perm=DENY))))
    assert by_type(authorizer((topic("fin", PREFIXED), ace(op=Op.WRITE)),
                              (topic("fin-", PREFIXED), ace(op=Op.WRITE, perm=DENY))))
    # a wildcard ALLOW survives literal DENYs
    assert by_type(authorizer((topic("*"), ace(op=Op.WRITE)), (topic("orders"), ace(op=Op.WRITE, perm=DENY))))


def test_by_resource_type_with_allow_everyone() -> None:
    assert by_type(authorizer(allow_if_none=True))
    assert by_type(authorizer((topic("orders"), ace(op=Op.WRITE, perm=DENY)), allow_if_none=True))


def test_by_resource_type_follows_apply() -> None:
    auth = authorizer((topic("orders"), ace(op=Op.WRITE)))
    auth.apply(topic("orders"), [])
    assert not by_type(auth)


# -- DescribeAcls, DeleteAcls, CreateAcls ---------------------------------------------------------------

FIN = ResourcePattern(TOPIC, "fin-", PREFIXED)
ORDERS = topic("orders")
WILD = topic("*")
GRP = ResourcePattern(GROUP, "orders", LITERAL)


def populated() -> AclAuthorizer:
    return authorizer((FIN, ace()), (ORDERS, ace(BOB, Op.WRITE)), (ORDERS, ace(op=Op.READ)),
                      (WILD, ace(op=Op.DESCRIBE)), (GRP, ace()))


def pattern_filter(name: str | None, pattern_type: PatternType,
                   resource_type: ResourceType = TOPIC) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(resource_type, name, pattern_type), ANY_ENTRY_FILTER)


def test_describe_everything() -> None:
    found = populated().describe(ANY_FILTER)
    assert len(found) == 5
    assert found == populated().describe(ANY_FILTER)  # a stable order


def test_describe_match_finds_literal_wildcard_and_prefixes() -> None:
    found = populated().describe(pattern_filter("fin-x", PatternType.MATCH))
    assert {b.pattern for b in found} == {FIN, WILD}
    found = populated().describe(pattern_filter("orders", PatternType.MATCH))
    assert {b.pattern for b in found} == {ORDERS, WILD}


def test_describe_any_and_literal() -> None:
    assert {b.pattern for b in populated().describe(pattern_filter("orders", PatternType.ANY))} == {ORDERS}
    assert {b.pattern for b in populated().describe(pattern_filter("orders", PatternType.ANY,
                                                                   ResourceType.ANY))} == {ORDERS, GRP}
    assert populated().describe(pattern_filter("fin-", LITERAL)) == []
    entry_filter = AccessControlEntryFilter(BOB, None, Op.ANY, AclPermissionType.ANY)
    assert populated().describe(AclBindingFilter(ResourcePatternFilter(TOPIC, None, PatternType.ANY), entry_filter)) \
        == [AclBinding(ORDERS, ace(BOB, Op.WRITE))]


def test_delete_returns_per_filter_and_removes() -> None:
    auth = populated()
    bob = AclBindingFilter(ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
                           AccessControlEntryFilter(BOB, None, Op.ANY, AclPermissionType.ANY))
    removed = auth.delete([bob, pattern_filter("fin-zzz", PatternType.MATCH), pattern_filter("nothing", LITERAL)])
    assert removed[0] == [AclBinding(ORDERS, ace(BOB, Op.WRITE))]
    assert {b.pattern for b in removed[1]} == {FIN, WILD}
    assert removed[2] == []
    assert {b.pattern for b in auth.describe(ANY_FILTER)} == {ORDERS, GRP}
    assert not may(auth, name="fin-a")  # the prefixed ACL is gone from the decision too


def test_delete_reports_an_acl_two_filters_match_under_the_first() -> None:
    auth = populated()
    removed = auth.delete([pattern_filter("orders", LITERAL), pattern_filter(None, PatternType.ANY)])
    assert {b.pattern for b in removed[0]} == {ORDERS} and len(removed[0]) == 2
    assert {b.pattern for b in removed[1]} == {FIN, WILD}
    assert auth.describe(ANY_FILTER) == [AclBinding(GRP, ace())]


def test_create_adds_valid_bindings_and_refuses_the_rest() -> None:
    auth = authorizer()
    results = auth.create([AclBinding(ORDERS, ace()), AclBinding(topic(""), ace()),
                           AclBinding(ORDERS, ace()), AclBinding(FIN, ace(op=Op.WRITE))])
    assert results == [None, AclError(ErrorCode.INVALID_REQUEST, "Invalid empty resource name"), None, None]
    assert auth.acls(ORDERS) == {ace()}
    assert may(auth) and may(auth, Op.WRITE, "fin-1")


# -- the per-API table ----------------------------------------------------------------------------------

def served_api_keys() -> set[int]:
    return set(api_keys.ADVERTISED)


def test_the_table_covers_every_api_the_broker_serves() -> None:
    missing = served_api_keys() - set(API_AUTHORIZATION)
    assert not missing, f"no authorization row for API keys {sorted(missing)}"


def test_every_row_names_its_handler_and_a_consistent_error() -> None:
    for key, row in API_AUTHORIZATION.items():
        assert row.api_key == key
        assert "handle" in row.handler, row
        for check in row.checks:
            assert (check.error is None) == (check.scope is Scope.HIDDEN), row
            permission = check.permission
            assert permission.operation not in (Op.ANY, Op.UNKNOWN) and permission.resource_type not in (
                ResourceType.ANY, ResourceType.UNKNOWN), row
            if permission.resource_type is CLUSTER:
                assert permission.resource == CLUSTER_NAME


@pytest.mark.parametrize(("key", "operation", "resource_type", "error"), [
    (api_keys.PRODUCE, Op.WRITE, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (api_keys.PRODUCE, Op.WRITE, TXN, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (api_keys.FETCH, Op.READ, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (api_keys.FETCH, Op.CLUSTER_ACTION, CLUSTER, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (api_keys.JOIN_GROUP, Op.READ, GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    (api_keys.OFFSET_COMMIT, Op.READ, GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    (api_keys.OFFSET_COMMIT, Op.READ, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (api_keys.INIT_PRODUCER_ID, Op.WRITE, TXN, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (api_keys.INIT_PRODUCER_ID, Op.IDEMPOTENT_WRITE, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (api_keys.CREATE_TOPICS, Op.CREATE, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (api_keys.WRITE_TXN_MARKERS, Op.CLUSTER_ACTION, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (api_keys.DELETE_TOPICS, Op.DELETE, TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (api_keys.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (api_keys.ELECT_LEADERS, Op.ALTER, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (4, Op.CLUSTER_ACTION, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # LeaderAndIsr
    (7, Op.CLUSTER_ACTION, CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # ControlledShutdown
])
def test_kafkas_checks_are_in_the_table(key: int, operation: Op, resource_type: ResourceType, error: ErrorCode) -> None:
    assert any(c.permission.operation is operation and c.permission.resource_type is resource_type and c.error is error
               for c in API_AUTHORIZATION[key].checks)


def test_the_alternatives_kafka_accepts() -> None:
    create_topic = next(c for c in API_AUTHORIZATION[api_keys.CREATE_TOPICS].checks
                        if c.permission.operation is Op.CREATE)
    assert [(u.operation, u.resource_type) for u in create_topic.unless] == [(Op.CREATE, CLUSTER)]
    idempotent = next(c for c in API_AUTHORIZATION[api_keys.INIT_PRODUCER_ID].checks
                      if c.permission.operation is Op.IDEMPOTENT_WRITE)
    assert [(u.operation, u.resource_type, u.any_resource) for u in idempotent.unless] == [(Op.WRITE, TOPIC, True)]
    assert API_AUTHORIZATION[api_keys.API_VERSIONS].checks == ()
