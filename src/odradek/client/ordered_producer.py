"""OrderedProducer: confluent-kafka's Producer for topics with ordered delivery across
partition expansion and deletion (KIP-253), a one-line switch for an application.

    producer = OrderedProducer({"bootstrap.servers": "...", ...})   # was confluent_kafka.Producer
    producer.produce("orders", value, key=customer_id, on_delivery=report)
    producer.poll(0); producer.flush()

Where a record goes. On a topic with enable.ordered.delivery=true, keyed and unkeyed records
are partitioned by linear hashing (common/linear_hashing.py) over the topic's
initial_partition_count N and undeleted_partition_count: Kafka's murmur2 of the key masked
positive, so before any expansion a key lands exactly where Kafka's default partitioner puts it.
Unkeyed records go round-robin over the undeleted partitions. Every other topic is handed to
an ordinary confluent-kafka Producer, unchanged.

How order survives a change of the count. Each ordered topic has its own librdkafka producer,
whose client id declares the count it routes with (protocol/declared_partition_counts.py);
leaders refuse a record routed with any other count (FENCED_LEADER_EPOCH), and the count changes
on a leader together with the leader epoch bump that marks the consumers' barrier. So every
record acknowledged in an old partition lies before the barrier, and every refused record is
re-sent. On the first refusal the topic stops sending: new records are held, the inner producer
is drained (every record in flight acknowledged or refused: librdkafka refuses every later record
of the same partition too, since their count is just as stale), the count is read again, a new
inner producer declaring it is made, and the refused records are re-sent in the order the
application produced them, then the held ones. A key's records are therefore appended in
produce order: the ones before the refusal were acknowledged in the old partition (before the
barrier), the rest follow in the key's new partition.

Before re-sending, the recovery asks the log which refused records were written after all
(client/producer_writes.py): librdkafka's answer to a refusal is an epoch bump that sends a
record whose write was in doubt again as new, where it is refused too; such a record is
reported delivered, at the offset where it is, instead of written twice. The check reads the
producer's records past the last one acknowledged in each partition, which is why every
record's success is reported to OrderedProducer (a window by time instead would take an
earlier acknowledged record with the same key and value for a refused one, and lose it).

Delivery reports go to each record's on_delivery exactly once, from poll() and flush(), as in
confluent-kafka (with delivery.report.only.error=true, failures only: the inner producers
still report every record to OrderedProducer, which keeps where each partition was last
acknowledged); a refused record's report is the one of its re-send.
"""
from __future__ import annotations

import functools
import itertools
import logging
import time
from typing import Any, Callable, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from odradek.client.ordered_metadata import (
    OrderedMetadataClient,
    OrderedMetadataError,
    end_offsets_for_epochs,
    log_start_offsets,
    parse_bootstrap,
)
from odradek.client.partition_gates import MIGRATION_TOMBSTONE_HEADER, TopicLayout, split_epoch
from odradek.client.producer_writes import content_of, producer_id_at, written_by
from odradek.common.linear_hashing import POSITIVE_MASK, ancestors_of, level_and_split, murmur2
from odradek.common.metadata import TopicPartition
from odradek.protocol.declared_partition_counts import with_declared_counts

log = logging.getLogger(__name__)

DeliveryCallback = Callable[[Any, Any], None]

#: the header that marks KIP-253 part 9's tombstones, which OrderedConsumer never delivers
MIGRATION_TOMBSTONE_HEADERS: list[tuple[str, str | bytes | None]] = [(MIGRATION_TOMBSTONE_HEADER, b"1")]

#: how long a refused topic waits between reads of its count while the broker asked still
#: has the old one (the controller's UpdateMetadata reaches brokers a little apart)
COUNT_RETRY_BACKOFF_S = 0.05

#: how long a refused topic waits for its count to change before re-sending under the count it
#: has (the refusing leader may be the one behind)
COUNT_CHANGE_WAIT_S = 1.0

