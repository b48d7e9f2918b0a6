"""KafkaZkClient: Kafka's ZooKeeper operations over one kazoo session.

Why it looks the way it does:
- Controller writes are epoch-fenced (KAFKA-6082): each is a ZooKeeper multi that starts with
  check("/controller_epoch", epoch_zk_version), so a deposed controller cannot write anything.
  kazoo's commit() returns failures as exception instances instead of raising, so every result
  list goes through `_run_fenced`, which turns a failed check into ControllerMovedError.
- Bulk reads and writes are batched (multi of <= 1000 ops, or pipelined *_async calls): one
  synchronous round trip per znode is what made Kafka's failover take tens of seconds. Every
  request also stays under the servers' jute.maxbuffer (zk/request_size.py): ZooKeeper drops
  the connection of a client that sends more.
- Ephemeral znodes left by a previous session of ours (a restart inside the session timeout,
  the ZooKeeper ephemeral-node bug ZOOKEEPER-1740 that Kafka's
  createEphemeralPathExpectConflictHandleZKBug works around) are waited out, not treated as a
  conflict.

- Reconnecting never waits more than RECONNECT_MAX_DELAY_S between rounds over the servers.
  kazoo's default backoff doubles up to an hour: after a 20 s loss of ZooKeeper's quorum a
  broker would next try 20 s later, when the quorum has been back longer than a 4 s session
  timeout, so its session expires and it drops out of /brokers/ids although it never died
  (tests/integration/test_zookeeper_quorum.py). ZooKeeper restarts every session's
  timeout when a quorum forms, so a client that comes back within it keeps its session.

All methods block; call them from a worker thread (asyncio.to_thread), never from a kazoo
watch or state-listener callback. kazoo's ConnectionLoss / SessionExpiredError propagate.
While ZooKeeper is unreachable kazoo queues a request until it reconnects, however long that
takes: calls that must give up (a broker shutting down) take a timeout.
"""
from __future__ import annotations

import base64
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
    SessionClosedRequireSaslError,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry
from kazoo.security import ACL

from odradek.common.metadata import (
    BrokerInfo,
    LeaderAndIsr,
    PartitionOrdering,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
    new_tuple,
    raised_leader_epochs,
)
from odradek.zk import admin_zk_client, paths
from odradek.zk.errors import (
    BrokerIdInUseError,
    ControllerMovedError,
    RequestTooLargeError,
    StaleEphemeralError,
    TopicExistsError,
    ZooKeeperAuthError,
)
from odradek.zk.kazoo_handler import Handler
from odradek.zk.raw_session import (
    OP_CREATE,
    OP_DELETE,
    OP_SET_DATA,
    MultiReadUnsupportedError,
    RawSession,
    RawSessionAuthError,
    RawSessionError,
)
from odradek.zk.request_size import JUTE_MAXBUFFER, ops_per_multi, payload_budget, split_to_fit
from odradek.zk.sasl import ZkSaslCredentials
from odradek.zk.zk_acls import default_acls

MAX_MULTI_OPS = 1000  # ops per transaction, the epoch check included
MULTI_READ_MIN = 8  # bulk reads of at least this many znodes use the multi-read session
#: longest pause between reconnection rounds (kazoo adds up to 40% jitter); ZooKeeper's Java
#: client, which Kafka uses, waits up to 1 s too
RECONNECT_MAX_DELAY_S = 1.0
#: how long close() waits for kazoo to end the session before leaving it to the process exit
CLOSE_TIMEOUT_S = 5.0
#: how long a broker's start waits for ZooKeeper to answer (kazoo's connection, then each
#: startup request through ``until_connected``)
STARTUP_TIMEOUT_S = 15.0
log = logging.getLogger(__name__)
K = TypeVar("K")
T = TypeVar("T")


# A failover reads and writes thousands of partition states, but only a handful of distinct
# payloads (same leader, epoch, ISR and controller epoch): memoizing the JSON codec on the
# payload takes it off the failover's critical path. Bounded, and the cache is only a cache.
_STATE_CACHE_MAX = 4096
_decoded: dict[bytes, tuple[int, int, tuple[int, ...], int, PartitionOrdering | None]] = {}
_encoded: dict[tuple[int, int, tuple[int, ...], int, PartitionOrdering | None], bytes] = {}


def _decode_state(data: bytes, zk_version: int) -> LeaderAndIsr:
    fields = _decoded.get(data)
    if fields is None:
        lai = paths.decode_leader_and_isr(data, zk_version)
        if len(_decoded) >= _STATE_CACHE_MAX:
            _decoded.clear()
        _decoded[bytes(data)] = (lai.leader, lai.leader_epoch, lai.isr, lai.controller_epoch,
                                 lai.ordering)
        return lai
    return new_tuple(LeaderAndIsr, (fields[0], fields[1], fields[2], fields[3], zk_version,
                                    fields[4]))


def _encode_state(state: LeaderAndIsr) -> bytes:
    key = (state.leader, state.leader_epoch, state.isr, state.controller_epoch, state.ordering)
    data = _encoded.get(key)
    if data is None:
        data = paths.encode_leader_and_isr(state)
        if len(_encoded) >= _STATE_CACHE_MAX:
            _encoded.clear()
        _encoded[key] = data
    return data


class _Op(NamedTuple):
    """One write inside a fenced transaction."""

    kind: str  # "create" | "set" | "delete"
    path: str
    data: bytes = b""
    version: int = -1


class PendingLeaderAndIsrWrites:
    """Conditional LeaderAndIsr sets already sent (``KafkaZkClient.start_update_leader_and_isr``):
    ZooKeeper applies them while the controller decides other partitions' changes."""

    def __init__(self, states: Mapping[TopicPartition, LeaderAndIsr],
                 collect: Callable[[], dict[TopicPartition, Any]]) -> None:
        self._states = states
        self._collect = collect

    def result(self) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Waits for the replies (once): per partition its state at the new znode version, or
        the write's error (BadVersionError, NoNodeError)."""
        states = self._states
        out: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        for tp, r in self._collect().items():
            if isinstance(r, Exception):
                out[tp] = r
            else:
                s = states[tp]
                out[tp] = new_tuple(LeaderAndIsr, (s.leader, s.leader_epoch, s.isr,
                                                   s.controller_epoch, r.version, s.ordering))
        return out


