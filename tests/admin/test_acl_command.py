"""admin/acl_command.py without a cluster: kafka-acls.sh's options turned into the bindings and
filters it sends (the --producer and --consumer expansions, hosts defaulting to *, the checks of
AclCommandOptions.checkArgs and validateOperation) and its output format."""
from __future__ import annotations

import pytest

from odradek.admin.acl_command import (
    CLUSTER_FILTER,
    AclSpec,
    AclUsageError,
    bindings_to_add,
    check_principal,
    filters_to_remove,
    format_acls,
    format_by_principal,
    list_filters,
    parse_operation,
    parse_pattern_type,
    resource_acls,
)
from odradek.security.acl import (
    ANY_ENTRY_FILTER,
    ANY_FILTER,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)

Op, Perm = AclOperation, AclPermissionType
TOPIC = ResourceType.TOPIC


def ops(entries: frozenset[AccessControlEntry]) -> set[tuple[str, str, str, str]]:
    return {(e.principal, e.host, e.operation.name, e.permission_type.name) for e in entries}


@pytest.mark.parametrize("name, op", [("Read", Op.READ), ("READ", Op.READ), ("read", Op.READ),
                                      ("DescribeConfigs", Op.DESCRIBE_CONFIGS), ("DESCRIBE_CONFIGS", Op.DESCRIBE_CONFIGS),
                                      ("ClusterAction", Op.CLUSTER_ACTION), ("IdempotentWrite", Op.IDEMPOTENT_WRITE),
                                      ("All", Op.ALL)])
def test_operation_names(name: str, op: AclOperation) -> None:
    assert parse_operation(name) is op


@pytest.mark.parametrize("name", ["Any", "Unknown", "Fly", "", "CreateTokens"])
def test_other_operation_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        parse_operation(name)


def test_pattern_types_and_principals() -> None:
    assert [parse_pattern_type(n) for n in ("literal", "PREFIXED", "Match", "any")] == [
        PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY]
    with pytest.raises(ValueError):
        parse_pattern_type("unknown")
    assert check_principal(" User:alice ") == "User:alice"
    assert check_principal("User:CN=a:b") == "User:CN=a:b"
    for bad in ("alice", "User:", ":alice", ""):
        with pytest.raises(ValueError, match="Type:name"):
            check_principal(bad)


def test_add_expands_principals_hosts_and_operations() -> None:
    spec = AclSpec(topics=("t",), groups=("g",), allow_principals=("User:a", "User:b"), allow_hosts=("h1", "h2"),
                   deny_principals=("User:c",), operations=(Op.READ, Op.DESCRIBE))
    bindings = bindings_to_add(spec)
    assert len(bindings) == 2 * (2 * 2 * 2 + 1 * 1 * 2)
    topic = {b.entry for b in bindings if b.pattern == ResourcePattern(TOPIC, "t", PatternType.LITERAL)}
    assert ("User:c", "*", "READ", "DENY") in ops(frozenset(topic))
    assert ("User:a", "h2", "DESCRIBE", "ALLOW") in ops(frozenset(topic))
    default = bindings_to_add(AclSpec(cluster=True, allow_principals=("User:ANONYMOUS",)))
    assert default == [AclBinding(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                                  AccessControlEntry("User:ANONYMOUS", "*", Op.ALL, Perm.ALLOW))]


def test_producer_and_consumer_roles() -> None:
    producer = resource_acls(AclSpec(topics=("t",), transactional_ids=("tx",), producer=True, idempotent=True,
                                     allow_principals=("User:p",)))
    assert {f.resource_type: {e.operation.name for e in entries} for f, entries in producer.items()} == {
        TOPIC: {"WRITE", "DESCRIBE", "CREATE"}, ResourceType.TRANSACTIONAL_ID: {"WRITE", "DESCRIBE"},
        ResourceType.CLUSTER: {"IDEMPOTENT_WRITE"}}
    consumer = resource_acls(AclSpec(topics=("t",), groups=("g",), consumer=True, allow_principals=("User:c",)))
    assert {f.resource_type: {e.operation.name for e in entries} for f, entries in consumer.items()} == {
        TOPIC: {"READ", "DESCRIBE"}, ResourceType.GROUP: {"READ"}}
    both = resource_acls(AclSpec(topics=("t",), groups=("g",), producer=True, consumer=True,
                                 allow_principals=("User:pc",)))
    assert {e.operation.name for e in both[ResourcePatternFilter(TOPIC, "t", PatternType.LITERAL)]} == {
        "WRITE", "DESCRIBE", "CREATE", "READ"}


