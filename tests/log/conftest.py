"""Shared helpers for the log tests."""
from pathlib import Path

import pytest

from odradek.log.log import Log, LogConfig
from odradek.protocol.records import build_batch, decode_records, iter_batches


def batch(n: int = 1, ts: int = 1000, size: int = 10, base_offset: int = 0) -> bytes:
    """n records of `size` bytes each, all stamped ts."""
    return build_batch([(None, b"v" * size)] * n, base_offset=base_offset, timestamp_ms=ts)


def offsets_in(data) -> list[int]:
    """Every record offset in a buffer of whole batches."""
    out = []
    for h in iter_batches(data):
        out += [r[0] for r in decode_records(memoryview(data)[h.position:h.position + h.size])]
    return out


def read_all(log: Log, start: int | None = None) -> list[int]:
    """All offsets from start to the log end, read batch run by batch run."""
    offset = log.log_start_offset if start is None else start
    found = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"no data at {offset}"
        found += [o for o in offsets_in(data) if o >= offset]
        offset = found[-1] + 1
    return found


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
