"""`odradek bench produce`: producer throughput and latency against a cluster.

The numbers are meant to be compared with Kreps' 2014 Kafka benchmark (100-byte messages, 3
brokers; 3x synchronous replication at about half the throughput of none), so the defaults
mirror it. Without --bootstrap-server a private 3-broker cluster with its own ZooKeeper is
started in a temp dir, so a run never touches (or depends on) a cluster someone else uses.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from confluent_kafka import Producer

from odradek.admin.admin_client import create_topic, describe_topics, quiet_logger
from odradek.admin.errors import AdminError
from odradek.cli.output import Progress
from odradek.client import client_config
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block

# Timestamping every message would cost more Python time than producing it; this many samples
# are plenty for a stable p99.
_LATENCY_SAMPLES = 20_000


@dataclass(frozen=True)
class ProduceResult:
    messages: int
    size: int
    acks: str
    replication_factor: int
    partitions: int
    seconds: float
    msgs_per_s: float
    mb_per_s: float
    p50_ms: float
    p99_ms: float


@contextlib.contextmanager
def private_cluster(brokers: int = 3, timeout: float = 90.0) -> Iterator[str]:
    """A throwaway cluster on free ports; yields bootstrap servers and always tears it down."""
    tmp = Path(tempfile.mkdtemp(prefix="odradek-bench-"))
    cluster = LocalCluster(tmp, brokers, base_port=free_port_block(brokers), zk_port=free_port())
    try:
        yield cluster.up(timeout=timeout)
    finally:
        cluster.down()
        shutil.rmtree(tmp, ignore_errors=True)


def wait_for_leaders(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """A freshly created topic is usable only once every partition has a leader."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            parts = describe_topics(bootstrap, [topic])[0]["partitions"]
            if parts and all(p["leader"] >= 0 for p in parts):
                return
        except AdminError:  # metadata not propagated yet
            pass
        if time.monotonic() > deadline:
            raise AdminError(f"topic {topic} has partitions without a leader after {timeout:g} s")
        time.sleep(0.1)


def produce_bench(bootstrap: str, messages: int, size: int, acks: str, replication_factor: int,
                  partitions: int = 6, keep: bool = False, default_batches: bool = False) -> ProduceResult:
    """Produce `messages` records of `size` bytes to a new topic and measure the run; the
    topic is deleted afterwards (a user's cluster keeps no bench-* topics) unless ``keep``.

    Latency is delivery-callback time minus send time for every k-th message; throughput is
    messages over the time from the first send to the end of flush()."""
    topic = f"bench-rf{replication_factor}-acks{acks}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions, replication_factor)
    try:
        return _measure(bootstrap, topic, messages, size, acks, replication_factor, partitions, default_batches)
    finally:
        if not keep:
            _delete_quietly(bootstrap, topic)


def _delete_quietly(bootstrap: str, topic: str) -> None:
    """Delete the benchmark's topic; a failure is a warning, not a lost measurement."""
    from odradek.admin.topic_command import delete_topics

    try:
        delete_topics(bootstrap, [topic], timeout=30.0)
    except AdminError as exc:
        print(f"odradek: warning: benchmark topic {topic} not deleted: {exc}", file=sys.stderr)


#: the batching the throughput runs use (one request carries up to a megabyte per partition);
#: ``default_batches`` leaves librdkafka's own (batch.num.messages 10,000), as an application has
_BIG_BATCHES = {"batch.size": 1_000_000, "batch.num.messages": 1_000_000}


