"""The operators' transaction APIs as a broker answers them (broker/txn_admin_apis.py):
DescribeProducers from real partitions' producer state, Kafka's per-topic and per-partition
errors, and DescribeTransactions and ListTransactions encoded from what the coordinator says,
read back as a client reads them."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.serial.errors import OutOfBoundValue

from odradek.broker import api_keys, txn_admin_apis
from odradek.broker.metadata_cache import MetadataCache
from odradek.broker.partition import Partition
from odradek.common.metadata import BrokerInfo, PartitionState, TopicPartition
from odradek.coordinator.transaction.transaction_coordinator import TransactionDescription
from odradek.coordinator.transaction.transaction_metadata import TransactionState
from odradek.coordinator.transaction.transaction_state_manager import ListedTransaction, TransactionListing
from odradek.log.log import Log, LogConfig
from odradek.protocol import kio_util
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch

LED, FOLLOWED, ELSEWHERE = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
ME, OTHER = 1, 2


def partition(tmp_path: Path, tp: TopicPartition, leader: int) -> Partition:
    p = Partition(tp, Log.open(tmp_path / f"{tp.topic}-{tp.partition}", LogConfig()), broker_id=ME)
    p.apply_state(PartitionState(tp, 1, leader, 1, (ME, OTHER), 0, (ME, OTHER)))
    return p


def context(tmp_path: Path, coordinator: Any = None) -> tuple[SimpleNamespace, dict[TopicPartition, Partition]]:
    """A broker (1) leading t-0, following t-1 and hosting no replica of t-2."""
    hosted = {LED: partition(tmp_path, LED, ME), FOLLOWED: partition(tmp_path, FOLLOWED, OTHER)}
    metadata = MetadataCache()
    metadata.update(1, 1, (BrokerInfo(ME, "h", 1), BrokerInfo(OTHER, "h", 2)),
                    tuple(PartitionState(tp, 1, OTHER if tp != LED else ME, 1, (ME, OTHER), 0, (ME, OTHER))
                          for tp in (LED, FOLLOWED, ELSEWHERE)))
    return SimpleNamespace(replica_manager=SimpleNamespace(get=hosted.get), metadata=metadata,
                           transaction_coordinator=coordinator, authorizer=None), hosted


def ask(handler: Any, ctx: Any, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """``handler`` given the request as the broker decodes it; its response as a client reads it."""
    frame = kio_util.encode_request(api_key, version, 7, "test", body)
    header, request = kio_util.decode_request(frame[4:])
    response = handler(ctx, header, request, version)
    correlation_id, decoded = kio_util.decode_response(api_key, version, response[4:])
    assert correlation_id == 7
    return decoded


def test_describe_producers_answers_each_replicas_producers_and_kafkas_errors(tmp_path: Path) -> None:
    ctx, hosted = context(tmp_path)
    led = hosted[LED]
    led.append_as_leader(build_batch([(b"k", b"v")] * 3, producer_id=7, producer_epoch=2, base_sequence=0,
                                     attributes=TRANSACTIONAL_FLAG, timestamp_ms=1_700_000_000_123))  # 0-2, open
    led.append_as_leader(build_batch([(b"k", b"v")] * 2, producer_id=8, producer_epoch=0, base_sequence=0,
                                     timestamp_ms=1_700_000_000_456))                  # idempotent only
    led.append_marker(9, 4, commit=False, coordinator_epoch=6)                          # a marker, no batch
    hosted[FOLLOWED].append_as_follower(build_batch([(b"k", b"v")], producer_id=7, producer_epoch=2,
                                                    base_sequence=3, attributes=TRANSACTIONAL_FLAG,
                                                    timestamp_ms=5, base_offset=0), 0)
    response = ask(txn_admin_apis.describe_producers, ctx, api_keys.DESCRIBE_PRODUCERS, 0, {"topics": [
        {"name": "t", "partition_indexes": [0, 1, 2, 9]}, {"name": "missing", "partition_indexes": [0]},
        {"name": "..", "partition_indexes": [0, 1]}]})
    by_topic = {t.name: {p.partition_index: p for p in t.partitions} for t in response.topics}

    def producers(p: Any) -> set[tuple[int, ...]]:
        return {(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp, s.coordinator_epoch,
                 s.current_txn_start_offset) for s in p.active_producers}

    t = by_topic["t"]
    assert t[0].error_code == 0 and producers(t[0]) == {
        (7, 2, 2, 1_700_000_000_123, -1, 0), (8, 0, 1, 1_700_000_000_456, -1, -1), (9, 4, -1, -1, 6, -1)}
    assert t[1].error_code == 0 and producers(t[1]) == {(7, 2, 3, 5, -1, 0)}  # a follower answers too, as Kafka's
    assert t[2].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not t[2].active_producers  # no replica here
    assert t[9].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_topic["missing"][0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    illegal = by_topic[".."]
    assert {p.error_code for p in illegal.values()} == {ErrorCode.INVALID_TOPIC_EXCEPTION}
    assert all(p.error_message and "illegal" in p.error_message for p in illegal.values())


class Coordinator:
    """Answers as a transaction coordinator would, recording what it was asked."""

    def __init__(self) -> None:
        self.asked: list[Any] = []

    def list_transactions(self, producer_ids: Any, state_names: Any, duration_ms: int) -> TransactionListing:
        self.asked.append((set(producer_ids), list(state_names), duration_ms))
        return TransactionListing(ErrorCode.NONE, ("Bogus",), (ListedTransaction("a", 5, TransactionState.ONGOING),
                                                               ListedTransaction("b", 6, TransactionState.EMPTY)))

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        if transactional_id == "open":
            return TransactionDescription("open", ErrorCode.NONE, TransactionState.ONGOING, 5, 3, 60_000,
                                          1_700_000_000_000, frozenset({TopicPartition("x", 2), TopicPartition("x", 0),
                                                                        TopicPartition("y", 1)}))
        if transactional_id == "new":
            return TransactionDescription("new", ErrorCode.NONE, TransactionState.EMPTY, 6, 0, 60_000, -1)
        return TransactionDescription(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)


def test_list_transactions_passes_the_filters_v1_its_duration(tmp_path: Path) -> None:
    coordinator = Coordinator()
    ctx, _ = context(tmp_path, coordinator)
    v0 = ask(txn_admin_apis.list_transactions, ctx, api_keys.LIST_TRANSACTIONS, 0,
             {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [5]})
    assert (v0.error_code, v0.unknown_state_filters) == (0, ("Bogus",))
    assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in v0.transaction_states] == [
        ("a", 5, "Ongoing"), ("b", 6, "Empty")]
    ask(txn_admin_apis.list_transactions, ctx, api_keys.LIST_TRANSACTIONS, 1,
        {"state_filters": [], "producer_id_filters": [], "duration_filter": 1234})
    assert coordinator.asked == [({5}, ["Ongoing", "Bogus"], -1), (set(), [], 1234)]


def test_describe_transactions_is_read_back_even_where_kio_cannot(tmp_path: Path) -> None:
    """An id with no transaction yet has start time -1, as Kafka sends it; kio's reader refuses
    a negative timestamp, so tools and the fuzzer read the response with
    read_describe_transactions_response."""
    ctx, _ = context(tmp_path, Coordinator())
    frame = kio_util.encode_request(api_keys.DESCRIBE_TRANSACTIONS, 0, 9, "test",
                                    {"transactional_ids": ["open", "new", "gone"]})
    header, request = kio_util.decode_request(frame[4:])
    response = txn_admin_apis.describe_transactions(ctx, header, request, 0)[4:]
    with pytest.raises(OutOfBoundValue):
        kio_util.decode_response(api_keys.DESCRIBE_TRANSACTIONS, 0, response)
    correlation_id, described = txn_admin_apis.read_describe_transactions_response(response)
    assert correlation_id == 9
    assert described == [
        txn_admin_apis.DescribedTransaction(0, "open", "Ongoing", 60_000, 1_700_000_000_000, 5, 3,
                                            (("x", 0), ("x", 2), ("y", 1))),
        txn_admin_apis.DescribedTransaction(0, "new", "Empty", 60_000, -1, 6, 0, ()),
        txn_admin_apis.DescribedTransaction(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "gone", "", 0, 0, 0, 0, ())]
    # without the id of no transaction, kio agrees with the reader
    frame = kio_util.encode_request(api_keys.DESCRIBE_TRANSACTIONS, 0, 9, "test", {"transactional_ids": ["open"]})
    header, request = kio_util.decode_request(frame[4:])
    response = txn_admin_apis.describe_transactions(ctx, header, request, 0)[4:]
    (state,) = kio_util.decode_response(api_keys.DESCRIBE_TRANSACTIONS, 0, response)[1].transaction_states
    assert (state.transaction_state, int(state.transaction_start_time.timestamp() * 1000), state.producer_epoch,
            [(t.topic, list(t.partitions)) for t in state.topics]) == (
        "Ongoing", 1_700_000_000_000, 3, [("x", [0, 2]), ("y", [1])])
    with pytest.raises(ValueError):
        txn_admin_apis.read_describe_transactions_response(response + b"\0")  # trailing bytes
