"""Keeps CPython's cycle collector from ever scanning the broker's long-lived objects, so that a
collection's pause follows what the broker allocated in the last few seconds, never how many
partitions it holds.

A broker tracks about 48 objects per partition replica: 4.8 million with 100,000 replicas, 6.9
million on the active controller. A full collection visits every one with every thread of the
process stopped. This module used to thaw everything and collect it in full every 10 minutes:
at 100,000 partitions (3 brokers each holding all replicas, 2 cores, load average 2.2) that
took 3.6 s on the controller and 6.3 s and 7.1 s on the two other brokers collecting at the
same moment, which lost their ZooKeeper sessions (6 s) and so every partition they led; at a
load average of 9-11, 27-55 s. The collections found 28-752 unreachable objects.

So everything the broker holds goes into CPython's permanent generation (``gc.freeze``, a
constant-time list splice), which no collection scans, and never comes out again:

- ``GcPolicy.tick``, every FREEZE_EVERY_S on the event loop, collects what was allocated since
  the last freeze (the young generations and the part of the old one not yet frozen) and
  freezes what survives: the collector looks at each object once, in slices of 2 s of
  allocations;
- work over every partition at once runs with automatic collection off (a controller event, a
  LeaderAndIsr, and from BURST_PARTITIONS partitions on an UpdateMetadata, a StopReplica, a
  fetch session's full request, a leader's ISR changes and the start's check of its logs:
  ``collection_paused``, ``paused_for``), and what it leaves is frozen unscanned at its end
  if it lasted FREEZE_AFTER_BURST_S or more. Its short-lived objects are freed by reference
  counting, so the young collections' passes
  over them were wasted (12% of a controller failover's decision time at 10,000 partitions),
  and its survivors were the next collection's slice: the first young collection after such a
  burst took 0.64-1.22 s while 100,000 partitions were created, and a tick after an
  UpdateMetadata scanned its 200,000 new objects;
- an automatic full collection waits for 100 middle-generation collections instead of 10:
  after a freeze the old generation is small, so CPython's "a quarter more than last time"
  trigger fired 8-11 times during one failover at 50,000 partitions.

With this, over ``odradek bench failover --partitions 100000`` (creation, a broker and a
controller failover, a restart, a full scrape of every broker's metrics every 30 s; load
average 6.7) no collection worked more than 72 ms of CPU; the longest pause was 211 ms of wall
time, the rest of it waiting for one of the 2 cores.

What freezing costs: a reference cycle among frozen objects is never freed, where reference
counting frees everything else, frozen or not. So the broker's structures make no cycle that
outlives a freeze: a Log's leader epoch cache is handed the log end offset instead of holding a
closure over its Log, a closed connection's transport drops the bound method of itself that
CPython 3.11's selector transports keep (``drop_transport_cycle``), a failed inter-broker
request's traceback is cleared (``release_frames``: asyncio's wait_for frame holds the future
that holds the exception), a retry loop waits out of its except block, kazoo's results keep
a copy of a failure without its traceback (zk/kazoo_handler.py), and the frequent znode
creations (ISR-change notifications, deletion marks) are multis rather than kazoo's create,
which makes a cycle of its closures on every call. What a freeze catches in flight still stays
if it later dies in a cycle: 30 rounds of topic churn with 6 ZooKeeper session expiries left
about 100 such objects (docs/benchmarks.md, Garbage collection).
tests/integration/test_gc_cycles.py churns two brokers under this policy and fails on any
cycle of odradek's objects among frozen ones.

Operators see a leak as ``odradek_python_allocated_blocks`` (broker/metrics.py) growing while
the partitions and clients do not. Not the size of the permanent generation:
``gc.get_freeze_count()`` walks the whole list with the interpreter lock held (76-108 ms at 2
million frozen objects), a stall of its own at every scrape.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
import traceback
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Iterator

log = logging.getLogger("odradek.broker.gc")

#: the tick's period. Its collection visits what was allocated since the last one, so its pause
#: follows the period: at 5 s the longest pause at 100,000 partitions was one tick of 102 ms (71 ms
#: of CPU, on a broker taking over leaders). A shorter period costs no more scanning in all (each
#: object is still visited once), but freezes requests in flight more often (a cycle caught so
#: is kept for good).
FREEZE_EVERY_S = 2.0
#: work over this many partitions at once runs as a burst (``paused_for``): its survivors would
#: otherwise be the next tick's slice (an UpdateMetadata at 100,000 partitions leaves 200,000)
BURST_PARTITIONS = 1000
OLD_GENERATION_THRESHOLD = 100  # CPython's default is 10
#: a tick's collection at least this long is logged (it scanned a period of unusual allocations)
SLOW_TICK_S = 0.1


#: a burst this long or longer is frozen at its end; a shorter one left too little for its
#: young collection to matter (Python allocates at most a few million objects a second, and the
#: collector visits about two million a second), and a freeze would also keep for good the
#: cycles it made meanwhile (kazoo's create makes one per call: a DeleteTopics' marks, frozen at
#: the end of the controller's event, were most of what 10 rounds of topic churn left)
FREEZE_AFTER_BURST_S = 0.02

_pause_lock = threading.Lock()
_pauses = 0  # bursts under way, in any thread
_enabled_before = True  # whether collection was on when the first of them began
_paused_at = 0.0  # when the first of them began
_freeze_after_bursts = False  # GcPolicy.install: a broker's process, not a test's


@contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection while the block runs, nor until every other thread's paused
    block has ended (the controller's event thread and the broker's loop overlap); in a process
    with the policy installed, the last one to end freezes what the bursts left if they lasted
    FREEZE_AFTER_BURST_S or more."""
    global _pauses, _enabled_before, _paused_at
    with _pause_lock:
        if _pauses == 0:
            _enabled_before = gc.isenabled()
            _paused_at = time.monotonic()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0:
                if _freeze_after_bursts and time.monotonic() - _paused_at >= FREEZE_AFTER_BURST_S:
                    gc.freeze()
                if _enabled_before:
                    gc.enable()