#: how long a recovery waits, in all, for the leaders' records to be committed or gone before
#: it reads which refused records were written after all (producer_writes.py)
WRITTEN_SETTLE_S = 15.0

#: how long the ancestors a partition's keys need tombstones in are trusted (retention may
#: empty an ancestor of its old records meanwhile)
TOMBSTONE_TARGETS_TTL_S = 60.0

#: distinct keys whose hash is kept (a key's hash does not depend on the count)
HASH_CACHE_SIZE = 65536

#: delivery errors after which a record is sent again, in order: the leader refused the count
#: it was routed with (KIP-253's InvalidPartitionMetadata), or librdkafka did not know the
#: partition yet (its metadata older than the count)
_SEND_AGAIN = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError._UNKNOWN_PARTITION})


class _Record(NamedTuple):
    """A record to send again (refused, or produced while the topic recovers from a refusal)."""

    value: Any
    key: Any
    timestamp: int
    headers: Any
    on_delivery: DeliveryCallback | None
    #: a refused record's delivery report message (its partition and content as sent)
    sent: Any = None


class _Delivered:
    """The delivery report of a refused record found in the log after all: the refusal's
    message (confluent-kafka's Message cannot be given an offset), with the offset it is at
    and no error."""

    def __init__(self, refused: Any, offset: int) -> None:
        self._refused, self._offset = refused, offset

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:  # topic(), partition(), key(), value(), headers(), ...
        return getattr(self._refused, name)


