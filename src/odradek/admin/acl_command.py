"""Kafka's AclCommand (kafka-acls.sh) behind `odradek acls add|list|remove`.

The options are kafka-acls.sh's and mean what they mean there (Kafka 3.x, --bootstrap-server
mode): the resources (--topic, --group, --transactional-id, repeatable, and --cluster) with one
--resource-pattern-type (literal, the default, prefixed; match and any only to list and remove),
the entries (--allow-principal / --deny-principal, each with --allow-host / --deny-host, "*"
when none is given, and --operation, repeatable, All by default), and the role conveniences:

- --producer: WRITE, DESCRIBE and CREATE on each --topic, WRITE and DESCRIBE on each
  --transactional-id, and with --idempotent IDEMPOTENT_WRITE on the cluster;
- --consumer: READ and DESCRIBE on each --topic, READ on each --group.

`remove` without a principal removes every ACL of the resources named (after a confirmation,
or --force); with principals, only the entries they spell. `list` lists the ACLs of the resources
named (every ACL without one), those of each --principal only when given.

Only the Kafka protocol (DescribeAcls, CreateAcls, DeleteAcls as raw requests), so it works
against Apache Kafka 3.x as well. What the broker refuses comes back as one line.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.admin.admin_client import request_first
from odradek.admin.errors import AdminError
from odradek.protocol.errors import ErrorCode, error_name
from odradek.security.acl import (
    ANY_ENTRY_FILTER,
    ANY_FILTER,
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    operation_supported,
    parse_principal,
    supported_operations,
)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
#: v1 of each: KIP-290's pattern types, and every Kafka since 2.0 speaks it
REQUEST_VERSION = 1
CLIENT_ID = "odradek-acls"
#: the operations an ACL may name, as kafka-acls.sh spells them
OPERATION_NAMES = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
                   "AlterConfigs", "IdempotentWrite", "All")
PATTERN_TYPE_NAMES = ("literal", "prefixed", "match", "any")
CLUSTER_FILTER = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)


class AclUsageError(ValueError):
    """Options that do not make a command (kafka-acls.sh's printUsageAndDie)."""


def parse_operation(name: str) -> AclOperation:
    """kafka-acls.sh's operation names (SecurityUtils.operationType: "DescribeConfigs" or
    "DESCRIBECONFIGS"), in any case, also with underscores (DESCRIBE_CONFIGS)."""
    wanted = name.strip().replace("_", "").replace("-", "").lower()
    for spelled in OPERATION_NAMES:
        if spelled.lower() == wanted:
            return AclOperation.from_pascal_name(spelled)
    raise ValueError(f"unknown operation {name!r}: one of {', '.join(OPERATION_NAMES)}")


def parse_pattern_type(name: str) -> PatternType:
    """--resource-pattern-type: literal, prefixed, match or any, in any case."""
    if name.strip().lower() not in PATTERN_TYPE_NAMES:
        raise ValueError(f"unknown resource pattern type {name!r}: one of {', '.join(PATTERN_TYPE_NAMES)}")
    return PatternType.from_enum_name(name.strip())


def check_principal(principal: str) -> str:
    """A principal as ACLs name it, "User:alice" (KafkaPrincipal.fromString's check)."""
    principal = principal.strip()
    try:
        kind, name = parse_principal(principal)
    except ValueError:
        kind = name = ""
    if not kind or not name:
        raise ValueError(f"expected a principal as Type:name (User:alice, User:*), got {principal!r}")
    return principal


@dataclass(frozen=True, slots=True)
class AclSpec:
    """What the command line names: resources, principals, hosts, operations, roles."""

    topics: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    transactional_ids: tuple[str, ...] = ()
    cluster: bool = False
    pattern_type: PatternType = PatternType.LITERAL
    allow_principals: tuple[str, ...] = ()
    deny_principals: tuple[str, ...] = ()
    allow_hosts: tuple[str, ...] = ()
    deny_hosts: tuple[str, ...] = ()
    operations: tuple[AclOperation, ...] = ()  # none given: All
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False
    principals: tuple[str, ...] = ()  # list's --principal


def check_spec(spec: AclSpec, action: str) -> None:
    """AclCommandOptions.checkArgs for ``action`` (add, list or remove): AclUsageError."""
    if action == "list" and (spec.producer or spec.consumer or spec.allow_principals or spec.deny_principals
                             or spec.allow_hosts or spec.deny_hosts):
        raise AclUsageError("list takes no --producer, --consumer, --allow-principal, --deny-principal, "
                            "--allow-host or --deny-host (--principal selects whose ACLs to list)")
    if spec.principals and action != "list":
        raise AclUsageError("--principal goes with list (add and remove take --allow-principal and --deny-principal)")
    if (spec.producer or spec.consumer) and (spec.operations or spec.deny_principals or spec.deny_hosts):
        raise AclUsageError("--producer and --consumer imply their operations: give no --operation, "
                            "--deny-principal or --deny-host with them")
    if spec.producer and not spec.topics:
        raise AclUsageError("with --producer you must specify a --topic")
    if spec.idempotent and not spec.producer:
        raise AclUsageError("--idempotent goes with --producer")
    if spec.consumer and (not spec.topics or not spec.groups
                          or (not spec.producer and (spec.cluster or spec.transactional_ids))):
        raise AclUsageError("with --consumer you must specify a --topic and a --group and no --cluster or "
                            "--transactional-id option")
    if action == "add" and not spec.pattern_type.is_specific:
        raise AclUsageError(f"a --resource-pattern-type of {spec.pattern_type.name.lower()} is not valid when "
                            f"adding ACLs: literal or prefixed")
    if spec.allow_hosts and not spec.allow_principals:
        raise AclUsageError("--allow-host goes with --allow-principal")
    if spec.deny_hosts and not spec.deny_principals:
        raise AclUsageError("--deny-host goes with --deny-principal")


def resource_filters(spec: AclSpec, required: bool = True) -> list[ResourcePatternFilter]:
    """The resources named, each with the pattern type (AclCommand.getResourceFilter): the
    cluster only for a literal pattern type (its one name is literal), also with --idempotent."""
    filters = [ResourcePatternFilter(ResourceType.TOPIC, t.strip(), spec.pattern_type) for t in spec.topics]
    if spec.pattern_type is PatternType.LITERAL and (spec.cluster or spec.idempotent):
        filters.append(CLUSTER_FILTER)
    filters += [ResourcePatternFilter(ResourceType.GROUP, g.strip(), spec.pattern_type) for g in spec.groups]
    filters += [ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, spec.pattern_type)
                for t in spec.transactional_ids]
    filters = list(dict.fromkeys(filters))
    if not filters and required:
        raise AclUsageError("you must provide at least one resource: --topic, --group, --transactional-id or "
                            "--cluster" + (" (with --resource-pattern-type literal)" if spec.cluster else ""))
    return filters


