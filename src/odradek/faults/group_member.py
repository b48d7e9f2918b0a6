"""One consumer-group member of the groups fault workload, as a process of its own so the
nemesis can kill it with kill -9 (`python -m odradek.faults.group_member ...`).

    python -m odradek.faults.group_member FLAVOR BOOTSTRAP GROUP TOPIC NAME EVENTS_FILE [INSTANCE_ID]

FLAVOR names the client and its rebalance protocol (FLAVORS). The member commits by hand
(enable.auto.commit off), as an application that must not lose a record does: the next offset
after the last record it handed over, of each partition it owns, every COMMIT_EVERY_S and when a
rebalance revokes partitions, synchronously. INSTANCE_ID makes it a static member (KIP-345).

Every event is one line of EVENTS_FILE, written before the member acts on it, stamped with
CLOCK_MONOTONIC (one clock for every process of the machine, so the checker merges members):

    D <ns> <partition> <offset> <value>          a record handed to the application
    C <sent ns> <done ns> <p>:<o>,<p>:<o>...     a commit that succeeded (sent, then answered)
    F <ns> <text>                                a commit that failed (a rebalance under way)
    A <ns> <p>,<p>...                            partitions assigned (incrementally, cooperative)
    V <ns> <p>,<p>...                            partitions revoked (committed first)
    L <ns> <p>,<p>...                            partitions lost (session expired: not committed)
    E <ns> <text>                                an error the client handed the application
    R <ns> <text>                                a retriable error a client raised (polled again)
    P <ns> <text>                                a librdkafka protocol error line

SIGTERM closes the consumer (exit 0); an exception out of the client ends the process with a
traceback on stderr and a non-zero status, which the run reports: an application would have
had to re-create its consumer.
"""
from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import IO, Any

import aiokafka
import aiokafka.errors
import confluent_kafka
import kafka
import kafka.errors
from kafka.coordinator.assignors.range import RangePartitionAssignor

from odradek.client.librdkafka_log import PROTOCOL_ERROR_MARKS

#: flavor -> (client, partition assignment strategy)
FLAVORS = {
    "confluent-eager": ("confluent-kafka", "range"),
    "confluent-cooperative": ("confluent-kafka", "cooperative-sticky"),
    "kafka-python": ("kafka-python", "range"),
    "aiokafka": ("aiokafka", "roundrobin"),   # aiokafka's default
}
#: a killed member is out of the group this long after its last heartbeat
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
#: also the rebalance timeout (KIP-62): how long a JoinGroup waits for every member
MAX_POLL_INTERVAL_MS = 30000
COMMIT_EVERY_S = 0.5


