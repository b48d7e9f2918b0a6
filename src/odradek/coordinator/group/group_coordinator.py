"""Kafka's GroupCoordinator: the classic consumer group rebalance protocol.

Members find the coordinator (FindCoordinator), join (JoinGroup), wait until every member has
rejoined or the rebalance timeout passes, and get a generation; the leader computes the
assignment and hands it over in SyncGroup, which the coordinator writes to `__consumer_offsets`
before every member gets its share. Heartbeats keep a member alive and carry the news of the
next rebalance (REBALANCE_IN_PROGRESS). The behaviour, error by error, is Apache Kafka 3.x's
(GroupCoordinator.scala): where a client expects ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
REBALANCE_IN_PROGRESS or FENCED_INSTANCE_ID, it gets exactly that; group_metadata.GroupState
tells, state by state, what each request gets.

Everything runs on the broker's event loop, so a group needs no lock. Time and timers come in
from outside, as Kafka's GroupCoordinator takes its Time and purgatories: a Clock for the
timestamps and a Scheduler whose timers are Kafka's purgatory operations: DelayedJoin (the
rebalance timeout), InitialDelayedJoin (group.initial.rebalance.delay.ms, so a group starting
with many members rebalances once), DelayedHeartbeat (each member's session timeout) and
DelayedSync (members that never sync). JoinGroup and SyncGroup answer with a future, done now
or once the rebalance gets there (Kafka's response callbacks). Committed offsets are
offset_manager.py's; this module decides who may commit them.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.common.clock import Clock
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group import group_records
from odradek.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncResult,
    current_member_error,
)
from odradek.coordinator.group.group_metadata_manager import GROUP_WRITE_ERRORS, OFFSETS_TOPIC, GroupMetadataManager
from odradek.coordinator.group.offset_manager import FetchedOffset, OffsetManager
from odradek.coordinator.partition_loader import ProducerIdAndEpoch
from odradek.coordinator.scheduler import Scheduler
from odradek.coordinator.seams import CoordinatorPartition
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.coordinator.group.coordinator")

#: how long a member told MEMBER_ID_REQUIRED, or a new member, has to (re)join (Kafka's
#: GroupCoordinator.NewMemberJoinTimeoutMs)
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

#: the first and the longest hold on a rebalance after the group's assignment could not be stored
ASSIGNMENT_STORE_BACKOFF_MS = 100
MAX_ASSIGNMENT_STORE_BACKOFF_MS = 3200


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupRequest:
    """A JoinGroup as the coordinator takes it, whatever the request's version (Kafka's
    JoinGroupRequestData, with what KafkaApis adds: the client's id and host, and the version's
    rules)."""

    group_id: str
    member_id: str  # "" for a member's first join
    group_instance_id: str | None  # a static member's (KIP-345)
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, subscription metadata), most preferred first
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    require_known_member_id: bool  # JoinGroup v4+: a new member is told MEMBER_ID_REQUIRED first
    supports_skip_assignment: bool  # JoinGroup v9+: a static leader may be told it need not assign

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups' view of a group: members with their subscription and assignment bytes."""

    state: str
    protocol_type: str
    protocol_name: str
    # (member id, group instance id, client id, client host, metadata, assignment)
    members: list[tuple[str, str | None, str, str, bytes, bytes]]


