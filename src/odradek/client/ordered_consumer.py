"""OrderedConsumer: confluent-kafka's Consumer for topics with ordered delivery across partition
expansion and deletion (KIP-253 parts 6-8), a one-line switch for an application.

    consumer = OrderedConsumer({"bootstrap.servers": "...", "group.id": "billing"})
    consumer.subscribe(["orders"], on_partition_key_assigned=..., on_partition_key_maybe_revoked=...)
    while True:
        msg = consumer.poll(1.0)       # a confluent_kafka.Message

How. The group is joined by odradek's own member (group_membership.py: KIP-253 part 6 needs an
assignor librdkafka cannot take from Python, and part 7 needs the generation id), and records
are fetched by a librdkafka Consumer on the assigned partitions (assign(), never subscribe()).
Each owned partition of an ordered topic has a gate (partition_gates.py): a partition an
expansion created delivers nothing until the group has read its parent past the expansion's
barrier, and a partition receiving a deleted partition's keys stops at the deletion's barrier
until the group has read the deleted partition to its end. A closed gate pauses the partition
in librdkafka and seeks back to the first record not delivered, so nothing is skipped.

The group's positions travel through the coordinator (ConsumerGroupPosition) every heartbeat
interval, from the heartbeat thread (four times an interval while a gate waits): each member
asks for the partitions its gates wait on and reports the positions the coordinator asked it
for. The position of a partition is the offset
after the last record poll() returned, so a gate opens only on records the application has
been given. Which positions to report follows part 7's condition (first time asked; or the
position grew and reached the high watermark; or the leader epoch of the last delivered record
grew), decided in poll() so that ``on_partition_key_maybe_revoked`` runs in the application's
thread before the position leaves.

Starting offsets: the committed offset, else auto.offset.reset, except that a partition an
expansion created always starts at its log start: its first records were written before any
member saw it, and "latest" would skip them.

A change of a subscribed topic's partition count or undeleted count (read every heartbeat)
makes the member rejoin, which re-plans the gates (KIP-253 part 8 step 6's purpose).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from odradek.client.group_membership import Assignment, GroupMember, GroupMembershipError, GroupTimeoutError
from odradek.client.ordered_metadata import (
    CountsAsOf,
    OrderedMetadataClient,
    OrderedMetadataError,
    counts_as_of_epoch,
    end_offsets_for_epochs,
    parse_bootstrap,
    watermarks,
)
from odradek.client.partition_gates import Gate, TopicLayout, is_migration_tombstone, lookups_for, may_be_waited_on
from odradek.common.metadata import TopicPartition
from odradek.protocol import ordered_delivery_api as api
from odradek.protocol.errors import ErrorCode
from odradek.protocol.schema import SchemaError

log = logging.getLogger(__name__)

Callback = Callable[..., None]

#: confluent-kafka configuration keys that belong to the group member, not the fetcher
_GROUP_KEYS = ("group.id", "group.instance.id", "session.timeout.ms", "heartbeat.interval.ms",
               "max.poll.interval.ms", "partition.assignment.strategy", "enable.auto.commit",
               "auto.commit.interval.ms", "group.protocol.type", "on_commit", "enable.auto.offset.store")

#: records taken from librdkafka per consume() call
FETCH_BATCH = 500
#: the most time between two rounds of the group's housekeeping in poll()
HOUSEKEEPING_S = 0.02
#: how long an incomplete KIP-253 layout is read again before the member rejoins
LAYOUT_WAIT_S = 5.0
#: how long a new assignment's offsets are waited for before the member gives it back (rejoins)
WATERMARKS_WAIT_S = 10.0

#: how often a partition held back that long is logged (with what it waits for)
BLOCKED_LOG_INTERVAL_S = 30.0
#: how long a marked partition's high watermark is reused by the gates waiting on it
MARKED_END_TTL_S = 0.5
#: how long an automatic commit (the timer, a rebalance, close) may try: the next one carries
#: the same positions, and a rebalance must not wait for a coordinator's whole retry budget
QUIET_COMMIT_TIMEOUT_S = 5.0
#: heartbeat intervals after taking an assignment during which a member that owns a partition
#: another's gate may wait on exchanges positions four times an interval. The member waiting
#: asks for that position from its first exchange on, but the owner hears it is wanted only
#: at its own next exchange: with the owner at one exchange an interval, a child opened up to
#: one interval after the group passed its parent's barrier (p99 0.48-0.68 s at
#: heartbeat.interval.ms 500, bench ordered, three runs)
HURRY_AFTER_ASSIGNMENT_INTERVALS = 3


@dataclass
class _Owned:
    """One partition this member owns in the current generation."""

    tp: TopicPartition
    position: int                    # offset after the last record delivered (the start at first)
    gate: Gate | None = None         # None: a plain topic's partition, never held back
    paused: bool = False
    last_epoch: int = -1             # leader epoch of the last record delivered
    reported: tuple[int, int] | None = None   # (position, last_epoch) last published for the coordinator
    high_watermark: int = -1
    key_assigned: bool = False       # on_partition_key_assigned has run for it
    blocked_since_ms: int = 0        # wall clock when it last stopped at a closed barrier
    compacted: bool = False          # of a compacted ordered topic: migration tombstones are skipped
    limit: int | None = None         # the gate's limit as of the last housekeeping (-1: closed)
    checked_epoch: int = -1          # records up to this leader epoch were checked against the layout
    told_blocked_at: float = 0.0     # monotonic time of the last "still blocked" log line


@dataclass
class _Exchange:
    """What the poll thread and the heartbeat thread share, under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    reports: dict[TopicPartition, api.ReportedPosition] = field(default_factory=dict)
    requested: tuple[TopicPartition, ...] = ()
    blocked: dict[TopicPartition, api.BlockedPartition] = field(default_factory=dict)
    group_positions: dict[TopicPartition, int] = field(default_factory=dict)
    wanted: frozenset[TopicPartition] = frozenset()
    asked_before: frozenset[TopicPartition] = frozenset()
    #: the generation whose assignment the poll thread has taken (-1 while rejoining): answers
    #: to an exchange of another generation are dropped, as the coordinator drops positions
    generation: int = -1


