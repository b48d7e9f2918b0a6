"""Follower replication: one fetcher task per leader broker, one Fetch request for all its partitions.

A partition joining a fetcher first truncates its log by the leader-epoch protocol (KIP-101/279):
it asks the leader where its latest epoch ends and cuts anything past that, so a replica that
wrote under a deposed leader never keeps a divergent tail.

A partition in follower.replication.throttled.replicas that has not reached the leader's high
watermark is left out of the fetch (and out of the fetch session) while the follower's
replication quota is exceeded (Kafka's ReplicaFetcherThread.shouldFollowerThrottle); what is
received for throttled partitions is counted against that quota (replication_quota.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from odradek.broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH
from odradek.broker.kafka_client import KafkaClientConnection
from odradek.broker.partition import Partition
from odradek.broker.replication_quota import ReplicationQuotaManager
from odradek.common.internal_topics import is_internal
from odradek.common.metadata import BrokerInfo, TopicPartition
from odradek.protocol import fast_paths
from odradek.protocol.errors import ErrorCode
from odradek.security.client_security import PLAINTEXT, ClientSecurity

log = logging.getLogger("odradek.broker.fetcher")

FETCH_VERSION = 12
OFFSETS_FOR_LEADER_EPOCH_VERSION = 4
RETRY_BACKOFF_S = 0.2
MAX_RETRY_BACKOFF_S = 1.0  # Kafka's replica.fetch.backoff.ms
_NOTHING: set[TopicPartition] = set()  # never added to: the unthrottled round's held set


@dataclass(slots=True)
class _FetchState:
    partition: Partition
    leader_epoch: int
    # at the leader's high watermark after the last fetch (Kafka's
    # PartitionFetchState.isReplicaInSync): a follower throttle never holds such a partition
    in_sync: bool = False
    # the leader's high watermark minus our log end after the last fetch that answered for
    # the partition (Kafka's FetcherLagMetrics, whose maximum is ReplicaFetcherManager's MaxLag)
    lag: int = 0


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, broker_id: int, leader: BrokerInfo, max_wait_ms: int, max_bytes: int,
                 request_timeout_s: float = 30.0, quota: ReplicationQuotaManager | None = None,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.broker_id = broker_id
        self.leader = leader
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.request_timeout_s = request_timeout_s
        self._states: dict[TopicPartition, _FetchState] = {}
        self._changed = asyncio.Event()
        self._conn = KafkaClientConnection(leader.host, leader.port, f"replica-fetcher-{broker_id}",
                                           security=security)
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # KIP-227 fetch session with the leader: after a full first request, only partitions
        # whose (fetch offset, leader epoch) changed are sent, and only changed ones come back
        self._session_id = 0
        self._session_epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, tuple[int, int, int]] = {}  # (fetch offset, epoch, log start)
        # bookkeeping that keeps an idle round O(changes), not O(partitions)
        self._truncating: set[TopicPartition] = set()  # waiting for OffsetsForLeaderEpoch
        self._dirty: set[TopicPartition] = set()  # position may differ from what the session holds
        self._leaving: set[TopicPartition] = set()  # removed or re-truncating: drop from the session
        # partitions the leader answered with an error (not leader, fenced epoch, ...), left out
        # until this monotonic time: until our LeaderAndIsr catches up with the leader's, asking
        # again at once would only make both brokers spin (Kafka's fetch backoff per partition)
        self._resting: dict[TopicPartition, float] = {}
        self._quota = quota  # the broker's follower replication quota
        self._held: set[TopicPartition] = set()  # left out by the throttle in the last round

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.leader.id}")

    def add(self, partition: Partition) -> None:
        self._states[partition.tp] = _FetchState(partition, partition.leader_epoch)
        self._start_truncation(partition.tp)
        self._changed.set()

    def next_epoch(self, partition: Partition) -> bool:
        """Carry on without truncating if the partition's leader epoch is the one we fetch at or
        the very next epoch of the same leader (the controller changed only the ISR): every
        epoch change is one controller write, so no other leader can have written in between
        and our log is still a prefix of the leader's. False if the partition must start over
        (``add``).

        The same epoch is a LeaderAndIsr that only rewrote the state znode (KIP-253's mark for
        deletion, the maps a partition removal rewrites, the ISR a leader wrote and a new
        controller re-sends): Kafka's ReplicaManager.becomeLeaderOrFollower ignores it, and so
        does the fetch. Starting over would discard the response in flight, whose high
        watermark and log start the leader's fetch session then counts as told and never sends
        again; an idle partition's follower would never adopt a DeleteRecords' log start, and
        the leader's low watermark (what DeleteRecords waits for) would never reach it."""
        state = self._states.get(partition.tp)
        if state is None:
            return False
        if partition.leader_epoch == state.leader_epoch:
            return True  # nothing changed that the fetch session or the log must hear of
        if partition.leader_epoch != state.leader_epoch + 1:
            return False
        state.leader_epoch = partition.leader_epoch
        self._resting.pop(partition.tp, None)
        if partition.tp not in self._truncating:
            self._dirty.add(partition.tp)  # the session must hear the new epoch
        self._changed.set()
        return True

    def remove(self, tp: TopicPartition) -> None:
        self._states.pop(tp, None)
        self._truncating.discard(tp)
        self._dirty.discard(tp)
        self._resting.pop(tp, None)
        self._leaving.add(tp)

    def _start_truncation(self, tp: TopicPartition) -> None:
        self._truncating.add(tp)
        self._resting.pop(tp, None)
        self._leaving.add(tp)

    def _rest(self, tp: TopicPartition) -> None:
        self._resting[tp] = time.monotonic() + RETRY_BACKOFF_S
        self._leaving.add(tp)

    def __len__(self) -> int:
        return len(self._states)

    def max_lag(self) -> int:
        """The largest lag of the partitions this fetcher follows; for the metrics' thread,
        so it reads a copy of the states the event loop changes."""
        return max((state.lag for state in list(self._states.values())), default=0)

    async def close(self) -> None:
        """Stop the loop; the flag is what guarantees it, since Python 3.11's wait_for can
        swallow a cancellation that lands as its inner request completes (the loop then
        went on fetching, and a broker's shutdown waited on it forever)."""
        self._closed = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._conn.close()

    async def _run(self) -> None:
        backoff = RETRY_BACKOFF_S
        while not self._closed:
            if not self._states:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                if not self._conn.connected:
                    # before building requests: a dead leader's thousands of partitions would
                    # otherwise be encoded for nothing at every retry until the controller moves them
                    await self._conn.connect()
                await self._truncate_new_partitions()
                await self._fetch_once()
                backoff = RETRY_BACKOFF_S
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # network trouble or a leader going away: retry after a pause
                log.debug("fetch from broker %d failed: %r", self.leader.id, exc)
                self._conn.close()
                self._reset_session()
            # waited out of the except block: the failure's asyncio traceback is a reference
            # cycle, which must be garbage before the next freeze (common/gc_policy.py)
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, MAX_RETRY_BACKOFF_S)

    def _reset_session(self) -> None:
        self._session_id, self._session_epoch, self._sent = 0, INITIAL_EPOCH, {}
        self._dirty.clear()
        self._leaving.clear()

    async def _truncate_new_partitions(self) -> None:
        pending = {tp: self._states[tp] for tp in self._truncating}
        if not pending:
            return
        asks: dict[str, list[dict[str, int]]] = {}
        for tp, state in pending.items():
            epoch = state.partition.log.leader_epoch_cache.latest_epoch()
            if epoch is None:
                self._truncation_done(tp)  # nothing written under any epoch: nothing to cut
                continue
            asks.setdefault(tp.topic, []).append(
                {"partition": tp.partition, "current_leader_epoch": state.leader_epoch, "leader_epoch": epoch})
        if not asks:
            return
        body = {"replica_id": self.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in asks.items()]}
        resp = await self._conn.request(23, OFFSETS_FOR_LEADER_EPOCH_VERSION, body, self.request_timeout_s)
        for topic in resp.topics:
            for p in topic.partitions:
                pending_state = pending.get(TopicPartition(topic.topic, p.partition))
                if pending_state is None or self._states.get(pending_state.partition.tp) is not pending_state:
                    continue
                if p.error_code != ErrorCode.NONE:
                    continue  # leader not ready yet: ask again next round
                self._truncate(pending_state.partition, p.leader_epoch, p.end_offset)
                self._truncation_done(pending_state.partition.tp)

    @staticmethod
    def _truncate(partition: Partition, leader_epoch: int, leader_end_offset: int) -> None:
        if leader_epoch < 0 or leader_end_offset < 0:
            partition.truncate_to(partition.high_watermark)
            return
        _, own_end = partition.log.end_offset_for(leader_epoch)
        target = min(leader_end_offset, partition.log_end_offset)
        if own_end >= 0:
            target = min(target, own_end)
        partition.truncate_to(target)

    def _truncation_done(self, tp: TopicPartition) -> None:
        self._truncating.discard(tp)
        self._dirty.add(tp)

    async def _fetch_once(self) -> None:
        if self._resting:
            now = time.monotonic()
            for tp in [tp for tp, until in self._resting.items() if until <= now]:
                del self._resting[tp]
                self._dirty.add(tp)
        resting = self._resting
        held = self._throttled()
        if held or self._held:
            self._dirty |= self._held - held  # back in the session at their position
            self._leaving |= held - self._held  # out of the session while held
            self._held = held
        if len(self._truncating) + len(resting) + len(held) >= len(self._states):
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        full = self._session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)
        # swapped out here, not cleared after the response: a LeaderAndIsr handled while the
        # request is out (next_epoch: the same leader at its next epoch, Kafka's
        # Partition.makeFollower restarting the fetch there) marks a partition the session must
        # hear of, and a partition resting after FENCED_LEADER_EPOCH has just been forgotten by
        # this very request; clearing that mark left it out of every later request for good
        dirty, self._dirty = self._dirty, set()
        if full:
            changed = [tp for tp in self._states
                       if tp not in self._truncating and tp not in resting and tp not in held]
            gone: list[TopicPartition] = []
            self._leaving = set()  # a full request replaces the whole session
        else:
            changed = [tp for tp in dirty
                       if tp in self._states and tp not in self._truncating and tp not in resting
                       and tp not in held]
            # swapped out likewise: remove() may run while we wait
            leaving, self._leaving = self._leaving, set()
            gone = [tp for tp in leaving
                    if tp in self._sent
                    and (tp not in self._states or tp in self._truncating or tp in resting or tp in held)]
        # the log start is part of the position: the leader's DeleteRecords waits to hear ours
        position = {tp: (self._states[tp].partition.log_end_offset, self._states[tp].leader_epoch,
                         self._states[tp].partition.log.log_start_offset) for tp in changed}
        if not full:
            changed = [tp for tp in changed if self._sent.get(tp) != position[tp]]
        topics: dict[str, list[tuple[int, int, int, int, int]]] = {}
        for tp in changed:
            st = self._states[tp]
            topics.setdefault(tp.topic, []).append((tp.partition, st.leader_epoch, position[tp][0],
                                                    position[tp][2], self.max_bytes))
        forgotten: dict[str, list[int]] = {}
        for tp in gone:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        timeout = self.max_wait_ms / 1000 + self.request_timeout_s
        resp = await self._conn.request_encoded(
            1, FETCH_VERSION,
            lambda corr: fast_paths.follower_fetch_request(
                corr, self._conn.client_id, self.broker_id, self.max_wait_ms, self.max_bytes * 8,
                list(topics.items()), self._session_id, self._session_epoch, list(forgotten.items())),
            timeout)
        if resp.error_code in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH):
            self._reset_session()  # the leader lost or evicted our session: start a new one
            return
        if self._session_epoch == INITIAL_EPOCH:
            self._session_id, self._sent = resp.session_id, {}
        if self._session_id == 0:
            self._session_epoch = FINAL_EPOCH  # a leader without sessions: full fetches from now on
        else:
            self._session_epoch += 1
            for tp in gone:
                del self._sent[tp]
            for tp in changed:
                self._sent[tp] = position[tp]
        quota = self._quota if self._quota is not None and self._quota.active else None
        throttled_bytes = 0
        for topic in resp.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                state = self._states.get(tp)
                if state is not None and tp not in self._truncating:
                    self._apply(state, p)
                    if quota is not None and p.records and quota.is_throttled(tp):
                        throttled_bytes += len(p.records)
        if throttled_bytes and quota is not None:
            quota.record(throttled_bytes)

    def _throttled(self) -> set[TopicPartition]:
        """The partitions the follower throttle leaves out of this round: while the quota is
        exceeded, the throttled ones not at the leader's high watermark and otherwise due."""
        quota = self._quota
        if quota is None or not quota.active or not quota.is_quota_exceeded():
            return _NOTHING
        return {tp for tp, st in self._states.items()
                if not st.in_sync and tp not in self._truncating and tp not in self._resting
                and quota.is_throttled(tp)}

    def _apply(self, state: _FetchState, data: Any) -> None:
        error = data.error_code
        partition = state.partition
        if error == ErrorCode.NONE:
            records = data.records
            partition.append_as_follower(records or b"", data.high_watermark)
            state.lag = max(0, data.high_watermark - partition.log_end_offset)
            state.in_sync = state.lag == 0
            moved = partition.follow_leader_log_start(data.log_start_offset)
            if records or moved:
                self._dirty.add(partition.tp)  # our fetch offset or log start moved
        elif error == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_log_start = data.log_start_offset
            if leader_log_start > partition.log_end_offset:
                # behind the leader's log start: what we lack is gone (Kafka's
                # ReplicaFetcherThread handleOutOfRangeError)
                partition.truncate_fully_and_start_at(leader_log_start)
                self._dirty.add(partition.tp)
            else:
                self._start_truncation(partition.tp)
        else:
            log.debug("%s: fetch error %s from broker %d", partition.tp, error, self.leader.id)
            self._rest(partition.tp)


