"""MachineStallWatch: a sleep that overran is recorded with its length; ordinary ticks are not."""
from __future__ import annotations

import time

from odradek.faults.machine_stalls import MachineStallWatch, describe


def test_an_overrun_sleep_is_a_stall_and_ordinary_ticks_are_not() -> None:
    frozen = [0.0]   # seconds the machine was frozen, as the clock shows them after it goes on

    def clock() -> float:
        return time.monotonic() + frozen[0]
    watch = MachineStallWatch(threshold_s=0.2, tick_s=0.05, clock=clock).start()
    time.sleep(0.3)   # ticks on time: nothing
    assert watch.stalls == []
    frozen[0] = 0.5
    deadline = time.monotonic() + 2
    while not watch.stalls and time.monotonic() < deadline:
        time.sleep(0.01)
    stalls = watch.stop()
    assert len(stalls) == 1 and 0.4 < stalls[0][1] < 1.0
    assert describe([("11:17:54", 55.1)]) == ["the run's process did not run for 55.1 s from 11:17:54"]
