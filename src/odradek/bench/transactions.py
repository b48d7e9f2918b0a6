"""`odradek bench transactions`: what transactions (KIP-98) cost a producer, and the latency a
read_committed consumer sees.

On one private 3-broker cluster, a 6-partition topic at RF 3, 1 KB records, acks=all:

- **Throughput** at commit intervals of 10, 100 and 1000 ms: a transactional producer
  (begin, produce as fast as it can, commit every interval) against an idempotent one with the
  same settings, for a fixed time each; the two alternate, ROUNDS[interval] rounds, each kind
  first in every other round, and the ratio is the median of the rounds' (the machine's noise
  hits both kinds alike within a round).
  Apache Kafka's published figure for the same comparison: about 3% lower throughput at 100 ms
  with 1 KB records (KIP-98's "Performance" section); the goal here is a ratio of at least 0.95
  at 100 ms.
- **Where a commit's time goes**, over the 100 ms rounds: the transactional producer's time in
  commit_transaction (its flush included) and the brokers' own request times (the
  kafka_network_requestmetrics_totaltimems histograms, summed over the brokers) for the
  coordinator's requests and Produce, per commit.
- **End-to-end latency at read_committed**: records produced at a fixed rate in transactions
  committed every 100 ms, read by a read_committed consumer in the same process; latency is
  the consumer's receive time minus the send time written in the record (one clock). A record
  becomes visible only with its transaction's commit, so the latency includes up to one commit
  interval by design.
"""
from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from odradek.admin.admin_client import create_topic, quiet_logger
from odradek.bench.common import format_machine, machine, private_cluster
from odradek.client.metrics_http import open_metrics
from odradek.cluster.local_cluster import LocalCluster

INTERVALS_MS = (10, 100, 1000)
#: rounds per commit interval: single rounds at 100 ms, the goal's interval, ranged 0.82-1.04 on
#: one run of 2 cores, so its median takes nine
ROUNDS = {10: 5, 100: 9, 1000: 5}
PARTITIONS = 6
#: the throughput topic keeps only its newest segments, and the brokers check every 2 s: a run
#: writes 16 GB per broker otherwise (2.6 million 1 KB records per partition on 2 cores), and
#: filled the disk of the machine it ran on
RETAINED = {"retention.bytes": str(256 * 1024 * 1024), "segment.bytes": str(64 * 1024 * 1024)}
BROKER_ARGS = {"log_retention_check_interval_ms": 2000}
#: the requests whose broker-side times the breakdown reports (AddPartitionsToTxn includes the
#: leaders' KIP-890 verifications, sent as AddPartitionsToTxn v4 with verify_only)
BREAKDOWN_APIS = ("AddPartitionsToTxn", "EndTxn", "WriteTxnMarkers", "Produce")
REQUEST_TIME = "kafka_network_requestmetrics_totaltimems"


@dataclass
class Run:
    """One producer's timed run: records per second, and for a transactional one its commits
    and the seconds spent in commit_transaction."""

    rate: float
    commits: int = 0
    in_commit_s: float = 0.0
    seconds: float = 0.0


def _config(bootstrap: str) -> dict[str, Any]:
    """Both kinds alike: idempotent (a transactional producer is), acks=all, the default
    batching, and failure reports only (a Python callback per record would be measured)."""
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000, "logger": quiet_logger(),
            "delivery.report.only.error": True}


def _run(producer: Producer, topic: str, payload: bytes, seconds: float, interval_ms: int | None) -> Run:
    """Records per second produced (and acknowledged) in ``seconds``; with ``interval_ms``, in
    transactions committed that often (the last one committed before the clock stops)."""
    sent = 0
    commits = 0
    in_commit = 0.0
    failures: list[Any] = []
    producer.poll(0)
    start = time.monotonic()
    end = start + seconds
    next_commit = start + (interval_ms or 0) / 1000
    if interval_ms is not None:
        producer.begin_transaction()
    while time.monotonic() < end:
        for _ in range(1000):
            try:
                producer.produce(topic, payload, partition=sent % PARTITIONS,
                                 on_delivery=lambda err, _m: failures.append(err) if err else None)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        if interval_ms is not None and time.monotonic() >= next_commit:
            began = time.monotonic()
            producer.commit_transaction(60)
            in_commit += time.monotonic() - began
            commits += 1
            producer.begin_transaction()
            next_commit = time.monotonic() + interval_ms / 1000
    if interval_ms is not None:
        producer.commit_transaction(60)
    else:
        producer.flush(60)
    elapsed = time.monotonic() - start
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, first: {failures[0]}")
    return Run(sent / elapsed, commits, in_commit, elapsed)


