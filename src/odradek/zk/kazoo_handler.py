"""kazoo's threading handler, without the reference cycle its results make of every failure.

kazoo's AsyncResult.get raises the exception it stores, so the exception's traceback holds
get's frame, which holds the result, which holds the exception. Every failed synchronous call
makes such a cycle (a read of a missing znode raises NoNodeError: a controller failover makes
dozens), and the traceback takes along every frame up to where the error was caught, with its
locals: the controller's whole failover working set. A broker never collects what it froze
(common/gc_policy.py), and what a controller event leaves is frozen at its end, so those cycles
stayed for good (tests/integration/test_gc_cycles.py found 30 NoNodeErrors' worth after two
failovers). Here the result keeps a copy of the exception without a traceback, and an exception
raised in one of kazoo's callbacks is stored without the traceback that holds the callback's
frame (and so the result).
"""
from __future__ import annotations

import copy
from typing import Any

from kazoo.handlers import threading as kazoo_threading


class AsyncResult(kazoo_threading.AsyncResult):
    def set_exception(self, exception: BaseException) -> None:
        super().set_exception(exception.with_traceback(None))

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        try:
            return super().get(block, timeout)
        except BaseException as exc:
            # what a later get() raises: not the one whose traceback holds our frames (and no
            # local of this frame may refer to it: the traceback holds this frame too)
            with self._condition:
                if self._exception is exc:  # type: ignore[has-type]  # kazoo leaves it unannotated
                    self._exception = copy.copy(exc)
            raise


class Handler(kazoo_threading.SequentialThreadingHandler):
    """Pass as KazooClient(handler=Handler())."""

    def async_result(self) -> AsyncResult:
        return AsyncResult(self)
