"""Virtual time for running the broker's handlers in-process at full speed.

A Fetch may long-poll for as long as its max_wait says, a Produce with acks=all waits up to its
timeout, CreateTopics waits for the new topic's leaders: mutated frames ask for waits of up to
2^31 ms. To tell "waits as asked" from "hangs" without spending that time, the event loop runs
on a clock that jumps to the next timer whenever nothing is ready, and ``time.monotonic`` (which
the handlers read for their own deadlines) reads the same clock while it is installed (the
VirtualClock of odradek.common.clock). Work handed to threads
(``asyncio.to_thread``: the stand-in ZooKeeper calls) runs inline, so nothing happens behind
the clock's back and every run is deterministic.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
from typing import Any, Callable

from odradek.common.clock import VirtualClock

__all__ = ["new_loop"]


class _JumpingSelector(selectors.DefaultSelector):
    """Reports ready file descriptors (the loop's own wake-up pipe) at once; when none are
    ready, jumps the clock to the loop's next timer instead of sleeping until it."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("event loop idle with no timer: nothing could ever wake it")
        self._clock.advance(timeout)
        return []


class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs what would go to a worker thread at once, in the caller's thread (a
    ThreadPoolExecutor only because asyncio accepts no other default executor; it starts none)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, as a thread would
            future.set_exception(exc)
        return future


def new_loop(clock: VirtualClock) -> asyncio.AbstractEventLoop:
    """An event loop on ``clock`` whose executor runs inline."""
    loop = asyncio.SelectorEventLoop(_JumpingSelector(clock))
    loop.set_default_executor(_InlineExecutor())
    return loop
