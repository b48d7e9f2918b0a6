"""ZooKeeper I/O of Kafka's ACLs (kafka.zk.ZkAclStore, ZkAclChangeStore and KafkaZkClient's ACL
methods), as bytes at paths: what the paths are and what the bytes say is odradek.security.acl's
business (the layout /kafka-acl/<Type>/<name>, /kafka-acl-extended/prefixed/<Type>/<name>, the
JSON of an ACL znode and of a change notification), glued to this module by the broker
(broker/acl_manager.py). This one only knows the shape of the tree: type directories under a
root, one znode per resource under each, persistent sequential notifications under a change root.

Writes are Kafka's updateResourceAcls, batched: every resource's znode is read with its version,
the caller computes the new contents from what was read, and each write is conditional on that
version (a create on the znode not existing, a delete when the last ACL goes). Each write and
the change notification announcing it go into the same multi, so no broker sees a notification
without its change, nor a change without one (Kafka writes them one after the other). The
writes of one call share as few multis as jute.maxbuffer and ZooKeeper's op count allow; a multi
whose check failed (another writer got there first) is read again and recomputed, up to
MAX_UPDATE_RETRIES times, Kafka's maxUpdateRetries.

Reads use the session's own connection (pipelined kazoo calls), never the separate multi-read
session of KafkaZkClient._get_many: a reader woken by a notification's watch must see the data
the notification announces, which ZooKeeper promises only on the session that got the watch.

All methods block: call them from a worker thread.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from odradek.zk import admin_zk_client
from odradek.zk.client import MAX_MULTI_OPS, KafkaZkClient
from odradek.zk.errors import RequestTooLargeError
from odradek.zk.request_size import MULTI_OP_OVERHEAD, payload_budget

log = logging.getLogger("odradek.zk.acl")

#: how often a write whose znode changed under it is read and computed again (Kafka's
#: AclAuthorizer.maxUpdateRetries)
MAX_UPDATE_RETRIES = 10
#: the pause before such a retry: this plus up to RETRY_JITTER_S (AclAuthorizer's
#: retryBackoffMs and retryBackoffJitterMs)
RETRY_BACKOFF_S = 0.1
RETRY_JITTER_S = 0.05
#: notifications older than this are deleted by whichever broker sees them first (Kafka's
#: ZkNodeChangeNotificationListener changeExpirationMs, 15 minutes)
CHANGE_EXPIRATION_MS = admin_zk_client.CHANGE_EXPIRATION_MS


@dataclass(frozen=True, slots=True)
class Versioned:
    """A znode's data and the version a conditional write of it names."""

    data: bytes
    version: int


@dataclass(frozen=True, slots=True)
class ZnodeWrite:
    """The new contents of one znode (None: delete it) and, when given, the persistent
    sequential notification that announces the change: (path prefix, data), ZooKeeper appending
    the ten-digit sequence number to the prefix."""

    data: bytes | None
    notification: tuple[str, bytes] | None = None


@dataclass(frozen=True, slots=True)
class Notification:
    """A change notification's data and its creation time (ms since the epoch)."""

    data: bytes
    ctime_ms: int


class ConcurrentUpdateError(RuntimeError):
    """A znode kept changing under our conditional writes for MAX_UPDATE_RETRIES tries."""


#: what a change computes from the current contents of the znodes it is given (None: absent):
#: the writes to make, by path; a path left out needs none
Change = Callable[[Mapping[str, bytes | None]], Mapping[str, ZnodeWrite]]


def sequence_of(child: str, prefix: str) -> int:
    """The sequence number of a notification named ``prefix`` + ten digits; -1 when not one."""
    digits = child[len(prefix):]
    return int(digits) if child.startswith(prefix) and digits.isdigit() else -1


def obsolete_notifications(ctimes: Mapping[str, int], now_ms: int,
                           expiration_ms: int = CHANGE_EXPIRATION_MS) -> list[str]:
    """The notifications created more than ``expiration_ms`` before ``now_ms``, oldest first
    (ZkNodeChangeNotificationListener.purgeObsoleteNotifications' test)."""
    return sorted(child for child, ctime in ctimes.items() if now_ms - ctime > expiration_ms)


