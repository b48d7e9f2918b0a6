"""All partition logs of one broker under a data directory, sharing one fd budget."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from odradek.log.fd_cache import FdCache
from odradek.log.log import Log, LogConfig, wall_clock_ms
from odradek.metadata import TopicPartition


class LogManager:
    """Maps TopicPartition -> Log in `<data_dir>/<topic>-<partition>`.

    A Log is opened (its directory scanned and recovered) on first access, and segment files
    are opened only while used: an LRU shared by all logs closes idle descriptors beyond
    max_open_files, so a broker can host far more partitions than it may hold open files.
    """

    def __init__(self, data_dir: Path, default_config: LogConfig, max_open_files: int = 1000,
                 *, now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.default_config = default_config
        self._fds = FdCache(max_open_files)
        self._now_ms = now_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._lock = threading.Lock()

    def _dir(self, tp: TopicPartition) -> Path:
        return self.data_dir / f"{tp.topic}-{tp.partition}"

    def _open(self, tp: TopicPartition, config: LogConfig) -> Log:
        log = Log.open(self._dir(tp), config, fds=self._fds, now_ms=self._now_ms)
        self._logs[tp] = log
        return log

    def get_or_create(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        """The log of tp, opened or created; a given config replaces the log's current one."""
        with self._lock:
            log = self._logs.get(tp)
            if log is None:
                return self._open(tp, config or self.default_config)
            if config is not None:
                log.config = config
            return log

    def get(self, tp: TopicPartition) -> Log | None:
        """The log of tp if it exists in memory or on disk (opened with the default config)."""
        with self._lock:
            log = self._logs.get(tp)
            if log is None and self._dir(tp).is_dir():
                log = self._open(tp, self.default_config)
            return log

    def logs(self) -> list[tuple[TopicPartition, Log]]:
        """The logs open now (the log cleaner's candidates)."""
        with self._lock:
            return list(self._logs.items())

    def partitions(self) -> list[TopicPartition]:
        """Every partition with a directory under data_dir, without opening any log."""
        found = []
        for name in os.listdir(self.data_dir):
            topic, sep, partition = name.rpartition("-")
            if sep and topic and partition.isdigit() and (self.data_dir / name).is_dir():
                found.append(TopicPartition(topic, int(partition)))
        return sorted(found)

    def delete(self, tp: TopicPartition) -> None:
        """Remove tp's log and its directory, whether or not it was open."""
        with self._lock:
            log = self._logs.pop(tp, None)
            if log is None and self._dir(tp).is_dir():
                log = Log.open(self._dir(tp), self.default_config, fds=self._fds,
                               now_ms=self._now_ms)
            if log is not None:
                log.delete()

    def flush_all(self) -> None:
        with self._lock:
            logs = list(self._logs.values())
        for log in logs:
            log.flush()

    def close(self) -> None:
        """Flush and close every open log; the manager must not be used afterwards."""
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
        for log in logs:
            log.close()
        self._fds.close_all()

    def open_file_count(self) -> int:
        """Segment descriptors currently held (for metrics and the fd-budget test)."""
        return len(self._fds)
