"""kazoo's results, as the broker's handler makes them (zk/kazoo_handler.py), leave no reference
cycle behind a failure: with the collector off, a failed result and its exception are freed by
reference counting alone, where kazoo's own handler keeps both (a cycle through the frame of
AsyncResult.get that raised)."""
from __future__ import annotations

import weakref
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError
from kazoo.handlers.threading import SequentialThreadingHandler

from odradek.zk.kazoo_handler import Handler


def _fail(handler: Any) -> tuple[weakref.ref[Any], weakref.ref[BaseException]]:
    """(the result, the exception it raised) of a read of a missing znode, both dropped."""
    result = handler.async_result()
    result.set_exception(NoNodeError())
    caught: weakref.ref[BaseException] | None = None
    try:
        result.get()
    except NoNodeError as exc:
        caught = weakref.ref(exc)
    assert caught is not None
    with pytest.raises(NoNodeError):
        result.get()  # a later get() raises it again
    return weakref.ref(result), caught


def test_a_failed_get_leaves_no_cycle(collector_off: None) -> None:
    result, exception = _fail(Handler())
    assert (result(), exception()) == (None, None)


def test_kazoos_own_result_does(collector_off: None) -> None:
    result, exception = _fail(SequentialThreadingHandler())
    assert result() is not None and exception() is not None


def test_an_exception_stored_with_a_traceback_loses_it(collector_off: None) -> None:
    """kazoo's callbacks store what they raised, with a traceback holding their frame."""
    def callback(result: Any) -> None:
        try:
            raise NoNodeError()
        except NoNodeError as exc:
            result.set_exception(exc)

    result = Handler().async_result()
    callback(result)
    assert result.exception.__traceback__ is None
