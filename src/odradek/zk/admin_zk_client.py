"""Kafka's AdminZkClient for entity configs: /config/topics/<t>, /config/brokers/<id> and
/config/brokers/<default>, each {"version":1,"config":{...}}, and the change notifications
that tell every broker to re-read one (Kafka's ConfigChangeNotification v2,
/config/changes/config_change_<seq> = {"version":2,"entity_path":"topics/<t>"}).

An entity's config and its notification are written in one multi, so a broker never sees a
notification for a change that did not happen, nor a change without one. Kafka writes them
one after the other; a broker that missed the notification of a crashed admin then kept the
old value until its restart.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.security import ACL

from odradek.zk import paths

log = logging.getLogger("odradek.zk.admin")

TOPICS, BROKERS = "topics", "brokers"
#: /config/users/<sanitized user>: SCRAM credentials (KIP-554) and the user's quotas; a user's
#: per-client-id quotas below it, /config/users/<user>/clients/<sanitized client-id>
USERS = "users"
#: /config/clients/<sanitized client-id>: client-id quotas (KIP-13); also the child type of USERS
CLIENTS = "clients"
CONFIG_CHANGE_PREFIX = "config_change_"
#: Kafka's ZkConfigManager changeExpirationMs: notifications older than this are deleted
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class UnknownEntityError(Exception):
    """The topic whose config was to change does not exist."""


def entity_path(entity_type: str, name: str) -> str:
    return f"{paths.CONFIG}/{entity_type}/{name}"


def encode_notification(entity_type: str, name: str) -> bytes:
    return json.dumps({"version": 2, "entity_path": f"{entity_type}/{name}"}, separators=(",", ":")).encode()


def decode_notification(data: bytes) -> tuple[str, str] | None:
    """(entity type, name) of a notification; None for one we cannot read (Kafka logs and
    skips it too). Version 1 ({"entity_type":..,"entity_name":..}) is read as well."""
    try:
        body = json.loads(data)
        if body.get("version") == 1:
            return str(body["entity_type"]), str(body["entity_name"])
        entity_type, _, name = str(body["entity_path"]).partition("/")
        return (entity_type, name) if name else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def change_entity_configs(kz: Any, changes: dict[tuple[str, str], dict[str, str]],
                          validate_only: bool = False, acl_for: Callable[[str], list[ACL]] | None = None
                          ) -> list[str]:
    """Replace the configs of several entities and announce each, in one multi (none with
    validate_only); the topics among them that do not exist, whose configs are not written.
    ``acl_for``: the ACL of each znode created, by path (zk/zk_acls.py: /config/users/<user>
    is sensitive); kazoo's default ACL without it."""
    topics = [name for entity_type, name in changes if entity_type == TOPICS]
    pending = {t: kz.exists_async(paths.topic_path(t)) for t in topics}
    unknown = [t for t, r in pending.items() if r.get() is None]
    todo = {k: c for k, c in changes.items() if not (k[0] == TOPICS and k[1] in unknown)}
    while todo and not validate_only:
        try:
            _change_entity_configs(kz, todo, acl_for=acl_for)
            break
        except UnknownEntityError as exc:  # deleted between the check and the write
            unknown.append(str(exc))
            todo.pop((TOPICS, str(exc)))
    return unknown


def _change_entity_configs(kz: Any, changes: dict[tuple[str, str], dict[str, str]], retries: int = 5,
                           acl_for: Callable[[str], list[ACL]] | None = None) -> None:
    """One multi. A topic must exist (checked in the same multi); UnknownEntityError names the
    first that does not. A concurrent writer of the same entity (BadVersion) makes us read and
    try again: the new configs are whole, so the last writer wins, as in Kafka."""
    for _ in range(retries):
        stats = {key: kz.exists_async(entity_path(*key)) for key in changes}
        versions = {key: (s.version if (s := r.get()) is not None else None) for key, r in stats.items()}
        tx = kz.transaction()
        for (entity_type, name), config in changes.items():
            if entity_type == TOPICS:
                tx.check(paths.topic_path(name), -1)
            data = paths.encode_topic_config(config)
            version = versions[(entity_type, name)]
            if version is None:
                path = entity_path(entity_type, name)
                tx.create(path, data, acl=acl_for(path) if acl_for else None)
            else:
                tx.set_data(entity_path(entity_type, name), data, version)
        for entity_type, name in changes:
            notification = f"{paths.CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"
            tx.create(notification, encode_notification(entity_type, name),
                      acl=acl_for(notification) if acl_for else None, sequence=True)
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            return
        if isinstance(failures[0], NoNodeError):
            keys = [k for k in changes if k[0] == TOPICS]
            missing = [k[1] for k in keys if kz.exists(paths.topic_path(k[1])) is None]
            if missing:
                raise UnknownEntityError(missing[0])
            raise failures[0]
        if not isinstance(failures[0], (BadVersionError, NodeExistsError)):
            raise failures[0]
    raise RuntimeError(f"configs of {sorted(changes)} changed concurrently {retries} times; try again")


