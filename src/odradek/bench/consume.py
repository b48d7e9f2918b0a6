"""`odradek bench consume`: consumer throughput, and the broker's own ceiling beside it.

``records`` 100-byte records (default 10,000,000) are produced once into a new 6-partition topic
at RF 3 (acks=all, megabyte batches, as `odradek bench produce`), then read from the beginning
three ways, one after the other:

- **raw Fetch**: odradek's own Fetch v12 requests (protocol/fast_paths.py's encoder, sent over
  client/broker_connection.py), one connection per partition leader asking for all of that
  leader's partitions at once (32 MiB per response, 8 MiB per partition), each connection in
  its own thread of this process; records are counted from the batch headers, never decoded.
  What the brokers can serve, apart from librdkafka's and Python's cost per record;
- **1 consumer**: one confluent-kafka consumer in a child process, librdkafka's default fetch
  settings, a group of one member;
- **3 consumers**: three such consumers in one group, each in its own process.

Every consumer counts each record it receives (len(value) included: one Python call per
record, as an application has). A consumer group's members first wait, paused, until the group
has settled with every partition assigned once; the clock starts when they are told to go and
stops at the last member's last record. MB/s are 10^6 bytes of record values.

Kreps' 2014 figure for one consumer (Kafka 0.8.1, 3 brokers, 100-byte records): 940,521
records/s (89.7 MB/s).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from odradek.admin.admin_client import create_topic, quiet_logger
from odradek.admin.errors import AdminError
from odradek.bench.common import format_machine, machine, private_cluster
from odradek.bench.produce import _delete_quietly, _measure
from odradek.cli.output import Progress
from odradek.client import client_config
from odradek.client.broker_connection import BrokerConnection, metadata_response
from odradek.protocol import kio_util
from odradek.protocol.fast_paths import follower_fetch_request
from odradek.protocol.records import iter_batches

PARTITIONS = 6
SIZE = 100
FETCH_MAX_BYTES = 32 << 20
PARTITION_MAX_BYTES = 8 << 20
_FETCH = 1


# ---- the raw Fetch reader -------------------------------------------------------------------

def _leaders(bootstrap: str, topic: str) -> dict[tuple[str, int], list[int]]:
    """The partitions of ``topic`` by their leader's (host, port)."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    conn = BrokerConnection(host, int(port), "odradek-bench-consume")
    try:
        response = metadata_response(conn, [topic])
    finally:
        conn.close()
    brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
    out: dict[tuple[str, int], list[int]] = {}
    for t in response.topics:
        for p in t.partitions:
            if int(p.leader_id) < 0:
                raise AdminError(f"{topic}-{int(p.partition_index)} has no leader")
            out.setdefault(brokers[int(p.leader_id)], []).append(int(p.partition_index))
    return out


def _fetch_request(correlation_id: int, topic: str, wanted: list[tuple[int, int, int, int, int]]) -> bytes:
    """A consumer's Fetch v12 (replica id -1, no waiting) of ``wanted`` partitions."""
    return follower_fetch_request(correlation_id, "odradek-bench-consume-raw", -1, 0, FETCH_MAX_BYTES,
                                  [(topic, wanted)])


def _read_leader(address: tuple[str, int], topic: str, partitions: list[int],
                 counts: dict[int, int], ends: dict[int, int]) -> None:
    """Fetch ``partitions`` from their leader until each is read to the high watermark its first
    response gave, counting the records of each complete batch from its header."""
    conn = BrokerConnection(address[0], address[1], "odradek-bench-consume-raw", timeout_s=60.0)
    offsets = dict.fromkeys(partitions, 0)
    try:
        while True:
            wanted = [(p, -1, offsets[p], -1, PARTITION_MAX_BYTES) for p in partitions
                      if p not in ends or offsets[p] < ends[p]]
            if not wanted:
                return
            frame = conn.request_frame(functools.partial(_fetch_request, topic=topic, wanted=wanted))
            _cid, response = kio_util.decode_response(_FETCH, 12, frame)
            for data in response.responses[0].partitions:
                p = int(data.partition_index)
                if data.error_code:
                    raise AdminError(f"raw Fetch of {topic}-{p}: error {data.error_code}")
                ends.setdefault(p, int(data.high_watermark))
                for header in iter_batches(data.records or b""):
                    counts[p] += header.record_count
                    offsets[p] = header.base_offset + header.last_offset_delta + 1
    finally:
        conn.close()


