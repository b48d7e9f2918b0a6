"""Tells when the broker's event loop stops running callbacks, and where it is stuck.

Every client request, every periodic task (the ISR shrink among them) and every reaction to a
ZooKeeper session expiry runs on one asyncio loop, so a call that blocks it (a synchronous
ZooKeeper read waiting on a server that accepted the request and never answered) silences the
whole broker while its fetcher and controller threads go on logging as if nothing were wrong.
A fault run showed one such stall of 40 s that only the timestamps of delayed log lines
revealed. This watchdog thread logs the loop thread's stack once the loop has not run a
callback for ``stall_s``, and the stall's length once it runs again.

A stopped process (SIGSTOP) stops this thread too; a wake-up that itself came late is taken
for such a pause, not for a stall of the loop.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("odradek.loop_watchdog")

BEAT_S = 0.25
CHECK_EVERY_S = 0.5
STALL_S = 2.0


class LoopWatchdog:
    def __init__(self, loop: asyncio.AbstractEventLoop, stall_s: float = STALL_S) -> None:
        self._loop = loop
        self._stall_s = stall_s
        self._last_beat = time.monotonic()
        self._loop_thread = threading.get_ident()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._handle: asyncio.TimerHandle | None = None
        #: stalls seen and the longest one, in seconds
        self.stalls = 0
        self.longest_stall_s = 0.0

    def start(self) -> None:
        """Call on the loop's own thread."""
        self._loop_thread = threading.get_ident()
        self._beat()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()

    def _beat(self) -> None:
        self._last_beat = time.monotonic()
        self._handle = self._loop.call_later(BEAT_S, self._beat)

    def _watch(self) -> None:
        stalled_since: float | None = None
        woke = time.monotonic()
        while not self._stopped.wait(CHECK_EVERY_S):
            now = time.monotonic()
            paused = now - woke > CHECK_EVERY_S + self._stall_s  # the whole process was stopped
            woke = now
            silent = now - self._last_beat
            if paused:
                stalled_since = None
                self._last_beat = now  # judge the loop from here on
            elif stalled_since is None and silent > self._stall_s + BEAT_S:
                stalled_since = self._last_beat
                self._report_stuck(silent)
            elif stalled_since is not None and self._last_beat > stalled_since:
                length = self._last_beat - stalled_since
                self.stalls += 1
                self.longest_stall_s = max(self.longest_stall_s, length)
                log.warning("the event loop ran again after a stall of %.1f s", length)
                stalled_since = None

    def _report_stuck(self, silent_s: float) -> None:
        frame = sys._current_frames().get(self._loop_thread)
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)\n"
        log.warning("the event loop has run no callback for %.1f s; it is at:\n%s", silent_s, stack.rstrip())
