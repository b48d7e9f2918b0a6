"""A broker's Prometheus metrics, named as Prometheus' JMX exporter names Kafka's MBeans, so the
Grafana dashboards written for Apache Kafka work unchanged:

    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions
        -> kafka_server_replicamanager_underreplicatedpartitions

Gauges are computed when Prometheus scrapes (a whole scrape at 10,000 partitions: 4 ms on 2
vCPUs AMD EPYC), never kept up to date on the hot path. Each request costs 4 µs (a counter and
a histogram observation); bytes in and out are plain per-topic tallies, exported at scrape time. Controller figures come from the
controller's per-event timing records (controller/timing.py), so the controller package knows
nothing of Prometheus. Consumer group lag (named as the widely used kafka_exporter names it) is
exported by each group's coordinator for the partitions it holds a replica of, measured against
that replica's high watermark.

The same HTTP server serves the tail of the broker's state-change log (``/state-change-log``),
so a dashboard on another host can follow the controller's decisions without the broker's
files. It replaces prometheus_client's start_http_server (which serves only the registry) with
a small http.server of our own: read-only (GET and HEAD of two routes), every answer bounded
(LOG_CHUNK_MAX bytes of log), at most HTTP_MAX_CONCURRENT requests at once (503 beyond) with a
socket timeout, and every failure answered or logged on its own thread, never raised into the
broker. The broker publishes the address in its registration (zk.paths.encode_broker_info's
``metrics_url``) so tools find it from ZooKeeper alone.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from odradek.broker import api_keys
from odradek.controller.timing import LOGGER_NAME as CONTROLLER_TIMING_LOGGER

log = logging.getLogger("odradek.broker.metrics")

#: Kafka's request names, for the `request` label (kafka.network:type=RequestMetrics,request=...)
REQUEST_NAMES: dict[int, str] = {
    api_keys.PRODUCE: "Produce", api_keys.FETCH: "Fetch", api_keys.LIST_OFFSETS: "ListOffsets", api_keys.METADATA: "Metadata",
    api_keys.OFFSET_COMMIT: "OffsetCommit", api_keys.OFFSET_FETCH: "OffsetFetch", api_keys.FIND_COORDINATOR: "FindCoordinator",
    api_keys.JOIN_GROUP: "JoinGroup", api_keys.HEARTBEAT: "Heartbeat", api_keys.LEAVE_GROUP: "LeaveGroup",
    api_keys.SYNC_GROUP: "SyncGroup", api_keys.DESCRIBE_GROUPS: "DescribeGroups", api_keys.LIST_GROUPS: "ListGroups",
    api_keys.API_VERSIONS: "ApiVersions", api_keys.CREATE_TOPICS: "CreateTopics", api_keys.INIT_PRODUCER_ID: "InitProducerId",
    api_keys.OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch", api_keys.DESCRIBE_CONFIGS: "DescribeConfigs",
    api_keys.DELETE_GROUPS: "DeleteGroups", api_keys.ELECT_LEADERS: "ElectLeaders", api_keys.OFFSET_DELETE: "OffsetDelete",
    api_keys.DESCRIBE_CLUSTER: "DescribeCluster",
    4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown",
    19: "CreateTopics", 20: "DeleteTopics", 21: "DeleteRecords", 33: "AlterConfigs", 37: "CreatePartitions",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments", 46: "ListPartitionReassignments",
}
#: request time buckets in ms: a heartbeat takes well under 1 ms, a long-polling fetch 500
TIME_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
#: the most of the state-change log one answer carries (and its default)
LOG_CHUNK_MAX = 4 << 20
LOG_CHUNK_DEFAULT = 1 << 20
#: requests served at once; more get 503 (a scraper loop gone wrong must not take the broker's threads)
HTTP_MAX_CONCURRENT = 8
#: a client that sends or reads nothing for this long is dropped
HTTP_TIMEOUT_S = 10.0


class BrokerMetrics:
    """The hot-path counters, the scrape-time collector and the HTTP endpoint of one broker."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._requests = Counter("kafka_network_requestmetrics_requests", "Requests received, by API and version",
                                 ["request", "version"], registry=self.registry)
        self._time = Histogram("kafka_network_requestmetrics_totaltimems",
                               "Time from a request's arrival to its response, ms", ["request"],
                               buckets=TIME_BUCKETS_MS, registry=self.registry)
        self._elections = Histogram("kafka_controller_controllerstats_leaderelectionrateandtimems",
                                    "Controller events that elected leaders: time from the ZooKeeper watch "
                                    "to the last LeaderAndIsr answer, ms", buckets=TIME_BUCKETS_MS,
                                    registry=self.registry)
        # per-topic byte counts kept as plain tallies and exported at scrape time: a labelled
        # prometheus Counter costs a lock and a label lookup per bump
        self.bytes_in: Tally[str] = Tally()
        self.bytes_out: Tally[str] = Tally()
        self.messages_in: Tally[str] = Tally()
        self._request_children: dict[tuple[int, int], tuple[Any, Any]] = {}

    # -- hot path ------------------------------------------------------------------------------

    def request_done(self, api_key: int, version: int, started: float) -> None:
        children = self._request_children.get((api_key, version))
        if children is None:
            name = REQUEST_NAMES.get(api_key, str(api_key))
            children = (self._requests.labels(name, str(version)), self._time.labels(name))
            self._request_children[(api_key, version)] = children
        children[0].inc()
        children[1].observe((time.perf_counter() - started) * 1000)

    def controller_event(self, record: dict[str, Any]) -> None:
        """One controller event's timing record: those that elected leaders are elections."""
        fired, acked = record.get("fired"), record.get("lai_acked")
        if record.get("lai_partitions") and fired is not None and acked is not None:
            self._elections.observe((acked - fired) * 1000)

    # -- scrape time ---------------------------------------------------------------------------

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def serve(self, host: str, port: int, state_change_log: Path | None = None) -> ThreadingHTTPServer:
        """``/metrics`` and ``/state-change-log`` (the module docstring) on daemon threads of
        their own; OSError when the port cannot be bound."""
        server = _BrokerHttpServer((host, port), _BrokerHttpHandler)
        server.registry, server.state_change_log = self.registry, state_change_log
        threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
        log.info("metrics on http://%s:%d/metrics", host, server.server_address[1])
        return server

    def listen_to_controller(self) -> None:
        logger = logging.getLogger(CONTROLLER_TIMING_LOGGER)
        logger.addHandler(_TimingHandler(self.controller_event))
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)


