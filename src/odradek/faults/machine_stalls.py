"""Stalls of the whole machine during a fault run, told apart from the system's own.

A run shares its host with everything else on it; a virtual machine can be frozen by its host
(a live migration, a paused guest). A transactional run on 2026-11-28 saw every process stop
for 55 s at once: the brokers, the three ZooKeeper servers and the run itself logged nothing
from 11:17:54 to 11:18:49, and when the machine went on every timer fired together (ZooKeeper
sessions expired, transactions passed their 60 s timeout and their producers were fenced).
Those are no broker's doing, and the report must say so next to the anomalies they cause.

``MachineStallWatch`` is a thread of the run's own process that sleeps 0.5 s at a time and
records every sleep that overran by more than ``threshold_s``: the process, and so most likely
the machine, did not run for that long. It cannot tell a frozen machine from a starved process
by itself; the run's logs (is ZooKeeper silent too?) can.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

TICK_S = 0.5
THRESHOLD_S = 5.0


class MachineStallWatch:
    """Records stalls longer than ``threshold_s`` while started: (wall clock "HH:MM:SS" at the
    stall's start, seconds)."""

    def __init__(self, threshold_s: float = THRESHOLD_S, tick_s: float = TICK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold_s = threshold_s
        self.tick_s = tick_s
        self._clock = clock
        self.stalls: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="machine-stall-watch", daemon=True)

    def start(self) -> MachineStallWatch:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[str, float]]:
        self._stop.set()
        self._thread.join(5)
        return list(self.stalls)

    def _watch(self) -> None:
        while True:
            before_wall, before = time.time(), self._clock()
            if self._stop.wait(self.tick_s):
                return
            overrun = self._clock() - before - self.tick_s
            if overrun > self.threshold_s:
                self.stalls.append((time.strftime("%H:%M:%S", time.localtime(before_wall)), round(overrun, 1)))


def describe(stalls: list[tuple[str, float]]) -> list[str]:
    """The report's lines for ``stalls``."""
    return [f"the run's process did not run for {seconds:g} s from {at}" for at, seconds in stalls]
