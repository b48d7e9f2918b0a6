"""Kafka's GroupCoordinator: the classic consumer group rebalance protocol.

Members find the coordinator (FindCoordinator), join (JoinGroup), wait until every member has
rejoined or the rebalance timeout passes, and get a generation; the leader computes the
assignment and hands it over in SyncGroup, which the coordinator writes to `__consumer_offsets`
before every member gets its share. Heartbeats keep a member alive and carry the news of the
next rebalance (REBALANCE_IN_PROGRESS). The behaviour, error by error, is Apache Kafka 3.x's
(GroupCoordinator.scala): where a client expects ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
REBALANCE_IN_PROGRESS or FENCED_INSTANCE_ID, it gets exactly that.

Everything runs on the broker's event loop, so a group needs no lock. Kafka's purgatory
operations become loop timers: DelayedJoin (the rebalance timeout), InitialDelayedJoin
(group.initial.rebalance.delay.ms, so a group starting with many members rebalances once),
DelayedHeartbeat (each member's session timeout) and DelayedSync (members that never sync).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group import group_records
from odradek.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    JoinResult,
    MemberMetadata,
    OffsetAndMetadata,
    SyncResult,
)
from odradek.coordinator.group.group_metadata_manager import (
    GROUP_WRITE_ERRORS,
    OFFSET_WRITE_ERRORS,
    OFFSETS_TOPIC,
    GroupMetadataManager,
    now_ms,
)
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.group.coordinator")

#: how long a member told MEMBER_ID_REQUIRED, or a new member, has to (re)join (Kafka's
#: GroupCoordinator.NewMemberJoinTimeoutMs)
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups' view of a group: members with their subscription and assignment bytes."""

    state: str
    protocol_type: str
    protocol_name: str
    # (member id, group instance id, client id, client host, metadata, assignment)
    members: list[tuple[str, str | None, str, str, bytes, bytes]]