class _TimingHandler(logging.Handler):
    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(logging.INFO)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._sink(json.loads(record.getMessage()))
        except Exception:  # noqa: BLE001 - a metric must never break the controller
            pass


class BrokerCollector(Collector):
    """Gauges read from the broker's state when Prometheus scrapes.

    `partitions()`: this broker's replicas (broker.partition.Partition); `isr_changes()`: the
    (shrinks, expansions) this broker made; `is_controller()`; `offline_and_global()`: the
    partitions with no live leader, and all, in this broker's metadata (one walk);
    `group_lag()`: (group, topic, partition, lag) for the groups this broker coordinates."""

    def __init__(self, metrics: BrokerMetrics, partitions: Callable[[], Iterable[Any]],
                 isr_changes: Callable[[], tuple[int, int]], is_controller: Callable[[], bool],
                 offline_and_global: Callable[[], tuple[int, int]],
                 group_lag: Callable[[], Iterable[tuple[str, str, int, int]]]) -> None:
        self._metrics = metrics
        self._partitions = partitions
        self._isr_changes = isr_changes
        self._is_controller = is_controller
        self._offline_and_global = offline_and_global
        self._group_lag = group_lag

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        count = leaders = under = under_min = at_min = 0
        for p in self._partitions():
            count += 1
            if not p.is_leader:
                continue
            leaders += 1
            isr = len(p.isr)
            under += isr < len(p.replicas)
            under_min += isr < p.min_insync_replicas
            at_min += isr == p.min_insync_replicas
        yield _gauge("kafka_server_replicamanager_partitioncount", "Replicas on this broker", count)
        yield _gauge("kafka_server_replicamanager_leadercount", "Partitions this broker leads", leaders)
        yield _gauge("kafka_server_replicamanager_underreplicatedpartitions",
                     "Led partitions whose ISR is smaller than their replica set", under)
        yield _gauge("kafka_server_replicamanager_underminisrpartitioncount",
                     "Led partitions whose ISR is below min.insync.replicas", under_min)
        yield _gauge("kafka_server_replicamanager_atminisrpartitioncount",
                     "Led partitions whose ISR is exactly min.insync.replicas", at_min)
        shrinks, expands = self._isr_changes()
        yield _counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks this broker made", shrinks)
        yield _counter("kafka_server_replicamanager_isrexpands", "ISR expansions this broker made", expands)
        active = self._is_controller()
        yield _gauge("kafka_controller_kafkacontroller_activecontrollercount",
                     "1 on the active controller, 0 elsewhere", int(active))
        offline, total = self._offline_and_global() if active else (0, 0)
        yield _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
                     "Partitions without a live leader (reported by the active controller)", offline)
        yield _gauge("kafka_controller_kafkacontroller_globalpartitioncount",
                     "Partitions in the cluster (reported by the active controller)", total)
        m = self._metrics
        for name, doc, tally in (("bytesin", "Bytes appended by producers", m.bytes_in),
                                 ("bytesout", "Bytes sent to consumers and followers", m.bytes_out),
                                 ("messagesin", "Records appended by producers", m.messages_in)):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            for topic, value in tally.items():
                family.add_metric([topic], value)
            yield family
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the committed offset, for the "
                                "groups this broker coordinates", labels=["consumergroup", "topic", "partition"])
        for group, topic, partition, value in self._group_lag():
            lag.add_metric([group, topic, str(partition)], value)
        yield lag


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


