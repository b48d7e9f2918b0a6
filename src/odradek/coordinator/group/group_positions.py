"""The group coordinator's position exchange of ordered delivery (KIP-253 part 7): how one member
of a consumer group learns how far the group has read a partition another member owns.

A member reading a partition an expansion created may deliver it only once the group has read
the partition's parent past a barrier offset (part 8, step 4); a member reading a partition that
a deleted partition feeds may deliver past a barrier only once the group has read the deleted
partition to its end (step 5). Those positions belong to other members, so every heartbeat
interval each member sends a ConsumerGroupPosition request to the group's coordinator: the
positions of its own partitions that the coordinator asked it for last time, and the partitions
whose position it wants to know. The coordinator keeps, per group:

- who is interested in which partition. A request names the member's whole interest at that
  moment (it replaces the member's previous one), so an interest that ends needs no message
  and a coordinator that lost its state has it back after one round of requests;
- the last position reported for each partition someone is interested in (nothing else is
  kept, so the state is bounded by what the members ask for).

It answers with the positions asked for (-1 where no member has reported one yet) and with the
partitions assigned to this member that someone is interested in: those the member reports next
time, when part 7's condition holds for them.

Positions are in memory only, never written to ``__consumer_offsets``. A coordinator failover
(or this broker unloading the group's offsets partition) loses them, and that costs a heartbeat
interval, not correctness: members re-send their interest with every request, and a member
reports every position the new coordinator asks for the first time it is asked (a new
coordinator counts as "not included since this consumer starts" in part 7's condition).

Positions are kept for one generation only. A new generation may give a partition to a member
that resumes from the committed offset, which may lie behind the position its previous owner
reported: answering that older position would let another member run ahead of records the
group is about to deliver again. So a new generation starts with no positions (and no interest:
the members' next requests bring it back), and only a partition's current owner may report it
(none may while the new generation's assignment is not yet handed out).

Members also say which of their partitions are blocked on a barrier, on what and since when
(BlockedTopics, each member's whole blocked set, replacing the previous one). Nothing here
decides by it: KIP-253's gates live in the members. It is kept, for the partitions each member
owns in this generation, so that operators can see a group held back by a barrier
(DescribeOrderedGroups for `odradek groups describe` and the dashboard, and the broker's
metrics): without it a member waiting for its parent's owner looks like one that stopped.

The same rules as Heartbeat decide who may exchange: NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS (retriable; no state is known while the group is read back),
UNKNOWN_MEMBER_ID for a member the group does not have, FENCED_INSTANCE_ID for a replaced static
member, ILLEGAL_GENERATION for another generation, REBALANCE_IN_PROGRESS while the group prepares
a rebalance. An exchange is not a heartbeat: it never extends a member's session.

State hangs off the GroupMetadata object (weakly): a group that is deleted, or unloaded when
this broker stops leading its offsets partition, takes its positions with it, and a group read
back later is a new object that starts empty. Runs on the broker's event loop, like the
coordinator, so nothing here needs a lock; the one reader on another thread, the metrics'
scrape (blocked_summary), reads only plain dicts that are replaced, never changed in place.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.consumer_protocol import assignment_partitions
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.group_metadata import GroupMetadata, GroupState, current_member_error
from odradek.protocol.errors import ErrorCode
from odradek.protocol.ordered_delivery_api import (
    UNKNOWN,
    BlockedPartition,
    ConsumerGroupPositionRequest,
    ConsumerGroupPositionResponse,
    OrderedGroupBlock,
    OrderedGroupDescription,
    PositionResult,
    ReportedPosition,
)

log = logging.getLogger("odradek.coordinator.group.positions")


@dataclass(slots=True)
class _Positions:
    """One group's exchange state, for one generation."""

    generation_id: int
    #: member id -> the partitions it wants the group's position of
    interest: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    #: partition -> the members interested in it (the inverse of ``interest``)
    interested: dict[TopicPartition, set[str]] = field(default_factory=dict)
    #: partition -> its last reported position, for partitions someone is interested in
    positions: dict[TopicPartition, ReportedPosition] = field(default_factory=dict)
    #: member id -> (its assignment bytes, the partitions they assign): decoded once per sync
    assigned: dict[str, tuple[bytes, frozenset[TopicPartition]]] = field(default_factory=dict)
    #: member id -> its blocked partitions, as its last request said (each value is replaced
    #: whole, never changed, so the metrics' thread can read it while the loop runs)
    blocked: dict[str, dict[TopicPartition, BlockedPartition]] = field(default_factory=dict)

    def set_interest(self, member_id: str, partitions: frozenset[TopicPartition]) -> None:
        old = self.interest.get(member_id, frozenset())
        if old == partitions:
            return
        for tp in old - partitions:
            self._lose_interest(tp, member_id)
        for tp in partitions - old:
            self.interested.setdefault(tp, set()).add(member_id)
        if partitions:
            self.interest[member_id] = partitions
        else:
            self.interest.pop(member_id, None)

    def forget_member(self, member_id: str) -> None:
        for tp in self.interest.pop(member_id, frozenset()):
            self._lose_interest(tp, member_id)
        self.assigned.pop(member_id, None)
        self.blocked.pop(member_id, None)

    def set_blocked(self, member_id: str, blocked: dict[TopicPartition, BlockedPartition]) -> None:
        if blocked:
            self.blocked[member_id] = blocked
        else:
            self.blocked.pop(member_id, None)

    def _lose_interest(self, tp: TopicPartition, member_id: str) -> None:
        members = self.interested.get(tp)
        if members is not None:
            members.discard(member_id)
            if not members:
                del self.interested[tp]
                self.positions.pop(tp, None)  # nobody waits on it: its position is not kept

    def assignment(self, member_id: str, assignment: bytes) -> frozenset[TopicPartition]:
        cached = self.assigned.get(member_id)
        if cached is not None and cached[0] == assignment:
            return cached[1]
        pairs = assignment_partitions(assignment)
        if pairs is None:
            log.debug("member %s: assignment is not a consumer protocol assignment", member_id)
        partitions = frozenset(TopicPartition(t, p) for t, p in pairs or ())
        self.assigned[member_id] = (assignment, partitions)
        return partitions


