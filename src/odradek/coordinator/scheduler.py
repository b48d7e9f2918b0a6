"""Timers and background work of a coordinator, handed in from outside, as Kafka's
GroupCoordinator gets its Time, its scheduler and its purgatories' timers.

The broker gives each coordinator an AsyncioScheduler on its event loop. Tests give it a
VirtualScheduler on a frozen VirtualClock and decide when time passes (``advance``): session
and rebalance timeouts fire when the test says, not after real sleeps (Kafka's MockTime and
MockTimer in GroupCoordinatorTest).

Work a coordinator starts without awaiting it (a write whose outcome goes to waiting members,
a partition's load) is a task the scheduler holds until it ends: its failure is logged (a task
nobody awaits would lose its exception) and ``shutdown`` cancels what still runs.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from odradek.common.clock import VirtualClock

log = logging.getLogger(__name__)

T = TypeVar("T")


class Timer(Protocol):
    """A scheduled callback that has not run yet (asyncio's TimerHandle has this shape)."""

    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` once ``delay_ms`` have passed, unless cancelled first."""
        ...

    def spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run ``work`` as a task held until it ends; its failure is logged under ``name``."""
        ...

    def shutdown(self) -> None:
        """Cancel every task still running."""
        ...


class BackgroundTasks:
    """The tasks a scheduler started and that have not ended."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("%s failed", task.get_name(), exc_info=error)

    def __len__(self) -> int:
        return len(self._tasks)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def join(self) -> None:
        """Until every task, also those started meanwhile, has ended."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))


class AsyncioScheduler:
    """Timers on the running event loop: the broker's."""

    def __init__(self) -> None:
        self._tasks = BackgroundTasks()

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback)

    def spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        return self._tasks.spawn(work, name)

    def shutdown(self) -> None:
        self._tasks.cancel_all()


class _VirtualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualScheduler:
    """Timers that fire only when the test moves ``clock`` on with ``advance`` (Kafka's MockTimer):
    each at its own due time, in due order, so a timer's callback sees the clock it was due at.
    Tasks still run on the event loop; ``run_tasks`` waits for them."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self._timers: list[tuple[int, int, _VirtualTimer]] = []  # (due, in ns of jumps; order; timer)
        self._order = itertools.count()
        self._tasks = BackgroundTasks()

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> Timer:
        timer = _VirtualTimer(callback)
        due = self.clock.skipped_ns + round(delay_ms * 1_000_000)
        heapq.heappush(self._timers, (due, next(self._order), timer))
        return timer

    def spawn(self, work: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        return self._tasks.spawn(work, name)

    def shutdown(self) -> None:
        self._tasks.cancel_all()

    def advance(self, ms: float) -> None:
        """Move the clock ``ms`` on, running every timer due by then (also those the callbacks
        schedule within that time)."""
        target = self.clock.skipped_ns + round(ms * 1_000_000)
        while self._timers and self._timers[0][0] <= target:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self.clock.advance_ns(max(due - self.clock.skipped_ns, 0))
            timer.callback()
        self.clock.advance_ns(target - self.clock.skipped_ns)

    def pending_timers(self) -> int:
        return sum(not timer.cancelled for _, _, timer in self._timers)

    async def run_tasks(self) -> None:
        """Until every task started here has ended (a task waiting on a timer waits for an
        ``advance``: advance first)."""
        await self._tasks.join()


async def within(scheduler: Scheduler, future: asyncio.Future[T], timeout_ms: float) -> T:
    """``future``'s result, or TimeoutError (``future`` cancelled) if it is not done within
    ``timeout_ms`` on the scheduler's timers (asyncio.wait_for, on either kind of scheduler)."""
    if not future.done():
        expired: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def expire() -> None:
            if not expired.done():
                expired.set_result(None)

        timer = scheduler.call_later(timeout_ms, expire)
        try:
            await asyncio.wait((future, expired), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            future.cancel()
            raise
        finally:
            timer.cancel()
        if not future.done():
            future.cancel()
            raise TimeoutError
    return future.result()