# -- the HTTP endpoint ----------------------------------------------------------------------------


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


class _BrokerHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    registry: CollectorRegistry
    state_change_log: Path | None

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(HTTP_MAX_CONCURRENT)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics HTTP request from %s failed", client_address, exc_info=True)


class _BrokerHttpHandler(BaseHTTPRequestHandler):
    server: _BrokerHttpServer
    timeout = HTTP_TIMEOUT_S
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        if not self.server.slots.acquire(blocking=False):
            self._send(503, "text/plain", b"busy\n", send_body)
            return
        try:
            try:
                status, content_type, body = self._route()
            except Exception:  # noqa: BLE001 - a failed answer costs this request, never the broker
                log.warning("metrics HTTP: %s failed", self.path, exc_info=True)
                status, content_type, body = 500, "text/plain", b"internal error\n"
            self._send(status, content_type, body, send_body)
        finally:
            self.server.slots.release()

    def _route(self) -> tuple[int, str, bytes]:
        url = urlsplit(self.path)
        if url.path in ("/metrics", "/"):
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.server.registry)
        if url.path == "/state-change-log":
            return self._state_change_log(parse_qs(url.query, keep_blank_values=True))
        return 404, "text/plain", b"not found: /metrics or /state-change-log?offset=N\n"

    def _state_change_log(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        """``?offset=N`` (omitted: the tail) and ``&max_bytes=M``: a LogChunk as JSON."""
        path = self.server.state_change_log
        if path is None:
            return 404, "text/plain", b"this broker has no state-change log\n"
        try:
            offset = int(query["offset"][0]) if "offset" in query else None
            max_bytes = int(query["max_bytes"][0]) if "max_bytes" in query else LOG_CHUNK_DEFAULT
        except ValueError:
            return 400, "text/plain", b"offset and max_bytes are integers\n"
        chunk = read_log_chunk(path, offset, max(1, min(max_bytes, LOG_CHUNK_MAX)))
        return 200, "application/json", json.dumps(
            {"start": chunk.start, "next_offset": chunk.next_offset, "size": chunk.size, "lines": chunk.lines},
            separators=(",", ":")).encode()

    def _send(self, status: int, content_type: str, body: bytes, send_body: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        pass  # a scrape every few seconds is not worth a log line
