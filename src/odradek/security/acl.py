"""Kafka's ACL model (org.apache.kafka.common.acl and org.apache.kafka.common.resource), the checks
CreateAcls, DescribeAcls and DeleteAcls make before they reach the authorizer, and the ZooKeeper
formats AclAuthorizer keeps ACLs in (kafka.zk.ZkAclStore, ZkAclChangeStore, AclEntry).

The enums carry Kafka's wire codes (the int8 fields of the ACL requests) and its names: the
ZooKeeper formats spell operations, permission types and resource types in Pascal case ("Read",
"DescribeConfigs", "TransactionalId", SecurityUtils' names), the change notifications and the
ExtendedAclChangeEvent in the enum names ("TOPIC", "PREFIXED"). A Kafka broker and odradek
sharing one ZooKeeper therefore read each other's ACLs.

The dataclasses accept every enum value, UNKNOWN, ANY and MATCH included, as the wire does:
whether a binding may be created or a filter used is the validation functions' answer, with the
error code Kafka gives, rather than an exception from a constructor.

Prefixed patterns are KIP-290's: a PREFIXED pattern "fin-" matches every resource whose name
starts with "fin-"; a LITERAL pattern matches its name, and the LITERAL name "*" every name.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Self

from odradek.protocol.errors import ErrorCode

#: the one name a CLUSTER resource has (Kafka's Resource.CLUSTER_NAME)
CLUSTER_NAME = "kafka-cluster"
#: a LITERAL pattern with this name matches every resource of its type (ResourcePattern.WILDCARD_RESOURCE)
WILDCARD_RESOURCE = "*"
#: an ACL for this principal applies to every user (AclEntry.WildcardPrincipalString)
WILDCARD_PRINCIPAL = "User:*"
#: an ACL with this host applies to every client address (AclEntry.WildcardHost)
WILDCARD_HOST = "*"


def _pascal_case(enum_name: str) -> str:
    """SecurityUtils.toPascalCase: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in enum_name.split("_"))


class _KafkaEnum(IntEnum):
    """An enum of Kafka's with wire codes, Pascal-case names and Kafka's lenient lookups."""

    @classmethod
    def from_code(cls, code: int) -> Self:
        """Kafka's fromCode: a code this broker does not know is UNKNOWN, not an error, so a newer
        client's value is refused by validation with Kafka's answer."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)

    @classmethod
    def from_pascal_name(cls, name: str) -> Self:
        """SecurityUtils' lookup of the names ZooKeeper holds: the Pascal-case name ("DescribeConfigs")
        or its upper case ("DESCRIBECONFIGS"); anything else is UNKNOWN (a newer Kafka's value)."""
        for member in cls:
            pascal = _pascal_case(member.name)
            if name == pascal or name.upper() == pascal.upper():
                return member
        return cls(0)

    @classmethod
    def from_enum_name(cls, name: str) -> Self:
        """Java's valueOf after toUpperCase (ResourceType.fromString, AclOperation.fromString); UNKNOWN
        when there is no such member."""
        member = cls.__members__.get(name.upper())
        return member if member is not None else cls(0)

    @property
    def pascal_name(self) -> str:
        return _pascal_case(self.name)


class ResourceType(_KafkaEnum):
    """org.apache.kafka.common.resource.ResourceType."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    """org.apache.kafka.common.resource.PatternType. ANY and MATCH exist only in filters; LITERAL and
    PREFIXED (KIP-290) are the patterns an ACL is stored under."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        """A pattern type an ACL can have, not a filter's (PatternType.isSpecific)."""
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_KafkaEnum):
    """org.apache.kafka.common.acl.AclOperation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    """org.apache.kafka.common.acl.AclPermissionType."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: the operations an ACL on each resource type can name (AclEntry.supportedOperations), besides ALL;
#: also what Metadata and DescribeGroups report as authorized operations
_SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}

