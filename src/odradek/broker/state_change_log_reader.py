"""The tail of the controller's state-change log (controller/state_change_log.py) read in bounded
chunks of complete lines, for the broker's /state-change-log route (http_endpoints.py) and the
dashboard's local reads (ui/poller.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LogChunk:
    """Complete lines of a growing log from byte ``start``; ask again from ``next_offset``.
    ``size`` is the file's size when read (how far behind the reader is)."""
    start: int
    next_offset: int
    size: int
    lines: list[str]


def read_log_chunk(path: Path, offset: int | None, max_bytes: int) -> LogChunk:
    """At most ``max_bytes`` of ``path`` from ``offset``, as complete lines only (a line still
    being written is left for the next call). ``offset`` None: the last ``max_bytes`` (less the
    first, cut, line); an offset past the end: the log was replaced, read it from the start. A
    single line longer than ``max_bytes`` is skipped rather than blocking the reader. Shared by
    the broker's HTTP route and the dashboard's local reads, so both follow a log the same way."""
    try:
        size = path.stat().st_size
    except OSError:
        return LogChunk(0, 0, 0, [])
    cut_first = False
    if offset is None or offset < 0:
        start = max(0, size - max_bytes)
        cut_first = start > 0
    else:
        start = 0 if offset > size else offset
    if start >= size:
        return LogChunk(start, start, size, [])
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read(min(size - start, max_bytes))
    end = data.rfind(b"\n") + 1
    if end == 0:  # no complete line: a line still being written, or one longer than max_bytes
        return LogChunk(start, start + len(data) if len(data) >= max_bytes else start, size, [])
    lines = data[:end].split(b"\n")[:-1]
    if cut_first and lines:
        lines.pop(0)
    return LogChunk(start, start + end, size, [line.decode(errors="replace") for line in lines if line])
