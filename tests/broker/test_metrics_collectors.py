"""The metrics operators alert on, computed from a broker's state without a cluster: the
controller's ActiveBrokerCount and PreferredReplicaImbalanceCount from the metadata it sent
itself, each replica's log gauges (written as text, parsed back here with prometheus_client's
parser), the follower fetchers' MaxLag, the error codes of every kind of response a broker
sends (kio-encoded, Fetch's hand-written buffers, header-only and controller answers), and the
per-topic series of a topic this broker no longer hosts being dropped."""
from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from odradek.broker import api_keys, metadata_apis
from odradek.broker.fetcher import ReplicaFetcher, ReplicaFetcherManager
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.metrics import BrokerCollector, BrokerMetrics, LogMetrics, controller_view
from odradek.broker.partition import Partition
from odradek.broker.response_errors import error_codes, fetch_error_codes
from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol import controller_api, fast_paths, kio_util
from odradek.protocol.errors import ErrorCode

UNKNOWN, NOT_LEADER, NONE = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             ErrorCode.NONE)


def samples(text: bytes) -> dict[str, float]:
    """'name{k="v",...}' (labels sorted) -> value, as Prometheus would read the scrape."""
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def replica(topic: str, partition: int, *, leader: bool = True, size: int = 0, segments: int = 1,
            start: int = 0, end: int = 0) -> Any:
    log = SimpleNamespace(size_in_bytes=lambda: size, segment_base_offsets=lambda: list(range(segments)),
                          log_start_offset=start, log_end_offset=end)
    return SimpleNamespace(tp=TopicPartition(topic, partition), log=log, is_leader=leader, isr={1, 2, 3},
                           replicas=(1, 2, 3), min_insync_replicas=2)


def registry(partitions: list[Any], *, active: bool = True, view: tuple[int, int] = (3, 0),
             max_lag: int = 0) -> BrokerMetrics:
    metrics = BrokerMetrics()
    metrics.add_collector(BrokerCollector(
        metrics, lambda: partitions, lambda: (0, 0), lambda: active, lambda: (0, len(partitions)), lambda: [],
        brokers_and_imbalance=lambda: view, fetcher_max_lag=lambda: max_lag))
    metrics.add_section(LogMetrics(lambda: partitions).render)
    return metrics


def state(topic: str, partition: int, leader: int, replicas: tuple[int, ...]) -> PartitionState:
    return PartitionState(TopicPartition(topic, partition), 1, leader, 0, replicas, 0, replicas)


def test_the_controller_counts_live_brokers_and_partitions_away_from_their_preferred_leader() -> None:
    cache = MetadataCache()
    brokers = tuple(BrokerInfo(b, "h", 9000 + b) for b in (1, 2, 3))
    cache.update(1, 1, brokers, (state("a", 0, 1, (1, 2, 3)), state("a", 1, 2, (2, 3, 1)),
                                 state("b", 0, 3, (3, 1))))
    assert controller_view(cache) == (3, 0)
    # broker 3 died: its partitions moved to the next replica, or went offline with no other
    cache.update(1, 2, brokers[:2], (state("b", 0, 1, (3, 1)), state("c", 0, -1, (3,))))
    assert controller_view(cache) == (2, 2)
    # a topic being deleted leaves the cache, and the count (Kafka skips topics queued for deletion)
    cache.update(1, 3, brokers[:2], (), deleted=frozenset({TopicPartition("b", 0)}))
    assert controller_view(cache) == (2, 1)

    scraped = samples(registry([], view=(2, 1)).exposition())
    assert scraped["kafka_controller_kafkacontroller_activebrokercount"] == 2
    assert scraped["kafka_controller_kafkacontroller_preferredreplicaimbalancecount"] == 1
    elsewhere = samples(registry([], active=False, view=(2, 1)).exposition())  # only the controller says
    assert elsewhere["kafka_controller_kafkacontroller_activebrokercount"] == 0
    assert elsewhere["kafka_controller_kafkacontroller_preferredreplicaimbalancecount"] == 0


