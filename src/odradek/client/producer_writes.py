"""Which records an idempotent producer wrote to a partition: how OrderedProducer tells a
refused record that is in the log after all from one that is not, before it sends it again.

Why it must ask. librdkafka answers any permanent produce error of an idempotent producer
(the ordered-delivery fence's FENCED_LEADER_EPOCH is one) by bumping the producer epoch and
sending every record not yet acknowledged again, from sequence 0, on every partition of that
producer. A record whose write was not confirmed (a request that timed out, an answer of
NOT_ENOUGH_REPLICAS_AFTER_APPEND) may be in the log; sent again under the new epoch it cannot
be recognised as a retry, the fence refuses it for the stale count, and it comes back to
OrderedProducer as refused. Re-sent as refused, it was in the log twice (librdkafka's debug
log of a fault run shows the sequence: FENCED on one partition, "epoch bump ... message
sequence gap", a record answered NOT_ENOUGH_REPLICAS_AFTER_APPEND on another partition sent
again as BaseSeq 0 and refused). The Java client does not bump while a write is in doubt;
librdkafka 2.16 does.

How it is told. A producer's records in a partition are exactly its batches that carry its
producer id (only it has that id), so after the last record it saw acknowledged there, its
batches hold the refused records that were written, and nothing else of the application's.
The leader's log is read once every record it held when asked is committed or gone (its high
watermark reached its log end as it was; asked again after a leader change, whose new log
may have lost uncommitted records), so a record not found was not written and never will be.
A refused record is matched by its key, value and headers (a failed delivery report carries
no timestamp), in order, so two identical records of the producer match one written copy
each; it is reported delivered at the offset found.

What it cannot tell. Records deleted before they are read (DeleteRecords on a partition that
KIP-253 marked for deletion, soon after the marking; retention) cannot be matched; a refused
record written among them is sent again, written twice and never lost, and a warning names
the offsets. docs/architecture.md asks operators to leave a marked partition's records for a
while for this reason. The broker's producer state cannot stand in for them: it knows the
producer's sequence numbers, and librdkafka does not tell its application which number a
record had.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any, Iterable, Sequence

from odradek.client.broker_connection import BrokerConnection, metadata_response
from odradek.common.metadata import TopicPartition
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import CorruptRecordError, decode_records, iter_batches

log = logging.getLogger(__name__)

_FETCH, _LIST_OFFSETS, _OFFSET_FOR_LEADER_EPOCH = 1, 2, 23
_FETCH_MAX_BYTES = 1 << 20
_BACKOFF_S = 0.05

#: a record as the producer sent it: (key, value, headers)
Content = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def content_of(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None) -> Content:
    return key, value, tuple((name, v) for name, v in (headers or ()))


def producer_id_at(bootstrap: Sequence[tuple[str, int]], client_id: str, tp: TopicPartition,
                   offset: int) -> int | None:
    """The producer id of the batch holding ``offset`` (one of the producer's own
    acknowledged records), None if it cannot be read now."""
    try:
        conn = _leader(bootstrap, client_id, tp)
    except _Removed:
        return None
    if conn is None:
        return None
    try:
        for header, _batch in _fetch(conn, tp, offset):
            if header.base_offset <= offset <= header.base_offset + header.last_offset_delta:
                return header.producer_id if header.producer_id >= 0 else None
        return None
    except (OSError, CorruptRecordError, ValueError) as exc:
        log.info("%s: cannot read the batch at offset %d: %s", tp, offset, exc)
        return None
    finally:
        conn.close()


def written_by(bootstrap: Sequence[tuple[str, int]], client_id: str, tp: TopicPartition, producer_id: int,
               start: int | None, since_timestamp: int, settle_s: float) -> dict[Content, list[int]] | None:
    """The offsets (in order) of the records producer ``producer_id`` has in ``tp``, by content,
    from offset ``start`` on (None: from
    the first record stamped ``since_timestamp`` or later, the time the producer was made),
    read once the leader's records at the time of
    asking are committed or gone; None if that did not happen within ``settle_s`` or the log
    could not be read."""
    deadline = time.monotonic() + settle_s
    settled_at: tuple[int, int] | None = None  # (leader epoch, log end offset then)
    while True:
        try:
            conn = _leader(bootstrap, client_id, tp)
        except _Removed as exc:
            log.info("%s: cannot read producer %d's records: %s", tp, producer_id, exc)
            return None
        if conn is not None:
            try:
                # the leader's own epoch (a broker's metadata may lag it), then its log end
                high_watermark, epoch = _list_offset(conn, tp, -1)
                if high_watermark is not None and (settled_at is None or settled_at[0] != epoch):
                    settled_at = (epoch, _log_end(conn, tp, epoch))
                if high_watermark is not None and settled_at is not None and high_watermark >= settled_at[1]:
                    begin = start
                    if begin is None:
                        at, _ = _list_offset(conn, tp, since_timestamp)
                        begin = high_watermark if at is None or at < 0 else at
                    return _records_of(conn, tp, producer_id, begin, high_watermark)
            except CorruptRecordError as exc:  # a compression the reader does not decode
                log.info("%s: cannot read producer %d's records: %s", tp, producer_id, exc)
                return None
            except (OSError, ValueError) as exc:
                log.info("%s: reading producer %d's records: %s", tp, producer_id, exc)
            finally:
                conn.close()
        if time.monotonic() > deadline:
            return None
        time.sleep(_BACKOFF_S)


def _leader(bootstrap: Sequence[tuple[str, int]], client_id: str, tp: TopicPartition) -> BrokerConnection | None:
    """A connection to the partition's leader as a broker's metadata names it (a former
    leader answers NOT_LEADER_OR_FOLLOWER, and the caller asks again)."""
    host, port = bootstrap[int(time.monotonic() * 10) % len(bootstrap)]
    try:
        conn = BrokerConnection(host, port, client_id)
        try:
            response = metadata_response(conn, [tp.topic])
        finally:
            conn.close()
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        known = False
        for t in response.topics:
            for p in t.partitions:
                if t.name == tp.topic and p.partition_index == tp.partition:
                    known = True
                    if p.leader_id in brokers:
                        return BrokerConnection(*brokers[p.leader_id], client_id)
        if not known and any(t.name == tp.topic and t.error_code == ErrorCode.NONE for t in response.topics):
            raise _Removed(f"{tp} is not in the metadata of a broker that has its topic")
    except OSError as exc:
        log.debug("%s: no leader found now: %s", tp, exc)
    return None


class _Removed(Exception):
    """The partition is gone (KIP-253 removed it once drained): its records cannot be read."""


def _log_end(conn: BrokerConnection, tp: TopicPartition, epoch: int) -> int:
    """The leader's log end offset: the end of its current epoch (OffsetsForLeaderEpoch)."""
    response = conn.request(_OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": -1, "topics": [{"topic": tp.topic, "partitions": [
        {"partition": tp.partition, "current_leader_epoch": epoch, "leader_epoch": epoch}]}]})
    p = response.topics[0].partitions[0]
    if p.error_code != ErrorCode.NONE or p.end_offset < 0:
        raise ValueError(f"OffsetsForLeaderEpoch: error {p.error_code}")
    return int(p.end_offset)


