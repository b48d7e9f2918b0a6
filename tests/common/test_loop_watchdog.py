import asyncio
import logging
import time

import pytest

from odradek.common.loop_watchdog import LoopWatchdog


def _stuck_in_a_blocking_call() -> None:
    time.sleep(1.2)


def test_a_blocked_loop_is_reported_with_its_stack_and_its_length(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> LoopWatchdog:
        watchdog = LoopWatchdog(asyncio.get_running_loop(), stall_s=0.3)
        watchdog.start()
        await asyncio.sleep(0.3)
        _stuck_in_a_blocking_call()
        await asyncio.sleep(0.8)  # the watchdog sees the loop beat again
        watchdog.stop()
        return watchdog

    with caplog.at_level(logging.WARNING, logger="odradek.loop_watchdog"):
        watchdog = asyncio.run(main())
    stuck = [r.getMessage() for r in caplog.records if "has run no callback" in r.getMessage()]
    assert len(stuck) == 1 and "_stuck_in_a_blocking_call" in stuck[0]
    assert watchdog.stalls == 1 and 0.8 < watchdog.longest_stall_s < 1.8


def test_a_loop_that_keeps_running_is_never_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> LoopWatchdog:
        watchdog = LoopWatchdog(asyncio.get_running_loop(), stall_s=0.3)
        watchdog.start()
        for _ in range(10):
            await asyncio.sleep(0.1)
            time.sleep(0.05)  # short blocking calls are no stall
        watchdog.stop()
        return watchdog

    with caplog.at_level(logging.WARNING, logger="odradek.loop_watchdog"):
        watchdog = asyncio.run(main())
    assert watchdog.stalls == 0 and not caplog.records