#: the error a request gets when it is denied an operation on a resource of each type (AclEntry.authorizationError)
_AUTHORIZATION_ERRORS: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """AclEntry.supportedOperations. Kafka's broker does not refuse an ACL naming another operation
    (only kafka-acls.sh does, before sending); such an ACL is stored and never matches a request."""
    ops = _SUPPORTED_OPERATIONS.get(resource_type)
    if ops is None:
        raise ValueError(f"not a concrete resource type: {resource_type.name}")
    return ops


def operation_supported(resource_type: ResourceType, operation: AclOperation) -> bool:
    """What kafka-acls.sh (AclCommand.validateOperation) accepts: the type's operations and ALL."""
    return operation is AclOperation.ALL or operation in supported_operations(resource_type)


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    """AclEntry.authorizationError: the code for a denied operation on a resource of this type."""
    error = _AUTHORIZATION_ERRORS.get(resource_type)
    if error is None:
        raise ValueError(f"no authorization error for resource type {resource_type.name}")
    return error


def parse_principal(principal: str) -> tuple[str, str]:
    """SecurityUtils.parseKafkaPrincipal: "User:alice" -> ("User", "alice"), split at the first colon
    (a name may hold colons, "User:CN=a:b"). ValueError without one."""
    kind, sep, name = principal.partition(":")
    if not principal or not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {principal}")
    return kind, name


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource pattern an ACL is bound to: a resource type, a name and LITERAL or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def to_filter(self) -> ResourcePatternFilter:
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who ("User:alice", or "User:*" for everyone), from where ("*" or one address), may or may not
    (ALLOW, DENY) do what."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN

    def to_filter(self) -> AccessControlEntryFilter:
        return AccessControlEntryFilter(self.principal, self.host, self.operation, self.permission_type)


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry bound to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def to_filter(self) -> AclBindingFilter:
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Which resource patterns a DescribeAcls or DeleteAcls filter selects (ResourcePatternFilter).

    A None name matches any name. Pattern type ANY selects patterns of any type with exactly this
    name; MATCH selects the patterns that would apply to a resource of this name: the LITERAL one,
    the LITERAL wildcard "*" and every PREFIXED pattern that is a prefix of it.
    """

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type is ResourceType.UNKNOWN or self.pattern_type is PatternType.UNKNOWN

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH against a stored pattern
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"unsupported pattern type: {pattern.pattern_type.name}")

    def find_indefinite_field(self) -> str | None:
        """Why this filter may select more than one pattern, or None when it selects at most one."""
        if self.resource_type is ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type is ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type is PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type is PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Which entries a filter selects: None principal or host and ANY operation or permission type
    match anything, every other value only itself (no wildcard expansion: the filter principal
    "User:*" selects the ACLs written for "User:*", not alice's)."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation is AclOperation.UNKNOWN or self.permission_type is AclPermissionType.UNKNOWN

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not entry.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or self.permission_type is entry.permission_type

    def find_indefinite_field(self) -> str | None:
        if self.principal is None:
            return "Principal is NULL"
        if self.host is None:
            return "Host is NULL"
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return f"Operation is {self.operation.name}"
        if self.permission_type in (AclPermissionType.ANY, AclPermissionType.UNKNOWN):
            return f"Permission type is {self.permission_type.name}"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls filter or one of DeleteAcls' filters."""

    pattern: ResourcePatternFilter
    entry: AccessControlEntryFilter

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def find_indefinite_field(self) -> str | None:
        return self.pattern.find_indefinite_field() or self.entry.find_indefinite_field()


ANY_PATTERN_FILTER = ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)
ANY_ENTRY_FILTER = AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY)
#: selects every ACL (AclBindingFilter.ANY)
ANY_FILTER = AclBindingFilter(ANY_PATTERN_FILTER, ANY_ENTRY_FILTER)


# --- what the ACL requests refuse -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AclError:
    """An error code and message for an ACL creation, or for a whole ACL request."""

    code: ErrorCode
    message: str | None


