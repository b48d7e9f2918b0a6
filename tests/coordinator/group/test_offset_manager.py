"""Committed offsets through the GroupCoordinator (who may commit) and its OffsetManager (what is
stored, fetched, deleted and expired), over a real log and on virtual time, one rule per test."""
from __future__ import annotations

import asyncio
from pathlib import Path

from group_rig import COMMIT_TIMEOUT_MS, START_MS, TP, Rig, on_virtual_time

from odradek.common.metadata import TopicPartition
from odradek.coordinator.group.group_metadata import OffsetAndMetadata
from odradek.protocol.errors import ErrorCode

RETENTION_MS = 60_000


def test_a_committed_offset_is_fetched_back(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert await rig.c.commit_offsets("g", m, None, 1, {TP: OffsetAndMetadata(42)}) == {TP: ErrorCode.NONE}
        assert rig.c.fetch_offsets("g", [TP]) == (ErrorCode.NONE, {TP: OffsetAndMetadata(42)})
    on_virtual_time(test, tmp_path)


def test_a_commit_of_another_generation_is_illegal_generation(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        assert await rig.c.commit_offsets("g", m, None, 9, {TP: OffsetAndMetadata(1)}) == \
            {TP: ErrorCode.ILLEGAL_GENERATION}
    on_virtual_time(test, tmp_path)


def test_a_commit_naming_a_generation_of_an_unknown_group_is_illegal_generation(tmp_path: Path) -> None:
    """A member of a generation this coordinator never saw (or an old one)."""
    async def test(rig: Rig) -> None:
        assert await rig.c.commit_offsets("nobody", "x", None, 3, {TP: OffsetAndMetadata(1)}) == \
            {TP: ErrorCode.ILLEGAL_GENERATION}
    on_virtual_time(test, tmp_path)


def test_a_commit_without_a_member_to_a_group_with_members_is_unknown_member_id(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        await rig.stable_member()
        assert await rig.c.commit_offsets("g", "", None, -1, {TP: OffsetAndMetadata(1)}) == \
            {TP: ErrorCode.UNKNOWN_MEMBER_ID}
    on_virtual_time(test, tmp_path)


def test_a_commit_between_join_and_sync_is_rebalance_in_progress(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        joining = rig.join_new()
        rig.advance(50)
        m = joining.result().member_id  # generation 1, not synced yet
        assert await rig.c.commit_offsets("g", m, None, 1, {TP: OffsetAndMetadata(1)}) == \
            {TP: ErrorCode.REBALANCE_IN_PROGRESS}
    on_virtual_time(test, tmp_path)


def test_an_assign_consumers_commit_to_an_empty_group_is_stored_whatever_its_member_id(tmp_path: Path) -> None:
    """A consumer using assign() commits with generation -1, and may name a member id."""
    async def test(rig: Rig) -> None:
        assert await rig.c.commit_offsets("simple", "someone", None, -1, {TP: OffsetAndMetadata(2)}) == \
            {TP: ErrorCode.NONE}
    on_virtual_time(test, tmp_path)


def test_metadata_over_offset_metadata_max_bytes_is_offset_metadata_too_large(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        assert await rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(1, metadata="x" * 9)}) == \
            {TP: ErrorCode.OFFSET_METADATA_TOO_LARGE}
    on_virtual_time(test, tmp_path, offset_metadata_max_bytes=8)


def test_offsets_survive_a_reload(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        await rig.c.commit_offsets("g", m, None, 1, {TP: OffsetAndMetadata(7, 3, "meta", START_MS)})
        rig.c.on_resignation(0)
        await rig.load(leader_epoch=1)
        assert rig.c.fetch_offsets("g", [TP]) == (ErrorCode.NONE, {TP: OffsetAndMetadata(7, 3, "meta", START_MS)})
    on_virtual_time(test, tmp_path)


def test_a_fetch_requiring_stable_offsets_sees_a_commit_being_written(tmp_path: Path) -> None:
    """KIP-447: UNSTABLE_OFFSET_COMMIT while the ISR does not have the commit yet."""
    async def test(rig: Rig) -> None:
        committing = asyncio.ensure_future(rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(1)}))
        await asyncio.sleep(0)  # the commit is appended and waits for the follower
        assert rig.c.fetch_offsets("simple", [TP], require_stable=True) == \
            (ErrorCode.NONE, {TP: ErrorCode.UNSTABLE_OFFSET_COMMIT})
        committing.cancel()
    on_virtual_time(test, tmp_path, isr=(0, 1))


def test_a_commit_the_isr_does_not_get_is_request_timed_out_at_the_commit_timeout(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        committing = asyncio.ensure_future(rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(1)}))
        await asyncio.sleep(0)
        rig.advance(COMMIT_TIMEOUT_MS - 1)
        await asyncio.sleep(0)
        assert not committing.done()
        rig.advance(1)
        assert await committing == {TP: ErrorCode.REQUEST_TIMED_OUT}
        assert rig.c.fetch_offsets("simple", [TP]) == (ErrorCode.NONE, {TP: None})
    on_virtual_time(test, tmp_path, isr=(0, 1))


def test_offsets_of_topics_a_live_group_may_subscribe_to_are_not_deleted(tmp_path: Path) -> None:
    """KIP-496, and Kafka's isSubscribedToTopic: while the first rebalance is in progress what
    the group subscribes to is unknown, so every topic counts as subscribed."""
    async def test(rig: Rig) -> None:
        rig.join_new()
        assert rig.c.delete_offsets("g", [TP]) == (ErrorCode.NONE, {TP: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC})
    on_virtual_time(test, tmp_path)


def test_offsets_of_an_empty_group_are_deleted_and_the_group_dies_with_its_last(tmp_path: Path) -> None:
    """Kafka's handleDeleteOffsets runs cleanupGroupMetadata: no waiting for the expiry pass."""
    async def test(rig: Rig) -> None:
        other = TopicPartition("other", 0)
        await rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5), other: OffsetAndMetadata(6)})
        assert rig.c.delete_offsets("simple", [TP]) == (ErrorCode.NONE, {TP: ErrorCode.NONE})
        assert rig.c.fetch_offsets("simple", [TP]) == (ErrorCode.NONE, {TP: None})
        assert rig.manager.get("simple") is not None  # one offset left
        assert rig.c.delete_offsets("simple", [other]) == (ErrorCode.NONE, {other: ErrorCode.NONE})
        assert rig.manager.get("simple") is None
        assert rig.c.delete_offsets("simple", [other])[0] == ErrorCode.GROUP_ID_NOT_FOUND
    on_virtual_time(test, tmp_path)


