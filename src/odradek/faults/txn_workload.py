"""The transactional workload's clients (`python -m odradek.faults --workload transactions`):
transactional confluent-kafka producers, each with a transactional.id of its own, and two
readers tailing every partition from offset 0, one at read_committed and one at
read_uncommitted (the control).

Each producer is made once for the whole run, in a thread of the run's process, as the default
workload's producers are, and handles errors as confluent-kafka's documentation prescribes: a
retriable error is answered by calling again, an abortable one (txn_requires_abort) by
abort_transaction and a new transaction, and a fatal one means the application would have had
to make a new producer: an anomaly ("clients died"). Every transaction's outcome, as the
client saw it, goes to the history the checker reads (faults/txn_checker.py).
"""
from __future__ import annotations

import collections
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from odradek.admin.admin_client import metadata_request, send_request
from odradek.coordinator.partitioning import partition_for
from odradek.faults.txn_checker import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Read,
    Txn,
    TxnRecord,
    decode_record,
    encode_record,
)
from odradek.faults.workload import LOGGER, ClientTrouble

LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 4
#: how long one commit_transaction / abort_transaction call may take before it raises a retriable
#: timeout (then it is called again)
CALL_TIMEOUT_S = 30.0
ABORT_ONE_IN = 4


def transactional_id(index: int) -> str:
    return f"faults-txn-{index}"


class _GaveUp(Exception):
    """The run is over and a call still only raised retriable errors."""


class _Retrying:
    """Calls retried on retriable errors, as confluent-kafka's documentation prescribes for the
    transactional API, until the deadline the end of the run sets."""

    def __init__(self) -> None:
        self.retriable: collections.Counter[str] = collections.Counter()   # call -> retriable errors retried
        self._give_up_at: float | None = None

    def _retrying(self, call: str, fn: Callable[[], None]) -> None:
        """`fn` until it returns; a retriable error is retried (counted), anything else raised."""
        while True:
            try:
                fn()
                return
            except KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or err.fatal() or err.txn_requires_abort():
                    raise
                self.retriable[call] += 1
                if self._give_up_at is not None and time.monotonic() > self._give_up_at:
                    raise _GaveUp(f"{call}: {err}") from exc
                time.sleep(0.1)


