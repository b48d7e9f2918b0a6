"""Keeps CPython's cycle collector from scanning the broker's long-lived objects mid-failover.

A broker hosting 10,000 partition replicas tracks ~540,000 objects (partitions, logs, segments,
producer states, the controller's context), nearly all of them alive for as long as the
partition is. CPython starts a full collection whenever the objects that survived the young
generations since the last one reach a quarter of the old ones, and a failover allocates just
that, with every thread of the process stopped meanwhile (0.18 s of a 1.7 s failover at 10,000
partitions).

So every few seconds the broker moves everything it holds into the permanent generation
(``gc.freeze``, a constant-time list splice), and automatic collections then scan only what
was allocated since. Reference counting still frees frozen objects; only a reference cycle
among frozen objects would wait, so once in a while (``full_every_s``) everything is thawed
and collected in full, at a moment of the broker's choosing rather than mid-failover.

Freezing alone is not enough: after a freeze the old generation is small, so CPython's "a
quarter more than last time" trigger fires again and again on the objects a large failover
allocates. ``install`` therefore also makes an automatic full collection wait for 100
collections of the middle generation instead of 10.

What remains are the young collections: a controller event or a LeaderAndIsr at 10,000
partitions allocates hundreds of thousands of short-lived containers, which reference
counting frees, so the young generations' passes over them are wasted (12% of a controller
failover's decision time). ``collection_paused`` turns automatic collection off for such a
burst (a second at most); a cycle made meanwhile waits for the next collection.
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

log = logging.getLogger("odradek.broker.gc")

FREEZE_EVERY_S = 5.0
FULL_COLLECTION_EVERY_S = 600.0
OLD_GENERATION_THRESHOLD = 100  # CPython's default is 10


_pause_lock = threading.Lock()
_pauses = 0  # bursts under way, in any thread
_enabled_before = True  # whether collection was on when the first of them began


@contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection while the block runs, nor until every other thread's paused
    block has ended (the controller's event thread and the broker's loop overlap)."""
    global _pauses, _enabled_before
    with _pause_lock:
        if _pauses == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _enabled_before:
                gc.enable()


class GcPolicy:
    def __init__(self, full_every_s: float = FULL_COLLECTION_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._full_every_s = full_every_s
        self._clock = clock
        self._last_full = clock()

    def install(self) -> None:
        """Make automatic full collections rare (see the module doc); process-wide."""
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, OLD_GENERATION_THRESHOLD)

    def tick(self) -> None:
        """Call every FREEZE_EVERY_S from the broker's event loop."""
        now = self._clock()
        if now - self._last_full >= self._full_every_s:
            self._last_full = now
            gc.unfreeze()
            started = time.perf_counter()
            found = gc.collect()
            log.info("full garbage collection: %d unreachable objects in %.0f ms", found,
                     (time.perf_counter() - started) * 1000)
        gc.freeze()


#: upper bounds of the pause histogram's buckets, seconds: a young collection takes well under
#: a millisecond, and a ZooKeeper session (6 s) notices anything past a few seconds
PAUSE_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class GcPauseWatch:
    """Times every collection CPython makes (``gc.callbacks``), per generation: every thread of
    the process stands still meanwhile, so a long one looks to ZooKeeper, to followers and to
    clients like a frozen broker. Exported as ``odradek_gc_pause_seconds`` (broker/metrics.py).

    The callbacks run with the interpreter lock held and collections never overlap, so the
    counts need no lock of their own; a reader may see one collection half counted."""

    def __init__(self) -> None:
        self._started = 0.0
        #: generation -> count per bucket (the last one: above every bound), total seconds, longest
        self.buckets: dict[int, list[int]] = {g: [0] * (len(PAUSE_BUCKETS_S) + 1) for g in range(3)}
        self.total_s: dict[int, float] = {g: 0.0 for g in range(3)}
        self.longest_s: dict[int, float] = {g: 0.0 for g in range(3)}

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        seconds = time.perf_counter() - self._started
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

    def histogram(self, generation: int) -> tuple[list[tuple[str, int]], float]:
        """Prometheus' cumulative buckets ``[(le, count), ...]`` ending with +Inf, and the sum."""
        running = 0
        out = []
        for bound, count in zip((*[repr(b) for b in PAUSE_BUCKETS_S], "+Inf"), self.buckets[generation]):
            running += count
            out.append((bound, running))
        return out, self.total_s[generation]
