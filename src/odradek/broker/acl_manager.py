"""The broker side of Kafka's ZooKeeper-mode AclAuthorizer: the ACLs in ZooKeeper, kept current
in this broker's AclAuthorizer (security/acl_authorizer.py), and the writes of CreateAcls and
DeleteAcls (broker/acl_apis.py).

At startup every ACL is read in one batched round (every resource znode of every type directory
under /kafka-acl and /kafka-acl-extended/prefixed) before the broker serves, as AclAuthorizer's
loadCache. Then both change roots are watched (/kafka-acl-changes for LITERAL patterns,
/kafka-acl-extended-changes for PREFIXED ones, Kafka's ZkAclChangeStores): a notification names
one resource pattern, and only the patterns named by notifications newer than the last one
processed are read again and applied (AclAuthorizer.processAclChangeNotification), however many
ACLs exist. The notifications already there at startup are not processed: they were listed
before the load, so the load read what they announce. Each round also deletes the notifications
older than 15 minutes (ZkNodeChangeNotificationListener's purge).

Writes read the resource znodes they change afresh, compute the new ACL sets from what ZooKeeper
holds (not from this broker's cache, which another broker's write may not have reached), and
write them conditionally with their change notifications (zk/zk_acl_store.py); this broker
applies what it wrote at once, so its next DescribeAcls or authorization sees it, the others
when the notification reaches them. One lock orders the writes and the notification rounds, as
Kafka's AclAuthorizer lock does: a round that read ZooKeeper before a write cannot apply its
older view after it.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.broker.config import BrokerConfig, check_authorizer_class
from odradek.common.errors import StartupRefusedError
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import (
    ACL_CHANGE_PREFIX,
    ANY_ENTRY_FILTER,
    EXTENDED_ACL_CHANGES,
    EXTENDED_ACL_ROOT,
    LITERAL_ACL_CHANGES,
    LITERAL_ACL_ROOT,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    acl_change_path_prefix,
    acl_path,
    acl_root,
    acl_type_path,
    creation_error,
    decode_acl_change,
    decode_acls,
    encode_acl_change,
    encode_acls,
)
from odradek.security.acl_authorizer import AclAuthorizer, parse_super_users
from odradek.zk.zk_acl_store import (
    CHANGE_EXPIRATION_MS,
    ZkAclStore,
    ZnodeWrite,
    obsolete_notifications,
    sequence_of,
)

log = logging.getLogger("odradek.broker.acl")

#: the resource types ACLs are stored for (AclEntry.ResourceTypes: every type but ANY and UNKNOWN)
RESOURCE_TYPES = tuple(t for t in ResourceType if t not in (ResourceType.ANY, ResourceType.UNKNOWN))
STORED_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
#: (pattern type, resource type) -> the directory of that type's resource znodes
TYPE_PATHS: dict[tuple[PatternType, ResourceType], str] = {
    (p, t): acl_type_path(p, t) for p in STORED_PATTERN_TYPES for t in RESOURCE_TYPES}
CHANGE_ROOTS = (LITERAL_ACL_CHANGES, EXTENDED_ACL_CHANGES)
#: what Kafka's createAclPaths creates at every start: the ACL roots, each type directory, the
#: change roots; a create of a resource znode or a notification never finds its parent missing
ACL_PATHS = (LITERAL_ACL_ROOT, EXTENDED_ACL_ROOT, acl_root(PatternType.PREFIXED), *TYPE_PATHS.values(),
             *CHANGE_ROOTS)
#: how long after a failed notification round (ZooKeeper unreachable) it is tried again
RETRY_S = 1.0


def authorizer_from_config(config: BrokerConfig) -> AclAuthorizer | None:
    """The AclAuthorizer authorizer.class.name asks for, configured by super.users and
    allow.everyone.if.no.acl.found; None for the default (no authorizer: every request is
    allowed). StartupRefusedError, one line, for another class or a malformed super.users."""
    try:
        if not check_authorizer_class(config.authorizer_class_name):
            return None
        return AclAuthorizer(parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found)
    except ValueError as exc:
        raise StartupRefusedError(str(exc)) from None


@dataclass(slots=True)
class _Update:
    """A write's outcome, pattern by pattern: the ACLs ZooKeeper holds once it succeeded, and the
    patterns whose znode could not be read (their bindings fail)."""

    acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = field(default_factory=dict)
    unreadable: dict[ResourcePattern, AclError] = field(default_factory=dict)


@dataclass(slots=True)
class _Round:
    """What one notification round read: each named pattern's ACLs, the last sequence number
    seen per change root, and the creation times of the notifications read (for the purge)."""

    acls: dict[ResourcePattern, frozenset[AccessControlEntry]]
    last: dict[str, int]
    ctimes: dict[str, dict[str, int]]


class AclManager:
    """ZooKeeper's ACLs in one broker's AclAuthorizer; started and stopped by the broker like its
    DynamicConfigManager."""

    def __init__(self, zk: Any, authorizer: AclAuthorizer, store: ZkAclStore | None = None) -> None:
        self.zk = zk  # odradek.zk.client.KafkaZkClient
        self.authorizer = authorizer
        self.store = store if store is not None else ZkAclStore(zk)
        self._lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = dict.fromkeys(CHANGE_ROOTS, -1)
        self._ctimes: dict[str, dict[str, int]] = {root: {} for root in CHANGE_ROOTS}
        self._pending: dict[str, list[str]] = {}  # change root -> its children as the watch last saw them
        self._running: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._watches: list[Any] = []
        self._stopped = False
        #: notifications older than this are purged (Kafka's 15 minutes)
        self.change_expiration_ms = CHANGE_EXPIRATION_MS
        #: when the last notification round applied its changes (time.monotonic()), for tests
        self.last_round_at: float | None = None

    # -- startup and shutdown ----------------------------------------------------------------

    async def startup(self) -> None:
        """Load every ACL before the broker serves, then follow both change roots."""
        self._loop = asyncio.get_running_loop()
        started = time.monotonic()
        acls, last, ctimes = await asyncio.to_thread(self.zk.until_connected, self._load)
        self.authorizer.load(acls)
        self._last.update(last)
        for root, found in ctimes.items():
            self._ctimes[root].update(found)
        log.info("loaded the ACLs of %d resource patterns from ZooKeeper in %.0f ms", len(acls),
                 (time.monotonic() - started) * 1000)
        # registered off the loop: a watch's first listing is a blocking read (its callback
        # only hands the children to the loop)
        self._watches = await asyncio.to_thread(self._watch)

    def _watch(self) -> list[Any]:
        loop = self._loop
        assert loop is not None
        return [self.zk.watch_children(root, lambda children, root=root: loop.call_soon_threadsafe(
                    self._changed, root, children)) for root in CHANGE_ROOTS]

    def shutdown(self) -> None:
        self._stopped = True
        for watch in self._watches:
            watch.cancel()
        if self._retry is not None:
            self._retry.cancel()
        if self._running is not None:
            self._running.cancel()

    def _load(self) -> tuple[dict[ResourcePattern, frozenset[AccessControlEntry]], dict[str, int],
                             dict[str, dict[str, int]]]:
        """On a thread: the ACL paths made sure of, the notifications listed (before the ACLs are
        read: what they announce is then in what is read), every ACL read."""
        self.store.create_paths(ACL_PATHS)
        children = {root: self.store.notifications(root, ACL_CHANGE_PREFIX) for root in CHANGE_ROOTS}
        ctimes = {root: self.store.notification_ctimes(root, found) for root, found in children.items()}
        last = {root: sequence_of(found[-1], ACL_CHANGE_PREFIX) for root, found in children.items() if found}
        stored = self.store.read_all(TYPE_PATHS.values())
        acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for (pattern_type, resource_type), type_path in TYPE_PATHS.items():
            for name, znode in stored.get(type_path, {}).items():
                try:
                    entries = decode_acls(znode.data)
                except ValueError as exc:
                    log.error("ignoring the ACLs of %s/%s: %s", type_path, name, exc)
                    continue
                if entries:
                    acls[ResourcePattern(resource_type, name, pattern_type)] = entries
        return acls, last, ctimes

    # -- change notifications ----------------------------------------------------------------

    def _changed(self, root: str, children: list[str]) -> None:
        """On the loop: a change root's children changed; one round at a time takes them up."""
        if self._stopped:
            return
        self._pending[root] = children
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._process())

    async def _process(self) -> None:
        while self._pending and not self._stopped:
            pending, self._pending = self._pending, {}
            async with self._lock:
                try:
                    found = await asyncio.to_thread(self._read_round, pending, dict(self._last))
                except Exception:  # noqa: BLE001 - ZooKeeper trouble: tried again in a moment
                    log.exception("reading ACL change notifications failed; trying again in %g s", RETRY_S)
                    self._again_later(pending)
                    return
                self._apply_round(found, pending)
            await self._purge()

    def _again_later(self, pending: dict[str, list[str]]) -> None:
        for root, children in pending.items():
            self._pending.setdefault(root, children)
        loop = asyncio.get_running_loop()

        def again() -> None:
            self._retry = None
            if self._pending and not self._stopped and (self._running is None or self._running.done()):
                self._running = loop.create_task(self._process())

        self._retry = loop.call_later(RETRY_S, again)

    def _read_round(self, pending: Mapping[str, list[str]], last: Mapping[str, int]) -> _Round:
        """On a thread: the patterns the new notifications name, and their ACLs as stored now."""
        patterns: set[ResourcePattern] = set()
        new_last: dict[str, int] = {}
        ctimes: dict[str, dict[str, int]] = {}
        for root, children in pending.items():
            new = [c for c in children if sequence_of(c, ACL_CHANGE_PREFIX) > last[root]]
            if not new:
                continue
            new_last[root] = max(sequence_of(c, ACL_CHANGE_PREFIX) for c in new)
            notifications = self.store.read_notifications(root, new)
            ctimes[root] = {child: n.ctime_ms for child, n in notifications.items()}
            for child, notification in notifications.items():
                try:
                    patterns.add(decode_acl_change(root, notification.data))
                except ValueError as exc:
                    log.warning("ignoring ACL change notification %s/%s: %s", root, child, exc)
        paths = {acl_path(p): p for p in patterns if _storable(p.name)}
        stored = self.store.read(paths)
        acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        for path, pattern in paths.items():
            znode = stored.get(path)
            try:
                acls[pattern] = decode_acls(znode.data) if znode is not None else frozenset()
            except ValueError as exc:
                log.error("ignoring changed ACLs of %s: %s", path, exc)
        return _Round(acls, new_last, ctimes)

    def _apply_round(self, found: _Round, pending: Mapping[str, list[str]]) -> None:
        for pattern, entries in found.acls.items():
            self.authorizer.apply(pattern, entries)
        if found.acls:
            log.info("applied changed ACLs of %d resource patterns: %s", len(found.acls),
                     ", ".join(f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}"
                               for p in sorted(found.acls, key=_pattern_order)[:5]))
        for root, seq in found.last.items():
            self._last[root] = max(self._last[root], seq)
        for root, children in pending.items():  # forget what another broker purged
            present = set(children)
            known = self._ctimes[root]
            for child in [c for c in known if c not in present]:
                del known[child]
            known.update(found.ctimes.get(root, {}))
        self.last_round_at = time.monotonic()

    async def _purge(self) -> None:
        """Delete the notifications older than 15 minutes (every broker does; a delete another
        broker made first is fine)."""
        now_ms = int(time.time() * 1000)
        for root in CHANGE_ROOTS:
            old = obsolete_notifications(self._ctimes[root], now_ms, self.change_expiration_ms)
            if not old:
                continue
            try:
                deleted = await asyncio.to_thread(self.store.delete_notifications, root, old)
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("could not purge old ACL change notifications under %s: %r", root, exc)
                continue
            for child in old:
                self._ctimes[root].pop(child, None)
            if deleted:
                log.info("purged %d ACL change notifications older than %d s under %s", deleted,
                         self.change_expiration_ms // 1000, root)

    # -- writes ------------------------------------------------------------------------------

    async def create_acls(self, bindings: list[AclBinding]) -> list[AclError | None]:
        """CreateAcls' bindings (the request-wide checks already made): each refused as Kafka
        does (creation_error) or stored; the stored ones grouped by resource pattern and written
        in as few multis as fit, each with its notification. An ACL that exists already is
        created again without complaint, as in Kafka."""
        results: list[AclError | None] = [creation_error(b) or _znode_name_error(b.pattern.name) for b in bindings]
        adding: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding, error in zip(bindings, results):
            if error is None:
                adding.setdefault(binding.pattern, set()).add(binding.entry)
        if not adding:
            return results
        try:
            update = await self._update(adding, lambda pattern, old: old | adding[pattern])
        except Exception as exc:  # noqa: BLE001 - answered per binding, as Kafka's ApiError
            log.exception("storing ACLs failed")
            failed = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to create ACLs: {_reason(exc)}")
            return [failed if r is None else r for r in results]
        return [r if r is not None else update.unreadable.get(b.pattern) for b, r in zip(bindings, results)]

    async def delete_acls(self, filters: list[AclBindingFilter]
                          ) -> list[tuple[AclError | None, list[AclBinding]]]:
        """DeleteAcls' filters (the request-wide checks already made): per filter an error or
        None, and the ACLs it removed. The patterns considered are those this broker knows that
        a filter selects, and the one or two a filter names exactly (stored, perhaps, by a
        write this broker has not heard of yet); their ACLs are read from ZooKeeper and an ACL
        there that two filters select is reported under the first (AclAuthorizer.deleteAcls)."""
        patterns: set[ResourcePattern] = set()
        for f in filters:
            patterns |= {b.pattern for b in self.authorizer.describe(AclBindingFilter(f.pattern, ANY_ENTRY_FILTER))}
            patterns |= _named_patterns(f)
        removed: dict[ResourcePattern, list[tuple[int, AccessControlEntry]]] = {}

        def remove(pattern: ResourcePattern, old: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
            selecting = [i for i, f in enumerate(filters) if f.pattern.matches(pattern)]
            removed[pattern] = []
            kept = set(old)
            for entry in sorted(old, key=_entry_order):
                first = next((i for i in selecting if filters[i].entry.matches(entry)), None)
                if first is not None:
                    removed[pattern].append((first, entry))
                    kept.discard(entry)
            return frozenset(kept)

        results: list[tuple[AclError | None, list[AclBinding]]] = [(None, []) for _ in filters]
        if not patterns:
            return results
        try:
            update = await self._update(patterns, remove)
        except Exception as exc:  # noqa: BLE001 - answered per filter
            log.exception("deleting ACLs failed")
            failed = AclError(ErrorCode.UNKNOWN_SERVER_ERROR, f"Failed to delete ACLs: {_reason(exc)}")
            return [(failed, []) for _ in filters]
        for pattern in sorted(removed, key=_pattern_order):
            if pattern in update.unreadable:
                continue
            for index, entry in removed[pattern]:
                results[index][1].append(AclBinding(pattern, entry))
        for pattern, error in update.unreadable.items():
            for i, f in enumerate(filters):
                if f.pattern.matches(pattern):
                    results[i] = (error, results[i][1])
        return results

    async def _update(self, patterns: Iterable[ResourcePattern],
                      compute: Callable[[ResourcePattern, frozenset[AccessControlEntry]],
                                        frozenset[AccessControlEntry] | set[AccessControlEntry]]) -> _Update:
        """Rewrite the ACLs of ``patterns`` in ZooKeeper as ``compute`` makes them of what is
        stored, then apply them here: under the lock, so no notification round's older read
        lands after it."""
        paths = {acl_path(p): p for p in patterns}
        update = _Update()

        def change(current: Mapping[str, bytes | None]) -> dict[str, ZnodeWrite]:
            writes: dict[str, ZnodeWrite] = {}
            for path, data in current.items():
                pattern = paths[path]
                try:
                    old = decode_acls(data)
                except ValueError as exc:
                    update.unreadable[pattern] = AclError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                                          f"the ACLs stored at {path} cannot be read: {exc}")
                    update.acls.pop(pattern, None)
                    continue
                update.unreadable.pop(pattern, None)
                new = frozenset(compute(pattern, old))
                update.acls[pattern] = new
                if new != old:
                    writes[path] = ZnodeWrite(encode_acls(new) if new else None,
                                              (acl_change_path_prefix(pattern.pattern_type), encode_acl_change(pattern)))
            return writes

        async with self._lock:
            await asyncio.to_thread(self.store.update, list(paths), change)
            for pattern, entries in update.acls.items():
                self.authorizer.apply(pattern, entries)
        return update


def _storable(name: str) -> bool:
    """A name a resource znode can have: a znode path segment."""
    return bool(name) and "/" not in name and name not in (".", "..") and not any(map(_not_in_paths, name))


def _not_in_paths(char: str) -> bool:
    """A character ZooKeeper refuses in a path (PathUtils.validatePath)."""
    code = ord(char)
    return (code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or 0xFFF0 <= code <= 0xFFFF)


def _znode_name_error(name: str) -> AclError | None:
    """A resource name no znode can have ("." or "..", a control character): refused before
    ZooKeeper fails the whole multi on it (creation_error has refused empty names and "/")."""
    if not name or "/" in name or _storable(name):
        return None
    return AclError(ErrorCode.INVALID_REQUEST, f"Failed to create ACL: ACL binding contains invalid resource name: "
                                               f"{name!r} cannot be a ZooKeeper node name")


def _named_patterns(filter_: AclBindingFilter) -> set[ResourcePattern]:
    """The patterns a filter names exactly (AclAuthorizer.filterToResources for a filter that
    matches at most one resource): its own, LITERAL and PREFIXED for pattern type ANY."""
    pattern = filter_.pattern
    if pattern.find_indefinite_field() is not None or pattern.name is None or not _storable(pattern.name):
        return set()
    if pattern.pattern_type is PatternType.ANY:
        return {ResourcePattern(pattern.resource_type, pattern.name, p) for p in STORED_PATTERN_TYPES}
    if pattern.pattern_type.is_specific:
        return {ResourcePattern(pattern.resource_type, pattern.name, pattern.pattern_type)}
    return set()


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _pattern_order(pattern: ResourcePattern) -> tuple[int, int, str]:
    return int(pattern.resource_type), int(pattern.pattern_type), pattern.name


def _entry_order(entry: AccessControlEntry) -> tuple[str, str, int, int]:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission_type)
