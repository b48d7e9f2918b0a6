"""The offsets half of the group coordinator: the committed offsets of the groups this broker
coordinates, as Kafka's GroupMetadataManager keeps them (storeOffsets, getOffsets,
cleanupGroupMetadata, handleDeletedPartitions; Kafka's OffsetManager before groups and offsets
shared one manager), and those a transactional producer commits (TxnOffsetCommit), pending in
its transaction until the marker (KIP-98, KIP-447).

The GroupCoordinator decides who may commit, fetch or delete (the member, generation and state
rules of group_metadata.GroupState) and hands over here; this module writes the offsets to the
group's `__consumer_offsets` partition, keeps them in the group, and expires and deletes them.
"""
from __future__ import annotations

from collections.abc import Callable

from odradek.common.clock import Clock
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group import group_records
from odradek.coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata
from odradek.coordinator.group.group_metadata_manager import OFFSET_WRITE_ERRORS, GroupMetadataManager
from odradek.coordinator.partition_loader import ProducerIdAndEpoch
from odradek.coordinator.scheduler import Scheduler
from odradek.protocol.errors import ErrorCode

#: what OffsetFetch gives per partition: the offset, None where none, or an error
FetchedOffset = OffsetAndMetadata | ErrorCode | None


class OffsetManager:
    def __init__(self, manager: GroupMetadataManager, clock: Clock, scheduler: Scheduler, retention_ms: int,
                 metadata_max_bytes: int) -> None:
        """``retention_ms``: offsets.retention.minutes; ``metadata_max_bytes``:
        offset.metadata.max.bytes, the most a commit's metadata string may take."""
        self._manager = manager
        self._clock = clock
        self._scheduler = scheduler
        self.retention_ms = retention_ms
        self.metadata_max_bytes = metadata_max_bytes

    # -- OffsetCommit, OffsetFetch, OffsetDelete -----------------------------------------------

    async def store(self, group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
                    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's storeOffsets: one batch of the offsets whose metadata fits, answered once the
        ISR has it; the group holds them from then on (unless it died meanwhile, or a
        transaction's offset written after this batch was committed meanwhile)."""
        too_large = {tp for tp, o in offsets.items() if len(o.metadata.encode()) > self.metadata_max_bytes}
        valid = {tp: o for tp, o in offsets.items() if tp not in too_large}
        results: dict[TopicPartition, ErrorCode] = dict.fromkeys(too_large, ErrorCode.OFFSET_METADATA_TOO_LARGE)
        if not valid:
            return results
        group.pending_offset_commits.update(valid.keys())
        try:
            written = await self._manager.store_batch(group.group_id, _offset_records(group, valid),
                                                      errors=OFFSET_WRITE_ERRORS)
        finally:
            pending = group.pending_offset_commits
            for tp in valid:
                pending[tp] -= 1
                if not pending[tp]:
                    del pending[tp]
        if written.error == ErrorCode.NONE and not group.is_state(GroupState.DEAD):
            group.on_offset_commit_append(valid, written.base_offset)
        results.update(dict.fromkeys(valid, written.error))
        return results

    async def store_txn(self, group: GroupMetadata, producer: ProducerIdAndEpoch,
                        offsets: dict[TopicPartition, OffsetAndMetadata]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's storeOffsets for a TxnOffsetCommit: the offsets are pending in the producer's
        transaction from now on (UNSTABLE_OFFSET_COMMIT for OffsetFetch with require_stable,
        the committed offset without), written as a transactional batch of the producer,
        answered once the ISR has it; its marker decides them (GroupCoordinator.
        handle_txn_completion). A failed write withdraws them."""
        too_large = {tp for tp, o in offsets.items() if len(o.metadata.encode()) > self.metadata_max_bytes}
        valid = {tp: o for tp, o in offsets.items() if tp not in too_large}
        results: dict[TopicPartition, ErrorCode] = dict.fromkeys(too_large, ErrorCode.OFFSET_METADATA_TOO_LARGE)
        if not valid:
            return results
        entries = group.prepare_txn_offset_commit(producer.producer_id, valid)
        self._manager.add_producer_group(producer.producer_id, group.group_id)
        written = await self._manager.store_batch(group.group_id, _offset_records(group, valid),
                                                  errors=OFFSET_WRITE_ERRORS, producer=producer)
        if not group.is_state(GroupState.DEAD):
            if written.error == ErrorCode.NONE:
                group.on_txn_offset_commit_append(producer.producer_id, entries, written.base_offset)
            else:
                group.fail_pending_txn_offset_commit(producer.producer_id, entries)
                if producer.producer_id not in group.pending_txn_offsets:
                    self._manager.remove_producer_group(producer.producer_id, group.group_id)
        results.update(dict.fromkeys(valid, written.error))
        return results

    @staticmethod
    def fetch(group: GroupMetadata | None, partitions: list[TopicPartition] | None, require_stable: bool
              ) -> dict[TopicPartition, FetchedOffset]:
        """Committed offsets of `partitions` (all the group has if None); None where none, and
        with `require_stable` (KIP-447) UNSTABLE_OFFSET_COMMIT where a commit is being written."""
        if group is None or group.is_state(GroupState.DEAD):
            return {} if partitions is None else dict.fromkeys(partitions)
        result: dict[TopicPartition, FetchedOffset] = (
            dict(group.offsets) if partitions is None else {tp: group.offsets.get(tp) for tp in partitions})
        if require_stable:
            for tp in result:
                if group.has_pending_offset_commits(tp):
                    result[tp] = ErrorCode.UNSTABLE_OFFSET_COMMIT
        return result

    def delete(self, group: GroupMetadata, partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's handleDeleteOffsets (KIP-496), for a group that may lose offsets: only those of
        topics no member subscribes to (an Empty group's, all); tombstones written acks=1."""
        empty = group.is_state(GroupState.EMPTY)
        results = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if not empty and group.is_subscribed_to(tp.topic)
                   else ErrorCode.NONE for tp in partitions}
        self._forget(group, [tp for tp, e in results.items() if e == ErrorCode.NONE], "deleting offsets",
                     bury_if_empty=True)
        return results

    def _forget(self, group: GroupMetadata, partitions: list[TopicPartition], why: str,
                bury_if_empty: bool = False) -> None:
        """Drop the group's offsets of ``partitions``, committed or pending in a transaction
        (Kafka's removeOffsets), and write the committed ones' tombstones (acks=1); with
        ``bury_if_empty`` an Empty group left without offsets dies at once, as Kafka's
        handleDeleteOffsets runs cleanupGroupMetadata (else `groups list` would show it until
        the next expiry pass)."""
        removed = group.remove_offsets(partitions)
        tombstones = group_records.offset_tombstones(group.group_id, removed)
        if removed and bury_if_empty:
            tombstones += self._bury_if_empty(group)
        if tombstones:
            self._scheduler.spawn(self._manager.store(group.group_id, tombstones, durable=False),
                                  f"group {group.group_id}: {why}")

    def _bury_if_empty(self, group: GroupMetadata) -> list[tuple[bytes, bytes | None]]:
        """An Empty group with no offsets (and no commit being written) goes Dead and leaves the
        cache; the tombstone of its metadata record, to be written with its offsets'."""
        if not group.is_state(GroupState.EMPTY) or group.has_offsets:
            return []
        group.transition_to(GroupState.DEAD, self._clock.milliseconds())
        self._manager.remove(group.group_id)
        return [(group_records.group_metadata_key(group.group_id), None)]

    # -- deleted topics and expiry -------------------------------------------------------------

    def remove_partitions(self, partitions: list[TopicPartition]) -> int:
        """Kafka's handleDeletedPartitions: a deleted topic's committed offsets leave every group
        this broker coordinates (tombstones, acks=1), so a topic re-created under the same name
        is not read from offsets of the old one. Returns how many offsets went."""
        deleted = set(partitions)
        gone_total = 0
        for group in self._manager.local_groups():
            committed = [tp for tp in group.offsets if tp in deleted]
            in_txn = {tp for pending in group.pending_txn_offsets.values() for tp in pending if tp in deleted}
            gone_total += len(committed)
            self._forget(group, committed + sorted(in_txn.difference(committed)),
                         "deleting offsets of deleted partitions")
        return gone_total

    def expire(self) -> int:
        """Kafka's cleanupGroupMetadata (KIP-211): the offsets of an Empty group expire
        `retention_ms` after it became Empty; a group that never used group management (no
        protocol type) loses each offset `retention_ms` after its commit; a live consumer
        group loses only offsets of topics it no longer subscribes to. A group with a commit
        being written is left alone. Empty groups left with no offsets die. Returns how many
        offsets expired."""
        now = self._clock.milliseconds()
        expired_total = 0
        for group in self._manager.local_groups():
            if group.pending_offset_commits:
                continue
            expired = _expired_offsets(group, self.retention_ms, now)
            tombstones = group_records.offset_tombstones(group.group_id, expired)
            for tp in expired:
                del group.offsets[tp]
                group.offset_positions.pop(tp, None)
            tombstones += self._bury_if_empty(group)
            if tombstones:
                expired_total += len(expired)
                self._scheduler.spawn(self._manager.store(group.group_id, tombstones, durable=False),
                                      f"group {group.group_id}: expiring offsets")
        return expired_total

    # -- metrics -------------------------------------------------------------------------------

    def lags(self, high_watermark: Callable[[TopicPartition], int | None]) -> list[tuple[str, str, int, int]]:
        """(group, topic, partition, lag) of the groups this broker coordinates, for the
        partitions whose high watermark ``high_watermark`` knows (those with a local replica)."""
        lags = []
        for group in self._manager.local_groups():
            for tp, committed in group.offsets.items():
                hw = high_watermark(tp)
                if hw is not None:
                    lags.append((group.group_id, tp.topic, tp.partition, max(hw - committed.offset, 0)))
        return lags


def _offset_records(group: GroupMetadata, offsets: dict[TopicPartition, OffsetAndMetadata]
                    ) -> list[tuple[bytes, bytes | None]]:
    return [(group_records.offset_commit_key(group.group_id, tp), group_records.offset_commit_value(o))
            for tp, o in offsets.items()]


def _expired_offsets(group: GroupMetadata, retention_ms: int, now: int) -> list[TopicPartition]:
    if group.is_state(GroupState.EMPTY):
        if group.protocol_type is None:  # standalone commits: each offset its own clock
            return [tp for tp, o in group.offsets.items() if o.commit_timestamp + retention_ms <= now]
        return list(group.offsets) if group.state_timestamp_ms + retention_ms <= now else []
    if group.protocol_type != "consumer" or group.subscribed is None or not group.is_state(GroupState.STABLE):
        return []
    return [tp for tp, o in group.offsets.items()
            if not group.is_subscribed_to(tp.topic) and o.commit_timestamp + retention_ms <= now]