class EventLog:
    """The member's lines, and the positions it owes a commit: partition -> the offset after
    the last record handed over, of the partitions it owns."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.positions: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.last_commit = time.monotonic()

    def line(self, kind: str, text: str) -> None:
        self.out.write(f"{kind} {time.monotonic_ns()} {text}\n")

    def delivered(self, partition: int, offset: int, value: bytes) -> None:
        self.line("D", f"{partition} {offset} {value.decode(errors='replace')}")
        self.positions[partition] = offset + 1

    def delivered_batches(self, batches: dict[Any, list[Any]]) -> None:
        """kafka-python's poll() and aiokafka's getmany(): topic partition -> its records."""
        for tp, records in batches.items():
            for record in records:
                self.delivered(tp.partition, record.offset, record.value)

    def retriable(self, exc: Exception) -> None:
        """A retriable error a client raised: its application polls again."""
        self.line("R", f"{type(exc).__name__}: {exc}".replace("\n", " "))

    def owed(self, partitions: Iterable[int] | None = None) -> dict[int, int]:
        """The positions not committed yet, of ``partitions`` (default: all owned)."""
        wanted = self.positions if partitions is None else {p: self.positions[p] for p in partitions
                                                              if p in self.positions}
        return {p: o for p, o in wanted.items() if self.committed.get(p) != o}

    def commit_due(self) -> bool:
        return time.monotonic() - self.last_commit >= COMMIT_EVERY_S

    def commit(self, offsets: dict[int, int], do_commit: Callable[[dict[int, int]], None]) -> None:
        """Commit ``offsets`` with ``do_commit`` (raises on failure) and write down the outcome."""
        sent = self.commit_starts()
        if not offsets:
            return
        try:
            do_commit(offsets)
        except Exception as exc:  # noqa: BLE001 - a failed commit is the rebalance's, written down
            self.commit_failed(exc)
        else:
            self.commit_succeeded(sent, offsets)

    async def commit_async(self, offsets: dict[int, int],
                           do_commit: Callable[[dict[int, int]], Awaitable[None]]) -> None:
        """``commit`` for a client whose commit is a coroutine (aiokafka)."""
        sent = self.commit_starts()
        if not offsets:
            return
        try:
            await do_commit(offsets)
        except Exception as exc:  # noqa: BLE001 - a failed commit is the rebalance's, written down
            self.commit_failed(exc)
        else:
            self.commit_succeeded(sent, offsets)

    def commit_starts(self) -> int:
        self.last_commit = time.monotonic()
        return time.monotonic_ns()

    def commit_failed(self, exc: BaseException) -> None:
        self.line("F", f"{type(exc).__name__}: {exc}".replace("\n", " "))

    def commit_succeeded(self, sent: int, offsets: dict[int, int]) -> None:
        done = time.monotonic_ns()
        self.out.write(f"C {sent} {done} {','.join(f'{p}:{o}' for p, o in sorted(offsets.items()))}\n")
        self.committed.update(offsets)

    def assigned(self, partitions: list[int]) -> None:
        self.line("A", ",".join(map(str, sorted(partitions))))

    def revoked(self, partitions: list[int], do_commit: Callable[[dict[int, int]], None]) -> None:
        """Commit what was handed over of ``partitions``, then forget them."""
        self.commit(self.owed(partitions), do_commit)
        self.forget_revoked(partitions)

    def forget_revoked(self, partitions: list[int]) -> None:
        self.line("V", ",".join(map(str, sorted(partitions))))
        self.forget(partitions)

    def lost(self, partitions: list[int]) -> None:
        self.line("L", ",".join(map(str, sorted(partitions))))
        self.forget(partitions)

    def forget(self, partitions: Iterable[int]) -> None:
        for p in partitions:
            self.positions.pop(p, None)
            self.committed.pop(p, None)


def run_confluent(events: EventLog, bootstrap: str, group: str, topic: str, name: str, strategy: str,
                  instance_id: str | None, stopping: list[bool]) -> None:
    class ProtocolErrors(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            line = record.getMessage()
            if any(mark in line for mark in PROTOCOL_ERROR_MARKS):
                events.line("P", line.replace("\n", " "))

    librdkafka = logging.getLogger(f"odradek.faults.{name}.librdkafka")
    librdkafka.addHandler(ProtocolErrors())
    librdkafka.setLevel(logging.DEBUG)
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": name, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "max.poll.interval.ms": MAX_POLL_INTERVAL_MS, "logger": librdkafka,
        # the group protocol's steps in the member's log, what explains a rebalance or a fencing
        "debug": os.environ.get("ODRADEK_FAULTS_MEMBER_DEBUG", "cgrp"),
    }
    if instance_id:
        config["group.instance.id"] = instance_id
    consumer = confluent_kafka.Consumer(config)

    def commit(offsets: dict[int, int]) -> None:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)

    consumer.subscribe([topic],
                       on_assign=lambda c, tps: events.assigned([tp.partition for tp in tps]),
                       on_revoke=lambda c, tps: events.revoked([tp.partition for tp in tps], commit),
                       on_lost=lambda c, tps: events.lost([tp.partition for tp in tps]))
    try:
        while not stopping:
            msg = consumer.poll(0.2)
            if msg is not None:
                error = msg.error()
                if error is not None:
                    if error.code() != confluent_kafka.KafkaError._PARTITION_EOF:
                        events.line("E", str(error).replace("\n", " "))
                    if error.fatal():   # the consumer is dead: an application would end here
                        raise SystemExit(f"{name}: fatal error {error}")
                else:
                    partition, offset, value = msg.partition(), msg.offset(), msg.value()
                    assert partition is not None and offset is not None and value is not None  # a record
                    events.delivered(partition, offset, value)
            if events.commit_due():
                events.commit(events.owed(), commit)
    finally:
        consumer.close()


def python_client_settings(bootstrap: str, group: str, name: str, instance_id: str | None) -> dict[str, Any]:
    """The member settings kafka-python's and aiokafka's consumers name alike."""
    return {"bootstrap_servers": bootstrap, "group_id": group, "client_id": name, "enable_auto_commit": False,
            "auto_offset_reset": "earliest", "session_timeout_ms": SESSION_TIMEOUT_MS,
            "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS, "max_poll_interval_ms": MAX_POLL_INTERVAL_MS,
            "group_instance_id": instance_id}


def run_kafka_python(events: EventLog, bootstrap: str, group: str, topic: str, name: str,
                     instance_id: str | None, stopping: list[bool]) -> None:
    consumer = kafka.KafkaConsumer(**python_client_settings(bootstrap, group, name, instance_id),
                                   partition_assignment_strategy=(RangePartitionAssignor,))

    def commit(offsets: dict[int, int]) -> None:
        consumer.commit({kafka.TopicPartition(topic, p): kafka.OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

    class Listener(kafka.ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            events.revoked([tp.partition for tp in revoked], commit)

        def on_partitions_assigned(self, assigned: Any) -> None:
            events.assigned([tp.partition for tp in assigned])

        def on_partitions_lost(self, lost: Any) -> None:
            events.lost([tp.partition for tp in lost])

    consumer.subscribe([topic], listener=Listener())
    try:
        while not stopping:
            try:
                events.delivered_batches(consumer.poll(timeout_ms=200))
            except kafka.errors.KafkaError as exc:
                if not exc.retriable:
                    raise
                events.retriable(exc)  # kafka-python 3.0 raises a lost coordinator's connection error
            if events.commit_due():
                events.commit(events.owed(), commit)
    finally:
        consumer.close()


def run_aiokafka(events: EventLog, bootstrap: str, group: str, topic: str, name: str,
                 instance_id: str | None, stopping: list[bool]) -> None:
    async def main() -> None:
        consumer = aiokafka.AIOKafkaConsumer(**python_client_settings(bootstrap, group, name, instance_id),
                                             rebalance_timeout_ms=MAX_POLL_INTERVAL_MS)

        async def commit(offsets: dict[int, int]) -> None:
            await consumer.commit({aiokafka.TopicPartition(topic, p): o for p, o in offsets.items()})

        class Listener(aiokafka.ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: Any) -> None:
                partitions = [tp.partition for tp in revoked]
                await events.commit_async(events.owed(partitions), commit)
                events.forget_revoked(partitions)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                events.assigned([tp.partition for tp in assigned])

        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        try:
            while not stopping:
                try:
                    events.delivered_batches(await consumer.getmany(timeout_ms=200))
                except aiokafka.errors.KafkaError as exc:
                    if not exc.retriable:
                        raise
                    events.retriable(exc)
                if events.commit_due():
                    await events.commit_async(events.owed(), commit)
        finally:
            await consumer.stop()

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    flavor, bootstrap, group, topic, name, out_path = args[:6]
    instance_id = args[6] if len(args) > 6 else None
    client, strategy = FLAVORS[flavor]
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format=f"%(asctime)s {name} %(name)s %(message)s")
    with open(out_path, "a", buffering=1, encoding="utf-8") as out:
        events = EventLog(out)
        if client == "confluent-kafka":
            run_confluent(events, bootstrap, group, topic, name, strategy, instance_id, stopping)
        elif client == "kafka-python":
            run_kafka_python(events, bootstrap, group, topic, name, instance_id, stopping)
        else:
            run_aiokafka(events, bootstrap, group, topic, name, instance_id, stopping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