def test_each_replica_reports_its_log_and_a_name_filter_keeps_only_what_is_asked() -> None:
    metrics = registry([replica("orders", 0, size=4096, segments=3, start=10, end=250),
                        replica("orders", 1, leader=False, size=0, end=0)], max_lag=7)
    scraped = samples(metrics.exposition())
    assert scraped['kafka_log_log_size{partition="0",topic="orders"}'] == 4096
    assert scraped['kafka_log_log_numlogsegments{partition="0",topic="orders"}'] == 3
    assert scraped['kafka_log_log_logstartoffset{partition="0",topic="orders"}'] == 10
    assert scraped['kafka_log_log_logendoffset{partition="0",topic="orders"}'] == 250
    assert scraped['kafka_log_log_size{partition="1",topic="orders"}'] == 0  # followers too
    assert scraped['kafka_server_replicafetchermanager_maxlag{clientId="Replica"}'] == 7
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds"):
        assert scraped[name] > 0, name

    only = samples(metrics.exposition(frozenset({"kafka_log_log_size", "kafka_server_replicamanager_leadercount"})))
    assert set(only) == {'kafka_log_log_size{partition="0",topic="orders"}',
                         'kafka_log_log_size{partition="1",topic="orders"}',
                         "kafka_server_replicamanager_leadercount"}


def test_an_odd_label_value_is_escaped() -> None:
    text = LogMetrics(lambda: [replica('we"ird\\', 0, size=1)]).render()
    assert samples(text)['kafka_log_log_size{partition="0",topic="we"ird\\"}'] == 1


def test_per_topic_series_go_when_the_broker_hosts_no_partition_of_the_topic() -> None:
    partitions = [replica("kept", 0)]
    metrics = registry(partitions)
    for topic in ("kept", "deleted"):
        metrics.bytes_in[topic] += 100
        metrics.bytes_out[topic] += 50
        metrics.messages_in[topic] += 1
    scraped = samples(metrics.exposition())
    assert scraped['kafka_server_brokertopicmetrics_bytesin_total{topic="kept"}'] == 100
    assert not [name for name in scraped if 'topic="deleted"' in name]
    assert "deleted" not in metrics.bytes_in  # forgotten, not only hidden
    partitions.clear()  # the last partition of "kept" deleted or moved away
    assert not [name for name in samples(metrics.exposition()) if 'topic="kept"' in name]


def test_request_errors_are_counted_by_api_and_kafka_error_name() -> None:
    metrics = registry([])
    body = {"throttle_time": 0, "brokers": [], "cluster_id": "c", "controller_id": 1, "topics": [
        {"error_code": UNKNOWN, "name": "nosuch", "is_internal": False, "topic_id": None, "partitions": []}]}
    metrics.request_done(api_keys.METADATA, 12, 0.0, kio_util.encode_response(api_keys.METADATA, 12, 1, body))
    metrics.request_done(api_keys.FETCH, 12, 0.0, fast_paths.fetch_response(
        12, 2, [("t", [(0, NONE, 5, 0, b"records", 5, None), (1, NOT_LEADER, -1, -1, b"", -1, None)])], session_id=9))
    metrics.count_errors(api_keys.PRODUCE, [NONE, NONE, UNKNOWN])
    metrics.request_done(api_keys.PRODUCE, 9, 0.0, b"not read: KafkaApis counted it")
    scraped = samples(metrics.exposition())
    errors = {k: v for k, v in scraped.items() if k.startswith("kafka_network_requestmetrics_errors_total")}
    assert errors == {
        'kafka_network_requestmetrics_errors_total{error="UNKNOWN_TOPIC_OR_PARTITION",request="Metadata"}': 1,
        'kafka_network_requestmetrics_errors_total{error="NONE",request="Fetch"}': 2,  # top level + partition 0
        'kafka_network_requestmetrics_errors_total{error="NOT_LEADER_OR_FOLLOWER",request="Fetch"}': 1,
        'kafka_network_requestmetrics_errors_total{error="NONE",request="Produce"}': 2,
        'kafka_network_requestmetrics_errors_total{error="UNKNOWN_TOPIC_OR_PARTITION",request="Produce"}': 1}