class TransactionalWriter(_Retrying):
    """One transactional producer: transactions of 1-10 records spread over the topic's
    partitions, one after the other, about one in four aborted on purpose (after a flush, so
    its records are in the log for the control reader to see). In each transaction, after its
    sends, it also takes what a read_committed consumer of its own, tailing the topic from its
    end at the start, has for it: the reads the checker's cycle and precommitted-read checks
    judge."""

    #: at most this many records read, waiting at most READ_WAIT_S, in each transaction
    READ_MAX, READ_WAIT_S = 100, 0.02

    def __init__(self, index: int, bootstrap: str, topic: str, partitions: int, txn_rate: float, seed: int,
                 trouble: ClientTrouble) -> None:
        super().__init__()
        self.index, self.topic, self.partitions, self.trouble = index, topic, partitions, trouble
        self.txns: list[Txn] = []
        self.abortable = 0               # transactions aborted because of an abortable error
        self.delivery_errors = 0         # delivery reports with an error (the transaction then aborts)
        self.died = False
        self.gave_up = ""                # the call still retrying when the run gave up on it
        self._rng = random.Random(seed * 1000 + index)
        self._interval = 1.0 / txn_rate
        self._stop = threading.Event()
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "transactional.id": transactional_id(index), "linger.ms": 5,
            "logger": LOGGER, "error_cb": self._on_error, "client.id": f"faults-txn-producer-{index}",
            # the transactional and idempotent state changes, kept in the run's librdkafka.log
            "debug": os.environ.get("ODRADEK_FAULTS_PRODUCER_DEBUG", "eos")})
        self._reader = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"faults-txn-in-{index}", "enable.auto.commit": False,
            "isolation.level": "read_committed", "logger": LOGGER, "error_cb": self._on_error,
            "auto.offset.reset": "error", "client.id": f"faults-txn-in-{index}"})
        self._reader.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
        self._thread = threading.Thread(target=self._run, name=f"txn-producer-{index}", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.trouble.died.append(f"txn producer {self.index}: fatal {err}")

    def _read(self, txn: Txn) -> None:
        for msg in self._reader.consume(self.READ_MAX, self.READ_WAIT_S):
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.trouble.consumer_errors.append(f"txn producer {self.index}'s reader: {error}")
                continue
            rid = decode_record(msg.value() or b"")
            if rid is not None:
                txn.reads.append(rid)

    def start(self) -> None:
        self._thread.start()

    def stop(self, deadline: float) -> None:
        """Finish the transaction under way (its calls retried until the monotonic `deadline`),
        then stop: join() waits for it."""
        self._give_up_at = deadline
        self._stop.set()

    def join(self) -> bool:
        """False if the thread is still in a call (a call returns within CALL_TIMEOUT_S)."""
        assert self._give_up_at is not None, "stop() first"
        self._thread.join(max(0.0, self._give_up_at - time.monotonic()) + 2 * CALL_TIMEOUT_S)
        if self._thread.is_alive():
            return False
        close_bounded(self._reader, f"txn producer {self.index}'s reader", self.trouble)
        return True

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._retrying("init_transactions", lambda: self._producer.init_transactions(CALL_TIMEOUT_S))
            number = 0
            next_at = time.monotonic()
            while not self._stop.is_set():
                number += 1
                self._transaction(number)
                next_at += self._interval
                pause = next_at - time.monotonic()
                if pause > 0:
                    self._stop.wait(pause)
                else:
                    next_at = time.monotonic()
        except _GaveUp as exc:
            self.gave_up = f"txn producer {self.index}: still retrying at the end: {exc}"
        except KafkaException as exc:
            self.died = True
            self.trouble.died.append(f"txn producer {self.index}: {exc.args[0]} "
                                     f"(fatal={exc.args[0].fatal()})")
        except Exception as exc:  # noqa: BLE001 - an application would crash here
            self.died = True
            self.trouble.died.append(f"txn producer {self.index}: raised {exc!r}")

    def _transaction(self, number: int) -> None:
        txn = Txn(self.index, number, UNKNOWN, [],
                  ABORTED if self._rng.randrange(ABORT_ONE_IN) == 0 else COMMITTED)
        self.txns.append(txn)
        count = self._rng.randint(1, 10)
        commit_raised = False
        try:
            self._producer.begin_transaction()
            for i in range(count):
                record = TxnRecord(i, self._rng.randrange(self.partitions))
                self._produce(encode_record(self.index, number, i), record)
                txn.records.append(record)
            self._read(txn)
            if txn.intended == ABORTED:
                self._producer.flush(CALL_TIMEOUT_S)
                self._retrying("abort_transaction", lambda: self._producer.abort_transaction(CALL_TIMEOUT_S))
                txn.outcome = ABORTED
                return
            try:
                self._retrying("commit_transaction", lambda: self._producer.commit_transaction(CALL_TIMEOUT_S))
            except KafkaException:
                commit_raised = True
                raise
            txn.outcome = COMMITTED
        except KafkaException as exc:
            err = exc.args[0]
            if err.fatal():
                txn.note = f"fatal: {err}"
                raise
            # abortable (or a produce() refused in an abortable state): abort, start a new one;
            # a commit that raised may have taken effect: its outcome stays unknown
            txn.note = f"{'commit raised' if commit_raised else 'abortable'}: {err}"
            self.abortable += 1
            self._retrying("abort_transaction", lambda: self._producer.abort_transaction(CALL_TIMEOUT_S))
            txn.outcome = UNKNOWN if commit_raised else ABORTED

    def _produce(self, value: bytes, record: TxnRecord) -> None:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.delivery_errors += 1
            else:
                offset = msg.offset()
                record.offset = offset if offset is not None and offset >= 0 else None
        while True:
            try:
                self._producer.produce(self.topic, value, partition=record.partition, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full (a partition without a leader): wait
                self._producer.poll(0.1)
        self._producer.poll(0)


class TailReader:
    """A consumer assigned every partition from offset 0 at one isolation level for the whole
    run, writing down (partition, offset, value) of every record it is delivered."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, isolation: str, trouble: ClientTrouble) -> None:
        self.topic, self.partitions, self.isolation, self.trouble = topic, partitions, isolation, trouble
        self.reads: list[Read] = []
        self.positions: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"faults-txn-{isolation}", "enable.auto.commit": False,
            "isolation.level": isolation, "logger": LOGGER, "error_cb": self._on_error,
            # an offset out of range is an error handed to us, never a silent jump
            "auto.offset.reset": "error", "client.id": f"faults-txn-reader-{isolation}"})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._thread = threading.Thread(target=self._run, name=f"reader-{isolation}", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.trouble.died.append(f"{self.isolation} reader: fatal {err}")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        positions_at = 0.0
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(0.2)
                if time.monotonic() - positions_at > 0.5:
                    positions_at = time.monotonic()
                    # past control records too (librdkafka steps the position over markers)
                    self.positions = {tp.partition: tp.offset for tp in self._consumer.position(
                        [TopicPartition(self.topic, p) for p in range(self.partitions)])}
            except Exception as exc:  # noqa: BLE001 - an application would crash here
                self.trouble.died.append(f"{self.isolation} reader: raised {exc!r}")
                return
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.trouble.consumer_errors.append(f"{self.isolation} reader: {error}")
                continue
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None  # set on every message without an error
            if offset <= self._last.get(partition, -1):
                self.trouble.non_monotonic_polls.append(
                    f"{self.isolation} reader, partition {partition}: {self._last[partition]} then {offset}")
            self._last[partition] = offset
            self.reads.append((partition, offset, value or b""))

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.positions.get(p, -1) >= end for p, end in ends.items() if end > 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._thread.is_alive():   # its poll() never returned: closing would hang as well
            self.trouble.hung.append(f"{self.isolation} reader: poll() did not return")
            return
        close_bounded(self._consumer, f"{self.isolation} reader", self.trouble)

    @property
    def hung(self) -> bool:
        return self._thread.is_alive()


def close_bounded(consumer: Consumer, name: str, trouble: ClientTrouble, timeout_s: float = 30.0) -> None:
    """consumer.close(), given up on (and written down as hung) after ``timeout_s``: librdkafka
    can deadlock inside (issue #5476), and the run must still end and report."""
    thread = threading.Thread(target=consumer.close, name=f"close {name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        trouble.hung.append(f"{name}: close() did not return in {timeout_s:.0f} s")


def read_again(bootstrap: str, topic: str, partitions: int, isolation: str, ends: dict[int, int],
               trouble: ClientTrouble, timeout_s: float = 120.0) -> list[Read] | None:
    """Every record of the partitions up to ``ends``, read by a new consumer at ``isolation``:
    what a reader whose client hung would have read (its own reads stop where it hung). None
    if it could not read that far."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"faults-txn-again-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation, "logger": LOGGER,
                         "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    reads: list[Read] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                partition, offset = msg.partition(), msg.offset()
                assert partition is not None and offset is not None
                reads.append((partition, offset, msg.value() or b""))
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [TopicPartition(topic, p) for p in range(partitions)])}
            if all(positions.get(p, -1) >= end for p, end in ends.items() if end > 0):
                return reads
        return None
    finally:
        close_bounded(consumer, f"{isolation} re-reader", trouble)


def end_offsets(bootstrap: str, topic: str, partitions: int, committed: bool) -> dict[int, int] | None:
    """Each partition's last stable offset (`committed`) or high watermark, asked of its leader
    (ListOffsets, latest, at that isolation level); None unless every partition answered."""
    try:
        metadata = metadata_request(bootstrap, [topic], 10)
    except Exception:  # noqa: BLE001 - no broker answered (AdminError), or an answer kio could not read
        return None
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
    by_leader: dict[str, list[int]] = {}
    for t in metadata.topics:
        for p in t.partitions:
            if p.leader_id in brokers:
                by_leader.setdefault(brokers[p.leader_id], []).append(p.partition_index)
    out: dict[int, int] = {}
    for leader, asked in by_leader.items():
        body = {"replica_id": -1, "isolation_level": 1 if committed else 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in asked]}]}
        try:
            response = send_request(leader, LIST_OFFSETS, LIST_OFFSETS_VERSION, body, 10)
        except (OSError, ValueError):
            return None
        out.update({p.partition_index: p.offset for t in response.topics for p in t.partitions
                    if p.error_code == 0 and p.offset >= 0})
    return out if set(out) == set(range(partitions)) else None


def coordinator_broker(leaders: dict[int, int], transactional_ids: list[str]) -> tuple[int | None, int]:
    """The broker leading the most of these transactional ids' __transaction_state partitions
    (their transaction coordinator), and how many it leads; `leaders` is partition -> leader of
    __transaction_state."""
    if not leaders:
        return None, 0
    count = collections.Counter(leaders.get(partition_for(tid, len(leaders))) for tid in transactional_ids)
    count.pop(None, None)
    if not count:
        return None, 0
    broker, n = max(count.items(), key=lambda item: (item[1], -(item[0] or 0)))
    return broker, n


class Copier(_Retrying):
    """A consume-transform-produce copier (KIP-98, KIP-447): a consumer of group
    `faults-txn-copier` at read_committed reads the source topic, and a transactional producer
    writes each record to the same partition of the output topic and commits the consumer's
    positions in the same transaction (send_offsets_to_transaction). An abortable error aborts
    the transaction and rewinds the consumer to its group's committed offsets (the position is
    not rewound by the abort, KAFKA-17582), so each source record is in the output once."""

    GROUP = "faults-txn-copier"

    def __init__(self, bootstrap: str, source: str, output: str, trouble: ClientTrouble) -> None:
        super().__init__()
        self.source, self.output, self.trouble = source, output, trouble
        self.copied = 0
        self.committed_txns = 0
        self.abortable = 0
        self.gave_up = ""
        self.consume_errors: list[str] = []   # the errors consume() handed back
        self.positions: dict[int, int] = {}   # the positions its last committed transaction committed
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": self.GROUP, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "logger": LOGGER,
            "error_cb": self._on_error, "client.id": "faults-txn-copier-consumer"})
        self._producer = Producer({
            "bootstrap.servers": bootstrap, "transactional.id": "faults-txn-copier", "linger.ms": 5,
            "logger": LOGGER, "error_cb": self._on_error, "client.id": "faults-txn-copier",
            "debug": os.environ.get("ODRADEK_FAULTS_COPIER_DEBUG", "eos,protocol")})
        self._thread = threading.Thread(target=self._run, name="txn-copier", daemon=True)
        # The producer's log lines reach the run's librdkafka.log only through poll(); its
        # transactional calls block for up to CALL_TIMEOUT_S, and a stalled one is what the log
        # must show, so a thread of its own polls (the copier has no delivery callbacks to race).
        self._log_pump = threading.Thread(target=self._pump_logs, name="txn-copier-log", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.trouble.died.append(f"copier: fatal {err}")

    def start(self) -> None:
        self._thread.start()
        self._log_pump.start()

    def _pump_logs(self) -> None:
        while self._thread.is_alive():
            self._producer.poll(0.2)
        self._producer.poll(0)   # what the copier's last call logged

    def stop(self, deadline: float) -> bool:
        self._give_up_at = deadline
        self._stop.set()
        self._thread.join(max(0.0, deadline - time.monotonic()) + 2 * CALL_TIMEOUT_S)
        alive = self._thread.is_alive()
        if not alive:
            close_bounded(self._consumer, "copier's consumer", self.trouble)
        return not alive

    def _run(self) -> None:
        try:
            self._retrying("init_transactions", lambda: self._producer.init_transactions(CALL_TIMEOUT_S))
            self._consumer.subscribe([self.source])
            while not self._stop.is_set():
                batch = []
                for msg in self._consumer.consume(100, 0.5):
                    error = msg.error()
                    if error is None:
                        batch.append(msg)
                    elif error.code() != KafkaError._PARTITION_EOF:
                        # not anomalies (the copier is judged by its output): e.g. the offset
                        # lookup of a partition without a committed offset, answered
                        # UNKNOWN_TOPIC_OR_PART by a leader restarted a moment ago, as Kafka answers
                        self.consume_errors.append(str(error))
                if batch:
                    self._copy(batch)
        except _GaveUp as exc:
            self.gave_up = f"copier: still retrying at the end: {exc}"
        except KafkaException as exc:
            self.trouble.died.append(f"copier: {exc.args[0]} (fatal={exc.args[0].fatal()})")
        except Exception as exc:  # noqa: BLE001 - an application would crash here
            self.trouble.died.append(f"copier: raised {exc!r}")

    def _copy(self, batch: list[Any]) -> None:
        try:
            self._producer.begin_transaction()
            for msg in batch:
                while True:
                    try:
                        self._producer.produce(self.output, msg.value(), partition=msg.partition())
                        break
                    except BufferError:
                        self._producer.poll(0.1)
            positions = self._consumer.position(self._consumer.assignment())
            metadata = self._consumer.consumer_group_metadata()
            self._retrying("send_offsets_to_transaction", lambda: self._producer.send_offsets_to_transaction(
                positions, metadata, CALL_TIMEOUT_S))
            self._retrying("commit_transaction", lambda: self._producer.commit_transaction(CALL_TIMEOUT_S))
        except KafkaException as exc:
            if exc.args[0].fatal():
                raise
            self.abortable += 1
            self._retrying("abort_transaction", lambda: self._producer.abort_transaction(CALL_TIMEOUT_S))
            self._rewind()
            return
        self.copied += len(batch)
        self.committed_txns += 1
        self.positions.update({tp.partition: tp.offset for tp in positions if tp.offset >= 0})

    def _rewind(self) -> None:
        """Back to the group's committed offsets; if a seek is refused (the partition not yet
        fetching), by subscribing again: a new assignment starts from the committed offsets."""
        try:
            for tp in self._consumer.committed(self._consumer.assignment(), CALL_TIMEOUT_S):
                self._consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else -2))
        except KafkaException:
            self._consumer.unsubscribe()
            self._consumer.subscribe([self.source])