@dataclass(frozen=True, slots=True)
class GroupPositionsView:
    """What the exchange knows of one group (for describe tools and tests). ``blocked``: each
    partition a member of the group reported blocked, with the member, what it waits on and
    the group's last reported position there (UNKNOWN if none)."""

    generation_id: int
    interested: Mapping[TopicPartition, frozenset[str]]
    positions: Mapping[TopicPartition, ReportedPosition]
    blocked: Mapping[TopicPartition, OrderedGroupBlock] = field(default_factory=dict)


def _blocks(group: GroupMetadata, state: _Positions) -> dict[TopicPartition, OrderedGroupBlock]:
    """The blocks of the members still in the group (a member gone since the last request
    leaves its blocks behind until the next one), by partition."""
    positions = state.positions
    out = {}
    for member_id, blocked in list(state.blocked.items()):
        if not group.has(member_id):
            continue
        for tp, b in blocked.items():
            at = positions.get(TopicPartition(tp.topic, b.waits_on))
            out[tp] = OrderedGroupBlock(member_id, b.waits_on, b.barrier_offset,
                                        UNKNOWN if at is None else at.position, b.blocked_since_ms)
    return out


class GroupPositions:
    """The position exchange of the groups one GroupCoordinator coordinates."""

    def __init__(self, coordinator: GroupCoordinator) -> None:
        self._coordinator = coordinator
        self._groups: WeakKeyDictionary[GroupMetadata, _Positions] = WeakKeyDictionary()

    def exchange(self, request: ConsumerGroupPositionRequest,
                 known: Callable[[TopicPartition], bool] | None = None) -> ConsumerGroupPositionResponse:
        """One member's request: record its reports and interest, answer the positions it asked
        for and the partitions it should report next. ``known`` tells partitions that exist
        (the broker's metadata); the others are answered UNKNOWN_TOPIC_OR_PARTITION and are not
        recorded as interest."""
        group, error = self._member_group(request)
        if error is not None:
            return ConsumerGroupPositionResponse(error)
        assert group is not None
        state = self._state(group)
        member_id = request.member_id
        # until SyncGroup hands out this generation's assignment a member holds the previous one's
        assigned = (frozenset() if group.is_state(GroupState.COMPLETING_REBALANCE)
                    else state.assignment(member_id, group.get(member_id).assignment))
        unknown = {tp for tp in request.requested if known is not None and not known(tp)}
        state.set_interest(member_id, frozenset(tp for tp in request.requested if tp not in unknown))
        state.set_blocked(member_id, {tp: b for tp, b in request.blocked.items() if tp in assigned})
        for tp, reported in request.reported.items():
            # only the partition's owner in this generation may speak for it, and only while
            # someone waits on it; a negative position is no position
            if tp in assigned and tp in state.interested and reported.position >= 0:
                state.positions[tp] = reported
        positions = {}
        for tp in request.requested:
            if tp in unknown:
                positions[tp] = PositionResult(UNKNOWN, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                at = state.positions.get(tp)
                positions[tp] = PositionResult(UNKNOWN if at is None else at.position)
        wanted = tuple(sorted(tp for tp in assigned if tp in state.interested))
        return ConsumerGroupPositionResponse(ErrorCode.NONE, 0, positions, wanted)

    def view(self, group_id: str) -> GroupPositionsView | None:
        """The group's exchange state, if this coordinator has the group and any state for it."""
        group = self._coordinator.manager.get(group_id)
        state = None if group is None else self._groups.get(group)
        if group is None or state is None or state.generation_id != group.generation_id:
            return None
        return GroupPositionsView(state.generation_id,
                                  {tp: frozenset(m) for tp, m in state.interested.items()},
                                  dict(state.positions), _blocks(group, state))

    def describe(self, group_id: str) -> OrderedGroupDescription:
        """DescribeOrderedGroups' answer for one group: the coordinator's errors as for an
        exchange (but an Empty group is described, with no block), GROUP_ID_NOT_FOUND for a
        group this coordinator does not have."""
        error = self._coordinator.group_error(group_id)
        if error is not None:
            return OrderedGroupDescription(error)
        group = self._coordinator.manager.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return OrderedGroupDescription(ErrorCode.GROUP_ID_NOT_FOUND)
        view = self.view(group_id)
        return OrderedGroupDescription(ErrorCode.NONE, group.generation_id, {} if view is None else view.blocked)

    def blocked_summary(self) -> list[tuple[str, int, float]]:
        """(group, blocked partitions, age in seconds of its oldest block) of every group with a
        block, for the broker's metrics. Called on the scrape's thread: it reads copies of what
        the event loop replaces (the group list, each member's blocked set)."""
        now_ms = self._coordinator.clock.milliseconds()
        out = []
        for group in self._coordinator.manager.local_groups():
            state = self._groups.get(group)
            if state is None or state.generation_id != group.generation_id or not state.blocked:
                continue
            blocks = _blocks(group, state)
            if blocks:
                oldest = min(b.blocked_since_ms for b in blocks.values())
                out.append((group.group_id, len(blocks), max(0, now_ms - oldest) / 1000))
        return sorted(out)

    def _member_group(self, request: ConsumerGroupPositionRequest) -> tuple[GroupMetadata | None, ErrorCode | None]:
        """The group, if this member of this generation may exchange now; else the error
        Heartbeat would answer (GroupCoordinator.heartbeat), except that a group being loaded
        is COORDINATOR_LOAD_IN_PROGRESS: Heartbeat lets the member carry on, but there are no
        positions to answer with yet."""
        coordinator = self._coordinator
        error = coordinator.group_error(request.group_id)
        if error is not None:
            return None, error
        group = coordinator.manager.get(request.group_id)
        if group is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.DEAD):
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = current_member_error(group, request.member_id, request.group_instance_id)
        if error is None and request.generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and group.is_state(GroupState.EMPTY):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error is None and group.is_state(GroupState.PREPARING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        return (None, error) if error is not None else (group, None)

    def _state(self, group: GroupMetadata) -> _Positions:
        """The group's state for its current generation; members that left are forgotten."""
        state = self._groups.get(group)
        if state is None or state.generation_id != group.generation_id:
            state = self._groups[group] = _Positions(group.generation_id)
        gone = state.interest.keys() | state.assigned.keys() | state.blocked.keys()
        for member_id in [m for m in gone if not group.has(m)]:
            state.forget_member(member_id)
        return state
