"""`odradek bench latency`: end-to-end latency, from the producer's send to the consumer's
receipt, at fixed rates.

For each rate (default 1,000 and 10,000 records/s): a new 6-partition topic at RF 3; a
consumer in a child process (fetch.wait.max.ms 10, fetch.min.bytes 1, assigned every partition
from the beginning) and, in this process, a confluent-kafka producer with acks=all, linger.ms 0
(no waiting for a batch to fill; librdkafka's own default is 5 ms) and Nagle off, paced by a
sleep-to-deadline loop (record i is due at start + i/rate; a late record is sent at once, never
skipped) and spread over the partitions in turn. Each 100-byte record carries its send time,
time.monotonic() just before produce(): CLOCK_MONOTONIC is one clock for every process of a
machine, so the consumer's receive time minus that is the record's latency on one clock. The
records of the first ``warmup`` seconds (connections, metadata, the first fetches) are received
but not measured; p50, p99, p99.9 and max are over the ``seconds`` after them.

Kreps' 2014 figures for the same measurement (3 brokers, RF 3, acks=all on Kafka 0.8.1):
2 ms p50, 3 ms p99, 14 ms p99.9.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from odradek.admin.admin_client import create_topic, quiet_logger
from odradek.admin.errors import AdminError
from odradek.bench.common import format_machine, machine, private_cluster
from odradek.bench.produce import _delete_quietly, wait_for_leaders
from odradek.client import client_config

PARTITIONS = 6
SIZE = 100
#: the consumer's settings (the child process's), stated in the output and docs/benchmarks.md
CONSUMER_SETTINGS: dict[str, Any] = {"fetch.wait.max.ms": 10, "fetch.min.bytes": 1, "socket.nagle.disable": True,
                                     "enable.auto.commit": False}
PRODUCER_SETTINGS: dict[str, Any] = {"acks": "all", "linger.ms": 0, "socket.nagle.disable": True,
                                     "compression.type": "none"}
_STAMP = 20  # bytes of the send time at the start of each value, then one byte: b"w" in the warm-up


def _percentile(ms: list[float], q: float) -> float:
    return round(ms[min(len(ms) - 1, int(q * len(ms)))], 2) if ms else float("nan")


def summarize(latencies_ms: list[float]) -> dict[str, float]:
    """p50, p99, p99.9 and max of ``latencies_ms`` (the nearest-rank values, in ms)."""
    ms = sorted(latencies_ms)
    return {"p50_ms": _percentile(ms, 0.50), "p99_ms": _percentile(ms, 0.99),
            "p999_ms": _percentile(ms, 0.999), "max_ms": round(ms[-1], 2) if ms else float("nan")}


def _consumer_child(spec: dict[str, Any]) -> dict[str, Any]:
    """The child process: read ``expected`` records of the topic, latency of each measured one."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**spec["config"], "group.id": f"bench-latency-{uuid.uuid4().hex[:8]}",
                         "logger": quiet_logger()})
    consumer.assign([TopicPartition(spec["topic"], p, OFFSET_BEGINNING) for p in range(spec["partitions"])])
    consumer.consume(1, 1.0)  # connections and the first fetches before "ready"
    print("ready", flush=True)
    clock = time.monotonic
    latencies: list[float] = []
    received = 0
    expected = spec["expected"]
    idle_until = clock() + spec["timeout_s"]
    poll = consumer.poll
    while received < expected and clock() < idle_until:
        # poll, one record at a time: consume(n, timeout) would wait for n records or the timeout
        msg = poll(0.1)
        now = clock()
        if msg is None:
            continue
        value = msg.value()
        if msg.error() is None and value is not None:
            received += 1
            if value[_STAMP:_STAMP + 1] != b"w":
                latencies.append((now - float(value[:_STAMP])) * 1000)
            idle_until = now + 30.0
    consumer.close()
    return {"received": received, "measured": len(latencies), **summarize(latencies)}


