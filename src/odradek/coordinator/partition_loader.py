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
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from odradek.common.errors import NotLeaderError
from odradek.common.metadata import TopicPartition
from odradek.coordinator.scheduler import Scheduler, within
from odradek.coordinator.seams import CoordinatorPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, iter_batches, iter_key_values, records_section

#: how much of a partition one read takes while loading (Kafka's offsets.load.buffer.size and
#: transaction.state.log.load.buffer.size)
LOAD_BUFFER_BYTES = 5 * 1024 * 1024


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
        keys; the caller parses only the survivors."""
        partition = self._get_partition(TopicPartition(self.topic, index))
        latest: dict[bytes, bytes | None] = {}
        records = 0
        if partition is None:
            return latest, records
        position, end = partition.log.log_start_offset, partition.log_end_offset
        while position < end:
            data = partition.log.read(position, LOAD_BUFFER_BYTES)
            if not data:
                break
            view = memoryview(data)
            for header in iter_batches(view):
                position = header.next_offset
                if header.is_control or header.record_count == 0:
                    continue
                section = records_section(view[header.position:header.position + header.size], header)
                for key, value in iter_key_values(section, header.record_count):
                    if key is not None:
                        latest[key] = value
                records += header.record_count
            await asyncio.sleep(0)  # a long partition must not stall the broker's other work
        return latest, records

    # -- writes --------------------------------------------------------------------------------

    async def append(self, index: int, records: Iterable[tuple[bytes, bytes | None]], durable: bool) -> ErrorCode:
        """Append ``records`` to partition ``index`` as one batch and, if ``durable``, wait until
        the ISR has them (acks=all; else acks=1). The storage error, for the caller to map; NONE
        once written."""
        tp = TopicPartition(self.topic, index)
        partition = self._get_partition(tp)
        if partition is None or not partition.is_leader or index not in self._owned:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        batch = build_batch(list(records))
        if len(batch) > self._max_batch_bytes:
            return ErrorCode.MESSAGE_TOO_LARGE
        if durable and len(partition.isr) < partition.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        try:
            _first, last = partition.append_as_leader(batch)
        except Exception as exc:  # noqa: BLE001 - a disk error: the coordinator must not crash
            self._log.error("%s: appending %s records failed: %r", tp, self._kind, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
        return await self._await_durable(partition, last) if durable else ErrorCode.NONE

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
