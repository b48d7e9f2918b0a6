"""Waiting on a real cluster: poll a condition until it holds, failing the test with what was
awaited once a deadline passes."""
from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``predicate`` every 0.1 s until it is true; the seconds that took. Fails the test
    naming ``what`` after ``timeout_s``."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout_s, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.1)
    return time.monotonic() - start
