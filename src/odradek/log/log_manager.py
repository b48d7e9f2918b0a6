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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from odradek.common.metadata import TopicPartition
from odradek.log.checkpoint import fsync_dir
from odradek.log.fd_cache import FdCache
from odradek.log.log import Log, LogConfig, wall_clock_ms

PARTITION_METADATA = "partition.metadata"
DELETE_SUFFIX = "-delete"
log = logging.getLogger(__name__)


def _remove_dirs(directories: list[Path]) -> None:
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


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
        # one thread removes deleted partitions' directories (delete_many), in order
        self._remover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="log-delete")
        self._removals: list[Future[None]] = []

    def finish_interrupted_deletions(self) -> None:
        """Finish the deletions a crash interrupted (directories already renamed away). Not
        done when the manager is made: the broker first checks that the directory is its own
        (broker_metadata_checkpoint.py), and a broker refused there must have deleted nothing."""
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
        """``delete_many`` of one partition: True if it had a log; an OSError is raised."""
        result = self.delete_many([tp])[tp]
        if isinstance(result, OSError):
            raise result
        return result

    def delete_many(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, bool | OSError]:
        """Remove the partitions' logs and directories, whether or not they were open (Kafka's
        LogManager.asyncDelete, for a whole StopReplica): each directory is renamed to a
        `-delete` name (module doc), then one fsync of the data directory makes every rename
        durable, and the renamed directories are removed on a background thread, so a caller
        on the broker's event loop waits for neither thousands of fsyncs nor the file removals.

        Per partition: True if it had a log, False if none, the OSError if its rename (or the
        fsync that makes it durable) failed."""
        results: dict[TopicPartition, bool | OSError] = {}
        renamed: dict[TopicPartition, tuple[Path, Log | None]] = {}
        with self._lock:
            for tp in tps:
                log_ = self._logs.pop(tp, None)
                directory = self._dir(tp)
                if not directory.is_dir():
                    if log_ is not None:
                        log_.delete()
                    results[tp] = log_ is not None
                    continue
                if log_ is not None:
                    log_.deleted = True  # the log cleaner aborts rather than writing into it
                doomed = self.data_dir / f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
                try:
                    os.rename(directory, doomed)
                except OSError as exc:
                    results[tp] = exc
                    if log_ is not None:
                        self._logs[tp] = log_  # still there: a retry finds it
                        log_.deleted = False
                    continue
                renamed[tp] = (doomed, log_)
            if not renamed:
                return results
            try:
                fsync_dir(self.data_dir)
            except OSError as exc:
                results.update((tp, exc) for tp in renamed)
            else:
                results.update((tp, True) for tp in renamed)
            for _, log_ in renamed.values():
                if log_ is not None:
                    log_.delete()  # closes its segments; its old path is gone already
            doomed_dirs = [doomed for doomed, _ in renamed.values()]
            self._removals.append(self._remover.submit(_remove_dirs, doomed_dirs))
        return results

    def finish_removals(self) -> None:
        """Wait until every renamed-away directory is removed (close() does too)."""
        with self._lock:
            pending, self._removals = self._removals, []
        for removal in pending:
            removal.result()

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
        """Flush and close every open log and finish removing deleted ones; the manager must
        not be used afterwards."""
        with self._lock:
            logs = list(self._logs.values())
            self._logs.clear()
        for log in logs:
            log.close()
        self._fds.close_all()
        self.finish_removals()
        self._remover.shutdown()

    def open_file_count(self) -> int:
        """Segment descriptors currently held (for metrics and the fd-budget test)."""
        return len(self._fds)
