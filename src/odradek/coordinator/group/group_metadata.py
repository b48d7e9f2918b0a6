"""One consumer group as its coordinator holds it: Kafka's GroupMetadata and MemberMetadata.

Pure state, no I/O and no timers: the GroupCoordinator decides when things happen, this module
keeps the group consistent while they do (who leads, which protocol the members agree on,
which members the current rebalance still waits for, which answers members wait for).

The group states and their legal predecessors are Kafka's (GroupMetadata.scala). Every change
of state goes through ``GroupMetadata.transition_to``, which refuses one its target does not
list in VALID_PREVIOUS:

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance --leader's sync--> Stable
    Stable, CompletingRebalance --join/leave/expiry--> PreparingRebalance --no member left--> Empty
    any state --deleted, expired, unloaded--> Dead
"""
from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.consumer_protocol import subscription_topics
from odradek.coordinator.scheduler import Timer
from odradek.protocol.errors import ErrorCode


class GroupState(enum.Enum):
    """What each request gets in each state (Kafka's GroupState comments, as this coordinator
    answers; before any of this, a broker that does not coordinate the group answers
    NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE):

    Empty: no members; the group may hold offsets.
        JoinGroup     a new member is told MEMBER_ID_REQUIRED (JoinGroup v4+) or added, which
                      starts a rebalance (PreparingRebalance, with the initial delay); a member
                      id the group does not know: UNKNOWN_MEMBER_ID
        SyncGroup     UNKNOWN_MEMBER_ID
        Heartbeat     UNKNOWN_MEMBER_ID
        LeaveGroup    UNKNOWN_MEMBER_ID for each member (NONE for one told MEMBER_ID_REQUIRED)
        OffsetCommit  stored if it names no generation (a consumer using assign()); else the
                      member's error (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION)
        OffsetFetch   the offsets
        OffsetDelete  deleted
        DeleteGroups  deleted: Dead
        expiry        offsets.retention.minutes after the group became Empty its offsets
                      expire (each commit's own age for a group without a protocol); a group
                      left without offsets dies: Dead
    PreparingRebalance: a rebalance waits for the members to rejoin, until the rebalance
        timeout (or, from Empty, group.initial.rebalance.delay.ms).
        JoinGroup     waits for the new generation; a new member is added and waits too
        SyncGroup     REBALANCE_IN_PROGRESS
        Heartbeat     REBALANCE_IN_PROGRESS: how members hear they must rejoin
        LeaveGroup    the member goes; the rebalance completes if every other one is back
        OffsetCommit  stored from a member of the current generation
        OffsetDelete  GROUP_SUBSCRIBED_TO_TOPIC for topics the members subscribe to (all
                      topics while that is unknown); NON_EMPTY_GROUP if not a consumer group
        DeleteGroups  NON_EMPTY_GROUP
    CompletingRebalance: the generation is made; members wait for the leader's assignment.
        JoinGroup     a member with the same protocols again: the generation's answer (it
                      was lost); changed protocols, or a new member: a new rebalance
        SyncGroup     waits for the leader's SyncGroup and the write of its assignment, which
                      makes the group Stable; a failed write: its error and a new rebalance
        Heartbeat     NONE
        LeaveGroup    the member goes and the group rebalances
        OffsetCommit  REBALANCE_IN_PROGRESS
        OffsetDelete  as PreparingRebalance
        DeleteGroups  NON_EMPTY_GROUP
    Stable: every member has its assignment.
        JoinGroup     the leader, a member with changed protocols or a new member: a new
                      rebalance; any other member: the current generation's answer; a
                      restarted static member takes its old place without one (KIP-345)
        SyncGroup     the member's assignment
        Heartbeat     NONE
        LeaveGroup    the member goes and the group rebalances
        OffsetCommit  stored from a member of the current generation
        OffsetDelete  as PreparingRebalance
        DeleteGroups  NON_EMPTY_GROUP
        expiry        offsets of topics the members no longer subscribe to
    Dead: deleted, expired or unloaded, and gone from the coordinator's cache, so a request
        for its id finds a new group or none (DescribeGroups: state Dead, no members). One
        that still finds the Dead group (Kafka checks for it too) gets:
        JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit  COORDINATOR_NOT_AVAILABLE
        OffsetFetch   no offsets
        OffsetDelete, DeleteGroups  GROUP_ID_NOT_FOUND

    TxnOffsetCommit (KIP-98) is taken in every state but Dead (COORDINATOR_NOT_AVAILABLE), with
    no heartbeat and no REBALANCE_IN_PROGRESS: from a producer naming no member and no
    generation (before v3), or from the current generation's member (v3+, KIP-447; else
    UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION or FENCED_INSTANCE_ID). Its offsets are pending
    until the transaction's marker: OffsetFetch gives the committed ones meanwhile, or with
    require_stable UNSTABLE_OFFSET_COMMIT.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: each state with the states a group may enter it from (Kafka's validPreviousStates)
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                               GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE,
                                GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
}


class IllegalGroupStateError(Exception):
    """A change of state the target state does not allow from the current one (a bug in the
    coordinator, as Kafka's assertValidTransition raises), or a protocol no member supports."""


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata); timestamps in ms since the epoch."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0


