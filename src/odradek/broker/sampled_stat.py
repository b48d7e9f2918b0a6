"""Kafka's SampledStat (org.apache.kafka.common.metrics.stats.SampledStat): the ring of samples
under the quota meters, shared by the replication throttles (replication_quota.SimpleRate) and
the client quotas (client_quota_manager.Rate), which differ only in the time they divide by.

A record goes to the current sample, or starts the next one once the current is one window
old. The ring holds num_samples + 1 samples: Kafka keeps one extra for the sample that began
before the monitored span but still overlaps it. A sample whose last record is num_samples
windows old is reset before anything is measured (purgeObsoleteSamples). Times are in whatever
unit the caller uses for `window` (seconds for the replication throttles, milliseconds for the
client quotas, as in Kafka); recording is O(1), measuring O(num_samples).
"""
from __future__ import annotations


class SampledStat:
    """The samples' sum, event count and the start of the oldest, as Kafka's WindowedSum, Avg
    and Rate.windowSize read them."""

    __slots__ = ("num_samples", "window", "_start", "_last", "_value", "_count", "_current")

    def __init__(self, num_samples: int, window: float) -> None:
        if num_samples < 1 or window <= 0:
            raise ValueError("a sampled stat needs at least one sample of a positive window")
        self.num_samples = num_samples
        self.window = window
        self._start: list[float] = []  # per sample: when it began
        self._last: list[float] = []  # when it was last recorded into
        self._value: list[float] = []  # what was recorded into it
        self._count: list[int] = []  # how many records
        self._current = 0

    def record(self, value: float, now: float) -> None:
        if not self._start:
            self._append(now)
        elif now - self._start[self._current] >= self.window:
            self._current = (self._current + 1) % (self.num_samples + 1)
            if self._current == len(self._start):
                self._append(now)
            else:
                self._reset(self._current, now)
        i = self._current
        self._value[i] += value
        self._count[i] += 1
        self._last[i] = now

    def total(self, now: float) -> float:
        """The kept samples' sum (Kafka's WindowedSum)."""
        self._purge(now)
        return sum(self._value)

    def average(self, now: float) -> float:
        """The kept records' mean, NaN without any (Kafka's Avg)."""
        self._purge(now)
        count = sum(self._count)
        return sum(self._value) / count if count else float("nan")

    def elapsed(self, now: float) -> float:
        """Time since the oldest kept sample began; 0 without any (Kafka's SampledStat.oldest
        makes a sample at `now` then)."""
        self._purge(now)
        return now - min(self._start) if self._start else 0.0

    def _purge(self, now: float) -> None:
        expired = self.num_samples * self.window
        for i, last in enumerate(self._last):
            if now - last >= expired:
                self._reset(i, now)

    def _append(self, now: float) -> None:
        self._start.append(now)
        self._last.append(now)
        self._value.append(0.0)
        self._count.append(0)

    def _reset(self, i: int, now: float) -> None:
        self._start[i] = self._last[i] = now
        self._value[i] = 0.0
        self._count[i] = 0
