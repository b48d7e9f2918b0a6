"""Where groups live: Kafka's GroupMetadataManager.

A group belongs to one partition of the internal topic `__consumer_offsets`, chosen by
Java's String.hashCode of its id (so the mapping is Apache Kafka's), and the broker leading
that partition is the group's coordinator. This module keeps the groups of the offsets
partitions this broker leads, reads a partition's groups and offsets back from its log when the
broker becomes its leader, forgets them when it stops leading (the shared mechanism of
odradek.coordinator.partition_loader), and writes group metadata and offset commits as record
batches acknowledged only once the whole ISR has them (acks=all). What is done with offsets
(commits, fetches, expiry) is offset_manager.py's.

Transactions (KIP-98): a TxnOffsetCommit's offsets are written as a transactional batch of the
producer and stay pending in their group until the transaction's marker; which groups a
producer has pending offsets in is kept here, so a marker visits only those, and a partition
read back leaves a transaction with no marker yet pending again.
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping

from odradek.common.clock import Clock
from odradek.common.internal_topics import GROUP_METADATA_TOPIC_NAME
from odradek.common.metadata import TopicPartition
from odradek.coordinator.group import group_records
from odradek.coordinator.group.group_metadata import GroupMetadata, GroupState, OffsetAndMetadata, PendingTxnOffset
from odradek.coordinator.partition_loader import (
    AppendResult,
    OwnedPartition,
    PartitionLoader,
    PendingRecord,
    ProducerIdAndEpoch,
)
from odradek.coordinator.partitioning import partition_for
from odradek.coordinator.scheduler import Scheduler
from odradek.coordinator.seams import CoordinatorPartition
from odradek.protocol.errors import ErrorCode

log = logging.getLogger("odradek.coordinator.group.manager")

OFFSETS_TOPIC = GROUP_METADATA_TOPIC_NAME


# A failed write as the group APIs report it, as Kafka's GroupMetadataManager maps them: for the
# group's metadata (storeGroup, after SyncGroup) and for offset commits (storeOffsets).
GROUP_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}
OFFSET_WRITE_ERRORS = {
    **GROUP_WRITE_ERRORS,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


class GroupMetadataManager:
    def __init__(self, partition_count: Callable[[], int],
                 get_partition: Callable[[TopicPartition], CoordinatorPartition | None],
                 commit_timeout_ms: int, max_batch_bytes: int, clock: Clock, scheduler: Scheduler) -> None:
        """`partition_count`: how many partitions __consumer_offsets has (the topic's own count
        once known, so the group -> partition mapping is the one FindCoordinator answers with)."""
        self._partition_count = partition_count
        self._clock = clock
        self._partitions = PartitionLoader(OFFSETS_TOPIC, get_partition, scheduler, commit_timeout_ms,
                                           max_batch_bytes, log, "group")
        self.groups: dict[str, GroupMetadata] = {}
        # producer id -> the groups with offsets pending in its transaction (Kafka's
        # openGroupsForProducer): what a marker's completion visits, rather than every group
        self._producer_groups: dict[int, set[str]] = {}

    # -- which groups are ours -----------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self._partition_count())

    def ownership(self, group_id: str) -> OwnedPartition | None:
        """This broker's hold on the group's offsets partition: None if it does not lead it;
        loading while the partition is still being read back."""
        return self._partitions.owned(self.partition_for(group_id))

    def any_loading(self) -> bool:
        return self._partitions.any_loading()

    def local_groups(self) -> list[GroupMetadata]:
        return list(self.groups.values())

    def get(self, group_id: str) -> GroupMetadata | None:
        return self.groups.get(group_id)

    def add(self, group: GroupMetadata) -> GroupMetadata:
        return self.groups.setdefault(group.group_id, group)

    def remove(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            self._forget_producers(group)

    # -- transactions' groups ------------------------------------------------------------------

    def add_producer_group(self, producer_id: int, group_id: str) -> None:
        self._producer_groups.setdefault(producer_id, set()).add(group_id)

    def remove_producer_group(self, producer_id: int, group_id: str) -> None:
        groups = self._producer_groups.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self._producer_groups[producer_id]

    def producer_groups(self, producer_id: int, partitions: Iterable[int]) -> list[GroupMetadata]:
        """Kafka's groupsBelongingToPartitions: the groups of offsets partitions ``partitions``
        (held here) with offsets pending in the producer's transaction."""
        wanted = set(partitions)
        groups = (self.groups.get(g) for g in self._producer_groups.get(producer_id, ()))
        return [g for g in groups if g is not None and self.partition_for(g.group_id) in wanted]

    def _forget_producers(self, group: GroupMetadata) -> None:
        for producer_id in group.pending_txn_offsets:
            self.remove_producer_group(producer_id, group.group_id)

    # -- leadership of offsets partitions ------------------------------------------------------

    def load(self, index: int, leader_epoch: int, on_loaded: Callable[[GroupMetadata], None]) -> None:
        """Became leader of offsets partition `index`: read its groups back (Kafka's
        loadGroupsForPartition); until then its groups get COORDINATOR_LOAD_IN_PROGRESS."""
        self._partitions.load(index, leader_epoch, functools.partial(self._load_groups, on_loaded=on_loaded))

    def unload(self, index: int) -> list[GroupMetadata]:
        """No longer leader of offsets partition `index`: its groups, now dropped (Kafka's
        removeGroupsForPartition); the caller fails whatever their members wait for."""
        if not self._partitions.unload(index):
            return []
        gone = [g for g in self.groups.values() if self.partition_for(g.group_id) == index]
        for group in gone:
            del self.groups[group.group_id]
            self._forget_producers(group)
        if gone:
            log.info("offsets partition %d: unloaded %d groups", index, len(gone))
        return gone

    async def _load_groups(self, owned: OwnedPartition, on_loaded: Callable[[GroupMetadata], None]) -> None:
        """Kafka's doLoadGroupsAndOffsets: the groups, their committed offsets and the offsets
        pending in transactions no marker has ended yet (a group with only those is loaded
        Empty, as one with only offsets is)."""
        started = self._clock.monotonic()
        # only the newest value of each key is parsed: a partition holds many commits of the
        # same offsets, and parsing every one is several times slower (benchmarks-history.md)
        read = await self._partitions.read_transactional(owned.index)
        stored: dict[str, group_records.StoredGroup | None] = {}
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        positions: dict[str, dict[TopicPartition, int]] = {}
        for key, value in read.latest.items():
            _apply_record(key, value, stored, offsets, positions, read.positions.get(key))
        pending = _pending_offsets(read.pending)
        loaded = 0
        for group_id in stored.keys() | offsets.keys() | pending.keys():
            stored_group = stored.get(group_id)
            group = (group_records.group_from_stored(group_id, stored_group) if stored_group is not None
                     else GroupMetadata(group_id, GroupState.EMPTY, self._clock.milliseconds()))
            group.offsets = offsets.get(group_id, {})
            group.offset_positions = positions.get(group_id, {})
            group.pending_txn_offsets = pending.get(group_id, {})
            if stored_group is None and not group.has_offsets:
                continue  # deleted
            self.groups[group_id] = group
            for producer_id in group.pending_txn_offsets:
                self.add_producer_group(producer_id, group_id)
            on_loaded(group)
            loaded += 1
        log.log(logging.INFO if read.records else logging.DEBUG,
                "offsets partition %d (leader epoch %d): loaded %d groups from %d records in %.0f ms%s",
                owned.index, owned.leader_epoch, loaded, read.records, (self._clock.monotonic() - started) * 1000,
                f", {len(read.pending)} transactions still open" if read.pending else "")

    # -- writes --------------------------------------------------------------------------------

    async def store(self, group_id: str, records: Iterable[tuple[bytes, bytes | None]], durable: bool = True,
                    errors: Mapping[ErrorCode, ErrorCode] | None = None) -> ErrorCode:
        """Append `records` to the group's offsets partition as one batch and, if `durable`,
        wait until the ISR has them (acks=all; else acks=1, as Kafka writes a deleted group's
        tombstones). NONE once written, else the storage error as ``errors`` maps it
        (GROUP_WRITE_ERRORS, OFFSET_WRITE_ERRORS)."""
        return (await self.store_batch(group_id, records, durable, errors)).error

    async def store_batch(self, group_id: str, records: Iterable[tuple[bytes, bytes | None]], durable: bool = True,
                          errors: Mapping[ErrorCode, ErrorCode] | None = None,
                          producer: ProducerIdAndEpoch | None = None) -> AppendResult:
        """``store``, and the offset of the batch (what committed offsets are ordered by when a
        transaction's come in between). With ``producer``, the batch is that producer's,
        transactional (a TxnOffsetCommit's: PartitionLoader.append_batch)."""
        result = await self._partitions.append_batch(self.partition_for(group_id), records, durable, producer)
        if errors is None or result.error not in errors:
            return result
        return AppendResult(errors[result.error], result.base_offset)