class Watch:
    """Handle returned by the watch helpers; kazoo drops the watch at its next event after cancel()."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def _now_ms() -> int:
    return int(time.time() * 1000)


def _split_chroot(connect: str) -> tuple[str, str]:
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/")


def _startup_retry(timeout_s: float) -> KazooRetry:
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0, deadline=timeout_s)


def _raise_first_failure(outcomes: list[Any]) -> None:
    """Raise the first exception among a kazoo multi's results (``outcomes``, emptied): no
    frame its traceback holds may still refer to it, a reference cycle otherwise
    (common/gc_policy.py)."""
    failure = next(o for o in outcomes if isinstance(o, Exception))
    outcomes.clear()
    try:
        raise failure
    finally:
        del failure


def reconnect_retry() -> KazooRetry:
    """kazoo's connection retry policy for long-lived sessions: forever, at most
    RECONNECT_MAX_DELAY_S (plus jitter) apart, so a session outlives a ZooKeeper outage of any
    length as long as the quorum is back for less than the session timeout when we return."""
    return KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=RECONNECT_MAX_DELAY_S)


class KafkaZkClient:
    """Kafka's ZooKeeper client (KafkaZkClient.scala) for brokers, the controller and admin.

    `epoch_zk_version` is the /controller_epoch version won at election; the controller sets it
    and every fenced write checks it.
    """

    #: whose address a broker's BrokerInfo.host/port is (inter.broker.listener.name); the
    #: broker sets its own, every endpoint is kept anyway
    inter_broker_listener = "PLAINTEXT"

    def __init__(self, connect: str, session_timeout_s: float = 6.0,
                 jute_maxbuffer: int = JUTE_MAXBUFFER, *, sasl: ZkSaslCredentials | None = None,
                 set_acl: bool = False) -> None:
        """``sasl``: log in to ZooKeeper as this user (SASL DIGEST-MD5, zk/sasl.py) on every
        connection of every session; ``set_acl``: Kafka's zookeeper.set.acl, every znode
        created gets Kafka's secure ACL (zk/zk_acls.py), which needs ``sasl``."""
        if set_acl and sasl is None:
            raise ValueError("zookeeper.set.acl needs SASL credentials to log in to ZooKeeper with")
        self.connect = connect
        self.session_timeout_s = session_timeout_s
        self.jute_maxbuffer = jute_maxbuffer
        self.sasl = sasl
        self.set_acl = set_acl
        # paths go out with the chroot in front: count it in every op's size
        self._chroot_len = len(_split_chroot(connect)[1].encode())
        self.epoch_zk_version = -1
        # default_acl: what a create that names no ACL gets (a path that is not sensitive)
        self._zk = self._kazoo(connect, connection_retry=reconnect_retry(), handler=Handler())
        self._raw: RawSession | None = None

    def _kazoo(self, hosts: str, **kwargs: Any) -> KazooClient:
        """A kazoo client logging in with our credentials, creating open or secure znodes."""
        return KazooClient(hosts=hosts, timeout=self.session_timeout_s, default_acl=self.acl_for("/"),
                           sasl_options=self.sasl.kazoo_sasl_options() if self.sasl else None, **kwargs)

    def acl_for(self, path: str) -> list[ACL]:
        """The ACL znode ``path`` gets when we create it (Kafka's ZkData.defaultAcls)."""
        return default_acls(path, self.set_acl, self.sasl.username if self.sasl else None)

    def _ensure_path(self, zk: KazooClient, path: str) -> None:
        """Create ``path`` and its missing parents, each with its own ACL (kazoo's
        ensure_path gives the parents the child's, and /config/users must not lend its
        ACL to /config, nor /config to /config/users: Kafka's createRecursive)."""
        if zk.exists(path) is not None:
            return
        prefix = ""
        for part in path.strip("/").split("/"):
            prefix += "/" + part
            try:
                zk.create(prefix, b"", acl=self.acl_for(prefix))
            except NodeExistsError:
                pass

    # lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Connect and create Kafka's persistent paths (idempotent), each write tried again
        while the connection is lost (``until_connected``).

        With credentials the raw session logs in first, so that a wrong password is
        ZooKeeperAuthError at once (kazoo's own login failure only shows as requests that
        fail); so is a ZooKeeper that requires a login this client has no credentials for."""
        raw = RawSession(self.connect, sasl=self.sasl, acl_for=self.acl_for if self.set_acl else None)
        try:
            if self.sasl is not None:
                try:
                    raw.open()
                except RawSessionAuthError as exc:
                    raise ZooKeeperAuthError(str(exc)) from None
                except RawSessionError:
                    pass  # not reachable yet: kazoo waits for it below, this session connects later
            self._start_kazoo(timeout)
        except (SessionClosedRequireSaslError, AuthFailedError) as exc:
            raw.close()
            self.close()
            what = (f"refused the SASL login of user {self.sasl.username!r}" if self.sasl
                    else "requires a SASL login, and no credentials are configured")
            raise ZooKeeperAuthError(f"ZooKeeper at {self.connect} {what} ({type(exc).__name__})") from None
        except BaseException:
            raw.close()
            raise
        self._raw = raw  # connects at its first bulk read unless it logged in above

    def _start_kazoo(self, timeout: float) -> None:
        hosts, chroot = _split_chroot(self.connect)
        if chroot:  # kazoo cannot create its own chroot: do it from a chroot-less session
            bootstrap = self._kazoo(hosts)
            bootstrap.start(timeout)
            try:
                _startup_retry(timeout)(self._ensure_path, bootstrap, chroot)
            finally:
                bootstrap.stop()
                bootstrap.close()
        self._zk.start(timeout)
        for path in paths.PERSISTENT_PATHS:
            self.until_connected(self._ensure_path, self._zk, path, timeout_s=timeout)

    def until_connected(self, fn: Callable[..., T], *args: Any, timeout_s: float = STARTUP_TIMEOUT_S) -> T:
        """``fn(*args)``, tried again while the session has no connection (ConnectionLoss, an
        operation timeout, an expiry) for up to ``timeout_s``, as Kafka's KafkaZkClient holds
        its requests until it is connected (retryRequestsUntilConnected). For a broker's start
        (a broker started while a server of the ensemble was killed got ConnectionLoss from one
        of its first reads and exited: a fault run's kill-controller-restart-soon right after a
        zookeeper-server-kill) and for admin writes that may be repeated (DeleteTopics' marks).
        ``fn`` must be safe to run twice: a write whose answer was lost may have been applied."""
        return _startup_retry(timeout_s)(fn, *args)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """End the session: ZooKeeper deletes our ephemerals (/brokers/ids/N, /controller) now.

        Bounded, because a broker's shutdown must end while ZooKeeper is unreachable: kazoo's
        stop() waits up to max(10 s, session timeout) for its connection thread, which may be in
        the middle of connecting to a server that does not answer, and raises if that thread
        still runs. Requests still waiting for a reconnect fail with ConnectionLoss once kazoo
        stops. Returns False when the session could not be closed in time (ZooKeeper expires
        it after the session timeout, as it does a crashed broker's)."""
        if self._raw is not None:
            self._raw.close()
        failure: list[BaseException] = []

        def stop() -> None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception as exc:  # noqa: BLE001 - kazoo's WriterNotClosedException and the like
                failure.append(exc)

        stopper = threading.Thread(target=stop, name="zookeeper-close", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        if stopper.is_alive() or failure:
            log.warning("ZooKeeper session not closed within %g s (%r); it expires on its own",
                        timeout_s, failure[0] if failure else "still closing")
            return False
        return True

    def add_state_listener(self, listener: Callable[[KazooState], Any]) -> None:
        """kazoo calls `listener` on its own thread: it must only record or enqueue."""
        self._zk.add_listener(listener)

    def remove_state_listener(self, listener: Callable[[KazooState], Any]) -> None:
        self._zk.remove_listener(listener)

    @property
    def connected(self) -> bool:
        """Whether the session has a live connection to a serving ZooKeeper server now."""
        return bool(self._zk.connected)

    @property
    def session_id(self) -> int | None:
        client_id = self._zk.client_id
        return client_id[0] if client_id else None

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client, for tests and recipes this class does not wrap."""
        return self._zk

    # ephemeral znodes that may outlive a previous session of ours --------------------------

    def _create_ephemeral(
        self, path: str, data: bytes, is_ours: Callable[[bytes], bool], wait_s: float | None
    ) -> ZnodeStat:
        """Create ephemeral `path`; wait out a copy left by an old session for which
        `is_ours(data)` holds (for ever with `wait_s` None, saying so every 10 s); raise
        NodeExistsError if someone else holds it."""
        started = time.monotonic()
        deadline = None if wait_s is None else started + wait_s
        next_warning = started + 10
        while True:
            try:
                return self._zk.create(path, data, acl=self.acl_for(path), ephemeral=True, include_data=True)[1]
            except NodeExistsError:
                try:
                    current, stat = self._zk.get(path)
                except NoNodeError:
                    continue  # it went away between the two calls: create again now
                if stat.ephemeralOwner == self.session_id:
                    return stat  # an earlier attempt of ours succeeded (lost reply)
                if not is_ours(current):
                    raise
                now = time.monotonic()
                if deadline is not None and now > deadline:
                    raise StaleEphemeralError(
                        f"{path} from an earlier session of ours (session "
                        f"{stat.ephemeralOwner:#x}) still there after {wait_s:.0f}s"
                    ) from None
                if now > next_warning:
                    log.warning("%s from an earlier session of ours (session %#x) still there after %.0f s: "
                                "waiting for ZooKeeper to expire it", path, stat.ephemeralOwner, now - started)
                    next_warning = now + 10
                time.sleep(0.2)

    def _stale_wait_s(self) -> float:
        # The old session used our timeout too; ZooKeeper may take up to twice it to expire it.
        return 2 * self.session_timeout_s + 5

    # brokers -------------------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo, metrics_url: str | None = None) -> int:
        """Create ephemeral /brokers/ids/N (with where the broker serves its metrics, if it
        does: paths.encode_broker_info); return the broker epoch (its czxid).

        A registration with our host and port is our previous incarnation (no other live
        process can listen there), so it is waited out, however long ZooKeeper takes to expire
        its session: a broker restarted within the session timeout while ZooKeeper has lost its
        quorum would otherwise give up and stay down. Any other holder is BrokerIdInUseError.
        """
        path = paths.broker_path(info.id)

        def is_ours(data: bytes) -> bool:
            old = paths.decode_broker_info(info.id, data, 0, self.inter_broker_listener)
            return (old.host, old.port) == (info.host, info.port)

        try:
            stat = self._create_ephemeral(
                path, paths.encode_broker_info(info, _now_ms(), metrics_url), is_ours, None
            )
        except NodeExistsError:
            raise BrokerIdInUseError(f"broker id {info.id} is registered by another live broker") from None
        return stat.czxid

    def get_live_brokers(self) -> dict[int, BrokerInfo]:
        ids = [int(c) for c in self._zk.get_children(paths.BROKER_IDS)]
        found = self._get_many({i: paths.broker_path(i) for i in ids})
        return {i: paths.decode_broker_info(i, data, stat.czxid, self.inter_broker_listener)
                for i, (data, stat) in found.items()}

    # controller election -------------------------------------------------------------------

    def get_controller_id(self) -> int | None:
        try:
            return paths.decode_controller_id(self._zk.get(paths.CONTROLLER)[0])
        except NoNodeError:
            return None

    def get_controller_info(self, timeout_s: float) -> BrokerInfo | None:
        """The controller's registration (None without a live controller), giving up with
        kazoo's KazooTimeoutError after `timeout_s`: a broker's controlled shutdown must not
        wait for ZooKeeper to come back."""
        deadline = time.monotonic() + timeout_s
        try:
            data, _ = self._zk.get_async(paths.CONTROLLER).get(timeout=timeout_s)
            controller_id = paths.decode_controller_id(data)
            data, stat = self._zk.get_async(paths.broker_path(controller_id)).get(
                timeout=max(0.0, deadline - time.monotonic()))
        except NoNodeError:
            return None
        return paths.decode_broker_info(controller_id, data, stat.czxid, self.inter_broker_listener)

    def get_controller_epoch(self) -> tuple[int, int]:
        """(epoch, zk_version) of /controller_epoch, creating it as "0" (Kafka's initial epoch)."""
        while True:
            try:
                data, stat = self._zk.get(paths.CONTROLLER_EPOCH)
                return paths.decode_controller_epoch(data), stat.version
            except NoNodeError:
                try:
                    self._zk.create(paths.CONTROLLER_EPOCH, paths.encode_controller_epoch(0),
                                    acl=self.acl_for(paths.CONTROLLER_EPOCH))
                    return 0, 0
                except NodeExistsError:
                    continue

    def try_become_controller(self, broker_id: int) -> tuple[int, int] | None:
        """One election attempt: (new_epoch, epoch_zk_version) if we won, None if not.

        The ephemeral /controller and the epoch increment are one transaction, so the epoch
        moves exactly once per controller and only the winner moves it. A /controller that
        names us but belongs to an old session is waited out (ZOOKEEPER-1740, as
        Kafka's createEphemeralPathExpectConflictHandleZKBug does).
        """
        data = paths.encode_controller(broker_id, _now_ms())
        deadline = time.monotonic() + self._stale_wait_s()
        while True:
            epoch, version = self.get_controller_epoch()
            tx = self._zk.transaction()
            tx.create(paths.CONTROLLER, data, acl=self.acl_for(paths.CONTROLLER), ephemeral=True)
            tx.set_data(paths.CONTROLLER_EPOCH, paths.encode_controller_epoch(epoch + 1), version)
            created, set_result = tx.commit()
            if isinstance(set_result, ZnodeStat):
                return epoch + 1, set_result.version
            if isinstance(created, NodeExistsError):
                try:
                    current, stat = self._zk.get(paths.CONTROLLER)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.session_id:
                    return self.get_controller_epoch()  # we won; the reply got lost
                if paths.decode_controller_id(current) != broker_id:
                    return None
                if time.monotonic() > deadline:
                    raise StaleEphemeralError(f"/controller of an old session of broker {broker_id} stays")
                time.sleep(0.2)
            elif not isinstance(set_result, BadVersionError):
                raise set_result  # neither outcome Kafka expects: surface it
            # BadVersion: the epoch moved under us (a racing winner); re-read and retry

    def watch_controller(self, callback: Callable[[int | None], Any]) -> Watch:
        """Call `callback(controller_id or None)` now and on every change of /controller."""
        return self.watch_data_exists(
            paths.CONTROLLER,
            lambda data, _stat: callback(None if data is None else paths.decode_controller_id(data)),
        )

    # watches -------------------------------------------------------------------------------

    def watch_children(self, path: str, callback: Callable[[list[str]], Any]) -> Watch:
        """Re-arming children watch; `callback` runs on kazoo's thread and must only enqueue.

        kazoo stops it for good if `path` is deleted; the persistent paths never are.
        """
        handle = Watch()

        def on_children(children: list[str]) -> bool | None:
            if handle.cancelled:
                return False
            callback(children)
            return None

        ChildrenWatch(self._zk, path, on_children)
        return handle

    def watch_data_exists(
        self, path: str, callback: Callable[[bytes | None, ZnodeStat | None], Any]
    ) -> Watch:
        """Re-arming watch on a znode's data and existence ((None, None) while it is absent).

        `callback` runs on kazoo's thread and must only enqueue.
        """
        handle = Watch()

        def on_data(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if handle.cancelled:
                return False
            callback(data, stat)
            return None

        DataWatch(self._zk, path, on_data)
        return handle

    # reading the cluster (controller failover) ---------------------------------------------

    def _get_many(self, keyed_paths: Mapping[K, str]) -> dict[K, tuple[bytes, ZnodeStat]]:
        """Bulk gets; keys whose znode is missing are left out.

        Above a handful of paths they go through ZooKeeper's multi-read (raw_session.py, its own
        session; ~40x less client CPU than kazoo per znode), else, or if the server lacks it,
        through pipelined kazoo get_async calls."""
        if len(keyed_paths) >= MULTI_READ_MIN and self._raw is not None \
                and not self._raw.unsupported:
            keys = list(keyed_paths)
            try:
                got = self._raw.get_data_many([keyed_paths[k] for k in keys])
            except MultiReadUnsupportedError:
                log.warning("ZooKeeper has no multi-read (3.6+); using pipelined reads")
            except RawSessionError as exc:
                log.warning("multi-read failed (%s); using pipelined reads", exc)
            else:
                return {k: r for k, r in zip(keys, got) if r is not None}
        pending = {key: self._zk.get_async(path) for key, path in keyed_paths.items()}
        found = {}
        for key, result in pending.items():
            try:
                found[key] = result.get()
            except NoNodeError:
                pass
        return found

    def get_all_topics(self) -> set[str]:
        return set(self._zk.get_children(paths.BROKER_TOPICS))

    def topic_exists(self, topic: str) -> bool:
        return self._zk.exists(paths.topic_path(topic)) is not None

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        found = self._get_many({t: paths.topic_path(t) for t in topics})
        return {t: paths.decode_topic_assignment(t, data) for t, (data, _) in found.items()}

    def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Topics without a config znode get {} (broker defaults apply), as in Kafka."""
        return self.get_entity_configs(admin_zk_client.TOPICS, topics)

    def get_entity_configs(self, entity_type: str, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """/config/<entity_type>/<name> of each (admin_zk_client.py), in one batched read; {}
        where there is none."""
        names = list(names)
        found = self._get_many({n: admin_zk_client.entity_path(entity_type, n) for n in names})
        return {n: paths.decode_topic_config(found[n][0]) if n in found else {} for n in names}

    def get_entity_names(self, entity_type: str) -> list[str]:
        """The names under /config/<entity_type>, sorted (Kafka's fetchAllEntityConfigs lists
        them so): sanitized user names for "users"; [] while there is no such node."""
        try:
            return sorted(self._zk.get_children(f"{paths.CONFIG}/{entity_type}"))
        except NoNodeError:
            return []

    def get_child_entity_names(self, entity_type: str, parents: Iterable[str], child_type: str) -> list[str]:
        """The entities of ``child_type`` below each of ``parents`` (/config/users/<user>/clients/<id>
        for "users", names, "clients"), as the entity names of ``entity_type`` that name them:
        "<user>/clients/<id>", sorted; one pipelined listing per parent (Kafka's
        fetchAllChildEntityConfigs lists them so)."""
        listings = {parent: self._zk.get_children_async(f"{paths.CONFIG}/{entity_type}/{parent}/{child_type}")
                    for parent in parents}
        names = []
        for parent, result in listings.items():
            try:
                names += [f"{parent}/{child_type}/{child}" for child in result.get()]
            except NoNodeError:
                pass
        return sorted(names)

    def update_entity_configs(self, keys: list[tuple[str, str]],
                              update: Callable[[admin_zk_client.EntityConfigs], admin_zk_client.EntityConfigs],
                              validate_only: bool = False) -> admin_zk_client.EntityConfigs:
        """Entity configs read, changed by ``update`` and written back with their change
        notifications in one conditional multi (admin_zk_client.update_entity_configs)."""
        return admin_zk_client.update_entity_configs(self._zk, keys, update, validate_only, self.acl_for)

    def get_config_change_notifications(self, children: Iterable[str]) -> dict[str, bytes]:
        """The data of each /config/changes/<child>, in one batched read; those gone
        (purged by another broker) are left out."""
        found = self._get_many({c: f"{paths.CONFIG_CHANGES}/{c}" for c in children})
        return {c: data for c, (data, _) in found.items()}

    def change_entity_configs(self, changes: dict[tuple[str, str], dict[str, str]],
                              validate_only: bool = False) -> list[str]:
        """Entity configs and their change notifications in one multi (admin_zk_client.py)."""
        return admin_zk_client.change_entity_configs(self._zk, changes, validate_only, self.acl_for)

    def get_partition_states(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, LeaderAndIsr]:
        found = self._get_many({tp: paths.partition_state_path(tp) for tp in tps})
        decode = _decode_state
        return {tp: decode(data, stat.version) for tp, (data, stat) in found.items()}

    def get_partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        return self.get_partition_states([tp]).get(tp)

    # epoch-fenced controller writes --------------------------------------------------------

    def _commit_fenced_async(self, ops: list[_Op]) -> Any:
        """Start one multi through kazoo: epoch check then `ops`; returns kazoo's async result."""
        tx = self._zk.transaction()
        tx.check(paths.CONTROLLER_EPOCH, self.epoch_zk_version)
        for op in ops:
            if op.kind == "create":
                tx.create(op.path, op.data, acl=self.acl_for(op.path))
            elif op.kind == "set":
                tx.set_data(op.path, op.data, op.version)
            else:
                tx.delete(op.path, op.version)
        return tx.commit_async()

    def _fenced_results(self, outcome: list[Any]) -> list[Any]:
        """The results of the ops of a fenced multi (maybe exceptions), given all its results;
        a failed epoch check raises ControllerMovedError."""
        check, *results = outcome
        if isinstance(check, (BadVersionError, NoNodeError)):
            raise ControllerMovedError(
                f"/controller_epoch is no longer at version {self.epoch_zk_version}"
            )
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            raise check
        return results

    def _start_pipelined(self, batches: list[list[tuple[K, _Op]]]) -> Callable[[], list[Any]]:
        """Send every batch's multi before reading any reply: on the raw session when there is
        one (raw_session.py), else through kazoo. The returned function gives per batch its
        result list, a kazoo async result, or None for a raw multi whose reply was lost
        (resent through kazoo)."""
        if self._raw is not None:
            kinds = {"create": OP_CREATE, "set": OP_SET_DATA, "delete": OP_DELETE}
            return self._raw.start_fenced_multis(
                paths.CONTROLLER_EPOCH, self.epoch_zk_version,
                [[(kinds[op.kind], op.path, op.data, op.version) for _, op in batch]
                 for batch in batches])
        started = [self._commit_fenced_async([op for _, op in batch]) for batch in batches]
        return lambda: started

    def _run_fenced(self, items: list[tuple[K, _Op]]) -> dict[K, Any]:
        return self._start_fenced(items)()

    def _start_fenced(self, items: list[tuple[K, _Op]]) -> Callable[[], dict[K, Any]]:
        """Run keyed ops in fenced batches; an op that fails (BadVersion, NodeExists, NoNode)
        gets its exception as result, the others their result. Sets and deletes are sent now,
        and the returned function waits for them: ZooKeeper applies them while the caller
        goes on. Creates all run in the returned function.

        A multi is atomic and names only its first failing op, so after a failure the rest of
        that batch goes again as one single-op multi each, all sent before any reply is read:
        one more round trip however many ops conflict (retrying the batch minus one op at a
        time would be quadratic when a leader's ISR writes race thousands of ours).
        For sets and deletes every batch's first attempt is pipelined too: the batches touch
        disjoint znodes and each carries the epoch check, so they are independent. Creates
        stay sequential by batch: a later batch may create children of an earlier one's."""
        step = self._ops_per_multi(items)
        batches = [items[start:start + step] for start in range(0, len(items), step)]
        pipelined = all(op.kind != "create" for _, op in items)
        collect = self._start_pipelined(batches) if pipelined else None
        return lambda: self._finish_fenced(batches, collect)

    def _ops_per_multi(self, items: list[tuple[K, _Op]]) -> int:
        """Ops per fenced multi: MAX_MULTI_OPS less the epoch check, fewer if the largest op
        (path with chroot, data) times that many would exceed jute.maxbuffer. One pass over the
        ops' lengths (~1 ms of a 0.6 s failover at 10,000 partitions), the price of never
        having ZooKeeper drop the session mid-failover."""
        if not items:
            return MAX_MULTI_OPS - 1
        largest = max(len(op.path) + len(op.data) for _, op in items) + self._chroot_len
        return ops_per_multi(MAX_MULTI_OPS - 1, largest, self.jute_maxbuffer)

    def _finish_fenced(self, batches: list[list[tuple[K, _Op]]],
                       collect: Callable[[], list[Any]] | None) -> dict[K, Any]:
        results: dict[K, Any] = {}
        pending = collect() if collect is not None else [None] * len(batches)
        moved: ControllerMovedError | None = None
        for batch, started in zip(batches, pending):
            try:
                if collect is None:  # creates: this batch only, once the previous one is done
                    started = self._start_pipelined([batch])()[0]
                outcome = self._outcome(batch, started)
            except ControllerMovedError as exc:
                moved = exc  # read every reply before raising: nothing stays in flight
                continue
            bad = next((i for i, r in enumerate(outcome) if isinstance(r, Exception)
                        and not isinstance(r, (RolledBackError, RuntimeInconsistency))), None)
            if bad is None:
                results.update((key, r) for (key, _), r in zip(batch, outcome))
                continue
            results[batch[bad][0]] = outcome[bad]
            rest = batch[:bad] + batch[bad + 1:]
            if not rest or moved is not None:
                continue
            singles = [[item] for item in rest]
            # in order on one session, so a parent created here precedes its children
            for single, started_single in zip(singles, self._start_pipelined(singles)()):
                try:
                    results[single[0][0]] = self._outcome(single, started_single)[0]
                except ControllerMovedError as exc:
                    moved = exc
        if moved is not None:
            raise moved
        return results

    def _outcome(self, batch: list[tuple[K, _Op]], started: Any) -> list[Any]:
        """The results of a batch's ops: from its pipelined start (a result list or a kazoo
        async result), or committed now through kazoo when it has none (or its reply was lost)."""
        if started is None:
            started = self._commit_fenced_async([op for _, op in batch])
        return self._fenced_results(started if isinstance(started, list) else started.get())

    def create_partition_states(
        self, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Create the state znodes of new partitions (and their missing parents), fenced.

        Partitions whose topic znode is gone (deleted meanwhile) get NoNodeError, unwritten.
        """
        topics = {tp.topic for tp in states}
        parents = {paths.topic_path(t) for t in topics} | {paths.topic_partitions_path(t) for t in topics}
        parents |= {paths.partition_path(tp) for tp in states}
        pending = {p: self._zk.exists_async(p) for p in parents}
        present = {p for p, result in pending.items() if result.get() is not None}
        live = {t for t in topics if paths.topic_path(t) in present}
        # sorted: /T/partitions precedes /T/partitions/P, so parents come first in each batch
        missing = sorted(p for p in parents - present if p.split("/")[3] in live)
        self._run_fenced([(p, _Op("create", p)) for p in missing])  # a racing creator is fine
        items = [
            (tp, _Op("create", paths.partition_state_path(tp), paths.encode_leader_and_isr(s)))
            for tp, s in states.items() if tp.topic in live
        ]
        results: dict[TopicPartition, LeaderAndIsr | Exception] = {
            tp: NoNodeError(paths.topic_path(tp.topic)) for tp in states if tp.topic not in live
        }
        for tp, r in self._run_fenced(items).items():
            results[tp] = r if isinstance(r, Exception) else states[tp]._replace(zk_version=0)
        return results

    def update_leader_and_isr(
        self, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Conditional set of each state at its zk_version, fenced; success gives the new version."""
        return self.start_update_leader_and_isr(states).result()

    def start_update_leader_and_isr(
        self, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> PendingLeaderAndIsrWrites:
        """``update_leader_and_isr`` in two halves: the writes are sent now, the returned
        object's ``result()`` waits for their results."""
        state_path = paths.partition_state_path
        items = [(tp, new_tuple(_Op, ("set", state_path(tp), _encode_state(s), s.zk_version)))
                 for tp, s in states.items()]
        return PendingLeaderAndIsrWrites(states, self._start_fenced(items))

    def pop_isr_change_notifications(self) -> set[TopicPartition]:
        """Read and delete (fenced) all ISR change notifications; the union of their partitions."""
        children = self._zk.get_children(paths.ISR_CHANGE_NOTIFICATION)
        found = self._get_many({c: f"{paths.ISR_CHANGE_NOTIFICATION}/{c}" for c in children})
        self._run_fenced([(c, _Op("delete", f"{paths.ISR_CHANGE_NOTIFICATION}/{c}")) for c in found])
        return set().union(*(paths.decode_isr_change(data) for data, _ in found.values()))

    def _get_admin_request(self, path: str, decode: Callable[[bytes], Any], empty: Any) -> Any:
        """An admin tool's request znode (/admin/preferred_replica_election,
        /admin/reassign_partitions) decoded; None when it does not exist. Malformed contents
        read as ``empty``, with a warning: the controller then removes the znode, so the admin
        can write a correct one."""
        try:
            data, _ = self._zk.get(path)
        except NoNodeError:
            return None
        try:
            return decode(data or b"")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring malformed %s (%r): %s", path, (data or b"")[:200], exc)
            return empty

    def get_preferred_replica_election(self) -> set[TopicPartition] | None:
        return self._get_admin_request(paths.PREFERRED_REPLICA_ELECTION,
                                       paths.decode_preferred_election, set())

    def delete_preferred_replica_election(self) -> None:
        self._run_fenced([(None, _Op("delete", paths.PREFERRED_REPLICA_ELECTION))])  # gone: fine

    # partition reassignment (KafkaZkClient.getPartitionReassignment, setOrCreatePartitionReassignment,
    # setTopicAssignment) -----------------------------------------------------------------

    def get_partition_reassignments(self) -> dict[TopicPartition, tuple[int, ...]] | None:
        """The targets /admin/reassign_partitions asks for (Kafka's JSON format)."""
        return self._get_admin_request(paths.REASSIGN_PARTITIONS, paths.decode_reassignment, {})

    def set_partition_reassignments(self, remaining: Mapping[TopicPartition, Iterable[int]]) -> None:
        """Fenced: rewrite /admin/reassign_partitions with the reassignments not yet complete,
        or delete it when none is left (which tells Kafka's tools the reassignment is done)."""
        if remaining:
            op = _Op("set", paths.REASSIGN_PARTITIONS, paths.encode_reassignment(remaining))
        else:
            op = _Op("delete", paths.REASSIGN_PARTITIONS)
        result = self._run_fenced([(None, op)]).get(None)
        if isinstance(result, NoNodeError) and remaining:  # deleted meanwhile: nothing to trim
            return
        if isinstance(result, Exception) and not isinstance(result, NoNodeError):
            raise result

    def set_replica_assignments(self, changes: Mapping[TopicPartition, ReplicaAssignment]) -> None:
        """Fenced: write the partitions' replicas and reassignment state into their topic
        znodes (one multi for every topic touched). Each znode is read first and written
        conditionally on its version, so partitions this controller does not know yet (a
        CreatePartitions racing it) are kept; a conflict re-reads (3 rounds, then raises)."""
        by_topic: dict[str, dict[int, ReplicaAssignment]] = {}
        for tp, assignment in changes.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = assignment
        remaining = sorted(by_topic)
        for _ in range(3):
            found = self._get_many({t: paths.topic_path(t) for t in remaining})
            writes: list[tuple[str, _Op]] = []
            for topic, (data, stat) in found.items():
                stored = paths.decode_topic_assignment(topic, data)
                partitions, adding, removing = (dict(stored.partitions), dict(stored.adding_replicas),
                                                dict(stored.removing_replicas))
                for partition, assignment in by_topic[topic].items():
                    partitions[partition] = assignment.replicas
                    adding[partition], removing[partition] = assignment.adding, assignment.removing
                new = dataclasses.replace(stored, partitions=partitions, adding_replicas=adding,
                                          removing_replicas=removing)
                writes.append((topic, _Op("set", paths.topic_path(topic),
                                          paths.encode_topic_assignment(new), stat.version)))
            results = self._run_fenced(writes) if writes else {}
            remaining = [t for t, r in results.items() if isinstance(r, BadVersionError)]
            failed = {t: r for t, r in results.items()
                      if isinstance(r, Exception) and not isinstance(r, BadVersionError)}
            if failed:
                log.warning("could not write the replica assignments of %s: %s", sorted(failed),
                            failed)
            if not remaining:
                return
        raise BadVersionError(f"topic znodes {remaining} kept changing")

    # admin and broker-side writes (not controller-fenced, as in Kafka) ---------------------

    def create_topic(self, assignment: TopicAssignment, config: Mapping[str, str]) -> None:
        """Config first, then the assignment the controller watches, in one transaction, so
        the controller never sees a topic without its config. One that would not fit in a
        request raises RequestTooLargeError unsent (CreateTopics refuses it before this,
        broker/topic_admin.py; sent, ZooKeeper would drop the connection instead)."""
        config_data = paths.encode_topic_config(config)
        assignment_data = paths.encode_topic_assignment(assignment)
        size = len(config_data) + len(assignment_data)
        if size > payload_budget(self.jute_maxbuffer):
            raise RequestTooLargeError(
                f"topic {assignment.name!r}: {size:,} bytes of assignment and config, over the "
                f"{payload_budget(self.jute_maxbuffer):,} a ZooKeeper request may carry")
        tx = self._zk.transaction()
        config_path, topic_path = paths.topic_config_path(assignment.name), paths.topic_path(assignment.name)
        tx.create(config_path, config_data, acl=self.acl_for(config_path))
        tx.create(topic_path, assignment_data, acl=self.acl_for(topic_path))
        results = tx.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            raise TopicExistsError(f"topic {assignment.name!r} already exists")
        for r in results:
            if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
                raise r

    def conditional_update_partition_states(
        self, states: Mapping[TopicPartition, LeaderAndIsr]
    ) -> dict[TopicPartition, int | None]:
        """The partition leader's ISR writes, each at its state's zk_version and independent of
        the others (no multi: one conflict must not undo the rest): per partition the new
        version, or None if the controller (or another leader) wrote since, which fences a
        zombie leader (the replication design's "multiple leaders in transition": the ISR
        write is conditional on the znode version). All are sent before any reply is read: a
        leader re-adding a restarted follower to 25,000 ISRs would otherwise wait 25,000 round
        trips."""
        pending = {tp: self._zk.set_async(paths.partition_state_path(tp), _encode_state(state),
                                          state.zk_version)
                   for tp, state in states.items()}
        out: dict[TopicPartition, int | None] = {}
        for tp, result in pending.items():
            try:
                out[tp] = result.get().version
            except (BadVersionError, NoNodeError):
                out[tp] = None
        return out

    def propagate_isr_changes(self, tps: Iterable[TopicPartition]) -> list[str]:
        """Tell the controller about ISR changes with sequential notification znodes, each
        under jute.maxbuffer: ZooKeeper drops the connection of a client that sends more in one
        request, and a leader re-adding a restarted follower to 25,000 ISRs would (~45 bytes
        per partition, ~290 with a 249-character topic name). The list is halved until each
        part's JSON fits (one part up to ~20,000 partitions of short topic names)."""
        tps = sorted(tps)  # encode_isr_change sorts too: halves of a sorted list stay contiguous
        if not tps:
            return []
        budget = payload_budget(self.jute_maxbuffer) - len(paths.ISR_CHANGE_PREFIX) - self._chroot_len
        outcomes = self._create_each([(paths.ISR_CHANGE_PREFIX, data)
                                      for data in split_to_fit(tps, paths.encode_isr_change, budget)],
                                     sequence=True)
        if any(isinstance(o, Exception) for o in outcomes):
            _raise_first_failure(outcomes)
        return [self._zk.unchroot(path) for path in outcomes]

    def _create_each(self, znodes: list[tuple[str, bytes]], sequence: bool = False) -> list[Any]:
        """Create each znode in a multi of its own, the multis pipelined; per znode its path or
        the exception ZooKeeper answered. Not kazoo's create: create_async makes a reference
        cycle of its closures on every call, which the broker, never collecting what it froze
        (common/gc_policy.py), kept whenever a freeze caught the call in flight (a DeleteTopics'
        marks, frozen at the end of the controller's deletion event, were most of what 10
        rounds of topic churn left)."""
        pending = []
        for path, data in znodes:
            tx = self._zk.transaction()
            tx.create(path, data, acl=self.acl_for(path), sequence=sequence)
            pending.append(tx.commit_async())
        outcomes = [result.get()[0] for result in pending]
        pending.clear()  # the results hold the outcomes too
        return outcomes

    def get_or_create_cluster_id(self) -> str:
        """Kafka's /cluster/id: made once by the first broker, read by every later one."""
        new_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            self._ensure_path(self._zk, paths.CLUSTER_ID.rpartition("/")[0])
            self._zk.create(paths.CLUSTER_ID, paths.encode_cluster_id(new_id), acl=self.acl_for(paths.CLUSTER_ID))
        except NodeExistsError:
            pass
        return paths.decode_cluster_id(self._zk.get(paths.CLUSTER_ID)[0])

    def get_or_create_scram_unknown_user_key(self) -> bytes:
        """The cluster's key for unknown SCRAM users' salts (paths.SCRAM_UNKNOWN_USER_KEY): made
        once by the first broker, read by every later one; a sensitive znode."""
        try:
            self._ensure_path(self._zk, paths.SCRAM_UNKNOWN_USER_KEY.rpartition("/")[0])
            self._zk.create(paths.SCRAM_UNKNOWN_USER_KEY, base64.b64encode(os.urandom(32)),
                            acl=self.acl_for(paths.SCRAM_UNKNOWN_USER_KEY))
        except NodeExistsError:
            pass
        return base64.b64decode(self._zk.get(paths.SCRAM_UNKNOWN_USER_KEY)[0])

    def allocate_producer_id_block(self, broker_id: int, size: int = 1000) -> paths.ProducerIdBlock:
        """Claim the next block of producer ids with a conditional update (retried on races)."""
        while True:
            data, stat = self._zk.get(paths.PRODUCER_ID_BLOCK)
            last = paths.decode_producer_id_block(data)
            start = 0 if last is None else last.end + 1
            block = paths.ProducerIdBlock(broker_id, start, start + size - 1)
            try:
                self._zk.set(paths.PRODUCER_ID_BLOCK, paths.encode_producer_id_block(block), stat.version)
                return block
            except BadVersionError:
                continue

    # topic deletion and partition expansion (KafkaZkClient's deleteTopicZNode, getTopicDeletions,
    # createDeleteTopicPath, setTopicAssignment) ---------------------------------------------

    def get_topic_deletions(self) -> set[str]:
        """The topics marked for deletion: the children of /admin/delete_topics."""
        return set(self._zk.get_children(paths.DELETE_TOPICS))

    def delete_topic_deletions(self, topics: Iterable[str]) -> None:
        """Remove deletion markers (fenced); one already gone is fine."""
        self._run_fenced([(t, _Op("delete", paths.delete_topic_path(t))) for t in sorted(topics)])

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Remove the topics' znodes, fenced (Kafka's ControllerDeletionClient.deleteTopic for
        every topic whose deletion completed in one controller event).

        Two rounds of pipelined reads find what exists: each topic's partition children and
        its own znodes, then every partition's children. The deletes of all topics then go in
        as few multis as fit, in one order: per topic its partition state subtree, then
        /brokers/topics/T, /config/topics/T and the /admin/delete_topics/T marker. ZooKeeper
        applies one session's multis in order and a fenced one fails for good, so whatever
        part-way failure (a controller that dies or is fenced) leaves a prefix done: a topic
        whose partition znodes remain keeps its marker, and the next controller finishes it.
        Only znodes that exist are named (no NoNode retries); ones gone meanwhile are fine."""
        topics = sorted(set(topics))
        if not topics:
            return
        children_of = {t: self._zk.get_children_async(paths.topic_partitions_path(t))
                       for t in topics}
        own = {(t, p): self._zk.exists_async(p) for t in topics
               for p in (paths.topic_path(t), paths.topic_config_path(t),
                         paths.delete_topic_path(t))}
        partitions: dict[str, list[str]] = {}
        for t, result in children_of.items():
            try:
                partitions[t] = sorted(result.get(), key=lambda c: (len(c), c))
            except NoNodeError:
                pass
        existing = {key for key, result in own.items() if result.get() is not None}
        leaves_of = {(t, c): self._zk.get_children_async(f"{paths.topic_partitions_path(t)}/{c}")
                     for t, cs in partitions.items() for c in cs}
        leaves: dict[tuple[str, str], list[str]] = {}
        for key, result in leaves_of.items():
            try:
                leaves[key] = result.get()
            except NoNodeError:
                leaves[key] = []
        ops: list[str] = []
        for t in topics:
            if t in partitions:
                base = paths.topic_partitions_path(t)
                ops += [f"{base}/{c}/{g}" for c in partitions[t] for g in leaves[(t, c)]]
                ops += [f"{base}/{c}" for c in partitions[t]]
                ops.append(base)
            ops += [p for p in (paths.topic_path(t), paths.topic_config_path(t),
                                paths.delete_topic_path(t)) if (t, p) in existing]
        if ops:
            self._run_fenced([(p, _Op("delete", p)) for p in ops])

    def backfill_topic_znodes(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """Write initial_partition_count (KIP-253: the current count) and a topic id (Kafka
        2.8's setTopicIds) into topic znodes that lack them, fenced and conditional on the
        version read (a CreatePartitions racing us wins, and we re-read). Returns the
        assignments as stored afterwards."""
        def backfill(old: TopicAssignment) -> TopicAssignment:
            return dataclasses.replace(
                old, topic_id=paths.new_topic_id() if old.topic_id == paths.ZERO_TOPIC_ID else old.topic_id,
                initial_partition_count=old.initial_partition_count or len(old.partitions))

        out: dict[str, TopicAssignment] = {}
        remaining = sorted(topics)
        for _ in range(3):
            if not remaining:
                break
            stored, remaining = self._rewrite_topic_znodes(remaining, backfill)
            out.update(stored)
        return out

    def set_undeleted_partition_counts(self, counts: Mapping[str, int]
                                       ) -> dict[str, TopicAssignment]:
        """Fenced: write KIP-253's undeleted_partition_count into the topic znodes, each
        conditional on the version read, in one round. A topic whose znode changed meanwhile
        (CreatePartitions, an admin lowering the count) is left out of the result unwritten:
        that change fires the controller's watch, and the next event decides again on it,
        rather than this write overwriting a count it did not see. Returns the assignments
        as stored afterwards (topics gone or changed are left out)."""
        stored, _changed = self._rewrite_topic_znodes(
            sorted(counts), lambda old: dataclasses.replace(old, undeleted_partition_count=counts[old.name]))
        return stored

    def _rewrite_topic_znodes(self, topics: list[str], change: Callable[[TopicAssignment], TopicAssignment]
                              ) -> tuple[dict[str, TopicAssignment], list[str]]:
        """One round over topic znodes: read them all, apply ``change``, write those it
        changed in one fenced multi, each conditional on the version read. Returns the
        assignments as stored afterwards, and the topics whose znode changed meanwhile
        (BadVersion: the caller may read again)."""
        stored: dict[str, TopicAssignment] = {}
        found = self._get_many({t: paths.topic_path(t) for t in topics})
        writes: list[tuple[str, _Op]] = []
        decoded: dict[str, TopicAssignment] = {}
        for topic, (data, stat) in found.items():
            old = paths.decode_topic_assignment(topic, data)
            new = change(old)
            decoded[topic] = new
            if new != old:
                writes.append((topic, _Op("set", paths.topic_path(topic),
                                          paths.encode_topic_assignment(new), stat.version)))
            else:
                stored[topic] = new
        changed = []
        for topic, result in (self._run_fenced(writes) if writes else {}).items():
            if isinstance(result, BadVersionError):
                changed.append(topic)
            elif not isinstance(result, Exception):
                stored[topic] = decoded[topic]
        return stored, changed

    # KIP-253: removing drained partitions of ordered topics ---------------------------------

    def report_partition_removal(self, report: paths.PartitionRemovalReport) -> str:
        """A leader's report that a partition marked for deletion is empty: a persistent
        sequential znode under /admin/ordered_partition_removals, which the controller watches
        (as it watches /isr_change_notification). Persistent, so a controller that fails over
        reads it again. Not fenced: any broker may report, the controller checks the epoch.
        Returns the znode's path."""
        self._ensure_path(self._zk, paths.ORDERED_PARTITION_REMOVALS)
        return self._zk.create(paths.ORDERED_PARTITION_REMOVAL_PREFIX, paths.encode_partition_removal(report),
                               acl=self.acl_for(paths.ORDERED_PARTITION_REMOVAL_PREFIX), sequence=True)

    def get_partition_removals(self) -> dict[str, paths.PartitionRemovalReport | None]:
        """The reports by child name (None: malformed, for the controller to remove)."""
        try:
            children = self._zk.get_children(paths.ORDERED_PARTITION_REMOVALS)
        except NoNodeError:
            return {}
        found = self._get_many({c: f"{paths.ORDERED_PARTITION_REMOVALS}/{c}" for c in children})
        return {c: paths.decode_partition_removal(data) for c, (data, _) in found.items()}

    def delete_partition_removals(self, names: Iterable[str]) -> None:
        """Fenced removal of reports; one already gone is fine."""
        self._run_fenced([(n, _Op("delete", f"{paths.ORDERED_PARTITION_REMOVALS}/{n}"))
                          for n in sorted(names)])

    def remove_partitions(self, topic: str, partitions: Iterable[int], reports: Iterable[str],
                          rewrite: Mapping[TopicPartition, LeaderAndIsr] | None = None
                          ) -> TopicAssignment | None:
        """KIP-253's removal of drained partitions, in one fenced multi (all or nothing): the
        topic znode rewritten without the partitions (conditional on the version read, so a
        concurrent CreatePartitions is not overwritten), their state znodes and
        /brokers/topics/T/partitions/P removed, ``reports`` (their removal reports)
        removed, the states of ``rewrite`` (other partitions whose KIP-253 maps named the
        removed ones) set at their zk_version; the removed partitions' leader epochs,
        read from their state znodes now, go into the topic znode's removed_leader_epochs
        (only this controller changes an epoch, so none moves before the multi). Returns the
        assignment as stored afterwards, or None when the topic znode is gone or changed
        meanwhile (nothing written: the change's watch brings the next try)."""
        removed = sorted(set(partitions))
        # the topic znode and the removed partitions' states in one read (key -1: the topic)
        found = self._get_many({-1: paths.topic_path(topic),
                                **{p: paths.partition_state_path(TopicPartition(topic, p)) for p in removed}})
        if -1 not in found:
            return None
        data, stat = found.pop(-1)
        old = paths.decode_topic_assignment(topic, data)
        states = found
        last_epochs = {p: _decode_state(state, st.version).leader_epoch for p, (state, st) in states.items()}
        new = dataclasses.replace(
            old, partitions={p: r for p, r in old.partitions.items() if p not in removed},
            adding_replicas={p: r for p, r in old.adding_replicas.items() if p not in removed},
            removing_replicas={p: r for p, r in old.removing_replicas.items() if p not in removed},
            removed_leader_epochs=raised_leader_epochs(old.removed_leader_epochs, last_epochs))
        candidates = [paths.partition_path(TopicPartition(topic, p)) for p in removed]
        candidates += [f"{paths.ORDERED_PARTITION_REMOVALS}/{n}" for n in sorted(set(reports))]
        pending = {path: self._zk.exists_async(path) for path in candidates}
        existing = [paths.partition_state_path(TopicPartition(topic, p)) for p in sorted(states)]
        existing += [path for path, result in pending.items() if result.get() is not None]
        tx = self._zk.transaction()
        tx.check(paths.CONTROLLER_EPOCH, self.epoch_zk_version)
        for path in existing:  # state znodes before their parents, reports last
            tx.delete(path)
        for tp, state in sorted((rewrite or {}).items()):
            tx.set_data(paths.partition_state_path(tp), _encode_state(state), state.zk_version)
        tx.set_data(paths.topic_path(topic), paths.encode_topic_assignment(new), stat.version)
        results = self._fenced_results(tx.commit())
        failed = [r for r in results if isinstance(r, Exception)
                  and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if failed:
            log.info("removing partitions %s of %s: %r; deciding again at the next event",
                     removed, topic, failed[0])
            return None
        return new

    def mark_topics_for_deletion(self, topics: Iterable[str]) -> None:
        """Create /admin/delete_topics/T for each topic (what DeleteTopics and Kafka's
        TopicCommand do; the controller watches its children). Already marked is fine."""
        outcomes = self._create_each([(paths.delete_topic_path(t), b"") for t in topics])
        failed = [o for o in outcomes if isinstance(o, Exception) and not isinstance(o, NodeExistsError)]
        outcomes.clear()
        if failed:
            _raise_first_failure(failed)

    def get_topic_assignments_and_versions(self, topics: Iterable[str]
                                           ) -> dict[str, tuple[TopicAssignment, int]]:
        """The assignments of ``topics`` with their znode versions (missing topics left out),
        for conditional rewrites (CreatePartitions)."""
        found = self._get_many({t: paths.topic_path(t) for t in topics})
        return {t: (paths.decode_topic_assignment(t, data), stat.version)
                for t, (data, stat) in found.items()}

    def set_topic_assignments(self, assignments: Iterable[tuple[TopicAssignment, int]]
                              ) -> dict[str, Exception | None]:
        """Rewrite each /brokers/topics/T at its version, pipelined (not one multi: one topic's
        conflict must not fail the others). Per topic None, or kazoo's BadVersionError if it
        moved, NoNodeError if it is gone. The controller's PartitionModifications watch fires."""
        pending = {a.name: self._zk.set_async(paths.topic_path(a.name),
                                              paths.encode_topic_assignment(a), version)
                   for a, version in assignments}
        out: dict[str, Exception | None] = {}
        for topic, result in pending.items():
            try:
                result.get()
                out[topic] = None
            except (BadVersionError, NoNodeError) as exc:
                out[topic] = exc
        return out