def raw_fetch(bootstrap: str, topic: str) -> dict[str, Any]:
    """Every record of ``topic`` read by raw Fetch requests, one connection per leader."""
    leaders = _leaders(bootstrap, topic)
    counts = dict.fromkeys(range(PARTITIONS), 0)
    ends: dict[int, int] = {}
    errors: list[BaseException] = []

    def run(address: tuple[str, int], partitions: list[int]) -> None:
        try:
            _read_leader(address, topic, partitions, counts, ends)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a, ps), name=f"raw-fetch-{a[1]}") for a, ps in leaders.items()]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    if errors:
        raise AdminError(f"raw Fetch reader: {errors[0]}")
    return {"records": sum(counts.values()), "seconds": round(seconds, 3), "connections": len(leaders),
            "ends": [ends.get(p, 0) for p in range(PARTITIONS)]}


# ---- consumers in child processes -----------------------------------------------------------

def _consumer_child(spec: dict[str, Any]) -> dict[str, Any]:
    """A group member: paused until ``go_file`` exists, then reads its partitions to ``ends``."""
    from confluent_kafka import Consumer

    assigned: list[Any] = []
    started = [False]
    late_rebalances = [0]
    consumer = Consumer({**spec["config"], "logger": quiet_logger()})

    def on_assign(c: Any, partitions: list[Any]) -> None:
        assigned[:] = partitions
        c.assign(partitions)
        if started[0]:
            late_rebalances[0] += 1
        else:
            c.pause(partitions)
        print(json.dumps(sorted(tp.partition for tp in partitions)), flush=True)

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        assigned[:] = []

    consumer.subscribe([spec["topic"]], on_assign=on_assign, on_revoke=on_revoke)
    ends = {int(p): e for p, e in spec["ends"].items()}
    deadline = time.monotonic() + spec["timeout_s"]
    while not os.path.exists(spec["go_file"]):
        consumer.consume(100, 0.05)
        if time.monotonic() > deadline:
            raise SystemExit("never told to go")
    started[0] = True
    consumer.resume(list(assigned))
    mine = {tp.partition for tp in assigned}
    next_offset = dict.fromkeys(mine, 0)
    records = 0
    value_bytes = 0
    last = time.monotonic()
    consume = consumer.consume
    while any(next_offset.get(p, 0) < ends[p] for p in mine):
        # a short timeout: consume(n, timeout) returns a part batch only when the timeout ends
        batch = consume(10_000, 0.02)
        for msg in batch:
            if msg.error() is not None:
                continue
            records += 1
            value_bytes += len(msg.value() or b"")
            next_offset[msg.partition() or 0] = (msg.offset() or 0) + 1
        if batch:
            last = time.monotonic()
        if time.monotonic() > deadline:
            raise SystemExit(f"read {records} records of {sum(ends[p] for p in mine)} before the deadline")
    consumer.close()
    return {"records": records, "value_bytes": value_bytes, "last": last, "partitions": sorted(mine),
            "late_rebalances": late_rebalances[0]}


def _lines(stream: Any, into: queue.Queue[tuple[int, str]], index: int) -> None:
    for line in stream:
        into.put((index, line))
    into.put((index, ""))