class _OrderedTopic:
    """One ordered topic: its counts, its inner producer and the records not yet reported.

    The path of a record is kept short (measured: a closure, a dataclass and a kwargs dict per
    record cut OrderedProducer to a quarter of a plain Producer's rate): the partition is
    computed inline from a cached hash, the delivery report goes to one bound method unless the
    application gave a callback (or a timestamp, which a failed report does not carry), and a
    refused record is rebuilt from its delivery report's message (key, value, headers), so
    nothing else is kept per record. A record re-sent without the application's timestamp is
    stamped when it is re-sent."""

    def __init__(self, owner: OrderedProducer, name: str, initial: int, undeleted: int) -> None:
        self.owner = owner
        self.name = name
        self.initial = initial
        self.undeleted = undeleted
        self.inner = owner._new_inner(name, undeleted)
        self._inner_since_ms = int(time.time() * 1000)  # its records are stamped no earlier
        self.refused: list[_Record] = []
        self.held: list[_Record] = []
        # the delivery report of the inner producer's last acknowledged record, per partition:
        # past it, only records of its that it was not told of are in the log (producer_writes.py)
        self._acked: dict[int, Any] = {}
        self._last_acked: Any = None  # of the current inner producer: its batch names its id
        self._producer_id: int | None = None
        self.fenced = False         # a refusal was seen: drain, re-read the count, re-send
        self.stale_count = False    # ... and the refusal said the count changed
        self._round_robin = itertools.count()
        self._hashes = owner._hashes
        self._report = self._acknowledged  # bound once, not per record
        self.compacted = owner._is_compacted(name)
        self._tombstoned: set[tuple[bytes, int]] = set()
        self._targets: dict[int, tuple[float, list[int]]] = {}
        self._split()

    def _split(self) -> None:
        level, self._split_at = level_and_split(self.initial, self.undeleted)
        self._low, self._high = self.initial << level, self.initial << (level + 1)

    def produce(self, value: Any, key: Any, timestamp: int, headers: Any, on_delivery: DeliveryCallback | None,
                again: bool = False) -> None:
        """Send, or hold behind the records waiting to be re-sent; ``again``: a re-send."""
        if not again and (self.fenced or self.refused or self.held):
            self.held.append(_Record(value, key, timestamp, headers, on_delivery))
            return
        if key is None:
            h = next(self._round_robin) & POSITIVE_MASK
        else:
            raw = key if type(key) is bytes else (key.encode() if isinstance(key, str) else bytes(key))
            cached = self._hashes.get(raw)
            h = self.owner._hash(raw) if cached is None else cached
        partition = h % self._low
        if partition < self._split_at:
            partition = h % self._high
        if self.compacted and key is not None and value is not None and partition >= self.initial:
            self._tombstones(raw, key, partition)
        # a failed delivery report carries no timestamp: one the application gave travels with
        # the report, so that a refused record is re-sent with it
        report = (self._report if on_delivery is None and not timestamp
                  else functools.partial(self._report_to, on_delivery, timestamp))
        while True:
            try:
                if timestamp or headers is not None:
                    self.inner.produce(self.name, value, key, partition, report, timestamp=timestamp, headers=headers)
                else:
                    self.inner.produce(self.name, value, key, partition, report)
                break
            except BufferError:  # librdkafka's queue is full: serve reports, as an application would
                self.inner.poll(0.1)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                    raise
                # librdkafka's metadata is older than the count (a partition just created)
                self._refuse(_Record(value, key, timestamp, headers, on_delivery), False)
                return

    def _acknowledged(self, err: Any, msg: Any) -> None:
        """The report of a record the application gave neither a callback nor a timestamp: the
        path of nearly every record, kept to one chained store (measured: a partial and two more
        calls here cost 10% of the produce rate)."""
        if err is None:
            self._acked[msg.partition()] = self._last_acked = msg
        else:
            self._report_to(None, 0, err, msg)

    def _report_to(self, on_delivery: DeliveryCallback | None, timestamp: int, err: Any, msg: Any) -> None:
        if err is None:
            self._acked[msg.partition()] = self._last_acked = msg
            if on_delivery is not None and self.owner._success_reports:
                on_delivery(err, msg)
            return
        if err.code() in _SEND_AGAIN:
            self._refuse(_Record(msg.value(), msg.key(), timestamp, msg.headers(), on_delivery, msg),
                         err.code() == KafkaError.FENCED_LEADER_EPOCH)
            return
        if on_delivery is not None:
            on_delivery(err, msg)

    def _tombstones(self, raw: bytes, key: Any, partition: int) -> None:
        """KIP-253 part 9 on a compacted topic: a tombstone for the key in each ancestor of its
        partition that still holds records from before the key moved away, once per key and
        ancestor, so compaction there drops the key's old values (its new ones never reach that
        partition to replace them). OrderedConsumer never delivers these tombstones
        (partition_gates.is_migration_tombstone); best effort, never re-sent."""
        now = time.monotonic()
        cached = self._targets.get(partition)
        if cached is None or cached[0] < now:
            cached = self._targets[partition] = (now + TOMBSTONE_TARGETS_TTL_S, self.owner._tombstone_targets(
                self.name, self.initial, self.undeleted, partition))
        for ancestor in cached[1]:
            if (raw, ancestor) in self._tombstoned:
                continue
            if len(self._tombstoned) >= HASH_CACHE_SIZE:
                self._tombstoned.clear()
            try:
                self.inner.produce(self.name, None, key, ancestor, self._tombstone_report,
                                   headers=MIGRATION_TOMBSTONE_HEADERS)
            except (BufferError, KafkaException):
                continue  # the key's next record tries again
            self._tombstoned.add((raw, ancestor))

    def _tombstone_report(self, _err: Any, _msg: Any) -> None:
        pass  # a lost tombstone only leaves an old value to retention

    def _refuse(self, record: _Record, stale_count: bool) -> None:
        self.fenced = True
        self.stale_count |= stale_count
        self.refused.append(record)

    def pending(self) -> int:
        return len(self.inner) + len(self.refused) + len(self.held)

    def serve(self, timeout_s: float) -> int:
        """Delivery reports, and the recovery from a refusal once the inner producer is drained."""
        served = self.inner.poll(timeout_s)
        if self.fenced:
            self.inner.flush(max(timeout_s, 0.0))
            if len(self.inner) == 0:  # every record in flight reported (librdkafka's count)
                self._recover()
        return int(served)

    def _recover(self) -> None:
        """Every record in flight is reported: after a stale count, read the count until it
        differs from the one refused and declare it in a new inner producer; re-send in
        produce order (a key's records were all in one partition, whose refusals librdkafka
        reports in order; the held ones came after them all)."""
        stale = self.undeleted
        counts = self.owner._counts(self.name)
        # the broker asked may not have the new count yet; or the leader that refused is the
        # one behind (its count older than ours): then, after a bounded wait, re-send under the
        # count we have, and the leader refuses again until it catches up
        waited_until = time.monotonic() + COUNT_CHANGE_WAIT_S
        while self.stale_count and (counts is None or counts[1] == stale) and time.monotonic() < waited_until:
            time.sleep(COUNT_RETRY_BACKOFF_S)
            counts = self.owner._counts(self.name)
        if counts is not None and counts != (self.initial, self.undeleted):
            self.initial, self.undeleted = counts
            self._split()
            log.info("%s: undeleted_partition_count %d -> %d; re-sending %d records in order",
                     self.name, stale, self.undeleted, len(self.refused))
            written = self._written(self.refused)
            # a topic grows only once its marked partitions are removed: the numbers past the
            # old count are new partitions, and offsets acknowledged in the old ones mean nothing
            for partition in range(stale, self.undeleted):
                self._acked.pop(partition, None)
            self.inner = self.owner._new_inner(self.name, self.undeleted)
            self._inner_since_ms = int(time.time() * 1000)
            self._last_acked, self._producer_id = None, None
        else:
            written = self._written(self.refused)
            time.sleep(COUNT_RETRY_BACKOFF_S)  # librdkafka's metadata catches up meanwhile
        again = [r for r in self.refused if id(r) not in written] + self.held
        self.refused, self.held, self.fenced, self.stale_count = [], [], False, False
        for record in again:
            self.produce(record.value, record.key, record.timestamp, record.headers, record.on_delivery, True)

    def _written(self, refused: list[_Record]) -> set[int]:
        """The ids of the refused records that are in the log after all, reported delivered
        (at the offset found) instead of sent again. Empty when the log cannot tell
        (producer_writes.py: then a record written before is sent again, never lost)."""
        if not refused:
            return set()
        producer_id = self._inner_producer_id()
        if producer_id is None:
            log.info("%s: the producer id is not known (nothing acknowledged yet): %d refused records are sent "
                     "again unchecked", self.name, len(refused))
            return set()
        by_partition: dict[int, list[_Record]] = {}
        for record in refused:
            if record.sent is not None:
                by_partition.setdefault(record.sent.partition(), []).append(record)
        deadline = time.monotonic() + WRITTEN_SETTLE_S
        written: dict[int, int] = {}  # id of the record -> the offset it is at
        for partition, records in by_partition.items():
            found = written_by(self.owner._bootstrap, self.owner._client_id, TopicPartition(self.name, partition),
                               producer_id, self._acked_next(partition), self._inner_since_ms,
                               max(0.0, deadline - time.monotonic()))
            if found is None:
                log.info("%s [%d]: cannot tell which of %d refused records were written; sending them again",
                         self.name, partition, len(records))
                continue
            for record in records:
                content = content_of(record.sent.key(), record.sent.value(), record.sent.headers())
                offsets = found.get(content)
                if offsets:
                    written[id(record)] = offsets.pop(0)
        if written:
            log.info("%s: %d of %d refused records were in the log after all (written while their producer "
                     "bumped its epoch); not sent again", self.name, len(written), len(refused))
            for record in refused:
                if id(record) in written and record.on_delivery is not None and self.owner._success_reports:
                    record.on_delivery(None, _Delivered(record.sent, written[id(record)]))
        return set(written)

    def _acked_next(self, partition: int) -> int | None:
        """The offset after the inner producer's last acknowledged record in ``partition``."""
        msg = self._acked.get(partition)
        return None if msg is None else int(msg.offset()) + 1

    def _inner_producer_id(self) -> int | None:
        """The inner producer's id, read from the batch of its last acknowledged record (not
        from ``_acked``, which keeps the previous inner producer's records as window starts)."""
        msg = self._last_acked
        if self._producer_id is None and msg is not None:
            self._producer_id = producer_id_at(self.owner._bootstrap, self.owner._client_id,
                                               TopicPartition(self.name, msg.partition()), int(msg.offset()))
        return self._producer_id