@pytest.mark.parametrize("spec, action, words", [
    (AclSpec(topics=("t",)), "add", "--allow-principal, --deny-principal"),
    (AclSpec(allow_principals=("User:a",)), "add", "at least one resource"),
    (AclSpec(topics=("t",), allow_principals=("User:a",), pattern_type=PatternType.MATCH), "add", "not valid when adding"),
    (AclSpec(groups=("g",), allow_principals=("User:a",), operations=(Op.WRITE,)), "add", "does not take operation Write"),
    (AclSpec(cluster=True, allow_principals=("User:a",), operations=(Op.READ,)), "add", "does not take operation Read"),
    (AclSpec(producer=True, allow_principals=("User:a",)), "add", "with --producer you must specify a --topic"),
    (AclSpec(topics=("t",), producer=True, operations=(Op.READ,), allow_principals=("User:a",)), "add", "imply"),
    (AclSpec(topics=("t",), idempotent=True, allow_principals=("User:a",)), "add", "--idempotent goes with"),
    (AclSpec(topics=("t",), consumer=True, allow_principals=("User:a",)), "add", "--group"),
    (AclSpec(topics=("t",), groups=("g",), cluster=True, consumer=True, allow_principals=("User:a",)), "add",
     "no --cluster"),
    (AclSpec(topics=("t",), allow_hosts=("h",)), "remove", "--allow-host goes with --allow-principal"),
    (AclSpec(topics=("t",), principals=("User:a",)), "remove", "--principal goes with list"),
    (AclSpec(topics=("t",), allow_principals=("User:a",)), "list", "list takes no"),
    (AclSpec(cluster=True, pattern_type=PatternType.PREFIXED, allow_principals=("User:a",)), "add",
     "with --resource-pattern-type literal"),
])
def test_checks(spec: AclSpec, action: str, words: str) -> None:
    build = {"add": bindings_to_add, "remove": filters_to_remove, "list": list_filters}[action]
    with pytest.raises(AclUsageError, match=words.replace("(", r"\(")):
        build(spec)  # type: ignore[operator]


def test_remove_and_list_filters() -> None:
    every = filters_to_remove(AclSpec(topics=("t",), cluster=True))
    assert every == [AclBindingFilter(ResourcePatternFilter(TOPIC, "t", PatternType.LITERAL), ANY_ENTRY_FILTER),
                     AclBindingFilter(CLUSTER_FILTER, ANY_ENTRY_FILTER)]
    one = filters_to_remove(AclSpec(topics=("fin-",), pattern_type=PatternType.PREFIXED, deny_principals=("User:b",),
                                    operations=(Op.WRITE,)))
    assert [(f.pattern.pattern_type, f.entry.principal, f.entry.host, f.entry.operation, f.entry.permission_type)
            for f in one] == [(PatternType.PREFIXED, "User:b", "*", Op.WRITE, Perm.DENY)]
    assert list_filters(AclSpec()) == [ANY_FILTER]
    assert list_filters(AclSpec(topics=("x",), pattern_type=PatternType.MATCH)) == [
        AclBindingFilter(ResourcePatternFilter(TOPIC, "x", PatternType.MATCH), ANY_ENTRY_FILTER)]


def test_kafkas_output_format() -> None:
    bindings = [AclBinding(ResourcePattern(TOPIC, "t", PatternType.LITERAL),
                           AccessControlEntry("User:a", "*", Op.READ, Perm.ALLOW)),
                AclBinding(ResourcePattern(TOPIC, "t", PatternType.LITERAL),
                           AccessControlEntry("User:b", "h", Op.WRITE, Perm.DENY))]
    assert format_acls(bindings) == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:\n"
        " \t(principal=User:a, host=*, operation=READ, permissionType=ALLOW)\n"
        " \t(principal=User:b, host=h, operation=WRITE, permissionType=DENY)")
    assert format_by_principal(bindings, ["User:b", "User:z"]) == (
        "ACLs for principal `User:b`\n"
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:\n"
        " \t(principal=User:b, host=h, operation=WRITE, permissionType=DENY)\n\n"
        "ACLs for principal `User:z`")
