"""A consumer-group member in Python: Kafka's AbstractCoordinator and ConsumerCoordinator for
protocol type "consumer" with eager rebalancing, over odradek's BrokerConnection.

Why not librdkafka's group member: KIP-253's ordered consumer needs three things librdkafka
keeps to itself. Its own assignor (part 6: undeleted partitions and partitions marked for
deletion are assigned separately, so the byte-in rate stays even); the group's generation id
and member id, which every ConsumerGroupPosition request carries (part 7); and a hook in the
heartbeat loop, where that position exchange happens every heartbeat.interval.ms. So the
ordered consumer fetches records with a librdkafka Consumer using assign() only, and this member
does the rest: FindCoordinator, JoinGroup/SyncGroup, heartbeats, OffsetFetch/OffsetCommit,
LeaveGroup.

The behaviour follows Kafka's consumer, error by error:

- JoinGroup v5: an unknown member is told MEMBER_ID_REQUIRED (KIP-394) and joins again at once
  with the id it got; UNKNOWN_MEMBER_ID forgets the id; NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE and connection errors rediscover the coordinator;
  COORDINATOR_LOAD_IN_PROGRESS and REBALANCE_IN_PROGRESS retry after a backoff; FENCED_INSTANCE_ID
  (KIP-345: another process took this static member's place) is fatal and stays so.
- The leader runs the assignor over every member's subscription and sends SyncGroup v3 with
  the assignments; the others send SyncGroup with none and get theirs.
- The heartbeat thread sends Heartbeat v3 every heartbeat.interval.ms while a generation is
  current, and after each one answered NONE in a Stable generation calls on_heartbeat (the
  ordered consumer's ConsumerGroupPosition exchange; not while SyncGroup is under way, when
  ``assignment`` still holds the previous generation's). REBALANCE_IN_PROGRESS asks the
  caller to rejoin (the generation stays current, so the caller can still commit before it
  does, as Kafka's eager consumer does in onJoinPrepare); ILLEGAL_GENERATION ends the
  generation; UNKNOWN_MEMBER_ID also forgets the member id. A coordinator that moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken
  connection) is rediscovered and the heartbeat retried without asking for a rejoin: the new
  coordinator loads the group from __consumer_offsets with its generation, and Kafka's member
  keeps it too. Only a session timeout without a successful heartbeat asks for a rejoin.
- OffsetCommit v7 carries the generation, member id and instance id, so a member whose
  generation is over cannot commit over the new owner's offsets (CommitFailedError).

A rejoin the caller asks for (request_rejoin, e.g. after partition counts changed) must start
a new generation even when this member is not the group's leader, but Kafka's coordinator
answers a follower's unchanged JoinGroup in a Stable group with the current generation. So
each request_rejoin changes the subscription's user data (a counter), which makes the
coordinator rebalance as for a changed subscription; the assignor never reads it.

Threads: the caller's thread runs join, commits and offset fetches on one connection to the
coordinator; the heartbeat thread (and on_heartbeat, which runs in it) uses a second one, so a
JoinGroup parked at the coordinator for a whole rebalance never delays a heartbeat.
"""
from __future__ import annotations

import enum
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from odradek.client.broker_connection import BrokerConnection
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.schema import Array, Int16, Int32, NullableBytes, SchemaError, String, Struct, decode, encode

log = logging.getLogger(__name__)

T = TypeVar("T")

FIND_COORDINATOR, FIND_COORDINATOR_VERSION = 10, 3
JOIN_GROUP, JOIN_GROUP_VERSION = 11, 5
HEARTBEAT, HEARTBEAT_VERSION = 12, 3
LEAVE_GROUP, LEAVE_GROUP_VERSION = 13, 3
SYNC_GROUP, SYNC_GROUP_VERSION = 14, 3
OFFSET_COMMIT, OFFSET_COMMIT_VERSION = 8, 7
OFFSET_FETCH, OFFSET_FETCH_VERSION = 9, 6