def test_a_response_that_cannot_be_read_is_logged_once_and_never_fails_the_request(
        caplog: pytest.LogCaptureFixture) -> None:
    metrics = BrokerMetrics()
    with caplog.at_level(logging.WARNING, "odradek.broker.metrics"):
        for _ in range(3):
            metrics.request_done(api_keys.FETCH, 12, 0.0, [b"\0\0\0\x02", b"\0"])  # cut short
    assert len(caplog.records) == 1 and "Fetch" in caplog.records[0].getMessage()
    assert api_keys.FETCH not in metrics.errors
    assert 'request="Fetch"' in metrics.exposition().decode()  # still counted as a request


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_errors_are_read_from_every_version_fast_paths_writes(version: int) -> None:
    response = fast_paths.fetch_response(version, 7, [
        ("a", [(0, NONE, 10, 0, b"x" * 300, 10, None), (1, NOT_LEADER, -1, -1, b"", -1, None),
               (2, NONE, 3, 0, b"yy", 3, [(4, 1)])]),
        ("b" * 200, [(0, ErrorCode.OFFSET_OUT_OF_RANGE, -1, 5, b"", -1, None)])], error_code=0, session_id=3)
    assert fetch_error_codes(version, response) == [0, 0, NOT_LEADER, 0, ErrorCode.OFFSET_OUT_OF_RANGE]
    session_gone = fast_paths.fetch_response(version, 7, [], error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert fetch_error_codes(version, session_gone) == [ErrorCode.FETCH_SESSION_ID_NOT_FOUND if version >= 7 else 0]


def test_header_only_and_controller_answers_give_their_top_level_error() -> None:
    # an ApiVersions request of a version we lack is answered in v0, whatever was asked
    unsupported = metadata_apis.unsupported_api_versions(5)
    assert error_codes(api_keys.API_VERSIONS, 99, unsupported) == [ErrorCode.UNSUPPORTED_VERSION]
    stale = controller_api.encode_response(controller_api.API_LEADER_AND_ISR,
                                           controller_api.VERSIONS[controller_api.API_LEADER_AND_ISR], 3,
                                           controller_api.ControllerResponse(ErrorCode.STALE_CONTROLLER_EPOCH))
    assert error_codes(controller_api.API_LEADER_AND_ISR, 2, stale) == [ErrorCode.STALE_CONTROLLER_EPOCH]
    heartbeat = kio_util.encode_response(api_keys.HEARTBEAT, 4, 1, {"throttle_time": 0,
                                                                    "error_code": ErrorCode.REBALANCE_IN_PROGRESS})
    assert error_codes(api_keys.HEARTBEAT, 4, heartbeat) == [ErrorCode.REBALANCE_IN_PROGRESS]


class IdleFetcher(ReplicaFetcher):
    def start(self) -> None:  # no task: only the lag bookkeeping is looked at
        pass


def test_max_lag_is_the_largest_gap_to_a_leaders_high_watermark_over_every_fetcher(tmp_path: Path) -> None:
    made: dict[int, ReplicaFetcher] = {}

    def factory(leader: BrokerInfo) -> ReplicaFetcher:
        made[leader.id] = IdleFetcher(1, leader, 500, 1 << 20)
        return made[leader.id]

    manager = ReplicaFetcherManager(1, factory)
    assert manager.max_lag() == 0
    followed = {}
    for leader, topic in ((2, "a"), (3, "b")):
        tp = TopicPartition(topic, 0)
        p = Partition(tp, Log.open(tmp_path / f"{topic}-0", LogConfig()), broker_id=1)
        p.apply_state(PartitionState(tp, 1, leader, 1, (1, 2, 3), 1, (1, 2, 3)))
        manager.follow(p, BrokerInfo(leader, "h", 9000 + leader))
        followed[leader] = (made[leader], made[leader]._states[tp])

    def answer(leader: int, high_watermark: int) -> None:
        fetcher, fetch_state = followed[leader]
        fetcher._apply(fetch_state, SimpleNamespace(error_code=0, records=b"", high_watermark=high_watermark,
                                                    log_start_offset=0))

    answer(2, 40)  # our logs are empty: 40 behind broker 2's partition, 15 behind broker 3's
    answer(3, 15)
    assert manager.max_lag() == 40
    assert not followed[2][1].in_sync
    answer(2, 0)
    assert manager.max_lag() == 15 and followed[2][1].in_sync
    manager.stop_following(TopicPartition("b", 0))  # a partition no longer followed has no lag
    assert manager.max_lag() == 0


def test_a_built_response_carries_every_error_code_it_was_given() -> None:
    """Kafka's errorCounts: top-level and nested, NONE included, without reading the bytes back."""
    metadata = kio_util.encode_response(api_keys.METADATA, 12, 1, {
        "throttle_time": 0, "brokers": [], "cluster_id": None, "controller_id": 1, "topics": [
            {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": "gone", "topic_id": None,
             "is_internal": False, "partitions": []},
            {"error_code": 0, "name": "t", "topic_id": None, "is_internal": False, "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 0, "replica_nodes": [1],
                 "isr_nodes": [1], "offline_replicas": []},
                {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": 1, "leader_id": -1,
                 "leader_epoch": 0, "replica_nodes": [2], "isr_nodes": [], "offline_replicas": [2]}]}]})
    assert sorted(error_codes(api_keys.METADATA, 12, metadata)) == sorted(
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0, 0, ErrorCode.LEADER_NOT_AVAILABLE])


