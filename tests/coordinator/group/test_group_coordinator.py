"""The GroupCoordinator's rebalance protocol on its own, over a real log: the calls a client
would make, in the order it makes them, and the answers Kafka gives. Fast, so the rules are
checked here one by one; tests/integration/test_consumer_groups.py runs real clients."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.partition import Partition
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.coordinator.group import group_records
from odradek.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator
from odradek.coordinator.group.group_metadata import GroupState, OffsetAndMetadata
from odradek.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    java_string_hash,
    partition_for,
)
from odradek.log.log import Log, LogConfig
from odradek.protocol.errors import ErrorCode

OFFSETS_PARTITIONS = 1
SUBSCRIPTION = b"\x00\x01\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # ConsumerProtocolSubscription v1: topic "t"
TP = TopicPartition("t", 0)


def make_coordinator(data_dir: Path, **config: Any) -> tuple[GroupCoordinator, Partition]:
    tp = TopicPartition(OFFSETS_TOPIC, 0)
    partition = Partition(tp, Log.open(data_dir / f"{OFFSETS_TOPIC}-0", LogConfig()), broker_id=0)
    partition.apply_state(PartitionState(tp, 1, 0, 0, (0,), 0, (0,)))
    manager = GroupMetadataManager(lambda: OFFSETS_PARTITIONS, lambda t: partition if t == tp else None, 5.0, 1 << 20)
    coordinator = GroupCoordinator(manager, GroupConfig(**{"initial_rebalance_delay_ms": 50, **config}))
    return coordinator, partition


async def loaded(coordinator: GroupCoordinator) -> None:
    coordinator.on_election(0, 0)
    while coordinator.manager.any_loading():
        await asyncio.sleep(0.001)


def run(test: Callable[[GroupCoordinator], Awaitable[None]], tmp_path: Path, **config: Any) -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(tmp_path, **config)
        await loaded(coordinator)
        try:
            await test(coordinator)
        finally:
            coordinator.shutdown()
    asyncio.run(main())


async def join(c: GroupCoordinator, member_id: str = "", group: str = "g", instance: str | None = None,
               protocols: list[tuple[str, bytes]] | None = None, protocol_type: str = "consumer",
               session_ms: int = 10_000, rebalance_ms: int = 1_000) -> Any:
    return await c.join_group(group, member_id, instance, True, "client", "/127.0.0.1", rebalance_ms, session_ms,
                              protocol_type, protocols or [("range", SUBSCRIPTION)], False)


async def join_new(c: GroupCoordinator, **kw: Any) -> Any:
    """KIP-394's two steps: MEMBER_ID_REQUIRED, then the join with the given id (static members
    skip the first)."""
    first = await join(c, **kw)
    if first.error != ErrorCode.MEMBER_ID_REQUIRED:
        return first
    return await join(c, member_id=first.member_id, **kw)


def test_java_hash_and_partition_match_kafka() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two UTF-16 units
    # a well-known Java string whose hashCode is Integer.MIN_VALUE: Kafka's Utils.abs makes it 0
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert all(0 <= partition_for(g, 50) < 50 for g in ("", "g", "x" * 40, "\U0001F600"))


def test_a_lone_member_joins_syncs_and_commits(tmp_path: Path) -> None:
    async def test(c: GroupCoordinator) -> None:
        first = await join(c)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED and first.member_id.startswith("client-")
        joined = await join(c, member_id=first.member_id)
        assert (joined.error, joined.generation_id, joined.leader_id) == (ErrorCode.NONE, 1, first.member_id)
        assert [m[0] for m in joined.members] == [first.member_id], "the leader gets the members"
        synced = await c.sync_group("g", 1, first.member_id, None, "consumer", "range", {first.member_id: b"A"})
        assert (synced.error, synced.assignment) == (ErrorCode.NONE, b"A")
        assert c.manager.get("g").state is GroupState.STABLE  # type: ignore[union-attr]
        assert c.heartbeat("g", first.member_id, None, 1) == ErrorCode.NONE
        results = await c.commit_offsets("g", first.member_id, None, 1, {TP: OffsetAndMetadata(42)})
        assert results == {TP: ErrorCode.NONE}
        assert c.fetch_offsets("g", [TP])[1][TP].offset == 42  # type: ignore[union-attr]
    run(test, tmp_path)


def test_fencing_errors_are_the_ones_clients_expect(tmp_path: Path) -> None:
    async def test(c: GroupCoordinator) -> None:
        m = (await join_new(c)).member_id
        assert (await c.sync_group("g", 1, m, None, None, None, {m: b""})).error == ErrorCode.NONE
        assert c.heartbeat("g", m, None, 7) == ErrorCode.ILLEGAL_GENERATION
        assert c.heartbeat("g", "stranger", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.heartbeat("other", "stranger", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert (await c.sync_group("g", 2, m, None, None, None, {})).error == ErrorCode.ILLEGAL_GENERATION
        assert (await c.commit_offsets("g", m, None, 9, {TP: OffsetAndMetadata(1)}))[TP] == ErrorCode.ILLEGAL_GENERATION
        assert (await c.commit_offsets("nobody", "x", None, 3, {TP: OffsetAndMetadata(1)}))[TP] == \
            ErrorCode.ILLEGAL_GENERATION, "a generation this coordinator never saw"
        assert (await c.commit_offsets("g", "", None, -1, {TP: OffsetAndMetadata(1)}))[TP] == \
            ErrorCode.UNKNOWN_MEMBER_ID, "only members commit to a group with members"
        assert (await join(c, protocol_type="connect")).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, protocols=[("roundrobin", b"")])).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, group="fresh", protocol_type="")).error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(c, session_ms=10)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(c, group="")).error == ErrorCode.INVALID_GROUP_ID
        # a second member makes a rebalance: the first hears of it through its heartbeat
        second = asyncio.ensure_future(join_new(c))
        await asyncio.sleep(0.05)
        assert c.heartbeat("g", m, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        rejoined = await join(c, member_id=m)
        assert rejoined.generation_id == 2 and (await second).generation_id == 2
        assert (await c.commit_offsets("g", m, None, 2, {TP: OffsetAndMetadata(1)}))[TP] == \
            ErrorCode.REBALANCE_IN_PROGRESS, "committing between join and sync"
    run(test, tmp_path, min_session_timeout_ms=100)


def test_a_member_that_stops_heartbeating_is_removed(tmp_path: Path) -> None:
    async def test(c: GroupCoordinator) -> None:
        a = (await join_new(c, session_ms=200)).member_id
        await c.sync_group("g", 1, a, None, None, None, {a: b""})
        joining = asyncio.ensure_future(join_new(c, session_ms=200))
        result = await asyncio.wait_for(joining, 5)  # a never rejoins: dropped after its rebalance timeout
        group = c.manager.get("g")
        assert result.generation_id == 2 and list(group.members) == [result.member_id]  # type: ignore[union-attr]
        await asyncio.sleep(0.5)  # the new member does not heartbeat (or sync) either
        assert group.state is GroupState.EMPTY and not group.members  # type: ignore[union-attr]
        assert group.generation_id == 3
    run(test, tmp_path, min_session_timeout_ms=100)


def test_a_static_member_rejoining_a_stable_group_keeps_its_assignment(tmp_path: Path) -> None:
    async def test(c: GroupCoordinator) -> None:
        first = await join_new(c, instance="i1")
        assert first.error == ErrorCode.NONE, "static members skip MEMBER_ID_REQUIRED"
        await c.sync_group("g", 1, first.member_id, "i1", None, None, {first.member_id: b"mine"})
        again = await join(c, instance="i1")  # restarted: a new member id, same instance id
        assert again.error == ErrorCode.NONE and again.member_id != first.member_id
        assert again.generation_id == 1, "no rebalance"
        assert c.heartbeat("g", first.member_id, "i1", 1) == ErrorCode.FENCED_INSTANCE_ID
        synced = await c.sync_group("g", 1, again.member_id, "i1", None, None, {})
        assert synced.assignment == b"mine"
    run(test, tmp_path)


def test_groups_and_offsets_survive_a_reload(tmp_path: Path) -> None:
    """What one coordinator wrote, the next (after a leader change) reads back from the log."""
    async def main() -> None:
        c, partition = make_coordinator(tmp_path)
        await loaded(c)
        m = (await join_new(c)).member_id
        await c.sync_group("g", 1, m, None, None, None, {m: b"assigned"})
        await c.commit_offsets("g", m, None, 1, {TP: OffsetAndMetadata(7, 3, "meta")})
        await c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5)})
        c.on_resignation(0)
        assert c.group_error("g") == ErrorCode.NOT_COORDINATOR
        c.on_election(0, 1)
        assert c.group_error("g") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await loaded(c)
        group = c.manager.get("g")
        assert group is not None and group.state is GroupState.STABLE and group.generation_id == 1
        assert group.members[m].assignment == b"assigned"
        assert c.fetch_offsets("g", [TP])[1][TP] == group.offsets[TP]
        assert (group.offsets[TP].offset, group.offsets[TP].leader_epoch, group.offsets[TP].metadata) == (7, 3, "meta")
        assert c.heartbeat("g", m, None, 1) == ErrorCode.NONE, "members keep their place"
        c.shutdown()
    asyncio.run(main())


def test_deleting_and_expiring(tmp_path: Path) -> None:
    async def test(c: GroupCoordinator) -> None:
        await c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5, commit_timestamp=1)})
        m = (await join_new(c)).member_id
        assert (await c.delete_groups(["g", "unknown"])) == {"g": ErrorCode.NON_EMPTY_GROUP,
                                                             "unknown": ErrorCode.GROUP_ID_NOT_FOUND}
        # its first rebalance is still in progress: what it subscribes to is not known yet, so
        # (as Kafka's isSubscribedToTopic) it counts as subscribed
        assert c.delete_offsets("g", [TP]) == (ErrorCode.NONE, {TP: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})
        assert c.leave_group("g", [(m, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
        await asyncio.sleep(0.1)
        assert (await c.delete_groups(["g"])) == {"g": ErrorCode.NONE}
        assert c.describe_group("g")[1].state == "Dead"
        c.config = GroupConfig(offsets_retention_ms=0)
        c.expire_offsets()
        await asyncio.sleep(0.05)
        assert c.manager.get("simple") is None, "its only offset expired, so the group died"
    run(test, tmp_path)


@pytest.mark.parametrize("value", [b"", b"\x00\x09", b"\x00\x03\x00\x00\x00\x01"])
def test_unreadable_records_are_refused(value: bytes) -> None:
    with pytest.raises(group_records.UnknownRecordError):
        group_records.read_offset_value(value)


def test_review_findings_against_kafka(tmp_path: Path) -> None:
    """Rules where a first version differed from Kafka's GroupCoordinator."""
    async def test(c: GroupCoordinator) -> None:
        # a new leader epoch of an offsets partition this broker keeps leading reloads nothing
        m = (await join_new(c)).member_id
        await c.sync_group("g", 1, m, None, None, None, {m: b"x"})
        group = c.manager.get("g")
        c.on_election(0, 5)
        assert c.group_error("g") is None and c.manager.get("g") is group
        # an assign() consumer's commit (generation -1, a member id) to an Empty group is stored
        await c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(1)})
        assert (await c.commit_offsets("simple", "someone", None, -1, {TP: OffsetAndMetadata(2)}))[TP] == ErrorCode.NONE
        # a member that sends JoinGroup twice gets an answer to the first as well (a member
        # told MEMBER_ID_REQUIRED that has not joined yet keeps the rebalance open meanwhile)
        pending = await join(c)
        first = asyncio.ensure_future(join(c, member_id=m))
        await asyncio.sleep(0.01)
        second = asyncio.ensure_future(join(c, member_id=m))
        assert (await asyncio.wait_for(first, 1)).error == ErrorCode.REBALANCE_IN_PROGRESS
        assert (await join(c, member_id=pending.member_id)).generation_id == 2
        assert (await asyncio.wait_for(second, 1)).generation_id == 2
    run(test, tmp_path)


