"""The dashboard's one reader of the cluster: a poller per server, whose sections every browser
connection shares (a ZooKeeper read per second for the server, not per open page).

Each section has its own loop and pace: ZooKeeper's znodes (the grid, brokers, controller) every
second; the state-change logs' new lines every second; the Kafka requests (consumer groups with
lag, transactions, reassignments, deletions) every few seconds; the brokers' Prometheus metrics
every two (the charted series, and which partitions' last stable offset lags: the transactions
section joins those to the transactions read, model.transactions_view).
Blocking clients (kazoo, the admin tools' socket requests, file reads) run through
asyncio.to_thread so the aiohttp loop never waits on the cluster; the metrics and remote logs are
fetched with aiohttp's own client. confluent-kafka's AdminClient (the consumer groups) lives in
a child process of its own (kafka_reader.py): librdkafka can abort the process holding it. A
section that cannot be read keeps its last value and reports the error beside it, so a dead
broker, a ZooKeeper outage or a crashed Kafka client shows on the page instead of stopping it.

The grid is the exception to keeping the last value quietly: a grid that still says "3/3 brokers
live" after the cluster stopped is worse than none. No ZooKeeper read holds its loop past an
interval; the ``health`` section says each poll whether the grid is fresh, when it was last
read and why not in plain words (plain_words.py), and each poll probes every known broker's
Kafka port (and, with a data directory, its recorded pid), so brokers that stopped show dead
whether or not ZooKeeper answers.

The partition grid reads each topic znode and partition state znode once and then only when a
ZooKeeper data watch says it changed (ZnodeCache), as Kafka's controller follows its own znodes.
A poll re-reads only the few znodes that decide liveness (/brokers/ids/N, /controller,
/controller_epoch, the children of /brokers/topics and /admin/delete_topics), so a dead broker
still turns the partitions it led offline at the next poll (model.partition_status), before the
controller has moved them. Re-reading every state znode each poll takes longer than the 1 s
pace at 10,000 partitions; a watched poll makes a handful of requests, and after a failover
re-reads just the states the controller rewrote. Not a Metadata request to a broker (what
Kafka's admin tools show): at a 1 s pace it costs the broker about a tenth of a core at 10,000
partitions for as long as a page is open, where watches cost ZooKeeper nothing until a
partition changes. (The measurements: docs/benchmarks-history.md, "Dashboard polling".)

State-change logs and metrics need no files: each broker registers where it serves metrics
(``metrics_url`` in /brokers/ids/N, zk.paths.encode_broker_info), and the same HTTP server
serves its state-change log's tail (/state-change-log, broker/http_endpoints.py). With a data directory
the logs are still read from the files (read_log_chunk, the same reader the broker's route
uses): they work for brokers without a metrics port and keep a dead broker's log readable.
On a secured cluster both are HTTPS behind a login (broker/metrics_security.py): they are read
with the process's client settings, the CA of ssl.ca.location and an HTTP Basic login of
sasl.username / sasl.password (client/metrics_http.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import aiohttp
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from odradek.admin import reassign_client
from odradek.admin.errors import ClusterError
from odradek.admin.zookeeper import collect_data, connect_zk
from odradek.broker.state_change_log_reader import LogChunk, read_log_chunk
from odradek.client import client_config, metrics_http
from odradek.cluster.cluster_spec import read_pid
from odradek.cluster.local_cluster import LocalCluster, pid_alive
from odradek.common.metadata import TopicPartition
from odradek.security.client_security import ClientSecurity
from odradek.ui import model, plain_words
from odradek.ui.kafka_reader import ROUND_TIMEOUTS, GroupReader
from odradek.ui.plain_words import ZooKeeperSilent
from odradek.ui.txn_reader import ClusterTransactions, read_transactions
from odradek.zk import paths

log = logging.getLogger("odradek.ui")

#: the newest state-change records the timeline keeps (per broker and merged)
TIMELINE_RECORDS = 300
#: how much of a state-change log is read when the dashboard starts
TAIL_START_BYTES = 256 * 1024
#: metric points kept per broker (at the 2 s pace: five minutes)
METRIC_POINTS = 150
#: a browser connection this many sections behind is dropped (it reconnects and starts afresh)
MAX_BACKLOG = 64


@dataclass(frozen=True)
class ClusterSource:
    """Where the cluster is read from. ``bootstrap`` None: the live brokers ZooKeeper lists;
    ``expected_brokers`` are shown dead when not registered (cluster.json's brokers);
    ``broker_addresses`` (host:port) are probed until a broker registers its own, so a broker
    that never registered while the dashboard ran still shows whether it answers;
    ``broker_pid_files`` tell at once that a broker's process is gone (a data directory's)."""
    zookeeper: str
    bootstrap: str | None = None
    expected_brokers: tuple[int, ...] = ()
    state_change_logs: Mapping[int, Path] = field(default_factory=dict)
    metrics_urls: Mapping[int, str] = field(default_factory=dict)
    broker_addresses: Mapping[int, str] = field(default_factory=dict)
    broker_pid_files: Mapping[int, Path] = field(default_factory=dict)


def source_from_data_dir(data_dir: Path, bootstrap: str | None = None) -> ClusterSource:
    """Everything `odradek up` recorded in cluster.json, and each broker's state-change log.
    The Kafka requests go to ``bootstrap``, else to the brokers registered now (a dead broker
    first in the recorded list would cost each request a connection timeout)."""
    cluster = LocalCluster.load(data_dir)
    return ClusterSource(
        cluster.zookeeper_connect, bootstrap, tuple(cluster.broker_ids),
        {b: cluster.broker_dir(b) / "data" / "state-change.log" for b in cluster.broker_ids},
        {b: url for b in cluster.broker_ids if (url := cluster.metrics_url(b))},
        {b: f"{cluster.host}:{cluster.broker_port(b)}" for b in cluster.broker_ids},
        {b: cluster.broker_dir(b) / "broker.pid" for b in cluster.broker_ids})


def connect_zookeeper(hosts: str, timeout: float) -> KazooClient:
    """admin.zookeeper.connect_zk's client, which keeps trying to reconnect at most a second
    apart for as long as the dashboard runs; ClusterError (in plain words) when it cannot
    connect within ``timeout``: the command fails at once instead of serving an empty page."""
    try:
        return connect_zk(hosts, timeout)
    except ClusterError as exc:
        raise ClusterError(plain_words.plain(str(exc))) from None


# -- blocking reads (each runs on a worker thread) ---------------------------------------------------


class ZnodeCache:
    """Znodes' values kept until ZooKeeper says they changed: each read leaves a one-shot data
    watch, whose firing (on kazoo's thread) only marks the znode stale for the next read. A znode
    that did not exist leaves no watch (ZooKeeper sets none on a failed getData) and is read
    again each time; a lost session fires every watch with no path, which marks all stale."""

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self._values: dict[str, bytes | None] = {}
        self._stale: set[str] = set()
        self._lock = threading.Lock()
        #: getData requests sent so far (what the cache saves is what this does not count)
        self.reads = 0

    def get_many(self, wanted: list[str], timeout: float) -> dict[str, bytes | None]:
        """The values of ``wanted`` (None: no such znode), reading only the stale or new ones,
        pipelined; values of znodes no longer wanted are forgotten."""
        with self._lock:
            keep = set(wanted)
            self._values = {k: v for k, v in self._values.items() if k in keep}
            self._stale &= keep
            todo = [k for k in wanted if k not in self._values or k in self._stale]
            self._stale.difference_update(todo)  # a watch firing from here on marks it again
        pending = {k: self._zk.get_async(k, watch=self._changed) for k in todo}
        self.reads += len(pending)
        failed: Exception | None = None
        for key, result in pending.items():
            try:
                value: bytes | None = result.get(timeout=timeout)[0]
            except NoNodeError:
                value = None
            except Exception as exc:  # noqa: BLE001 - read again next time; the first failure is reported
                failed = failed or exc
                with self._lock:
                    self._stale.add(key)
                continue
            with self._lock:
                self._values[key] = value
                if value is None:
                    self._stale.add(key)
        if failed is not None:
            raise failed
        with self._lock:
            return {k: self._values.get(k) for k in wanted}

    def _changed(self, event: WatchedEvent) -> None:
        with self._lock:
            if event.path is None:
                self._stale.update(self._values)
            else:
                self._stale.add(event.path)


class ZkReader:
    """The znodes of the grid: liveness and the controller read each poll (a few requests),
    topic assignments and partition states through ZnodeCaches."""

    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self.topics = ZnodeCache(zk)
        self.states = ZnodeCache(zk)
        self.requests = 0  # every ZooKeeper request the polls made

    def read(self, timeout: float) -> model.ZkView:
        """One poll's view. Every request waits at most what is left of ``timeout`` for the
        whole read (kazoo's synchronous calls wait for ever while it reconnects, and the page
        would show its last view as current through a whole ZooKeeper outage); nothing is asked while
        the client is not connected (ZooKeeperSilent), so no request piles up in kazoo's queue
        to be sent when ZooKeeper returns."""
        zk = self._zk
        if not zk.connected:
            raise ZooKeeperSilent()
        deadline = time.monotonic() + timeout
        before = self.topics.reads + self.states.reads

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        def results(pending: dict[Any, Any]) -> dict[Any, bytes | None]:
            self.requests += len(pending)
            return collect_data(pending, left())

        listed = {path: zk.get_children_async(path) for path in (paths.BROKER_IDS, paths.BROKER_TOPICS,
                                                                 paths.DELETE_TOPICS)}
        self.requests += len(listed)
        children: dict[str, list[str]] = {}
        for path, result in listed.items():
            try:
                children[path] = result.get(timeout=left())
            except NoNodeError:
                children[path] = []
        brokers = {int(b): zk.get_async(paths.broker_path(int(b))) for b in children[paths.BROKER_IDS] if b.isdigit()}
        singles = {paths.CONTROLLER: zk.get_async(paths.CONTROLLER),
                   paths.CONTROLLER_EPOCH: zk.get_async(paths.CONTROLLER_EPOCH)}
        names = sorted(children[paths.BROKER_TOPICS])
        deleting = tuple(sorted(children[paths.DELETE_TOPICS]))
        topic_values = self.topics.get_many([paths.topic_path(t) for t in names], left())
        topic_data = {t: d for t in names if (d := topic_values[paths.topic_path(t)]) is not None}
        state_paths: dict[tuple[str, int], str] = {}
        for topic, data in topic_data.items():
            try:
                partitions = paths.decode_topic_assignment(topic, data).partitions
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            state_paths.update({(topic, p): paths.partition_state_path(TopicPartition(topic, p)) for p in partitions})
        state_values = self.states.get_many(list(state_paths.values()), left())
        single = results(singles)
        live = {b: d for b, d in results(brokers).items() if d is not None}
        self.requests += self.topics.reads + self.states.reads - before
        return model.ZkView(single[paths.CONTROLLER], single[paths.CONTROLLER_EPOCH], live, topic_data,
                            {tp: state_values[path] for tp, path in state_paths.items()}, deleting)


class TransactionsUnlisted(Exception):
    """Some brokers could not list the transactions they coordinate this round (the message
    says which and why)."""


class StateChangeLogUnread(Exception):
    """Some brokers' state-change logs could not be read this round (the message says whose
    and why, in the page's words)."""


class LogTail:
    """How far one broker's state-change log has been read. It starts at the log's tail, and
    jumps to the tail again when it falls more than TAIL_START_BYTES behind (a failover at
    10,000 partitions writes megabytes; the timeline keeps only the newest records)."""

    def __init__(self) -> None:
        self.offset: int | None = None

    def took(self, chunk: LogChunk) -> list[str]:
        behind = chunk.size - chunk.next_offset
        self.offset = None if behind > TAIL_START_BYTES else chunk.next_offset
        return chunk.lines


def state_change_log_url(metrics_url: str) -> str:
    """The broker's /state-change-log route, on the server of its metrics (broker/http_endpoints.py)."""
    return urljoin(metrics_url, "/state-change-log")


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

    SECTIONS = ("cluster", "health", "timeline", "groups", "transactions", "reassignments", "deletions", "metrics",
                "errors")

    def __init__(self, source: ClusterSource, zk_interval: float = 1.0, kafka_interval: float = 3.0,
                 metrics_interval: float = 2.0, timeout: float = 5.0, security: ClientSecurity | None = None) -> None:
        """``security``: how the brokers' metrics endpoints are read (their CA and login; the
        process's client settings by default)."""
        self.source = source
        self.security = security or client_config.security()
        self.zk_interval, self.kafka_interval, self.metrics_interval = zk_interval, kafka_interval, metrics_interval
        self.timeout = timeout
        self.sections: dict[str, str] = {}  # name -> JSON, the last value published
        self._errors: dict[str, str] = {}
        self._cluster: dict[str, Any] | None = None
        self._subscribers: set[asyncio.Queue[tuple[str, str]]] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._zk: KazooClient | None = None
        self._groups = GroupReader()
        self._kafka_bootstrap: str | None = None
        self._zk_read = asyncio.Event()  # set after the first ZooKeeper read, failed or not
        self.zk_reader: ZkReader | None = None
        self._view: model.ZkView | None = None  # the last view ZooKeeper answered with
        self._read_at: float | None = None  # when (time.time())
        self._zk_pending: asyncio.Future[model.ZkView] | None = None  # a read still waiting for ZooKeeper
        self._addresses: dict[int, str] = dict(source.broker_addresses)  # host:port to probe, per broker
        self._http: aiohttp.ClientSession | None = None
        self._history: dict[int, deque[dict[str, float | None]]] = {}
        self._last_sample: dict[int, tuple[float, dict[str, float]]] = {}
        self._tails: dict[int, LogTail] = {}
        self._records: dict[int, deque[dict[str, Any]]] = {}
        self._txn_reads: deque[dict[str, Any]] = deque(maxlen=2)  # the last two rounds (model.transactions_view)
        self._lso: dict[int, dict[model.Partition, int]] = {}  # each answering broker's lagging partitions
        self._lso_at: float | None = None  # when the brokers were last scraped (ms)
        self._lso_since: dict[model.Partition, float] = {}
        for name, empty in (("timeline", []), ("groups", []), ("reassignments", []), ("deletions", []),
                            ("metrics", {"brokers": {}, "urls": dict(source.metrics_urls)}), ("errors", {})):
            self._set(name, empty)
        self._set("health", model.health(None, None, None, time.time(), zk_interval))
        self._publish_transactions()

    async def start(self) -> None:
        """Connects to ZooKeeper (ClusterError when it cannot be reached: the command fails at
        once instead of serving an empty page), then starts the loops, each reading at once."""
        self._zk = await asyncio.to_thread(connect_zookeeper, self.source.zookeeper, self.timeout)
        self.zk_reader = ZkReader(self._zk)
        self._http = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._every(self.zk_interval, self._read_zk)),
                       asyncio.create_task(self._every(self.zk_interval, self._read_logs)),
                       asyncio.create_task(self._every(self.kafka_interval, self._read_kafka)),
                       asyncio.create_task(self._every(self.metrics_interval, self._scrape))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._zk_pending is not None:  # its thread ends by its own timeout
            self._zk_pending.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http is not None:
            await self._http.close()
        await asyncio.to_thread(self._groups.close)
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
            self._errors[section] = plain_words.plain(error)
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
            self._report(section, plain_words.describe(exc))
        else:
            self._report(section, None)

    # -- the reads -----------------------------------------------------------------------------------

    async def _read_zk(self) -> None:
        """One poll of the grid: ZooKeeper's znodes and, at the same time, whether each broker's
        process and Kafka port answer. Neither holds the loop past an interval: a ZooKeeper
        read still unanswered is left running (at most one at a time; its requests time out by
        themselves) and the grid is published from the last view, marked stale, with the
        brokers the probes found dead shown dead, so a stopped cluster shows as stopped at the
        next poll instead of as the last thing ZooKeeper said. Only the first read, which has
        no earlier view to fall back on, is waited for up to the full timeout, and a broker
        seen registered at an address not probed yet is probed before the grid is published."""
        assert self.zk_reader is not None  # start() made it before starting this loop
        if self._zk_pending is None:
            self._zk_pending = asyncio.ensure_future(asyncio.to_thread(self.zk_reader.read, self.timeout))
        pending = self._zk_pending
        probed = dict(self._addresses)
        probes = asyncio.ensure_future(self._probe_brokers(probed, pids=True))
        await asyncio.wait({pending}, timeout=self.zk_interval if self._view is not None else self.timeout)
        error = None
        if not pending.done():
            error = plain_words.zookeeper_silent(self.source.zookeeper)
        else:
            self._zk_pending = None
            try:
                self._view, self._read_at = pending.result(), time.time()
            except Exception as exc:  # noqa: BLE001 - any failure to read is shown, not raised
                log.debug("reading ZooKeeper failed", exc_info=True)
                error = plain_words.describe(exc, self.source.zookeeper)
        dead = await probes

        async def publish() -> None:
            view = self._view or model.ZkView()
            registered = model.registered_addresses(view)
            self._addresses.update(registered)
            # a broker registered at an address not probed yet (new, or restarted elsewhere)
            dead.update(await self._probe_brokers({b: a for b, a in registered.items()
                                                   if probed.get(b) != a and b not in dead}))
            # a probe of an address the broker no longer registers says nothing about it
            down = {b: why for b, (address, why) in dead.items()
                    if address is None or registered.get(b, address) == address}
            self._cluster = model.cluster_state(view, self.source.expected_brokers, down, stale=error is not None)
            self._set("cluster", self._cluster)
            self._set("health", model.health(self._cluster, error, self._read_at, time.time(), self.zk_interval))
        await self._guarded("cluster", publish())
        self._zk_read.set()

    def _probe_timeout(self) -> float:
        """An interval, but a second at least: the page must not call a live broker dead
        because the dashboard's own loop was busy for a moment."""
        return min(self.timeout, max(self.zk_interval, 1.0))

    async def _probe_brokers(self, addresses: Mapping[int, str], pids: bool = False) -> dict[int, tuple[str | None, str]]:
        """Brokers found dead now, each with the address probed (None: not a probe) and why:
        its recorded pid is gone (``pids``: with a data directory; at once, as `odradek status`
        tells), or its Kafka port at ``addresses`` does not accept a connection. A broker killed
        with SIGKILL keeps its registration until its ZooKeeper session expires, seconds later,
        and with ZooKeeper down the registrations last read are all there is: the probes are
        what tell."""
        dead: dict[int, tuple[str | None, str]] = {}
        for broker, pid_file in self.source.broker_pid_files.items() if pids else ():
            pid = read_pid(pid_file)
            if pid is not None and not pid_alive(pid):
                dead[broker] = (None, f"is not running: its process (pid {pid}) is gone")

        async def probe(broker: int, address: str) -> None:
            host, _, port = address.rpartition(":")
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host.strip("[]"), int(port)),
                                                   self._probe_timeout())
            except (OSError, asyncio.TimeoutError, ValueError):
                dead[broker] = (address, f"does not answer on {address}")
                return
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

        await asyncio.gather(*(probe(b, a) for b, a in sorted(addresses.items()) if b not in dead))
        return dead

    def _metrics_urls(self) -> dict[int, str]:
        """cluster.json's (with a data directory), then what each live broker registered."""
        registered = {b["id"]: b["metrics_url"] for b in (self._cluster or {}).get("brokers", [])
                      if b["live"] and b.get("metrics_url")}
        return {**self.source.metrics_urls, **registered}

    def _tail(self, broker: int) -> LogTail:
        if broker not in self._tails:
            self._tails[broker] = LogTail()
            self._records[broker] = deque(maxlen=TIMELINE_RECORDS)
        return self._tails[broker]

    async def _read_logs(self) -> None:
        """Local files where the data directory has them, else each live broker's HTTP route."""
        local = dict(self.source.state_change_logs)
        remote = {b: state_change_log_url(u) for b, u in self._metrics_urls().items() if b not in local}

        offsets = {b: self._tail(b).offset for b in local}

        def read_local() -> dict[int, LogChunk | str]:
            return {b: read_log_chunk(path, offsets[b], TAIL_START_BYTES) for b, path in local.items()}

        async def read_remote(broker: int, url: str) -> LogChunk | str:
            offset = self._tail(broker).offset
            query = {"max_bytes": str(TAIL_START_BYTES), **({} if offset is None else {"offset": str(offset)})}
            assert self._http is not None  # start() made it before starting this loop
            try:
                async with self._http.get(url, params=query, timeout=self._http_timeout(),
                                          **self._http_options(url)) as response:
                    response.raise_for_status()
                    body = await response.json()
                return LogChunk(int(body["start"]), int(body["next_offset"]), int(body["size"]),
                                [str(line) for line in body["lines"]])
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError, TypeError) as exc:
                return plain_words.http_failure(broker, url, exc)

        async def read() -> None:
            chunks: dict[int, LogChunk | str] = await asyncio.to_thread(read_local) if local else {}
            fetched = await asyncio.gather(*(read_remote(b, u) for b, u in sorted(remote.items())))
            chunks.update(zip(sorted(remote), fetched))
            failed = [c for c in chunks.values() if isinstance(c, str)]
            new = False
            for broker, chunk in chunks.items():
                if isinstance(chunk, LogChunk) and (lines := self._tail(broker).took(chunk)):
                    self._records[broker].extend(model.parse_state_changes(lines, broker))
                    new = True
            if new:
                self._set("timeline", model.merge_timeline(self._records, TIMELINE_RECORDS))
            if failed:
                raise StateChangeLogUnread("; ".join(failed))
        await self._guarded("state_change_log", read())

    def _http_options(self, url: str) -> dict[str, Any]:
        """The CA and login a request to a broker's metrics endpoint is made with."""
        context = metrics_http.tls_context(self.security)
        return {"headers": metrics_http.headers_for(url, self.security),
                "ssl": context if context is not None else True}

    def _http_timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=min(self.timeout, self.metrics_interval * 2))

    def bootstrap(self) -> str | None:
        """The brokers to ask (the dashboard's logins are checked with one of them)."""
        return self._bootstrap()

    def _bootstrap(self) -> str | None:
        """--bootstrap-server, else the live brokers ZooKeeper lists."""
        if self.source.bootstrap:
            return self.source.bootstrap
        live = [b for b in (self._cluster or {}).get("brokers", []) if b["live"] and b["host"]]
        return ",".join(f"{b['host']}:{b['port']}" for b in live) or None

    def _groups_bootstrap(self, bootstrap: str) -> str:
        """The list the group reader was last given while any broker in it is in ``bootstrap``:
        its AdminClient is kept per list (kafka_reader.py), and librdkafka finds the other
        brokers, and the restarted ones, in the Metadata it gets."""
        if not self._kafka_bootstrap or not set(self._kafka_bootstrap.split(",")) & set(bootstrap.split(",")):
            self._kafka_bootstrap = bootstrap
        return self._kafka_bootstrap

    async def _read_kafka(self) -> None:
        await self._zk_read.wait()  # the live brokers come from the ZooKeeper read
        bootstrap = self._bootstrap()
        self._report("kafka", None if bootstrap else "no live broker to ask")
        if bootstrap is None:
            return

        async def groups() -> None:
            rows = await asyncio.to_thread(self._groups.read, self._groups_bootstrap(bootstrap), self.timeout)
            now_ms = time.time() * 1000
            for row in rows:  # a group that could not be described says why, in the page's words
                if row.get("error"):
                    row["error"] = plain_words.plain(row["error"])
                row["blocks"] = model.group_blocks(row.pop("ordered", None), now_ms)
            self._set("groups", rows)

        async def transactions() -> None:
            source = ClusterTransactions(bootstrap, self.timeout)
            deadline = time.monotonic() + self.timeout * ROUND_TIMEOUTS
            read = await asyncio.to_thread(read_transactions, source, deadline)
            for row in read["transactions"]:
                if row["error"]:
                    row["error"] = plain_words.plain(row["error"])
            self._txn_reads.append(read)
            self._publish_transactions()
            if read["errors"]:  # the other brokers' transactions are shown
                raise TransactionsUnlisted("; ".join(read["errors"]))

        async def reassignments() -> None:
            self._set("reassignments", await asyncio.to_thread(read_reassignments, bootstrap, self.timeout))

        async def deletions() -> None:
            state = self._cluster
            if state is None:
                return
            logs = await asyncio.to_thread(read_deleting_logs, state, self.timeout)
            self._set("deletions", model.deletion_progress(state, logs))

        await asyncio.gather(self._guarded("groups", groups()), self._guarded("transactions", transactions()),
                             self._guarded("reassignments", reassignments()), self._guarded("deletions", deletions()))

    def _publish_transactions(self) -> None:
        """The transactions section from the last reads and the last scrapes (each loop calls
        it after its own read, so open times and lags stay as fresh as the faster of the two)."""
        leaders = {(t["name"], p["partition"]): p["leader"] for t in (self._cluster or {}).get("topics", [])
                   for p in t["partitions"]}
        lso = None if self._lso_at is None else model.LsoLags(
            {tp: lag for lags in self._lso.values() for tp, lag in lags.items()}, frozenset(self._lso),
            self._lso_at, self._lso_since)
        self._set("transactions", model.transactions_view(list(self._txn_reads), leaders, lso, time.time() * 1000))

    async def _scrape(self) -> None:
        """Each broker's charted series and its lagging last stable offsets: only those are asked
        for (``name[]``, as prometheus_client's handler takes it), not the whole scrape, which
        holds four series per replica a broker hosts (tens of thousands of lines to parse on this
        loop); the brokers list only the partitions they lead whose last stable offset lags."""
        urls = self._metrics_urls()
        if not urls:
            return
        only = [("name[]", family) for _, family, _ in model.CHARTED] + [("name[]", model.LSO_LAG)]

        async def one(broker: int, url: str) -> str | None:
            assert self._http is not None  # start() made it before starting this loop
            try:
                async with self._http.get(url, params=only, timeout=self._http_timeout(),
                                          **self._http_options(url)) as response:
                    response.raise_for_status()
                    text = await response.text()
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                self._last_sample.pop(broker, None)  # the next rate starts afresh
                self._lso.pop(broker, None)  # the lag of the partitions it leads is not known
                return plain_words.http_failure(broker, url, exc)
            now = time.time()
            sample = model.metric_sample(text)
            point = model.chart_point(self._last_sample.get(broker), now, sample)
            self._last_sample[broker] = (now, sample)
            self._history.setdefault(broker, deque(maxlen=METRIC_POINTS)).append(point)
            self._lso[broker] = model.lso_lags(text)
            return None

        failed = [e for e in await asyncio.gather(*(one(b, u) for b, u in sorted(urls.items()))) if e]
        self._lso = {b: lags for b, lags in self._lso.items() if b in urls}
        self._lso_at = time.time() * 1000
        self._lso_since = model.lagging_since(self._lso_since, {tp: lag for lags in self._lso.values()
                                                                for tp, lag in lags.items()}, self._lso_at)
        self._publish_transactions()
        self._report("metrics", "; ".join(failed) if failed else None)
        self._set("metrics", {"brokers": {str(b): list(h) for b, h in sorted(self._history.items())},
                              "urls": {str(b): u for b, u in sorted(urls.items())}})
