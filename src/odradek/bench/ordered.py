"""`odradek bench ordered`: what ordered delivery across partition changes (KIP-253) costs.

On one private 3-broker cluster:

- **Throughput**, ordered against plain: keyed 100-byte records produced with acks=all to a
  topic with enable.ordered.delivery=true through OrderedProducer, and to a plain topic through
  confluent-kafka's Producer (murmur2_random, Kafka's keyed partitioning), both idempotent
  (OrderedProducer's inner producers are, and a plain producer needs it to keep a key's
  records in order through retries; it is the Java client's default since Kafka 3.0. Measured:
  a plain producer without it was 1.4-2x faster on the same cluster, 2 cores); then read back by
  one OrderedConsumer and by one confluent-kafka Consumer in a group, each calling poll() per
  record as an application does. The two kinds alternate, five rounds, each kind first in
  every other round; the rates are the best of each kind (the machine's noise is one-sided),
  the ratios the median of the rounds'.
- **Expansions under load**: a producer at a steady rate and a group of three OrderedConsumers
  while the topic grows one partition at a time (three, so that no new partition has its
  parent's member: the gate then opens through the group coordinator's position exchange). For every new partition: how long it stayed
  blocked (assigned to a member until its gate opened), how long after the group passed the
  parent's barrier it opened, and how much of that was the gate's own wait (from the later of
  its assignment and the barrier's passing: the goal, within one heartbeat interval) rather
  than the rebalance that gives the new partition to a member (which a plain consumer waits
  for too); and the producer's acknowledgement latency around each expansion against the rest
  of the run.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from odradek.admin.admin_client import create_topic, quiet_logger
from odradek.admin.errors import AdminError
from odradek.bench.common import format_machine, machine, private_cluster
from odradek.client.ordered_consumer import OrderedConsumer
from odradek.client.ordered_producer import OrderedProducer

ORDERED = {"enable.ordered.delivery": "true"}
HEARTBEAT_MS = 500
GROUP_MEMBERS = 3

#: plain and ordered runs of the throughput part, alternating
THROUGHPUT_ROUNDS = 5


def _producer_config(bootstrap: str, only_errors: bool = True) -> dict[str, Any]:
    """Both kinds alike: idempotent, large batches, and delivery reports for failures only (a
    Python call per acknowledged record would measure the callback, not the producer)."""
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "batch.size": 1_000_000,
            "batch.num.messages": 1_000_000, "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151, "logger": quiet_logger(),
            "delivery.report.only.error": only_errors}


def _produce(producer: Any, topic: str, records: int, keys: list[bytes], payload: bytes) -> float:
    """Records per second from the first send to the end of flush()."""
    failures: list[Any] = []

    def failed(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    produce = producer.produce
    n_keys = len(keys)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                produce(topic, payload, key=keys[i % n_keys], on_delivery=failed if not i & 0xFFF else None)
                break
            except BufferError:
                producer.poll(0.01)
        if not i & 0x3FF:
            producer.poll(0)
    left = producer.flush(300)
    seconds = time.perf_counter() - start
    if left or failures:
        raise AdminError(f"{left} records not acknowledged, {len(failures)} failed ({failures[:1]})")
    return records / seconds


def _consume(consumer: Any, topic: str, records: int) -> float:
    """Records per second from the first record to the last (joining is not counted)."""
    consumer.subscribe([topic])
    got, start = 0, 0.0
    deadline = time.monotonic() + 600
    while got < records:
        msg = consumer.poll(1.0)
        if time.monotonic() > deadline:
            raise AdminError(f"read {got} of {records} records in 600 s")
        if msg is None or msg.error():
            continue
        if not got:
            start = time.perf_counter()
        got += 1
    seconds = time.perf_counter() - start
    consumer.close()
    return (records - 1) / seconds if seconds > 0 else float("nan")


def _throughput(bootstrap: str, records: int, size: int, n_keys: int) -> dict[str, Any]:
    """The best rate of each kind, and the median of the rounds' ordered/plain ratios (each
    round's too): a plain and an ordered run back to back share the machine's state of the
    moment (the better of two runs of each gave produce ratios from 0.73 to 1.12 on one idle
    machine)."""
    keys = [f"key-{i}".encode() for i in range(n_keys)]
    payload = os.urandom(size)
    best = {"produce_plain": 0.0, "produce_ordered": 0.0, "consume_plain": 0.0, "consume_ordered": 0.0}
    ratios: dict[str, list[float]] = {"produce": [], "consume": []}
    for round_ in range(THROUGHPUT_ROUNDS):
        rates: dict[str, float] = {}
        # which kind goes first alternates too: the second of a pair ran on a cluster the first
        # had just loaded (its log segments, its page cache), in one direction only otherwise
        for kind in ("plain", "ordered") if round_ % 2 == 0 else ("ordered", "plain"):
            topic = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic, 6, 3, ORDERED if kind == "ordered" else None)
            time.sleep(1)  # leaders elected and every broker told the counts
            config = _producer_config(bootstrap)
            producer: Any = (OrderedProducer(config) if kind == "ordered"
                             else Producer({**config, "partitioner": "murmur2_random"}))
            rates[f"produce_{kind}"] = _produce(producer, topic, records, keys, payload)
            if kind == "ordered":
                producer.close()
            group = {"bootstrap.servers": bootstrap, "group.id": f"bench-{round_}-{topic}",
                     "auto.offset.reset": "earliest", "logger": quiet_logger()}
            consumer: Any = OrderedConsumer(group) if kind == "ordered" else Consumer(group)
            rates[f"consume_{kind}"] = _consume(consumer, topic, records)
        for name, rate in rates.items():
            best[name] = max(best[name], rate)
        for way in ratios:
            ratios[way].append(rates[f"{way}_ordered"] / rates[f"{way}_plain"])
    return {**{name: round(rate, 1) for name, rate in best.items()},
            **{f"{way}_ratio": round(statistics.median(r), 3) for way, r in ratios.items()},
            **{f"{way}_ratios": [round(x, 3) for x in r] for way, r in ratios.items()}}


class _Member:
    """One OrderedConsumer of the expansion run, in a thread, recording what the bench needs."""

    def __init__(self, bootstrap: str, group: str, topic: str, stop: threading.Event) -> None:
        self.assigned: dict[int, float] = {}     # partition -> first time assigned
        self.opened: dict[int, float] = {}       # partition -> time its gate opened
        self.barriers: dict[int, tuple[int, int]] = {}   # partition -> (parent, barrier) when blocked
        self.delivered: list[tuple[float, int, int]] = []  # (time, partition, offset)
        self._stop = stop
        self._consumer = OrderedConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                          "auto.offset.reset": "earliest", "heartbeat.interval.ms": HEARTBEAT_MS,
                                          "session.timeout.ms": 6000, "logger": quiet_logger()})
        self._consumer.subscribe([topic], on_assign=self._on_assign, on_partition_key_assigned=self._on_open)
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        now = time.monotonic()
        for tp in partitions:
            self.assigned.setdefault(tp.partition, now)
        for tp, (parent, barrier) in consumer.barriers().items():
            if barrier >= 0:
                self.barriers.setdefault(tp.partition, (parent, barrier))

    def _on_open(self, _consumer: Any, partitions: list[Any]) -> None:
        now = time.monotonic()
        for tp in partitions:
            if tp.partition in self.barriers:
                self.opened.setdefault(tp.partition, now)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self._consumer.poll(0.1)
                if msg is not None and not msg.error():
                    self.delivered.append((time.monotonic(), msg.partition(), msg.offset()))
        finally:
            self._consumer.close()


def _expansions(bootstrap: str, expansions: int, rate: int) -> dict[str, Any]:
    topic = f"bench-grow-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 4, 3, ORDERED)
    time.sleep(1)
    stop, stop_producing = threading.Event(), threading.Event()
    # three members: a child is initial x 2^L partitions after its parent, so round-robin over
    # two members gave every child its parent's member and the position exchange through the
    # coordinator went unmeasured (0 of 8 crossed); over three, no child shares its parent's member
    members = [_Member(bootstrap, f"bench-grow-{topic}", topic, stop) for _ in range(GROUP_MEMBERS)]
    sent_at: list[tuple[float, float]] = []   # (send time, ack latency)
    errors: list[Any] = []

    def produce() -> None:
        producer = OrderedProducer(_producer_config(bootstrap, only_errors=False))  # latencies need every ack
        keys = [f"key-{i}".encode() for i in range(1000)]
        interval, i = 1.0 / rate, 0
        next_at = time.monotonic()
        while not stop_producing.is_set():
            t0 = time.monotonic()

            def acked(err: Any, _msg: Any, t0: float = t0) -> None:
                if err is not None:
                    errors.append(err)
                else:
                    sent_at.append((t0, time.monotonic() - t0))
            producer.produce(topic, b"x" * 100, key=keys[i % len(keys)], on_delivery=acked)
            producer.poll(0)
            i += 1
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
        producer.flush(60)
        producer.close()

    writer = threading.Thread(target=produce)
    writer.start()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    expanded_at = []
    try:
        # the group formed first (its first join waits out the coordinator's initial rebalance
        # delay), so that no expansion's figures hold the group's start
        deadline = time.monotonic() + 60
        while not all(m.assigned for m in members) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(4)
        for n in range(5, 5 + expansions):
            expanded_at.append(time.monotonic())
            admin.create_partitions([NewPartitions(topic, n)], operation_timeout=10)[topic].result(60)
            time.sleep(4)
    finally:
        stop_producing.set()
        writer.join(120)
        time.sleep(2)
        stop.set()
        for m in members:
            m.thread.join(60)
    if errors:
        raise AdminError(f"{len(errors)} records failed during the expansions ({errors[0]})")
    return _expansion_figures(members, sent_at, expanded_at)


def _expansion_figures(members: list[_Member], sent_at: list[tuple[float, float]],
                       expanded_at: list[float]) -> dict[str, Any]:
    """Per new partition: blocked (assigned until its gate opened); the rebalance (its
    expansion until a member had it); open after the barrier (the first delivery of its
    parent's record at the barrier, by any member, until it opened: the rebalance when the
    barrier was passed before the partition was assigned); and the gate's own wait, from the
    later of its assignment and the barrier's passing until it opened (what the position
    exchange costs). `crossed`: new partitions whose parent another member read."""
    blocked, after_barrier, gate, gate_crossed, rebalance = [], [], [], [], []
    for m in members:
        for p, (parent, barrier) in m.barriers.items():
            opened = m.opened.get(p)
            if opened is None:
                continue
            assigned = m.assigned[p]
            blocked.append(opened - assigned)
            rebalance.append(assigned - max((e for e in expanded_at if e <= assigned), default=assigned))
            passing = [(t, other) for other in members for t, q, offset in other.delivered
                       if q == parent and offset + 1 >= barrier]
            if passing:
                passed, passer = min(passing, key=lambda item: item[0])
                after_barrier.append(max(0.0, opened - passed))
                gate.append(max(0.0, opened - max(passed, assigned)))
                if passer is not m:  # the barrier's passing reached this member through the coordinator
                    gate_crossed.append(gate[-1])
    near = [lat for t, lat in sent_at if any(e - 0.5 <= t <= e + 3 for e in expanded_at)]
    rest = [lat for t, lat in sent_at if not any(e - 0.5 <= t <= e + 3 for e in expanded_at)]
    return {
        "new_partitions_blocked": len(blocked),
        "blocked_s_p50": _pct(blocked, 0.5), "blocked_s_p99": _pct(blocked, 0.99),
        "open_after_barrier_s_p50": _pct(after_barrier, 0.5), "open_after_barrier_s_p99": _pct(after_barrier, 0.99),
        "gate_wait_s_p50": _pct(gate, 0.5), "gate_wait_s_p99": _pct(gate, 0.99),
        "rebalance_s_p50": _pct(rebalance, 0.5), "rebalance_s_p99": _pct(rebalance, 0.99),
        "parent_read_by_another_member": len(gate_crossed),
        "gate_wait_crossed_s_p50": _pct(gate_crossed, 0.5), "gate_wait_crossed_s_p99": _pct(gate_crossed, 0.99),
        "members": len(members),
        "heartbeat_interval_s": HEARTBEAT_MS / 1000,
        "ack_p99_ms_near_expansions": round(_pct(near, 0.99) * 1000, 1),
        "ack_p99_ms_otherwise": round(_pct(rest, 0.99) * 1000, 1),
        "ack_max_ms_near_expansions": round(max(near, default=float("nan")) * 1000, 1),
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def run_ordered_bench(records: int = 300_000, size: int = 100, keys: int = 10_000, expansions: int = 8,
                      rate: int = 2000, keep_dir: Path | None = None) -> dict[str, Any]:
    with private_cluster(3, keep_dir, "odradek-bench-ordered-", kill_at_end=True) as (_cluster, bootstrap, _zk):
        figures = _throughput(bootstrap, records, size, keys)
        result: dict[str, Any] = {
            "records": records, "size": size, "keys": keys,
            **figures,
            "expansions": expansions, "rate": rate,
            **_expansions(bootstrap, expansions, rate),
        }
    result["machine"] = machine()
    return result


def format_result(r: dict[str, Any]) -> str:
    lines = [
        f"{r['records']:,} keyed records of {r['size']} bytes ({r['keys']:,} keys), acks=all, RF 3, 6 partitions",
        f"  produce (both idempotent): ordered {r['produce_ordered']:,.0f} rec/s, plain {r['produce_plain']:,.0f} "
        f"rec/s (best of {len(r['produce_ratios'])}), ratio {r['produce_ratio']:.2f} "
        f"(median of {' / '.join(f'{x:.2f}' for x in r['produce_ratios'])})",
        f"  consume: ordered {r['consume_ordered']:,.0f} rec/s, plain {r['consume_plain']:,.0f} rec/s, "
        f"ratio {r['consume_ratio']:.2f} (median of {' / '.join(f'{x:.2f}' for x in r['consume_ratios'])})",
        f"{r['expansions']} expansions under {r['rate']:,} rec/s, a group of {r['members']}, heartbeat "
        f"{r['heartbeat_interval_s']:g} s: {r['new_partitions_blocked']} new partitions waited",
        f"  blocked p50 {r['blocked_s_p50']} s, p99 {r['blocked_s_p99']} s; opened after the group passed the "
        f"barrier p50 {r['open_after_barrier_s_p50']} s, p99 {r['open_after_barrier_s_p99']} s",
        f"  of which the gate (after both its assignment and the barrier's passing): p50 {r['gate_wait_s_p50']} s, "
        f"p99 {r['gate_wait_s_p99']} s; where another member read the parent ({r['parent_read_by_another_member']} "
        f"of {r['new_partitions_blocked']}): p50 {r['gate_wait_crossed_s_p50']} s, p99 {r['gate_wait_crossed_s_p99']} s; "
        f"the rebalance (expansion to assignment): p50 {r['rebalance_s_p50']} s, "
        f"p99 {r['rebalance_s_p99']} s",
        f"  produce ack p99 {r['ack_p99_ms_near_expansions']} ms around expansions (max "
        f"{r['ack_max_ms_near_expansions']} ms), {r['ack_p99_ms_otherwise']} ms otherwise",
        f"machine: {format_machine(r['machine'])}",
    ]
    return "\n".join(lines)

