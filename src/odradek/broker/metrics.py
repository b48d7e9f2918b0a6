"""A broker's Prometheus metrics, named as Prometheus' JMX exporter names Kafka's MBeans, so the
Grafana dashboards written for Apache Kafka work unchanged:

    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions
        -> kafka_server_replicamanager_underreplicatedpartitions

Gauges are computed when Prometheus scrapes (a whole scrape at 10,000 partitions takes a few
milliseconds), never kept up to date on the hot path. Each request costs 4 µs (a counter and
a histogram observation); bytes in and out are plain per-topic tallies, exported at scrape time. Controller figures come from the
controller's per-event timing records (controller/timing.py), so the controller package knows
nothing of Prometheus. Consumer group lag (named as the widely used kafka_exporter names it) is
exported by each group's coordinator for the partitions it holds a replica of, measured against
that replica's high watermark.

The registry is served on ``/metrics`` by the broker's HTTP server (http_endpoints.py).
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from odradek.broker import api_keys, http_endpoints
from odradek.controller.timing import LOGGER_NAME as CONTROLLER_TIMING_LOGGER

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
        """``/metrics`` and ``/state-change-log`` (http_endpoints.py) on daemon threads of
        their own; OSError when the port cannot be bound."""
        return http_endpoints.serve(host, port, self.registry, state_change_log)

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