#: the entity configs ``update_entity_configs`` reads and writes, by (entity type, name)
EntityConfigs = dict[tuple[str, str], dict[str, str]]


def update_entity_configs(kz: Any, keys: list[tuple[str, str]], update: Callable[[EntityConfigs], EntityConfigs],
                          validate_only: bool = False, acl_for: Callable[[str], list[ACL]] | None = None,
                          retries: int = 5) -> EntityConfigs:
    """Read the configs of the entities ``keys`` names (pipelined; {} for one without a node),
    let ``update`` compute the new configs of those that change from them, and write those in
    one multi, each with its change notification, each conditional on the version read (none
    with validate_only). A concurrent writer of one of them (another broker, the SCRAM APIs)
    makes us read and call ``update`` again, so keys this change does not name are never lost
    to a write we did not see. An entity below another (users/<user>/clients/<id>) gets its
    missing parents created in the same multi: the user's node with an empty config (as Kafka
    writes an entity without configs), the clients node without data. Returns what was written
    (what would be, with validate_only); ``update`` may raise to write nothing."""
    for _ in range(retries):
        reads = {key: kz.get_async(entity_path(*key)) for key in keys}
        current: EntityConfigs = {}
        versions: dict[tuple[str, str], int | None] = {}
        for key, result in reads.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                current[key], versions[key] = {}, None
            else:
                current[key], versions[key] = paths.decode_topic_config(data), stat.version
        changes = update({key: dict(config) for key, config in current.items()})
        if not changes or validate_only:
            return changes
        writes = {entity_path(*key): (paths.encode_topic_config(config), versions.get(key))
                   for key, config in changes.items()}
        for path, data in _missing_parents(kz, [key for key in changes if versions.get(key) is None]):
            writes.setdefault(path, (data, None))  # a parent that is itself written is created as such
        tx = kz.transaction()
        for path in sorted(writes, key=lambda p: p.count("/")):  # parents first
            data, version = writes[path]
            if version is None:
                tx.create(path, data, acl=acl_for(path) if acl_for else None)
            else:
                tx.set_data(path, data, version)
        notification = f"{paths.CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}"
        for entity_type, name in changes:
            tx.create(notification, encode_notification(entity_type, name),
                      acl=acl_for(notification) if acl_for else None, sequence=True)
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            return changes
        if not isinstance(failures[0], (BadVersionError, NodeExistsError, NoNodeError)):
            raise failures[0]
    raise RuntimeError(f"configs of {sorted(keys)} changed concurrently {retries} times; try again")


def _missing_parents(kz: Any, keys: list[tuple[str, str]]) -> list[tuple[str, bytes]]:
    """The znodes between /config/<type> and each nested entity (``users/alice/clients/app``:
    /config/users/alice, /config/users/alice/clients) that do not exist, parents first, with
    the data each is created with."""
    wanted: dict[str, bytes] = {}
    for entity_type, name in keys:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            path = entity_path(entity_type, "/".join(parts[:depth]))
            # an entity's node (odd depth: users/<user>) holds a config; the type below it none
            wanted.setdefault(path, paths.encode_topic_config({}) if depth % 2 else b"")
    exists = {path: kz.exists_async(path) for path in wanted}
    return [(path, data) for path, data in wanted.items() if exists[path].get() is None]


def config_changes(kz: Any) -> list[str]:
    """The notification znodes, oldest first."""
    children = kz.get_children(paths.CONFIG_CHANGES)
    return sorted(c for c in children if c.startswith(CONFIG_CHANGE_PREFIX))


def sequence_of(child: str) -> int:
    return int(child[len(CONFIG_CHANGE_PREFIX):])


def purge_obsolete_notifications(kz: Any, children: list[str], now_ms: int | None = None) -> int:
    """Delete notifications older than CHANGE_EXPIRATION_MS (Kafka's
    ZkNodeChangeNotificationListener.purgeObsoleteNotifications; every broker does it, and a
    node another broker deleted first is fine). How many this call deleted."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    stats = {c: kz.exists_async(f"{paths.CONFIG_CHANGES}/{c}") for c in children}
    old = [c for c, r in stats.items() if (s := r.get()) is not None and now_ms - s.ctime > CHANGE_EXPIRATION_MS]
    return delete_notifications(kz, paths.CONFIG_CHANGES, old)


def delete_notifications(kz: Any, root: str, children: Iterable[str]) -> int:
    """Delete these change notifications under ``root`` in one pipelined round (every broker
    purges; one another broker deleted first is fine). How many this call deleted."""
    pending = [kz.delete_async(f"{root}/{child}") for child in dict.fromkeys(children)]
    deleted = 0
    for result in pending:
        try:
            result.get()
            deleted += 1
        except NoNodeError:
            pass
    return deleted
