"""Kafka's ACL model as odradek reads and writes it: the wire codes, the DescribeAcls/DeleteAcls
filter semantics (ANY, MATCH), what CreateAcls refuses, and the ZooKeeper formats byte for byte
as Kafka's AclAuthorizer writes them (the expected strings are Kafka's, written out here)."""
from __future__ import annotations

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    ANY_ENTRY_FILTER,
    ANY_FILTER,
    EXTENDED_ACL_CHANGES,
    LITERAL_ACL_CHANGES,
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
    acl_change_path_prefix,
    acl_path,
    acl_type_path,
    authorization_error,
    create_request_error,
    creation_error,
    decode_acl_change,
    decode_acls,
    encode_acl_change,
    encode_acls,
    filter_request_error,
    normalized_filter,
    operation_supported,
    parse_principal,
    supported_operations,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED, MATCH, ANY = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER


def entry(principal: str = "User:alice", op: AclOperation = AclOperation.READ, perm: AclPermissionType = ALLOW,
          host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, perm)


def binding(name: str = "orders", pattern_type: PatternType = LITERAL, resource_type: ResourceType = TOPIC,
            acl: AccessControlEntry | None = None) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type), acl or entry())


# -- codes and names ------------------------------------------------------------------------------

def test_wire_codes_are_kafkas() -> None:
    assert {m.name: int(m) for m in ResourceType} == {
        "UNKNOWN": 0, "ANY": 1, "TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6,
        "USER": 7}
    assert {m.name: int(m) for m in PatternType} == {"UNKNOWN": 0, "ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
    assert {m.name: int(m) for m in AclOperation} == {
        "UNKNOWN": 0, "ANY": 1, "ALL": 2, "READ": 3, "WRITE": 4, "CREATE": 5, "DELETE": 6, "ALTER": 7, "DESCRIBE": 8,
        "CLUSTER_ACTION": 9, "DESCRIBE_CONFIGS": 10, "ALTER_CONFIGS": 11, "IDEMPOTENT_WRITE": 12, "CREATE_TOKENS": 13,
        "DESCRIBE_TOKENS": 14}
    assert {m.name: int(m) for m in AclPermissionType} == {"UNKNOWN": 0, "ANY": 1, "DENY": 2, "ALLOW": 3}


def test_an_unknown_code_reads_as_unknown() -> None:
    assert ResourceType.from_code(42) is ResourceType.UNKNOWN
    assert AclOperation.from_code(99) is AclOperation.UNKNOWN
    assert PatternType.from_code(4) is PREFIXED


def test_names_as_security_utils_reads_them() -> None:
    assert AclOperation.DESCRIBE_CONFIGS.pascal_name == "DescribeConfigs"
    assert ResourceType.TRANSACTIONAL_ID.pascal_name == "TransactionalId"
    assert AclOperation.from_pascal_name("IdempotentWrite") is AclOperation.IDEMPOTENT_WRITE
    assert AclOperation.from_pascal_name("IDEMPOTENTWRITE") is AclOperation.IDEMPOTENT_WRITE
    assert AclOperation.from_pascal_name("idempotentwrite") is AclOperation.IDEMPOTENT_WRITE
    # the enum name with its underscore is not one of SecurityUtils' names
    assert AclOperation.from_pascal_name("IDEMPOTENT_WRITE") is AclOperation.UNKNOWN
    assert AclPermissionType.from_pascal_name("Deny") is DENY


def test_principal_parses_at_the_first_colon() -> None:
    assert parse_principal("User:alice") == ("User", "alice")
    assert parse_principal("User:CN=a:b") == ("User", "CN=a:b")
    for bad in ("alice", ""):
        with pytest.raises(ValueError, match="principalType:principalName"):
            parse_principal(bad)


def test_supported_operations_are_acl_entrys() -> None:
    assert supported_operations(GROUP) == {AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}
    assert supported_operations(ResourceType.TRANSACTIONAL_ID) == {AclOperation.DESCRIBE, AclOperation.WRITE}
    assert AclOperation.IDEMPOTENT_WRITE in supported_operations(CLUSTER)
    assert operation_supported(GROUP, AclOperation.ALL)
    assert not operation_supported(GROUP, AclOperation.WRITE)
    with pytest.raises(ValueError):
        supported_operations(ResourceType.ANY)
    assert authorization_error(TOPIC) is ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert authorization_error(ResourceType.TRANSACTIONAL_ID) is ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# -- filters (DescribeAcls, DeleteAcls) ------------------------------------------------------------

def pattern(name: str, pattern_type: PatternType = LITERAL, resource_type: ResourceType = TOPIC) -> ResourcePattern:
    return ResourcePattern(resource_type, name, pattern_type)


def test_literal_and_prefixed_filters_match_their_pattern_exactly() -> None:
    f = ResourcePatternFilter(TOPIC, "orders", LITERAL)
    assert f.matches(pattern("orders"))
    assert not f.matches(pattern("orders", PREFIXED))
    assert not f.matches(pattern("*"))  # the wildcard is only MATCH's
    assert not f.matches(pattern("orders", resource_type=GROUP))
    assert ResourcePatternFilter(TOPIC, "ord", PREFIXED).matches(pattern("ord", PREFIXED))
    assert not ResourcePatternFilter(TOPIC, "orders", PREFIXED).matches(pattern("ord", PREFIXED))


def test_any_filter_matches_any_pattern_type_with_that_exact_name() -> None:
    f = ResourcePatternFilter(TOPIC, "orders", ANY)
    assert f.matches(pattern("orders")) and f.matches(pattern("orders", PREFIXED))
    assert not f.matches(pattern("ord", PREFIXED))
    assert not f.matches(pattern("*"))


def test_match_filter_finds_every_pattern_that_applies_to_the_name() -> None:
    f = ResourcePatternFilter(TOPIC, "orders-eu", MATCH)
    assert f.matches(pattern("orders-eu"))
    assert f.matches(pattern("*"))
    assert f.matches(pattern("orders-", PREFIXED))
    assert f.matches(pattern("orders-eu", PREFIXED))
    assert not f.matches(pattern("orders-eu-1", PREFIXED))
    assert not f.matches(pattern("orders"))  # a literal that is only a prefix
    assert not f.matches(pattern("x", PREFIXED))
    assert not f.matches(pattern("orders-eu", resource_type=GROUP))


def test_null_name_and_any_type_match_everything() -> None:
    assert ResourcePatternFilter(TOPIC, None, MATCH).matches(pattern("whatever", PREFIXED))
    assert ResourcePatternFilter(ResourceType.ANY, None, LITERAL).matches(pattern("g", resource_type=GROUP))
    assert not ResourcePatternFilter(ResourceType.ANY, None, LITERAL).matches(pattern("g", PREFIXED))
    assert ANY_FILTER.matches(binding("x", PREFIXED, GROUP, entry("User:bob", AclOperation.DELETE, DENY, "10.0.0.1")))


def test_entry_filter_takes_values_literally() -> None:
    alice_read = entry()
    assert AccessControlEntryFilter("User:alice", None, AclOperation.ANY, AclPermissionType.ANY).matches(alice_read)
    assert not AccessControlEntryFilter("User:*", None, AclOperation.ANY, AclPermissionType.ANY).matches(alice_read)
    assert not AccessControlEntryFilter(None, "10.0.0.1", AclOperation.ANY, AclPermissionType.ANY).matches(alice_read)
    assert AccessControlEntryFilter(None, "*", AclOperation.READ, ALLOW).matches(alice_read)
    assert not AccessControlEntryFilter(None, None, AclOperation.ALL, AclPermissionType.ANY).matches(alice_read)
    assert not AccessControlEntryFilter(None, None, AclOperation.ANY, DENY).matches(alice_read)
    assert ANY_ENTRY_FILTER.matches(alice_read)


def test_indefinite_fields() -> None:
    assert ANY_FILTER.find_indefinite_field() == "Resource type is ANY."
    exact = binding().to_filter()
    assert exact.find_indefinite_field() is None
    assert AclBindingFilter(ResourcePatternFilter(TOPIC, "t", MATCH), exact.entry).find_indefinite_field() == \
        "Resource pattern type is MATCH."
    assert AclBindingFilter(exact.pattern, ANY_ENTRY_FILTER).find_indefinite_field() == "Principal is NULL"


def test_filter_requests_are_refused_as_kafka_parses_them() -> None:
    prefixed = AclBindingFilter(ResourcePatternFilter(TOPIC, "o", PREFIXED), ANY_ENTRY_FILTER)
    assert filter_request_error(prefixed, 0) == AclError(
        ErrorCode.UNSUPPORTED_VERSION, "Version 0 only supports literal resource pattern types")
    assert filter_request_error(prefixed, 1) is None
    unknown_op = AclBindingFilter(ResourcePatternFilter(TOPIC, None, ANY),
                                  AccessControlEntryFilter(None, None, AclOperation.UNKNOWN, AclPermissionType.ANY))
    assert filter_request_error(unknown_op, 2) == AclError(ErrorCode.INVALID_REQUEST,
                                                           "Filters contain UNKNOWN elements")
    assert filter_request_error(ANY_FILTER, 0) is None
    # v0 ANY means LITERAL: brokers before KIP-290 had nothing else
    assert normalized_filter(ANY_FILTER, 0).pattern.pattern_type is LITERAL
    assert normalized_filter(ANY_FILTER, 1) == ANY_FILTER


# -- CreateAcls validation --------------------------------------------------------------------------

def test_a_valid_binding_passes() -> None:
    assert creation_error(binding()) is None
    assert creation_error(binding("fin-", PREFIXED, GROUP)) is None
    assert creation_error(binding("kafka-cluster", resource_type=CLUSTER,
                                  acl=entry(op=AclOperation.IDEMPOTENT_WRITE))) is None
    # Kafka's broker accepts an operation the resource type does not support (kafka-acls.sh refuses it)
    assert creation_error(binding("kafka-cluster", resource_type=CLUSTER)) is None


@pytest.mark.parametrize(("bad", "message"), [
    (binding(resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
    (binding(pattern_type=MATCH), "Invalid patternType MATCH"),
    (binding(pattern_type=ANY), "Invalid patternType ANY"),
    (binding(acl=entry(op=AclOperation.ANY)), "Invalid operation ANY"),
    (binding(acl=entry(perm=AclPermissionType.ANY)), "Invalid permissionType ANY"),
    (binding("my-cluster", resource_type=CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(""), "Invalid empty resource name"),
    (binding("a/b"), "Failed to create ACL: ACL binding contains invalid resource name: a/b"),
    (binding(acl=entry("alice")),
     "Failed to create ACL: expected a string in format principalType:principalName but got alice"),
])
def test_bindings_create_acls_refuses(bad: AclBinding, message: str) -> None:
    assert creation_error(bad) == AclError(ErrorCode.INVALID_REQUEST, message)


def test_whole_create_requests_kafka_refuses() -> None:
    assert create_request_error([binding("o", PREFIXED)], 0) == AclError(
        ErrorCode.UNSUPPORTED_VERSION, "Version 0 only supports literal resource pattern types")
    assert create_request_error([binding("o", PREFIXED)], 1) is None
    assert create_request_error([binding(), binding(acl=entry(op=AclOperation.UNKNOWN))], 3) == AclError(
        ErrorCode.INVALID_REQUEST, "CreatableAcls contain unknown elements")
    assert create_request_error([binding(resource_type=ResourceType.UNKNOWN)], 1) is not None
    assert create_request_error([binding()], 0) is None


# -- ZooKeeper ---------------------------------------------------------------------------------------

def test_znode_paths() -> None:
    assert acl_path(pattern("orders")) == "/kafka-acl/Topic/orders"
    assert acl_path(pattern("kafka-cluster", resource_type=CLUSTER)) == "/kafka-acl/Cluster/kafka-cluster"
    assert acl_path(pattern("fin-", PREFIXED, GROUP)) == "/kafka-acl-extended/prefixed/Group/fin-"
    assert acl_path(pattern("tx", resource_type=ResourceType.TRANSACTIONAL_ID)) == "/kafka-acl/TransactionalId/tx"
    assert acl_type_path(PREFIXED, ResourceType.DELEGATION_TOKEN) == "/kafka-acl-extended/prefixed/DelegationToken"
    assert acl_change_path_prefix(LITERAL) == "/kafka-acl-changes/acl_changes_"
    assert acl_change_path_prefix(PREFIXED) == "/kafka-acl-extended-changes/acl_changes_"
    with pytest.raises(ValueError):
        acl_path(pattern("x", MATCH))


def test_acl_znode_value_is_kafkas_json() -> None:
    acls = {entry(), entry("User:bob", AclOperation.DESCRIBE_CONFIGS, DENY, "10.0.0.1")}
    data = encode_acls(acls)
    assert data == (b'{"version":1,"acls":['
                    b'{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"},'
                    b'{"principal":"User:bob","permissionType":"Deny","operation":"DescribeConfigs",'
                    b'"host":"10.0.0.1"}]}')
    assert decode_acls(data) == acls


def test_acl_znode_as_kafka_documents_it_reads() -> None:
    """ZkData's example: spaces, another key order."""
    data = (b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Allow","operation": "Read",'
            b'"principal": "User:alice"}]}')
    assert decode_acls(data) == {AccessControlEntry("User:alice", "host1", AclOperation.READ, ALLOW)}


def test_every_operation_round_trips_through_its_pascal_name() -> None:
    acls = {entry(op=op, perm=perm) for op in AclOperation for perm in AclPermissionType}
    assert decode_acls(encode_acls(acls)) == acls
    assert b'"operation":"ClusterAction"' in encode_acls({entry(op=AclOperation.CLUSTER_ACTION)})


def test_a_non_ascii_name_is_written_as_utf8() -> None:
    data = encode_acls({entry("User:j\u00f6rg")})
    assert '"User:j\u00f6rg"'.encode() in data
    assert decode_acls(data) == {entry("User:j\u00f6rg")}


def test_empty_znode_is_no_acls_and_an_unknown_operation_is_kept_as_unknown() -> None:
    assert decode_acls(b"") == frozenset() and decode_acls(None) == frozenset()
    data = b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Teleport","host":"*"}]}'
    assert decode_acls(data) == {AccessControlEntry("User:a", "*", AclOperation.UNKNOWN, ALLOW)}


@pytest.mark.parametrize(("data", "message"), [
    (b"{not json", "malformed ACL znode"),
    (b"\xff\xfe", "malformed ACL znode"),
    (b"[1]", "expected a JSON object"),
    (b'{"version":2,"acls":[]}', "unsupported ACL znode version 2"),
    (b'{"acls":[]}', "unsupported ACL znode version None"),
    (b'{"version":1,"acls":{}}', "'acls' must be a list"),
    (b'{"version":1,"acls":[1]}', "malformed ACL entry"),
    (b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow","operation":"Read"}]}', "'host'"),
    (b'{"version":1,"acls":[{"principal":"alice","permissionType":"Allow","operation":"Read","host":"*"}]}',
     "principalType:principalName"),
])
def test_malformed_acl_znodes_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_acls(data)


def test_literal_change_notification_is_type_colon_name() -> None:
    assert encode_acl_change(pattern("orders")) == b"TOPIC:orders"
    assert encode_acl_change(pattern("tx", resource_type=ResourceType.TRANSACTIONAL_ID)) == b"TRANSACTIONAL_ID:tx"
    assert decode_acl_change(LITERAL_ACL_CHANGES, b"TOPIC:orders") == pattern("orders")
    # the name may hold colons; brokers before Kafka 2.0 wrote the Pascal-case type
    assert decode_acl_change(LITERAL_ACL_CHANGES, b"Topic:a:b") == pattern("a:b")
    assert decode_acl_change(LITERAL_ACL_CHANGES, b"TransactionalId:tx") == pattern(
        "tx", resource_type=ResourceType.TRANSACTIONAL_ID)


def test_extended_change_notification_is_kafkas_json() -> None:
    data = encode_acl_change(pattern("fin-", PREFIXED, GROUP))
    assert data == b'{"version":1,"resourceType":"GROUP","name":"fin-","patternType":"PREFIXED"}'
    assert decode_acl_change(EXTENDED_ACL_CHANGES, data) == pattern("fin-", PREFIXED, GROUP)


@pytest.mark.parametrize(("root", "data", "message"), [
    (LITERAL_ACL_CHANGES, b"orders", "ResourceType:ResourceName"),
    (LITERAL_ACL_CHANGES, b"TELEPORTER:x", "unknown resource type"),
    (EXTENDED_ACL_CHANGES, b"TOPIC:x", "malformed ACL change event"),
    (EXTENDED_ACL_CHANGES, b'{"version":2,"resourceType":"TOPIC","name":"x","patternType":"PREFIXED"}',
     "unsupported version: 2"),
    (EXTENDED_ACL_CHANGES, b'{"version":1,"resourceType":"TOPIC","name":"x","patternType":"MATCH"}',
     "pattern type 'MATCH'"),
    (EXTENDED_ACL_CHANGES, b'{"version":1,"resourceType":"TOPIC","patternType":"PREFIXED"}', "'name'"),
    ("/kafka-acl", b"TOPIC:x", "not an ACL change root"),
])
def test_malformed_change_notifications_are_refused(root: str, data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_acl_change(root, data)
