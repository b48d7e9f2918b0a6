"""One consumer group as its coordinator holds it: Kafka's GroupMetadata and MemberMetadata.

Pure state, no I/O and no timers: the GroupCoordinator decides when things happen, this module
keeps the group consistent while they do (who leads, which protocol the members agree on,
which members the current rebalance still waits for).

The group states and their legal predecessors are Kafka's (GroupMetadata.scala):

    Empty --join--> PreparingRebalance --all joined--> CompletingRebalance --leader's sync--> Stable
    any live state --join/leave/expiry--> PreparingRebalance;  Empty/any --unload, delete--> Dead
"""
from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.consumer_protocol import subscription_topics
from odradek.protocol.errors import ErrorCode


class GroupState(enum.Enum):
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
    pass


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset (Kafka's OffsetAndMetadata); timestamps in ms since the epoch."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0


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
    heartbeat_timer: Any = None  # the coordinator's handle for this member's session expiry

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None and not self.awaiting_join.done()

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None and not self.awaiting_sync.done()

    def protocols(self) -> list[str]:
        return [name for name, _ in self.supported_protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.supported_protocols:
            if name == protocol:
                return data
        raise IllegalGroupStateError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Joining again with the very same protocols and metadata (a lost JoinGroup answer)."""
        return self.supported_protocols == protocols


class GroupMetadata:
    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY, now_ms: int = 0) -> None:
        self.group_id = group_id
        self.state = state
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
        # offset writes in flight per partition: OffsetFetch with require_stable answers
        # UNSTABLE_OFFSET_COMMIT for them, and expiry leaves a group with any alone
        self.pending_offset_commits: Counter[TopicPartition] = Counter()
        # the topics the members subscribe to, as of the current generation (Kafka's
        # subscribedTopics); None where unknown (another protocol type, unreadable metadata)
        self.subscribed: set[str] | None = None
        # the coordinator's timers: DelayedJoin or InitialDelayedJoin, and DelayedSync
        self.join_timer: Any = None
        self.in_initial_delay = False
        self.sync_timer: Any = None

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
                f"{len(self.members)} members)")

    # -- state ---------------------------------------------------------------------------------

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalGroupStateError(f"group {self.group_id}: {self.state.value} -> {state.value}")
        self.state = state
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
        if member.is_awaiting_join:
            member.awaiting_join.set_result(JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))  # type: ignore[union-attr]
        if member.is_awaiting_sync:
            member.awaiting_sync.set_result(SyncResult(ErrorCode.FENCED_INSTANCE_ID))  # type: ignore[union-attr]
        member.awaiting_join = member.awaiting_sync = None
        member.member_id = new_id
        self.members[new_id] = member
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[group_instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    def update_member(self, member: MemberMetadata, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, on_join: asyncio.Future[JoinResult] | None) -> None:
        if on_join is not None and member.is_awaiting_join and member.awaiting_join is not on_join:
            # the member sent JoinGroup again before its first was answered (it gave up on
            # it): the first gets an answer anyway, or every response behind it on that
            # connection would wait forever (responses go out in request order)
            member.awaiting_join.set_result(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))  # type: ignore[union-attr]
        member.supported_protocols = protocols
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