def _list_offset(conn: BrokerConnection, tp: TopicPartition, timestamp: int) -> tuple[int | None, int]:
    """ListOffsets at the leader: (offset, the leader's epoch); offset None on an error
    (OFFSET_NOT_AVAILABLE while a new leader's high watermark catches up, NOT_LEADER...)."""
    response = conn.request(_LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [{
        "name": tp.topic, "partitions": [{"partition_index": tp.partition, "current_leader_epoch": -1,
                                          "timestamp": timestamp}]}]})
    p = response.topics[0].partitions[0]
    return (None if p.error_code != ErrorCode.NONE else int(p.offset)), int(p.leader_epoch)


def _fetch(conn: BrokerConnection, tp: TopicPartition, offset: int) -> list[tuple[Any, bytes]]:
    """The complete batches one Fetch at ``offset`` returns, with their bytes."""
    response = conn.request(_FETCH, 11, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": _FETCH_MAX_BYTES, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": tp.topic, "partitions": [
            {"partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": _FETCH_MAX_BYTES}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    p = response.responses[0].partitions[0]
    if p.error_code != ErrorCode.NONE:
        raise ValueError(f"Fetch at {offset}: error {p.error_code}")
    records = bytes(p.records or b"")
    return [(h, records[h.position:h.position + h.size]) for h in iter_batches(records)]


def _records_of(conn: BrokerConnection, tp: TopicPartition, producer_id: int, begin: int,
                end: int) -> dict[Content, list[int]]:
    """Counted from the log start when ``begin`` is below it: records deleted meanwhile
    (retention, DeleteRecords of a drained partition) cannot be counted, and a record not
    counted is sent again (twice at worst, never lost)."""
    found: dict[Content, list[int]] = defaultdict(list)
    log_start, _ = _list_offset(conn, tp, -2)
    if log_start is not None and log_start > begin:
        log.warning("%s: offsets %d to %d were deleted before producer %d's refused records were looked for "
                    "there; any of them written there is sent again, and is then in the log twice",
                    tp, begin, log_start, producer_id)
    offset = max(begin, log_start or 0)
    while offset < end:
        batches = _fetch(conn, tp, offset)
        if not batches:
            break
        for header, batch in batches:
            if header.producer_id == producer_id:
                for at, _timestamp, key, value, headers in decode_records(batch):
                    if begin <= at < end:
                        found[content_of(key, value, headers)].append(at)
            offset = max(offset, header.base_offset + header.last_offset_delta + 1)
    return dict(found)
