"""KIP-253's produce fence: a leader of an ordered topic's partition never appends a record whose
key does not belong there under the topic's current undeleted_partition_count.

Why: a consumer reads a partition created by an expansion only once the group is past the
parent's offset at the expansion (the leader epoch bump); a record that a producer still routed
with the old count and that lands in the parent *after* that offset would be delivered after the
same key's later records in the child. A record for a partition marked for deletion could be
deleted with it. The rule therefore holds for every client:

- A producer that declares the count it routed with (odradek's OrderedProducer, in the client
  id: protocol/declared_partition_counts.py) is checked on the count alone. A stale one gets
  FENCED_LEADER_EPOCH, Kafka's retriable "your metadata is older than the leader's" (the count
  changes only together with a leader epoch bump, so the two are one event); the KIP's
  InvalidPartitionMetadata is this code. librdkafka does not retry it on its own (its produce
  path treats the code as permanent), so the OrderedProducer sees it at once, refreshes the count
  and re-sends in order.
- Any other producer (a stock Kafka client) has each record's key checked with linear hashing:
  a key routed elsewhere, or any record for a partition marked for deletion, refuses the whole
  batch with INVALID_RECORD and an error message naming the key's partition (KIP-467's
  ErrorMessage, which librdkafka puts in the delivery report). Not retriable: resending the
  same record to the same partition cannot succeed. A stock client whose partitioner agrees
  with linear hashing (Kafka's murmur2 of the key, ``& 0x7fffffff``, modulo the partition count:
  the Java client's default and librdkafka's ``murmur2_random``) is accepted while the count is
  initial_partition_count x 2^L; docs/architecture.md lists the set-ups.

Cost: the count check is a dictionary lookup per request (0.24 us). The key check parses each
record's header up to its key and hashes the key once per distinct key (hashes are cached,
bounded): 1.1 us per record with the hash cached, 2.9 us for a new key (CPython, this project's
2-core test machine), paid only by producers that declare nothing.
"""
from __future__ import annotations

import logging
from typing import Callable

from odradek.common.linear_hashing import POSITIVE_MASK, level_and_split, murmur2
from odradek.common.metadata import TopicPartition
from odradek.protocol.declared_partition_counts import declared_counts
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import UnsupportedCompressionError, record_keys

log = logging.getLogger(__name__)

#: distinct keys whose hash is kept; a key's hash does not depend on the count, so a producer's
#: working set of keys is hashed once however often the topic changes
HASH_CACHE_SIZE = 65536

#: (code, message) refusing a batch; None accepts it
Refusal = tuple[ErrorCode, str] | None


class OrderedDeliveryFence:
    """The check of one broker; ``counts_of(topic)`` is (initial, undeleted) for an ordered
    topic and None for any other (MetadataCache.ordered_partition_counts)."""

    def __init__(self, counts_of: Callable[[str], tuple[int, int] | None]) -> None:
        self._counts_of = counts_of
        self._hashes: dict[bytes, int] = {}

    def check(self, tp: TopicPartition, records: bytes | memoryview, client_id: str | None) -> Refusal:
        counts = self._counts_of(tp.topic)
        if counts is None:
            return None
        initial, undeleted = counts
        declared = declared_counts(client_id).get(tp.topic)
        if declared is not None:
            if declared != undeleted:
                return (ErrorCode.FENCED_LEADER_EPOCH,
                        f"{tp.topic} has {undeleted} undeleted partitions, the producer routed with "
                        f"{declared}: refresh the count and re-send")
            if tp.partition >= undeleted:
                return ErrorCode.INVALID_RECORD, _marked(tp, undeleted)
            return None
        return self._check_keys(tp, records, initial, undeleted)

    def _check_keys(self, tp: TopicPartition, records: bytes | memoryview, initial: int, undeleted: int) -> Refusal:
        if tp.partition >= undeleted:
            return ErrorCode.INVALID_RECORD, _marked(tp, undeleted)
        level, split = level_and_split(initial, undeleted)
        low, high = initial << level, initial << (level + 1)
        hashes = self._hashes
        try:
            for key in record_keys(records):
                if key is None:
                    continue  # an unkeyed record may go to any undeleted partition
                raw = bytes(key)
                h = hashes.get(raw)
                if h is None:
                    if len(hashes) >= HASH_CACHE_SIZE:
                        hashes.clear()
                    h = hashes[raw] = murmur2(raw) & POSITIVE_MASK
                bucket = h % low
                if bucket < split:
                    bucket = h % high
                if bucket != tp.partition:
                    return ErrorCode.INVALID_RECORD, _misrouted(tp, raw, bucket, initial, undeleted)
        except UnsupportedCompressionError as exc:
            return (ErrorCode.INVALID_RECORD,
                    f"{tp.topic} has ordered delivery and this broker cannot read the batch's keys "
                    f"({exc}): send it uncompressed or gzip-compressed")
        except (ValueError, IndexError, EOFError, OSError):
            return None  # not records at all: the log's own checks refuse it as CORRUPT_MESSAGE
        return None


def _marked(tp: TopicPartition, undeleted: int) -> str:
    return (f"partition {tp.partition} of {tp.topic} is marked for deletion (the topic has "
            f"{undeleted} undeleted partitions) and takes no new records")


def _misrouted(tp: TopicPartition, key: bytes, bucket: int, initial: int, undeleted: int) -> str:
    shown = key[:40].decode("utf-8", "backslashreplace") + ("..." if len(key) > 40 else "")
    return (f"{tp.topic} has ordered delivery: key {shown!r} belongs to partition {bucket} "
            f"(linear hashing over {initial} initial and {undeleted} undeleted partitions), not "
            f"{tp.partition}; use odradek.client.OrderedProducer, or a murmur2 partitioner while "
            f"the count is {initial} x 2^L")
