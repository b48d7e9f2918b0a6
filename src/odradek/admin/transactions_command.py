"""Kafka's TransactionsCommand (kafka-transactions.sh, KIP-664) behind `odradek transactions`:
list, describe, find-hanging and abort.

Only the Kafka protocol, as raw requests (confluent-kafka has no calls for these): Metadata,
ListTransactions to every broker, FindCoordinator (key type 1) and DescribeTransactions to a
transactional id's coordinator, DescribeProducers to the partitions' leaders (or to one broker,
find-hanging --broker-id), WriteTxnMarkers to a partition's leader (Kafka's
Admin.abortTransaction). So it works against Apache Kafka 3.x as well.

A hanging transaction (Kafka's FindHangingTransactionsCommand) is one a partition holds open
that no coordinator will ever end: a producer's transaction open there for longer than the
largest transaction timeout (--max-transaction-timeout, 15 minutes, the brokers' default
transaction.max.timeout.ms), whose producer id no coordinator lists, or whose coordinator does
not name that partition in the id's transaction (while a transaction is open or being
completed, the coordinator names every partition still owed a marker). Its records keep every
read_committed consumer of the partition at the transaction's first offset (the last stable
offset) until an operator aborts it: an ABORT marker written by the partition's leader.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from odradek.admin.admin_client import (
    connection_failure,
    format_table,
    metadata_request,
    request_first,
    send_request,
    send_request_raw,
)
from odradek.admin.errors import AdminError
from odradek.broker.txn_admin_apis import DescribedTransaction, read_describe_transactions_response
from odradek.coordinator.transaction.transaction_metadata import TransactionState
from odradek.protocol.errors import ErrorCode, error_name, is_retriable

FIND_COORDINATOR, WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 10, 27, 61, 65, 66
TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key type of a transactional id
CLIENT_ID = "odradek-transactions"
#: partitions per DescribeProducers (Kafka's FindHangingTransactionsCommand.MAX_BATCH_SIZE)
MAX_BATCH_SIZE = 500
#: Kafka's names of a transaction's states, what ListTransactions filters on and answers with
STATES = tuple(state.kafka_name for state in TransactionState)
#: a coordinator moving or loading its partition of __transaction_state: asked again
COORDINATOR_RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.NOT_COORDINATOR}
RETRY_BACKOFF_S = 0.2

Partition = tuple[str, int]
T = TypeVar("T")


def partition_name(tp: Partition) -> str:
    return f"{tp[0]}-{tp[1]}"


class TransactionsAdmin:
    """The requests of one command: each request may take ``timeout`` seconds, and answers that
    say "not now" (a coordinator or leader moving or loading) are asked again until then."""

    def __init__(self, bootstrap: str, timeout: float) -> None:
        self.bootstrap, self.timeout = bootstrap, timeout

    def _send(self, server: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return send_request(server, api_key, version, body, self.timeout, CLIENT_ID)

    def _metadata(self, topics: list[str] | None) -> Any:
        return metadata_request(self.bootstrap, topics, self.timeout)

    @staticmethod
    def _addresses(md: Any) -> dict[int, str]:
        return {int(b.node_id): f"{b.host}:{b.port}" for b in md.brokers}

    # -- list ------------------------------------------------------------------------------

    def list_transactions(self, states: Sequence[str] = (), producer_ids: Sequence[int] = (),
             duration_ms: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
        """Every live broker's ListTransactions, merged (Kafka's Admin.listTransactions): each
        id as {"transactional_id", "coordinator", "producer_id", "state"}, sorted by id; and
        `broker N: why` for each broker that could not answer. Filters: the states and producer
        ids (none: all), and with ``duration_ms`` (ListTransactions v1, Kafka 3.8+) only
        transactions running longer than that."""
        addresses = self._addresses(self._metadata([]))
        version = 0 if duration_ms is None else 1
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids),
                "duration_filter": -1 if duration_ms is None else duration_ms}
        listed: list[dict[str, Any]] = []
        errors: list[str] = []
        for broker, address in sorted(addresses.items()):
            try:
                response = self._retrying(functools.partial(self._send, address, LIST_TRANSACTIONS, version, body),
                                          lambda r: int(r.error_code) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            except (OSError, ValueError) as exc:
                errors.append(f"broker {broker}: cannot reach {address}: {connection_failure(exc)}")
                continue
            if int(response.error_code):
                errors.append(f"broker {broker}: {error_name(int(response.error_code))}")
                continue
            listed += [{"transactional_id": t.transactional_id, "coordinator": broker, "producer_id": int(t.producer_id),
                        "state": t.transaction_state} for t in response.transaction_states]
        return sorted(listed, key=lambda t: (t["transactional_id"], t["coordinator"])), errors

    def _retrying(self, ask: Callable[[], T], again: Callable[[T], bool]) -> T:
        """``ask()`` until ``again`` is false of its answer or the timeout has passed."""
        deadline = time.monotonic() + self.timeout
        while True:
            answer = ask()
            if not again(answer) or time.monotonic() > deadline:
                return answer
            time.sleep(RETRY_BACKOFF_S)

    # -- describe --------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> dict[str, Any]:
        """The id as its coordinator holds it (Kafka's DescribeTransactionsCommand):
        {"transactional_id", "coordinator", "producer_id", "producer_epoch", "state",
        "timeout_ms", "start_time_ms" (null: no transaction yet), "duration_ms" (null likewise),
        "partitions" [{"topic", "partition"}]}. AdminError if the coordinator does not hold it."""
        coordinator, described = self._describe(transactional_id)
        if described.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            raise AdminError(f"transactional id {transactional_id!r} not found (TRANSACTIONAL_ID_NOT_FOUND): its "
                             f"coordinator, broker {coordinator}, holds no such id (`odradek transactions list` "
                             f"lists the ids)")
        if described.error_code:
            raise AdminError(f"cannot describe transactional id {transactional_id!r}: "
                             f"{error_name(described.error_code)}")
        return _description(coordinator, described, time.time() * 1000)

    def _describe(self, transactional_id: str) -> tuple[int, DescribedTransaction]:
        """FindCoordinator, then DescribeTransactions to the coordinator, asked again while the
        coordinator moves or loads: (coordinator id, its answer for the id, error or not)."""
        deadline = time.monotonic() + self.timeout
        servers = self.bootstrap.split(",")
        while True:
            found = request_first(servers, self.bootstrap, FIND_COORDINATOR, 3,
                                  {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE}, self.timeout,
                                  CLIENT_ID)
            coordinator, error = int(found.node_id), int(found.error_code)
            described = DescribedTransaction(error, transactional_id, "", 0, -1, -1, -1, ())
            if error == 0:
                address = f"{found.host}:{int(found.port)}"
                try:
                    frame = send_request_raw(address, DESCRIBE_TRANSACTIONS, 0,
                                             {"transactional_ids": [transactional_id]}, self.timeout, CLIENT_ID)
                    _, answers = read_describe_transactions_response(frame)
                    described = next(d for d in answers if d.transactional_id == transactional_id)
                except (OSError, ValueError, StopIteration):
                    described = described._replace(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if described.error_code not in COORDINATOR_RETRIABLE or time.monotonic() > deadline:
                return coordinator, described
            time.sleep(RETRY_BACKOFF_S)

    # -- DescribeProducers -----------------------------------------------------------------

    def producers(self, partitions: list[Partition], broker: int | None = None
                  ) -> tuple[dict[Partition, list[dict[str, Any]]], dict[Partition, str]]:
        """Each partition's active producers (DescribeProducers, Kafka's Admin.describeProducers):
        asked of its leader, or of ``broker`` (which answers from its own replica, as Kafka's
        brokers do), MAX_BATCH_SIZE partitions a request. A leader moving is waited out until
        the timeout; the partitions that could not be described come back with why."""
        found: dict[Partition, list[dict[str, Any]]] = {}
        failed: dict[Partition, str] = {}
        pending = sorted(set(partitions))
        deadline = time.monotonic() + self.timeout
        while pending:
            md = self._metadata(sorted({t for t, _ in pending}))
            addresses = self._addresses(md)
            leaders = {(t.name, int(p.partition_index)): int(p.leader_id) for t in md.topics for p in t.partitions}
            by_broker: dict[int, list[Partition]] = {}
            retry: list[Partition] = []
            for tp in pending:
                target = broker if broker is not None else leaders.get(tp, -1)
                if target in addresses:
                    by_broker.setdefault(target, []).append(tp)
                elif tp not in leaders:
                    failed[tp] = "UNKNOWN_TOPIC_OR_PARTITION"
                else:
                    failed[tp] = "no leader" if broker is None else f"broker {broker} is not live"
                    retry.append(tp)
            for target, tps in sorted(by_broker.items()):
                for start in range(0, len(tps), MAX_BATCH_SIZE):
                    batch = tps[start:start + MAX_BATCH_SIZE]
                    self._describe_producers(addresses[target], target, batch, found, failed, retry,
                                             retriable=broker is None)
            pending = [tp for tp in retry if tp not in found]
            if pending and time.monotonic() > deadline:
                break
            if pending:
                time.sleep(RETRY_BACKOFF_S)
        return found, {tp: why for tp, why in failed.items() if tp not in found}

    def _describe_producers(self, address: str, broker: int, batch: list[Partition],
                            found: dict[Partition, list[dict[str, Any]]], failed: dict[Partition, str],
                            retry: list[Partition], retriable: bool) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in batch:
            by_topic.setdefault(topic, []).append(partition)
        body = {"topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]}
        try:
            response = self._send(address, DESCRIBE_PRODUCERS, 0, body)
        except (OSError, ValueError) as exc:
            for tp in batch:
                failed[tp] = f"cannot reach broker {broker} at {address}: {connection_failure(exc)}"
            retry.extend(batch if retriable else ())
            return
        for t in response.topics:
            for p in t.partitions:
                tp, code = (t.name, int(p.partition_index)), int(p.error_code)
                if code == 0:
                    found[tp] = [_producer(s) for s in p.active_producers]
                    continue
                failed[tp] = f"{error_name(code)} from broker {broker}" + (f" ({p.error_message})"
                                                                            if p.error_message else "")
                if retriable and is_retriable(code):
                    retry.append(tp)

    # -- find-hanging ----------------------------------------------------------------------

    def find_hanging(self, topic: str | None, partition: int | None, broker: int | None,
                     max_transaction_timeout_ms: int) -> tuple[list[dict[str, Any]], list[str]]:
        """Kafka's FindHangingTransactionsCommand: the open transactions of ``topic`` (or one
        partition of it), or of every partition with a replica on ``broker`` (both: the
        partitions of the topic there; neither: every partition), that have been open longer than
        ``max_transaction_timeout_ms`` (by the producer's last timestamp) and that no
        coordinator will end (see the module's docstring). Each as {"topic", "partition",
        "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
        "last_timestamp", "duration_min"}; and `T-P: why` for each partition that could not
        be described."""
        partitions = self._partitions_to_search(topic, partition, broker)
        found, failed = self.producers(partitions, broker)
        now_ms = time.time() * 1000
        candidates = [{"topic": tp[0], "partition": tp[1], **state}
                      for tp, states in sorted(found.items()) for state in states
                      if state["current_txn_start_offset"] >= 0
                      and now_ms - state["last_timestamp"] > max_transaction_timeout_ms]
        hanging = self._without_live_coordinator(candidates) if candidates else []
        rows = [{"topic": c["topic"], "partition": c["partition"], "producer_id": c["producer_id"],
                 "producer_epoch": c["producer_epoch"], "coordinator_epoch": c["coordinator_epoch"],
                 "start_offset": c["current_txn_start_offset"], "last_timestamp": c["last_timestamp"],
                 "duration_min": int((now_ms - c["last_timestamp"]) // 60_000)} for c in hanging]
        return rows, [f"{partition_name(tp)}: {why}" for tp, why in sorted(failed.items())]

    def _partitions_to_search(self, topic: str | None, partition: int | None, broker: int | None) -> list[Partition]:
        """Kafka's collectTopicPartitionsToSearch: the topic's partitions (or the one asked
        for), else every topic's, internal ones too; with ``broker``, those it has a replica of."""
        md = self._metadata([topic] if topic is not None else None)
        if broker is not None:
            live = self._addresses(md)
            if broker not in live:
                raise AdminError(f"broker {broker} is not a live broker of the cluster (live: "
                                 f"{','.join(map(str, sorted(live)))})")
        replicas: dict[Partition, list[int]] = {}
        for t in md.topics:
            code = int(t.error_code)
            if topic is not None and code:
                raise AdminError(f"topic {t.name!r} does not exist" if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                                 else f"{error_name(code)}: topic {t.name!r}")
            for p in t.partitions:
                replicas[(t.name, int(p.partition_index))] = [int(r) for r in p.replica_nodes]
        if partition is not None:
            assert topic is not None
            if (topic, partition) not in replicas:
                raise AdminError(f"topic {topic!r} has no partition {partition} (it has {len(replicas)})")
            replicas = {(topic, partition): replicas[(topic, partition)]}
        return sorted(tp for tp, nodes in replicas.items() if broker is None or broker in nodes)

    def _without_live_coordinator(self, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Kafka's filterHangingTransactions: a candidate is hanging unless its producer id is a
        transactional id's whose coordinator still names the candidate's partition."""
        producer_ids = sorted({c["producer_id"] for c in candidates})
        listed, errors = self.list_transactions(producer_ids=producer_ids)
        if errors:
            raise AdminError(f"cannot list the transactions of {len(producer_ids)} producers: {'; '.join(errors)}")
        ids = {t["producer_id"]: t["transactional_id"] for t in listed if t["producer_id"] in producer_ids}
        owed: dict[str, set[Partition] | None] = {}  # transactional id -> partitions still owed a marker
        for transactional_id in sorted(set(ids.values())):
            _, described = self._describe(transactional_id)
            if described.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                owed[transactional_id] = None
            elif described.error_code:
                raise AdminError(f"cannot describe transactional id {transactional_id!r}: "
                                 f"{error_name(described.error_code)}")
            else:
                owed[transactional_id] = set(described.partitions)
        hanging = []
        for c in candidates:
            transactional_id = ids.get(c["producer_id"])
            partitions = owed.get(transactional_id) if transactional_id is not None else None
            if partitions is None or (c["topic"], c["partition"]) not in partitions:
                hanging.append(c)
        return hanging

    # -- abort -----------------------------------------------------------------------------

    def abort(self, topic: str, partition: int, start_offset: int | None = None, producer_id: int | None = None,
              producer_epoch: int | None = None, coordinator_epoch: int | None = None) -> dict[str, Any]:
        """Kafka's AbortTransactionCommand and Admin.abortTransaction: an ABORT marker for the
        producer's transaction open on the partition, written by its leader (WriteTxnMarkers).
        The transaction is named by its first offset (the producer, its epoch and the
        coordinator epoch of its last marker are then read with DescribeProducers), or by those
        three (a coordinator epoch below 0, none yet, is sent as 0, as Kafka's tool does).
        Returns what was aborted: {"topic", "partition", "producer_id", "producer_epoch",
        "coordinator_epoch"}."""
        tp = (topic, partition)
        self._check_partition(tp)
        if start_offset is not None:
            producer_id, producer_epoch, coordinator_epoch = self._open_at(tp, start_offset)
        assert producer_id is not None and producer_epoch is not None and coordinator_epoch is not None
        spec = {"topic": topic, "partition": partition, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "coordinator_epoch": max(coordinator_epoch, 0)}
        body = {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                             "transaction_result": False, "coordinator_epoch": spec["coordinator_epoch"],
                             "topics": [{"name": topic, "partition_indexes": [partition]}]}]}
        code = self._retrying(lambda: self._write_marker(tp, body), is_retriable)
        if code:
            raise AdminError(f"cannot abort the transaction of producer {producer_id} on {partition_name(tp)}: "
                             f"{error_name(code)}{_ABORT_HINTS.get(code, '')}")
        return spec

    def _check_partition(self, tp: Partition) -> None:
        md = self._metadata([tp[0]])
        t = md.topics[0] if md.topics else None
        if t is None or int(t.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise AdminError(f"topic {tp[0]!r} does not exist")
        if int(t.error_code):
            raise AdminError(f"{error_name(int(t.error_code))}: topic {tp[0]!r}")
        if tp[1] not in {int(p.partition_index) for p in t.partitions}:
            raise AdminError(f"topic {tp[0]!r} has no partition {tp[1]} (it has {len(t.partitions)})")

    def _open_at(self, tp: Partition, start_offset: int) -> tuple[int, int, int]:
        """The producer whose open transaction on ``tp`` starts at ``start_offset``: its id,
        epoch and coordinator epoch (Kafka's buildAbortSpec)."""
        found, failed = self.producers([tp])
        if tp in failed:
            raise AdminError(f"cannot describe the producers of {partition_name(tp)}: {failed[tp]}")
        for state in found.get(tp, []):
            if state["current_txn_start_offset"] == start_offset:
                return state["producer_id"], state["producer_epoch"], state["coordinator_epoch"]
        starts = sorted(s["current_txn_start_offset"] for s in found.get(tp, []) if s["current_txn_start_offset"] >= 0)
        open_ones = f"open ones start at {', '.join(map(str, starts))}" if starts else "none is open there"
        raise AdminError(f"no open transaction starts at offset {start_offset} on {partition_name(tp)} ({open_ones}; "
                         f"`odradek transactions find-hanging --topic {tp[0]}` shows them)")

    def _write_marker(self, tp: Partition, body: dict[str, Any]) -> int:
        """One WriteTxnMarkers to the partition's leader: its error code for the partition
        (NOT_LEADER_OR_FOLLOWER while it has none, or it cannot be reached)."""
        md = self._metadata([tp[0]])
        leaders = {int(p.partition_index): int(p.leader_id) for t in md.topics for p in t.partitions}
        address = self._addresses(md).get(leaders.get(tp[1], -1))
        if address is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        try:
            response = self._send(address, WRITE_TXN_MARKERS, 1, body)
        except (OSError, ValueError):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        codes = [int(p.error_code) for m in response.markers for t in m.topics for p in t.partitions
                 if t.name == tp[0] and int(p.partition_index) == tp[1]]
        return codes[0] if codes else ErrorCode.UNKNOWN_SERVER_ERROR


#: what an abort's refusal means for the operator
_ABORT_HINTS: dict[int, str] = {
    ErrorCode.INVALID_PRODUCER_EPOCH: " (the producer has a newer epoch on that partition: give the epoch "
                                      "`odradek transactions find-hanging` shows, or --start-offset)",
    ErrorCode.PRODUCER_FENCED: " (the producer has a newer epoch on that partition: give the epoch "
                               "`odradek transactions find-hanging` shows, or --start-offset)",
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: " (a later coordinator epoch has written a marker there: give the "
                                              "coordinator epoch `odradek transactions find-hanging` shows, or "
                                              "--start-offset)",
}


def _producer(state: Any) -> dict[str, Any]:
    return {"producer_id": int(state.producer_id), "producer_epoch": int(state.producer_epoch),
            "last_sequence": int(state.last_sequence), "last_timestamp": int(state.last_timestamp),
            "coordinator_epoch": int(state.coordinator_epoch),
            "current_txn_start_offset": int(state.current_txn_start_offset)}


def _description(coordinator: int, d: DescribedTransaction, now_ms: float) -> dict[str, Any]:
    started = d.start_ms if d.start_ms >= 0 else None
    return {"transactional_id": d.transactional_id, "coordinator": coordinator, "producer_id": d.producer_id,
            "producer_epoch": d.producer_epoch, "state": d.state, "timeout_ms": d.timeout_ms,
            "start_time_ms": started, "duration_ms": None if started is None else max(0, int(now_ms - started)),
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(d.partitions)]}


# -- text ------------------------------------------------------------------------------------

def format_list(listed: list[dict[str, Any]]) -> str:
    """kafka-transactions.sh list's table: TransactionalId Coordinator ProducerId TransactionState."""
    if not listed:
        return "no transactional ids"
    return format_table([("TransactionalId", "Coordinator", "ProducerId", "TransactionState")]
                        + [(t["transactional_id"], str(t["coordinator"]), str(t["producer_id"]), t["state"])
                           for t in listed])


def format_describe(d: dict[str, Any]) -> str:
    """kafka-transactions.sh describe's table ("None" where no transaction has started)."""
    def shown(value: int | None) -> str:
        return "None" if value is None else str(value)

    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in d["partitions"])
    return format_table([("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                          "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                          "TopicPartitions"),
                         (str(d["coordinator"]), d["transactional_id"], str(d["producer_id"]), str(d["producer_epoch"]),
                          d["state"], str(d["timeout_ms"]), shown(d["start_time_ms"]), shown(d["duration_ms"]),
                          partitions)])


def format_hanging(rows: list[dict[str, Any]]) -> str:
    """kafka-transactions.sh find-hanging's table, or a line saying there is none."""
    if not rows:
        return "no hanging transactions"
    return format_table([("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                          "LastTimestamp", "Duration(min)")]
                        + [(r["topic"], str(r["partition"]), str(r["producer_id"]), str(r["producer_epoch"]),
                            str(r["coordinator_epoch"]), str(r["start_offset"]), str(r["last_timestamp"]),
                            str(r["duration_min"])) for r in rows])
