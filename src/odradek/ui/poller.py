"""The dashboard's one reader of the cluster: a poller per server, whose sections every browser
connection shares (a ZooKeeper read per second for the server, not per open page).

Each section has its own loop and pace: ZooKeeper's znodes (the grid, brokers, controller) every
second; the state-change logs' new lines every second; the Kafka requests (consumer groups with
lag, reassignments, deletions) every few seconds; the brokers' Prometheus metrics every two.
Blocking clients (kazoo, confluent-kafka's AdminClient, the admin tools' socket requests, file
reads) run through asyncio.to_thread so the aiohttp loop never waits on the cluster; the metrics
are scraped with aiohttp's own client. A section that cannot be read keeps its last value and
reports the error beside it, so a dead broker or a ZooKeeper outage shows on the page instead of
stopping it.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek import reassign_client
from odradek.admin import AdminError
from odradek.cluster import LocalCluster, connect_zk
from odradek.consumer_groups import GroupAdmin
from odradek.metadata import TopicPartition
from odradek.ui import model
from odradek.zk import paths

log = logging.getLogger("odradek.ui")

#: the newest state-change records the timeline keeps (per broker and merged)
TIMELINE_RECORDS = 300
#: how much of a state-change log is read when the dashboard starts
TAIL_START_BYTES = 256 * 1024
#: metric points kept per broker (at the 2 s pace: five minutes)
METRIC_POINTS = 150
#: consumer groups described per round (each costs a DescribeGroups, OffsetFetch and ListOffsets)
MAX_GROUPS = 50
#: a browser connection this many sections behind is dropped (it reconnects and starts afresh)
MAX_BACKLOG = 64


@dataclass(frozen=True)
class ClusterSource:
    """Where the cluster is read from. ``bootstrap`` None: the live brokers ZooKeeper lists;
    ``expected_brokers`` are shown dead when not registered (cluster.json's brokers)."""
    zookeeper: str
    bootstrap: str | None = None
    expected_brokers: tuple[int, ...] = ()
    state_change_logs: Mapping[int, Path] = field(default_factory=dict)
    metrics_urls: Mapping[int, str] = field(default_factory=dict)


def source_from_data_dir(data_dir: Path, bootstrap: str | None = None) -> ClusterSource:
    """Everything `odradek up` recorded in cluster.json, and each broker's state-change log.
    The Kafka requests go to ``bootstrap``, else to the brokers registered now (a dead broker
    first in the recorded list would cost each request a connection timeout)."""
    cluster = LocalCluster.load(data_dir)
    return ClusterSource(
        cluster.zookeeper_connect, bootstrap, tuple(cluster.broker_ids),
        {b: cluster.broker_dir(b) / "data" / "state-change.log" for b in cluster.broker_ids},
        {b: url for b in cluster.broker_ids if (url := cluster.metrics_url(b))})


# -- blocking reads (each runs on a worker thread) ---------------------------------------------------


def read_znodes(zk: KazooClient, timeout: float) -> model.ZkView:
    """Every znode the grid needs, pipelined: one round trip per level, not per partition."""
    def children(path: str) -> list[str]:
        try:
            return zk.get_children(path)
        except NoNodeError:
            return []

    def results(pending: dict[Any, Any]) -> dict[Any, bytes | None]:
        out = {}
        for key, result in pending.items():
            try:
                out[key] = result.get(timeout=timeout)[0]
            except NoNodeError:
                out[key] = None
        return out

    brokers = {int(b): zk.get_async(paths.broker_path(int(b))) for b in children(paths.BROKER_IDS) if b.isdigit()}
    topics = {t: zk.get_async(paths.topic_path(t)) for t in children(paths.BROKER_TOPICS)}
    singles = {paths.CONTROLLER: zk.get_async(paths.CONTROLLER),
               paths.CONTROLLER_EPOCH: zk.get_async(paths.CONTROLLER_EPOCH)}
    deleting = tuple(sorted(children(paths.DELETE_TOPICS)))
    topic_data = {t: d for t, d in results(topics).items() if d is not None}
    states = {}
    for topic, data in topic_data.items():
        try:
            partitions = paths.decode_topic_assignment(topic, data).partitions
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        states.update({(topic, p): zk.get_async(paths.partition_state_path(TopicPartition(topic, p)))
                       for p in partitions})
    single = results(singles)
    return model.ZkView(single[paths.CONTROLLER], single[paths.CONTROLLER_EPOCH],
                        {b: d for b, d in results(brokers).items() if d is not None}, topic_data,
                        results(states), deleting)


class LogTail:
    """The new complete lines of a growing file since the last call; starts near its end, and
    again from the start when the file shrank (a new log)."""

    def __init__(self, path: Path, start_bytes: int = TAIL_START_BYTES) -> None:
        self.path = path
        self._start_bytes = start_bytes
        self._offset: int | None = None
        self._rest = b""

    def read_new(self) -> list[str]:
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        skip_first = False
        if self._offset is None:
            self._offset = max(0, size - self._start_bytes)
            skip_first = self._offset > 0  # the first line read is cut
        elif size < self._offset:
            self._offset, self._rest = 0, b""
        if size == self._offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(size - self._offset)
        self._offset += len(data)
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        if skip_first and lines:
            lines.pop(0)
        return [line.decode(errors="replace") for line in lines if line]


def read_groups(bootstrap: str, timeout: float) -> list[dict[str, Any]]:
    """Each consumer group with its members and per-partition lag, as `odradek groups describe`
    computes it (ListGroups, DescribeGroups, OffsetFetch, ListOffsets)."""
    admin = GroupAdmin(bootstrap, timeout)
    out = []
    for group in admin.list_groups()[:MAX_GROUPS]:
        try:
            described = admin.describe(group["group"])
        except AdminError as exc:
            out.append({"group": group["group"], "state": group["state"], "members": 0, "lag": None,
                        "offsets": [], "error": str(exc)})
            continue
        lags = [o["lag"] for o in described["offsets"] if o["lag"] is not None]
        out.append({"group": described["group"], "state": described["state"],
                    "members": len(described["members"]), "coordinator": described["coordinator"],
                    "lag": sum(lags) if lags else None, "offsets": described["offsets"]})
    return out


def read_reassignments(bootstrap: str, timeout: float) -> list[dict[str, Any]]:
    """The reassignments in progress, with the bytes copied as `odradek reassign --verify` counts
    them (DescribeLogDirs of the leader and of the replicas being added)."""
    ongoing = reassign_client.list_reassignments(bootstrap, None, timeout)
    if not ongoing:
        return []
    rows = reassign_client.verify_once(bootstrap, model.reassignment_plan(ongoing), timeout)
    for row in rows:
        tp = (row["topic"], row["partition"])
        row["adding"] = list(ongoing[tp].adding) if tp in ongoing else []
        row["removing"] = list(ongoing[tp].removing) if tp in ongoing else []
        row["progress"] = model.progress(row["bytes_copied"], row["bytes_to_copy"])
    return rows


def read_deleting_logs(state: dict[str, Any], timeout: float) -> dict[tuple[tuple[str, int], int], int]:
    """DescribeLogDirs to each live broker for its replicas of the topics being deleted."""
    addresses = {b["id"]: f"{b['host']}:{b['port']}" for b in state["brokers"] if b["live"] and b["host"]}
    wanted: dict[int, set[tuple[str, int]]] = {}
    for topic in state["topics"]:
        if topic["deleting"]:
            for p in topic["partitions"]:
                for r in p["replicas"]:
                    wanted.setdefault(r, set()).add((topic["name"], p["partition"]))
    if not wanted:
        return {}
    view = reassign_client.ClusterView(addresses, {}, state["controller"] or -1, {}, {})
    return reassign_client.log_sizes(view, wanted, timeout)


# -- the poller ---------------------------------------------------------------------------------------


class Poller:
    """Reads the cluster on its own loops and hands each changed section, as JSON, to every
    subscriber (one asyncio.Queue per browser connection)."""

    SECTIONS = ("cluster", "timeline", "groups", "reassignments", "deletions", "metrics", "errors")

    def __init__(self, source: ClusterSource, zk_interval: float = 1.0, kafka_interval: float = 3.0,
                 metrics_interval: float = 2.0, timeout: float = 5.0) -> None:
        self.source = source
        self.zk_interval, self.kafka_interval, self.metrics_interval = zk_interval, kafka_interval, metrics_interval
        self.timeout = timeout
        self.sections: dict[str, str] = {}  # name -> JSON, the last value published
        self._errors: dict[str, str] = {}
        self._cluster: dict[str, Any] | None = None
        self._subscribers: set[asyncio.Queue[tuple[str, str]]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._zk: KazooClient | None = None
        self._history: dict[int, deque[dict[str, float | None]]] = {}
        self._last_sample: dict[int, tuple[float, dict[str, float]]] = {}
        self._tails = {b: LogTail(p) for b, p in source.state_change_logs.items()}
        self._records: dict[int, deque[dict[str, Any]]] = {b: deque(maxlen=TIMELINE_RECORDS) for b in self._tails}
        for name, empty in (("timeline", []), ("groups", []), ("reassignments", []), ("deletions", []),
                            ("metrics", {"brokers": {}, "urls": dict(source.metrics_urls)}), ("errors", {})):
            self._set(name, empty)

    async def start(self) -> None:
        """Connects to ZooKeeper (ClusterError when it cannot be reached: the command fails at
        once instead of serving an empty page), then starts the loops, each reading at once."""
        self._zk = await asyncio.to_thread(connect_zk, self.source.zookeeper, self.timeout)
        self._tasks = [asyncio.create_task(self._every(self.zk_interval, self._read_zk)),
                       asyncio.create_task(self._every(self.zk_interval, self._read_logs)),
                       asyncio.create_task(self._every(self.kafka_interval, self._read_kafka)),
                       asyncio.create_task(self._every(self.metrics_interval, self._scrape))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._zk is not None:
            zk, self._zk = self._zk, None
            await asyncio.to_thread(lambda: (zk.stop(), zk.close()))

    def subscribe(self) -> asyncio.Queue[tuple[str, str]]:
        """A queue that gets every section now, then each section whenever it changes."""
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        for name, data in self.sections.items():
            queue.put_nowait((name, data))
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[tuple[str, str]]) -> None:
        self._subscribers.discard(queue)

    # -- publishing ----------------------------------------------------------------------------------

    def _set(self, name: str, value: Any) -> None:
        data = json.dumps(value, separators=(",", ":"), default=str)
        if self.sections.get(name) == data:
            return
        self.sections[name] = data
        for queue in list(self._subscribers):
            if queue.qsize() >= MAX_BACKLOG:
                self._subscribers.discard(queue)  # its handler sees the sentinel and ends the stream
                queue.put_nowait(("", ""))
            else:
                queue.put_nowait((name, data))

    def _report(self, section: str, error: str | None) -> None:
        if error is None:
            self._errors.pop(section, None)
        else:
            self._errors[section] = error
        self._set("errors", dict(self._errors))

    async def _every(self, interval: float, read: Any) -> None:
        while True:
            await read()
            await asyncio.sleep(interval)

    async def _guarded(self, section: str, coro: Any) -> None:
        """Runs one read; its failure becomes the section's error line, never the loop's end."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to read is shown, not raised
            log.debug("reading %s failed", section, exc_info=True)
            self._report(section, f"{type(exc).__name__}: {exc}".rstrip(": ").splitlines()[0])
        else:
            self._report(section, None)

    # -- the reads -----------------------------------------------------------------------------------

    async def _read_zk(self) -> None:
        async def read() -> None:
            view = await asyncio.to_thread(read_znodes, self._zk, self.timeout)
            self._cluster = model.cluster_state(view, self.source.expected_brokers)
            self._set("cluster", self._cluster)
        await self._guarded("zookeeper", read())

    async def _read_logs(self) -> None:
        async def read() -> None:
            new = await asyncio.to_thread(lambda: {b: t.read_new() for b, t in self._tails.items()})
            if any(new.values()):
                for broker, lines in new.items():
                    self._records[broker].extend(model.parse_state_changes(lines, broker))
                self._set("timeline", model.merge_timeline(self._records, TIMELINE_RECORDS))
        await self._guarded("state_change_log", read())

    def _bootstrap(self) -> str | None:
        if self.source.bootstrap:
            return self.source.bootstrap
        live = [b for b in (self._cluster or {}).get("brokers", []) if b["live"] and b["host"]]
        return ",".join(f"{b['host']}:{b['port']}" for b in live) or None

    async def _read_kafka(self) -> None:
        bootstrap = self._bootstrap()
        if bootstrap is None:
            self._report("kafka", "no live broker to ask")
            return

        async def groups() -> None:
            self._set("groups", await asyncio.to_thread(read_groups, bootstrap, self.timeout))

        async def reassignments() -> None:
            self._set("reassignments", await asyncio.to_thread(read_reassignments, bootstrap, self.timeout))

        async def deletions() -> None:
            state = self._cluster
            if state is None:
                return
            logs = await asyncio.to_thread(read_deleting_logs, state, self.timeout)
            self._set("deletions", model.deletion_progress(state, logs))

        await asyncio.gather(self._guarded("groups", groups()), self._guarded("reassignments", reassignments()),
                             self._guarded("deletions", deletions()))

    async def _scrape(self) -> None:
        if not self.source.metrics_urls:
            return
        timeout = aiohttp.ClientTimeout(total=min(self.timeout, self.metrics_interval * 2))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async def one(broker: int, url: str) -> str | None:
                try:
                    async with session.get(url) as response:
                        response.raise_for_status()
                        text = await response.text()
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    self._last_sample.pop(broker, None)  # the next rate starts afresh
                    return f"broker {broker}: {type(exc).__name__}"
                now = time.time()
                sample = model.metric_sample(text)
                point = model.chart_point(self._last_sample.get(broker), now, sample)
                self._last_sample[broker] = (now, sample)
                self._history.setdefault(broker, deque(maxlen=METRIC_POINTS)).append(point)
                return None

            failed = [e for e in await asyncio.gather(*(one(b, u) for b, u in sorted(self.source.metrics_urls.items())))
                      if e]
        self._report("metrics", "cannot scrape " + ", ".join(failed) if failed else None)
        self._set("metrics", {"brokers": {str(b): list(h) for b, h in sorted(self._history.items())},
                              "urls": dict(self.source.metrics_urls)})
