"""What a coordinator needs of a partition of its internal topic: the narrow seam to the broker.

The coordinators sit below the broker (docs/architecture.md, "Layers"): they read their
partitions back and append to them through these Protocols, which the broker's Partition
(and its Log) satisfy, without importing it. Tests may hand in the real Partition or a fake.
"""
from __future__ import annotations

import asyncio
from collections.abc import Set
from typing import Protocol

from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode


class CoordinatorAppendRefused(Exception):
    """A coordinator's append the partition's producer state refused, having written nothing
    (Kafka's ProducerAppendInfo checks for AppendOrigin.COORDINATOR): ``error`` is the Kafka
    error, INVALID_PRODUCER_EPOCH for a fenced producer, INVALID_TXN_STATE for a
    non-transactional batch of a producer whose transaction is open, INVALID_RECORD for a
    control batch (markers come only through WriteTxnMarkers)."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


class PartitionLog(Protocol):
    @property
    def log_start_offset(self) -> int: ...

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole record batches from the one containing ``offset``, at least one even if it
        is larger than ``max_bytes``; empty at the log end."""
        ...


class CoordinatorPartition(Protocol):
    """A replica of a coordinator's partition on this broker (the broker's Partition)."""

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def isr(self) -> Set[int]: ...

    @property
    def min_insync_replicas(self) -> int: ...

    @property
    def log(self) -> PartitionLog: ...

    @property
    def log_end_offset(self) -> int: ...

    def append_as_leader(self, batches: bytes) -> tuple[int, int]:
        """Append record batches as the leader; their (first, last) offsets."""
        ...

    def append_as_coordinator(self, batches: bytes) -> tuple[int, int]:
        """Append a coordinator's own batches as the leader, producer batches among them
        (a TxnOffsetCommit's transactional one) with their producer state kept but no
        sequence checked; their (first, last) offsets. Raises CoordinatorAppendRefused."""
        ...

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        """Done once the high watermark passes ``offset`` (the ISR has it); failed with
        odradek.common.errors.NotLeaderError if the leadership moves first."""
        ...