PROTOCOL_TYPE = "consumer"
#: Kafka's retry.backoff.ms, and the longest backoff between two retries of the same request
RETRY_BACKOFF_S = 0.1
#: heartbeats per interval while ``hurry`` says so: a member waiting on another's position
#: asked only at its own heartbeats, so a gate opened up to one interval after the barrier was
#: passed (p99 0.47-0.66 s at heartbeat.interval.ms 500, bench ordered); four times as often
#: while it waits
HURRIED_HEARTBEATS = 4
MAX_RETRY_BACKOFF_S = 1.0

# ConsumerProtocolSubscription v0 and ConsumerProtocolAssignment v0 (Kafka's
# clients/src/main/resources/common/message/ConsumerProtocol*.json): what members of a group
# of protocol type "consumer" exchange through JoinGroup and SyncGroup
_SUBSCRIPTION_V0 = Struct(("version", Int16), ("topics", Array(String)), ("user_data", NullableBytes))
_ASSIGNMENT_V0 = Struct(("version", Int16),
                        ("assigned_partitions", Array(Struct(("topic", String), ("partitions", Array(Int32))))),
                        ("user_data", NullableBytes))
_ASSIGNMENT_HEAD = Struct(("version", Int16),
                          ("assigned_partitions", Array(Struct(("topic", String), ("partitions", Array(Int32))))))

#: the coordinator has moved or is not there: find it again
_COORDINATOR_MOVED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
#: the coordinator is there but not ready (or the request timed out in it): ask again
_RETRY_LATER = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT})
#: a partition the coordinator's metadata does not know yet (a broker just restarted, or a
#: partition just created): Kafka's retriable UnknownTopicOrPartitionException, asked again
_PARTITION_RETRIABLE = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
#: the member's generation is over or moving on: a commit with it must not count
_GENERATION_OVER = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                              ErrorCode.REBALANCE_IN_PROGRESS})


class GroupMembershipError(Exception):
    """A group request failed for good (or, GroupTimeoutError, not within its time)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


class GroupTimeoutError(GroupMembershipError):
    """No coordinator answered (or the rebalance did not finish) within the time given:
    retriable, as Kafka's TimeoutException."""


class CommitFailedError(GroupMembershipError):
    """Kafka's CommitFailedException: the group refused the commit because this member's
    generation is over (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) or a rebalance is under way
    (REBALANCE_IN_PROGRESS); the partitions may belong to another member now. needs_rejoin is
    set."""


class _Retry(Exception):
    """A retriable answer; ``rediscover`` when the coordinator must be found again."""

    def __init__(self, reason: str, rediscover: bool) -> None:
        super().__init__(reason)
        self.rediscover = rediscover


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


@dataclass(frozen=True)
class Assignment:
    generation_id: int
    member_id: str
    is_leader: bool
    partitions: tuple[TopicPartition, ...]


#: member_id -> subscribed topics  ==>  member_id -> partitions (called on the leader only)
Assignor = Callable[[dict[str, list[str]]], dict[str, list[TopicPartition]]]


def encode_subscription(topics: list[str], user_data: bytes | None = None) -> bytes:
    return encode(_SUBSCRIPTION_V0, (0, list(topics), user_data))


def decode_subscription(metadata: bytes) -> list[str]:
    """The topics of any ConsumerProtocolSubscription version (all start with v0's fields)."""
    (version, topics), _ = decode(Struct(("version", Int16), ("topics", Array(String))), metadata, exact=False)
    if version < 0:
        raise SchemaError(f"subscription version {version}")
    return list(topics)


