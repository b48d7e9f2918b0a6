"""The GroupCoordinator's rebalance protocol on its own, over a real log and on virtual time:
the calls a client would make, in the order it makes them, and the answers Kafka gives, one
rule per test; tests/integration/test_consumer_groups.py runs real clients."""
from __future__ import annotations

from pathlib import Path

import pytest
from group_rig import INITIAL_DELAY_MS, REBALANCE_MS, SESSION_MS, Rig, on_virtual_time

from odradek.coordinator.group import group_records
from odradek.coordinator.group.group_metadata import GroupState
from odradek.coordinator.partitioning import java_string_hash, partition_for
from odradek.protocol.errors import ErrorCode


def test_java_hash_and_partition_match_kafka() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two UTF-16 units
    # a well-known Java string whose hashCode is Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(g, 50) < 50 for g in ("", "g", "x" * 40, "\U0001F600"))
    assert java_string_hash("Hello World") == -862545276  # a negative hash counts by its absolute value
    assert partition_for("Hello World", 7) == 862545276 % 7


@pytest.mark.parametrize("value", [b"", b"\x00\x09", b"\x00\x03\x00\x00\x00\x01"])
def test_unreadable_records_are_refused(value: bytes) -> None:
    with pytest.raises(group_records.UnknownRecordError):
        group_records.read_offset_value(value)


# -- JoinGroup and SyncGroup -------------------------------------------------------------------

def test_a_new_member_is_told_member_id_required_first(tmp_path: Path) -> None:
    """KIP-394: the member comes back with the id, so a lost answer leaves no orphan member."""
    async def test(rig: Rig) -> None:
        first = await rig.join()
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
        assert not rig.group().members
    on_virtual_time(test, tmp_path)