def create_request_error(bindings: list[AclBinding], api_version: int) -> AclError | None:
    """Why Kafka refuses a whole CreateAcls request (CreateAclsRequest.validate), or None.

    Kafka raises these while parsing, so its broker closes the connection (the InvalidRequestException
    of RequestContext.parseRequest) rather than answering; the code says which exception it was.
    """
    if api_version == 0 and any(b.pattern.pattern_type is not PatternType.LITERAL for b in bindings):
        return AclError(ErrorCode.UNSUPPORTED_VERSION, "Version 0 only supports literal resource pattern types")
    if any(b.pattern.pattern_type is PatternType.UNKNOWN or b.pattern.resource_type is ResourceType.UNKNOWN
           or b.entry.permission_type is AclPermissionType.UNKNOWN or b.entry.operation is AclOperation.UNKNOWN
           for b in bindings):
        return AclError(ErrorCode.INVALID_REQUEST, "CreatableAcls contain unknown elements")
    return None


def _filter_error(binding: AclBinding) -> AclError | None:
    """Filter values in a binding to create. Kafka 3.x in ZooKeeper mode fails the whole request with
    UNKNOWN_SERVER_ERROR here (its ResourcePattern and AccessControlEntry constructors throw inside
    the handler); this answers each such binding as its KRaft controller does
    (AclControlManager.validateNewAcl), which tells the client what was wrong."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        return AclError(ErrorCode.INVALID_REQUEST, f"Invalid resourceType {pattern.resource_type.name}")
    if not pattern.pattern_type.is_specific:
        return AclError(ErrorCode.INVALID_REQUEST, f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        return AclError(ErrorCode.INVALID_REQUEST, f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return AclError(ErrorCode.INVALID_REQUEST, f"Invalid permissionType {entry.permission_type.name}")
    return None


def creation_error(binding: AclBinding) -> AclError | None:
    """Why CreateAcls refuses this one binding, or None: Kafka's AclApis.handleCreateAcls checks, then
    AclAuthorizer.createAcls' (validateAclBinding, and the principal AclEntry parses).

    Kafka gives a malformed principal UNKNOWN_SERVER_ERROR without a message (the parse error reaches
    ApiError wrapped in a bare ApiException) and fails every binding of the same resource with it;
    this gives INVALID_REQUEST with the parse message, for that binding only. The operation is not
    checked against the resource type: Kafka's broker accepts READ on CLUSTER (operation_supported
    is kafka-acls.sh's client-side check).
    """
    error = _filter_error(binding)
    if error is not None:
        return error
    name = binding.pattern.name
    if binding.pattern.resource_type is ResourceType.CLUSTER and name != CLUSTER_NAME:
        return AclError(ErrorCode.INVALID_REQUEST, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not name:
        return AclError(ErrorCode.INVALID_REQUEST, "Invalid empty resource name")
    if "/" in name:
        # a ZooKeeper path separator: the znode /kafka-acl/<Type>/<name> would nest
        return AclError(ErrorCode.INVALID_REQUEST,
                        f"Failed to create ACL: ACL binding contains invalid resource name: {name}")
    try:
        parse_principal(binding.entry.principal)
    except ValueError as exc:
        return AclError(ErrorCode.INVALID_REQUEST, f"Failed to create ACL: {exc}")
    return None


def filter_request_error(filter_: AclBindingFilter, api_version: int) -> AclError | None:
    """Why Kafka refuses a DescribeAcls request or a DeleteAcls request for this filter, or None
    (DescribeAclsRequest / DeleteAclsRequest.normalizeAndValidate). Like create_request_error's,
    these are parse failures on which Kafka closes the connection."""
    pattern_type = filter_.pattern.pattern_type
    if api_version == 0 and pattern_type not in (PatternType.LITERAL, PatternType.ANY):
        return AclError(ErrorCode.UNSUPPORTED_VERSION, "Version 0 only supports literal resource pattern types")
    if (pattern_type is PatternType.UNKNOWN or filter_.pattern.resource_type is ResourceType.UNKNOWN
            or filter_.entry.operation is AclOperation.UNKNOWN
            or filter_.entry.permission_type is AclPermissionType.UNKNOWN):
        return AclError(ErrorCode.INVALID_REQUEST, "Filters contain UNKNOWN elements")
    return None


def normalized_filter(filter_: AclBindingFilter, api_version: int) -> AclBindingFilter:
    """A v0 filter's ANY pattern type becomes LITERAL: brokers before KIP-290 had only literal
    patterns (the wildcard "*" among them), so a v0 client asking for ANY means LITERAL."""
    if api_version == 0 and filter_.pattern.pattern_type is PatternType.ANY:
        pattern = ResourcePatternFilter(filter_.pattern.resource_type, filter_.pattern.name, PatternType.LITERAL)
        return AclBindingFilter(pattern, filter_.entry)
    return filter_


# --- ZooKeeper --------------------------------------------------------------------------------------

LITERAL_ACL_ROOT = "/kafka-acl"
EXTENDED_ACL_ROOT = "/kafka-acl-extended"
LITERAL_ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
#: sequential znodes under a change root are named acl_changes_0000000000, acl_changes_0000000001, ...
ACL_CHANGE_PREFIX = "acl_changes_"
_ACL_JSON_VERSION = 1
_ACL_CHANGE_EVENT_VERSION = 1


def acl_root(pattern_type: PatternType) -> str:
    """Where ACLs of one pattern type live (ZkAclStore.aclPath): LITERAL ones under /kafka-acl, where
    brokers before KIP-290 look, every other type under /kafka-acl-extended/<type in lower case>."""
    if pattern_type is PatternType.LITERAL:
        return LITERAL_ACL_ROOT
    if pattern_type is PatternType.PREFIXED:
        return f"{EXTENDED_ACL_ROOT}/{pattern_type.name.lower()}"
    raise ValueError(f"ACLs are not stored for pattern type {pattern_type.name}")


def acl_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    """The znode whose children are the resource names with ACLs of this type (ZkAclStore.path)."""
    return f"{acl_root(pattern_type)}/{resource_type.pascal_name}"


def acl_path(pattern: ResourcePattern) -> str:
    """The znode holding one resource pattern's ACLs: /kafka-acl/Topic/orders,
    /kafka-acl-extended/prefixed/Group/fin- (ResourceZNode.path)."""
    return f"{acl_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def acl_change_root(pattern_type: PatternType) -> str:
    """Where a change to ACLs of this pattern type is announced (ZkAclChangeStore.aclChangePath)."""
    if pattern_type is PatternType.LITERAL:
        return LITERAL_ACL_CHANGES
    if pattern_type is PatternType.PREFIXED:
        return EXTENDED_ACL_CHANGES
    raise ValueError(f"ACLs are not stored for pattern type {pattern_type.name}")


def acl_change_path_prefix(pattern_type: PatternType) -> str:
    """The path a change notification is created at, as a persistent sequential znode
    (ZkAclChangeStore.createPath): ZooKeeper appends ten digits."""
    return f"{acl_change_root(pattern_type)}/{ACL_CHANGE_PREFIX}"


def _entry_json(entry: AccessControlEntry) -> dict[str, Any]:
    # AclEntry.toMap's keys, in its order
    return {"principal": entry.principal, "permissionType": entry.permission_type.pascal_name,
            "operation": entry.operation.pascal_name, "host": entry.host}


def _entry_order(entry: AccessControlEntry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission_type)


def _dumps(value: Any) -> bytes:
    """Jackson's output as Kafka's Json.encodeAsBytes writes it: compact, UTF-8, non-ASCII unescaped."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def encode_acls(entries: set[AccessControlEntry] | frozenset[AccessControlEntry]) -> bytes:
    """A resource's ACL znode value (ResourceZNode.encode):
    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}.
    Kafka writes a Scala set, in no particular order; this sorts, so equal sets give equal bytes."""
    acls = [_entry_json(entry) for entry in sorted(entries, key=_entry_order)]
    return _dumps({"version": _ACL_JSON_VERSION, "acls": acls})