def test_transactions_show_open_count_aborts_by_reason_and_lagging_partitions_only(tmp_path: Path) -> None:
    """odradek_transactions_* from the coordinator and kafka_cluster_partition_laststableoffsetlag
    from real partitions: one whose transaction is open lags by its records, an idle one is left
    out, and so is one this broker only follows."""
    from odradek.broker.metrics import TransactionsCollector
    from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch

    def led(name: str, leader: int = 1) -> Partition:
        tp = TopicPartition(name, 0)
        p = Partition(tp, Log.open(tmp_path / f"{name}-0", LogConfig()), broker_id=1)
        p.apply_state(PartitionState(tp, 1, leader, 0, (1,), 0, (1,)))
        return p
    busy, idle = led("busy"), led("idle")
    busy.append_as_leader(build_batch([(b"k", b"v")] * 3, producer_id=7, producer_epoch=0, base_sequence=0,
                                      attributes=TRANSACTIONAL_FLAG))
    idle.append_as_leader(build_batch([(b"k", b"v")]))
    metrics = BrokerMetrics()
    metrics.add_collector(TransactionsCollector(lambda: 2, lambda: {"timeout": 1, "client": 4},
                                                lambda: [busy, idle]))
    scraped = samples(metrics.exposition())
    assert scraped["odradek_transactions_open"] == 2
    assert scraped['odradek_transactions_aborted_total{reason="client"}'] == 4
    assert scraped['odradek_transactions_aborted_total{reason="timeout"}'] == 1
    lags = {k: v for k, v in scraped.items() if k.startswith("kafka_cluster_partition_laststableoffsetlag")}
    assert lags == {'kafka_cluster_partition_laststableoffsetlag{partition="0",topic="busy"}': 3}


def test_event_loop_stalls_are_scraped_from_a_real_watchdog() -> None:
    """odradek_event_loop_*: a watchdog over a loop blocked for 1.2 s counts one stall of
    about that length."""
    import asyncio
    import time

    from odradek.broker.metrics import EventLoopCollector
    from odradek.common.loop_watchdog import LoopWatchdog

    async def blocked_once() -> LoopWatchdog:
        watchdog = LoopWatchdog(asyncio.get_running_loop(), stall_s=0.3)
        watchdog.start()
        await asyncio.sleep(0.3)
        time.sleep(1.2)
        await asyncio.sleep(0.8)
        watchdog.stop()
        return watchdog
    watchdog = asyncio.run(blocked_once())
    metrics = BrokerMetrics()
    metrics.add_collector(EventLoopCollector(lambda: (watchdog.stalls, watchdog.longest_stall_s)))
    scraped = samples(metrics.exposition())
    assert scraped["odradek_event_loop_stalls_total"] == 1
    assert 0.8 < scraped["odradek_event_loop_longest_stall_seconds"] < 1.8