#: fetcher lanes per leader: the coordinators' internal topics, and every other topic
DATA_LANE, COORDINATOR_LANE = 0, 1


def lane_of(tp: TopicPartition) -> int:
    """The fetcher a partition is replicated by. The coordinators' writes (__transaction_state,
    __consumer_offsets) get one of their own per leader: behind a data fetch they waited for a
    whole response of bulk records to be fetched and appended before the next fetch could
    carry their follower's new log end to the leader, so each acks=all write of a coordinator
    cost two such round trips (10-30 ms each with the brokers busy, bench transactions), and a
    transaction's commit is four such writes in a row. Kafka spreads partitions over
    num.replica.fetchers by hash instead; a lane by kind keeps the small, latency-bound writes
    off the bulk path whatever the hash would say."""
    return COORDINATOR_LANE if is_internal(tp.topic) else DATA_LANE


class ReplicaFetcherManager:
    """Owns the ReplicaFetchers, one per leader broker and lane (``lane_of``), and moves
    partitions between them."""

    def __init__(self, broker_id: int, factory: Callable[[BrokerInfo], ReplicaFetcher]) -> None:
        self.broker_id = broker_id
        self._factory = factory
        self._fetchers: dict[tuple[int, int], ReplicaFetcher] = {}   # (leader id, lane) -> its fetcher
        self._owner: dict[TopicPartition, tuple[int, int]] = {}
        self._closed = False
        self._refuse_new = False

    def refuse_new(self) -> None:
        """From the start of a controlled shutdown, follow no partition not followed already.
        The partitions this broker led become followers as their leadership moves away, and
        fetching them would put it back into their ISRs (their new leaders see a caught-up
        follower) just before it stops, for the controller to take it out again at its exit:
        two more ZooKeeper writes and LeaderAndIsr states per partition, and acks=all waiting
        on a broker about to go. Kafka's leaders refuse a broker in controlled shutdown
        (KIP-841, KRaft); here the broker stays away."""
        self._refuse_new = True

    def follow(self, partition: Partition, leader: BrokerInfo) -> None:
        if self._closed or (self._refuse_new and partition.tp not in self._owner):
            return
        key = (leader.id, lane_of(partition.tp))
        fetcher = self._fetchers.get(key)
        if (self._owner.get(partition.tp) == key and fetcher is not None
                and (fetcher.leader.host, fetcher.leader.port) == (leader.host, leader.port)
                and fetcher.next_epoch(partition)):
            return
        self.stop_following(partition.tp)
        if fetcher is not None and (fetcher.leader.host, fetcher.leader.port) != (leader.host, leader.port):
            del self._fetchers[key]  # the leader came back at another address
            asyncio.get_running_loop().create_task(fetcher.close())
            fetcher = None
        if fetcher is None:
            fetcher = self._factory(leader)
            self._fetchers[key] = fetcher
            fetcher.start()
        fetcher.add(partition)
        self._owner[partition.tp] = key

    def stop_following(self, tp: TopicPartition) -> None:
        key = self._owner.pop(tp, None)
        if key is not None and key in self._fetchers:
            self._fetchers[key].remove(tp)

    def max_lag(self) -> int:
        """Kafka's ReplicaFetcherManager MaxLag: the largest lag over every partition followed."""
        return max((fetcher.max_lag() for fetcher in list(self._fetchers.values())), default=0)

    async def shutdown_idle(self) -> None:
        """Close fetchers that no longer have partitions."""
        for key, fetcher in list(self._fetchers.items()):
            if not len(fetcher):
                del self._fetchers[key]
                await fetcher.close()

    async def close(self) -> None:
        """Stop every fetcher; a LeaderAndIsr arriving meanwhile (a stopping broker still hears
        from the controller) starts no new one."""
        self._closed = True
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._owner.clear()
        for fetcher in fetchers:
            await fetcher.close()