def _chroot_length(connect: str) -> int:
    """Bytes of the chroot that goes in front of every path on the wire (HOST:PORT,.../chroot)."""
    _hosts, sep, chroot = connect.partition("/")
    return len(f"/{chroot}".rstrip("/").encode()) if sep else 0


class ZkAclStore:
    """ACL znodes and change notifications over one KafkaZkClient's session."""

    def __init__(self, zk: KafkaZkClient, max_retries: int = MAX_UPDATE_RETRIES) -> None:
        self.zk = zk
        self.max_retries = max_retries
        self._budget = payload_budget(zk.jute_maxbuffer) - _chroot_length(zk.connect)

    @property
    def _kz(self) -> Any:
        return self.zk.kazoo

    # -- the tree ----------------------------------------------------------------------------

    def create_paths(self, paths: Iterable[str]) -> None:
        """Create each persistent path that does not exist yet, parents first, as Kafka's
        createAclPaths does at every broker's start (another broker creating one meanwhile is
        fine). One pipelined existence check, then a create per missing path."""
        wanted = list(dict.fromkeys(paths))
        pending = {path: self._kz.exists_async(path) for path in wanted}
        missing = [path for path, result in pending.items() if result.get() is None]
        for path in sorted(missing, key=lambda p: p.count("/")):
            self._kz.ensure_path(path)

    def read_all(self, type_paths: Iterable[str]) -> dict[str, dict[str, Versioned]]:
        """Every resource znode under each type path: type path -> {name: data and version}. One
        pipelined round of child listings, one of reads (a type path that does not exist has
        none; a znode deleted between the two rounds is left out)."""
        listings = {path: self._kz.get_children_async(path) for path in dict.fromkeys(type_paths)}
        names: dict[str, list[str]] = {}
        for path, result in listings.items():
            try:
                names[path] = sorted(result.get())
            except NoNodeError:
                names[path] = []
        found = self.read([f"{path}/{name}" for path, children in names.items() for name in children])
        return {path: {name: found[f"{path}/{name}"] for name in children if f"{path}/{name}" in found}
                for path, children in names.items()}

    def read(self, paths: Iterable[str]) -> dict[str, Versioned]:
        """The data and version of each znode that exists, in one pipelined round."""
        pending = {path: self._kz.get_async(path) for path in dict.fromkeys(paths)}
        found: dict[str, Versioned] = {}
        for path, result in pending.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            found[path] = Versioned(data or b"", stat.version)
        return found

    # -- conditional writes ------------------------------------------------------------------

    def update(self, paths: Iterable[str], change: Change) -> dict[str, bytes | None]:
        """Read ``paths``, write what ``change`` computes from their contents, each write
        conditional on the version read; where another writer changed a znode first, read it
        again and call ``change`` again for the znodes of the failed multi only (so ``change``
        must decide each path on its own contents). Returns what was written, by path (None:
        deleted). ConcurrentUpdateError after MAX_UPDATE_RETRIES retries; RequestTooLargeError,
        before anything is sent, for one znode with its notification over jute.maxbuffer.
        Other ZooKeeper errors propagate (what earlier multis wrote stays written)."""
        todo = list(dict.fromkeys(paths))
        written: dict[str, bytes | None] = {}
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(RETRY_BACKOFF_S + random.uniform(0, RETRY_JITTER_S))
            current = self.read(todo)
            computed = change({path: current[path].data if path in current else None for path in todo})
            asked = set(todo)
            writes = {path: write for path, write in computed.items()
                      if path in asked and (write.data is not None or path in current)}
            conflicted = self._write(writes, current, written)
            if not conflicted:
                return written
            log.info("ACL znodes %s changed while being written; reading them again", sorted(conflicted)[:5])
            # a create fails on a missing parent too (a type directory deleted by hand)
            self.create_paths(path.rpartition("/")[0] for path in conflicted)
            todo = conflicted
        raise ConcurrentUpdateError(f"{len(todo)} ACL znodes (first {todo[0]}) changed concurrently "
                                    f"{self.max_retries + 1} times; try again")

    def _write(self, writes: Mapping[str, ZnodeWrite], current: Mapping[str, Versioned],
               written: dict[str, bytes | None]) -> list[str]:
        """Send ``writes`` in as few multis as fit, pipelined; record the successful ones in
        ``written``. The paths of the multis that failed on a version or existence check."""
        batches = self._batches(writes)
        pending = []
        for batch in batches:
            tx = self._kz.transaction()
            for path in batch:
                write, old = writes[path], current.get(path)
                if write.data is None:
                    tx.delete(path, old.version if old is not None else -1)
                elif old is None:
                    tx.create(path, write.data)
                else:
                    tx.set_data(path, write.data, old.version)
                if write.notification is not None:
                    tx.create(write.notification[0], write.notification[1], sequence=True)
            pending.append(tx.commit_async())
        conflicted: list[str] = []
        failure: Exception | None = None
        for batch, result in zip(batches, pending):
            outcomes = result.get()
            errors = [o for o in outcomes if isinstance(o, Exception)]
            outcomes.clear()
            if not errors:
                written.update((path, writes[path].data) for path in batch)
            elif any(isinstance(e, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)) for e in errors):
                conflicted += batch
            elif failure is None:
                failure = errors[0]
            errors.clear()
        pending.clear()
        if failure is not None:
            try:
                raise failure
            finally:
                del failure
        return conflicted

    def _batches(self, writes: Mapping[str, ZnodeWrite]) -> list[list[str]]:
        """The paths of ``writes`` in groups that each fit one multi: at most MAX_MULTI_OPS ops
        and the payload budget of jute.maxbuffer, a write and its notification together."""
        batches: list[list[str]] = []
        size = ops = 0
        for path, write in writes.items():
            bytes_ = MULTI_OP_OVERHEAD + len(path.encode()) + len(write.data or b"")
            count = 1
            if write.notification is not None:
                bytes_ += MULTI_OP_OVERHEAD + len(write.notification[0].encode()) + 10 + len(write.notification[1])
                count += 1
            if bytes_ > self._budget:
                raise RequestTooLargeError(f"the ACLs of {path} take {bytes_:,} bytes, over the {self._budget:,} "
                                           f"bytes one ZooKeeper request may carry")
            if not batches or size + bytes_ > self._budget or ops + count > MAX_MULTI_OPS:
                batches.append([])
                size = ops = 0
            batches[-1].append(path)
            size += bytes_
            ops += count
        return batches

    # -- change notifications ----------------------------------------------------------------

    def notifications(self, root: str, prefix: str) -> list[str]:
        """The names of the notifications under ``root`` (children named ``prefix`` + digits),
        oldest first; none when ``root`` does not exist."""
        try:
            children = self._kz.get_children(root)
        except NoNodeError:
            return []
        return sorted((c for c in children if sequence_of(c, prefix) >= 0), key=lambda c: sequence_of(c, prefix))

    def read_notifications(self, root: str, children: Iterable[str]) -> dict[str, Notification]:
        """The data and creation time of each notification, in one pipelined round; those
        already deleted (purged by another broker) are left out."""
        pending = {child: self._kz.get_async(f"{root}/{child}") for child in dict.fromkeys(children)}
        found: dict[str, Notification] = {}
        for child, result in pending.items():
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            found[child] = Notification(data or b"", stat.ctime)
        return found

    def notification_ctimes(self, root: str, children: Iterable[str]) -> dict[str, int]:
        """The creation time of each notification that still exists, in one pipelined round."""
        pending = {child: self._kz.exists_async(f"{root}/{child}") for child in dict.fromkeys(children)}
        return {child: stat.ctime for child, result in pending.items() if (stat := result.get()) is not None}

    def delete_notifications(self, root: str, children: Iterable[str]) -> int:
        """Delete these notifications (admin_zk_client's, shared with the config changes')."""
        return admin_zk_client.delete_notifications(self._kz, root, children)