def consumers(bootstrap: str, topic: str, ends: list[int], members: int, timeout_s: float) -> dict[str, Any]:
    """``members`` consumers in one group, each in its own process, reading ``topic`` from the
    beginning once the group has settled: records and seconds from go to the last record."""
    group = f"bench-consume-{uuid.uuid4().hex[:8]}"
    go_file = Path(tempfile.mkdtemp(prefix="odradek-bench-consume-")) / "go"
    spec = {"topic": topic, "ends": {str(p): e for p, e in enumerate(ends)}, "go_file": str(go_file),
            "timeout_s": timeout_s,
            "config": client_config.librdkafka({"bootstrap.servers": bootstrap, "group.id": group,
                                                "enable.auto.commit": False, "auto.offset.reset": "earliest"})}
    children = [subprocess.Popen([sys.executable, "-m", "odradek.bench.consume", json.dumps(spec)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(members)]
    lines: queue.Queue[tuple[int, str]] = queue.Queue()
    last_lines: list[str] = [""] * members
    for i, child in enumerate(children):
        threading.Thread(target=_lines, args=(child.stdout, lines, i), daemon=True).start()
    try:
        assignment: list[list[int] | None] = [None] * members
        deadline = time.monotonic() + 120
        while True:
            flat = [p for a in assignment if a is not None for p in a]
            if None not in assignment and sorted(flat) == list(range(PARTITIONS)) and all(assignment):
                time.sleep(1.0)  # a settled group stays settled: no assignment line came meanwhile
                if lines.empty():
                    break
            try:
                i, line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AdminError(f"the group of {members} consumers did not settle in 120 s "
                                 f"(assignments {assignment})") from None
            if not line:
                raise AdminError(f"consumer {i} exited before reading: {_stderr_tail(children[i])}")
            assignment[i] = json.loads(line)
        go = time.monotonic()
        go_file.touch()
        done = 0
        while done < members:
            i, line = lines.get(timeout=timeout_s + 60)
            if line:
                last_lines[i] = line
            else:
                done += 1
        for i, child in enumerate(children):
            if child.wait(60) != 0:
                raise AdminError(f"consumer {i} failed: {_stderr_tail(child)}")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        with contextlib.suppress(OSError):
            go_file.unlink()
            go_file.parent.rmdir()
    results = [json.loads(line) for line in last_lines]
    if any(r["late_rebalances"] for r in results):
        raise AdminError(f"the group of {members} rebalanced while reading: the count is not one read")
    return {"members": members, "records": sum(r["records"] for r in results),
            "value_bytes": sum(r["value_bytes"] for r in results),
            "seconds": round(max(r["last"] for r in results) - go, 3),
            "per_member": [r["records"] for r in results]}


def _stderr_tail(child: subprocess.Popen[str]) -> str:
    if child.poll() is None:
        child.kill()
        child.wait()
    err = child.stderr.read() if child.stderr else ""
    return (err.strip().splitlines() or ["no output"])[-1]


# ---- the bench ------------------------------------------------------------------------------

def _rates(run: dict[str, Any]) -> dict[str, Any]:
    s = max(run["seconds"], 1e-9)
    return {**run, "records_per_s": round(run["records"] / s, 1), "mb_per_s": round(run["records"] * SIZE / s / 1e6, 2)}


def run_consume_bench(bootstrap: str | None, records: int, keep_dir: Path | None = None) -> dict[str, Any]:
    """Produce ``records`` once, then read them by raw Fetch, by one consumer and by three."""
    with contextlib.ExitStack() as stack:
        keep = False
        if bootstrap is None:
            _cluster, bootstrap, _zk = stack.enter_context(
                private_cluster(3, keep_dir, "odradek-bench-consume-", kill_at_end=True))
            keep = True
        topic = f"bench-consume-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, topic, PARTITIONS, 3)
        try:
            print(f"odradek: bench consume: producing {records:,} records of {SIZE} bytes", file=sys.stderr,
                  flush=True)
            produced = _measure(bootstrap, topic, records, SIZE, "all", 3, PARTITIONS)
            timeout_s = max(120.0, records / 20_000)
            steps = Progress(3, "reads (raw Fetch, 1 consumer, 3 consumers)")
            raw = raw_fetch(bootstrap, topic)
            steps.update(1)
            one = consumers(bootstrap, topic, raw["ends"], 1, timeout_s)
            steps.update(2)
            three = consumers(bootstrap, topic, raw["ends"], 3, timeout_s)
            steps.update(3)
            steps.close()
        finally:
            if not keep:
                _delete_quietly(bootstrap, topic)
    return {"records": records, "size": SIZE, "partitions": PARTITIONS, "replication_factor": 3,
            "produced_per_s": produced.msgs_per_s, "log_end_offsets": sum(raw["ends"]),
            "raw_fetch": _rates({k: v for k, v in raw.items() if k != "ends"}),
            "one_consumer": _rates(one), "three_consumers": _rates(three), "machine": machine()}


def format_result(r: dict[str, Any]) -> str:
    header = ("reader", "records", "seconds", "records/s", "MB/s")
    named = (("raw Fetch (" + f"{r['raw_fetch']['connections']} connections)", r["raw_fetch"]),
             ("1 consumer", r["one_consumer"]), ("3 consumers, one group", r["three_consumers"]))
    rows = [header] + [(name, f"{x['records']:,}", f"{x['seconds']:.2f}", f"{x['records_per_s']:,.0f}",
                        f"{x['mb_per_s']:.1f}") for name, x in named]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"{r['records']:,} records of {r['size']} bytes in {r['partitions']} partitions at RF "
             f"{r['replication_factor']} (produced at {r['produced_per_s']:,.0f} records/s), read from the beginning"]
    lines += ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
              for row in rows]
    lines.append(f"machine: {format_machine(r['machine'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(_consumer_child(json.loads(sys.argv[1]))), flush=True)
