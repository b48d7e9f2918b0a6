"""The decision of Kafka's ZooKeeper-mode authorizer (kafka.security.authorizer.AclAuthorizer,
Kafka 3.x): may this principal, from this host, do this operation on this resource?

Only the decision and the ACL cache it reads live here, without I/O: the broker's request
handlers ask `authorize` (AuthHelper.authorize), a ZooKeeper watcher feeds `apply` with each
resource's ACLs as they change (AclAuthorizer.processAclChangeNotification), and DescribeAcls,
DeleteAcls and CreateAcls read and change the cache through `describe`, `delete` and `create`
(their ZooKeeper writes belong to the caller). Keeping the rules free of I/O is what lets the
authorization matrix be tested exhaustively in milliseconds.

The rules, as AclAuthorizer.authorizeAction has them:

- a super user (super.users) may do anything, ACLs or not;
- the ACLs that apply to resource R of type T are T's LITERAL ACLs for R, T's LITERAL ACLs for
  the wildcard "*", and T's PREFIXED ACLs (KIP-290) for every prefix of R's name;
- with none at all, allow.everyone.if.no.acl.found decides (default: deny);
- otherwise a matching DENY wins over any ALLOW; an entry matches when its principal is the
  caller's or "User:*", its host the caller's address or "*", and its operation the one asked
  or ALL;
- an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, an ALLOW of ALTER_CONFIGS also
  allows DESCRIBE_CONFIGS (AclOperation's implications; a DENY implies nothing but itself, except
  DENY ALL).
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    creation_error,
    parse_principal,
)

SUPER_USERS_CONFIG = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG = "allow.everyone.if.no.acl.found"

_ALL = AclOperation.ALL
_DENY = AclPermissionType.DENY
_ALLOW = AclPermissionType.ALLOW

#: the ALLOW operations that grant each operation (beyond itself and ALL): AclOperation's implications
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


def parse_super_users(value: str) -> frozenset[str]:
    """super.users: principals separated by semicolons, "User:admin;User:broker". Each is checked to
    be "Type:name" (a typo here would otherwise silently make nobody a super user)."""
    principals = [item.strip() for item in value.split(";") if item.strip()]
    for principal in principals:
        parse_principal(principal)
    return frozenset(principals)


def _parse_bool(key: str, value: str) -> bool:
    """Scala's toBoolean, as AclAuthorizer.configure reads its flag: true or false in any case."""
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {value!r}")
    return text == "true"


def _check_concrete(operation: AclOperation, resource_type: ResourceType) -> None:
    """Filter values have no meaning in a question (SecurityUtils.authorizeByResourceTypeCheckArgs)."""
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"Must specify a concrete resource type, not {resource_type.name}")
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"Must specify a concrete operation, not {operation.name}")


def _entry_matches(entry: AccessControlEntry, principal: str, host: str,
                   operations: frozenset[AclOperation], permission: AclPermissionType) -> bool:
    return (entry.permission_type is permission and entry.operation in operations
            and (entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL)
            and (entry.host == host or entry.host == WILDCARD_HOST))


def _any_entry_matches(acl_sets: list[frozenset[AccessControlEntry]], principal: str, host: str,
                       operations: frozenset[AclOperation], permission: AclPermissionType) -> bool:
    """AclAuthorizer.matchingAclExists over the ACLs of every matching pattern."""
    return any(_entry_matches(entry, principal, host, operations, permission)
               for acls in acl_sets for entry in acls)


_IndexKey = tuple[AccessControlEntry, ResourceType, PatternType]


@dataclass(frozen=True, slots=True)
class _Question:
    """Who asks what for authorize_by_resource_type: the index keys that may match it."""

    principal: str
    host: str
    operation: AclOperation
    resource_type: ResourceType

    def keys(self, permission: AclPermissionType, pattern_type: PatternType) -> list[_IndexKey]:
        """AclAuthorizer.matchingResources' keys: the principal or User:*, the host or *, the
        operation or ALL."""
        return [(AccessControlEntry(p, h, o, permission), self.resource_type, pattern_type)
                for p in {self.principal, WILDCARD_PRINCIPAL}
                for h in {self.host, WILDCARD_HOST}
                for o in {self.operation, _ALL}]


