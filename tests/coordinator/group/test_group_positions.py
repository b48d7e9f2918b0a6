"""The coordinator's position exchange (KIP-253 part 7) over a real GroupCoordinator on virtual
time: who may exchange (Heartbeat's rules), what is kept (interest, and the positions their
owners report), and what forgets it (a new generation, a member leaving, the group deleted or
unloaded)."""
from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterable
from pathlib import Path

from group_rig import REBALANCE_MS, Rig, on_virtual_time
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_positions import GroupPositions
from odradek.protocol.errors import ErrorCode
from odradek.protocol.ordered_delivery_api import (
    UNKNOWN,
    ConsumerGroupPositionRequest,
    ConsumerGroupPositionResponse,
    ReportedPosition,
)
from odradek.protocol.schema import Array, Bytes, Int16, Int32, String, Struct, encode

T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))
_ASSIGNMENT = Struct(("version", Int16), ("topics", Array(Struct(("topic", String), ("partitions", Array(Int32))))),
                     ("user_data", Bytes))


def assignment(*tps: TopicPartition) -> bytes:
    """A ConsumerProtocolAssignment v0 of ``tps``."""
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
    leader = results[0].leader_id
    assignments = {m: assignment(*share) for m, share in zip(members, shares)}
    syncing = [rig.sync(m, assignments=assignments if m == leader else None) for m in members]
    assert all(s.error == ErrorCode.NONE for s in await asyncio.gather(*syncing))
    return members


def exchange(positions: GroupPositions, member: str, generation: int = 1,
             reported: dict[TopicPartition, int] | None = None, requested: tuple[TopicPartition, ...] = (),
             group: str = "g", instance: str | None = None) -> ConsumerGroupPositionResponse:
    return positions.exchange(ConsumerGroupPositionRequest(
        group, generation, member, instance,
        {tp: ReportedPosition(p, 0) for tp, p in (reported or {}).items()}, requested))