def _apply_record(key: bytes, value: bytes | None, stored: dict[str, group_records.StoredGroup | None],
                  offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]],
                  positions: dict[str, dict[TopicPartition, int]], position: int | None) -> None:
    """One surviving record; ``position``: its batch offset, if a transaction wrote its key."""
    try:
        parsed = group_records.read_key(key)
        if isinstance(parsed, group_records.OffsetKey):
            group_offsets = offsets.setdefault(parsed.group, {})
            if value is None:
                group_offsets.pop(parsed.tp, None)
            else:
                group_offsets[parsed.tp] = group_records.read_offset_value(value)
                if position is not None:
                    positions.setdefault(parsed.group, {})[parsed.tp] = position
        else:
            # a deleted group's offsets have tombstones of their own (DeleteGroups writes them)
            stored[parsed.group] = None if value is None else group_records.read_group_value(value)
    except group_records.UnknownRecordError as exc:
        log.warning("skipping an unreadable %s record: %s", OFFSETS_TOPIC, exc)


def _pending_offsets(pending: dict[int, dict[bytes, PendingRecord]]
                     ) -> dict[str, dict[int, dict[TopicPartition, PendingTxnOffset]]]:
    """The offsets of transactions still open, per group and producer. Only offset commits
    are written transactionally (TxnOffsetCommit); any other record there is skipped."""
    by_group: dict[str, dict[int, dict[TopicPartition, PendingTxnOffset]]] = {}
    for producer_id, records in pending.items():
        for key, (value, batch_offset) in records.items():
            try:
                parsed = group_records.read_key(key)
                if not isinstance(parsed, group_records.OffsetKey) or value is None:
                    raise group_records.UnknownRecordError(f"{parsed} in a transaction")
                entry = PendingTxnOffset(group_records.read_offset_value(value), batch_offset)
            except group_records.UnknownRecordError as exc:
                log.warning("skipping an unreadable transactional %s record: %s", OFFSETS_TOPIC, exc)
                continue
            by_group.setdefault(parsed.group, {}).setdefault(producer_id, {})[parsed.tp] = entry
    return by_group
