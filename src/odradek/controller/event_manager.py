"""One queue, one daemon thread: every controller event is processed strictly in order.

Serializing everything on one thread is what lets the controller core use plain dicts with no
locks (Kafka's ControllerEventManager). The loop only knows a ``process`` callable, so it can be
tested without a controller. A plain ``queue.Queue`` and thread are used rather than asyncio
because the callers are kazoo's watcher thread and the broker's request handlers.
"""
from __future__ import annotations

import enum
import logging
import queue
import threading
from typing import Callable, Final

from odradek.controller.events import ControllerEvent, preempt

logger = logging.getLogger(__name__)

class _Stop(enum.Enum):
    STOP = enum.auto()


_STOP: Final = _Stop.STOP  # the queue's end marker


class ControllerEventManager:
    def __init__(self, process: Callable[[ControllerEvent], None],
                 name: str = "controller-event-thread",
                 on_idle: Callable[[], None] | None = None, idle_s: float = 1.0) -> None:
        """``on_idle`` runs on the event thread once the queue has stayed empty for
        ``idle_s`` after an event, and before the thread stops: work that can wait (writing
        the state-change log), kept off the moments right after an event, while the brokers
        act on its requests."""
        self._process = process
        self._on_idle = on_idle
        self._idle_s = idle_s
        self._queue: queue.Queue[ControllerEvent | _Stop] = queue.Queue()
        self._put_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, event: ControllerEvent) -> None:
        with self._put_lock:
            self._queue.put(event)

    def clear_and_put(self, event: ControllerEvent) -> None:
        """Drop everything queued (answering waiters via ``preempt``), then queue ``event``.

        Used on session expiry: queued events were meant for a controller that no longer is.
        """
        with self._put_lock:
            while True:
                try:
                    dropped = self._queue.get_nowait()
                except queue.Empty:
                    break
                if dropped is not _STOP:
                    preempt(dropped)
            self._queue.put(event)

    def close(self, timeout: float | None = None) -> None:
        """Finish the event being processed and those already queued, then stop the thread."""
        with self._put_lock:
            self._queue.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        idle_done = True
        while True:
            try:
                event = self._queue.get(timeout=None if idle_done else self._idle_s)
            except queue.Empty:
                self._idle()
                idle_done = True
                continue
            if event is _STOP:
                self._idle()
                return
            idle_done = self._on_idle is None
            try:
                self._process(event)
            except Exception:
                # One bad event must not kill the only thread that can make decisions.
                logger.exception("error processing controller event %r", event)

    def _idle(self) -> None:
        if self._on_idle is not None:
            try:
                self._on_idle()
            except Exception:
                logger.exception("error in the controller's idle work")