def test_a_members_position_reaches_the_member_waiting_on_it(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, waiter = await assigned_members(rig, [T0, T1], [T2])
        assert exchange(positions, owner).wanted == ()  # nobody waits on T0 or T1 yet
        asked = exchange(positions, waiter, requested=(T0,))
        assert asked.error_code == ErrorCode.NONE and asked.positions[T0].position == UNKNOWN
        told = exchange(positions, owner)
        assert told.wanted == (T0,)  # the owner is asked for T0 only
        exchange(positions, owner, reported={T0: 500})
        assert exchange(positions, waiter, requested=(T0,)).positions[T0].position == 500
        exchange(positions, owner, reported={T0: 900})
        assert exchange(positions, waiter, requested=(T0,)).positions[T0].position == 900
        view = positions.view("g")
        assert view is not None and view.interested == {T0: frozenset({waiter})}
    on_virtual_time(test, tmp_path)


def test_only_the_owner_may_report_a_partition(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, other = await assigned_members(rig, [T0], [T1])
        exchange(positions, other, requested=(T0,))
        exchange(positions, other, reported={T0: 1000})  # not its partition
        exchange(positions, owner, reported={T0: -5})  # no position
        assert exchange(positions, other, requested=(T0,)).positions[T0].position == UNKNOWN
        exchange(positions, owner, reported={T0: 10})
        assert exchange(positions, other, requested=(T0,)).positions[T0].position == 10
    on_virtual_time(test, tmp_path)


def test_a_position_nobody_waits_on_is_not_kept(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, waiter = await assigned_members(rig, [T0], [T1])
        exchange(positions, owner, reported={T0: 7})  # before anyone asked: dropped
        assert exchange(positions, waiter, requested=(T0,)).positions[T0].position == UNKNOWN
        exchange(positions, owner, reported={T0: 8})
        exchange(positions, waiter, requested=())  # the waiter's interest ends
        view = positions.view("g")
        assert view is not None and view.positions == {} and view.interested == {}
        assert exchange(positions, owner).wanted == ()
        assert exchange(positions, waiter, requested=(T0,)).positions[T0].position == UNKNOWN
    on_virtual_time(test, tmp_path)


def test_heartbeats_rules_decide_who_may_exchange(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        (member,) = await assigned_members(rig, [T0])
        assert exchange(positions, "stranger").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert exchange(positions, member, generation=2).error_code == ErrorCode.ILLEGAL_GENERATION
        assert exchange(positions, member, group="other").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert exchange(positions, member, group="").error_code == ErrorCode.INVALID_GROUP_ID
        assert exchange(positions, member, instance="ghost").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        refused = exchange(positions, "stranger", requested=(T0,))
        assert refused.positions == {} and refused.wanted == ()
        rig.join_new()  # a second member: the group prepares a rebalance
        assert exchange(positions, member).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    on_virtual_time(test, tmp_path)


def test_a_replaced_static_member_is_fenced(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        member = await rig.stable_member(assignment(T0), instance="i1")
        assert exchange(positions, member, instance="i1").error_code == ErrorCode.NONE
        assert exchange(positions, "someone-else", instance="i1").error_code == ErrorCode.FENCED_INSTANCE_ID
    on_virtual_time(test, tmp_path)


def test_a_coordinator_not_owning_or_still_loading_the_group_refuses(tmp_path: Path) -> None:
    async def main() -> None:
        rig = Rig(tmp_path)
        positions = GroupPositions(rig.c)
        assert exchange(positions, "m").error_code == ErrorCode.NOT_COORDINATOR
        rig.c.on_election(0, 0)  # loading starts; the task has not run yet
        assert exchange(positions, "m").error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await rig.scheduler.run_tasks()
        assert exchange(positions, "m").error_code == ErrorCode.UNKNOWN_MEMBER_ID
        rig.c.shutdown()
        assert exchange(positions, "m").error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    asyncio.run(main())


def test_a_new_generation_starts_with_no_positions(tmp_path: Path) -> None:
    """Its owner may resume from the committed offset, behind what the last owner reported."""
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, waiter = await assigned_members(rig, [T0], [T1])
        exchange(positions, waiter, requested=(T0,))
        exchange(positions, owner, reported={T0: 50})
        assert rig.c.leave_group("g", [(owner, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        rejoined = rig.join(member_id=waiter)  # every remaining member is back: no wait
        assert rejoined.done() and rejoined.result().generation_id == 2
        await rig.sync(waiter, generation=2, assignments={waiter: assignment(T0, T1)})
        assert exchange(positions, waiter, generation=1).error_code == ErrorCode.ILLEGAL_GENERATION
        answer = exchange(positions, waiter, generation=2, requested=(T0, T2))
        assert answer.positions[T0].position == UNKNOWN  # not the 50 of generation 1
        assert answer.wanted == (T0,)  # T0 is the waiter's own now; T2 is nobody's
        view = positions.view("g")
        assert view is not None and view.generation_id == 2 and view.positions == {}
        assert view.interested == {T0: frozenset({waiter}), T2: frozenset({waiter})}
    on_virtual_time(test, tmp_path)


def test_no_member_owns_anything_until_the_new_generation_is_synced(tmp_path: Path) -> None:
    """In CompletingRebalance every member still holds the previous generation's assignment."""
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, waiter = await assigned_members(rig, [T0], [T1])
        newcomer = rig.join_new()
        rejoins = [rig.join(member_id=m) for m in (owner, waiter)]
        assert all(j.done() and j.result().generation_id == 2 for j in [newcomer, *rejoins])
        exchange(positions, waiter, generation=2, requested=(T0,))
        told = exchange(positions, owner, generation=2, reported={T0: 30})
        assert told.error_code == ErrorCode.NONE and told.wanted == ()
        assert exchange(positions, waiter, generation=2, requested=(T0,)).positions[T0].position == UNKNOWN
        leader = rejoins[0].result().leader_id
        members = [newcomer.result().member_id, owner, waiter]
        shares = {newcomer.result().member_id: assignment(T2), owner: assignment(T0), waiter: assignment(T1)}
        synced = [rig.sync(m, generation=2, assignments=shares if m == leader else None) for m in members]
        assert all(s.error == ErrorCode.NONE for s in await asyncio.gather(*synced))
        assert exchange(positions, owner, generation=2, reported={T0: 30}).wanted == (T0,)
        assert exchange(positions, waiter, generation=2, requested=(T0,)).positions[T0].position == 30
    on_virtual_time(test, tmp_path)


def test_a_deleted_or_unloaded_group_takes_its_state_with_it(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, waiter = await assigned_members(rig, [T0], [T1])
        exchange(positions, waiter, requested=(T0,))
        exchange(positions, owner, reported={T0: 50})
        assert positions.view("g") is not None
        rig.c.on_resignation(0)  # this broker no longer leads the offsets partition
        assert positions.view("g") is None
        assert exchange(positions, waiter, requested=(T0,)).error_code == ErrorCode.NOT_COORDINATOR
        await rig.load(leader_epoch=1)  # back again: the group is read back, its positions are not
        answer = exchange(positions, waiter, requested=(T0,))
        assert answer.error_code == ErrorCode.NONE and answer.positions[T0].position == UNKNOWN
        rig.c.leave_group("g", [(owner, None), (waiter, None)])
        assert await rig.c.delete_groups(["g"]) == {"g": ErrorCode.NONE}
        assert positions.view("g") is None
    on_virtual_time(test, tmp_path)


def test_partitions_the_broker_does_not_know_are_refused_and_not_recorded(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        owner, waiter = await assigned_members(rig, [T0, T3], [T1])
        answer = positions.exchange(ConsumerGroupPositionRequest("g", 1, waiter, None, {}, (T0, T3)),
                                    known=lambda tp: tp != T3)
        assert answer.positions[T3].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert answer.positions[T0].error_code == ErrorCode.NONE
        assert exchange(positions, owner).wanted == (T0,)
    on_virtual_time(test, tmp_path)


# -- against a model -------------------------------------------------------------------------

MEMBERS = 3
SHARES = ([T0], [T1, T2], [T3])
steps = st.lists(st.tuples(st.integers(0, MEMBERS - 1),
                           st.dictionaries(st.sampled_from([T0, T1, T2, T3]), st.integers(-1, 1000), max_size=3),
                           st.frozensets(st.sampled_from([T0, T1, T2, T3]))), max_size=25)


@settings(max_examples=40, deadline=None)
@given(steps=steps)
def test_answers_match_a_model(steps: list[tuple[int, dict[TopicPartition, int], frozenset[TopicPartition]]]) -> None:
    """Any sequence of exchanges within one generation: a position answered is the last one its
    owner reported while someone was interested and that interest has lasted since; wanted is
    the member's partitions someone is interested in."""
    async def test(rig: Rig) -> None:
        positions = GroupPositions(rig.c)
        members = await assigned_members(rig, *SHARES)
        owner = {tp: i for i, share in enumerate(SHARES) for tp in share}
        interest: dict[int, frozenset[TopicPartition]] = {}
        kept: dict[TopicPartition, int] = {}
        for i, reported, requested in steps:
            answer = exchange(positions, members[i], reported=reported, requested=tuple(sorted(requested)))
            interest[i] = requested
            interesting = frozenset().union(*interest.values())
            kept = {tp: p for tp, p in kept.items() if tp in interesting}
            for tp, p in reported.items():
                if owner[tp] == i and tp in interesting and p >= 0:
                    kept[tp] = p
            assert {tp: r.position for tp, r in answer.positions.items()} == {
                tp: kept.get(tp, UNKNOWN) for tp in requested}
            assert answer.wanted == tuple(sorted(tp for tp in SHARES[i] if tp in interesting))
    with tempfile.TemporaryDirectory() as d:
        on_virtual_time(test, Path(d))