class AclAuthorizer:
    """The ACL cache and the decisions over it.

    Prefixed ACLs are kept per resource type as a dict from prefix to entries, next to the sorted
    distinct lengths those prefixes have. A name's matching prefixes are then found with one dict
    lookup per distinct length no longer than the name, so at most len(name) lookups, however many
    prefixed ACLs there are: authorize runs for every topic of every Produce and Fetch, where a scan
    of all prefixed ACLs (or Kafka's TreeMap range from the name down to its first character, which
    visits every pattern sorting between them) would cost time in proportion to the ACL count.

    Threads: `apply` and the other writers hold a lock; `authorize` takes none. The containers a
    reader iterates (entry sets, prefix lengths, name sets) are immutable and replaced whole, and
    its dict lookups are atomic under the GIL, so a reader sees each resource's ACLs either before
    or after a change, as Kafka's readers of its volatile immutable maps do.
    """

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._lock = threading.Lock()
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {
            t: {} for t in ResourceType if t not in (ResourceType.ANY, ResourceType.UNKNOWN)}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._length_counts: dict[ResourceType, Counter[int]] = {}
        # AclAuthorizer.resourceCache, for authorize_by_resource_type: (entry, type, pattern type) -> names
        self._names_by_entry: dict[_IndexKey, frozenset[str]] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> AclAuthorizer:
        """AclAuthorizer.configure's two settings: super.users and allow.everyone.if.no.acl.found."""
        return cls(parse_super_users(config.get(SUPER_USERS_CONFIG, "")),
                   _parse_bool(ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG,
                               config.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG, "false")))

    # --- the cache ----------------------------------------------------------------------------------

    def apply(self, resource: ResourcePattern, acls: Iterable[AccessControlEntry]) -> None:
        """Replace ``resource``'s ACLs with ``acls`` (none: the resource has no ACLs any more), as
        AclAuthorizer.updateCache does for a change notification or a load from ZooKeeper."""
        if not resource.pattern_type.is_specific:
            raise ValueError(f"ACLs are bound to LITERAL or PREFIXED patterns, not {resource.pattern_type.name}")
        if resource.resource_type not in self._prefixed:
            raise ValueError(f"ACLs are bound to a concrete resource type, not {resource.resource_type.name}")
        with self._lock:
            self._apply(resource, frozenset(acls))

    def load(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Apply every resource's ACLs (AclAuthorizer.loadCache at startup)."""
        for resource, entries in acls.items():
            self.apply(resource, entries)

    def acls(self, resource: ResourcePattern) -> frozenset[AccessControlEntry]:
        """The ACLs bound to exactly this pattern."""
        return self._acls.get(resource, frozenset())

    def _apply(self, resource: ResourcePattern, new: frozenset[AccessControlEntry]) -> None:
        old = self._acls.get(resource, frozenset())
        if new == old:
            return
        self._index(resource, new - old, old - new)
        if resource.pattern_type is PatternType.PREFIXED:
            self._apply_prefixed(resource.resource_type, resource.name, new, existed=bool(old))
        if new:
            self._acls[resource] = new
        else:
            del self._acls[resource]

    def _apply_prefixed(self, resource_type: ResourceType, prefix: str, new: frozenset[AccessControlEntry],
                        existed: bool) -> None:
        """Keep the prefix dict and the distinct lengths of its prefixes in step. A reader between the
        two steps finds a length without its prefix, or a prefix whose length it does not yet look
        at: either way it sees this one pattern as before the change, never another one wrongly."""
        by_prefix = self._prefixed[resource_type]
        counts = self._length_counts.setdefault(resource_type, Counter())
        if new:
            by_prefix[prefix] = new
            if not existed:
                counts[len(prefix)] += 1
        else:
            del by_prefix[prefix]
            counts[len(prefix)] -= 1
            if counts[len(prefix)] == 0:
                del counts[len(prefix)]
        self._prefix_lengths[resource_type] = tuple(sorted(counts))

    def _index(self, resource: ResourcePattern, added: frozenset[AccessControlEntry],
               removed: frozenset[AccessControlEntry]) -> None:
        for entry in added:
            key = (entry, resource.resource_type, resource.pattern_type)
            self._names_by_entry[key] = self._names_by_entry.get(key, frozenset()) | {resource.name}
        for entry in removed:
            key = (entry, resource.resource_type, resource.pattern_type)
            names = self._names_by_entry.get(key, frozenset()) - {resource.name}
            if names:
                self._names_by_entry[key] = names
            else:
                self._names_by_entry.pop(key, None)

    # --- the decision -------------------------------------------------------------------------------

    def matching_acls(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """The ACL sets that apply to the resource (AclAuthorizer.matchingAcls): its LITERAL pattern,
        the LITERAL wildcard "*" and each PREFIXED pattern that is a prefix of the name."""
        found = []
        for literal in (name, WILDCARD_RESOURCE) if name != WILDCARD_RESOURCE else (name,):
            acls = self._acls.get(ResourcePattern(resource_type, literal, PatternType.LITERAL))
            if acls:
                found.append(acls)
        by_prefix = self._prefixed.get(resource_type, {})
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            acls = by_prefix.get(name[:length])
            if acls:
                found.append(acls)
        return found

    def is_super_user(self, principal: str) -> bool:
        return principal in self.super_users

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """May ``principal`` ("User:alice") connected from ``host`` (the client's address, as
        InetAddress.getHostAddress writes it) do ``operation`` on the resource ``name`` of
        ``resource_type``? (AclAuthorizer.authorizeAction for one literal resource.)"""
        _check_concrete(operation, resource_type)
        if self.is_super_user(principal):
            return True
        acl_sets = self.matching_acls(resource_type, name)
        if not acl_sets:
            return self.allow_everyone_if_no_acl_found
        if _any_entry_matches(acl_sets, principal, host, frozenset({operation, _ALL}), _DENY):
            return False
        allowing = _IMPLIED_BY.get(operation, frozenset()) | {operation, _ALL}
        return _any_entry_matches(acl_sets, principal, host, allowing, _ALLOW)

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """May ``principal`` do ``operation`` on at least one resource of ``resource_type``?
        (AclAuthorizer.authorizeByResourceType, KIP-679.)

        InitProducerId asks it for an idempotent producer without IDEMPOTENT_WRITE on the cluster:
        WRITE on any topic is enough since Kafka 3.0, where idempotence became the producer default.
        The answer is yes when an ALLOW for the operation (or ALL) exists on some pattern that no
        DENY covers: a DENY on the LITERAL wildcard "*" denies the whole type, a DENY on a literal
        name only that name, a PREFIXED DENY every pattern it is a prefix of. As in Kafka, implied
        operations play no part here, and allow.everyone.if.no.acl.found allows unless that wildcard
        DENY exists.
        """
        _check_concrete(operation, resource_type)
        if self.is_super_user(principal):
            return True
        question = _Question(principal, host, operation, resource_type)
        deny_literals = self._matching_names(question, _DENY, PatternType.LITERAL)
        if any(WILDCARD_RESOURCE in names for names in deny_literals):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = self._matching_names(question, _DENY, PatternType.PREFIXED)
        allow_literals = self._matching_names(question, _ALLOW, PatternType.LITERAL)
        allow_prefixes = self._matching_names(question, _ALLOW, PatternType.PREFIXED)
        if not deny_literals and not deny_prefixes:
            return bool(allow_literals or allow_prefixes)
        if any(not _dominant_prefixed_deny(prefix, deny_prefixes) for names in allow_prefixes for prefix in names):
            return True
        return any(literal == WILDCARD_RESOURCE
                   or (not any(literal in names for names in deny_literals)
                       and not _dominant_prefixed_deny(literal, deny_prefixes))
                   for names in allow_literals for literal in names)

    def _matching_names(self, question: _Question, permission: AclPermissionType,
                        pattern_type: PatternType) -> list[frozenset[str]]:
        found = (self._names_by_entry.get(key) for key in question.keys(permission, pattern_type))
        return [names for names in found if names]

    # --- DescribeAcls, DeleteAcls, CreateAcls ------------------------------------------------------

    def describe(self, filter_: AclBindingFilter) -> list[AclBinding]:
        """The ACLs a DescribeAcls filter selects (AclAuthorizer.acls), in a stable order."""
        with self._lock:
            items = list(self._acls.items())
        return [AclBinding(resource, entry) for resource, entries in sorted(items, key=_resource_order)
                for entry in sorted(entries, key=_entry_order) if filter_.matches(AclBinding(resource, entry))]

    def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove the ACLs DeleteAcls' filters select and say, per filter, which it removed
        (AclAuthorizer.deleteAcls). An ACL two filters select is reported under the first only."""
        removed: list[list[AclBinding]] = [[] for _ in filters]
        with self._lock:
            for resource, entries in sorted(self._acls.items(), key=_resource_order):
                matching = [i for i, f in enumerate(filters) if f.pattern.matches(resource)]
                if not matching:
                    continue
                kept = set(entries)
                for entry in sorted(entries, key=_entry_order):
                    first = next((i for i in matching if filters[i].entry.matches(entry)), None)
                    if first is not None:
                        removed[first].append(AclBinding(resource, entry))
                        kept.discard(entry)
                self._apply(resource, frozenset(kept))
        return removed

    def create(self, bindings: list[AclBinding]) -> list[AclError | None]:
        """Add the ACLs a CreateAcls request carries, each refused as Kafka does (creation_error) or
        added; an ACL that exists already is created again without complaint, as in Kafka. The
        request-wide checks (create_request_error) are the caller's, before this."""
        results = [creation_error(binding) for binding in bindings]
        with self._lock:
            for binding, error in zip(bindings, results):
                if error is None:
                    self._apply(binding.pattern, self._acls.get(binding.pattern, frozenset()) | {binding.entry})
        return results


def _dominant_prefixed_deny(name: str, deny_prefixes: list[frozenset[str]]) -> bool:
    """A PREFIXED DENY covers ``name`` (AclAuthorizer.hasDominantPrefixedDeny)."""
    return any(name[:length] in names for length in range(1, len(name) + 1) for names in deny_prefixes)


def _resource_order(item: tuple[ResourcePattern, frozenset[AccessControlEntry]]) -> tuple[int, int, str]:
    resource = item[0]
    return int(resource.resource_type), int(resource.pattern_type), resource.name


def _entry_order(entry: AccessControlEntry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission_type)
