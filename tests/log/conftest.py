"""Fixtures for the log tests; plain helpers live in log_helpers.py."""
from pathlib import Path

import pytest

from odradek.log.log import Log, LogConfig


class Clock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_log(tmp_path: Path, clock: Clock):
    """Open (or reopen) the log in tmp_path/log; every log opened is closed after the test."""
    opened = []

    def _open(config: LogConfig = LogConfig(), **kw) -> Log:
        log = Log.open(tmp_path / "log", config, now_ms=clock, **kw)
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log._fds.close_all()