@dataclass(slots=True)
class PendingTxnOffset:
    """An offset a transactional producer committed (TxnOffsetCommit), waiting for its
    transaction's marker (Kafka's CommitRecordMetadataAndOffset in
    pendingTransactionalOffsetCommits): a COMMIT makes it the group's committed offset unless a
    newer one was written after it, an ABORT drops it."""

    offset: OffsetAndMetadata
    #: offset of the batch that holds it in the offsets partition; None until written there
    record_offset: int | None = None


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup is answered with."""

    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    # (member id, group instance id, subscription metadata): only the leader gets them
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (protocol name, subscription metadata), in the member's order of preference
    supported_protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # the JoinGroup / SyncGroup answer this member waits for, if any
    awaiting_join: asyncio.Future[JoinResult] | None = None
    awaiting_sync: asyncio.Future[SyncResult] | None = None
    is_new: bool = False
    heartbeat_timer: Timer | None = None  # this member's session expiry (DelayedHeartbeat)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None and not self.awaiting_join.done()

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None and not self.awaiting_sync.done()

    def answer_join(self, result: JoinResult) -> bool:
        """Kafka's maybeInvokeJoinCallback: answer the JoinGroup this member waits for, if it
        waits for one (its request may have been given up: then nothing); it waits no more.
        Whether it was answered."""
        waiting, self.awaiting_join = self.awaiting_join, None
        if waiting is None or waiting.done():
            return False
        waiting.set_result(result)
        return True

    def answer_sync(self, result: SyncResult) -> bool:
        """Kafka's maybeInvokeSyncCallback: as ``answer_join``, for the SyncGroup."""
        waiting, self.awaiting_sync = self.awaiting_sync, None
        if waiting is None or waiting.done():
            return False
        waiting.set_result(result)
        return True

    def protocols(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise IllegalGroupStateError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Joining again with the very same protocols and metadata (a lost JoinGroup answer)."""
        return self.supported_protocols == list(protocols)


class GroupMetadata:
    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY, now_ms: int = 0) -> None:
        self.group_id = group_id
        self._state = state
        self.state_timestamp_ms = now_ms  # when it entered this state (offset expiry of Empty groups)
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: set[str] = set()  # told MEMBER_ID_REQUIRED, not yet joined with it
        self.pending_sync_members: set[str] = set()
        self.new_member_added = False  # for InitialDelayedJoin
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        # offset of the batch each committed offset was written in (Kafka's appendedBatchOffset),
        # where it matters: a transaction's offsets become committed only over older ones.
        # Unknown (a group that never used transactions, an offset written before any
        # transaction's of its partition) is older than any transaction's.
        self.offset_positions: dict[TopicPartition, int] = {}
        # offset writes in flight per partition: OffsetFetch with require_stable answers
        # UNSTABLE_OFFSET_COMMIT for them, and expiry leaves a group with any alone
        self.pending_offset_commits: Counter[TopicPartition] = Counter()
        # producer id -> the offsets its open transaction committed (Kafka's
        # pendingTransactionalOffsetCommits): invisible to OffsetFetch until the marker
        self.pending_txn_offsets: dict[int, dict[TopicPartition, PendingTxnOffset]] = {}
        # the topics the members subscribe to, as of the current generation (Kafka's
        # subscribedTopics); None where unknown (another protocol type, unreadable metadata)
        self.subscribed: set[str] | None = None
        # the coordinator's timers: DelayedJoin or InitialDelayedJoin, and DelayedSync
        self.join_timer: Timer | None = None
        self.in_initial_delay = False
        self.sync_timer: Timer | None = None
        self.failed_assignment_stores = 0  # in a row; the next rebalance waits longer (see the coordinator)

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
                f"{len(self.members)} members)")

    # -- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> GroupState:
        """Read-only: a state changes only through ``transition_to``."""
        return self._state

    def is_state(self, *states: GroupState) -> bool:
        return self._state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        """Kafka's GroupMetadata.transitionTo: IllegalGroupStateError, the group unchanged, if
        ``state`` does not list the current state among its VALID_PREVIOUS."""
        if self._state not in VALID_PREVIOUS[state]:
            raise IllegalGroupStateError(
                f"group {self.group_id} must be in one of {sorted(s.value for s in VALID_PREVIOUS[state])} "
                f"to move to {state.value}, but is in {self._state.value}")
        self._state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members -------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, on_join: asyncio.Future[JoinResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        member.awaiting_join = on_join
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        if member is not None and member.group_instance_id is not None \
                and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """A static member rejoined with a new member id (it restarted): the old id is fenced
        (any answer it waits for is FENCED_INSTANCE_ID) and the member keeps its place."""
        member = self.members.pop(old_id)
        member.answer_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        member.answer_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_id
        self.members[new_id] = member
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[group_instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    def update_member(self, member: MemberMetadata, protocols: Sequence[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int,
                      on_join: asyncio.Future[JoinResult] | None) -> None:
        if on_join is not None and member.awaiting_join is not on_join:
            # the member sent JoinGroup again before its first was answered (it gave up on
            # it): the first gets an answer anyway, or every response behind it on that
            # connection would wait forever (responses go out in request order)
            member.answer_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.supported_protocols = list(protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.awaiting_join = on_join

    def all_members_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member rejoined and no MEMBER_ID_REQUIRED pending."""
        return not self.pending_members and all(m.is_awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def maybe_elect_new_joined_leader(self) -> bool:
        """The leader must be a member that rejoined; false if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                self.leader_id = member_id
                return True
        return False

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        """Kafka's supportsProtocols: a member may join if its protocol type is the group's and
        it shares a protocol with every current member (an empty group takes any non-empty one)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        candidates = self._candidate_protocols()
        return any(p in candidates for p in protocols)

    def _candidate_protocols(self) -> set[str]:
        counts = Counter(p for m in self.members.values() for p in set(m.protocols()))
        return {p for p, n in counts.items() if n == len(self.members)}

    def select_protocol(self) -> str:
        """Every member votes for its most preferred protocol that all members support; the
        most votes wins (ties: the first to get there, as Kafka's maxBy)."""
        candidates = self._candidate_protocols()
        if not candidates:
            raise IllegalGroupStateError(f"group {self.group_id}: no protocol every member supports")
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(p for p in member.protocols() if p in candidates)] += 1
        return votes.most_common(1)[0][0]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)
        self.subscribed = self.compute_subscribed_topics()
        self.pending_sync_members = set()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """What the leader gets in its JoinGroup answer to compute the assignment."""
        assert self.protocol_name is not None
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members of a consumer group subscribe to under the chosen protocol; None
        if unknown (another protocol type, or metadata that does not parse), as Kafka's
        computeSubscribedTopics."""
        if not self.members:
            return set()
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            metadata = dict(member.supported_protocols).get(self.protocol_name)
            found = None if metadata is None else subscription_topics(metadata)
            if found is None:
                return None
            topics |= found
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's isSubscribedToTopic: unknown counts as subscribed."""
        return self.subscribed is None or topic in self.subscribed

    # -- offsets -------------------------------------------------------------------------------

    @property
    def has_offsets(self) -> bool:
        """Kafka's hasOffsets: committed, being written, or pending in a transaction (a group
        with any of them is not buried)."""
        return bool(self.offsets or self.pending_offset_commits or self.pending_txn_offsets)

    def has_pending_offset_commits(self, tp: TopicPartition) -> bool:
        """Kafka's hasPendingOffsetCommitsForTopicPartition: a commit of ``tp`` being written,
        or one in an open transaction (OffsetFetch with require_stable: UNSTABLE_OFFSET_COMMIT)."""
        return bool(self.pending_offset_commits[tp]) or any(tp in pending for pending in
                                                            self.pending_txn_offsets.values())

    def _is_newer(self, tp: TopicPartition, record_offset: int | None) -> bool:
        """Kafka's olderThan, the other way round: an offset written at ``record_offset`` (None:
        just appended, not yet acknowledged) replaces the committed one if there is none or it
        was written before."""
        return (tp not in self.offsets or record_offset is None
                or self.offset_positions.get(tp, -1) < record_offset)

    def on_offset_commit_append(self, offsets: dict[TopicPartition, OffsetAndMetadata], record_offset: int) -> None:
        """Kafka's onOffsetCommitAppend: a plain commit written at ``record_offset`` is the
        committed offset unless a transaction's, written after it, was committed meanwhile.
        Where it was written is kept only by a group that uses transactions: the others'
        offsets are never ordered against a transaction's (and a position per offset of every
        group would cost memory for nothing)."""
        track = bool(self.pending_txn_offsets or self.offset_positions)
        for tp, offset in offsets.items():
            if self._is_newer(tp, record_offset):
                self.offsets[tp] = offset
                if track:
                    self.offset_positions[tp] = record_offset

    def prepare_txn_offset_commit(self, producer_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]
                                  ) -> dict[TopicPartition, PendingTxnOffset]:
        """Kafka's prepareTxnOffsetCommit: the producer's offsets are pending from now on (a
        second commit of the same partition in the transaction replaces the first); the
        entries, for the write's outcome to find them again."""
        entries = {tp: PendingTxnOffset(offset) for tp, offset in offsets.items()}
        self.pending_txn_offsets.setdefault(producer_id, {}).update(entries)
        return entries

    def on_txn_offset_commit_append(self, producer_id: int, entries: dict[TopicPartition, PendingTxnOffset],
                                    record_offset: int) -> None:
        """Kafka's onTxnOffsetCommitAppend: the entries still pending learn where they were
        written (an entry the marker or a newer commit took meanwhile is left alone)."""
        pending = self.pending_txn_offsets.get(producer_id, {})
        for tp, entry in entries.items():
            if pending.get(tp) is entry:
                entry.record_offset = record_offset

    def fail_pending_txn_offset_commit(self, producer_id: int, entries: dict[TopicPartition, PendingTxnOffset]
                                       ) -> None:
        """Kafka's failPendingTxnOffsetCommit: the write failed, its entries go (the client
        retries, maybe with another coordinator)."""
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is None:
            return
        for tp, entry in entries.items():
            if pending.get(tp) is entry:
                del pending[tp]
        if not pending:
            del self.pending_txn_offsets[producer_id]

    def complete_pending_txn_offset_commit(self, producer_id: int, commit: bool) -> int:
        """Kafka's completePendingTxnOffsetCommit, once the producer's marker is written: on
        COMMIT each pending offset becomes the committed one unless a newer one was written
        after it; on ABORT they are dropped. How many were pending (0 when the marker came
        before: markers are sent again until acknowledged)."""
        pending = self.pending_txn_offsets.pop(producer_id, None)
        if pending is None:
            return 0
        if commit:
            for tp, entry in pending.items():
                if self._is_newer(tp, entry.record_offset):
                    self.offsets[tp] = entry.offset
                    if entry.record_offset is not None:
                        self.offset_positions[tp] = entry.record_offset
        return len(pending)

    def remove_offsets(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Kafka's removeOffsets (OffsetDelete, deleted topics): the committed offsets of
        ``partitions`` and any pending in a transaction go; the partitions that had a committed
        one (whose tombstones are due)."""
        removed = []
        for tp in partitions:
            for pending in self.pending_txn_offsets.values():
                pending.pop(tp, None)
            self.offset_positions.pop(tp, None)
            if self.offsets.pop(tp, None) is not None:
                removed.append(tp)
        for producer_id in [p for p, pending in self.pending_txn_offsets.items() if not pending]:
            del self.pending_txn_offsets[producer_id]
        return removed


def current_member_error(group: GroupMetadata, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
    """Kafka's validateCurrentMember: a static member's instance id must map to this member
    id (else it was replaced: FENCED_INSTANCE_ID); a dynamic member must exist.

    Unlike Kafka, an empty member id is UNKNOWN_MEMBER_ID even with a registered instance id:
    it holds no registration, so it fences no one. librdkafka 2.16 sends it: when its own
    session timer runs out (the coordinator unreachable for session.timeout.ms, e.g. a
    FindCoordinator answer naming a broker that was just killed) it empties its member id but
    heartbeats on with its instance id, and takes FENCED_INSTANCE_ID as fatal (a 100-fault run
    of the groups workload lost both static members of a group so); UNKNOWN_MEMBER_ID makes
    it rejoin."""
    if member_id == "":
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group_instance_id is not None:
        current = group.static_member_id(group_instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if current != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        return None
    return None if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID
