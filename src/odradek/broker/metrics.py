"""A broker's Prometheus metrics, named as Prometheus' JMX exporter names Kafka's MBeans, so the
Grafana dashboards written for Apache Kafka work unchanged:

    kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions
        -> kafka_server_replicamanager_underreplicatedpartitions

Gauges are computed when Prometheus scrapes, never kept up to date on the hot path: the
replica counts, each replica's log (kafka.log:type=Log,name=Size and its siblings), the
follower fetchers' MaxLag, and on the active controller ActiveBrokerCount and
PreferredReplicaImbalanceCount from the metadata it sent itself. Each request costs a counter
and a histogram observation, and its response's error codes are tallied (ErrorsPerSec,
response_errors.py says how they are read cheaply); bytes in and out are plain per-topic
tallies, exported at scrape time and forgotten, as Kafka's BrokerTopicMetrics are, once this
broker hosts no partition of the topic (deleted or moved away). Controller figures come from
the controller's per-event timing records (controller/timing.py), so the controller package
knows nothing of Prometheus. Consumer group lag (named as the widely used kafka_exporter names
it) is exported by each group's coordinator for the partitions it holds a replica of, measured
against that replica's high watermark; the coordinator also exports, per group reading a topic
with KIP-253's ordered delivery, how many of its partitions wait on a barrier and how old the
oldest wait is (OrderedGroupsCollector; a group without a block has no series). prometheus_client's ProcessCollector adds the standard
process_* series (CPU seconds, resident memory, open descriptors, start time).

The registry is served on ``/metrics`` by the broker's HTTP server (http_endpoints.py).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import sys
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from collections.abc import Set as AbstractSet
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from odradek.broker import api_keys, http_endpoints, response_errors
from odradek.common.gc_policy import GcPauseWatch
from odradek.controller.timing import LOGGER_NAME as CONTROLLER_TIMING_LOGGER
from odradek.protocol.errors import error_name

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
    api_keys.DESCRIBE_CLUSTER: "DescribeCluster", api_keys.DESCRIBE_LOG_DIRS: "DescribeLogDirs",
    api_keys.ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn", api_keys.ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
    api_keys.END_TXN: "EndTxn", api_keys.WRITE_TXN_MARKERS: "WriteTxnMarkers",
    api_keys.TXN_OFFSET_COMMIT: "TxnOffsetCommit", api_keys.DESCRIBE_PRODUCERS: "DescribeProducers",
    api_keys.DESCRIBE_TRANSACTIONS: "DescribeTransactions", api_keys.LIST_TRANSACTIONS: "ListTransactions",
    4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown",
    19: "CreateTopics", 20: "DeleteTopics", 21: "DeleteRecords", 33: "AlterConfigs", 37: "CreatePartitions",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments", 46: "ListPartitionReassignments",
    api_keys.DESCRIBE_ACLS: "DescribeAcls", api_keys.CREATE_ACLS: "CreateAcls", api_keys.DELETE_ACLS: "DeleteAcls",
    api_keys.DESCRIBE_CLIENT_QUOTAS: "DescribeClientQuotas", api_keys.ALTER_CLIENT_QUOTAS: "AlterClientQuotas",
    50: "DescribeUserScramCredentials", 51: "AlterUserScramCredentials",
    api_keys.CONSUMER_GROUP_POSITION: "ConsumerGroupPosition",
    api_keys.PARTITION_LEADER_EPOCHS_FOR_PARTITIONS: "PartitionLeaderEpochsForPartitions",
    api_keys.DESCRIBE_ORDERED_GROUPS: "DescribeOrderedGroups",
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
        #: api key -> error code -> responses' errors (Kafka's ErrorsPerSec), NONE included
        self.errors: dict[int, Tally[int]] = {}
        self._request_children: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._unreadable_logged: set[int] = set()
        ProcessCollector(registry=self.registry)
        #: families written as text rather than through the registry (LogMetrics.render)
        self._sections: list[Callable[[AbstractSet[str] | None], bytes]] = []
        self._ordered_groups: Callable[[], Iterable[tuple[str, int, float]]] | None = None

    # -- hot path ------------------------------------------------------------------------------

    def request_done(self, api_key: int, version: int, started: float,
                     response: bytes | list[Any] | None = None) -> None:
        """One request answered (``response`` as sent, None if none was): its count, its time
        and its response's error codes. Produce's errors are not read here: KafkaApis counts
        them from its own results (count_errors)."""
        children = self._request_children.get((api_key, version))
        if children is None:
            name = REQUEST_NAMES.get(api_key, str(api_key))
            children = (self._requests.labels(name, str(version)), self._time.labels(name))
            self._request_children[(api_key, version)] = children
        children[0].inc()
        children[1].observe((time.perf_counter() - started) * 1000)
        if response is None or api_key == api_keys.PRODUCE:
            return
        try:
            codes = (response_errors.fetch_error_codes(version, response) if type(response) is list
                     and api_key == api_keys.FETCH else response_errors.error_codes(api_key, version, response))
        except Exception:  # noqa: BLE001 - a metric must never fail a request
            if api_key not in self._unreadable_logged:  # once per API: it would repeat for each request
                self._unreadable_logged.add(api_key)
                log.warning("cannot read the error codes of %s v%d responses; they are not counted",
                            REQUEST_NAMES.get(api_key, api_key), version, exc_info=True)
            return
        self.count_errors(api_key, codes)

    def count_errors(self, api_key: int, codes: Iterable[int]) -> None:
        tally = self.errors.get(api_key)
        if tally is None:
            tally = self.errors[api_key] = Tally()
        for code in codes:  # a loop beats Counter.update's Mapping check for the usual one or two
            tally[code] += 1

    def controller_event(self, record: dict[str, Any]) -> None:
        """One controller event's timing record: those that elected leaders are elections."""
        fired, acked = record.get("fired"), record.get("lai_acked")
        if record.get("lai_partitions") and fired is not None and acked is not None:
            self._elections.observe((acked - fired) * 1000)

    # -- scrape time ---------------------------------------------------------------------------

    def add_collector(self, collector: Collector) -> None:
        self.registry.register(collector)

    def export_ordered_groups(self, blocked: Callable[[], Iterable[tuple[str, int, float]]]) -> None:
        """Export the KIP-253 blocks of the groups this broker coordinates, ``blocked()`` giving
        (group, blocked partitions, oldest block's age in s); the first source given stays (a
        broker has one coordinator), so callers may call this on every request."""
        if self._ordered_groups is None:
            self._ordered_groups = blocked
            self.add_collector(OrderedGroupsCollector(blocked))

    def add_section(self, render: Callable[[AbstractSet[str] | None], bytes]) -> None:
        self._sections.append(render)

    def exposition(self, names: AbstractSet[str] | None = None) -> bytes:
        """The whole scrape as Prometheus text, or only the samples named in ``names`` (the
        ``name[]`` parameters of prometheus_client's own handler, so a poller that charts a few
        series need not read every partition's)."""
        text = generate_latest(self.registry if names is None else _Only(self.registry, names))
        return text + b"".join(render(names) for render in self._sections)

    def serve(self, host: str, port: int, state_change_log: Path | None = None, *,
              ssl_context: http_endpoints.TlsContext | None = None,
              authenticate: http_endpoints.Authenticate | None = None) -> ThreadingHTTPServer:
        """``/metrics`` and ``/state-change-log`` (http_endpoints.py) on daemon threads of
        their own, over TLS and behind a login when given (broker/metrics_security.py); OSError
        when the port cannot be bound."""
        return http_endpoints.serve(host, port, self.exposition, state_change_log, ssl_context, authenticate)

    def listen_to_controller(self) -> None:
        logger = logging.getLogger(CONTROLLER_TIMING_LOGGER)
        logger.addHandler(_TimingHandler(self.controller_event))
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)


class _Only:
    """The samples of a registry whose names (or whose family's name) are in ``names``."""

    def __init__(self, registry: CollectorRegistry, names: AbstractSet[str]) -> None:
        self._registry, self._names = registry, names

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            whole = family.name in self._names
            samples = [s for s in family.samples if whole or s.name in self._names]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


class _TimingHandler(logging.Handler):
    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(logging.INFO)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._sink(json.loads(record.getMessage()))
        except Exception:  # noqa: BLE001 - a metric must never break the controller
            pass


#: Kafka's per-replica log gauges (kafka.log:type=Log,name=...,topic=T,partition=P)
LOG_FAMILIES = (
    ("kafka_log_log_size", "Bytes of this replica's log on disk"),
    ("kafka_log_log_numlogsegments", "Segments of this replica's log"),
    ("kafka_log_log_logstartoffset", "The first offset of this replica's log"),
    ("kafka_log_log_logendoffset", "The offset this replica's log writes next"),
)


class LogMetrics:
    """The per-replica log gauges, written as exposition text directly: four samples per
    replica are most of a large broker's scrape, and an f-string line costs about a fifth of
    what prometheus_client spends building and formatting a labelled sample. Only strings
    stay alive until the text is joined, no tuple per replica: strings are no work for the
    cycle collector, where 200,000 tuples alive at 100,000 partitions were a slice of 0.1-0.5 s
    for the collection that happened to run during a scrape (common/gc_policy.py). Topic
    names need no escaping (Kafka allows only ASCII letters, digits, '.', '_' and '-'), but an
    odd one is escaped anyway. `partitions()`: this broker's replicas."""

    def __init__(self, partitions: Callable[[], Iterable[Any]]) -> None:
        self._partitions = partitions

    def render(self, names: AbstractSet[str] | None = None) -> bytes:
        """The families (those in ``names``, if given) as Prometheus text."""
        wanted = [i for i, (name, _) in enumerate(LOG_FAMILIES) if names is None or name in names]
        if not wanted:
            return b""
        lines: dict[int, list[str]] = {i: [f"# HELP {name} {doc}\n# TYPE {name} gauge\n"]
                                       for i, (name, doc) in enumerate(LOG_FAMILIES) if i in wanted}
        for p in self._partitions():
            plog, tp = p.log, p.tp
            labels = f'{{topic="{_label_value(tp.topic)}",partition="{tp.partition}"}} '
            values = (plog.size_in_bytes(), len(plog.segment_base_offsets()), plog.log_start_offset,
                      plog.log_end_offset)
            for i, family in lines.items():
                family.append(f"{LOG_FAMILIES[i][0]}{labels}{values[i]}\n")
        return "".join(line for i in wanted for line in lines[i]).encode()


class BrokerCollector(Collector):
    """Gauges read from the broker's state when Prometheus scrapes.

    `partitions()`: this broker's replicas (broker.partition.Partition); `isr_changes()`: the
    (shrinks, expansions) this broker made; `is_controller()`; `offline_and_global()`: the
    partitions with no live leader, and all, in this broker's metadata (one walk);
    `group_lag()`: (group, topic, partition, lag) for the groups this broker coordinates;
    `brokers_and_imbalance()`: the live brokers and the partitions not led by their preferred
    replica, in this broker's metadata (asked on the active controller only: `controller_view`);
    `fetcher_max_lag()`: the largest lag of a partition this broker follows."""

    def __init__(self, metrics: BrokerMetrics, partitions: Callable[[], Iterable[Any]],
                 isr_changes: Callable[[], tuple[int, int]], is_controller: Callable[[], bool],
                 offline_and_global: Callable[[], tuple[int, int]],
                 group_lag: Callable[[], Iterable[tuple[str, str, int, int]]], *,
                 brokers_and_imbalance: Callable[[], tuple[int, int]],
                 fetcher_max_lag: Callable[[], int]) -> None:
        self._metrics = metrics
        self._partitions = partitions
        self._isr_changes = isr_changes
        self._is_controller = is_controller
        self._offline_and_global = offline_and_global
        self._group_lag = group_lag
        self._brokers_and_imbalance = brokers_and_imbalance
        self._fetcher_max_lag = fetcher_max_lag

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        m = self._metrics
        # copies (the event loop adds topics meanwhile), taken before the replicas are listed:
        # a topic counted here was hosted when counted, so one absent below has gone since
        tallies = [(name, doc, tally, dict(tally)) for name, doc, tally in (
            ("bytesin", "Bytes appended by producers", m.bytes_in),
            ("bytesout", "Bytes sent to consumers and followers", m.bytes_out),
            ("messagesin", "Records appended by producers", m.messages_in))]
        count = leaders = under = under_min = at_min = 0
        hosted: set[str] = set()
        for p in self._partitions():
            count += 1
            hosted.add(p.tp.topic)
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
        lag = GaugeMetricFamily("kafka_server_replicafetchermanager_maxlag",
                                "The most messages a partition this broker follows is behind its leader's "
                                "high watermark", labels=["clientId"])
        lag.add_metric(["Replica"], self._fetcher_max_lag())
        yield lag
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
        brokers, imbalance = self._brokers_and_imbalance() if active else (0, 0)
        yield _gauge("kafka_controller_kafkacontroller_activebrokercount",
                     "Live brokers (reported by the active controller)", brokers)
        yield _gauge("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                     "Partitions not led by their preferred (first) replica, offline ones included "
                     "(reported by the active controller)", imbalance)
        for name, doc, tally, counted in tallies:
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            for topic, value in counted.items():
                if topic in hosted:
                    family.add_metric([topic], value)
                else:  # no partition here any more (Kafka's ReplicaManager.maybeRemoveTopicMetrics)
                    tally.pop(topic, None)
            yield family
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Error codes in responses, by API "
                                     "and error (NONE included, once per partition as Kafka counts)",
                                     labels=["request", "error"])
        for api_key, codes in sorted(m.errors.items()):
            request = REQUEST_NAMES.get(api_key, str(api_key))
            for code, value in sorted(dict(codes).items()):
                errors.add_metric([request, error_name(code, str(code))], value)
        yield errors
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the committed offset, for the "
                                "groups this broker coordinates", labels=["consumergroup", "topic", "partition"])
        for group, topic, partition, value in self._group_lag():
            lag.add_metric([group, topic, str(partition)], value)
        yield lag


class OrderedGroupsCollector(Collector):
    """Per consumer group reading a topic with enable.ordered.delivery (KIP-253), from the
    coordinator's position exchange at scrape time: how many of its partitions wait on a
    barrier (a parent not yet read past the offset its new child needs, a partition marked for
    deletion not yet read to its end) and how long the oldest has waited. A group's series are
    there only while it has a block: an alert on the age fires on a group stuck behind a
    barrier, and a block that ends, or a group that goes, leaves no stale value behind."""

    def __init__(self, blocked: Callable[[], Iterable[tuple[str, int, float]]]) -> None:
        self._blocked = blocked

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        count = GaugeMetricFamily("odradek_ordered_group_blocked_partitions",
                                  "Partitions of the group held back by a KIP-253 barrier, as its members "
                                  "last reported to this coordinator", labels=["group"])
        age = GaugeMetricFamily("odradek_ordered_group_oldest_block_seconds",
                                "How long the group's longest-blocked partition has waited on its KIP-253 "
                                "barrier, s", labels=["group"])
        for group, blocked, oldest_s in self._blocked():
            count.add_metric([group], blocked)
            age.add_metric([group], oldest_s)
        yield count
        yield age


class TransactionsCollector(Collector):
    """Transactions (KIP-98) at scrape time: how many this broker coordinates are open, how
    many it aborted and why (``client``: EndTxn; ``timeout``: open past transaction.timeout.ms;
    ``fenced``: a new instance of the transactional.id took over), and the last stable offset
    lag of each partition it leads whose read_committed consumers are held back (Kafka's
    LastStableOffsetLag; partitions with no lag are left out, so a large broker without
    transactions scrapes nothing more)."""

    def __init__(self, open_transactions: Callable[[], int], aborts: Callable[[], dict[str, int]],
                 partitions: Callable[[], Iterable[Any]]) -> None:
        self._open = open_transactions
        self._aborts = aborts
        self._partitions = partitions

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        yield _gauge("odradek_transactions_open", "Transactions this broker coordinates that are open or "
                     "being completed (Ongoing, PrepareCommit, PrepareAbort)", self._open())
        aborted = CounterMetricFamily("odradek_transactions_aborted", "Transactions this broker's coordinator "
                                      "aborted, by reason", labels=["reason"])
        for reason, count in sorted(self._aborts().items()):
            aborted.add_metric([reason], count)
        yield aborted
        lag = GaugeMetricFamily("kafka_cluster_partition_laststableoffsetlag", "High watermark minus the last "
                                "stable offset of a led partition (0 omitted): what read_committed consumers "
                                "cannot read yet", labels=["topic", "partition"])
        for p in self._partitions():
            if p.is_leader:
                behind = p.high_watermark - p.last_stable_offset
                if behind > 0:
                    lag.add_metric([p.tp.topic, str(p.tp.partition)], behind)
        yield lag


class ClientQuotaCollector(Collector):
    """Kafka's client quota metrics (broker/client_quotas.py): per meter (user, client-id, a tag
    the meter is not kept by being "") kafka.server:type=Produce and type=Fetch byte-rate and
    throttle-time, type=Request request-time and throttle-time, and type=Request
    exempt-request-time, named as the JMX exporter names them, lowercased:
    kafka_server_produce_byte_rate{user="alice",client_id="app"}. A meter is there from its
    client's first request once any quota of its type is set, until an hour after its last.
    The meters are the event loop's: the scrape's thread has the loop compute them and waits at
    most ``timeout_s`` (a stalled loop leaves them out of that scrape)."""

    def __init__(self, quota_metrics: Callable[[], Iterable[Any]], loop: asyncio.AbstractEventLoop,
                 timeout_s: float = 2.0) -> None:
        self._quota_metrics = quota_metrics
        self._loop = loop
        self._timeout_s = timeout_s

    def describe(self) -> list[Any]:
        return []

    def _on_loop(self) -> list[Any]:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return list(self._quota_metrics())
        done: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()

        def compute() -> None:
            try:
                done.set_result(list(self._quota_metrics()))
            except Exception as exc:  # noqa: BLE001 - handed to the scrape's thread
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(compute)
        return done.result(timeout=self._timeout_s)

    def collect(self) -> Iterator[Any]:
        try:
            metrics = self._on_loop()
        except Exception as exc:  # noqa: BLE001 - a stalled or closed loop: no quota metrics this scrape
            log.warning("client quota metrics left out of this scrape: %r", exc)
            return
        families: dict[str, GaugeMetricFamily] = {}
        for metric in metrics:
            name = f"kafka_server_{metric.group.lower()}_{metric.name.replace('-', '_')}"
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    name, metric.description, labels=[tag.replace("-", "_") for tag, _value in metric.tags])
            family.add_metric([value for _tag, value in metric.tags], metric.value)
        yield from families.values()


class EventLoopCollector(Collector):
    """The broker's event loop stalls the watchdog saw (common/loop_watchdog.py): how many
    times the loop ran no callback for 2 s or more, and the longest such stall. Every client
    request waits out a stall, so any is worth a look at the broker's log, which has the
    loop's stack."""

    def __init__(self, stalls: Callable[[], tuple[int, float]]) -> None:
        self._stalls = stalls

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        count, longest = self._stalls()
        stalls = CounterMetricFamily("odradek_event_loop_stalls", "Times the broker's event loop ran no "
                                     "callback for 2 s or more")
        stalls.add_metric([], count)
        yield stalls
        yield _gauge("odradek_event_loop_longest_stall_seconds", "The longest stall of the broker's event "
                     "loop since it started", longest)


class GcCollector(Collector):
    """``odradek_gc_pause_seconds{generation}``: every garbage collection's pause
    (common/gc_policy.GcPauseWatch), during which every thread of the broker stands still; and
    ``odradek_python_allocated_blocks``, the memory blocks CPython's allocator holds for live
    objects (sys.getallocatedblocks, 1-4 ms at 9 million blocks): the broker never collects the
    objects it froze (common/gc_policy.py), so a leaked reference cycle stays counted here, and
    a count that keeps growing while the partitions and clients do not is such a leak."""

    def __init__(self, watch: GcPauseWatch, allocated_blocks: Callable[[], int] = sys.getallocatedblocks) -> None:
        self._watch = watch
        self._allocated_blocks = allocated_blocks

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        family = HistogramMetricFamily("odradek_gc_pause_seconds", "Time every thread of the broker stood still "
                                       "in a garbage collection, by generation collected", labels=["generation"])
        for generation in range(3):
            buckets, total = self._watch.histogram(generation)
            family.add_metric([str(generation)], buckets, total)
        yield family
        longest = GaugeMetricFamily("odradek_gc_longest_pause_seconds", "The longest garbage collection pause "
                                    "since the broker started, by generation", labels=["generation"])
        for generation in range(3):
            longest.add_metric([str(generation)], self._watch.longest_s[generation])
        yield longest
        cpu = GaugeMetricFamily("odradek_gc_longest_pause_cpu_seconds", "The most CPU time one garbage collection "
                                "took since the broker started, by generation (less than its pause when the machine "
                                "is short of cores)", labels=["generation"])
        for generation in range(3):
            cpu.add_metric([str(generation)], self._watch.longest_cpu_s[generation])
        yield cpu
        yield _gauge("odradek_python_allocated_blocks", "Memory blocks CPython's allocator holds for live "
                     "objects (sys.getallocatedblocks); growth without more partitions or clients is a leak",
                     self._allocated_blocks())


def controller_view(cache: Any) -> tuple[int, int]:
    """(live brokers, partitions whose leader is not their first replica) in a broker's
    metadata cache (broker.metadata_cache.MetadataCache): on the active controller, what the
    controller sent itself. A partition without a leader counts as imbalanced, topics being
    deleted do not, as in Kafka's ControllerContext.preferredReplicaImbalanceCount. Runs on
    the scrape's thread while the event loop updates the cache: it reads copies."""
    imbalanced = 0
    for topic in cache.topics():
        states = cache.partitions(topic)
        for state in list(states.values()) if states else ():
            if state.replicas and state.leader != state.replicas[0]:
                imbalanced += 1
    return len(cache.live_brokers), imbalanced


def _label_value(value: str) -> str:
    if value.isascii() and '"' not in value and "\\" not in value and "\n" not in value:
        return value
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)
