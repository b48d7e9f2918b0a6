"""Time, taken from outside (Kafka's org.apache.kafka.common.utils.Time): the system's clocks in
the broker, a virtual clock where a test or the fuzzer decides when time passes.

Two readings, as Kafka's Time has them: ``milliseconds()``, wall-clock time since the epoch, for
what is stored or compared with stored times (commit timestamps, when a group became Empty);
and ``monotonic()``, seconds on a clock that never goes back, for durations.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in ms since the epoch (Kafka's Time.milliseconds)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (Kafka's Time.nanoseconds, in seconds)."""
        ...


class SystemClock:
    """The system's clocks (Kafka's SystemTime). Reads ``time.monotonic`` at each call, so a
    VirtualClock installed over it (the fuzzer's) is what it reads."""

    def milliseconds(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()


class VirtualClock:
    """Time that jumps forward when told (``advance``): the system's clocks plus every jump made.

    The fuzzer's event loop jumps it to its next timer whenever nothing is ready, so handlers
    that wait as asked take no real time (fuzz/clock.py). Frozen (``VirtualClock.frozen``), it
    moves by the jumps alone, as Kafka's MockTime: a test decides when every timeout passes.
    Jumps are counted in whole nanoseconds, so a test's ms add up exactly.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        # the real time.monotonic, taken before ``installed`` replaces it with this clock's
        self._monotonic = monotonic
        self._wall_ms = wall_ms
        self._skipped_ns = 0

    @classmethod
    def frozen(cls, start_ms: int) -> VirtualClock:
        """A clock that stands still between jumps, at ``start_ms`` since the epoch at first."""
        return cls(lambda: 0.0, lambda: start_ms)

    @property
    def skipped_ns(self) -> int:
        """Every jump made so far, in nanoseconds."""
        return self._skipped_ns

    def advance(self, seconds: float) -> None:
        """Jump ``seconds`` ahead, rounded up to a whole nanosecond (never short of a timer)."""
        self.advance_ns(math.ceil(seconds * 1e9))

    def advance_ns(self, nanoseconds: int) -> None:
        if nanoseconds < 0:
            raise ValueError(f"time does not go back ({nanoseconds} ns)")
        self._skipped_ns += nanoseconds

    def milliseconds(self) -> int:
        return self._wall_ms() + self._skipped_ns // 1_000_000

    def monotonic(self) -> float:
        return self._monotonic() + self._skipped_ns / 1e9

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """``time.monotonic`` reads this clock inside the block (asyncio's loops read it too)."""
        saved = time.monotonic
        time.monotonic = self.monotonic
        try:
            yield
        finally:
            time.monotonic = saved
