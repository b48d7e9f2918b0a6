"""The coordinators' timers and background tasks: virtual timers fire when the test advances the
clock, in due order; no task is forgotten (held, its failure logged, cancelled on shutdown)."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from odradek.common.clock import VirtualClock
from odradek.coordinator.scheduler import AsyncioScheduler, VirtualScheduler, within

START_MS = 1_000_000


def _scheduler() -> VirtualScheduler:
    return VirtualScheduler(VirtualClock.frozen(START_MS))


def test_a_virtual_timer_fires_when_the_clock_reaches_it() -> None:
    scheduler, fired = _scheduler(), []
    scheduler.call_later(100, lambda: fired.append(scheduler.clock.milliseconds()))
    scheduler.advance(99)
    assert fired == []
    scheduler.advance(1)
    assert fired == [START_MS + 100]


def test_virtual_timers_fire_in_due_order_each_at_its_own_time() -> None:
    scheduler, fired = _scheduler(), []
    scheduler.call_later(30, lambda: fired.append(("b", scheduler.clock.milliseconds())))
    scheduler.call_later(10, lambda: fired.append(("a", scheduler.clock.milliseconds())))
    scheduler.advance(50)
    assert fired == [("a", START_MS + 10), ("b", START_MS + 30)]
    assert scheduler.clock.milliseconds() == START_MS + 50


def test_a_timer_scheduled_by_a_timer_fires_within_the_same_advance_if_due() -> None:
    scheduler, fired = _scheduler(), []
    scheduler.call_later(10, lambda: scheduler.call_later(10, lambda: fired.append(scheduler.clock.milliseconds())))
    scheduler.advance(20)
    assert fired == [START_MS + 20]


def test_a_cancelled_timer_never_fires() -> None:
    scheduler, fired = _scheduler(), []
    scheduler.call_later(10, lambda: fired.append(1)).cancel()
    scheduler.advance(100)
    assert fired == [] and scheduler.pending_timers() == 0


def test_within_times_out_on_the_schedulers_clock() -> None:
    async def main() -> None:
        scheduler = _scheduler()
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(within(scheduler, never, 100))
        await asyncio.sleep(0)
        scheduler.advance(100)
        with pytest.raises(TimeoutError):
            await waiting
        assert never.cancelled()
    asyncio.run(main())


def test_within_gives_the_result_of_a_future_done_in_time() -> None:
    async def main() -> None:
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(7)
        assert await within(_scheduler(), done, 100) == 7
    asyncio.run(main())


def test_a_failed_background_task_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def fail() -> None:
        raise RuntimeError("disk gone")

    async def main() -> None:
        scheduler = _scheduler()
        scheduler.spawn(fail(), "storing group g")
        await scheduler.run_tasks()

    with caplog.at_level(logging.ERROR, logger="odradek.coordinator.scheduler"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records] == ["storing group g failed"]
    assert "disk gone" in caplog.text


@pytest.mark.parametrize("make", [AsyncioScheduler, _scheduler], ids=["asyncio", "virtual"])
def test_shutdown_cancels_the_tasks_still_running(make: Callable[[], AsyncioScheduler | VirtualScheduler]) -> None:
    async def main() -> None:
        scheduler = make()
        task = scheduler.spawn(asyncio.sleep(3600), "waiting")
        await asyncio.sleep(0)
        scheduler.shutdown()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(main())
