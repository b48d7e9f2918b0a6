"""Fetch: consumers read up to the high watermark (read_committed ones up to the last stable
offset, with the aborted transactions in what they read), followers up to the log end.

A follower's fetch offset is also how the leader learns how far it has got (the high watermark
and acks=all depend on it). A fetch with nothing to return waits (long poll) until any of its
partitions gets data or max_wait passes; one future is shared by all its partitions.

A replica's fetch of a partition in leader.replication.throttled.replicas is answered without
records while the leader's replication quota is exceeded, unless the replica is in the ISR
(Kafka's ReplicaManager.shouldLeaderThrottle); the records sent for such partitions are counted
against that quota (replication_quota.py).

With an authorizer, KafkaApis sends fetches to `authorized` (Kafka's handleFetchRequest): a
follower (replica_id >= 0) needs CLUSTER_ACTION on the cluster, else every partition answers
TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic. As Kafka's fetch contexts do,
every partition of the fetch session is authorized on every fetch, incremental ones included,
so a revoked ACL stops the next fetch; a denied partition is answered at once, with the error,
like any partition with an error, and nothing is read from it.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Iterable

from odradek.broker import api_keys, client_quotas
from odradek.broker.connection import Response
from odradek.broker.context import BrokerContext
from odradek.broker.fetch_session import FetchSession, FetchSessionCache, FetchSessionError, FetchTarget
from odradek.broker.partition import Partition
from odradek.broker.request_authorization import allowed, denied, wire
from odradek.common.gc_policy import paused_for
from odradek.common.metadata import TopicPartition
from odradek.log.errors import OffsetOutOfRangeError
from odradek.protocol import fast_paths
from odradek.protocol.errors import ErrorCode
from odradek.security.acl import AclOperation, ResourceType

Topics = list[tuple[str, list[fast_paths.FetchPartition]]]
READ_COMMITTED = 1  # FetchRequest isolation_level (0: read_uncommitted)
# what a response tells each target; recorded in the session only once the response is sent
Told = list[tuple[FetchTarget, int, int]]

_FETCH = wire(api_keys.FETCH)
_REPLICATE = _FETCH.check(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
_READ_TOPIC = _FETCH.check(AclOperation.READ, ResourceType.TOPIC)


def leader_for(ctx: BrokerContext, tp: TopicPartition,
               current_leader_epoch: int) -> tuple[Partition | None, ErrorCode | None]:
    """This broker's partition if it leads tp at the epoch the client believes in."""
    partition = ctx.replica_manager.get(tp)
    if partition is None or not partition.is_leader:
        return None, ctx.metadata.not_served_error(tp)
    if current_leader_epoch >= 0:
        if current_leader_epoch < partition.leader_epoch:
            return None, ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > partition.leader_epoch:
            return None, ErrorCode.UNKNOWN_LEADER_EPOCH
    return partition, None


