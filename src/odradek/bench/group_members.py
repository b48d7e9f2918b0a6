"""The clients of `odradek bench groups` (bench/groups.py): consumer group members, each a
confluent-kafka consumer in its own thread that records what it owns, when it last consumed
and how its commits went, a group of them with the settle test, and the producer load."""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from odradek.admin.admin_client import quiet_logger

TOPIC = "groups-bench"
AUTO_COMMIT_MS = 1000
ASYNC_IN_FLIGHT = 8
PROBE_INTERVAL_S = 0.1
#: records per second the producer writes to each partition
RATE_PER_PARTITION = 20


class Member:
    """One consumer in its own thread; what it owns and when it last consumed, for the bench
    thread to read under the lock."""

    def __init__(self, name: str, conf: dict[str, Any]) -> None:
        self.name = name
        self._conf = {**conf, "client.id": name, "on_commit": self._on_commit,
                      "error_cb": self._on_error, "logger": quiet_logger()}
        self.lock = threading.Lock()
        self.assignment: set[int] = set()
        self.changed_at = 0.0  # when its assignment last changed
        self.revoked_at: list[float] = []  # every revocation (eager: each rebalance it heard of)
        self.first_record_since_change: float | None = None
        self.first_record_since_mark: float | None = None
        self.mark_at = 0.0
        self.next_offsets: dict[int, int] = {}
        self.errors: Counter[str] = Counter()
        self.mode = "consume"  # consume | sync | async | probe
        self.sync_ok = self.async_ok = self.partitions_committed = 0
        self.probes: list[tuple[float, float, str | None]] = []  # (started, finished, error)
        self._in_flight = 0
        self.subscribed_at = self.closed_at = 0.0
        self._close = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, wait: bool = True) -> float:
        """Ask the member to close its consumer (LeaveGroup); returns when it was asked."""
        asked = time.time()
        self._close.set()
        if wait:
            self._thread.join(60)
        return asked

    def mark(self, at: float) -> None:
        with self.lock:
            self.mark_at, self.first_record_since_mark = at, None

    def set_mode(self, mode: str) -> None:
        with self.lock:
            self.mode = mode

    # -- callbacks (the member's own thread, inside poll or commit) -----------------------------

    def _assigned(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self._change(lambda s: s | {tp.partition for tp in partitions})

    def _revoked(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        now = time.time()
        with self.lock:
            self.revoked_at.append(now)
        self._change(lambda s: s - {tp.partition for tp in partitions})

    def _change(self, update: Any) -> None:
        with self.lock:
            new = update(self.assignment)
            if new != self.assignment:
                for p in self.assignment - new:
                    self.next_offsets.pop(p, None)
                self.assignment, self.changed_at = new, time.time()
                self.first_record_since_change = None

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        with self.lock:
            if self._in_flight <= 0:
                return  # a synchronous commit's result: counted where it returned
            self._in_flight -= 1
            if err is None and self.mode == "async":
                self.async_ok += 1
            elif err is not None:
                self.errors[f"commit {err.name()}"] += 1

    def _on_error(self, err: KafkaError) -> None:
        with self.lock:
            self.errors[f"client {err.name()}"] += 1

    # -- the poll loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = Consumer(self._conf)
        self.subscribed_at = time.time()
        consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked,
                           on_lost=self._revoked)
        next_probe = 0.0
        try:
            while not self._close.is_set():
                mode = self.mode
                msg = consumer.poll(0.05 if mode == "consume" else 0.01 if mode == "probe" else 0)
                if msg is not None:
                    self._record(msg)
                if mode == "sync":
                    self._commit_sync(consumer)
                elif mode == "async":
                    self._commit_async(consumer)
                elif mode == "probe" and time.time() >= next_probe:
                    next_probe = time.time() + PROBE_INTERVAL_S
                    self._probe(consumer)
            with self.lock:
                self.mode = "consume"
            # outstanding asynchronous commits are answered (or fail) before the close
            deadline = time.time() + 5
            while self._in_flight > 0 and time.time() < deadline:
                consumer.poll(0.05)
        finally:
            consumer.close()
            self.closed_at = time.time()

    def _record(self, msg: Any) -> None:
        if msg.error():
            with self.lock:
                self.errors[f"poll {msg.error().name()}"] += 1
            return
        now = time.time()
        with self.lock:
            p = msg.partition()
            if p not in self.assignment:
                return
            self.next_offsets[p] = msg.offset() + 1
            if self.first_record_since_change is None and now > self.changed_at:
                self.first_record_since_change = now
            if self.first_record_since_mark is None and now > self.mark_at:
                self.first_record_since_mark = now

    def _offsets(self) -> list[TopicPartition]:
        with self.lock:
            return [TopicPartition(TOPIC, p, o) for p, o in self.next_offsets.items()]

    def _commit(self, consumer: Any, offsets: list[TopicPartition]) -> str | None:
        """One synchronous commit; the error's name, or None."""
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            return err.name() if err is not None else repr(exc)
        failed = [tp.error.name() for tp in result or [] if tp.error is not None]
        return failed[0] if failed else None

    def _commit_sync(self, consumer: Any) -> None:
        offsets = self._offsets()
        if not offsets:
            return
        error = self._commit(consumer, offsets)
        with self.lock:
            if error is None:
                self.sync_ok += 1
                self.partitions_committed += len(offsets)
            else:
                self.errors[f"commit {error}"] += 1

    def _commit_async(self, consumer: Any) -> None:
        while self._in_flight < ASYNC_IN_FLIGHT:
            offsets = self._offsets()
            if not offsets:
                return
            with self.lock:
                self._in_flight += 1
            try:
                consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                with self.lock:
                    self._in_flight -= 1
                    self.errors[f"commit {exc.args[0].name() if exc.args else exc!r}"] += 1
                return

    def _probe(self, consumer: Any) -> None:
        offsets = self._offsets()
        if not offsets:
            return
        started = time.time()
        error = self._commit(consumer, offsets)
        with self.lock:
            self.probes.append((started, time.time(), error))
            if error is not None:
                self.errors[f"commit {error}"] += 1


class Load:
    """A producer thread writing RATE_PER_PARTITION records a second to every partition."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                   "logger": quiet_logger()})
        self._partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)
        self.errors: Counter[str] = Counter()

    def __enter__(self) -> "Load":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(10)

    def _run(self) -> None:
        value = b"x" * 100
        period = 1.0 / RATE_PER_PARTITION
        next_at = time.monotonic()
        while not self._stop.is_set():
            for p in range(self._partitions):
                try:
                    self._producer.produce(TOPIC, value, partition=p, on_delivery=self._delivered)
                except BufferError:
                    self.errors["BufferError"] += 1
            self._producer.poll(0)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors[err.name()] += 1


class Group:
    """Members of one consumer group and the measurements made on them."""

    def __init__(self, bootstrap: str, partitions: int, strategy: str, auto_commit: bool,
                 session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self.id = f"bench-{strategy}-{uuid.uuid4().hex[:8]}"
        self.partitions = partitions
        self._conf = {"bootstrap.servers": bootstrap, "group.id": self.id,
                      "partition.assignment.strategy": strategy,
                      "session.timeout.ms": session_timeout_ms,
                      "heartbeat.interval.ms": heartbeat_interval_ms,
                      "auto.offset.reset": "earliest", "enable.auto.commit": auto_commit,
                      "auto.commit.interval.ms": AUTO_COMMIT_MS}
        self.members: list[Member] = []
        self.gone: list[Member] = []
        self._count = 0

    def add(self) -> Member:
        self._count += 1
        member = Member(f"{self.id}-m{self._count}", self._conf)
        self.members.append(member)
        member.start()
        return member

    def remove(self, member: Member) -> float:
        """Close ``member`` (LeaveGroup) without waiting; returns when it was asked to."""
        self.members.remove(member)
        self.gone.append(member)
        return member.close(wait=False)

    def close(self) -> None:
        for m in self.members:
            m.close(wait=False)
        for m in self.members + self.gone:
            m.close()
        self.gone.extend(self.members)
        self.members = []

    def errors(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for m in self.members + self.gone:
            with m.lock:
                total.update(m.errors)
        return dict(total)

    def settle(self, t0: float, timeout: float, joiner: Member | None = None) -> dict[str, Any] | None:
        """Wait until every partition is owned exactly once (``joiner`` among the owners) and every
        owner has received a record since its assignment changed (or since ``t0``); the seconds
        from ``t0`` to then and to the last assignment, or None after ``timeout``."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            time.sleep(0.01)
            owned: list[int] = []
            consumed: list[float] = []
            assigned = t0
            ready = True
            for m in self.members:
                with m.lock:
                    owned.extend(m.assignment)
                    if not m.assignment:
                        continue
                    changed = m.changed_at > t0
                    first = m.first_record_since_change if changed else m.first_record_since_mark
                    if changed:
                        assigned = max(assigned, m.changed_at)
                if first is None:
                    ready = False
                    break
                consumed.append(first)
            if (not ready or sorted(owned) != list(range(self.partitions))
                    or (joiner is not None and not joiner.assignment)):
                continue
            revoked = [r for m in self.members for r in m.revoked_at if r > t0]
            return {"settled_s": round(max(consumed) - t0, 3), "assigned_s": round(assigned - t0, 3),
                    "last_revocation_s": round(max(revoked) - t0, 3) if revoked else None}
        return None

    def form(self, members: int, timeout: float) -> dict[str, Any] | None:
        """Start ``members`` members at once; settle() of the group's first rebalance."""
        t0 = time.time()
        for _ in range(members):
            self.add()
        self.mark_all(t0)
        return self.settle(t0, timeout)

    def mark_all(self, at: float) -> None:
        for m in self.members:
            m.mark(at)
