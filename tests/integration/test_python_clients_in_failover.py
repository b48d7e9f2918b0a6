"""kafka-python and aiokafka across a leader's kill -9 and restart: the same clients, never
re-created, keep producing (acks=all) and consuming; every acknowledged value is read once.
(confluent-kafka's producers and consumers go through many more faults in odradek.faults.)"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from clients import create_topic
from cluster_state import full_isr, live_leaders, metadata
from polling import wait_until

from cluster_helpers import SHORT_SESSION_TIMEOUT_MS
from odradek.cluster.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

TOPIC = "py-clients"
PARTITIONS = 3


class KafkaPythonProducer:
    """kafka-python, acks=all, retrying as long as the test runs; counts every failure."""

    def __init__(self, bootstrap: str) -> None:
        from kafka import KafkaProducer
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=2**31 - 1,
                                      enable_idempotence=True, delivery_timeout_ms=120_000,
                                      request_timeout_ms=10_000, linger_ms=5)
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            value = b"kp-%d" % i
            try:
                future = self.producer.send(TOPIC, value=value, partition=i % PARTITIONS)
            except Exception as exc:  # noqa: BLE001 - an application would see this
                self.errors.append(repr(exc))
                return
            future.add_callback(lambda _md, v=value: self.acked.add(v))
            future.add_errback(lambda exc: self.errors.append(repr(exc)))
            i += 1
            time.sleep(0.002)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.producer.flush(120)
        self.producer.close(30)


async def _aiokafka_produce(bootstrap: str, stop: asyncio.Event, acked: set[bytes], errors: list[str]) -> None:
    from aiokafka import AIOKafkaProducer
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                request_timeout_ms=10_000, retry_backoff_ms=200)
    await producer.start()
    try:
        i = 0
        while not stop.is_set():
            value = b"aio-%d" % i
            try:
                fut = await producer.send(TOPIC, value=value, partition=i % PARTITIONS)
            except Exception as exc:  # noqa: BLE001 - an application would see this
                errors.append(repr(exc))
                return
            fut.add_done_callback(lambda f, v=value: acked.add(v) if f.exception() is None
                                  else errors.append(repr(f.exception())))
            i += 1
            await asyncio.sleep(0.002)
        await producer.flush()
    finally:
        await producer.stop()


def _aiokafka_in_thread(bootstrap: str) -> tuple[threading.Thread, Callable[[], None], set[bytes], list[str]]:
    acked: set[bytes] = set()
    errors: list[str] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        try:
            loop.run_until_complete(_aiokafka_produce(bootstrap, stop, acked, errors))
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    thread = threading.Thread(target=run, daemon=True)
    return thread, lambda: loop.call_soon_threadsafe(stop.set), acked, errors


def _read_all_kafka_python(bootstrap: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as Tp
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000)
    try:
        tps = [Tp(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out = []
        for msg in consumer:
            out.append(msg.value)
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


def _read_all_aiokafka(bootstrap: str, expected: int) -> list[bytes]:
    async def read() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as Tp
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [Tp(TOPIC, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            out: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(out) < expected and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(m.value for m in msgs)
            return out
        finally:
            await consumer.stop()

    return asyncio.run(read())


def test_kafka_python_and_aiokafka_carry_on_through_a_leader_kill_and_restart(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    c = cluster_factory(min_insync_replicas=2, zookeeper_session_timeout_ms=SHORT_SESSION_TIMEOUT_MS)
    create_topic(c.bootstrap_servers, TOPIC, PARTITIONS, 3)
    kp = KafkaPythonProducer(c.bootstrap_servers)
    aio_thread, aio_stop, aio_acked, aio_errors = _aiokafka_in_thread(c.bootstrap_servers)
    kp.start()
    aio_thread.start()
    wait_until(lambda: len(kp.acked) > 300 and len(aio_acked) > 300, 60, "both producers to get going")
    victim = metadata(c.bootstrap_servers, TOPIC)[0][0]
    c.kill_broker(victim)
    wait_until(lambda: live_leaders(c, TOPIC, {victim}), 30, "new leaders")
    c.up(timeout=60)
    wait_until(lambda: full_isr(c, TOPIC, 3), 60, "the restarted broker to rejoin every ISR")
    marks = len(kp.acked), len(aio_acked)
    wait_until(lambda: len(kp.acked) > marks[0] + 300 and len(aio_acked) > marks[1] + 300, 60,
               "both producers to carry on after the restart")
    kp.stop()
    aio_stop()
    aio_thread.join(60)
    assert kp.errors == [] and aio_errors == []
    acked = kp.acked | aio_acked
    for values in (_read_all_kafka_python(c.bootstrap_servers, len(acked)),
                   _read_all_aiokafka(c.bootstrap_servers, len(acked))):
        assert len(values) == len(set(values)), "a value was written twice"
        assert acked <= set(values), f"{len(acked - set(values))} acknowledged values are missing"