def _measure(bootstrap: str, topic: str, messages: int, size: int, acks: str, replication_factor: int,
             partitions: int, default_batches: bool = False) -> ProduceResult:
    wait_for_leaders(bootstrap, topic)
    failures: list[str] = []

    def on_error(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(client_config.librdkafka({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, **({} if default_batches else _BIG_BATCHES),
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151, "compression.type": "none",
        "on_delivery": on_error, "logger": quiet_logger(),
    }))
    producer.list_topics(topic, timeout=10)  # metadata fetched before the clock starts
    payload = os.urandom(size)
    every = max(1, messages // _LATENCY_SAMPLES)
    latencies: list[float] = []
    clock = time.perf_counter

    def sampled(err: object, _msg: object, sent: float) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append(clock() - sent)

    produce = producer.produce
    progress = Progress(messages, "records sent")
    start = clock()
    for i in range(messages):
        while True:
            try:
                if i % every:
                    produce(topic, payload)
                else:
                    t0 = clock()
                    produce(topic, payload, on_delivery=functools.partial(sampled, sent=t0))
                break
            except BufferError:
                producer.poll(0.01)
        if not i & 0x3FF:
            producer.poll(0)
            progress.update(i)
    left = producer.flush(120)
    seconds = clock() - start
    progress.update(messages)
    progress.close()
    if left or failures:
        detail = failures[0] if failures else "flush timed out"
        raise AdminError(f"{len(failures) + left} of {messages} messages not delivered ({detail})")
    latencies.sort()
    return ProduceResult(
        messages=messages, size=size, acks=acks, replication_factor=replication_factor, partitions=partitions,
        seconds=round(seconds, 3), msgs_per_s=round(messages / seconds, 1),
        mb_per_s=round(messages * size / seconds / 1e6, 2),
        p50_ms=round(_percentile(latencies, 0.50) * 1000, 2), p99_ms=round(_percentile(latencies, 0.99) * 1000, 2),
    )


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


_JSON_KEYS = ("messages", "size", "acks", "replication_factor", "msgs_per_s", "mb_per_s", "p50_ms", "p99_ms")


def format_results(results: list[ProduceResult]) -> str:
    """An aligned table, one row per run; with two runs a third line gives the throughput ratio."""
    header = ("messages", "size", "acks", "rf", "partitions", "msgs/s", "MB/s", "p50 ms", "p99 ms")
    rows = [header] + [
        (str(r.messages), str(r.size), r.acks, str(r.replication_factor), str(r.partitions),
         f"{r.msgs_per_s:,.0f}", f"{r.mb_per_s:.2f}", f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}")
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(lines)


def _ratio(results: list[ProduceResult]) -> float:
    return results[0].msgs_per_s / results[1].msgs_per_s


def _child_run(bootstrap: str, messages: int, size: int, acks: str, replication_factor: int,
               partitions: int, keep: bool, command_config: Path | None = None,
               default_batches: bool = False) -> ProduceResult:
    """One measurement in a fresh interpreter, so no run inherits another's heap or threads;
    ``command_config``: the client security settings it connects with."""
    cmd = [sys.executable, "-m", "odradek", "bench", "produce", "--bootstrap-server", bootstrap,
           "--messages", str(messages), "--size", str(size), "--acks", acks,
           "--replication-factor", str(replication_factor), "--partitions", str(partitions), "--json",
           *(["--keep"] if keep else []), *(["--command-config", str(command_config)] if command_config else []),
           *(["--default-batches"] if default_batches else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise AdminError(f"benchmark run failed: {out.stderr.strip().splitlines()[-1:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return ProduceResult(partitions=partitions, seconds=round(messages / data["msgs_per_s"], 3), **data)


def _median_run(runs: list[ProduceResult]) -> ProduceResult:
    return sorted(runs, key=lambda r: r.msgs_per_s)[(len(runs) - 1) // 2]


def run_produce_command(bootstrap: str | None, *, messages: int, size: int, acks: str, replication_factor: int,
                        partitions: int, compare: bool, as_json: bool, rounds: int = 3, keep: bool = False,
                        default_batches: bool = False) -> str:
    """What `odradek bench produce` prints: one run, or with `compare` RF3 acks=all and RF1
    acks=1 alternated for `rounds` rounds, each run in its own process, and the ratio of the
    median throughputs (the first run in a process is measurably faster than later ones).
    The topics of each run are deleted unless ``keep`` (a private cluster goes as a whole)."""
    with contextlib.ExitStack() as stack:
        if bootstrap is None:
            bootstrap = stack.enter_context(private_cluster())
            keep = True
        if not compare:
            results = [produce_bench(bootstrap, messages, size, acks, replication_factor, partitions, keep,
                                     default_batches)]
        else:
            # each child's own bar goes to a pipe (not drawn): this one counts the runs
            runs = [(rf, a) for _ in range(rounds) for rf, a in ((3, "all"), (1, "1"))]
            progress = Progress(len(runs), "produce runs")
            results = []
            for done, (rf, a) in enumerate(runs):
                progress.update(done)
                results.append(_child_run(bootstrap, messages, size, a, rf, partitions, keep))
            progress.update(len(runs))
            progress.close()
    if not compare:
        text = format_results(results)
        return json.dumps({k: asdict(results[0])[k] for k in _JSON_KEYS}) if as_json else text
    medians = [_median_run([r for r in results if r.replication_factor == rf]) for rf in (3, 1)]
    if not as_json:
        return format_results(results) + f"\nmedian throughput ratio (RF3 acks=all / RF1 acks=1): {_ratio(medians):.2f}"
    return json.dumps({"runs": [{k: asdict(r)[k] for k in _JSON_KEYS} for r in results],
                       "median_rf3_acks_all": asdict(medians[0])["msgs_per_s"],
                       "median_rf1_acks_1": asdict(medians[1])["msgs_per_s"],
                       "ratio": round(_ratio(medians), 3)})