def test_a_new_groups_first_generation_waits_the_initial_rebalance_delay(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        joining = rig.join_new()
        rig.advance(INITIAL_DELAY_MS - 1)
        assert not joining.done()
        rig.advance(1)
        joined = joining.result()
        assert (joined.error, joined.generation_id, joined.leader_id) == (ErrorCode.NONE, 1, joined.member_id)
    on_virtual_time(test, tmp_path)


def test_members_joining_during_the_initial_delay_extend_it(tmp_path: Path) -> None:
    """Kafka's InitialDelayedJoin (KIP-134): another delay for each arrival, so members starting
    together make one generation."""
    async def test(rig: Rig) -> None:
        first = rig.join_new()
        rig.advance(INITIAL_DELAY_MS // 2)
        second = rig.join_new()
        rig.advance(INITIAL_DELAY_MS // 2)
        assert not first.done(), "a member arrived during the delay: another one"
        rig.advance(INITIAL_DELAY_MS)
        assert first.result().generation_id == second.result().generation_id == 1
    on_virtual_time(test, tmp_path)


def test_only_the_leader_gets_the_members_metadata(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        first, second = rig.join_new(), rig.join_new()
        rig.advance(REBALANCE_MS)
        answers = {r.member_id: r for r in (first.result(), second.result())}
        leader = answers.pop(first.result().leader_id)
        (follower,) = answers.values()
        assert sorted(m[0] for m in leader.members) == sorted([leader.member_id, follower.member_id])
        assert follower.members == []
    on_virtual_time(test, tmp_path)


def test_the_leaders_sync_makes_the_group_stable(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        joining = rig.join_new()
        rig.advance(INITIAL_DELAY_MS)
        m = joining.result().member_id
        synced = await rig.sync(m, assignments={m: b"A"})
        assert (synced.error, synced.assignment) == (ErrorCode.NONE, b"A")
        assert rig.group().state is GroupState.STABLE
    on_virtual_time(test, tmp_path)


def test_a_followers_sync_waits_for_the_leaders_assignment(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        first, second = rig.join_new(), rig.join_new()
        rig.advance(REBALANCE_MS)
        leader = first.result().leader_id
        (follower,) = {first.result().member_id, second.result().member_id} - {leader}
        waiting = rig.sync(follower)
        assert not waiting.done()
        await rig.sync(leader, assignments={leader: b"L", follower: b"F"})
        assert (await waiting).assignment == b"F"
    on_virtual_time(test, tmp_path)


@pytest.mark.parametrize(("protocol_type", "protocols", "group"), [
    ("connect", None, "g"),
    ("consumer", [("roundrobin", b"")], "g"),
    ("", None, "fresh"),
], ids=["another-protocol-type", "no-protocol-in-common", "a-new-group-without-protocol-type"])
def test_a_join_the_group_cannot_take_is_inconsistent_group_protocol(
        tmp_path: Path, protocol_type: str, protocols: list[tuple[str, bytes]] | None, group: str) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        joined = await rig.join(group=group, protocol_type=protocol_type, protocols=protocols)
        assert joined.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    on_virtual_time(test, tmp_path)


def test_a_session_timeout_out_of_bounds_is_invalid_session_timeout(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert (await rig.join(session_ms=99)).error == ErrorCode.INVALID_SESSION_TIMEOUT
    on_virtual_time(test, tmp_path, min_session_timeout_ms=100)


def test_an_empty_group_id_is_invalid_group_id(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert (await rig.join(group="")).error == ErrorCode.INVALID_GROUP_ID
    on_virtual_time(test, tmp_path)


def test_sync_of_another_generation_is_illegal_generation(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert (await rig.sync(m, generation=2)).error == ErrorCode.ILLEGAL_GENERATION
    on_virtual_time(test, tmp_path)


def test_a_member_joining_twice_gets_an_answer_to_its_first_join(tmp_path: Path) -> None:
    """Responses go out in request order: an unanswered first JoinGroup would hold up every
    response behind it on that connection."""
    async def test(rig: Rig) -> None:
        a, b = await rig.stable_members(2)
        first = rig.join(member_id=a)  # a rebalance, which waits for b
        second = rig.join(member_id=a)
        assert first.result().error == ErrorCode.REBALANCE_IN_PROGRESS
        await rig.join(member_id=b)
        assert second.result().generation_id == 2
    on_virtual_time(test, tmp_path)


def test_a_member_told_member_id_required_holds_the_rebalance_until_it_joins(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        pending = (await rig.join()).member_id
        rejoining = rig.join(member_id=m)  # the leader rejoins: a rebalance
        assert not rejoining.done()
        joined = await rig.join(member_id=pending)
        assert joined.generation_id == rejoining.result().generation_id == 2
    on_virtual_time(test, tmp_path)


def test_a_member_told_member_id_required_holds_the_rebalance_no_longer_than_its_session(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        await rig.join(session_ms=200)  # MEMBER_ID_REQUIRED, never followed up
        rejoining = rig.join(member_id=m)
        rig.advance(199)
        assert not rejoining.done()
        rig.advance(1)
        assert rejoining.result().generation_id == 2
        assert list(rig.group().members) == [m]
    on_virtual_time(test, tmp_path)


# -- Heartbeat, session and rebalance timeouts -------------------------------------------------

def test_a_heartbeat_of_another_generation_is_illegal_generation(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert rig.c.heartbeat("g", m, None, 7) == ErrorCode.ILLEGAL_GENERATION
    on_virtual_time(test, tmp_path)


@pytest.mark.parametrize("group", ["g", "other"], ids=["member-of-another-group", "unknown-group"])
def test_a_heartbeat_of_an_unknown_member_is_unknown_member_id(tmp_path: Path, group: str) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        assert rig.c.heartbeat(group, "stranger", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    on_virtual_time(test, tmp_path)


def test_members_hear_of_a_rebalance_in_their_heartbeat(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert rig.c.heartbeat("g", m, None, 1) == ErrorCode.NONE
        rig.join_new()
        assert rig.c.heartbeat("g", m, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    on_virtual_time(test, tmp_path)


def test_a_rebalance_completes_as_soon_as_every_member_rejoined(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        newcomer = rig.join_new()
        rejoined = rig.join(member_id=m)
        assert rejoined.result().generation_id == newcomer.result().generation_id == 2
    on_virtual_time(test, tmp_path)


def test_after_an_assignment_that_could_not_be_stored_the_next_rebalance_backs_off(tmp_path: Path) -> None:
    """Not Kafka's: with the offsets partition under min.insync.replicas, SyncGroup answers
    COORDINATOR_NOT_AVAILABLE and the member rejoins at once; without a hold the group ran
    thousands of generations a second. The hold doubles per failure and ends with a stored one."""
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        rig.partition.min_insync_replicas = 2  # the offsets partition's ISR (0,) is too small now

        async def failed_rebalance(generation: int) -> None:
            synced = await rig.sync(m, generation=generation, assignments={m: b"A"})
            assert synced.error == ErrorCode.COORDINATOR_NOT_AVAILABLE

        rejoined = rig.join(member_id=m)
        assert rejoined.result().generation_id == 2, "a rebalance with every member back completes at once"
        await failed_rebalance(2)
        for generation, hold_ms in ((3, 100), (4, 200), (5, 400)):
            rejoined = rig.join(member_id=m)
            rig.advance(hold_ms - 1)
            assert not rejoined.done(), f"generation {generation} is held {hold_ms} ms"
            rig.advance(1)
            assert rejoined.result().generation_id == generation
            await failed_rebalance(generation)
        rig.partition.min_insync_replicas = 1
        rejoined = rig.join(member_id=m)
        rig.advance(800)
        assert (await rig.sync(m, generation=6, assignments={m: b"B"})).assignment == b"B"
        assert rig.group().state is GroupState.STABLE
        assert rig.join(member_id=m).result().generation_id == 7, "stored: the next rebalance is not held"
    on_virtual_time(test, tmp_path)


def test_a_member_without_heartbeats_is_removed_after_its_session_timeout(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member(session_ms=200)
        rig.advance(199)
        assert rig.group().members
        rig.advance(1)
        group = rig.group()
        assert (group.state, group.members, group.generation_id) == (GroupState.EMPTY, {}, 2)
    on_virtual_time(test, tmp_path)


def test_a_heartbeat_restarts_the_session_timeout(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member(session_ms=200)
        rig.advance(150)
        assert rig.c.heartbeat("g", m, None, 1) == ErrorCode.NONE
        rig.advance(150)
        assert rig.group().has(m)
    on_virtual_time(test, tmp_path)


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        newcomer = rig.join_new()
        rig.advance(REBALANCE_MS - 1)
        assert not newcomer.done()
        assert rig.c.heartbeat("g", m, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS, "alive, but not rejoining"
        rig.advance(1)
        assert newcomer.result().generation_id == 2
        assert list(rig.group().members) == [newcomer.result().member_id]
    on_virtual_time(test, tmp_path)


def test_a_member_that_never_syncs_is_removed_at_the_rebalance_timeout(tmp_path: Path) -> None:
    """Kafka's DelayedSync."""
    async def test(rig: Rig) -> None:
        joining = rig.join_new()
        rig.advance(INITIAL_DELAY_MS)
        m = joining.result().member_id
        rig.advance(REBALANCE_MS - 1)
        assert rig.group().has(m)
        rig.advance(1)
        assert not rig.group().has(m) and rig.group().state is GroupState.EMPTY
    on_virtual_time(test, tmp_path)


# -- static members (KIP-345) ------------------------------------------------------------------

def test_a_static_member_skips_member_id_required(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        joining = rig.join(instance="i1")
        rig.advance(INITIAL_DELAY_MS)
        assert joining.result().error == ErrorCode.NONE
    on_virtual_time(test, tmp_path)


def test_a_restarted_static_member_keeps_its_assignment_without_a_rebalance(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        old = await rig.stable_member(assignment=b"mine", instance="i1")
        again = await rig.join(instance="i1")  # restarted: a new member id, the same instance id
        assert (again.error, again.generation_id) == (ErrorCode.NONE, 1)
        assert again.member_id != old
        assert (await rig.sync(again.member_id, instance="i1")).assignment == b"mine"
    on_virtual_time(test, tmp_path)


def test_a_restarted_static_members_old_member_id_is_fenced(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        old = await rig.stable_member(instance="i1")
        await rig.join(instance="i1")
        assert rig.c.heartbeat("g", old, "i1", 1) == ErrorCode.FENCED_INSTANCE_ID
    on_virtual_time(test, tmp_path)


def test_a_static_member_without_a_member_id_is_unknown_not_fenced(tmp_path: Path) -> None:
    """librdkafka 2.16 empties its member id when its own session timer runs out (the
    coordinator unreachable for session.timeout.ms) and heartbeats on with the empty id and its
    instance id; FENCED_INSTANCE_ID, Kafka's answer, is fatal to it, UNKNOWN_MEMBER_ID makes it
    rejoin. The empty id holds no registration, so it fences nobody."""
    async def test(rig: Rig) -> None:
        await rig.stable_member(instance="i1")
        assert rig.c.heartbeat("g", "", "i1", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    on_virtual_time(test, tmp_path)


def test_a_static_member_rejoining_during_a_rebalance_completes_it(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        a = await rig.stable_member(instance="a", rebalance_ms=10_000)
        b = rig.join(instance="b", rebalance_ms=10_000)  # a must rejoin now
        # a restarted: it joins with a new member id; every member is back, so no 10 s wait
        rejoined = rig.join(instance="a", rebalance_ms=10_000)
        assert rejoined.result().error == ErrorCode.NONE and rejoined.result().member_id != a
        assert b.result().generation_id == rejoined.result().generation_id == 2
    on_virtual_time(test, tmp_path)


# -- LeaveGroup, DeleteGroups, DescribeGroups --------------------------------------------------

def test_the_last_member_leaving_empties_the_group(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert rig.c.leave_group("g", [(m, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        assert (rig.group().state, rig.group().generation_id) == (GroupState.EMPTY, 2)
    on_virtual_time(test, tmp_path)


def test_deleting_a_group_with_members_is_non_empty_group(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        assert await rig.c.delete_groups(["g"]) == {"g": ErrorCode.NON_EMPTY_GROUP}
    on_virtual_time(test, tmp_path)


def test_deleting_an_unknown_group_is_group_id_not_found(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert await rig.c.delete_groups(["unknown"]) == {"unknown": ErrorCode.GROUP_ID_NOT_FOUND}
    on_virtual_time(test, tmp_path)


def test_a_deleted_group_is_described_dead(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        rig.c.leave_group("g", [(m, None)])
        assert await rig.c.delete_groups(["g"]) == {"g": ErrorCode.NONE}
        assert rig.c.describe_group("g")[1].state == "Dead"
    on_virtual_time(test, tmp_path)


# -- offsets partitions coming and going -------------------------------------------------------

def test_a_resigned_coordinator_answers_not_coordinator(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        rig.c.on_resignation(0)
        assert rig.c.group_error("g") == ErrorCode.NOT_COORDINATOR
    on_virtual_time(test, tmp_path)


def test_resigning_answers_waiting_members_not_coordinator(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        group = rig.group()
        rig.join()  # MEMBER_ID_REQUIRED: the rebalance waits for this newcomer
        waiting = rig.join(member_id=m)
        assert not waiting.done()
        rig.c.on_resignation(0)
        assert waiting.result().error == ErrorCode.NOT_COORDINATOR
        assert group.state is GroupState.DEAD
    on_virtual_time(test, tmp_path)


def test_a_partition_being_read_back_answers_coordinator_load_in_progress(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        rig.c.on_resignation(0)
        rig.c.on_election(0, 1)
        assert rig.c.group_error("g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await rig.scheduler.run_tasks()
        assert rig.c.group_error("g") is None
    on_virtual_time(test, tmp_path)


def test_a_group_survives_a_reload(tmp_path: Path) -> None:
    """What one coordinator wrote, the next (after a leader change) reads back from the log."""
    async def test(rig: Rig) -> None:
        m = await rig.stable_member(assignment=b"assigned")
        rig.c.on_resignation(0)
        await rig.load(leader_epoch=1)
        group = rig.group()
        assert (group.state, group.generation_id, group.members[m].assignment) == \
            (GroupState.STABLE, 1, b"assigned")
    on_virtual_time(test, tmp_path)


def test_members_of_a_reloaded_group_keep_their_place(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        rig.c.on_resignation(0)
        await rig.load(leader_epoch=1)
        assert rig.c.heartbeat("g", m, None, 1) == ErrorCode.NONE
    on_virtual_time(test, tmp_path)


def test_members_of_a_reloaded_group_that_are_gone_expire(tmp_path: Path) -> None:
    """A loaded member gets a fresh session, not a rebalance: only its expiry removes it."""
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        rig.c.on_resignation(0)
        await rig.load(leader_epoch=1)
        rig.advance(SESSION_MS)
        assert rig.group().state is GroupState.EMPTY
    on_virtual_time(test, tmp_path)


def test_a_new_leader_epoch_of_a_partition_still_led_reloads_nothing(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        group = rig.group()
        rig.c.on_election(0, 5)  # the controller changed the partition's ISR
        assert rig.c.group_error("g") is None and rig.group() is group
    on_virtual_time(test, tmp_path)


def test_after_shutdown_no_session_expires(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        rig.c.shutdown()
        rig.advance(10 * SESSION_MS)
        assert rig.group().has(m)
    on_virtual_time(test, tmp_path)


def test_after_shutdown_every_group_gets_coordinator_not_available(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        rig.c.shutdown()
        assert rig.c.group_error("g") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    on_virtual_time(test, tmp_path)
