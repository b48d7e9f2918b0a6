"""One partition replica on this broker: its log, its role, and (as leader) the ISR bookkeeping.

The leader learns each follower's log end offset from the offset the follower fetches at, and the
high watermark is the smallest log end offset across the ISR: everything below it is on every ISR
member, so acks=all producers waiting on it can be answered and consumers may read it.

Every replica, leader or follower, keeps the idempotent producers' sequence state of its log
(producer_state.py) in step with each append and rebuilds it from the log when the log is opened
or truncated, so whichever replica becomes leader can tell a retry from a new batch.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
import weakref
from typing import Any, Callable, Iterator

from odradek.broker import producer_state_snapshots
from odradek.broker.producer_state import ProducerStateError, ProducerStateManager
from odradek.broker.verification_state import VerificationState
from odradek.common.errors import NotLeaderError
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.coordinator.seams import CoordinatorAppendRefused
from odradek.log.errors import OffsetOutOfRangeError
from odradek.log.log import Log
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    BatchHeader,
    ControlMarker,
    CorruptRecordError,
    build_control_batch,
    control_marker,
    iter_batches,
    iter_batches_with_markers,
    validate_batches,
)

log = logging.getLogger("odradek.broker.partition")

_tiebreak = itertools.count()


class Partition:
    def __init__(self, tp: TopicPartition, log_: Log, broker_id: int, min_insync_replicas: int = 1,
                 high_watermark: int = 0,
                 on_isr_candidate: Callable[[TopicPartition], None] | None = None) -> None:
        self.tp = tp
        self.log = log_
        self.broker_id = broker_id
        self.min_insync_replicas = min_insync_replicas
        self.leader_id = -1
        self.leader_epoch = -1
        self.zk_version = -1
        self.controller_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        self.high_watermark = min(high_watermark, log_.log_end_offset)
        self._follower_leo: dict[int, int] = {}
        # each follower's log start offset, from its fetches (-1: not heard yet); DeleteRecords
        # answers once every ISR member's has passed the requested offset (the low watermark)
        self._follower_log_start: dict[int, int] = {}
        # (required low watermark, tiebreak, future) for DeleteRecords, smallest first
        self._low_watermark_waiters: list[tuple[int, int, asyncio.Future[int]]] = []
        # monotonic time each follower last fetched at (or past) our log end offset
        self._last_caught_up: dict[int, float] = {}
        self._leader_epoch_start_offset = 0
        # followers outside the ISR that fetched caught up: Kafka expands the ISR on such a
        # fetch, never from remembered positions, so a follower that died caught up (an idle
        # partition) is not written back into the ISR. Kept until admitted or dropped. They
        # count for the high watermark from the moment they join this set (Kafka's maximal
        # ISR, KIP-497): ``_maybe_advance_high_watermark`` says why.
        self._isr_candidates: set[int] = set()
        self._on_isr_candidate = on_isr_candidate
        # (required high watermark, tiebreak, future) for acks=all produces, smallest first
        self._ack_waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        # futures of long-polling fetches woken by any append or high-watermark move
        self._data_waiters: list[asyncio.Future[None]] = []
        # fetch sessions reading this partition (fetch_session.FetchSession), told of each
        # change; held weakly (an evicted session must not live on in its partitions), by id in
        # a plain dict: a WeakSet's iteration costs microseconds even when empty, and every
        # append and every partition of a LeaderAndIsr wakes them
        self._sessions: dict[int, weakref.ref[Any]] = {}
        self.producers = ProducerStateManager()
        # KIP-890: the checks with transaction coordinators under way here
        self.verifications = VerificationState()
        self._unsnapshotted = 0  # batches applied to the producer state since its last snapshot
        self._rebuild_producers(self.high_watermark)
        self.producers.truncate_head(log_.log_start_offset)

    @property
    def high_watermark_lags_election(self) -> bool:
        """Whether this leader's high watermark is still below where its epoch began (Kafka's
        lagging-HW state after an election): records below that offset were committed under
        the old leader, so "latest" would name an offset before some of them."""
        return self.high_watermark < self._leader_epoch_start_offset

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop (Kafka's LSO): the high watermark, or the first
        offset of the earliest transaction not yet decided and replicated."""
        return self.producers.last_stable_offset(self.high_watermark)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def apply_state(self, state: PartitionState) -> None:
        """Take the role a LeaderAndIsr request gives.

        A broker that just became leader starts tracking its followers afresh; a leader that
        stays leader under a new epoch (the controller changed the ISR) keeps what it knows of
        their positions, so acks=all producers do not stall on the change.
        """
        # (locals rather than properties: a failover applies 10,000 of these per broker)
        broker_id = self.broker_id
        was_leader = self.leader_id == broker_id
        new_epoch = state.leader_epoch != self.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.zk_version = state.zk_version
        self.controller_epoch = state.controller_epoch
        self.replicas = replicas = tuple(state.replicas)
        self.isr = frozenset(state.isr)
        if self._isr_candidates:
            self._isr_candidates.clear()
        if state.leader == broker_id:
            now = time.monotonic()
            followers = [r for r in replicas if r != broker_id]
            if was_leader:
                leo, caught_up = self._follower_leo, self._last_caught_up
                self._follower_leo = {r: leo.get(r, -1) for r in followers}
                self._last_caught_up = {r: caught_up.get(r, now) for r in followers}
                starts = self._follower_log_start
                self._follower_log_start = {r: starts.get(r, -1) for r in followers}
            else:
                self._follower_leo = dict.fromkeys(followers, -1)
                self._last_caught_up = dict.fromkeys(followers, now)
                self._follower_log_start = dict.fromkeys(followers, -1)
            log_end = self.log.log_end_offset
            if new_epoch or not was_leader:
                self._leader_epoch_start_offset = log_end
            # A new leader's high watermark may lag the old leader's; it only moves forward.
            self.high_watermark = min(max(self.high_watermark, 0), log_end)
            self._maybe_advance_high_watermark(log_end)
            self._complete_low_watermark_waiters()  # the ISR may have lost a slow member
        elif self._ack_waiters or self._low_watermark_waiters:
            self._fail_waiters()
        self.wake_fetchers()

    # -- leader side -------------------------------------------------------------------------

    def append_as_leader(self, batches: bytes) -> tuple[int, int]:
        """Append a producer's batches; the log assigns offsets and stamps our leader epoch.

        Returns the (first, last) offsets; for a retried idempotent batch already in the log,
        nothing is written and the offsets it got the first time come back, so the producer
        hears of success at the original offset (and acks=all waits for that to commit).
        Raises ProducerStateError for a sequence gap or a fenced epoch, CorruptRecordError for
        malformed batches, in both cases having written nothing.
        """
        headers = list(iter_batches(batches))  # headers only: the log checks CRCs as it appends
        if any(h.is_control for h in headers):  # Kafka's LogValidator: markers come from coordinators only
            raise ProducerStateError(ErrorCode.INVALID_RECORD, f"{self.tp}: clients cannot write control batches")
        try:
            duplicate = self.producers.validate(headers)
        except ProducerStateError:
            validate_batches(batches)  # a damaged batch is CORRUPT_MESSAGE (retriable), not fenced
            raise
        if duplicate is not None:
            validate_batches(batches)  # trust no header we answer from without its CRC
            return duplicate.first_offset, duplicate.last_offset
        return self._append(batches, headers)

    def append_as_coordinator(self, batches: bytes) -> tuple[int, int]:
        """Append a coordinator's own batches (Kafka's AppendOrigin.COORDINATOR): the group
        coordinator writes a TxnOffsetCommit's offsets as a transactional batch under the
        producer's id and epoch, whose sequence means nothing, so none is checked; the batch
        still opens the producer's transaction here, for its marker to close. A producer's
        epoch older than the one seen here is refused, and so is a non-transactional batch of a
        producer whose transaction is open (Kafka's checks for this origin). Each batch is
        checked against the state before the append: coordinators write one at a time.

        Returns the (first, last) offsets; raises CoordinatorAppendRefused, having written
        nothing, and CorruptRecordError for malformed batches."""
        headers = list(iter_batches(batches))
        for h in headers:
            self._check_coordinator_batch(h)
        return self._append(batches, headers)

    def _append(self, batches: bytes, headers: list[BatchHeader]) -> tuple[int, int]:
        """Append checked batches as the leader, with the producer state in step."""
        first, last = self.log.append_as_leader(batches, self.leader_epoch)
        offset = first
        for h in headers:
            self.producers.update(h, offset, offset + h.last_offset_delta)
            offset += h.last_offset_delta + 1
        self._applied(len(headers))
        self._maybe_advance_high_watermark()
        self.wake_fetchers()
        return first, last

    def _check_coordinator_batch(self, h: BatchHeader) -> None:
        if h.is_control:
            raise CoordinatorAppendRefused(ErrorCode.INVALID_RECORD,
                                           f"{self.tp}: markers come through WriteTxnMarkers only")
        try:
            self.producers.validate_coordinator_batch(h)
        except ProducerStateError as exc:
            raise CoordinatorAppendRefused(exc.error, f"{self.tp}: {exc}") from None

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> int:
        """Write a transaction's COMMIT or ABORT marker (WriteTxnMarkers, from the transaction
        coordinator) and return its offset. Raises ProducerStateError, having written nothing,
        for a marker from an older producer epoch or a stale coordinator epoch (a deposed
        coordinator can never end a transaction), NotLeaderError unless this replica leads."""
        if not self.is_leader:
            raise NotLeaderError(self.tp)
        self.producers.validate_marker(producer_id, producer_epoch, coordinator_epoch)
        self.verifications.transaction_ended(producer_id)
        batch = build_control_batch(producer_id, producer_epoch, commit, coordinator_epoch)
        offset, _ = self.log.append_as_leader(batch, self.leader_epoch)
        (header,) = iter_batches(batch)
        self.producers.update(header, offset, offset, ControlMarker(commit, coordinator_epoch))
        self._applied(1)
        self._maybe_advance_high_watermark()
        self.wake_fetchers()
        return offset

    # -- KIP-890 part 1: a transaction's first batch here is checked with its coordinator ----

    def needs_verification(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether a transactional batch of this producer must be checked with its transaction
        coordinator before it is appended: no transaction of its is open here at this epoch."""
        entry = self.producers.entry(producer_id)
        return entry is None or entry.txn_first_offset is None or entry.epoch != producer_epoch

    def is_duplicate(self, batches: bytes) -> bool:
        """Whether these are an idempotent producer's batches already in the log (a retry whose
        first answer was lost): nothing would be written, the first offsets answered."""
        try:
            return self.producers.validate(list(iter_batches(batches))) is not None
        except (ProducerStateError, ValueError, IndexError):
            return False

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        """A future done once the high watermark passes `offset` (acks=all)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.high_watermark > offset:
            fut.set_result(None)
        else:
            heapq.heappush(self._ack_waiters, (offset + 1, next(_tiebreak), fut))
        return fut

    def update_follower_position(self, replica_id: int, fetch_offset: int, log_start: int = -1) -> None:
        """A follower fetching at `fetch_offset` holds everything before it. An offset past our
        log end is not a position (the fetch is answered OFFSET_OUT_OF_RANGE, as in Kafka):
        credited, it let the high watermark pass records the follower does not have.
        `log_start` is the follower's log start offset (Fetch v5+), which DeleteRecords waits on."""
        if log_start >= 0 and self._follower_log_start.get(replica_id, log_start) < log_start:
            self._follower_log_start[replica_id] = log_start
            if self._low_watermark_waiters:
                self._complete_low_watermark_waiters()
        if replica_id in self._follower_leo and fetch_offset <= self.log.log_end_offset:
            if fetch_offset >= self.log_end_offset:
                self._last_caught_up[replica_id] = time.monotonic()
            if fetch_offset > self._follower_leo[replica_id]:
                self._follower_leo[replica_id] = fetch_offset
                self._maybe_advance_high_watermark()
            if (replica_id not in self.isr and replica_id not in self._isr_candidates
                    and fetch_offset >= self.high_watermark
                    and fetch_offset >= self._leader_epoch_start_offset):
                self._isr_candidates.add(replica_id)
                if self._on_isr_candidate is not None:
                    self._on_isr_candidate(self.tp)

    def isr_change_wanted(self, lag_time_max_s: float, now: float, shrink: bool = True) -> frozenset[int] | None:
        """The ISR this leader should write, or None to keep it (Kafka's maybeShrinkIsr and
        maybeExpandIsr): followers that have not caught up within the lag time leave (checked
        only when `shrink`); a follower that fetched at or past the high watermark, and this
        epoch's start, joins (it stays a candidate until it is in the ISR).

        Whether a candidate caught up is judged at its fetch (update_follower_position), as
        Kafka's maybeExpandIsr does during the fetch, not again here: by this round the high
        watermark may have moved on. Re-judged here, a follower held back by a replication
        throttle (which holds only replicas outside the ISR, ReplicaManager.shouldLeaderThrottle)
        under a steady produce load reaches the high watermark at a fetch, is held at its next
        fetches, and is behind again when the round comes, so it stays out of the ISR and
        throttled for as long as the load lasts. A candidate is never behind the high
        watermark: it counts for it from its candidacy on (``in_maximal_isr``), and is not
        throttled either."""
        if not self.is_leader:
            return None
        # Kafka 2.5+'s rule: a follower at the log end is in sync however long ago it fetched
        # (an idle partition's fetch sessions do not visit it); one behind it leaves after the
        # lag time. A dead follower of an idle partition stays until the controller removes it.
        leo = self.log_end_offset
        stale = {r for r in self.isr if r != self.broker_id
                 and self._follower_leo.get(r, -1) < leo
                 and now - self._last_caught_up.get(r, 0.0) > lag_time_max_s} if shrink else set()
        self._isr_candidates = joining = {r for r in self._isr_candidates if r not in self.isr}
        if not stale and not joining:
            return None
        return (self.isr - stale) | joining

    def in_maximal_isr(self, replica_id: int) -> bool:
        """In the ISR or about to join it (Kafka's maximal ISR): the high watermark waits for
        it, so a replication throttle must not hold it back."""
        return replica_id in self.isr or replica_id in self._isr_candidates

    @property
    def has_isr_candidates(self) -> bool:
        return bool(self._isr_candidates)

    def drop_isr_candidates(self, replicas: set[int]) -> None:
        """Forget candidates that may not join (their broker is not registered): they must
        fetch caught up again once it is (ReplicaManager.brokers_registered)."""
        if self._isr_candidates & replicas:
            self._isr_candidates -= replicas
            self._maybe_advance_high_watermark()  # they held it (the maximal ISR)

    # -- DeleteRecords (KIP-107) --------------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> int:
        """Move the log start to `offset` (-1: the high watermark) and return the offset it now
        needs every ISR member to reach (Kafka's Partition.deleteRecordsOnLeader). Raises
        NotLeaderError, DeleteRecordsPolicyError for a topic whose cleanup.policy lacks
        "delete", and OffsetOutOfRangeError for an offset below -1 or past the high watermark,
        each having changed nothing."""
        if not self.is_leader:
            raise NotLeaderError(self.tp)
        if not self.log.config.delete:
            raise DeleteRecordsPolicyError(
                f"records of {self.tp} cannot be deleted: cleanup.policy={self.log.config.cleanup_policy}")
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {offset} of {self.tp} not in [0, high watermark {self.high_watermark}]")
        if self.log.maybe_increment_log_start_offset(target):
            log.info("%s: log start offset moved to %d (DeleteRecords)", self.tp, target)
            self.producers.truncate_head(target)
            self.wake_fetchers()  # followers hear of it in their next fetch response
        return target

    @property
    def low_watermark(self) -> int:
        """The lowest log start offset of this leader and its ISR followers (Kafka's
        lowWatermarkIfLeader counts every replica on a live broker; odradek counts the ISR,
        whose members fetch continuously)."""
        low = self.log.log_start_offset
        starts = self._follower_log_start
        for replica in self.isr:
            if replica != self.broker_id:
                low = min(low, starts.get(replica, -1))
        return low

    def wait_for_low_watermark(self, offset: int) -> asyncio.Future[int]:
        """A future done, with the low watermark, once it reaches `offset` (Kafka's
        DelayedDeleteRecords); failed with NotLeaderError if leadership moves first."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        low = self.low_watermark
        if low >= offset:
            fut.set_result(low)
        else:
            heapq.heappush(self._low_watermark_waiters, (offset, next(_tiebreak), fut))
        return fut

    def _complete_low_watermark_waiters(self) -> None:
        waiters = self._low_watermark_waiters
        if not waiters or not self.is_leader:
            return
        low = self.low_watermark
        while waiters and waiters[0][0] <= low:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(low)

    def follow_leader_log_start(self, leader_log_start: int) -> bool:
        """A follower adopts the leader's log start offset from a Fetch response, up to its own
        high watermark (Kafka's ReplicaFetcherThread.processPartitionData); True if it moved,
        so the fetcher reports it to the leader."""
        target = min(leader_log_start, self.high_watermark)
        if target > self.log.log_start_offset and self.log.maybe_increment_log_start_offset(target):
            self.producers.truncate_head(target)
            self.wake_fetchers()
            return True
        return False

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Follower whose log ends below the leader's log start: start over, empty, there."""
        log.info("%s: log end %d below the leader's log start %d; starting empty there",
                 self.tp, self.log_end_offset, offset)
        self.log.truncate_fully_and_start_at(offset)
        producer_state_snapshots.delete_above(self.log.dir, -1)
        self._rebuild_producers(offset)
        self.producers.truncate_head(offset)
        self.high_watermark = offset

    def apply_isr(self, isr: frozenset[int], zk_version: int) -> None:
        """Adopt an ISR we wrote to ZooKeeper; a smaller ISR may let the high watermark move.

        A follower removed here may have fetched caught up while the write was in flight (it
        was still in the ISR then, so that fetch made it no candidate); an idle partition's
        fetch session would never visit it again and it would stay out for good. So its
        sessions are told to visit: a live follower's next fetch re-proposes it, a dead one
        never fetches."""
        removed = self.isr - isr
        self._isr_candidates -= isr
        self.isr = isr
        self.zk_version = zk_version
        self._maybe_advance_high_watermark()
        if removed:
            self.wake_fetchers()
            self._complete_low_watermark_waiters()

    def _maybe_advance_high_watermark(self, log_end: int | None = None) -> None:
        """``log_end``: the log end offset if the caller has just read it."""
        broker_id = self.broker_id
        if self.leader_id != broker_id:
            return
        hw = self.log.log_end_offset if log_end is None else log_end
        leo = self._follower_leo
        for replica in self.isr:
            if replica != broker_id:
                hw = min(hw, leo.get(replica, -1))
        # The followers about to join count too (Kafka's maximal ISR): a candidate held
        # everything below the high watermark when it fetched caught up, and the ISR that names
        # it reaches ZooKeeper up to a round (0.5 s) and a write later. Left out meanwhile, the
        # high watermark acknowledged records the candidate did not have; once in the ISR it
        # could be elected leader and truncate them away. A fault run lost two acknowledged
        # records so (a leader killed 40 ms after writing an ISR with a follower two behind).
        for replica in self._isr_candidates:
            hw = min(hw, leo.get(replica, -1))
        if hw > self.high_watermark:
            self.high_watermark = hw
            self._complete_ack_waiters()
            self.wake_fetchers()

    def _complete_ack_waiters(self) -> None:
        waiters = self._ack_waiters
        while waiters and waiters[0][0] <= self.high_watermark:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self) -> None:
        """Producers waiting for acks=all lose: we are no longer the leader that could commit."""
        for waiters in (self._ack_waiters, self._low_watermark_waiters):
            for _, _, fut in waiters:
                if not fut.done():
                    fut.set_exception(NotLeaderError(self.tp))
            waiters.clear()

    def step_down(self) -> None:
        """ZooKeeper shows another leader or epoch: stop committing until the controller speaks."""
        self.leader_id = -1
        self._fail_waiters()
        self.wake_fetchers()

    # -- follower side -----------------------------------------------------------------------

    def append_as_follower(self, batches: bytes, leader_high_watermark: int) -> None:
        hw = max(self.high_watermark, min(leader_high_watermark, self.log_end_offset))
        if not batches and hw == self.high_watermark:
            return
        if batches:
            self.log.append_as_follower(batches)
            applied = 0
            for h, marker in iter_batches_with_markers(batches):
                self.producers.update(h, h.base_offset, h.last_offset, marker)
                applied += 1
            self._applied(applied)
            hw = max(self.high_watermark, min(leader_high_watermark, self.log_end_offset))
        self.high_watermark = hw
        self.wake_fetchers()

    def truncate_to(self, offset: int) -> None:
        if offset < self.log_end_offset:
            log.info("%s: truncating from %d to %d", self.tp, self.log_end_offset, offset)
            self.log.truncate_to(offset)
            # before the log grows again: a snapshot past the offset describes batches now gone
            producer_state_snapshots.delete_above(self.log.dir, self.log_end_offset)
            self._rebuild_producers(min(self.high_watermark, self.log_end_offset))
        self.high_watermark = min(self.high_watermark, self.log_end_offset)

    # -- fetch long polling ------------------------------------------------------------------

    def add_data_waiter(self, fut: asyncio.Future[None]) -> None:
        """Wake `fut` on the next append or high-watermark move. One future is shared by all
        the partitions of a long-polling fetch, so a follower fetching 10,000 partitions costs
        one future, not 10,000; done ones are pruned here, as idle partitions never wake."""
        if len(self._data_waiters) >= 8:
            self._data_waiters = [f for f in self._data_waiters if not f.done()]
        self._data_waiters.append(fut)

    def watch(self, session: Any) -> None:
        """``session`` reads this partition: tell it of every append, high watermark, log
        start or role change (its ``notify``)."""
        ref = self._sessions.get(id(session))
        if ref is None or ref() is not session:
            self._sessions[id(session)] = weakref.ref(session)

    def apply_retention(self, now_ms: int) -> int:
        """Retention on the log; fetchers hear of the new log start offset."""
        deleted = self.log.apply_retention(now_ms)
        if deleted:
            self.producers.truncate_head(self.log.log_start_offset)
            self.wake_fetchers()
        return deleted

    def wake_fetchers(self) -> None:
        """Wake long-polling fetches and make every fetch session of this partition visit it
        again (on each append, high watermark, log start or role change)."""
        if self._data_waiters:
            waiters, self._data_waiters = self._data_waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        if self._sessions:
            gone = []
            for key, ref in self._sessions.items():
                session = ref()
                if session is None:
                    gone.append(key)
                else:
                    session.notify(self.tp)
            for key in gone:
                del self._sessions[key]

    # -- producer state snapshots (producer_state_snapshots.py) -------------------------------

    def _rebuild_producers(self, high_watermark: int) -> None:
        """The producer state from the newest usable snapshot and the batches after it, or from
        the whole log."""
        found = producer_state_snapshots.load(self.log.dir, self.log.log_start_offset, self.log_end_offset)
        if found is None:
            self.producers.rebuild(_batches_with_markers(self.log), high_watermark=high_watermark)
            self._unsnapshotted = self.log_end_offset - self.log.log_start_offset  # at most that many batches
        else:
            offset, state = found
            self.producers.rebuild(_batches_with_markers(self.log, offset), high_watermark=high_watermark,
                                   snapshot=state)
            self._unsnapshotted = self.log_end_offset - offset

    def _applied(self, batches: int) -> None:
        self._unsnapshotted += batches
        if self._unsnapshotted >= producer_state_snapshots.INTERVAL_BATCHES:
            self.write_producer_snapshot()

    def write_producer_snapshot(self, at_least: int = 1) -> None:
        """A snapshot of the producer state at the log end, if ``at_least`` batches were
        applied since the last one (a broker shutting down cleanly writes one for what came
        after the last; a failed write is logged, the log replays instead)."""
        if self._unsnapshotted < at_least or self.log.deleted:
            return
        try:
            producer_state_snapshots.write(self.log.dir, self.log_end_offset, self.producers.to_snapshot())
            self._unsnapshotted = 0
        except OSError as exc:
            log.warning("%s: producer state snapshot not written: %s", self.tp, exc)

    def close(self) -> None:
        self.leader_id = -1  # a closed (stopped or deleted) replica leads nothing
        self._fail_waiters()
        self.wake_fetchers()


def _batches_with_markers(log_: Log, from_offset: int | None = None
                          ) -> Iterator[tuple[BatchHeader, ControlMarker | None]]:
    """The log's batch headers for rebuilding producer state, each transaction marker read from
    its control batch. A marker that does not parse is logged and taken as no marker: one
    damaged batch must not keep the partition from opening."""
    for h, data in log_.iter_batches(from_offset):
        if not h.is_control:
            yield h, None
            continue
        try:
            yield h, control_marker(data, h)
        except CorruptRecordError as exc:
            log.error("%s: the transaction marker at offset %d does not parse: %s", log_.dir, h.base_offset, exc)
            yield h, None


class DeleteRecordsPolicyError(Exception):
    """DeleteRecords on a topic without "delete" in its cleanup.policy (POLICY_VIOLATION)."""