def test_a_static_member_rejoining_during_a_rebalance_completes_it(tmp_path: Path) -> None:
    async def test(c: GroupCoordinator) -> None:
        a = await join_new(c, instance="a", rebalance_ms=10_000)
        b = asyncio.ensure_future(join_new(c, instance="b", rebalance_ms=10_000))  # a must rejoin now
        await asyncio.sleep(0.01)
        # a restarted: it joins with a new member id; every member is back, so no 10 s wait
        rejoined = await asyncio.wait_for(join(c, instance="a", rebalance_ms=10_000), 2)
        assert rejoined.error == ErrorCode.NONE and rejoined.member_id != a.member_id
        assert (await asyncio.wait_for(b, 2)).generation_id == rejoined.generation_id == 2
    run(test, tmp_path)


def test_offsets_of_deleted_partitions_go(tmp_path: Path) -> None:
    """Kafka's handleDeletedPartitions: a re-created topic must not be read from old offsets,
    not even after the coordinator moves (the offsets get tombstones)."""
    async def main() -> None:
        c, _ = make_coordinator(tmp_path)
        await loaded(c)
        other = TopicPartition("other", 0)
        await c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5), other: OffsetAndMetadata(6)})
        assert c.handle_deleted_partitions([TP]) == 1
        await asyncio.sleep(0.05)  # the tombstone's write
        fetched = c.fetch_offsets("simple", [TP, other])[1]
        assert fetched[TP] is None and fetched[other].offset == 6  # type: ignore[union-attr]
        c.on_resignation(0)
        c.on_election(0, 1)
        await loaded(c)
        assert c.fetch_offsets("simple", [TP])[1] == {TP: None}
        c.shutdown()
    asyncio.run(main())