class GroupCoordinator:
    def __init__(self, manager: GroupMetadataManager, config: GroupConfig) -> None:
        self.manager = manager
        self.config = config
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
        if owned.task is not None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    # -- JoinGroup -----------------------------------------------------------------------------

    async def join_group(self, group_id: str, member_id: str, group_instance_id: str | None,
                         require_known_member_id: bool, client_id: str, client_host: str,
                         rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                         protocols: list[tuple[str, bytes]], supports_skip_assignment: bool) -> JoinResult:
        error = self.group_error(group_id)
        if error is not None:
            return JoinResult(error, member_id)
        if not self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        unknown = member_id == ""
        group = self.manager.get(group_id)
        if group is None:
            if not unknown:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = self.manager.add(GroupMetadata(group_id, GroupState.EMPTY, now_ms()))
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[JoinResult] = loop.create_future()
        if unknown:
            immediate = self._new_member_join(group, group_instance_id, require_known_member_id, client_id,
                                              client_host, rebalance_timeout_ms, session_timeout_ms,
                                              protocol_type, protocols, answer, supports_skip_assignment)
        else:
            immediate = self._current_member_join(group, member_id, group_instance_id, client_id, client_host,
                                                  rebalance_timeout_ms, session_timeout_ms, protocol_type,
                                                  protocols, answer)
        if immediate is not None:
            return immediate
        self._try_complete_join_if_preparing(group)  # Kafka checks after every JoinGroup
        return await answer

    def _new_member_join(self, group: GroupMetadata, group_instance_id: str | None, require_known: bool,
                         client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                         protocol_type: str, protocols: list[tuple[str, bytes]],
                         answer: asyncio.Future[JoinResult], supports_skip: bool) -> JoinResult | None:
        if group.is_state(GroupState.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(protocol_type, [p for p, _ in protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        # Kafka's member ids: the client id (a static member's instance id) and a UUID
        new_id = f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"
        if group_instance_id is not None:
            old_id = group.static_member_id(group_instance_id)
            if old_id is not None:
                return self._update_static_member(group, old_id, new_id, group_instance_id, protocols,
                                                  rebalance_timeout_ms, session_timeout_ms, answer, supports_skip)
        elif require_known:
            # KIP-394: the member must come back with this id, so a join whose answer was lost
            # leaves no orphan member behind
            group.pending_members.add(new_id)
            self._schedule_pending_expiry(group, new_id, session_timeout_ms)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, new_id)
        self._add_member_and_rebalance(group, new_id, group_instance_id, client_id, client_host,
                                       rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, answer)
        return None

    def _current_member_join(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                             client_id: str, client_host: str, rebalance_timeout_ms: int,
                             session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                             answer: asyncio.Future[JoinResult]) -> JoinResult | None:
        if group.is_state(GroupState.DEAD):
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports_protocols(protocol_type, [p for p, _ in protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in group.pending_members:
            self._add_member_and_rebalance(group, member_id, group_instance_id, client_id, client_host,
                                           rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols,
                                           answer)
            return None
        error = self._member_error(group, member_id, group_instance_id)
        if error is not None:
            return JoinResult(error, member_id)
        member = group.get(member_id)
        if group.is_state(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              answer)
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            if member.matches(protocols):  # its JoinGroup answer was lost: the same one again
                return self._join_result(group, member_id)
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms, session_timeout_ms,
                                              answer)
        elif group.is_state(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # the leader rejoining, or a changed subscription: a new assignment is needed
                self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                                  session_timeout_ms, answer)
            else:
                result = self._join_result(group, member_id)
                result.members = []
                return result
        else:  # Empty: no member to speak of
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        return None

    def _join_result(self, group: GroupMetadata, member_id: str) -> JoinResult:
        leader = group.is_leader(member_id)
        return JoinResult(ErrorCode.NONE, member_id, group.generation_id, group.protocol_type,
                          group.protocol_name, group.leader_id or "",
                          members=group.current_member_metadata() if leader else [])

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
                                  client_id: str, client_host: str, rebalance_timeout_ms: int,
                                  session_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                                  answer: asyncio.Future[JoinResult]) -> None:
        member = MemberMetadata(member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,
                                session_timeout_ms, protocol_type, protocols, is_new=True)
        if group.is_state(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, answer)
        self._schedule_heartbeat_expiry(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(self, group: GroupMetadata, member: MemberMetadata,
                                     protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                                     session_timeout_ms: int, answer: asyncio.Future[JoinResult]) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, answer)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _update_static_member(self, group: GroupMetadata, old_id: str, new_id: str, instance_id: str,
                              protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int, session_timeout_ms: int,
                              answer: asyncio.Future[JoinResult], supports_skip: bool) -> JoinResult | None:
        """KIP-345: a static member that restarted takes its old place under a new member id;
        in a Stable group whose protocol does not change, without a rebalance."""
        old_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        old = (member.supported_protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, answer)
        self._schedule_heartbeat_expiry(group, member)
        if group.is_state(GroupState.STABLE):
            if group.select_protocol() == group.protocol_name:
                asyncio.get_running_loop().create_task(self._persist_static_member(
                    group, member, old_id, old, old_leader, answer, supports_skip))
                return None
            self._maybe_prepare_rebalance(group, f"static member {instance_id} changed its protocols")
        elif group.is_state(GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"static member {instance_id} rejoined")
        return None  # PreparingRebalance: it simply waits with the others

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
        group.transition_to(GroupState.PREPARING_REBALANCE, now_ms())
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id, group.generation_id,
                 reason)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self._start_initial_delayed_join(group, delay, remaining)
        else:
            self._start_delayed_join(group)
            self._try_complete_join(group)

    def _start_delayed_join(self, group: GroupMetadata) -> None:
        self._cancel_join(group)
        group.join_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms() / 1000, self._complete_join, group)

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

        group.join_timer = asyncio.get_running_loop().call_later(delay_ms / 1000, expire)

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
        group.init_next_generation(now_ms())
        if group.is_state(GroupState.EMPTY):
            log.info("group %s: generation %d with no members", group.group_id, group.generation_id)
            asyncio.get_running_loop().create_task(self._store_group(group, {}))
            return
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name, group.leader_id)
        for member in group.members.values():
            if member.is_awaiting_join:
                member.awaiting_join.set_result(self._join_result(group, member.member_id))  # type: ignore[union-attr]
            member.awaiting_join = None
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
        group.sync_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms() / 1000, expire)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.is_awaiting_sync:
                member.awaiting_sync.set_result(SyncResult(error))  # type: ignore[union-attr]
            member.awaiting_sync = None

    # -- SyncGroup -----------------------------------------------------------------------------

    async def sync_group(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: dict[str, bytes]) -> SyncResult:
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
        error = self._member_error(group, member_id, group_instance_id)
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
        answer: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        if member.is_awaiting_sync:  # sent again before the first was answered (see update_member)
            member.awaiting_sync.set_result(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))  # type: ignore[union-attr]
        member.awaiting_sync = answer
        if group.is_leader(member_id):
            full = {m: assignments.get(m, b"") for m in group.members}
            write = self._store_group(group, full)  # the record is built now, from the group as it is
            asyncio.get_running_loop().create_task(self._store_assignment(group, generation_id, full, write))
        return await answer

    async def _store_assignment(self, group: GroupMetadata, generation_id: int, assignment: dict[str, bytes],
                                write: Awaitable[ErrorCode]) -> None:
        error = await write
        if not group.is_state(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation_id:
            return  # the group moved on meanwhile: its members were told already
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        for member_id, data in assignment.items():
            member = group.members.get(member_id)
            if member is None:
                continue
            member.assignment = data
            if member.is_awaiting_sync:
                member.awaiting_sync.set_result(  # type: ignore[union-attr]
                    SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, data))
                self._schedule_heartbeat_expiry(group, member)
            member.awaiting_sync = None
        group.transition_to(GroupState.STABLE, now_ms())
        log.info("group %s: stable at generation %d", group.group_id, group.generation_id)

    def _store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> Awaitable[ErrorCode]:
        """Write the group's metadata record (built now); the error as SyncGroup reports it."""
        value = group_records.group_metadata_value(group, assignment)
        return self._mapped(self.manager.store(group.group_id, [(group_records.group_metadata_key(group.group_id),
                                                                 value)]), GROUP_WRITE_ERRORS)

    @staticmethod
    async def _mapped(write: Awaitable[ErrorCode], errors: dict[ErrorCode, ErrorCode]) -> ErrorCode:
        error = await write
        return errors.get(error, error)

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
        error = self._member_error(group, member_id, group_instance_id)
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
                error = self._member_error(group, member_id, instance_id)
                results.append(error if error is not None else self._remove(group, member_id, "left the group"))
        return ErrorCode.NONE, results

    def _remove(self, group: GroupMetadata, member_id: str, reason: str) -> ErrorCode:
        """Kafka's removeMemberAndUpdateGroup."""
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._cancel_heartbeat(member)
        if member.is_awaiting_join:
            member.awaiting_join.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, ""))  # type: ignore[union-attr]
        if member.is_awaiting_sync:
            member.awaiting_sync.set_result(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))  # type: ignore[union-attr]
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

    def _member_error(self, group: GroupMetadata, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateCurrentMember: a static member's instance id must map to this member
        id (else it was replaced: FENCED_INSTANCE_ID); a dynamic member must exist."""
        if group_instance_id is not None:
            current = group.static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return None
        return None if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID

    # -- session timeouts ----------------------------------------------------------------------

    def _schedule_heartbeat_expiry(self, group: GroupMetadata, member: MemberMetadata,
                                   timeout_ms: int | None = None) -> None:
        self._cancel_heartbeat(member)
        member.heartbeat_timer = asyncio.get_running_loop().call_later(
            (member.session_timeout_ms if timeout_ms is None else timeout_ms) / 1000,
            self._heartbeat_expired, group, member)

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

        asyncio.get_running_loop().call_later(session_timeout_ms / 1000, expire)

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

    # -- offsets -------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None,
                             generation_id: int, offsets: dict[TopicPartition, OffsetAndMetadata]
                             ) -> dict[TopicPartition, ErrorCode]:
        error = self.group_error(group_id, allow_empty=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.manager.get(group_id)
        if group is None:
            if generation_id >= 0:
                # a member of a generation this coordinator never saw (or an old one)
                return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)
            group = self.manager.add(GroupMetadata(group_id, GroupState.EMPTY, now_ms()))
        error = self._commit_error(group, generation_id, member_id, group_instance_id)
        if error is None and group.is_state(GroupState.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        if error is not None:
            return dict.fromkeys(offsets, error)
        if group.is_state(GroupState.STABLE, GroupState.PREPARING_REBALANCE) and group.has(member_id):
            self._schedule_heartbeat_expiry(group, group.get(member_id))
        return await self._store_offsets(group, offsets)

    def _commit_error(self, group: GroupMetadata, generation_id: int, member_id: str,
                      group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateOffsetCommit: a member must be current and of this generation; a
        commit without member or generation (a consumer using assign()) only to an Empty group."""
        if group.is_state(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_state(GroupState.EMPTY):
            return None  # a consumer using assign(): the group only stores its offsets
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = self._member_error(group, member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            return error
        if not group.is_state(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    async def _store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
                             ) -> dict[TopicPartition, ErrorCode]:
        too_large = {tp for tp, o in offsets.items()
                     if len(o.metadata.encode()) > self.config.offset_metadata_max_bytes}
        valid = {tp: o for tp, o in offsets.items() if tp not in too_large}
        results: dict[TopicPartition, ErrorCode] = dict.fromkeys(too_large, ErrorCode.OFFSET_METADATA_TOO_LARGE)
        if not valid:
            return results
        records: list[tuple[bytes, bytes | None]] = [
            (group_records.offset_commit_key(group.group_id, tp), group_records.offset_commit_value(o))
            for tp, o in valid.items()]
        group.pending_offset_commits.update(valid.keys())
        try:
            error = await self._mapped(self.manager.store(group.group_id, records), OFFSET_WRITE_ERRORS)
        finally:
            pending = group.pending_offset_commits
            for tp in valid:
                pending[tp] -= 1
                if not pending[tp]:
                    del pending[tp]
        if error == ErrorCode.NONE and not group.is_state(GroupState.DEAD):
            group.offsets.update(valid)
        results.update(dict.fromkeys(valid, error))
        return results

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool = False
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | ErrorCode | None]]:
        """Committed offsets of `partitions` (all the group has if None); None where none, and
        with `require_stable` (KIP-447) UNSTABLE_OFFSET_COMMIT where a commit is being written."""
        error = self.group_error(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group = self.manager.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.NONE, {} if partitions is None else dict.fromkeys(partitions)
        result: dict[TopicPartition, OffsetAndMetadata | ErrorCode | None] = (
            dict(group.offsets) if partitions is None else {tp: group.offsets.get(tp) for tp in partitions})
        if require_stable:
            for tp in result:
                if group.pending_offset_commits[tp]:
                    result[tp] = ErrorCode.UNSTABLE_OFFSET_COMMIT
        return ErrorCode.NONE, result

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Kafka's handleDeleteOffsets (KIP-496): only offsets of topics no member subscribes to."""
        error = self.group_error(group_id)
        if error is not None:
            return error, {}
        group = self.manager.get(group_id)
        if group is None or group.is_state(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if not group.is_state(GroupState.EMPTY) and group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP, {}
        empty = group.is_state(GroupState.EMPTY)
        results = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if not empty and group.is_subscribed_to(tp.topic)
                   else ErrorCode.NONE for tp in partitions}
        gone = [tp for tp, e in results.items() if e == ErrorCode.NONE and tp in group.offsets]
        for tp in gone:
            del group.offsets[tp]
        if gone:
            asyncio.get_running_loop().create_task(self.manager.store(
                group_id, [(group_records.offset_commit_key(group_id, tp), None) for tp in gone], durable=False))
        return ErrorCode.NONE, results

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
        dead = GroupSummary(GroupState.DEAD.value, "", "", [])
        group = self.manager.get(group_id)
        if group is None:
            return ErrorCode.NONE, dead
        stable = group.is_state(GroupState.STABLE) and group.protocol_name is not None
        members = [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                    m.metadata(group.protocol_name) if stable else b"",  # type: ignore[arg-type]
                    m.assignment if stable else b"") for m in group.members.values()]
        return ErrorCode.NONE, GroupSummary(group.state.value, group.protocol_type or "",
                                            group.protocol_name if stable else "", members)  # type: ignore[arg-type]

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
                group.transition_to(GroupState.DEAD, now_ms())
                self.manager.remove(group_id)
                tombstones: list[tuple[bytes, bytes | None]] = [
                    (group_records.offset_commit_key(group_id, tp), None) for tp in group.offsets]
                tombstones.append((group_records.group_metadata_key(group_id), None))
                group.offsets = {}
                writes[group_id] = self._mapped(self.manager.store(group_id, tombstones, durable=False),
                                                GROUP_WRITE_ERRORS)
        if writes:
            results.update(zip(writes, await asyncio.gather(*writes.values())))
        return results

    def handle_deleted_partitions(self, partitions: list[TopicPartition]) -> int:
        """Kafka's handleDeletedPartitions: a deleted topic's committed offsets leave every group
        this broker coordinates (tombstones, acks=1), so a topic re-created under the same name
        is not read from offsets of the old one. Returns how many offsets went."""
        gone_total = 0
        deleted = set(partitions)
        for group in self.manager.local_groups():
            gone = [tp for tp in group.offsets if tp in deleted]
            for tp in gone:
                del group.offsets[tp]
            if gone:
                gone_total += len(gone)
                asyncio.get_running_loop().create_task(self.manager.store(
                    group.group_id, [(group_records.offset_commit_key(group.group_id, tp), None) for tp in gone],
                    durable=False))
        if gone_total:
            log.info("removed %d committed offsets of deleted partitions", gone_total)
        return gone_total

    # -- offsets partitions coming and going ---------------------------------------------------

    def on_leadership_change(self, led: Iterable[Any], not_led: Iterable[Any]) -> None:
        """Kafka's KafkaApis.onLeadershipChange: coordination moves with the leadership of the
        __consumer_offsets partitions (``led``/``not_led``: the broker's Partition objects)."""
        for partition in led:
            if partition.tp.topic == OFFSETS_TOPIC:
                self.on_election(partition.tp.partition, partition.leader_epoch)
        for partition in not_led:
            if partition.tp.topic == OFFSETS_TOPIC:
                self.on_resignation(partition.tp.partition)

    def lags(self, high_watermark: Callable[[TopicPartition], int | None]) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, lag) of the groups this broker coordinates, for the
        partitions whose high watermark ``high_watermark`` knows (those with a local replica)."""
        lags = []
        for group in self.manager.local_groups():
            for tp, committed in group.offsets.items():
                hw = high_watermark(tp)
                if hw is not None:
                    lags.append((group.group_id, tp.topic, tp.partition, max(hw - committed.offset, 0)))
        return lags

    def on_election(self, offsets_partition: int, leader_epoch: int) -> None:
        self.manager.load(offsets_partition, leader_epoch, self._on_group_loaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        """Members of a loaded group get a fresh session: those still alive keep their place
        without a rebalance, the others expire."""
        for member in group.members.values():
            self._schedule_heartbeat_expiry(group, member)

    def on_resignation(self, offsets_partition: int) -> None:
        for group in self.manager.unload(offsets_partition):
            self._cancel_join(group)
            self._cancel_sync(group)
            for member in group.members.values():
                self._cancel_heartbeat(member)
                if member.is_awaiting_join:
                    member.awaiting_join.set_result(JoinResult(ErrorCode.NOT_COORDINATOR, member.member_id))  # type: ignore[union-attr]
                if member.is_awaiting_sync:
                    member.awaiting_sync.set_result(SyncResult(ErrorCode.NOT_COORDINATOR))  # type: ignore[union-attr]
            group.state = GroupState.DEAD

    def expire_offsets(self) -> None:
        expired = self.manager.expire_offsets(self.config.offsets_retention_ms, now_ms(), self.manager.store)
        if expired:
            log.info("expired %d committed offsets", expired)

    def shutdown(self) -> None:
        self.active = False
        for group in self.manager.local_groups():
            self._cancel_join(group)
            self._cancel_sync(group)
            for member in group.members.values():
                self._cancel_heartbeat(member)