def paused_for(partitions: int) -> AbstractContextManager[None]:
    """``collection_paused()`` for work over BURST_PARTITIONS partitions or more (an
    UpdateMetadata or StopReplica, a fetch session's full request, a leader's ISR changes after
    a failover), nothing for less: a burst's end freezes whatever is alive, requests in flight
    included, so small ones are left to the young collections and the tick."""
    return collection_paused() if partitions >= BURST_PARTITIONS else nullcontext()


def drop_transport_cycle(transport: Any) -> None:
    """Break the reference cycle a closed asyncio socket transport keeps: CPython 3.11 stores
    the bound method it reads with on the transport itself (``_read_ready_cb``; 3.12 drops it
    on close), so without this every closed connection waits for a collection that, once the
    transport is frozen, never comes. Harmless on a transport without it."""
    if getattr(transport, "_read_ready_cb", None) is not None and transport.is_closing():
        transport._read_ready_cb = None


def release_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames in an exception's traceback, and in its cause's
    and context's. A failed asyncio request's traceback holds wait_for's frame, whose future
    holds the exception: a reference cycle, and a request in flight at a freeze (a follower's
    fetch always is) makes it a permanent one. Frames still executing are left alone."""
    pending: list[BaseException | None] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        pending += [current.__cause__, current.__context__]


class GcPolicy:
    """The broker's collection policy (see the module doc): ``install`` once, at the start,
    then ``tick`` every FREEZE_EVERY_S from the event loop."""

    def __init__(self) -> None:
        self._thresholds = gc.get_threshold()

    def install(self) -> None:
        """Process-wide: rare automatic full collections, bursts frozen at their end, and
        everything allocated so far (modules, configuration) collected once and frozen, before
        the broker serves anyone."""
        global _freeze_after_bursts
        self._thresholds = gc.get_threshold()
        young, middle, _ = self._thresholds
        gc.set_threshold(young, middle, OLD_GENERATION_THRESHOLD)
        _freeze_after_bursts = True
        gc.collect()
        gc.freeze()

    def uninstall(self) -> None:
        """Back to CPython's behaviour, frozen objects thawed (for tests running a broker)."""
        global _freeze_after_bursts
        _freeze_after_bursts = False
        gc.set_threshold(*self._thresholds)
        gc.unfreeze()

    def tick(self) -> None:
        """Collect the objects allocated since the last freeze and freeze the survivors;
        nothing while a burst is under way (its end freezes)."""
        if _pauses:
            return
        started = time.perf_counter()
        found = gc.collect()
        gc.freeze()
        took = time.perf_counter() - started
        if took >= SLOW_TICK_S:
            log.info("garbage collection of the objects allocated since the last freeze: %d unreachable "
                     "in %.0f ms", found, took * 1000)


#: upper bounds of the pause histogram's buckets, seconds: a young collection takes well under
#: a millisecond, and a ZooKeeper session (6 s) notices anything past a few seconds
PAUSE_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class GcPauseWatch:
    """Times every collection CPython makes (``gc.callbacks``), per generation: every thread of
    the process stands still meanwhile, so a long one looks to ZooKeeper, to followers and to
    clients like a frozen broker. Exported as ``odradek_gc_pause_seconds`` (broker/metrics.py).
    Each collection's CPU time on its thread is kept too (``longest_cpu_s``): on a machine
    short of cores a pause lasts longer than the collector worked (7 times longer at a load
    average of 12 on 2 cores), and the two tell the collector's work from the machine's load.

    The callbacks run with the interpreter lock held and collections never overlap, so the
    counts need no lock of their own; a reader may see one collection half counted."""

    def __init__(self) -> None:
        self._started = 0.0
        #: generation -> count per bucket (the last one: above every bound), total seconds, longest
        self.buckets: dict[int, list[int]] = {g: [0] * (len(PAUSE_BUCKETS_S) + 1) for g in range(3)}
        self.total_s: dict[int, float] = {g: 0.0 for g in range(3)}
        self.longest_s: dict[int, float] = {g: 0.0 for g in range(3)}
        self._started_cpu = 0.0
        self.longest_cpu_s: dict[int, float] = {g: 0.0 for g in range(3)}

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            self._started_cpu = time.thread_time()
            return
        seconds = time.perf_counter() - self._started
        cpu = time.thread_time() - self._started_cpu
        generation = info.get("generation", 2)
        counts = self.buckets[generation]
        for i, bound in enumerate(PAUSE_BUCKETS_S):
            if seconds <= bound:
                counts[i] += 1
                break
        else:
            counts[-1] += 1
        self.total_s[generation] += seconds
        if seconds > self.longest_s[generation]:
            self.longest_s[generation] = seconds
        if cpu > self.longest_cpu_s[generation]:
            self.longest_cpu_s[generation] = cpu

    def histogram(self, generation: int) -> tuple[list[tuple[str, int]], float]:
        """Prometheus' cumulative buckets ``[(le, count), ...]`` ending with +Inf, and the sum."""
        running = 0
        out = []
        for bound, count in zip((*[repr(b) for b in PAUSE_BUCKETS_S], "+Inf"), self.buckets[generation]):
            running += count
            out.append((bound, running))
        return out, self.total_s[generation]
