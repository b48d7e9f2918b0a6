"""All partition logs of one broker under a data directory, sharing one fd budget.

A deleted partition's directory is first renamed to `<topic>-<partition>.<uuid>-delete` (Kafka's
LogManager.asyncDelete naming; the rename is atomic and fsynced), then removed: a crash in the
middle of removing it leaves a `-delete` directory, which no partition is loaded from and the
next start removes, instead of a half-deleted log that would be opened again as the partition.

Each partition directory keeps its topic id in `partition.metadata` (Kafka 2.8's format,
"version: 0" / "topic_id: <id>"), so a broker that comes back holding the log of a topic that
was deleted and created again under the same name can tell the logs apart.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Callable

from odradek.log.fd_cache import FdCache
from odradek.log.log import Log, LogConfig, _fsync_dir, wall_clock_ms
from odradek.metadata import TopicPartition

PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"
log = logging.getLogger(__name__)


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
        self._remove_deleted_dirs()

    def _remove_deleted_dirs(self) -> None:
        """Finish the deletions a crash interrupted (directories already renamed away)."""
        for name in os.listdir(self.data_dir):
            if name.endswith(DELETE_SUFFIX) and (self.data_dir / name).is_dir():
                log.info("removing %s, a partition deleted before the last stop", name)
                shutil.rmtree(self.data_dir / name, ignore_errors=True)

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
            if name.endswith(DELETE_SUFFIX):
                continue
            topic, sep, partition = name.rpartition("-")
            if sep and topic and partition.isdigit() and (self.data_dir / name).is_dir():
                found.append(TopicPartition(topic, int(partition)))
        return sorted(found)

    def delete(self, tp: TopicPartition) -> bool:
        """Remove tp's log and its directory, whether or not it was open: renamed to a
        `-delete` name first (module doc), then removed. False if there was none."""
        with self._lock:
            log_ = self._logs.pop(tp, None)
            directory = self._dir(tp)
            if not directory.is_dir():
                if log_ is not None:
                    log_.delete()
                return log_ is not None
            if log_ is not None:
                log_.deleted = True  # the log cleaner aborts rather than writing into it
            doomed = self.data_dir / f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
            os.rename(directory, doomed)
            _fsync_dir(self.data_dir)
            if log_ is not None:
                log_.delete()  # closes its segments; its old path is gone already
            shutil.rmtree(doomed, ignore_errors=True)
            return True

    def topic_id(self, tp: TopicPartition) -> str | None:
        """The topic id stored with tp's log (partition.metadata), None if none is."""
        try:
            text = (self._dir(tp) / PARTITION_METADATA).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id" and value.strip():
                return value.strip()
        return None

    def write_topic_id(self, tp: TopicPartition, topic_id: str) -> None:
        """Store tp's topic id with its log (Kafka's PartitionMetadataFile), by rename. Not
        fsynced: it is written for every partition a broker creates, on the event loop, and a
        file a crash lost or left empty reads as no id, which the next LeaderAndIsr writes again."""
        directory = self._dir(tp)
        tmp = directory / (PARTITION_METADATA + ".tmp")
        tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
        os.replace(tmp, directory / PARTITION_METADATA)

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