def _entries(spec: AclSpec, operations: Iterable[AclOperation]) -> frozenset[AccessControlEntry]:
    """AclCommand.getAcl: every allowed principal with every allowed host and operation, every
    denied one likewise; a principal's hosts are "*" unless given."""
    allow_hosts = [h.strip() for h in spec.allow_hosts] or [WILDCARD_HOST]
    deny_hosts = [h.strip() for h in spec.deny_hosts] or [WILDCARD_HOST]
    ops = list(dict.fromkeys(operations))
    allowed = {AccessControlEntry(p, h, o, AclPermissionType.ALLOW)
               for p in spec.allow_principals for h in allow_hosts for o in ops}
    denied = {AccessControlEntry(p, h, o, AclPermissionType.DENY)
              for p in spec.deny_principals for h in deny_hosts for o in ops}
    return frozenset(allowed | denied)


def resource_acls(spec: AclSpec) -> dict[ResourcePatternFilter, frozenset[AccessControlEntry]]:
    """AclCommand.getResourceFilterToAcls: the entries for each resource, by --operation or by
    the --producer and --consumer roles (both may be given), each checked against what its
    resource type supports (validateOperation)."""
    out: dict[ResourcePatternFilter, frozenset[AccessControlEntry]] = {}
    filters = resource_filters(spec)
    if not spec.producer and not spec.consumer:
        entries = _entries(spec, spec.operations or (AclOperation.ALL,))
        out = dict.fromkeys(filters, entries)
    if spec.producer:
        for f in filters:
            if f.resource_type is ResourceType.TOPIC:
                out[f] = _entries(spec, (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE))
            elif f.resource_type is ResourceType.TRANSACTIONAL_ID:
                out[f] = _entries(spec, (AclOperation.WRITE, AclOperation.DESCRIBE))
        if spec.idempotent:
            out[CLUSTER_FILTER] = _entries(spec, (AclOperation.IDEMPOTENT_WRITE,))
    if spec.consumer:
        for f in filters:
            if f.resource_type is ResourceType.TOPIC:
                out[f] = out.get(f, frozenset()) | _entries(spec, (AclOperation.READ, AclOperation.DESCRIBE))
            elif f.resource_type is ResourceType.GROUP:
                out[f] = out.get(f, frozenset()) | _entries(spec, (AclOperation.READ,))
    for f, entries in out.items():
        bad = sorted({e.operation for e in entries if not operation_supported(f.resource_type, e.operation)})
        if bad:
            valid = ", ".join(o.pascal_name for o in sorted(supported_operations(f.resource_type) | {AclOperation.ALL}))
            raise AclUsageError(f"resource type {f.resource_type.name} does not take operation "
                                f"{', '.join(o.pascal_name for o in bad)}: only {valid}")
    return out


