"""How a coordinator owns the partitions of its internal topic: loads them when this broker
becomes their leader, drops them when it stops, and writes to them only while it owns them.

Kafka's GroupMetadataManager (__consumer_offsets) and TransactionStateManager
(__transaction_state) do this the same way (loadGroupsForPartition and
loadTransactionsForTxnTopicPartition, removeGroupsForPartition and
removeTransactionsForTxnTopicPartition, appends with acks=all), which is why it is one mechanism
here for both: the group coordinator's now, the transaction coordinator's once it exists.

- load: reading a partition back is a task; until it ends the partition is loading (requests
  for its keys get COORDINATOR_LOAD_IN_PROGRESS from the coordinator). A new leader epoch of a
  partition still owned (the controller changed its ISR) reloads nothing (Kafka's
  addLoadingPartition).
- unload: the partition is forgotten and a load still running is cancelled; the coordinator
  drops what it read from it.
- fencing: an append goes only to a partition that is owned and still led here; anything else
  is NOT_LEADER_OR_FOLLOWER, which the coordinator maps to NOT_COORDINATOR.
- transactions: the group coordinator writes a TxnOffsetCommit's offsets as a transactional
  batch of the producer (append_batch with a ProducerIdAndEpoch), and reads its partitions back
  with read_transactional, which holds a transaction's records until its marker; the
  transaction coordinator's own records are plain (append, read_latest).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from odradek.common.errors import NotLeaderError
from odradek.common.metadata import TopicPartition
from odradek.coordinator.scheduler import Scheduler, within
from odradek.coordinator.seams import CoordinatorAppendRefused, CoordinatorPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    TRANSACTIONAL_FLAG,
    BatchHeader,
    CorruptRecordError,
    build_batch,
    control_marker,
    iter_batches,
    iter_key_values,
    records_section,
)

#: how much of a partition one read takes while loading (Kafka's offsets.load.buffer.size and
#: transaction.state.log.load.buffer.size)
LOAD_BUFFER_BYTES = 5 * 1024 * 1024


class ProducerIdAndEpoch(NamedTuple):
    """The producer a coordinator writes a transactional batch for (Kafka's ProducerIdAndEpoch)."""

    producer_id: int
    producer_epoch: int


class AppendResult(NamedTuple):
    error: ErrorCode  # NONE once written (and, if durable, once the ISR has it)
    base_offset: int  # where the batch went; -1 if it was not written


class PendingRecord(NamedTuple):
    """A record of a transaction with no marker yet: its value and the offset of its batch."""

    value: bytes | None
    batch_offset: int


@dataclass(slots=True)
class TransactionalRead:
    """A partition read back with its transactions (PartitionLoader.read_transactional)."""

    #: the newest committed value of each key (None: a tombstone), as read_latest gives
    latest: dict[bytes, bytes | None] = field(default_factory=dict)
    #: offset of the batch holding the value in ``latest``, for the keys a transaction wrote
    #: (what a later transaction's records are ordered against; any other key's value is older
    #: than every transactional record of it)
    positions: dict[bytes, int] = field(default_factory=dict)
    #: producer id -> the records of its transaction no marker has ended yet, newest per key
    pending: dict[int, dict[bytes, PendingRecord]] = field(default_factory=dict)
    records: int = 0


@dataclass(slots=True)
class OwnedPartition:
    index: int
    leader_epoch: int
    loading: asyncio.Task[None] | None = field(default=None)  # the load still running

    @property
    def is_loading(self) -> bool:
        return self.loading is not None


class PartitionLoader:
    def __init__(self, topic: str, get_partition: Callable[[TopicPartition], CoordinatorPartition | None],
                 scheduler: Scheduler, commit_timeout_ms: int, max_batch_bytes: int, log: logging.Logger,
                 kind: str) -> None:
        """``log`` and ``kind`` ("group", "transaction"): whose log and which records its
        messages speak of."""
        self.topic = topic
        self._get_partition = get_partition
        self._scheduler = scheduler
        self._commit_timeout_ms = commit_timeout_ms
        self._max_batch_bytes = max_batch_bytes
        self._log = log
        self._kind = kind
        self._owned: dict[int, OwnedPartition] = {}

    def owned(self, index: int) -> OwnedPartition | None:
        """This broker's hold on partition ``index``: None if it does not lead it."""
        return self._owned.get(index)

    def any_loading(self) -> bool:
        return any(p.is_loading for p in self._owned.values())

    # -- leadership ----------------------------------------------------------------------------

    def load(self, index: int, leader_epoch: int, read: Callable[[OwnedPartition], Awaitable[None]]) -> None:
        """Became leader of partition ``index``: ``read`` it back, as a task; the partition is
        loading until ``read`` returns."""
        owned = self._owned.get(index)
        if owned is not None:
            owned.leader_epoch = max(owned.leader_epoch, leader_epoch)
            return
        owned = OwnedPartition(index, leader_epoch)
        self._owned[index] = owned
        owned.loading = self._scheduler.spawn(self._load(owned, read), f"loading {self.topic}-{index}")

    @staticmethod
    async def _load(owned: OwnedPartition, read: Callable[[OwnedPartition], Awaitable[None]]) -> None:
        await read(owned)
        owned.loading = None

    def unload(self, index: int) -> bool:
        """No longer leader of partition ``index``: whether it was owned (then the caller drops
        what it read from it)."""
        owned = self._owned.pop(index, None)
        if owned is None:
            return False
        if owned.loading is not None:
            owned.loading.cancel()
        return True

    async def read_latest(self, index: int) -> tuple[dict[bytes, bytes | None], int]:
        """The newest value of each key in partition ``index`` (None: a tombstone), as raw
        bytes, and how many records were read. The partition holds many values of the same
        keys; the caller parses only the survivors. Transactions are not told apart: for a
        topic only ever written without them (__transaction_state)."""
        read = await self._read(index, transactional=False)
        return read.latest, read.records

    async def read_transactional(self, index: int) -> TransactionalRead:
        """As read_latest, but with the transactions a coordinator wrote for producers (Kafka's
        loadGroupsAndOffsets): a transactional batch's records are pending for its producer
        until a control batch ends the transaction; a COMMIT makes each the key's value unless
        the key has a newer one already (log order, by batch offset), an ABORT drops them, and
        the records of a transaction with no marker yet come back pending. As Kafka does, a
        transactional tombstone only withdraws the producer's pending record of its key.
        Batches of a partition without transactions cost what read_latest's do."""
        return await self._read(index, transactional=True)

    async def _read(self, index: int, transactional: bool) -> TransactionalRead:
        partition = self._get_partition(TopicPartition(self.topic, index))
        read = TransactionalRead()
        if partition is None:
            return read
        position = partition.log.log_start_offset
        # the end is read again after each chunk: a marker appended while this partition loads
        # (its group coordinator answered nothing yet) must be seen here, or its transaction
        # would be left pending for good
        while position < partition.log_end_offset:
            data = partition.log.read(position, LOAD_BUFFER_BYTES)
            if not data:
                break
            view = memoryview(data)
            for header in iter_batches(view):
                position = header.next_offset
                batch = view[header.position:header.position + header.size]
                if header.is_control:
                    if transactional and header.producer_id in read.pending:
                        self._end_transaction(read, batch, header)
                elif header.record_count:
                    if transactional and header.is_transactional:
                        _read_pending(read, batch, header)
                    else:
                        _read_committed(read, batch, header)
                    read.records += header.record_count
            await asyncio.sleep(0)  # a long partition must not stall the broker's other work
        return read

    def _end_transaction(self, read: TransactionalRead, batch: memoryview, header: BatchHeader) -> None:
        """A control batch of a producer with records pending: a COMMIT applies them, any other
        type drops them (Kafka's loader); an empty one (the cleaner's) changes nothing."""
        if header.record_count == 0:
            return
        try:
            marker = control_marker(batch, header)
        except CorruptRecordError as exc:
            self._log.error("%s: the marker at offset %d does not parse, so producer %d's %s records stay "
                            "pending: %s", self.topic, header.base_offset, header.producer_id, self._kind, exc)
            return
        pending = read.pending.pop(header.producer_id)
        if marker is None or not marker.commit:
            return
        latest, positions = read.latest, read.positions
        for key, (value, offset) in pending.items():
            if latest.get(key) is None or positions.get(key, -1) < offset:
                latest[key] = value
                positions[key] = offset

    # -- writes --------------------------------------------------------------------------------

    async def append(self, index: int, records: Iterable[tuple[bytes, bytes | None]], durable: bool,
                     producer: ProducerIdAndEpoch | None = None) -> ErrorCode:
        """Append ``records`` to partition ``index`` as one batch and, if ``durable``, wait until
        the ISR has them (acks=all; else acks=1). With ``producer``, a transactional batch of
        that producer (append_batch). The storage error, for the caller to map; NONE once
        written."""
        return (await self.append_batch(index, records, durable, producer)).error

    async def append_batch(self, index: int, records: Iterable[tuple[bytes, bytes | None]], durable: bool,
                           producer: ProducerIdAndEpoch | None = None) -> AppendResult:
        """``append``, and where the batch went (the offset a transaction's records are ordered
        by). With ``producer`` the batch is transactional, under the producer's id and epoch
        with base sequence 0 (Kafka's GroupMetadataManager writes a TxnOffsetCommit so), and
        goes through the partition's coordinator append (no sequence checks; a fenced epoch
        is refused with INVALID_PRODUCER_EPOCH); the records stay the producer's until its
        transaction's marker. Without, a plain batch through the leader append."""
        tp = TopicPartition(self.topic, index)
        partition = self._get_partition(tp)
        if partition is None or not partition.is_leader or index not in self._owned:
            return AppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
        if producer is None:
            batch = build_batch(list(records))
        else:
            batch = build_batch(list(records), producer_id=producer.producer_id,
                                producer_epoch=producer.producer_epoch, base_sequence=0,
                                attributes=TRANSACTIONAL_FLAG)
        if len(batch) > self._max_batch_bytes:
            return AppendResult(ErrorCode.MESSAGE_TOO_LARGE, -1)
        if durable and len(partition.isr) < partition.min_insync_replicas:
            return AppendResult(ErrorCode.NOT_ENOUGH_REPLICAS, -1)
        try:
            first, last = (partition.append_as_leader(batch) if producer is None
                           else partition.append_as_coordinator(batch))
        except CoordinatorAppendRefused as exc:
            self._log.info("%s: %s records refused: %s", tp, self._kind, exc)
            return AppendResult(exc.error, -1)
        except Exception as exc:  # noqa: BLE001 - a disk error: the coordinator must not crash
            self._log.error("%s: appending %s records failed: %r", tp, self._kind, exc)
            return AppendResult(ErrorCode.KAFKA_STORAGE_ERROR, -1)
        error = await self._await_durable(partition, last) if durable else ErrorCode.NONE
        return AppendResult(error, first)

    async def _await_durable(self, partition: CoordinatorPartition, last: int) -> ErrorCode:
        try:
            await within(self._scheduler, partition.wait_for_high_watermark(last), self._commit_timeout_ms)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        except NotLeaderError:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if len(partition.isr) < partition.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE


def _read_committed(read: TransactionalRead, batch: memoryview, header: BatchHeader) -> None:
    """A plain batch: its records are the newest values of their keys. Once a transaction wrote
    some key, each later value of such a key keeps its batch offset too (what that
    transaction's COMMIT is ordered against); until then, one dict store per record."""
    latest = read.latest
    section = records_section(batch, header)
    tracked = read.positions if read.pending or read.positions else None
    if tracked is None:
        for key, value in iter_key_values(section, header.record_count):
            if key is not None:
                latest[key] = value
        return
    pending_keys = {k for records in read.pending.values() for k in records}
    for key, value in iter_key_values(section, header.record_count):
        if key is not None:
            latest[key] = value
            if key in tracked or key in pending_keys:
                tracked[key] = header.base_offset


def _read_pending(read: TransactionalRead, batch: memoryview, header: BatchHeader) -> None:
    """A transactional batch: its records wait for their producer's marker."""
    pending = read.pending.setdefault(header.producer_id, {})
    for key, value in iter_key_values(records_section(batch, header), header.record_count):
        if key is None:
            continue
        if value is None:
            pending.pop(key, None)
        else:
            pending[key] = PendingRecord(value, header.base_offset)