class FetchHandler:
    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.sessions = FetchSessionCache()
        quotas = ctx.replication_quotas
        self.quota = quotas.leader if quotas is not None else None

    def __call__(self, ctx: BrokerContext, header: Any, req: Any, version: int) -> Response | Awaitable[Response]:
        # a follower's full request names every partition it follows here: its new session's
        # targets are a burst's survivors (common/gc_policy.py)
        with paused_for(sum(len(t.partitions) for t in req.topics)):
            return self._handle(header, req, version)

    def authorized(self, ctx: BrokerContext, header: Any, req: Any, version: int) -> Response | Awaitable[Response]:
        """A fetch when an authorizer is configured: as __call__, after Kafka's checks."""
        with paused_for(sum(len(t.partitions) for t in req.topics)):
            return self._handle(header, req, version, authorize=True)

    def _handle(self, header: Any, req: Any, version: int, authorize: bool = False) -> Response | Awaitable[Response]:
        requested = [FetchTarget(TopicPartition(t.topic, p.partition), p.fetch_offset, p.partition_max_bytes,
                                 getattr(p, "current_leader_epoch", -1), getattr(p, "log_start_offset", -1))
                     for t in req.topics for p in t.partitions]
        forgotten = [TopicPartition(t.topic, p) for t in getattr(req, "forgotten_topics_data", ()) for p in t.partitions]
        try:
            session, full = self.sessions.resolve(getattr(req, "session_id", 0), getattr(req, "session_epoch", -1),
                                                  requested, forgotten)
        except FetchSessionError as exc:
            return fast_paths.fetch_response(version, header.correlation_id, [], error_code=exc.code)
        replica_id = getattr(req, "replica_id", -1)
        committed = replica_id < 0 and getattr(req, "isolation_level", 0) == READ_COMMITTED
        if authorize:
            refused = self._denied(list(session.targets.values()) if session is not None else requested, replica_id)
            if refused:
                return self._answer_denied(header.correlation_id, version, req, session, full, requested, replica_id,
                                           committed, refused)
        max_wait = req.max_wait.total_seconds()
        if session is not None and not full:
            # incremental: only what it asked about and what changed since (FetchSession)
            targets = _visit(session, requested)
            topics, told, total, _, has_error = self._read(targets, replica_id, committed, req.max_bytes, False,
                                                           session)
            if total >= req.min_bytes or max_wait <= 0 or has_error:
                return _respond(version, header.correlation_id, topics, told, session.id)
            return self._delayed_incremental(header.correlation_id, version, req, session, replica_id, committed,
                                             [t for t, _, _ in told], time.monotonic() + max_wait)
        targets = list(session.targets.values()) if session is not None else requested
        if session is not None:
            session.dirty.clear()
        topics, told, total, readable, has_error = self._read(targets, replica_id, committed, req.max_bytes, full,
                                                              session)
        session_id = session.id if session is not None else 0
        if total >= req.min_bytes or max_wait <= 0 or has_error or not readable:
            return _respond(version, header.correlation_id, topics, told, session_id)
        return self._delayed(header.correlation_id, version, req, targets, replica_id, committed, full,
                             session_id, readable, time.monotonic() + max_wait)

    def _denied(self, targets: list[FetchTarget], replica_id: int) -> list[FetchTarget]:
        """The targets this fetch may not read: all of them for a follower without CLUSTER_ACTION
        on the cluster, a consumer's of the topics it may not READ (each topic asked once)."""
        if replica_id >= 0:
            return [] if allowed(self.ctx, _REPLICATE) else targets
        names = denied(self.ctx, _READ_TOPIC, (t.tp.topic for t in targets))
        return [t for t in targets if t.tp.topic in names] if names else []

    def _answer_denied(self, correlation_id: int, version: int, req: Any, session: FetchSession | None, full: bool,
                       requested: list[FetchTarget], replica_id: int, committed: bool,
                       refused: list[FetchTarget]) -> Response:
        """The answer when some partitions are denied: at once, as for any partition error; the
        others are read as usual, the denied ones answer TOPIC_AUTHORIZATION_FAILED and stay due
        in the session (told again each time, and everything once they are allowed again)."""
        skipped = {t.tp for t in refused}
        if session is not None and not full:
            targets = _visit(session, requested)
        else:
            targets = list(session.targets.values()) if session is not None else requested
            if session is not None:
                session.dirty.clear()
        topics, told, _, _, _ = self._read([t for t in targets if t.tp not in skipped], replica_id, committed,
                                           req.max_bytes, full, session)
        errors: dict[str, list[fast_paths.FetchPartition]] = {}
        for t in refused:
            errors.setdefault(t.tp.topic, []).append(
                (t.tp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, b"", -1, None))
            told.append((t, -2, -2))
            if session is not None:
                session.dirty.add(t.tp)
        return _respond(version, correlation_id, topics + list(errors.items()), told,
                        session.id if session is not None else 0)

    async def _delayed_incremental(self, correlation_id: int, version: int, req: Any,
                                   session: FetchSession, replica_id: int, committed: bool,
                                   pending: list[FetchTarget], deadline: float) -> Response:
        """Long poll of an incremental session fetch: sleep on the session's own future until a
        partition of it changes, then visit only that (plus ``pending``: what the last read had
        to tell, which the response still owes)."""
        loop = asyncio.get_running_loop()
        while True:
            remaining = deadline - time.monotonic()
            if remaining > 0 and not session.dirty:
                session.waiter = loop.create_future()
                try:
                    await asyncio.wait_for(session.waiter, remaining)
                except asyncio.TimeoutError:
                    remaining = 0
                finally:
                    session.waiter = None
            seen = {t.tp for t in pending}
            targets = pending + [t for t in _visit(session, ()) if t.tp not in seen]
            topics, told, total, _, has_error = self._read(targets, replica_id, committed, req.max_bytes, False,
                                                           session)
            if total >= req.min_bytes or has_error or remaining <= 0:
                return _respond(version, correlation_id, topics, told, session.id)
            pending = [t for t, _, _ in told]

    async def _delayed(self, correlation_id: int, version: int, req: Any, targets: list[FetchTarget],
                       replica_id: int, committed: bool, full: bool, session_id: int, readable: list[Partition],
                       deadline: float) -> Response:
        while (remaining := deadline - time.monotonic()) > 0:
            woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            for p in readable:
                p.add_data_waiter(woken)
            try:
                await asyncio.wait_for(woken, remaining)
            except asyncio.TimeoutError:
                break
            topics, told, total, readable, _ = self._read(targets, replica_id, committed, req.max_bytes, full)
            if total >= req.min_bytes or not readable:
                return _respond(version, correlation_id, topics, told, session_id)
        topics, told, _, _, _ = self._read(targets, replica_id, committed, req.max_bytes, full)
        return _respond(version, correlation_id, topics, told, session_id)

    def _read(self, targets: list[FetchTarget], replica_id: int, committed: bool, budget: int, full: bool,
              session: FetchSession | None = None) -> tuple[Topics, Told, int, list[Partition], bool]:
        """Read each target (``committed``: read_committed, up to the last stable offset, with
        the aborted transactions the read covers); an incremental (not full) response leaves out partitions with no
        records and nothing new to tell. Returns (topics, what they tell, bytes, readable
        partitions, whether any partition has an error). With a session, partitions it reads
        are watched, and a target with an error or with records left unread (the response was
        full) stays due for the session's next visit."""
        total = 0
        quota_limit = client_quotas.fetch_response_limit()  # a consumer's fetch quota caps its response
        if quota_limit is not None:
            budget = min(budget, quota_limit)
        told: Told = []
        out: dict[str, list[fast_paths.FetchPartition]] = {}
        readable: list[Partition] = []
        has_error = False
        quota = self.quota
        throttling = replica_id >= 0 and quota is not None and quota.active
        exceeded: bool | None = None  # the quota is measured once per read, if a partition asks
        throttled_bytes = 0
        for t in targets:
            partition, error, error_log_start = t.partition, None, -1
            if partition is None or not partition.is_leader or (
                    t.leader_epoch >= 0 and t.leader_epoch != partition.leader_epoch):
                partition, error = leader_for(self.ctx, t.tp, t.leader_epoch)
                t.partition = partition
                if session is not None and partition is not None:
                    partition.watch(session)
            data: bytes | memoryview = b""
            if partition is not None:
                if replica_id >= 0:
                    partition.update_follower_position(replica_id, t.fetch_offset, t.log_start_offset)
                    limit = partition.log_end_offset
                elif committed:
                    limit = partition.last_stable_offset
                else:
                    limit = partition.high_watermark
                max_bytes = min(t.max_bytes, budget - total) if total or quota_limit is not None else t.max_bytes
                if t.fetch_offset != limit:  # an idle partition reads nothing
                    throttled = throttling and quota is not None and quota.is_throttled(t.tp)
                    held = False
                    if throttled and not partition.in_maximal_isr(replica_id):
                        if exceeded is None:
                            exceeded = quota is not None and quota.is_quota_exceeded()
                        held = exceeded
                    if held:
                        if session is not None:
                            session.held.add(t.tp)  # answered without records, asked again later
                    elif max_bytes > 0:
                        try:
                            data = partition.log.read(t.fetch_offset, max_bytes, limit)
                        except OffsetOutOfRangeError:
                            error = ErrorCode.OFFSET_OUT_OF_RANGE
                            if replica_id >= 0:
                                # a follower behind our log start (DeleteRecords, retention)
                                # learns where it is, to start over there (Kafka's follower
                                # asks with ListOffsets; the answer is the same)
                                error_log_start = partition.log.log_start_offset
                        if throttled:
                            throttled_bytes += len(data)
                    elif session is not None:
                        session.dirty.add(t.tp)  # records left for the next response
            if error is not None:
                if session is not None:
                    session.dirty.add(t.tp)  # told again each time, as before sessions
                has_error = True
                out.setdefault(t.tp.topic, []).append((t.tp.partition, error, -1, error_log_start, b"", -1, None))
                told.append((t, -2, -2))  # tell it everything again once it recovers
                continue
            assert partition is not None
            readable.append(partition)
            hw, log_start = partition.high_watermark, partition.log.log_start_offset
            if full or data or hw != t.sent_high_watermark or log_start != t.sent_log_start:
                # the LSO moves only with the high watermark (a transaction becomes stable once
                # its marker is below it) or the log start, so those two say when to tell it
                lso = partition.last_stable_offset
                aborted = None
                if committed:
                    aborted = [(a.producer_id, a.first_offset)
                               for a in partition.producers.aborted_transactions(t.fetch_offset, lso)]
                out.setdefault(t.tp.topic, []).append((t.tp.partition, 0, hw, log_start, data, lso, aborted))
                told.append((t, hw, log_start))
                total += len(data)
                if data and self.ctx.metrics is not None:
                    self.ctx.metrics.bytes_out[t.tp.topic] += len(data)
        if throttled_bytes and quota is not None:
            # counted when read: a read a long poll discards (a replica's min_bytes above what
            # it got; odradek's followers ask for 1 byte) counts too, which only throttles more
            quota.record(throttled_bytes)
        return list(out.items()), told, total, readable, has_error


def _visit(session: FetchSession, requested: Iterable[FetchTarget]) -> list[FetchTarget]:
    """The session targets an incremental fetch must read: those the request named (their
    position changed), those whose partition changed since the last visit, and those whose
    records a replication throttle held back."""
    due = dict.fromkeys(t.tp for t in requested)
    due.update(dict.fromkeys(session.dirty))
    session.dirty.clear()
    if session.held:
        due.update(dict.fromkeys(session.held))
        session.held.clear()
    targets = session.targets
    return [targets[tp] for tp in due if tp in targets]


def _respond(version: int, correlation_id: int, topics: Topics, told: Told, session_id: int) -> Response:
    for target, hw, log_start in told:
        target.sent_high_watermark, target.sent_log_start = hw, log_start
    # a consumer's bytes against its consumer_byte_rate (client quotas), and the throttle they earn
    throttle_ms = client_quotas.record_fetch_response(topics)
    return fast_paths.fetch_response(version, correlation_id, topics, session_id=session_id,
                                     throttle_time_ms=throttle_ms)