def test_a_simple_groups_offset_expires_the_retention_after_its_commit_and_the_group_dies(tmp_path: Path) -> None:
    """Kafka's cleanupGroupMetadata: a group without a protocol type times each offset from its
    commit; an Empty group left without offsets is removed."""
    async def test(rig: Rig) -> None:
        await rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5, commit_timestamp=START_MS)})
        rig.advance(RETENTION_MS - 1)
        rig.c.expire_offsets()
        assert rig.manager.get("simple") is not None
        rig.advance(1)
        rig.c.expire_offsets()
        assert rig.manager.get("simple") is None
    on_virtual_time(test, tmp_path, offsets_retention_ms=RETENTION_MS)


def test_an_empty_groups_offsets_expire_the_retention_after_it_became_empty(tmp_path: Path) -> None:
    """KIP-211: not from the commit, which may be much older."""
    async def test(rig: Rig) -> None:
        m = await rig.stable_member()
        old = OffsetAndMetadata(5, commit_timestamp=START_MS - RETENTION_MS)
        await rig.c.commit_offsets("g", m, None, 1, {TP: old})
        rig.c.leave_group("g", [(m, None)])
        rig.advance(RETENTION_MS - 1)
        rig.c.expire_offsets()
        assert rig.c.fetch_offsets("g", [TP]) == (ErrorCode.NONE, {TP: old})
        rig.advance(1)
        rig.c.expire_offsets()
        assert rig.c.fetch_offsets("g", [TP]) == (ErrorCode.NONE, {TP: None})
    on_virtual_time(test, tmp_path, offsets_retention_ms=RETENTION_MS)


def test_offsets_of_deleted_partitions_go(tmp_path: Path) -> None:
    """Kafka's handleDeletedPartitions: a re-created topic must not be read from old offsets,
    not even after the coordinator moves (the offsets get tombstones)."""
    async def test(rig: Rig) -> None:
        other = TopicPartition("other", 0)
        await rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5), other: OffsetAndMetadata(6)})
        assert rig.c.handle_deleted_partitions([TP]) == 1
        await rig.scheduler.run_tasks()  # the tombstone's write
        rig.c.on_resignation(0)
        await rig.load(leader_epoch=1)
        assert rig.c.fetch_offsets("simple", [TP, other]) == (ErrorCode.NONE, {TP: None, other: OffsetAndMetadata(6)})
    on_virtual_time(test, tmp_path)


def test_offset_lags_are_the_high_watermark_minus_the_committed_offset(tmp_path: Path) -> None:
    async def test(rig: Rig) -> None:
        unhosted = TopicPartition("elsewhere", 0)
        await rig.c.commit_offsets("simple", "", None, -1, {TP: OffsetAndMetadata(5), unhosted: OffsetAndMetadata(1)})
        assert rig.c.lags(lambda tp: 12 if tp == TP else None) == [("simple", "t", 0, 7)]
    on_virtual_time(test, tmp_path)