class OrderedConsumer:
    """confluent_kafka.Consumer's subscribe/poll/commit/close with KIP-253's ordering for
    ordered topics (the module's text says how); plain topics are read as any consumer would."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = dict(config)
        group_id = self._config.get("group.id")
        servers = self._config.get("bootstrap.servers") or self._config.get("metadata.broker.list")
        if not group_id or not servers:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "group.id and bootstrap.servers are required"))
        self._group_id = str(group_id)
        self._client_id = str(self._config.get("client.id", "rdkafka"))
        self._bootstrap = parse_bootstrap(str(servers))
        self._auto_commit = str(self._config.get("enable.auto.commit", True)).lower() in ("true", "1")
        self._auto_commit_s = int(self._config.get("auto.commit.interval.ms", 5000)) / 1000
        self._auto_store = str(self._config.get("enable.auto.offset.store", True)).lower() in ("true", "1")
        self._stored: dict[TopicPartition, tuple[int, int]] = {}
        self._commit_timeout_s = 30.0
        self._reset_earliest = str(self._config.get("auto.offset.reset", "latest")) in ("earliest", "smallest",
                                                                                         "beginning")
        fetch_config = {k: v for k, v in self._config.items() if k not in _GROUP_KEYS}
        self._user_eof = str(self._config.get("enable.partition.eof", False)).lower() in ("true", "1")
        fetch_config.update({"group.id": f"{self._group_id}.odradek-fetcher-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "enable.auto.offset.store": False})
        self._fetcher = Consumer(fetch_config)
        self._heartbeat_interval_s = int(self._config.get("heartbeat.interval.ms", 3000)) / 1000
        #: monotonic time until which the heartbeat thread hurries for the others' gates
        self._hurry_until = 0.0
        self._member = GroupMember(
            self._bootstrap, self._group_id, self._client_id, self._assign,
            session_timeout_ms=int(self._config.get("session.timeout.ms", 45000)),
            heartbeat_interval_ms=int(self._heartbeat_interval_s * 1000),
            rebalance_timeout_ms=int(self._config.get("max.poll.interval.ms", 300000)),
            group_instance_id=self._config.get("group.instance.id"),
            on_heartbeat=self._on_heartbeat, hurry=self._hurried)
        self._metadata = OrderedMetadataClient(self._bootstrap, self._client_id)      # the poll thread's
        self._hb_metadata = OrderedMetadataClient(self._bootstrap, self._client_id)   # the heartbeat thread's
        self._topics: list[str] = []
        self._callbacks: dict[str, Callback | None] = {}
        self._owned: dict[TopicPartition, _Owned] = {}
        self._layouts: dict[str, TopicLayout] = {}
        self._checked: dict[str, CountsAsOf] = {}  # per topic, the last layout check's answer
        self._exchange = _Exchange()
        self._joined = False
        self._buffered: collections.deque[Any] = collections.deque()
        #: each topic's partition count as last read (by the assignment, then by the heartbeat
        #: thread): a marked partition at or past it has been removed, which happens only once it
        #: was empty (drained). A count read before an expansion would take the new partitions
        #: for removed ones: a fault run's member got an assignment after 34 s without a
        #: heartbeat, across an expansion, and read past a deletion barrier on the count of before
        self._latest_totals: dict[str, int] = {}
        self._assignments_taken = 0  # a count read that began before one is not kept
        # per topic, the fewest partitions it had since this generation's assignment: a partition
        # removed meanwhile is never committed in it, not even once its number exists again
        self._fewest_totals: dict[str, int] = {}
        #: topics seen with ordered delivery: a broker answering one as plain has not heard yet
        self._ordered_topics: set[str] = set()
        #: marked partitions' high watermarks, briefly cached (topic-partition -> (until, value))
        self._ends: dict[TopicPartition, tuple[float, int | None]] = {}
        self._next_housekeeping = 0.0
        self._next_commit = time.monotonic() + self._auto_commit_s
        self._closed = False

    # -- confluent-kafka's Consumer ------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callback | None = None, on_revoke: Callback | None = None,
                  on_lost: Callback | None = None, on_partition_key_assigned: Callback | None = None,
                  on_partition_key_maybe_revoked: Callback | None = None) -> None:
        """As confluent-kafka's, plus KIP-253's PartitionKeyRebalanceListener callbacks (each
        called with (consumer, [TopicPartition])): a partition's keys become this member's to
        deliver (its gates opened), or may soon be another member's (its position is about to be
        reported to members waiting on it)."""
        self._topics = list(dict.fromkeys(topics))
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost,
                           "key_assigned": on_partition_key_assigned,
                           "key_maybe_revoked": on_partition_key_maybe_revoked}
        self._member.request_rejoin()

    def poll(self, timeout: float = -1) -> Any:
        """The next record the gates allow, or None after ``timeout`` seconds.

        Records come from librdkafka in batches (consume(), one call per up to FETCH_BATCH
        records rather than one poll() each) and the group's housekeeping (rejoining,
        auto-commit, opening gates, publishing positions) runs at most every HOUSEKEEPING_S:
        doing both per record cost more than half the consumer's throughput."""
        clock = time.monotonic
        deadline = clock() + (1e9 if timeout is None or timeout < 0 else timeout)
        buffered = self._buffered
        while True:
            now = clock()
            if now >= self._next_housekeeping:
                self._housekeeping(deadline)
                self._next_housekeeping = clock() + HOUSEKEEPING_S
            while buffered:
                delivered = self._admit(buffered.popleft())
                if delivered is not None:
                    return delivered
            # what librdkafka has now, without waiting for a whole batch (consume() with a
            # timeout waits until FETCH_BATCH records came or the time is up); if nothing, wait
            # for one record as poll() does
            batch = self._fetcher.consume(FETCH_BATCH, 0)
            if not batch:
                msg = self._fetcher.poll(max(0.0, min(deadline - clock(), HOUSEKEEPING_S)))
                batch = [] if msg is None else [msg]
            buffered.extend(batch)
            if not buffered and clock() >= deadline:
                return None

    def _housekeeping(self, deadline: float) -> None:
        rejoining = bool(self._topics) and (not self._joined or self._member.needs_rejoin)
        if rejoining:
            self._rejoin(deadline)
        waited_before = bool(self._exchange.requested)
        self._maybe_auto_commit()
        self._open_gates()
        self._publish_reports()
        if (rejoining and self._hurried()) or (self._exchange.requested and not waited_before):
            # a new generation whose gates wait on the group or whose partitions others' gates
            # may wait on, or a gate that began to wait: exchange now, not at the next heartbeat
            self._member.hurry_now()

    def commit(self, message: Any = None, offsets: list[KafkaTopicPartition] | None = None,
               asynchronous: bool = True) -> None:
        """Commits the positions of delivered records (with enable.auto.offset.store=false, the
        offsets store_offsets() stored), or the given message's / offsets, as the group member
        of the current generation. Synchronous whatever ``asynchronous`` says; failures raise
        KafkaException as confluent-kafka's do (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, ...)."""
        if message is not None:
            wanted = {TopicPartition(message.topic(), message.partition()): _next_of(message)}
        elif offsets is not None:
            wanted = {TopicPartition(o.topic, o.partition): (o.offset, -1) for o in offsets}
        elif not self._auto_store:
            wanted = {tp: stored for tp, stored in self._stored.items() if tp in self._owned}
        else:
            wanted = {tp: (o.position, o.last_epoch) for tp, o in self._owned.items()}
        wanted = committable(wanted, self._latest_totals, self._fewest_totals)
        if not wanted:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no offset to commit"))
        try:
            self._member.commit_offsets(wanted, timeout_s=self._commit_timeout_s)
        except GroupMembershipError as exc:
            code = getattr(exc, "error_code", None)
            raise KafkaException(KafkaError(code if isinstance(code, int) and code > 0 else KafkaError._FAIL,
                                            str(exc))) from None
        for tp in wanted:
            self._stored.pop(tp, None)

    def store_offsets(self, message: Any = None, offsets: list[KafkaTopicPartition] | None = None) -> None:
        """As confluent-kafka's: the offset after ``message`` (or the given ones) is what the
        next commit() commits, with enable.auto.offset.store=false."""
        if message is not None:
            self._stored[TopicPartition(message.topic(), message.partition())] = _next_of(message)
        for o in offsets or ():
            self._stored[TopicPartition(o.topic, o.partition)] = (o.offset, -1)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._fetcher.list_topics(topic, timeout)

    def barriers(self) -> dict[KafkaTopicPartition, tuple[int, int]]:
        """The partitions held back now: (the partition waited on, the group position needed
        there, or -1 for "read to its end"), what groups describe shows (for monitoring)."""
        return {KafkaTopicPartition(o.tp.topic, o.tp.partition): (why.waits_on, why.barrier_offset)
                for o in self._owned.values() if o.paused and (why := _why(o)) is not None}

    def assignment(self) -> list[KafkaTopicPartition]:
        return [KafkaTopicPartition(tp.topic, tp.partition) for tp in self._owned]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._auto_commit and self._joined:
                self._commit_quietly()
            self._member.leave()
        finally:
            self._member.close()
            self._fetcher.close()
            self._metadata.close()
            self._hb_metadata.close()

    # -- the group: assignment (part 6) and rejoining ------------------------------------------

    def _assign(self, subscriptions: dict[str, list[str]]) -> dict[str, list[TopicPartition]]:
        """The leader's assignor: per topic, the undeleted partitions and the partitions marked
        for deletion are dealt out separately (KIP-253 part 6), each round-robin over the
        members subscribed to the topic, so new records spread evenly whatever is draining."""
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        counts = self._metadata.counts(topics)
        for topic in topics:
            c = counts[topic]
            if c.error_code or c.partition_count <= 0:
                continue
            members = sorted(m for m, ts in subscriptions.items() if topic in ts)
            undeleted = c.undeleted_partition_count if c.ordered else c.partition_count
            groups = [range(0, undeleted), range(undeleted, c.partition_count)]
            start = 0
            for partitions in groups:
                for i, p in enumerate(partitions):
                    out[members[(start + i) % len(members)]].append(TopicPartition(topic, p))
                start += len(partitions)  # the marked ones continue where the undeleted left off
        return out

    def _rejoin(self, deadline: float) -> None:
        self._buffered.clear()  # fetched under the old assignment: the new one starts at its own offsets
        if self._owned:
            revoked = [KafkaTopicPartition(tp.topic, tp.partition) for tp in self._owned]
            if self._auto_commit:
                self._commit_quietly()
            self._call("revoke", revoked)
            self._fetcher.unassign()
            self._owned = {}
        with self._exchange.lock:
            self._exchange.reports, self._exchange.requested = {}, ()
            self._exchange.group_positions, self._exchange.wanted = {}, frozenset()
            self._exchange.asked_before, self._exchange.generation = frozenset(), -1
        try:
            assignment = self._member.join(self._topics, timeout_s=max(1.0, deadline - time.monotonic()) + 60)
        except GroupTimeoutError as exc:
            # retriable (no coordinator reachable, or the group did not settle): poll() returns
            # nothing and the next housekeeping joins again, as librdkafka's consumer never gives
            # up; a fault run's member process died of it after a minute without a coordinator
            log.warning("group %s: %s; joining again", self._group_id, exc)
            self._joined = False
            return
        try:
            self._take(assignment)
        except (OrderedMetadataError, KafkaException, OSError) as exc:
            # holding partitions without reading them would stall the group's gates on them
            log.warning("group %s: cannot take generation %d's assignment (%s); rejoining", self._group_id,
                        assignment.generation_id, exc)
            self._owned, self._joined = {}, False
            self._fetcher.unassign()
            self._member.request_rejoin()
            return
        self._joined = True
        with self._exchange.lock:
            self._exchange.generation = assignment.generation_id

    def _take(self, assignment: Assignment) -> None:
        """Starting offsets, layouts and gates for a new assignment, then hand it to librdkafka
        (the partitions whose gates are closed paused before any fetch)."""
        partitions = list(assignment.partitions)
        committed = self._member.fetch_offsets(partitions) if partitions else {}
        self._layouts = self._read_layouts(sorted({tp.topic for tp in partitions}))
        self._assignments_taken += 1
        self._fewest_totals = {topic: layout.total for topic, layout in self._layouts.items()}
        self._latest_totals.update(self._fewest_totals)
        self._checked = {}
        owned: dict[TopicPartition, _Owned] = {}
        reads_from_start: dict[TopicPartition, bool] = {}  # the ordered topics' partitions
        marks = self._watermarks(partitions)
        for tp in partitions:
            low, high = marks[tp]
            layout = self._layouts.get(tp.topic)
            start = committed.get(tp)
            created = layout is not None and tp.partition in layout.after_creation
            # above the high watermark is out of range: a new leader answers ListOffsets only
            # once its high watermark reached its epoch's start (past every committed offset),
            # so such an offset was committed for an earlier partition of the same number
            if start is None or start < low or start > high:
                start = low if (created or self._reset_earliest or start is not None and start < low) else high
            owned[tp] = _Owned(tp, start, high_watermark=high)
            if layout is not None:
                reads_from_start[tp] = start <= low
        for tp, gate in self._gates(reads_from_start).items():
            owned[tp].gate = gate
            owned[tp].compacted = self._layouts[tp.topic].compacted
            owned[tp].limit = -1 if gate.parent is not None else min(gate.deletions.values(), default=None)
        self._owned = owned
        if any(may_be_waited_on(self._layouts[tp.topic], tp.partition) for tp in owned if tp.topic in self._layouts):
            self._hurry_until = time.monotonic() + HURRY_AFTER_ASSIGNMENT_INTERVALS * self._heartbeat_interval_s
        assigned = [KafkaTopicPartition(tp.topic, tp.partition, o.position) for tp, o in owned.items()]
        self._fetcher.assign(assigned)
        if assigned:
            # librdkafka keeps a partition's pause across unassign() and assign(): one held
            # back in the last generation would never be fetched again
            self._fetcher.resume(assigned)
        closed = [KafkaTopicPartition(tp.topic, tp.partition) for tp, o in owned.items()
                  if o.gate is not None and (o.gate.parent is not None or o.gate.deletions)]
        if closed:
            self._fetcher.pause(closed)
            now_ms = int(time.time() * 1000)
            for k in closed:
                owned[TopicPartition(k.topic, k.partition)].paused = True
                owned[TopicPartition(k.topic, k.partition)].blocked_since_ms = now_ms
        self._call("assign", [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions])
        open_now = [tp for tp, o in owned.items() if not o.paused]
        for tp in open_now:
            owned[tp].key_assigned = True
        if open_now:
            self._call("key_assigned", [KafkaTopicPartition(tp.topic, tp.partition) for tp in open_now])
        log.info("group %s generation %d: %d partitions (%d waiting on a barrier)", self._group_id,
                 assignment.generation_id, len(owned), len(closed))

    def _watermarks(self, partitions: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """Log start and high watermark of each partition (ListOffsets at the leaders), asked
        again for up to WATERMARKS_WAIT_S while a leader does not answer (one just restarted,
        or a partition just created); then OrderedMetadataError, and the member rejoins."""
        deadline = time.monotonic() + WATERMARKS_WAIT_S
        found: dict[TopicPartition, tuple[int, int]] = {}
        while True:
            missing = [tp for tp in partitions if tp not in found]
            if not missing:
                return found
            try:
                found.update(watermarks(self._bootstrap, self._client_id, missing))
            except OSError as exc:
                log.debug("watermarks of %d partitions: %s", len(missing), exc)
            if len(found) < len(partitions):
                if time.monotonic() > deadline:
                    raise OrderedMetadataError(f"no leader answered ListOffsets for "
                                               f"{sorted(set(partitions) - set(found))[:5]}")
                time.sleep(0.2)

    def _read_layouts(self, topics: list[str]) -> dict[str, TopicLayout]:
        """Each ordered topic's counts and KIP-253 maps, complete: read again (for up to
        LAYOUT_WAIT_S, then OrderedMetadataError and a rejoin) while a partition past the count
        has no leader_epoch_before_deletion yet (the controller writes the marks after the
        count), or while a broker answers as plain a topic this member saw ordered (a broker
        that has not heard the counts since it started). Planned from an incomplete layout, a
        gate would let an heir run ahead of the partition it takes over."""
        deadline = time.monotonic() + LAYOUT_WAIT_S
        while True:
            layouts, complete = self._read_layouts_once(topics)
            if complete:
                self._ordered_topics.update(layouts)
                return layouts
            if time.monotonic() > deadline:
                raise OrderedMetadataError(f"the KIP-253 layout of {sorted(topics)} stayed incomplete "
                                           f"for {LAYOUT_WAIT_S:g} s")
            time.sleep(0.1)

    def _read_layouts_once(self, topics: list[str]) -> tuple[dict[str, TopicLayout], bool]:
        if not topics:
            return {}, True
        counts = self._metadata.counts(topics)
        if any(t in self._ordered_topics and not c.ordered for t, c in counts.items()):
            return {}, False
        ordered = {t: c for t, c in counts.items() if c.ordered and c.partition_count > 0}
        if not ordered:
            return {}, True
        answer = self._metadata.leader_epochs(
            [TopicPartition(t, p) for t, c in ordered.items() for p in range(c.partition_count)])
        compacted = self._metadata.compacted(list(ordered))
        layouts = {}
        for t, c in ordered.items():
            after = {tp.partition: dict(e.leader_epoch_after_creation)
                     for tp, e in (answer.partitions.items() if answer else ())
                     if tp.topic == t and e.leader_epoch_after_creation}
            before = {tp.partition: dict(e.leader_epoch_before_deletion)
                      for tp, e in (answer.partitions.items() if answer else ())
                      if tp.topic == t and e.leader_epoch_before_deletion}
            layouts[t] = TopicLayout(c.initial_partition_count, c.undeleted_partition_count, c.partition_count,
                                     after, before, compacted[t])
            if any(q not in before for q in range(c.undeleted_partition_count, c.partition_count)):
                return layouts, False
        return layouts, True

    def _gates(self, reads_from_start: dict[TopicPartition, bool]) -> dict[TopicPartition, Gate]:
        """Step 4.1-4.3 and 5.1-5.2 for a whole assignment: the epochs each partition waits on,
        turned into offsets by OffsetsForLeaderEpoch in one request per leader (a round per
        epoch a partition is asked for, almost always one), not one per partition."""
        lookups = {tp: lookups_for(self._layouts[tp.topic], tp.partition, first)
                   for tp, first in reads_from_start.items()}
        wanted: set[tuple[TopicPartition, int]] = set()
        for tp, found in lookups.items():
            if found.parent is not None:
                wanted.add((TopicPartition(tp.topic, found.parent[0]), found.parent[1]))
            wanted.update((tp, epoch) for epoch in found.deletions.values())
        ends: dict[tuple[TopicPartition, int], int] = {}
        while wanted:
            one_round = dict(sorted(wanted))  # one epoch per partition per request
            answered = end_offsets_for_epochs(self._bootstrap, self._client_id, one_round)
            ends.update(((tp, one_round[tp]), end) for tp, end in answered.items())
            wanted -= set(one_round.items())
        gates = {}
        for tp, found in lookups.items():
            gate = gates[tp] = Gate()
            if found.parent is not None:
                parent = TopicPartition(tp.topic, found.parent[0])
                gate.parent = (parent.partition, ends[parent, found.parent[1]])
            gate.deletions = {q: ends[tp, epoch] for q, epoch in found.deletions.items()}
        return gates

    # -- delivering ------------------------------------------------------------------------------

    def _admit(self, msg: Any) -> Any:
        """The message if the application may have it now; else None (dropped or held back)."""
        error = msg.error()
        if error is not None:
            # an end-of-partition event never moves the position: one fetched before a seek
            # back (a record held at a barrier) arrives after it, and would skip the records
            # the seek is about to fetch again
            return None if error.code() == KafkaError._PARTITION_EOF and not self._user_eof else msg
        # a plain tuple finds the TopicPartition key (a NamedTuple hashes as one) without
        # building one per record
        owned = self._owned.get((msg.topic(), msg.partition()))  # type: ignore[call-overload]
        offset = msg.offset()
        if owned is None or owned.paused or offset < owned.position:
            return None  # revoked since, held back (fetched again after a seek), or fetched before one
        limit = owned.limit
        if limit is not None and offset >= limit:
            self._hold(owned)
            return None
        epoch = msg.leader_epoch()
        if owned.gate is not None and epoch is not None and epoch > owned.checked_epoch:
            if not self._layout_holds(owned, epoch):
                self._hold(owned)
                return None
            owned.checked_epoch = epoch
        owned.position = offset + 1
        if epoch is not None and epoch > owned.last_epoch:
            owned.last_epoch = epoch
        if owned.compacted and is_migration_tombstone(msg.value(), msg.headers()):
            return None  # compaction's helper (part 9), never the application's
        return msg

    def _layout_holds(self, owned: _Owned, epoch: int) -> bool:
        """A record at a leader epoch not checked yet: is the layout the gates were planned
        with still the topic's? A count changes together with a leader epoch bump, so the
        counts of a broker that knows the record's epoch are those the record was written
        under or later (ordered_metadata.counts_as_of_epoch); no record of a newer layout
        passes unchecked (a shrink's re-sent records reach a partition before its member hears
        of the shrink by any other way). A broker that is behind, or none answering, holds the
        partition until the next round; a change makes the member rejoin, which plans the
        gates again."""
        layout = self._layouts.get(owned.tp.topic)
        if layout is None:
            return False
        checked = self._checked.get(owned.tp.topic)
        if checked is not None and checked.epochs.get(owned.tp.partition, -1) >= epoch:
            # the answer that held for another partition's new epoch holds for this one too
            # (an expansion bumps every partition's epoch: one round trip, not one each)
            return True
        try:
            checked = counts_as_of_epoch(self._bootstrap, self._client_id, owned.tp, epoch)
        except (OSError, OrderedMetadataError, SchemaError) as exc:
            log.info("%s: cannot check the layout (%s); holding it", owned.tp, exc)
            return False
        if checked is None or checked.counts is None:
            return False
        counts = checked.counts
        if (counts.undeleted_partition_count, counts.partition_count) != (layout.undeleted, layout.total):
            log.info("%s: the topic now has %d undeleted of %d partitions; rejoining", owned.tp,
                     counts.undeleted_partition_count, counts.partition_count)
            self._member.request_rejoin()
            return False
        self._checked[owned.tp.topic] = checked
        return True

    def _limit(self, owned: _Owned) -> int | None:
        assert owned.gate is not None
        topic = owned.tp.topic
        with self._exchange.lock:
            positions = dict(self._exchange.group_positions)

        def position_of(p: int) -> int | None:
            mine = self._owned.get(TopicPartition(topic, p))
            return mine.position if mine is not None else positions.get(TopicPartition(topic, p))

        def drained(p: int) -> bool:
            if p >= self._latest_totals.get(topic, p + 1):
                return True  # removed, which the cluster does only to an empty partition
            position = position_of(p)
            if position is None:
                return False
            end = self._marked_end(TopicPartition(topic, p))
            return end is not None and position >= end

        return owned.gate.limit(position_of, drained)

    def _hold(self, owned: _Owned) -> None:
        """Pause the partition at its position: records past a closed barrier are fetched again
        once it opens, never skipped."""
        k = KafkaTopicPartition(owned.tp.topic, owned.tp.partition, owned.position)
        if not owned.paused:
            self._fetcher.pause([k])
            owned.paused = True
            owned.blocked_since_ms = int(time.time() * 1000)
        self._fetcher.seek(k)

    def _open_gates(self) -> None:
        """Resume the paused partitions whose barriers opened; run on_partition_key_assigned
        for those delivering for the first time."""
        opened = []
        for owned in self._owned.values():
            gate = owned.gate
            if gate is None:
                continue
            if gate.parent is not None or gate.deletions:
                owned.limit = self._limit(owned)  # once per round, not per record
            else:
                owned.limit = None
            if not owned.paused:
                continue
            limit = owned.limit
            if limit is None or limit > owned.position:
                self._fetcher.resume([KafkaTopicPartition(owned.tp.topic, owned.tp.partition)])
                owned.paused = False
                if not owned.key_assigned:
                    owned.key_assigned = True
                    opened.append(KafkaTopicPartition(owned.tp.topic, owned.tp.partition))
        if opened:
            self._call("key_assigned", opened)
        waits = sorted({TopicPartition(o.tp.topic, p) for o in self._owned.values() if o.gate is not None
                        for p in o.gate.waits_on()} - set(self._owned))
        blocked = {o.tp: why for o in self._owned.values() if o.paused and (why := _why(o)) is not None}
        self._tell_long_blocks(blocked)
        with self._exchange.lock:
            self._exchange.requested = tuple(waits)
            self._exchange.blocked = blocked

    def _tell_long_blocks(self, blocked: dict[TopicPartition, api.BlockedPartition]) -> None:
        """A log line every BLOCKED_LOG_INTERVAL_S for a partition held back that long, with what
        it waits for and the positions this member knows: what a gate that never opens needs
        to be understood from the log alone."""
        now = time.monotonic()
        for tp, why in blocked.items():
            owned = self._owned[tp]
            if (time.time() * 1000 - owned.blocked_since_ms < BLOCKED_LOG_INTERVAL_S * 1000
                    or now - owned.told_blocked_at < BLOCKED_LOG_INTERVAL_S):
                continue
            owned.told_blocked_at = now
            with self._exchange.lock:
                known = {p.partition: pos for p, pos in self._exchange.group_positions.items() if p.topic == tp.topic}
            mine = {p.partition: o.position for p, o in self._owned.items() if p.topic == tp.topic}
            log.info("%s: held back for %.0f s at offset %d, waiting on partition %d (offset %d); positions "
                     "known from the group %s, own %s", tp, time.time() - owned.blocked_since_ms / 1000,
                     owned.position, why.waits_on, why.barrier_offset, known, mine)

    def _marked_end(self, tp: TopicPartition) -> int | None:
        """A marked partition's high watermark, read fresh (librdkafka's cached one may lag
        the records it has not fetched yet, which would open a gate early) but at most every
        MARKED_END_TTL_S: it takes no new records, so the value settles once marked."""
        now = time.monotonic()
        cached = self._ends.get(tp)
        if cached is None or cached[0] < now:
            cached = self._ends[tp] = (now + MARKED_END_TTL_S, self._high_watermark(tp, cached=False, timeout_s=1))
        return cached[1]

    def _high_watermark(self, tp: TopicPartition, cached: bool = True, timeout_s: float = 5) -> int | None:
        try:
            _, high = self._fetcher.get_watermark_offsets(KafkaTopicPartition(tp.topic, tp.partition),
                                                          timeout=timeout_s, cached=cached and tp in self._owned)
        except KafkaException:
            return None
        return high if high >= 0 else None

    # -- the position exchange (part 7) ----------------------------------------------------------

    def _publish_reports(self) -> None:
        """Decide in the application's thread which positions go to the coordinator (part 7's
        condition), running on_partition_key_maybe_revoked for them first."""
        with self._exchange.lock:
            wanted, asked_before = self._exchange.wanted, self._exchange.asked_before
        due = []
        for tp in wanted:
            owned = self._owned.get(tp)
            if owned is None:
                continue
            now = (owned.position, owned.last_epoch)
            if owned.reported is None or tp not in asked_before:
                due.append(owned)
                continue
            grew = now[0] > owned.reported[0]
            at_end = owned.position >= (self._high_watermark(tp) or 0)
            if (grew and at_end) or now[1] > owned.reported[1]:
                due.append(owned)
        if not due:
            return
        self._call("key_maybe_revoked", [KafkaTopicPartition(o.tp.topic, o.tp.partition) for o in due])
        with self._exchange.lock:
            for owned in due:
                owned.reported = (owned.position, owned.last_epoch)
                self._exchange.reports[owned.tp] = api.ReportedPosition(owned.position, owned.last_epoch)
            self._exchange.asked_before = self._exchange.asked_before | {o.tp for o in due}
        # pushed at once rather than at the next heartbeat: a member waits on these positions,
        # and this is how its wait ends within one heartbeat interval of the barrier being passed
        self._exchange_positions(self._member)

    def _hurried(self) -> bool:
        """Whether the heartbeat thread exchanges positions four times an interval: while a gate
        of this member waits on positions only the group can give, and for a few intervals
        after an assignment that gave it a partition the others' gates may wait on."""
        return bool(self._exchange.requested) or time.monotonic() < self._hurry_until

    def _on_heartbeat(self, member: GroupMember) -> None:
        """The heartbeat thread: one ConsumerGroupPosition exchange, then the count check."""
        self._exchange_positions(member)
        self._check_layouts(member)

    def _exchange_positions(self, member: GroupMember) -> None:
        """One ConsumerGroupPosition: the published reports, the partitions waited on and why;
        the answer's positions and wanted partitions kept for the poll thread."""
        assignment = member.assignment
        if assignment is None:
            return
        ex = self._exchange
        with ex.lock:
            if ex.generation != assignment.generation_id:
                return  # the poll thread has not taken this generation's assignment yet
            reports, requested, blocked = dict(ex.reports), ex.requested, dict(ex.blocked)
        if reports or requested or self._layouts:
            request = api.ConsumerGroupPositionRequest(self._group_id, assignment.generation_id,
                                                       assignment.member_id, self._config.get("group.instance.id"),
                                                       reports, requested, blocked)
            try:
                frame = member.coordinator_request_frame(
                    lambda corr: api.encode_request(request, corr, self._client_id))
            except OSError as exc:  # the coordinator is moving: the next heartbeat tries again
                log.info("group %s: position exchange skipped: %s", self._group_id, exc)
                return
            _, body = api.parse_response_header(frame)
            response = api.decode_response(api.API_CONSUMER_GROUP_POSITION, 0, body)
            assert isinstance(response, api.ConsumerGroupPositionResponse)
            if response.error_code == ErrorCode.NONE:
                with ex.lock:
                    if ex.generation != assignment.generation_id:
                        return  # a rebalance began meanwhile: these positions are the old generation's
                    for tp in reports:
                        if ex.reports.get(tp) == reports[tp]:
                            del ex.reports[tp]  # sent; a newer one published meanwhile stays
                    for tp, result in response.positions.items():
                        if result.error_code == ErrorCode.NONE and result.position >= 0:
                            ex.group_positions[tp] = result.position
                    ex.asked_before = ex.asked_before & ex.wanted
                    ex.wanted = frozenset(response.wanted)
            # REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION: the heartbeat tells the member to rejoin;
            # asking for a rejoin here too would start a second rebalance behind the first

    def _check_layouts(self, member: GroupMember) -> None:
        """A subscribed topic grew, or had partitions marked or removed: rejoin (part 8 step 6)."""
        if not self._topics:
            return
        taken = self._assignments_taken
        try:
            counts = self._hb_metadata.counts(self._topics)
        except OrderedMetadataError:
            return
        if taken != self._assignments_taken:
            return  # read before an assignment that read its own: the next heartbeat reads again
        for topic in self._topics:
            c = counts[topic]
            if c.partition_count > 0:
                self._latest_totals[topic] = c.partition_count
                self._fewest_totals[topic] = min(self._fewest_totals.get(topic, c.partition_count),
                                                 c.partition_count)
        if member.needs_rejoin:
            return
        for topic in self._topics:
            c = counts[topic]
            layout = self._layouts.get(topic)
            if c.ordered and (layout is None or (layout.undeleted, layout.total) !=
                              (c.undeleted_partition_count, c.partition_count)):
                log.info("%s: %d undeleted of %d partitions now; rejoining", topic, c.undeleted_partition_count,
                         c.partition_count)
                member.request_rejoin()
                return

    # -- commits and callbacks -------------------------------------------------------------------

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit and self._owned and time.monotonic() >= self._next_commit:
            self._next_commit = time.monotonic() + self._auto_commit_s
            self._commit_quietly()

    def _commit_quietly(self) -> None:
        self._commit_timeout_s = QUIET_COMMIT_TIMEOUT_S
        try:
            self.commit()
        except (KafkaException, OSError) as exc:  # the next commit carries the positions
            log.info("group %s: commit skipped: %s", self._group_id, exc)
        finally:
            self._commit_timeout_s = 30.0

    def _call(self, name: str, partitions: list[KafkaTopicPartition]) -> None:
        callback = self._callbacks.get(name)
        if callback is not None:
            callback(self, partitions)


def _next_of(message: Any) -> tuple[int, int]:
    """(the offset after ``message``, its leader epoch or -1): what committing it means."""
    epoch = message.leader_epoch()
    return message.offset() + 1, -1 if epoch is None else epoch


def committable(wanted: dict[TopicPartition, tuple[int, int]], latest_totals: dict[str, int],
                fewest_totals: dict[str, int]) -> dict[TopicPartition, tuple[int, int]]:
    """The offsets a member of this generation may commit: none for a partition number past
    its topic's partition count now (removed: nothing to commit), nor past the fewest
    partitions the topic had at any time since the generation's assignment. KIP-253 keeps
    partition numbers without gaps, so an expansion after a removal reuses the number; a
    position committed for the partition that was removed would be read by the next
    generation as the new partition's, which would skip its first records (a fault run lost
    208 values so)."""
    return {tp: o for tp, o in wanted.items()
            if tp.partition < min(latest_totals.get(tp.topic, tp.partition + 1),
                                  fewest_totals.get(tp.topic, tp.partition + 1))}


def _why(owned: _Owned) -> api.BlockedPartition | None:
    """What a paused partition waits for, in the words operators see (groups describe)."""
    gate = owned.gate
    if gate is None:
        return None
    if gate.parent is not None:
        return api.BlockedPartition(gate.parent[0], gate.parent[1], owned.blocked_since_ms)
    if gate.deletions:
        marked = min(gate.deletions, key=lambda q: gate.deletions[q])
        return api.BlockedPartition(marked, api.READ_TO_END, owned.blocked_since_ms)
    return None