def bindings_to_add(spec: AclSpec) -> list[AclBinding]:
    """The ACLs `add` creates; AclUsageError without a principal."""
    check_spec(spec, "add")
    acls = resource_acls(spec)
    if any(not entries for entries in acls.values()):
        raise AclUsageError("you must specify one of: --allow-principal, --deny-principal when adding ACLs")
    return [AclBinding(ResourcePattern(f.resource_type, f.name or "", f.pattern_type), entry)
            for f, entries in acls.items() for entry in sorted(entries, key=_entry_order)]


def filters_to_remove(spec: AclSpec) -> list[AclBindingFilter]:
    """The DeleteAcls filters `remove` sends: each resource with each entry spelled, or with
    every entry when no principal is given (AdminClientService.removeAcls)."""
    check_spec(spec, "remove")
    out: list[AclBindingFilter] = []
    for f, entries in resource_acls(spec).items():
        if entries:
            out += [AclBindingFilter(f, e.to_filter()) for e in sorted(entries, key=_entry_order)]
        else:
            out.append(AclBindingFilter(f, ANY_ENTRY_FILTER))
    return out


def list_filters(spec: AclSpec) -> list[AclBindingFilter]:
    """The DescribeAcls filters `list` sends: one per resource named, every ACL without one."""
    check_spec(spec, "list")
    filters = resource_filters(spec, required=False)
    return [AclBindingFilter(f, ANY_ENTRY_FILTER) for f in filters] or [ANY_FILTER]


# -- the requests ----------------------------------------------------------------------------------

def _filter_body(f: AclBindingFilter) -> dict[str, Any]:
    return {"resource_type_filter": int(f.pattern.resource_type), "resource_name_filter": f.pattern.name,
            "pattern_type_filter": int(f.pattern.pattern_type), "principal_filter": f.entry.principal,
            "host_filter": f.entry.host, "operation": int(f.entry.operation),
            "permission_type": int(f.entry.permission_type)}


def _binding(resource_type: int, name: str, pattern_type: int, acl: Any) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.from_code(resource_type), name, PatternType.from_code(pattern_type)),
                      AccessControlEntry(acl.principal, acl.host, AclOperation.from_code(acl.operation),
                                         AclPermissionType.from_code(acl.permission_type)))


def _failure(what: str, code: int, message: str | None) -> AdminError:
    if code == ErrorCode.SECURITY_DISABLED:
        return AdminError(f"cannot {what}: the brokers have no authorizer (SECURITY_DISABLED; set "
                          f"authorizer.class.name=kafka.security.authorizer.AclAuthorizer in their config)")
    if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        operation = "DESCRIBE" if what == "list ACLs" else "ALTER"
        return AdminError(f"cannot {what}: not authorized (CLUSTER_AUTHORIZATION_FAILED; {operation} on the "
                          f"cluster, or super.users, is needed)")
    return AdminError(f"cannot {what}: {error_name(code)}" + (f": {message}" if message else ""))