def encode_assignment(partitions: list[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return encode(_ASSIGNMENT_V0, (0, [(t, sorted(ps)) for t, ps in sorted(by_topic.items())], None))


def decode_assignment(assignment: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of any ConsumerProtocolAssignment version; empty bytes are no partitions
    (what the coordinator sends a member the leader gave nothing)."""
    if not assignment:
        return ()
    (version, topics), _ = decode(_ASSIGNMENT_HEAD, assignment, exact=False)
    if version < 0:
        raise SchemaError(f"assignment version {version}")
    return tuple(TopicPartition(t, p) for t, ps in topics for p in ps)


class _State(enum.Enum):
    UNJOINED = "unjoined"          # no generation: nothing to heartbeat
    PREPARING = "preparing"        # JoinGroup sent: the coordinator expects no heartbeat
    COMPLETING = "completing"      # JoinGroup answered, SyncGroup under way: heartbeats keep the session
    STABLE = "stable"


class GroupMember:
    """Kafka's AbstractCoordinator/ConsumerCoordinator for protocol type "consumer", eager rebalancing."""

    def __init__(self, bootstrap: list[tuple[str, int]], group_id: str, client_id: str, assignor: Assignor, *,
                 protocol_name: str = "odradek-ordered", session_timeout_ms: int = 45000,
                 rebalance_timeout_ms: int = 300000, heartbeat_interval_ms: int = 3000,
                 group_instance_id: str | None = None,
                 on_heartbeat: Callable[[GroupMember], None] | None = None,
                 hurry: Callable[[], bool] | None = None,
                 request_timeout_ms: int = 30000) -> None:
        """``hurry``: asked after each heartbeat; while it answers True the next comes after a
        quarter of the interval (OrderedConsumer while a gate waits on the group's positions)."""
        if not bootstrap:
            raise ValueError("no bootstrap broker")
        self.group_id = group_id
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self._assignor = assignor
        self._protocol_name = protocol_name
        self._session_timeout_ms = session_timeout_ms
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._request_timeout_s = request_timeout_ms / 1000
        self._on_heartbeat = on_heartbeat
        self._hurry = hurry
        self._addresses: list[tuple[str, int]] = list(dict.fromkeys(bootstrap))
        self._next_address = 0

        self._lock = threading.RLock()  # everything below
        self._state = _State.UNJOINED
        self._member_id = ""
        self._generation_id = -1
        self._assignment: Assignment | None = None
        self._needs_rejoin = False
        self._fatal: GroupMembershipError | None = None
        self._topics: list[str] = []
        self._rejoin_requests = 0
        self._last_heartbeat_ok = time.monotonic()
        self._coordinator: tuple[int, str, int] | None = None
        #: one connection to the coordinator per user: "main" (the caller's threads) and
        #: "heartbeat" (the heartbeat thread and on_heartbeat)
        self._connections: dict[str, BrokerConnection] = {}

        self._closed = threading.Event()
        #: set by close() and hurry_now(): the heartbeat thread's sleep ends early
        self._wake = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    # -- what the caller reads -----------------------------------------------------------------

    @property
    def needs_rejoin(self) -> bool:
        """True when the caller should call join(): a rebalance began (REBALANCE_IN_PROGRESS),
        the generation ended (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, a refused commit, a session
        without a successful heartbeat), request_rejoin was called, or there is no generation
        (never joined, left)."""
        with self._lock:
            return self._needs_rejoin or self._state is _State.UNJOINED

    @property
    def assignment(self) -> Assignment | None:
        """The last assignment received (kept after its generation ended, until the next join)."""
        with self._lock:
            return self._assignment

    @property
    def generation_id(self) -> int:
        """The current generation, -1 when there is none (never joined, or it ended)."""
        with self._lock:
            return self._generation_id

    @property
    def member_id(self) -> str:
        with self._lock:
            return self._member_id

    @property
    def coordinator_id(self) -> int | None:
        """The broker id of the coordinator last found, None while it is unknown."""
        with self._lock:
            return None if self._coordinator is None else self._coordinator[0]

    def request_rejoin(self) -> None:
        """Ask for a new generation at the next join (the caller saw partition counts change):
        the next JoinGroup's subscription differs, so the coordinator rebalances even when this
        member is not the leader."""
        with self._lock:
            self._needs_rejoin = True
            self._rejoin_requests += 1

    def mark_coordinator_unknown(self) -> None:
        """For the caller whose own request to the coordinator (coordinator_request_frame) was
        answered NOT_COORDINATOR: the next request finds the coordinator again."""
        with self._lock:
            self._coordinator = None

    # -- joining -------------------------------------------------------------------------------

    def join(self, topics: list[str], timeout_s: float = 60) -> Assignment:
        """Join the group (or rejoin it) subscribed to ``topics`` and return this member's
        assignment; GroupTimeoutError if the group did not settle within ``timeout_s``,
        GroupMembershipError for an error no retry can fix."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._raise_if_unusable()
            self._topics = sorted(set(topics))
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                assignment = self._join_once(deadline)
                if assignment is not None:
                    break
                # joins again at once (MEMBER_ID_REQUIRED, a rebalance begun meanwhile)
                backoff, last = RETRY_BACKOFF_S, "the group kept rebalancing"
                if not self._closed.is_set() and time.monotonic() < deadline:
                    continue
            except _Retry as retry:
                self._retried("JoinGroup/SyncGroup", retry)
                last = str(retry)
            except OSError as exc:
                self._forget_coordinator()
                last = f"connection to the coordinator failed: {exc}"
            except BaseException:
                with self._lock:
                    self._state = _State.UNJOINED
                raise
            if self._closed.is_set() or time.monotonic() + backoff > deadline:
                with self._lock:
                    self._state = _State.UNJOINED
                if self._closed.is_set():
                    raise GroupMembershipError(f"group member of {self.group_id} closed while joining")
                raise GroupTimeoutError(f"group {self.group_id} not joined within {timeout_s:g} s: {last}")
            time.sleep(backoff)
            backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)
        self._start_heartbeats()
        return assignment

    def _join_once(self, deadline: float) -> Assignment | None:
        """One JoinGroup and, once it is answered, one SyncGroup; None when the member must
        send JoinGroup again right away."""
        conn = self._connection("main")
        with self._lock:
            self._raise_if_unusable()
            member_id = self._member_id
            user_data = struct.pack(">i", self._rejoin_requests) if self._rejoin_requests else None
            metadata = encode_subscription(self._topics, user_data)
            # signals from here on are about the generation this join makes or a later one
            self._needs_rejoin = False
            self._state = _State.PREPARING
        rebalance_wait = self._rebalance_timeout_ms / 1000 + 5  # Kafka's joinGroupTimeoutMs
        remaining = max(deadline - time.monotonic(), 1.0)
        joined = conn.request(JOIN_GROUP, JOIN_GROUP_VERSION, {
            "group_id": self.group_id, "session_timeout": self._session_timeout_ms,
            "rebalance_timeout": self._rebalance_timeout_ms, "member_id": member_id,
            "group_instance_id": self.group_instance_id, "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": self._protocol_name, "metadata": metadata}]},
            timeout_s=min(rebalance_wait, remaining))
        error = int(joined.error_code)
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            with self._lock:
                self._member_id = str(joined.member_id)
            return None
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            with self._lock:
                self._member_id = ""
            return None
        if error != ErrorCode.NONE:
            self._raise_for("JoinGroup", error, {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION})

        generation_id, member_id, leader = int(joined.generation_id), str(joined.member_id), str(joined.leader)
        if str(joined.protocol_name) != self._protocol_name:
            raise GroupMembershipError(f"group {self.group_id} chose protocol {joined.protocol_name!r}, "
                                       f"not {self._protocol_name!r}", int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        with self._lock:
            self._member_id, self._generation_id = member_id, generation_id
            self._state = _State.COMPLETING
            self._last_heartbeat_ok = time.monotonic()
        is_leader = leader == member_id
        assignments: list[dict[str, Any]] = []
        if is_leader:
            subscriptions = {str(m.member_id): decode_subscription(bytes(m.metadata)) for m in joined.members}
            log.info("group %s generation %d: leader %s assigns %d members", self.group_id, generation_id,
                     member_id, len(subscriptions))
            chosen = self._assignor(subscriptions)
            assignments = [{"member_id": m, "assignment": encode_assignment(list(chosen.get(m, [])))}
                           for m in subscriptions]
        synced = conn.request(SYNC_GROUP, SYNC_GROUP_VERSION, {
            "group_id": self.group_id, "generation_id": generation_id, "member_id": member_id,
            "group_instance_id": self.group_instance_id, "assignments": assignments},
            timeout_s=min(rebalance_wait, max(deadline - time.monotonic(), 1.0)))
        error = int(synced.error_code)
        if error in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID):
            with self._lock:
                self._generation_id = -1
                self._state = _State.PREPARING
                if error == ErrorCode.UNKNOWN_MEMBER_ID:
                    self._member_id = ""
            log.info("group %s: SyncGroup answered %s, joining again", self.group_id, error_name(error))
            return None
        if error != ErrorCode.NONE:
            self._raise_for("SyncGroup", error, set())
        partitions = decode_assignment(bytes(synced.assignment))
        assignment = Assignment(generation_id, member_id, is_leader, partitions)
        with self._lock:
            if self._generation_id != generation_id:  # the heartbeat thread ended it meanwhile
                return None
            self._assignment = assignment
            self._state = _State.STABLE
            self._last_heartbeat_ok = time.monotonic()
        log.info("group %s generation %d: member %s has %d partitions", self.group_id, generation_id,
                 member_id, len(partitions))
        return assignment

    def _raise_for(self, what: str, error: int, retry_later: set[ErrorCode]) -> None:
        """Raise what an error answer to a JoinGroup or SyncGroup means."""
        if error in _COORDINATOR_MOVED:
            raise _Retry(f"{what}: {error_name(error)}", rediscover=True)
        if error in _RETRY_LATER or error in retry_later:
            raise _Retry(f"{what}: {error_name(error)}", rediscover=False)
        failure = GroupMembershipError(f"{what} for group {self.group_id} failed: {error_name(error)}", error)
        with self._lock:
            self._state = _State.UNJOINED
            self._generation_id = -1
            if error == ErrorCode.FENCED_INSTANCE_ID:
                self._fatal = failure
        raise failure

    def _raise_if_unusable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        if self._closed.is_set():
            raise GroupMembershipError(f"group member of {self.group_id} is closed")

    # -- offsets -------------------------------------------------------------------------------

    def fetch_offsets(self, partitions: list[TopicPartition], timeout_s: float = 30.0
                      ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None: no committed offset), from the coordinator."""
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = {"group_id": self.group_id,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}

        def ask(conn: BrokerConnection) -> dict[TopicPartition, int | None]:
            response = conn.request(OFFSET_FETCH, OFFSET_FETCH_VERSION, body)
            self._check_coordinator_error("OffsetFetch", int(response.error_code))
            out: dict[TopicPartition, int | None] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    self._check_coordinator_error("OffsetFetch", code)
                    tp = TopicPartition(str(topic.name), int(p.partition_index))
                    if code != ErrorCode.NONE:
                        raise GroupMembershipError(f"OffsetFetch of {tp} in group {self.group_id}: "
                                                   f"{error_name(code)}", code)
                    out[tp] = None if p.committed_offset < 0 else int(p.committed_offset)
            return {tp: out.get(tp) for tp in partitions}

        return self._with_coordinator("OffsetFetch", ask, time.monotonic() + timeout_s)

    def commit_offsets(self, offsets: dict[TopicPartition, tuple[int, int]], timeout_s: float = 30.0) -> None:
        """Commit (offset, leader_epoch or -1) per partition with this member's generation;
        CommitFailedError if the group refuses it (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
        REBALANCE_IN_PROGRESS), after which needs_rejoin is set."""
        if not offsets:
            return
        with self._lock:
            self._raise_if_unusable()
            generation_id, member_id = self._generation_id, self._member_id
        if generation_id < 0:
            raise CommitFailedError(f"group {self.group_id}: no current generation to commit with "
                                    "(the member has not joined, or its generation ended)")
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, (offset, epoch) in offsets.items():
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "committed_offset": offset,
                                                      "committed_leader_epoch": epoch, "committed_metadata": ""})
        body = {"group_id": self.group_id, "generation_id_or_member_epoch": generation_id, "member_id": member_id,
                "group_instance_id": self.group_instance_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

        def commit(conn: BrokerConnection) -> None:
            response = conn.request(OFFSET_COMMIT, OFFSET_COMMIT_VERSION, body)
            failed: dict[TopicPartition, int] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    self._check_coordinator_error("OffsetCommit", code)
                    if code != ErrorCode.NONE:
                        failed[TopicPartition(str(topic.name), int(p.partition_index))] = code
            if not failed:
                return
            codes = set(failed.values())
            if ErrorCode.FENCED_INSTANCE_ID in codes:
                fatal = GroupMembershipError(f"OffsetCommit for group {self.group_id}: FENCED_INSTANCE_ID",
                                             int(ErrorCode.FENCED_INSTANCE_ID))
                with self._lock:
                    self._fatal, self._needs_rejoin = fatal, True
                raise fatal
            over = codes & _GENERATION_OVER
            if over:
                code = min(over)
                self._generation_over(generation_id, code)
                raise CommitFailedError(f"OffsetCommit for group {self.group_id} generation {generation_id} "
                                        f"refused: {error_name(code)}", code)
            tp, code = next(iter(failed.items()))
            if codes <= _PARTITION_RETRIABLE:
                raise _Retry(f"OffsetCommit of {tp}: {error_name(code)}", rediscover=False)
            raise GroupMembershipError(f"OffsetCommit of {tp} in group {self.group_id}: {error_name(code)}", code)

        self._with_coordinator("OffsetCommit", commit, time.monotonic() + timeout_s)

    def _check_coordinator_error(self, what: str, code: int) -> None:
        if code in _COORDINATOR_MOVED:
            raise _Retry(f"{what}: {error_name(code)}", rediscover=True)
        if code in _RETRY_LATER:
            raise _Retry(f"{what}: {error_name(code)}", rediscover=False)

    def _generation_over(self, generation_id: int, code: int) -> None:
        """What ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or REBALANCE_IN_PROGRESS for
        ``generation_id`` means, if that is still the member's generation (Kafka's
        resetGenerationOnResponseError and requestRejoin)."""
        with self._lock:
            if self._generation_id != generation_id or self._state is _State.PREPARING:
                return  # an answer about a generation this member already left behind
            self._needs_rejoin = True
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                return
            self._generation_id = -1
            self._state = _State.UNJOINED
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self._member_id = ""

    # -- the coordinator -----------------------------------------------------------------------

    def coordinator_request_frame(self, build: Callable[[int], bytes]) -> bytes:
        """Send ``build(correlation_id)`` (a whole frame) to the current coordinator and return
        the response frame, finding the coordinator again once after a connection error; OSError
        if that fails too."""
        slot = self._slot()
        try:
            return self._connection(slot).request_frame(build)
        except (OSError, _Retry) as exc:
            log.debug("group %s: request to the coordinator failed (%s), finding it again", self.group_id, exc)
            self._forget_coordinator()
        try:
            return self._connection(slot).request_frame(build)
        except _Retry as exc:
            raise ConnectionError(f"no coordinator for group {self.group_id}: {exc}") from None

    def _slot(self) -> str:
        return "heartbeat" if threading.current_thread() is self._heartbeat_thread else "main"

    def _with_coordinator(self, what: str, call: Callable[[BrokerConnection], T], deadline: float) -> T:
        """``call`` on a connection to the coordinator, through coordinator moves and loads
        until ``deadline`` (then GroupTimeoutError)."""
        backoff = RETRY_BACKOFF_S
        slot = self._slot()
        while True:
            with self._lock:
                self._raise_if_unusable()
            try:
                return call(self._connection(slot))
            except _Retry as retry:
                self._retried(what, retry)
                last = str(retry)
            except OSError as exc:
                self._forget_coordinator()
                last = f"connection to the coordinator failed: {exc}"
            if time.monotonic() + backoff > deadline:
                raise GroupTimeoutError(f"{what} for group {self.group_id} did not complete: {last}")
            time.sleep(backoff)
            backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)

    def _retried(self, what: str, retry: _Retry) -> None:
        log.debug("group %s: %s, retrying", self.group_id, retry)
        if retry.rediscover:
            self._forget_coordinator()

    def _forget_coordinator(self) -> None:
        with self._lock:
            if self._coordinator is not None:
                log.info("group %s: coordinator %d lost, finding it again", self.group_id, self._coordinator[0])
            self._coordinator = None

    def _connection(self, slot: str) -> BrokerConnection:
        """The slot's connection to the coordinator, found first if unknown (_Retry if no
        broker knows it yet); a connection to a former coordinator is closed and replaced."""
        with self._lock:
            coordinator = self._coordinator
        if coordinator is None:
            coordinator = self._find_coordinator()
            with self._lock:
                if self._coordinator is None:
                    self._coordinator = coordinator
                    log.info("group %s: coordinator is broker %d at %s:%d", self.group_id, *coordinator)
                coordinator = self._coordinator
        _node, host, port = coordinator
        with self._lock:
            conn = self._connections.get(slot)
        if conn is not None and not conn.closed and (conn.host, conn.port) == (host, port):
            return conn
        if conn is not None:
            conn.close()
        conn = BrokerConnection(host, port, self.client_id, self._request_timeout_s)
        with self._lock:
            if self._closed.is_set():
                conn.close()
                raise GroupMembershipError(f"group member of {self.group_id} is closed")
            self._connections[slot] = conn
        return conn

    def _find_coordinator(self) -> tuple[int, str, int]:
        """FindCoordinator v3 at each known broker in turn until one answers; _Retry if none
        does (all down, or __consumer_offsets still being created: COORDINATOR_NOT_AVAILABLE)."""
        last = "no broker answered"
        with self._lock:
            addresses = list(self._addresses)
            start = self._next_address
            self._next_address += 1
        for i in range(len(addresses)):
            host, port = addresses[(start + i) % len(addresses)]
            try:
                conn = BrokerConnection(host, port, self.client_id, min(self._request_timeout_s, 10.0))
            except OSError as exc:
                last = f"{host}:{port}: {exc}"
                continue
            try:
                found = conn.request(FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                     {"key": self.group_id, "key_type": 0})
            except OSError as exc:
                last = f"{host}:{port}: {exc}"
                continue
            finally:
                conn.close()
            error = int(found.error_code)
            if error == ErrorCode.NONE:
                address = (str(found.host), int(found.port))
                with self._lock:
                    if address not in self._addresses:
                        self._addresses.append(address)  # a way in if the bootstrap brokers go
                return int(found.node_id), address[0], address[1]
            if error in _COORDINATOR_MOVED or error in _RETRY_LATER:
                last = f"{host}:{port} answered {error_name(error)}"
                continue
            raise GroupMembershipError(f"FindCoordinator for group {self.group_id}: {error_name(error)}", error)
        raise _Retry(f"no coordinator found for group {self.group_id} ({last})", rediscover=False)

    # -- heartbeats ----------------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        with self._lock:
            if self._heartbeat_thread is not None or self._closed.is_set():
                return
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                                      name=f"odradek-group-heartbeat-{self.group_id}")
            self._heartbeat_thread.start()

    def hurry_now(self) -> None:
        """Heartbeat (and run on_heartbeat) now rather than at the end of the current interval,
        then at ``hurry``'s pace: a member that just took an assignment whose gates wait on
        the group, or whose partitions others' gates may wait on. The hurried pace was only
        chosen after a heartbeat, so the first exchange of a new generation came up to a whole
        interval after the assignment (0.45 s of a 0.59 s gate wait at heartbeat.interval.ms
        500, bench ordered, a child read by another member than its parent)."""
        self._wake.set()

    def _heartbeat_loop(self) -> None:
        wait = self._heartbeat_interval_s
        while True:
            self._wake.wait(wait)
            self._wake.clear()
            if self._closed.is_set():
                return
            wait = self._heartbeat_interval_s
            try:
                if not self._heartbeat_once():
                    wait = min(RETRY_BACKOFF_S * 5, self._heartbeat_interval_s)
                elif self._hurry is not None and self._hurry():
                    wait = self._heartbeat_interval_s / HURRIED_HEARTBEATS
            except Exception:  # noqa: BLE001 - the thread must outlive any one failure
                log.exception("group %s: heartbeat failed", self.group_id)

    def _heartbeat_once(self) -> bool:
        """One heartbeat if a generation is current; False when it should be retried soon
        (the coordinator moved)."""
        with self._lock:
            if self._state not in (_State.COMPLETING, _State.STABLE):
                return True
            generation_id, member_id = self._generation_id, self._member_id
            if time.monotonic() - self._last_heartbeat_ok > self._session_timeout_ms / 1000 and not self._needs_rejoin:
                log.warning("group %s: no heartbeat succeeded for session.timeout.ms (%d ms): rejoining",
                            self.group_id, self._session_timeout_ms)
                self._needs_rejoin = True
        try:
            conn = self._connection("heartbeat")
            response = conn.request(HEARTBEAT, HEARTBEAT_VERSION, {
                "group_id": self.group_id, "generation_id": generation_id, "member_id": member_id,
                "group_instance_id": self.group_instance_id},
                timeout_s=min(self._request_timeout_s, self._session_timeout_ms / 1000))
        except _Retry as retry:
            self._retried("Heartbeat", retry)
            return False
        except OSError as exc:
            log.info("group %s: heartbeat to the coordinator failed (%s)", self.group_id, exc)
            self._forget_coordinator()
            return False
        error = int(response.error_code)
        if error in _COORDINATOR_MOVED:
            self._forget_coordinator()
            return False
        if error in _RETRY_LATER:
            return False
        with self._lock:
            current = self._generation_id == generation_id and self._state in (_State.COMPLETING, _State.STABLE)
            if not current:
                return True  # a join began meanwhile: the answer is about an old generation
            if error in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS):
                self._last_heartbeat_ok = time.monotonic()
            # the hook reads `assignment`: only once it belongs to this generation
            stable = self._state is _State.STABLE
        if error == ErrorCode.NONE:
            if self._on_heartbeat is not None and stable:
                try:
                    self._on_heartbeat(self)
                except Exception:  # noqa: BLE001 - a hook's failure must not stop the heartbeats
                    log.exception("group %s: on_heartbeat failed", self.group_id)
            return True
        if error in _GENERATION_OVER:
            log.info("group %s generation %d: heartbeat answered %s, rejoin needed", self.group_id,
                     generation_id, error_name(error))
            self._generation_over(generation_id, error)
            return True
        if error == ErrorCode.FENCED_INSTANCE_ID:
            with self._lock:
                self._fatal = GroupMembershipError(
                    f"group {self.group_id}: static member {self.group_instance_id} was fenced by another "
                    "member with the same group.instance.id (FENCED_INSTANCE_ID)", error)
                self._needs_rejoin = True
                self._state = _State.UNJOINED
                self._generation_id = -1
            return True
        log.warning("group %s: heartbeat answered %s", self.group_id, error_name(error))
        return True

    # -- leaving -------------------------------------------------------------------------------

    def leave(self) -> None:
        """Leave the group: LeaveGroup v3 for a dynamic member, so the others rebalance at once;
        a static member (KIP-345) just stops heartbeating and keeps its place until its session
        times out, as Kafka's does. Failures are logged, not raised: the session timeout removes
        the member anyway."""
        with self._lock:
            member_id, static = self._member_id, self.group_instance_id is not None
            was_joined = self._state is not _State.UNJOINED
            self._state = _State.UNJOINED
            self._generation_id = -1
            self._needs_rejoin = True
            if not static:
                self._member_id = ""
        if static or not member_id or not was_joined:
            return

        def leave(conn: BrokerConnection) -> None:
            response = conn.request(LEAVE_GROUP, LEAVE_GROUP_VERSION, {
                "group_id": self.group_id, "members": [{"member_id": member_id, "group_instance_id": None}]})
            self._check_coordinator_error("LeaveGroup", int(response.error_code))
            codes = [int(m.error_code) for m in response.members] or [int(response.error_code)]
            if any(codes):
                log.info("group %s: LeaveGroup of %s answered %s", self.group_id, member_id,
                         ", ".join(error_name(c) for c in codes))

        try:
            self._with_coordinator("LeaveGroup", leave, time.monotonic() + min(self._request_timeout_s, 5.0))
        except GroupMembershipError as exc:
            log.info("group %s: leaving failed (%s); the session timeout removes the member", self.group_id, exc)

    def close(self) -> None:
        """Stop the heartbeat thread and close the connections. It does not leave the group:
        call leave() first for a dynamic member that should go at once."""
        self._closed.set()
        self._wake.set()
        with self._lock:
            thread = self._heartbeat_thread
            connections = list(self._connections.values())
            self._connections.clear()
        for conn in connections:
            conn.abort()  # a JoinGroup or heartbeat in flight on another thread fails now
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self._request_timeout_s + 1)
        for conn in connections:
            conn.close()