def _measure_rate(bootstrap: str, rate: int, seconds: float, warmup: float, keep: bool,
                  producer_settings: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    topic = f"bench-latency-{rate}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS, 3)
    try:
        wait_for_leaders(bootstrap, topic)
        total = int(rate * (warmup + seconds))
        warm = int(rate * warmup)
        spec = {"topic": topic, "partitions": PARTITIONS, "expected": total, "timeout_s": 60.0,
                "config": client_config.librdkafka({"bootstrap.servers": bootstrap, **CONSUMER_SETTINGS})}
        child = subprocess.Popen([sys.executable, "-m", "odradek.bench.latency", json.dumps(spec)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if child.stdout is None or child.stdout.readline().strip() != "ready":
                raise AdminError(f"the latency consumer did not start: {_last_line(child)}")
            failures: list[str] = []

            def on_delivery(err: Any, _msg: Any) -> None:
                if err is not None:
                    failures.append(str(err))

            producer = Producer(client_config.librdkafka({
                "bootstrap.servers": bootstrap, **producer_settings, "on_delivery": on_delivery,
                "logger": quiet_logger()}))
            producer.list_topics(topic, timeout=10)
            filler = b"x" * (SIZE - _STAMP - 1)
            produce, poll, clock, sleep = producer.produce, producer.poll, time.monotonic, time.sleep
            print(f"odradek: bench latency: {rate:,} records/s for {warmup:g} s warm-up + {seconds:g} s",
                  file=sys.stderr, flush=True)
            start = clock()
            worst_lag = 0.0
            for i in range(total):
                due = start + i / rate
                now = clock()
                if now < due:
                    sleep(due - now)
                    now = clock()
                worst_lag = max(worst_lag, now - due)
                produce(topic, b"%20.6f" % now + (b"w" if i < warm else b"m") + filler, partition=i % PARTITIONS)
                poll(0)
            sent_s = clock() - start
            left = producer.flush(60)
            if left or failures:
                raise AdminError(f"{len(failures) + left} of {total} records not delivered "
                                 f"({failures[0] if failures else 'flush timed out'})")
            out, err = child.communicate(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        if child.returncode != 0:
            raise AdminError(f"the latency consumer failed: {err.strip().splitlines()[-1:]}")
        got = json.loads(out.strip().splitlines()[-1])
        return {"rate": rate, "sent": total, "achieved_rate": round(total / sent_s, 1),
                "worst_send_lag_ms": round(worst_lag * 1000, 2), **got}
    finally:
        if not keep:
            _delete_quietly(bootstrap, topic)


def _last_line(child: subprocess.Popen[str]) -> str:
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(5)
    if child.poll() is None:
        child.kill()
        child.wait()
    err = child.stderr.read() if child.stderr else ""
    return (err.strip().splitlines() or ["no output"])[-1]


def run_latency_bench(bootstrap: str | None, rates: list[int], seconds: float, warmup: float = 2.0,
                      keep_dir: Path | None = None, linger_ms: float = 0) -> dict[str, Any]:
    """Each rate in turn on ``bootstrap`` (its topics deleted afterwards), or on a private
    3-broker cluster when None; ``linger_ms``: the producer's linger.ms (0: each record is sent
    as soon as a request can carry it)."""
    producer_settings = {**PRODUCER_SETTINGS, "linger.ms": linger_ms}
    with contextlib.ExitStack() as stack:
        keep = False
        if bootstrap is None:
            _cluster, bootstrap, _zk = stack.enter_context(
                private_cluster(3, keep_dir, "odradek-bench-latency-", kill_at_end=True))
            keep = True
        runs = [_measure_rate(bootstrap, rate, seconds, warmup, keep, producer_settings) for rate in rates]
    return {"size": SIZE, "partitions": PARTITIONS, "replication_factor": 3, "seconds": seconds,
            "warmup_s": warmup, "producer": producer_settings, "consumer": CONSUMER_SETTINGS,
            "runs": runs, "machine": machine()}


def format_result(r: dict[str, Any]) -> str:
    header = ("rate/s", "achieved/s", "measured", "received", "p50 ms", "p99 ms", "p99.9 ms", "max ms")
    rows = [header] + [
        (f"{x['rate']:,}", f"{x['achieved_rate']:,.0f}", f"{x['measured']:,}", f"{x['received']:,}/{x['sent']:,}",
         f"{x['p50_ms']:.2f}", f"{x['p99_ms']:.2f}", f"{x['p999_ms']:.2f}", f"{x['max_ms']:.2f}")
        for x in r["runs"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"end-to-end latency, {r['size']}-byte records, RF {r['replication_factor']} acks=all, "
             f"{r['partitions']} partitions, linger.ms {r['producer']['linger.ms']:g}, consumer in another process with fetch.wait.max.ms "
             f"{r['consumer']['fetch.wait.max.ms']}; {r['warmup_s']:g} s warm-up discarded, {r['seconds']:g} s measured"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    lines.append(f"machine: {format_machine(r['machine'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(_consumer_child(json.loads(sys.argv[1]))))