def _request_times(cluster: LocalCluster) -> dict[str, float]:
    """Per API of BREAKDOWN_APIS, the requests (``API count``) and their total ms (``API sum``)
    every broker has answered so far."""
    out: dict[str, float] = {}
    for broker in cluster.broker_ids:
        url = cluster.metrics_url(broker)
        if url is None:
            continue
        with open_metrics(url, timeout=10) as response:
            for key, value in request_totals(response.read().decode()).items():
                out[key] = out.get(key, 0.0) + value
    return out


def request_totals(text: str) -> dict[str, float]:
    """``API count`` and ``API sum`` (ms) of BREAKDOWN_APIS in one broker's scrape."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != REQUEST_TIME:
            continue
        for sample in family.samples:
            api = sample.labels.get("request")
            if api in BREAKDOWN_APIS and sample.name in (f"{REQUEST_TIME}_sum", f"{REQUEST_TIME}_count"):
                key = f"{api} {sample.name.rsplit('_', 1)[1]}"
                out[key] = out.get(key, 0.0) + sample.value
    return out


def breakdown(runs: list[Run], before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """Where the transactional runs' commits went: time in commit_transaction, and each API's
    requests per commit and mean broker-side time."""
    commits = sum(r.commits for r in runs)
    if not commits:
        return {}
    out: dict[str, Any] = {
        "commit_ms": round(1000 * sum(r.in_commit_s for r in runs) / commits, 1),
        "commit_share": round(sum(r.in_commit_s for r in runs) / sum(r.seconds for r in runs), 3),
        "commits": commits}
    for api in BREAKDOWN_APIS:
        count = after.get(f"{api} count", 0.0) - before.get(f"{api} count", 0.0)
        total = after.get(f"{api} sum", 0.0) - before.get(f"{api} sum", 0.0)
        if count:
            out[api] = {"per_commit": round(count / commits, 1), "mean_ms": round(total / count, 2)}
    return out


def _throughput(cluster: LocalCluster, bootstrap: str, seconds: float, size: int) -> dict[str, Any]:
    topic = f"bench-txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS, 3, RETAINED)
    payload = b"x" * size
    idempotent = Producer(_config(bootstrap))
    transactional = Producer({**_config(bootstrap), "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    transactional.init_transactions(60)
    _run(idempotent, topic, payload, 2, None)  # warm-up: connections, metadata, the first batches
    _run(transactional, topic, payload, 2, 100)
    out: dict[str, Any] = {}
    for interval in INTERVALS_MS:
        pairs = []
        txn_runs: list[Run] = []
        before = _request_times(cluster)
        for i in range(ROUNDS[interval]):
            # each kind goes first in every other round: the second run of a pair starts while
            # the brokers still replicate the first's tail (at a commit every 1,000 ms, where
            # transactions cost nearly nothing, the transactional run, always second, measured
            # 0.81-1.07 of the idempotent one, median 0.88)
            if i % 2 == 0:
                plain = _run(idempotent, topic, payload, seconds, None).rate
                txn_run = _run(transactional, topic, payload, seconds, interval)
            else:
                txn_run = _run(transactional, topic, payload, seconds, interval)
                plain = _run(idempotent, topic, payload, seconds, None).rate
            txn_runs.append(txn_run)
            pairs.append((plain, txn_run.rate))
        if interval == 100:
            # (the idempotent runs' Produce requests are in these figures too)
            out["breakdown_100ms"] = breakdown(txn_runs, before, _request_times(cluster))
        out[f"idempotent_{interval}ms"] = max(p for p, _ in pairs)
        out[f"transactional_{interval}ms"] = max(t for _, t in pairs)
        out[f"ratios_{interval}ms"] = [round(t / p, 3) for p, t in pairs]
        out[f"ratio_{interval}ms"] = round(statistics.median(t / p for p, t in pairs), 3)
    return out


def _latency(bootstrap: str, rate: int, seconds: float, size: int) -> dict[str, Any]:
    topic = f"bench-txn-latency-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS, 3)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10, "logger": quiet_logger()})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    latencies: list[float] = []
    stop = threading.Event()
    expected = int(rate * seconds)

    def read() -> None:
        while not stop.is_set() and len(latencies) < expected:
            for msg in consumer.consume(500, 0.1):
                value = msg.value()
                if msg.error() is None and value is not None:
                    latencies.append(time.monotonic() - float(value[:20].decode()))
    reader = threading.Thread(target=read, name="read-committed-reader")
    reader.start()
    producer = Producer({**_config(bootstrap), "linger.ms": 0, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    filler = b"x" * max(0, size - 20)
    start = time.monotonic()
    producer.begin_transaction()
    next_commit = start + 0.1
    for i in range(expected):
        due = start + i / rate
        while (now := time.monotonic()) < due:
            time.sleep(min(due - now, 0.001))
        producer.produce(topic, b"%20.6f" % time.monotonic() + filler, partition=i % PARTITIONS)
        producer.poll(0)
        if time.monotonic() >= next_commit:
            producer.commit_transaction(60)
            producer.begin_transaction()
            next_commit = time.monotonic() + 0.1
    producer.commit_transaction(60)
    reader.join(30)
    stop.set()
    reader.join()
    consumer.close()
    ms = sorted(x * 1000 for x in latencies[len(latencies) // 10:])  # the first tenth is warm-up
    if not ms:
        raise RuntimeError("the read_committed consumer received nothing")
    return {"latency_rate": rate, "latency_received": len(latencies), "latency_expected": expected,
            "latency_ms_p50": round(ms[len(ms) // 2], 1), "latency_ms_p99": round(ms[int(len(ms) * 0.99)], 1),
            "latency_ms_max": round(ms[-1], 1)}


def run_transactions_bench(seconds: float = 5.0, size: int = 1024, rate: int = 1000,
                           keep_dir: Path | None = None) -> dict[str, Any]:
    with private_cluster(3, keep_dir, "odradek-bench-txn-", broker_args=BROKER_ARGS,
                         kill_at_end=True, metrics=True) as (cluster, bootstrap, _zk):
        result: dict[str, Any] = {"seconds": seconds, "size": size,
                                  "rounds": {str(interval): n for interval, n in ROUNDS.items()},
                                  **_throughput(cluster, bootstrap, seconds, size),
                                  **_latency(bootstrap, rate, 10.0, size)}
    result["machine"] = machine()
    return result


def format_result(r: dict[str, Any]) -> str:
    lines = [f"{r['size']}-byte records, acks=all, RF 3, {PARTITIONS} partitions, {r['seconds']:g} s per run, "
             f"{'/'.join(str(n) for n in r['rounds'].values())} rounds alternating at "
             f"{'/'.join(r['rounds'])} ms"]
    for interval in INTERVALS_MS:
        lines.append(
            f"  commit every {interval:>4} ms: transactional {r[f'transactional_{interval}ms']:,.0f} rec/s, "
            f"idempotent {r[f'idempotent_{interval}ms']:,.0f} rec/s (best of each), ratio "
            f"{r[f'ratio_{interval}ms']:.2f} (median of {' / '.join(f'{x:.2f}' for x in r[f'ratios_{interval}ms'])})")
    parts = r.get("breakdown_100ms") or {}
    if parts:
        requests = ", ".join(f"{api} {b['per_commit']:g} x {b['mean_ms']:g} ms" for api, b in parts.items()
                             if isinstance(b, dict))
        lines.append(f"  at 100 ms, a commit: {parts['commit_ms']:g} ms in commit_transaction "
                     f"({100 * parts['commit_share']:.0f}% of the time); per commit, broker-side: {requests}")
    lines += [f"  read_committed end to end at {r['latency_rate']:,} rec/s, commits every 100 ms: "
              f"p50 {r['latency_ms_p50']} ms, p99 {r['latency_ms_p99']} ms, max {r['latency_ms_max']} ms "
              f"({r['latency_received']:,} of {r['latency_expected']:,} received)",
              f"machine: {format_machine(r['machine'])}"]
    return "\n".join(lines)