class OrderedProducer:
    """confluent_kafka.Producer's produce/poll/flush/len for ordered and plain topics alike
    (the module's text says how order is kept)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = dict(config)
        servers = self._config.get("bootstrap.servers") or self._config.get("metadata.broker.list")
        if not servers:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "bootstrap.servers is required"))
        self._client_id = str(self._config.get("client.id", "rdkafka"))
        self._plain = Producer(self._config)
        self._bootstrap = parse_bootstrap(servers)
        self._metadata = OrderedMetadataClient(self._bootstrap, self._client_id)
        self._topics: dict[str, _OrderedTopic | None] = {}
        self._hashes: dict[bytes, int] = {}
        # the inner producers report every record (OrderedProducer needs its acknowledged
        # offsets); the application gets the successes only if it asked for them
        self._success_reports = str(self._config.get("delivery.report.only.error", False)).lower() not in ("true", "1")

    # -- confluent-kafka's Producer ------------------------------------------------------------

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: DeliveryCallback | None = None, callback: DeliveryCallback | None = None,
                timestamp: int = 0, headers: Any = None) -> None:
        """As confluent-kafka's; on an ordered topic an explicit ``partition`` is refused (the
        key decides, or the record could land where its key does not belong)."""
        try:  # the path of every record: no method call to find the topic (profiled: 4% of its time)
            ordered = self._topics[topic]
        except KeyError:
            ordered = self._ordered(topic)
        report = on_delivery or callback
        if ordered is None:
            kwargs: dict[str, Any] = {"value": value, "key": key, "partition": partition}
            if report is not None:
                kwargs["on_delivery"] = report
            if timestamp:
                kwargs["timestamp"] = timestamp
            if headers is not None:
                kwargs["headers"] = headers
            self._plain.produce(topic, **kwargs)
            return
        if partition not in (-1, None):
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG,
                                            f"{topic} has ordered delivery: its records are partitioned by key, "
                                            f"not by an explicit partition"))
        ordered.produce(value, key, timestamp, headers, report)

    def poll(self, timeout: float = -1) -> int:
        timeout_s = 1e9 if timeout is None or timeout < 0 else timeout
        served = self._plain.poll(0)
        for ordered in self._ordered_topics():
            served += ordered.serve(0)
        if not served and timeout_s > 0:
            served = self._plain.poll(min(timeout_s, 0.1)) if not self._ordered_topics() else self._wait(timeout_s)
        return served

    def flush(self, timeout: float = -1) -> int:
        """Wait until every record is reported (re-sends included); returns how many are not."""
        deadline = time.monotonic() + (1e9 if timeout is None or timeout < 0 else timeout)
        while True:
            left = self._plain.flush(max(0.0, min(0.1, deadline - time.monotonic())))
            for ordered in self._ordered_topics():
                ordered.serve(min(0.1, max(0.0, deadline - time.monotonic())))
            left += sum(o.pending() for o in self._ordered_topics())
            if left == 0 or time.monotonic() >= deadline:
                return left

    def __len__(self) -> int:
        return len(self._plain) + sum(o.pending() for o in self._ordered_topics())

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._plain.list_topics(topic, timeout)

    def close(self) -> None:
        """Release the side connection (librdkafka's producers go with the object)."""
        self._metadata.close()

    # -- what the topics share -------------------------------------------------------------------

    def _wait(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        served = 0
        while not served and time.monotonic() < deadline:
            served += self._plain.poll(0)
            for ordered in self._ordered_topics():
                served += ordered.serve(min(0.05, max(0.0, deadline - time.monotonic())))
        return served

    def _ordered_topics(self) -> list[_OrderedTopic]:
        return [t for t in self._topics.values() if t is not None]

    def _ordered(self, topic: str) -> _OrderedTopic | None:
        try:
            return self._topics[topic]
        except KeyError:
            pass
        counts = self._counts(topic)
        ordered = None if counts is None else _OrderedTopic(self, topic, *counts)
        self._topics[topic] = ordered
        return ordered

    def _counts(self, topic: str) -> tuple[int, int] | None:
        """(initial, undeleted) of an ordered topic, None for a plain one (or an unknown one,
        which librdkafka may auto-create as a plain topic)."""
        try:
            found = self._metadata.counts([topic])[topic]
        except OrderedMetadataError as exc:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT,
                                            f"cannot read the partition counts of {topic}: {exc}")) from None
        if not found.ordered:
            return None
        return found.initial_partition_count, found.undeleted_partition_count

    def _hash(self, key: bytes) -> int:
        h = self._hashes.get(key)
        if h is None:
            if len(self._hashes) >= HASH_CACHE_SIZE:
                self._hashes.clear()
            h = self._hashes[key] = murmur2(key) & POSITIVE_MASK
        return h

    def _is_compacted(self, topic: str) -> bool:
        try:
            return self._metadata.compacted([topic])[topic]
        except OrderedMetadataError:
            return False

    def _tombstone_targets(self, topic: str, initial: int, undeleted: int, partition: int) -> list[int]:
        """The ancestors of ``partition`` that still hold records from before its key space
        was split off them: their log start is below the end of their leader epoch at the
        split (KIP-253 part 9 asks the opposite, "earliest offset > lowerOffsetThreshold",
        which would send tombstones exactly where nothing is left to compact away;
        docs/architecture.md). Empty when the lookups fail (tombstones are best effort)."""
        chain = [partition, *ancestors_of(partition, initial)]
        try:
            answer = self._metadata.leader_epochs([TopicPartition(topic, d) for d in chain[:-1]])
            if answer is None:
                return []
            layout = TopicLayout(initial, undeleted, undeleted, after_creation={
                tp.partition: dict(e.leader_epoch_after_creation) for tp, e in answer.partitions.items()
                if e.leader_epoch_after_creation})
            epochs = {TopicPartition(topic, q): e for q in chain[1:]
                      if (e := split_epoch(layout, partition, q)) is not None}
            ends = end_offsets_for_epochs(self._bootstrap, self._client_id, epochs)
            starts = log_start_offsets(self._bootstrap, self._client_id, list(epochs))
        except (OrderedMetadataError, OSError) as exc:
            log.info("%s: no tombstone targets for partition %d now: %s", topic, partition, exc)
            return []
        return [tp.partition for tp in epochs if tp in starts and tp in ends and starts[tp] < ends[tp]]

    def _new_inner(self, topic: str, undeleted: int) -> Producer:
        """A librdkafka producer declaring ``undeleted``. Idempotent unless the application
        turned idempotence off, and then one request in flight: a batch retried after a later
        one was written, and then refused for a changed count, would be re-sent past the
        barrier behind its successor."""
        config = dict(self._config)
        config["delivery.report.only.error"] = False
        config.setdefault("enable.idempotence", True)
        if str(config["enable.idempotence"]).lower() in ("false", "0"):
            config["max.in.flight.requests.per.connection"] = 1
        config["client.id"] = with_declared_counts(self._client_id, {topic: undeleted})
        return Producer(config)