def _loads_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"malformed {what}: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"malformed {what}: expected a JSON object, got {type(value).__name__}")
    return value


def _string_field(item: dict[str, Any], key: str, what: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ValueError(f"malformed {what}: {key!r} must be a string, got {value!r}")
    return value


def _decode_entry(item: Any) -> AccessControlEntry:
    what = "ACL entry"
    if not isinstance(item, dict):
        raise ValueError(f"malformed {what}: expected a JSON object, got {item!r}")
    principal = _string_field(item, "principal", what)
    try:
        parse_principal(principal)
    except ValueError as exc:
        raise ValueError(f"malformed {what}: {exc}") from None
    return AccessControlEntry(principal, _string_field(item, "host", what),
                              AclOperation.from_pascal_name(_string_field(item, "operation", what)),
                              AclPermissionType.from_pascal_name(_string_field(item, "permissionType", what)))


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """A resource's ACLs from its znode value (AclEntry.fromBytes). No data is no ACLs. An operation
    or permission type this broker does not know reads as UNKNOWN, as in Kafka: such an entry never
    matches a request. Malformed JSON, a version other than 1 or a principal without a type raise
    ValueError (Kafka treats unparsable JSON as no ACLs, which would silently drop DENY entries)."""
    if not data:
        return frozenset()
    value = _loads_object(data, "ACL znode")
    if value.get("version") != _ACL_JSON_VERSION:
        raise ValueError(f"unsupported ACL znode version {value.get('version')!r} (expected {_ACL_JSON_VERSION})")
    acls = value.get("acls")
    if not isinstance(acls, list):
        raise ValueError(f"malformed ACL znode: 'acls' must be a list, got {acls!r}")
    return frozenset(_decode_entry(item) for item in acls)


def encode_acl_change(pattern: ResourcePattern) -> bytes:
    """A change notification's value: for a LITERAL pattern the string "<TYPE>:<name>", e.g.
    "TOPIC:orders" (LiteralAclChangeStore, the format brokers before KIP-290 read); for any other the
    JSON ExtendedAclChangeEvent {"version":1,"resourceType":"TOPIC","name":"fin-","patternType":"PREFIXED"}."""
    if pattern.pattern_type is PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    if pattern.pattern_type is PatternType.PREFIXED:
        return _dumps({"version": _ACL_CHANGE_EVENT_VERSION, "resourceType": pattern.resource_type.name,
                       "name": pattern.name, "patternType": pattern.pattern_type.name})
    raise ValueError(f"ACLs are not stored for pattern type {pattern.pattern_type.name}")


def _known_resource_type(name: str) -> ResourceType:
    """ResourceType.fromString, also taking the Pascal-case names ZooKeeper paths use; ValueError for a
    type this broker does not know (Kafka would go on with UNKNOWN and read a znode that is not there)."""
    resource_type: ResourceType = ResourceType.from_enum_name(name)
    if resource_type is ResourceType.UNKNOWN:
        resource_type = ResourceType.from_pascal_name(name)
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise ValueError(f"unknown resource type {name!r} in ACL change notification")
    return resource_type


def decode_acl_change(change_root: str, data: bytes) -> ResourcePattern:
    """The resource pattern whose ACLs changed, from a notification under ``change_root``
    (LITERAL_ACL_CHANGES or EXTENDED_ACL_CHANGES). ValueError when malformed."""
    if change_root == LITERAL_ACL_CHANGES:
        text = data.decode(errors="replace")
        resource_type, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected a string in format ResourceType:ResourceName but got {text!r}")
        return ResourcePattern(_known_resource_type(resource_type), name, PatternType.LITERAL)
    if change_root == EXTENDED_ACL_CHANGES:
        what = "ACL change event"
        event = _loads_object(data, what)
        version = event.get("version")
        if not isinstance(version, int) or version > _ACL_CHANGE_EVENT_VERSION:
            raise ValueError(f"ACL change event received for unsupported version: {version!r}")
        pattern_type: PatternType = PatternType.__members__.get(_string_field(event, "patternType", what),
                                                                PatternType.UNKNOWN)
        if not pattern_type.is_specific:
            raise ValueError(f"malformed {what}: pattern type {event['patternType']!r}")
        return ResourcePattern(_known_resource_type(_string_field(event, "resourceType", what)),
                               _string_field(event, "name", what), pattern_type)
    raise ValueError(f"not an ACL change root: {change_root}")