class GroupCoordinator:
    def __init__(self, manager: GroupMetadataManager, config: GroupConfig, clock: Clock,
                 scheduler: Scheduler) -> None:
        """``scheduler`` is this coordinator's own: ``shutdown`` shuts it down."""
        self.manager = manager
        self.config = config
        self.clock = clock
        self.scheduler = scheduler
        self.offsets = OffsetManager(manager, clock, scheduler, config.offsets_retention_ms,
                                     config.offset_metadata_max_bytes)
        self.active = True

    # -- group status --------------------------------------------------------------------------

    def group_error(self, group_id: str | None, allow_empty: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus: whether this broker answers for the group now."""
        if group_id is None or (not group_id and not allow_empty):
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        owned = self.manager.ownership(group_id)
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if owned.is_loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def _new_group(self, group_id: str) -> GroupMetadata:
        return self.manager.add(GroupMetadata(group_id, GroupState.EMPTY, self.clock.milliseconds()))

    # -- JoinGroup -----------------------------------------------------------------------------

    def join_group(self, request: JoinGroupRequest) -> asyncio.Future[JoinResult]:
        """Kafka's handleJoinGroup: the answer, done now or once the rebalance completes."""
        answer: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        immediate = self._join(request, answer)
        if immediate is not None:
            answer.set_result(immediate)
        return answer

    def _join(self, request: JoinGroupRequest, answer: asyncio.Future[JoinResult]) -> JoinResult | None:
        """The answer now, or None: ``answer`` is the member's, answered later."""
        error = self.group_error(request.group_id)
        if error is not None:
            return JoinResult(error, request.member_id)
        if not self.config.min_session_timeout_ms <= request.session_timeout_ms \
                <= self.config.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id)
        unknown = request.member_id == ""
        group = self.manager.get(request.group_id)
        if group is None:
            if not unknown:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id)
            group = self._new_group(request.group_id)
        if unknown:
            immediate = self._new_member_join(group, request, answer)
        else:
            immediate = self._current_member_join(group, request, answer)
        if immediate is None:
            self._try_complete_join_if_preparing(group)  # Kafka checks after every JoinGroup
        return immediate

    def _new_member_join(self, group: GroupMetadata, request: JoinGroupRequest,
                         answer: asyncio.Future[JoinResult]) -> JoinResult | None:
        if group.is_state(GroupState.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(request.protocol_type, request.protocol_names):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        instance_id = request.group_instance_id
        # Kafka's member ids: the client id (a static member's instance id) and a UUID
        new_id = f"{instance_id if instance_id is not None else request.client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                self._update_static_member(group, old_id, new_id, instance_id, request, answer)
                return None
        elif request.require_known_member_id:
            # KIP-394: the member must come back with this id, so a join whose answer was lost
            # leaves no orphan member behind
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, request.session_timeout_ms)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        self._add_member_and_rebalance(group, new_id, request, answer)
        return None

    def _current_member_join(self, group: GroupMetadata, request: JoinGroupRequest,
                             answer: asyncio.Future[JoinResult]) -> JoinResult | None:
        member_id = request.member_id
        if group.is_state(GroupState.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(request.protocol_type, request.protocol_names):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, request, answer)
            return None
        error = current_member_error(group, member_id, request.group_instance_id)
        if error is not None:
            return JoinResult(error, member_id)
        member = group.get(member_id)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, request, answer)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(request.protocols):  # its JoinGroup answer was lost: the same one again
                return self._join_result(group, member_id)
            self._update_member_and_rebalance(group, member, request, answer)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # the leader rejoining, or a changed subscription: a new assignment is needed
                self._update_member_and_rebalance(group, member, request, answer)
            else:
                result = self._join_result(group, member_id)
                result.members = []
                return result
        else:  # Empty: no member to speak of
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        return None

    @staticmethod
    def _join_result(group: GroupMetadata, member_id: str) -> JoinResult:
        leader = group.is_leader(member_id)
        return JoinResult(ErrorCode.NONE, member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "",
                          members=group.current_member_metadata() if leader else [])

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, request: JoinGroupRequest,
                                  answer: asyncio.Future[JoinResult]) -> None:
        member = MemberMetadata(member_id, request.group_instance_id, request.client_id, request.client_host,
                                request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
                                list(request.protocols), is_new=True)
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, answer)
        self._schedule_heartbeat_expiry(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata, request: JoinGroupRequest,
                                     answer: asyncio.Future[JoinResult]) -> None:
        group.update_member(member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms,
                            answer)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _update_static_member(self, group: GroupMetadata, old_id: str, new_id: str, instance_id: str,
                              request: JoinGroupRequest, answer: asyncio.Future[JoinResult]) -> None:
        """KIP-345: a static member that restarted takes its old place under a new member id;
        in a Stable group whose protocol does not change, without a rebalance."""
        old_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        old = (member.supported_protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms,
                            answer)
        self._schedule_heartbeat_expiry(group, member)
        if group.is_state(GroupState.STABLE):
            if group.select_protocol() == group.protocol_name:
                self.scheduler.spawn(self._persist_static_member(
                    group, member, old_id, old, old_leader, answer, request.supports_skip_assignment),
                    f"group {group.group_id}: storing static member {instance_id}")
                return
            self._maybe_prepare_rebalance(group, f"static member {instance_id} changed its protocols")
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined")
        # PreparingRebalance: it simply waits with the others

    async def _persist_static_member(self, group: GroupMetadata, member: MemberMetadata, old_id: str,
                                     old: tuple[list[tuple[str, bytes]], int, int], old_leader: str | None,
                                     answer: asyncio.Future[JoinResult], supports_skip: bool) -> None:
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        error = await self._store_group(group, assignment)
        if answer.done():
            return
        new_id = member.member_id
        if error != ErrorCode.NONE:
            group.update_member(member, *old, None)
            if group.has(new_id) and member.group_instance_id is not None:
                group.replace_static_member(member.group_instance_id, new_id, old_id)
            answer.set_result(JoinResult(error, "", group.generation_id, group.protocol_type, group.protocol_name,
                                         old_leader or ""))
            return
        member.awaiting_join = None
        if supports_skip:
            # JoinGroup v9: the leader learns it leads but need not compute an assignment
            leader = group.is_leader(new_id)
            answer.set_result(JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                         group.protocol_name, group.leader_id or "", skip_assignment=leader,
                                         members=group.current_member_metadata() if leader else []))
        else:
            # older versions: keep the old leader id so the member does not think it leads and
            # send an assignment a Stable group would not pass on
            answer.set_result(JoinResult(ErrorCode.NONE, new_id, group.generation_id, group.protocol_type,
                                         group.protocol_name, old_leader or ""))

    # -- rebalancing ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        elif group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_state(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel_sync(group)
        initial = group.is_state(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.clock.milliseconds())
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id,
                 reason)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._start_initial_delayed_join(group, delay, remaining)
        elif group.failed_assignment_stores:
            # Not in Kafka: its coordinator completes this join as soon as the members are back, and
            # a member told COORDINATOR_NOT_AVAILABLE by SyncGroup rejoins at once, so while the
            # group's __consumer_offsets partition cannot take writes (under min.insync.replicas) a
            # one-member group ran 2,260 generations a second in a fault run. Hold the join for a
            # doubling backoff instead (100 ms ... 3.2 s), reset by the next stored assignment.
            delay = min(ASSIGNMENT_STORE_BACKOFF_MS << (group.failed_assignment_stores - 1),
                        MAX_ASSIGNMENT_STORE_BACKOFF_MS)
            self._start_initial_delayed_join(group, delay, 0)
        else:
            self._start_delayed_join(group)
            self._try_complete_join(group)

    def _start_delayed_join(self, group: GroupMetadata) -> None:
        self._cancel_join(group)
        group.join_timer = self.scheduler.call_later(group.rebalance_timeout_ms(), lambda: self._complete_join(group))

    def _start_initial_delayed_join(self, group: GroupMetadata, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's InitialDelayedJoin: while new members keep arriving, wait up to another
        delay each time, never past the rebalance timeout."""
        self._cancel_join(group)
        group.in_initial_delay = True

        def expire() -> None:
            group.join_timer, group.in_initial_delay = None, False
            if group.new_member_added and remaining_ms > 0:
                group.new_member_added = False
                delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
                self._start_initial_delayed_join(group, delay, max(remaining_ms - delay, 0))
            else:
                self._complete_join(group)

        group.join_timer = self.scheduler.call_later(delay_ms, expire)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """DelayedJoin.tryComplete: every member is back, so do not wait for the timeout. An
        InitialDelayedJoin always runs its course."""
        if not group.in_initial_delay and group.all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """Kafka's onCompleteJoin: drop the dynamic members that did not rejoin, start the next
        generation and answer every waiting JoinGroup; the leader gets the members' metadata."""
        self._cancel_join(group)
        if not group.is_state(GroupState.PREPARING_REBALANCE):
            return
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._cancel_heartbeat(member)
                group.remove(member.member_id)
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            self._start_delayed_join(group)
            return
        group.init_next_generation(self.clock.milliseconds())
        if group.is_state(GroupState.EMPTY):
            log.info("group %s: generation %d with no members", group.group_id, group.generation_id)
            self.scheduler.spawn(self._store_group(group, {}), f"group {group.group_id}: storing the empty group")
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            member.answer_join(self._join_result(group, member.member_id))
            member.is_new = False
            self._schedule_heartbeat_expiry(group, member)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        """Kafka's DelayedSync: members that do not send SyncGroup within the rebalance timeout
        are removed and the group rebalances without them."""
        group.pending_sync_members = set(group.members)
        generation = group.generation_id

        def expire() -> None:
            group.sync_timer = None
            if group.generation_id != generation or not group.pending_sync_members or \
                    not group.is_state(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                return
            missing = sorted(group.pending_sync_members)
            log.info("group %s: members %s did not sync within the rebalance timeout", group.group_id, missing)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self._cancel_heartbeat(member)
                    group.remove(member_id)
            self._maybe_prepare_rebalance(group, f"members {missing} failed to sync")

        self._cancel_sync(group)
        group.sync_timer = self.scheduler.call_later(group.rebalance_timeout_ms(), expire)

    @staticmethod
    def _reset_and_propagate_assignment_error(group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.answer_sync(SyncResult(error))

    # -- SyncGroup -----------------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> asyncio.Future[SyncResult]:
        """Kafka's handleSyncGroup: the answer, done now or once the leader's assignment is
        written."""
        answer: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        immediate = self._sync(group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name,
                               assignments, answer)
        if immediate is not None:
            answer.set_result(immediate)
        return answer

    def _sync(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
              protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
              answer: asyncio.Future[SyncResult]) -> SyncResult | None:
        """The answer now, or None: ``answer`` is the member's, answered later."""
        error = self.group_error(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # the rebalance in progress was lost with the old coordinator: start over at JoinGroup
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if error is not None:
            return SyncResult(error)
        group = self.manager.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_state(GroupState.DEAD):
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = current_member_error(group, member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is None and ((protocol_type is not None and protocol_type != group.protocol_type)
                              or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return SyncResult(error)
        if group.is_state(GroupState.EMPTY):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.get(member_id)
        group.pending_sync_members.discard(member_id)
        if group.is_state(GroupState.STABLE):
            self._schedule_heartbeat_expiry(group, member)
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        # CompletingRebalance: wait for the leader's assignment to be written
        member.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))  # sent again before the first was answered
        member.awaiting_sync = answer
        if group.is_leader(member_id):
            full = {m: assignments.get(m, b"") for m in group.members}
            write = self._store_group(group, full)  # the record is built now, from the group as it is
            self.scheduler.spawn(self._store_assignment(group, generation_id, full, write),
                                 f"group {group.group_id}: storing generation {generation_id}'s assignment")
        return None

    async def _store_assignment(self, group: GroupMetadata, generation_id: int, assignment: dict[str, bytes],
                                write: Awaitable[ErrorCode]) -> None:
        error = await write
        if not group.is_state(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation_id:
            return  # the group moved on meanwhile: its members were told already
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            group.failed_assignment_stores += 1
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        group.failed_assignment_stores = 0
        for member_id, data in assignment.items():
            member = group.members.get(member_id)
            if member is None:
                continue
            member.assignment = data
            if member.answer_sync(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, data)):
                self._schedule_heartbeat_expiry(group, member)
        group.transition_to(GroupState.STABLE, self.clock.milliseconds())
        log.info("group %s: stable at generation %d", group.group_id, group.generation_id)

    def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> Coroutine[Any, Any, ErrorCode]:
        """Write the group's metadata record (built now); the error as SyncGroup reports it."""
        record = (group_records.group_metadata_key(group.group_id),
                  group_records.group_metadata_value(group, assignment))
        return self.manager.store(group.group_id, [record], errors=GROUP_WRITE_ERRORS)

    # -- Heartbeat and LeaveGroup --------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        error = self.group_error(group_id)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # the member keeps going; the group is being read back
        if error is not None:
            return error
        group = self.manager.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = current_member_error(group, member_id, group_instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is not None:
            return error
        if group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._schedule_heartbeat_expiry(group, group.get(member_id))
        if group.is_state(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per leaving (member id, group instance id))."""
        error = self.group_error(group_id)
        if error is not None:
            return error, []
        group = self.manager.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID for _ in leaving]
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        results = []
        for member_id, instance_id in leaving:
            if member_id == "" and instance_id is not None:  # a static member leaving by instance id
                member_id = group.static_member_id(instance_id) or ""
                results.append(self._remove(group, member_id, "left the group (by instance id)")
                               if member_id else ErrorCode.UNKNOWN_MEMBER_ID)
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._try_complete_join_if_preparing(group)
                results.append(ErrorCode.NONE)
            else:
                error = current_member_error(group, member_id, instance_id)
                results.append(error if error is not None else self._remove(group, member_id, "left the group"))
        return ErrorCode.NONE, results

    def _remove(self, group: GroupMetadata, member_id: str, reason: str) -> ErrorCode:
        """Kafka's removeMemberAndUpdateGroup."""
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._cancel_heartbeat(member)
        member.answer_join(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, ""))
        member.answer_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        log.info("group %s: member %s %s", group.group_id, member_id, reason)
        if group.is_state(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member_id} {reason}")
        else:
            self._try_complete_join_if_preparing(group)
        return ErrorCode.NONE

    def _try_complete_join_if_preparing(self, group: GroupMetadata) -> None:
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- session timeouts ----------------------------------------------------------------------

    def _schedule_heartbeat_expiry(self, group: GroupMetadata, member: MemberMetadata,
                                   timeout_ms: int | None = None) -> None:
        self._cancel_heartbeat(member)
        member.heartbeat_timer = self.scheduler.call_later(
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._heartbeat_expired(group, member))

    @staticmethod
    def _cancel_heartbeat(member: MemberMetadata) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _heartbeat_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.is_state(GroupState.DEAD) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return  # waiting on the rebalance, which has its own timeouts
        log.info("group %s: member %s failed (no heartbeat within %d ms); removing it", group.group_id,
                 member.member_id, member.session_timeout_ms)
        self._remove(group, member.member_id, "expired")

    def _schedule_pending_expiry(self, group: GroupMetadata, member_id: str, session_timeout_ms: int) -> None:
        def expire() -> None:
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._try_complete_join_if_preparing(group)

        self.scheduler.call_later(session_timeout_ms, expire)

    @staticmethod
    def _cancel_join(group: GroupMetadata) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer, group.in_initial_delay = None, False

    @staticmethod
    def _cancel_sync(group: GroupMetadata) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
        group.sync_timer = None

    # -- OffsetCommit, OffsetFetch, OffsetDelete: who may (the offsets are offset_manager.py's) --

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]
                             ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleCommitOffsets: a commit counts as the member's heartbeat."""
        error = self.group_error(group_id, allow_empty=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.manager.get(group_id)
        if group is None:
            if generation_id >= 0:
                # a member of a generation this coordinator never saw (or an old one)
                return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)
            group = self._new_group(group_id)
        error = self._commit_error(group, generation_id, member_id, group_instance_id)
        if error is None and group.is_state(GroupState.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            return dict.fromkeys(offsets, error)
        if group.is_state(GroupState.STABLE, GroupState.PREPARING_REBALANCE) and group.has(member_id):
            self._schedule_heartbeat_expiry(group, group.get(member_id))
        return await self.offsets.store(group, offsets)

    def _commit_error(self, group: GroupMetadata, generation_id: int, member_id: str,
                      group_instance_id: str | None, transactional: bool = False) -> ErrorCode | None:
        """Kafka's validateOffsetCommit: a member must be current and of this generation; a
        commit without member or generation (a consumer using assign()) only to an Empty group.
        A transactional one without them goes to any group: TxnOffsetCommit before v3 (KIP-447)
        names neither."""
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return None  # a consumer using assign(): the group only stores its offsets
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = current_member_error(group, member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            return error
        if not transactional and not group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # -- TxnOffsetCommit and the end of transactions (KIP-98, KIP-447) -------------------------

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 offsets: dict[TopicPartition, OffsetAndMetadata], member_id: str = "",
                                 group_instance_id: str | None = None, generation_id: int = -1
                                 ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleTxnCommitOffsets: a transactional producer commits its consumer's
        offsets inside its transaction; they stay pending (OffsetManager.store_txn) until the
        transaction's marker is written here (handle_txn_completion). The group need not exist
        (it is created Empty, as for offsets-only groups); from v3 the consumer's member,
        instance and generation are checked as an OffsetCommit's are, so a zombie's
        transaction is fenced (KIP-447). Unlike an OffsetCommit it is no heartbeat and is taken
        in any state but Dead."""
        error = self.group_error(group_id)
        if error is None and producer_id < 0:
            error = ErrorCode.INVALID_PRODUCER_ID_MAPPING  # Kafka would take it for a plain commit
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.manager.get(group_id)
        if group is None:
            group = self._new_group(group_id)
        error = self._commit_error(group, generation_id, member_id, group_instance_id, transactional=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return await self.offsets.store_txn(group, ProducerIdAndEpoch(producer_id, producer_epoch), offsets)

    def handle_txn_completion(self, producer_id: int, offsets_partitions: Iterable[int], commit: bool) -> int:
        """Kafka's scheduleHandleTxnCompletion (GroupMetadataManager.handleTxnCompletion): the
        producer's transaction marker is written, and the ISR has it, on these
        __consumer_offsets partitions (their indexes); in each of their groups here, the
        offsets it left pending become committed (``commit``) or are dropped. Idempotent, as
        markers are sent again until acknowledged: a second call finds nothing pending. A
        group that moved away meanwhile is its new coordinator's to settle, from the log.
        Returns how many groups it settled."""
        settled = 0
        for group in self.manager.producer_groups(producer_id, offsets_partitions):
            if not group.is_state(GroupState.DEAD):
                count = group.complete_pending_txn_offset_commit(producer_id, commit)
                self.manager.remove_producer_group(producer_id, group.group_id)
                if count:
                    settled += 1
                    log.debug("group %s: %s %d offsets of producer %d", group.group_id,
                              "committed" if commit else "aborted", count, producer_id)
        return settled

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool = False
                      ) -> tuple[ErrorCode, dict[TopicPartition, FetchedOffset]]:
        """Kafka's handleFetchOffsets: OffsetManager.fetch, for a group this broker answers for."""
        error = self.group_error(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        return ErrorCode.NONE, self.offsets.fetch(self.manager.get(group_id), partitions, require_stable)

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Kafka's handleDeleteOffsets (KIP-496): an Empty group's offsets, or a consumer
        group's of topics no member subscribes to (OffsetManager.delete)."""
        error = self.group_error(group_id)
        if error is not None:
            return error, {}
        group = self.manager.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if not group.is_state(GroupState.EMPTY) and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, {}
        return ErrorCode.NONE, self.offsets.delete(group, partitions)

    def handle_deleted_partitions(self, partitions: list[TopicPartition]) -> int:
        """Kafka's handleDeletedPartitions (OffsetManager.remove_partitions); how many offsets went."""
        gone = self.offsets.remove_partitions(partitions)
        if gone:
            log.info("removed %d committed offsets of deleted partitions", gone)
        return gone

    def expire_offsets(self) -> None:
        """Kafka's cleanupGroupMetadata, every offsets.retention.check.interval.ms."""
        expired = self.offsets.expire()
        if expired:
            log.info("expired %d committed offsets", expired)

    def lags(self, high_watermark: Callable[[TopicPartition], int | None]) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, lag) for the broker's metrics (OffsetManager.lags)."""
        return self.offsets.lags(high_watermark)

    # -- ListGroups, DescribeGroups, DeleteGroups ----------------------------------------------

    def list_groups(self, states: set[str] | None) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        """(error, [(group id, protocol type, state)]) of the groups this broker coordinates."""
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.any_loading() else ErrorCode.NONE
        wanted = {s.lower() for s in states or ()}
        groups = [(g.group_id, g.protocol_type or "", g.state.value) for g in self.manager.local_groups()
                  if not wanted or g.state.value.lower() in wanted]
        return error, groups

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        error = self.group_error(group_id, allow_empty=True)
        if error is not None:
            return error, GroupSummary("", "", "", [])
        group = self.manager.get(group_id)
        if group is None:
            return ErrorCode.NONE, GroupSummary(GroupState.DEAD.value, "", "", [])
        # members' subscriptions and assignments only once they are settled
        protocol = group.protocol_name if group.is_state(GroupState.STABLE) else None
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata(protocol) if protocol is not None else b"",
                    m.assignment if protocol is not None else b"") for m in group.members.values()]
        return ErrorCode.NONE, GroupSummary(group.state.value, group.protocol_type or "", protocol or "", members)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        """Kafka's handleDeleteGroups: only Empty groups; their offsets and metadata get
        tombstones, answered once written here (acks=1, as Kafka does)."""
        results: dict[str, ErrorCode] = {}
        writes: dict[str, Awaitable[ErrorCode]] = {}
        for group_id in group_ids:
            error = self.group_error(group_id, allow_empty=True)
            group = self.manager.get(group_id) if error is None else None
            if error is not None:
                results[group_id] = error
            elif group is None or group.is_state(GroupState.DEAD):
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_state(GroupState.EMPTY):
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                group.transition_to(GroupState.DEAD, self.clock.milliseconds())
                self.manager.remove(group_id)
                tombstones = group_records.offset_tombstones(group_id, group.offsets)
                tombstones.append((group_records.group_metadata_key(group_id), None))
                group.offsets = {}
                writes[group_id] = self.manager.store(group_id, tombstones, durable=False, errors=GROUP_WRITE_ERRORS)
        if writes:
            results.update(zip(writes, await asyncio.gather(*writes.values())))
        return results

    # -- offsets partitions coming and going ---------------------------------------------------

    def on_leadership_change(self, led: Iterable[CoordinatorPartition],
                             not_led: Iterable[CoordinatorPartition]) -> None:
        """Kafka's KafkaApis.onLeadershipChange: coordination moves with the leadership of the
        __consumer_offsets partitions (``led``/``not_led``: the broker's Partition objects)."""
        for partition in led:
            if partition.tp.topic == OFFSETS_TOPIC:
                self.on_election(partition.tp.partition, partition.leader_epoch)
        for partition in not_led:
            if partition.tp.topic == OFFSETS_TOPIC:
                self.on_resignation(partition.tp.partition)

    def on_election(self, offsets_partition: int, leader_epoch: int) -> None:
        self.manager.load(offsets_partition, leader_epoch, self._on_group_loaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        """Members of a loaded group get a fresh session: those still alive keep their place
        without a rebalance, the others expire."""
        for member in group.members.values():
            self._schedule_heartbeat_expiry(group, member)

    def on_resignation(self, offsets_partition: int) -> None:
        """Kafka's onResignation: the partition's groups go Dead, and every member waiting for
        an answer gets NOT_COORDINATOR (it finds the new coordinator)."""
        for group in self.manager.unload(offsets_partition):
            self._stop_timers(group)
            for member in group.members.values():
                member.answer_join(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                member.answer_sync(SyncResult(ErrorCode.NOT_COORDINATOR))
            group.transition_to(GroupState.DEAD, self.clock.milliseconds())

    def _stop_timers(self, group: GroupMetadata) -> None:
        self._cancel_join(group)
        self._cancel_sync(group)
        for member in group.members.values():
            self._cancel_heartbeat(member)

    def shutdown(self) -> None:
        """No more answers: every group's timers stop. A write already started (an assignment,
        offset tombstones) runs out, its failure still logged: the broker's controlled shutdown
        has moved the offsets partitions away by now, and a cancelled tombstone would be lost."""
        self.active = False
        for group in self.manager.local_groups():
            self._stop_timers(group)
