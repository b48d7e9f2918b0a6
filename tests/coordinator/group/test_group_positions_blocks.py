"""What the coordinator keeps of KIP-253 blocks for operators (BlockedTopics of
ConsumerGroupPosition; DescribeOrderedGroups and the broker's metrics read it), over a real
GroupCoordinator on virtual time: each member's latest blocked set, for its own partitions only,
with the group's position of what each block waits on; forgotten with the member and the
generation."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from group_rig import REBALANCE_MS, START_MS, Rig, on_virtual_time

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_positions import GroupPositions
from odradek.protocol.errors import ErrorCode
from odradek.protocol.ordered_delivery_api import (
    READ_TO_END,
    UNKNOWN,
    BlockedPartition,
    ConsumerGroupPositionRequest,
    OrderedGroupBlock,
    OrderedGroupDescription,
    ReportedPosition,
)
from odradek.protocol.schema import Array, Bytes, Int16, Int32, String, Struct, encode

T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))
_ASSIGNMENT = Struct(("version", Int16), ("topics", Array(Struct(("topic", String), ("partitions", Array(Int32))))),
                     ("user_data", Bytes))


def assignment(*tps: TopicPartition) -> bytes:
    topics: dict[str, list[int]] = {}
    for tp in tps:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return encode(_ASSIGNMENT, (0, list(topics.items()), b""))


async def assigned_members(rig: Rig, *shares: Iterable[TopicPartition]) -> list[str]:
    """A group of len(shares) members at generation 1, member i assigned shares[i]."""
    joining = [rig.join_new() for _ in shares]
    rig.advance(REBALANCE_MS)
    results = [j.result() for j in joining]
    members = [r.member_id for r in results]
    assignments = {m: assignment(*share) for m, share in zip(members, shares)}
    syncing = [rig.sync(m, assignments=assignments if m == results[0].leader_id else None) for m in members]
    assert all(s.error == ErrorCode.NONE for s in await asyncio.gather(*syncing))
    return members


def send(positions: GroupPositions, member: str, blocked: dict[TopicPartition, BlockedPartition],
         reported: dict[TopicPartition, int] | None = None, requested: tuple[TopicPartition, ...] = (),
         generation: int = 1) -> int:
    """One ConsumerGroupPosition request carrying ``blocked``; its top-level error code."""
    return positions.exchange(ConsumerGroupPositionRequest(
        "g", generation, member, None, {tp: ReportedPosition(p, 0) for tp, p in (reported or {}).items()},
        requested, blocked)).error_code


def test_a_members_blocks_are_kept_with_the_group_position_they_wait_on(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        parent_owner, child_owner = await assigned_members(rig, [T0, T1], [T2, T3])
        since = rig.clock.milliseconds() - 12_000
        # T2 (split from T0 by an expansion) waits for offset 120 of T0; T3 for T1 read to its end
        blocks = {T2: BlockedPartition(0, 120, since), T3: BlockedPartition(1, READ_TO_END, since + 4_000),
                  T0: BlockedPartition(1, 5, since)}  # not the member's partition: not kept
        assert send(positions, child_owner, blocks, requested=(T0, T1)) == ErrorCode.NONE
        view = positions.view("g")
        assert view is not None and view.blocked == {
            T2: OrderedGroupBlock(child_owner, 0, 120, UNKNOWN, since),
            T3: OrderedGroupBlock(child_owner, 1, READ_TO_END, UNKNOWN, since + 4_000)}
        send(positions, parent_owner, {}, reported={T0: 57, T1: 300})
        described = positions.describe("g")
        assert described.error_code == ErrorCode.NONE and described.generation_id == 1
        assert described.blocked[T2].group_position == 57 and described.blocked[T3].group_position == 300
        assert positions.blocked_summary() == [("g", 2, 12.0)]
        rig.advance(3_000)
        assert positions.blocked_summary() == [("g", 2, 15.0)]
        # each request's set replaces the last: T2 passed its barrier
        send(positions, child_owner, {T3: blocks[T3]}, requested=(T1,))
        assert set(positions.describe("g").blocked) == {T3}
        assert positions.blocked_summary() == [("g", 1, 11.0)]
        send(positions, child_owner, {}, requested=())
        assert positions.describe("g") == OrderedGroupDescription(ErrorCode.NONE, 1, {})
        assert positions.blocked_summary() == []
    on_virtual_time(test, tmp_path)


def test_a_block_from_a_clock_ahead_has_no_negative_age(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        (member,) = await assigned_members(rig, [T0, T1])
        send(positions, member, {T1: BlockedPartition(0, 10, rig.clock.milliseconds() + 60_000)})
        assert positions.blocked_summary() == [("g", 1, 0.0)]
    on_virtual_time(test, tmp_path)


def test_refused_requests_record_no_block(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        (member,) = await assigned_members(rig, [T0, T1])
        assert send(positions, member, {T1: BlockedPartition(0, 10, START_MS)}, generation=2) \
            == ErrorCode.ILLEGAL_GENERATION
        assert send(positions, "stranger", {T1: BlockedPartition(0, 10, START_MS)}) == ErrorCode.UNKNOWN_MEMBER_ID
        assert positions.describe("g").blocked == {}
    on_virtual_time(test, tmp_path)


def test_blocks_go_with_the_member_and_the_generation(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        first, second = await assigned_members(rig, [T0, T2], [T1, T3])
        now = rig.clock.milliseconds()
        send(positions, first, {T2: BlockedPartition(0, 10, now)})
        send(positions, second, {T3: BlockedPartition(1, 10, now)})
        assert set(positions.describe("g").blocked) == {T2, T3}
        assert rig.c.leave_group("g", [(first, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        # the group prepares a rebalance: the member that left has no block any more
        assert set(positions.describe("g").blocked) == {T3}
        assert positions.blocked_summary() == [("g", 1, 0.0)]
        rejoined = rig.join(member_id=second)
        assert rejoined.done() and rejoined.result().generation_id == 2
        await rig.sync(second, generation=2, assignments={second: assignment(T0, T1, T2, T3)})
        described = positions.describe("g")
        assert described.generation_id == 2 and described.blocked == {}  # generation 1's blocks are gone
        assert positions.blocked_summary() == []
    on_virtual_time(test, tmp_path)


def test_describe_answers_the_coordinators_errors(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig(tmp_path)
        positions = GroupPositions(rig.c)
        assert positions.describe("g").error_code == ErrorCode.NOT_COORDINATOR
        await rig.load()
        assert positions.describe("g") == OrderedGroupDescription(ErrorCode.GROUP_ID_NOT_FOUND)
        assert positions.describe("").error_code == ErrorCode.INVALID_GROUP_ID
        rig.c.shutdown()
        assert positions.describe("g").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    asyncio.run(main())