class AclAdmin:
    """The ACL requests of one command, each to the first bootstrap server that answers."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap, self.timeout = bootstrap, timeout

    def _send(self, api_key: int, body: dict[str, Any]) -> Any:
        return request_first(self.bootstrap.split(","), self.bootstrap, api_key, REQUEST_VERSION, body,
                             self.timeout, CLIENT_ID)

    def describe(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """The ACLs the filters select, each once, in the brokers' order."""
        found: dict[AclBinding, None] = {}
        for f in filters:
            response = self._send(DESCRIBE_ACLS, _filter_body(f))
            if int(response.error_code):
                raise _failure("list ACLs", int(response.error_code), response.error_message)
            for resource in response.resources:
                for acl in resource.acls:
                    found[_binding(resource.resource_type, resource.resource_name, resource.pattern_type, acl)] = None
        return list(found)

    def create(self, bindings: Sequence[AclBinding]) -> None:
        """Create the ACLs in one request; AdminError naming each one refused (the others are
        created)."""
        body = {"creations": [{"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                               "resource_pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                               "host": b.entry.host, "operation": int(b.entry.operation),
                               "permission_type": int(b.entry.permission_type)} for b in bindings]}
        response = self._send(CREATE_ACLS, body)
        codes = [(b, int(r.error_code), r.error_message) for b, r in zip(bindings, response.results)]
        failed = [(b, code, message) for b, code, message in codes if code]
        if not failed:
            return
        if all(code == failed[0][1] for _, code, _ in failed) and failed[0][1] in (
                ErrorCode.SECURITY_DISABLED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            raise _failure("add ACLs", failed[0][1], failed[0][2])
        details = "; ".join(f"{describe_binding(b)}: {error_name(code)}" + (f" ({message})" if message else "")
                            for b, code, message in failed)
        raise AdminError(f"{len(failed)} of {len(bindings)} ACLs were not created: {details}")

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete what the filters select in one request: the ACLs removed, each once."""
        response = self._send(DELETE_ACLS, {"filters": [_filter_body(f) for f in filters]})
        removed: dict[AclBinding, None] = {}
        errors = []
        for result in response.filter_results:
            if int(result.error_code):
                errors.append((int(result.error_code), result.error_message))
                continue
            for acl in result.matching_acls:
                if int(acl.error_code):
                    errors.append((int(acl.error_code), acl.error_message))
                else:
                    removed[_binding(acl.resource_type, acl.resource_name, acl.pattern_type, acl)] = None
        if errors:
            code, message = errors[0]
            error = _failure("remove ACLs", code, message)
            if removed:
                raise AdminError(f"{error} ({len(removed)} ACLs were removed)")
            raise error
        return list(removed)


# -- what the command prints ---------------------------------------------------------------------

def _entry_order(entry: AccessControlEntry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission_type)


def kafka_pattern(pattern: ResourcePattern) -> str:
    """ResourcePattern.toString, as kafka-acls.sh prints it."""
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def kafka_filter(pattern: ResourcePatternFilter) -> str:
    """ResourcePatternFilter.toString."""
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def kafka_entry(entry: AccessControlEntry) -> str:
    """AccessControlEntry.toString."""
    return (f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
            f"permissionType={entry.permission_type.name})")


def describe_binding(binding: AclBinding) -> str:
    return f"{kafka_pattern(binding.pattern)} {kafka_entry(binding.entry)}"


def by_resource(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, list[AccessControlEntry]]:
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        out.setdefault(b.pattern, []).append(b.entry)
    return out


def format_acls(bindings: Iterable[AclBinding], heading: str = "Current ACLs for resource") -> str:
    """kafka-acls.sh's listing: per resource a heading line and a tab-indented entry per ACL."""
    blocks = [f"{heading} `{kafka_pattern(pattern)}`:\n" + "\n".join(f" \t{kafka_entry(e)}" for e in entries)
              for pattern, entries in by_resource(bindings).items()]
    return "\n\n".join(blocks)


def format_by_principal(bindings: list[AclBinding], principals: Sequence[str]) -> str:
    """list --principal: each principal's ACLs under its own heading (AclCommand.listAcls)."""
    parts = []
    for principal in principals:
        mine = [b for b in bindings if b.entry.principal == principal]
        parts.append(f"ACLs for principal `{principal}`" + (f"\n{format_acls(mine)}" if mine else ""))
    return "\n\n".join(parts)


def binding_json(binding: AclBinding) -> dict[str, str]:
    return {"resource_type": binding.pattern.resource_type.name, "name": binding.pattern.name,
            "pattern_type": binding.pattern.pattern_type.name, "principal": binding.entry.principal,
            "host": binding.entry.host, "operation": binding.entry.operation.name,
            "permission_type": binding.entry.permission_type.name}
