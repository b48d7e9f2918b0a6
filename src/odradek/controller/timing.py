"""Per-event timing of the controller: one JSON line per event on logger ``odradek.controller.timing``.

Failover latency is a chain (watch fires -> event dequeued -> ZooKeeper writes done -> requests
queued -> every broker answered), and guessing which link is slow is how time gets wasted. So
each event the controller runs carries an ``EventTimer`` that stamps those moments with wall-clock
time (comparable across processes, e.g. with the moment a benchmark killed a broker) and counts
the work done. The line is written when the last response to the event's requests arrives (on
the channel's sender thread), or at once if the event sent nothing.

Record keys (times are ``time.time()`` seconds; absent when they did not happen):
  event, controller_id, epoch
  fired       the ZooKeeper watch (or the election win, for Startup) that caused the event
  dequeued    the event thread started on it
  loaded      Startup only: the context (brokers, topics, partition states) was read
  zk_done     the event's decisions were all written to ZooKeeper
  sent        its requests were queued to the brokers
  lai_acked   the last LeaderAndIsr response arrived
  acked       the last response of any kind arrived
  requests, lai_partitions, zk_reads, zk_writes, errors: counts
  event_cpu_s     CPU seconds of the event thread from dequeued to sent: against the wall time
                  of those phases it tells the controller's own work from waiting (ZooKeeper,
                  the GIL, a busy machine)
  process_cpu_s   CPU seconds of the whole broker process from dequeued to lai_acked
It costs a few dict updates per event, never per partition.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

LOGGER_NAME = "odradek.controller.timing"
_log = logging.getLogger(LOGGER_NAME)


class EventTimer:
    def __init__(self, event: str, controller_id: int, epoch: int, fired: float | None = None,
                 sink: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.record: dict[str, Any] = {
            "event": event, "controller_id": controller_id, "epoch": epoch,
            "fired": fired, "dequeued": time.time(),
            "requests": 0, "lai_partitions": 0, "errors": 0,
        }
        self._sink = sink
        self._lock = threading.Lock()
        self._outstanding = 0
        self._lai_outstanding = 0
        self._sealed = False
        self._emitted = False
        self._thread_cpu = time.thread_time()
        self._process_cpu = time.process_time()

    def mark(self, phase: str) -> None:
        self.record[phase] = time.time()

    def note(self, key: str, value: Any) -> None:
        self.record[key] = value

    def add(self, key: str, n: float = 1) -> None:
        with self._lock:
            self.record[key] = self.record.get(key, 0) + n

    def track(self, is_lai: bool, partitions: int = 0) -> Callable[[object], None]:
        """Count one request in flight; returns the callback to hand to the channel."""
        with self._lock:
            self._outstanding += 1
            self.record["requests"] += 1
            if is_lai:
                self._lai_outstanding += 1
                self.record["lai_partitions"] += partitions

        def done(result: object) -> None:
            now = time.time()
            error_code: object = getattr(result, "error_code", 0)
            with self._lock:
                if isinstance(result, Exception) or error_code:
                    self.record["errors"] += 1
                self._outstanding -= 1
                if is_lai:
                    self._lai_outstanding -= 1
                    if self._lai_outstanding == 0:
                        self.record["lai_acked"] = now
                        self.record["process_cpu_s"] = round(
                            time.process_time() - self._process_cpu, 3)
                if self._outstanding == 0:
                    self.record["acked"] = now
                emit = self._ready()
            if emit:
                self._emit()

        return done

    def seal(self) -> None:
        """No more requests will be tracked: emit now if nothing is outstanding."""
        with self._lock:
            self._sealed = True
            self.record["sent"] = time.time()
            self.record["event_cpu_s"] = round(time.thread_time() - self._thread_cpu, 3)
            emit = self._ready()
        if emit:
            self._emit()

    def _ready(self) -> bool:
        if self._sealed and self._outstanding == 0 and not self._emitted:
            self._emitted = True
            return True
        return False

    def _emit(self) -> None:
        if self._sink is not None:
            self._sink(dict(self.record))
        elif _log.isEnabledFor(logging.INFO):
            _log.info(json.dumps(self.record, sort_keys=True))


class TimedZk:
    """Forwards to a ControllerZk and adds each call's count, item count and seconds to the
    current event's timer (zk_reads/zk_read_s for get_*, zk_writes/zk_write_s for writes; a
    write started now and collected later counts the time of both halves)."""

    _WRITES = frozenset({"create_partition_states", "update_leader_and_isr",
                         "pop_isr_change_notifications", "delete_preferred_replica_election",
                         "set_replica_assignments", "set_partition_reassignments",
                         "delete_partition_removals", "remove_partitions"})
    _STARTED_WRITES = frozenset({"start_update_leader_and_isr"})

    def __init__(self, zk: Any, current: Callable[[], EventTimer | None]) -> None:
        self._zk = zk
        self._current = current

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._zk, name)
        started = name in self._STARTED_WRITES
        if not callable(target) or not (name.startswith("get_") or name in self._WRITES or started):
            return target
        kind = "zk_write" if name in self._WRITES or started else "zk_read"

        def timed(*args: Any, **kwargs: Any) -> Any:
            timer = self._current()
            if timer is None:
                return target(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                result = target(*args, **kwargs)
            finally:
                timer.add(kind + "_s", round(time.perf_counter() - t0, 4))
                timer.add(kind + "s")
                if args and hasattr(args[0], "__len__"):
                    timer.add(kind + "_items", len(args[0]))
            return _TimedPending(result, timer, kind) if started else result

        return timed


class _TimedPending:
    """A started write (``start_update_leader_and_isr``) whose ``result()`` wait is timed too."""

    def __init__(self, pending: Any, timer: EventTimer, kind: str) -> None:
        self._pending = pending
        self._timer = timer
        self._kind = kind

    def result(self) -> Any:
        t0 = time.perf_counter()
        try:
            return self._pending.result()
        finally:
            self._timer.add(self._kind + "_s", round(time.perf_counter() - t0, 4))
