"""`odradek bench reassign`: how long partition reassignment (KafkaController.onPartitionReassignment,
controller/reassignment.py) takes to move many empty partitions, and how close a throttled move of
real data comes to the rate it was throttled to.

One run on a private cluster of 6 brokers (its own ZooKeeper, brokers on free ports, a temp dir):

1. Empty partitions. A topic of --partitions partitions at RF 3 on brokers 1-3, created with an
   explicit replica assignment that rotates [1,2,3] so the preferred leaders are spread; wait
   until no partition is under-replicated; then one AlterPartitionReassignments request (KIP-455,
   reassign_client.alter_reassignments, what `odradek reassign --execute` sends) moves every
   partition to the same rotation of [4,5,6]. Measured from just before the request:
     answered_s   the controller answered it (the reassignment was started: U1 written and
                  A1's LeaderAndIsr sent);
     ar_written_s every partition's replica set (RS) in the topic znode is its target (B6), from that
                  znode's ZooKeeper mtime (the server's clock: this machine's);
     completed_s  the bench saw ListPartitionReassignments list none of them and the topic znode
                  hold every target (polled every POLL_S, so up to that much late).
   From the controller's timing log: the AlterPartitionReassignments event's phases and the
   IsrChangeNotification events in the window (the new replicas joining the ISRs is what lets
   the controller finish each batch).
2. With data. A topic of DATA_PARTITIONS partitions at RF 3 on brokers 1-3 (leaders spread: two
   per broker) is filled with --data-mb MB of random (incompressible) 64 KiB records, acks=1,
   not timed; once every replica holds all of its leader's log (_wait_replicated) it is moved
   to brokers 4-6 with reassign_client.execute and a throttle of --throttle-mb-per-s, exactly
   as `odradek reassign --execute --throttle` does:
   leader/follower.replication.throttled.replicas on the topic and the two rate configs on every
   broker involved, in bytes/s. moved_s runs from just before those configs are written until
   the move completed (as completed_s above); the throttles are removed afterwards
   (reassign_client.remove_throttles, as --verify does). Then the same data is moved back to
   brokers 1-3 without a throttle (unthrottled_moved_s): whether the throttle or the machine set
   the pace.

   What moved_s is compared with: every partition gets three new replicas, each copying the
   partition's whole log, and the follower rate is per broker, so each of brokers 4-6 must fetch
   all of data_bytes (one copy of the data) at the rate; each of brokers 1-3 leads a third of the
   data and must send it three times, also data_bytes at its leader rate. ideal_s = data_bytes /
   throttle_bytes_per_s is therefore the least time the throttles allow; ratio = moved_s / ideal_s
   (1 is a perfect throttle, below 1 a throttle that lets more through than its rate).
   data_bytes is the leaders' log size (DescribeLogDirs), what is actually copied.

   Where the time beyond ideal_s goes: the copy itself runs at nearly the rate (the meter
   holds its average over the window at the bound, replication_quota.py); the rest passes
   before the first byte (writing the throttle configs, then the request) and after the last,
   as each new replica joins the ISR at its leader's next ISR round (every 0.5 s) and the
   controller completes the partitions as those ISR changes reach it. The move starts only
   once the fill's in-sync followers have finished copying (_wait_replicated), else their
   bytes take the leader quota first. Figures: docs/benchmarks.md, "Partition reassignment".
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

from confluent_kafka import Producer

from odradek.admin import reassign_client
from odradek.admin.admin_client import create_topic, creation_timeout_s, quiet_logger
from odradek.admin.errors import AdminError, ClusterError
from odradek.admin.reassign_partitions_command import TP, Assignment
from odradek.bench.common import cpu_probe_s, machine, private_cluster, timing_records, wait_full_isrs
from odradek.bench.failover import _controller_id, _phases
from odradek.cli.output import Progress

BROKERS = 6
OLD, NEW = [1, 2, 3], [4, 5, 6]
TOPIC = "reassign-bench"
DATA_TOPIC = "reassign-bench-data"
#: a multiple of 3, so each old broker leads the same share of the data (see the module doc)
DATA_PARTITIONS = 6
RECORD_BYTES = 64 * 1024
POLL_S = 0.1
#: how often the data move's progress bar asks the new replicas their log sizes (DescribeLogDirs)
SIZES_EVERY_S = 0.5
#: how long each request to the cluster may take (``timeout`` bounds each wait)
REQUEST_TIMEOUT_S = 30.0


def rotated(brokers: list[int], partition: int) -> list[int]:
    """``brokers`` rotated by ``partition``: consecutive partitions get consecutive leaders."""
    k = partition % len(brokers)
    return brokers[k:] + brokers[:k]


def layout(topic: str, partitions: int, brokers: list[int]) -> Assignment:
    return {(topic, p): rotated(brokers, p) for p in range(partitions)}


def run_reassign_bench(partitions: int, data_mb: int = 1024, throttle_mb_per_s: float = 50.0,
                       timeout: float = 900.0, keep_dir: Path | None = None) -> dict[str, Any]:
    if partitions < 1 or data_mb < 1 or throttle_mb_per_s <= 0:
        raise ClusterError("a reassign bench needs at least 1 partition, 1 MB of data and a positive throttle")
    throttle = int(throttle_mb_per_s * 1024 * 1024)
    result: dict[str, Any] = {"partitions": partitions, "brokers": BROKERS, "replication_factor": 3,
                              "from_brokers": OLD, "to_brokers": NEW, "data_partitions": DATA_PARTITIONS,
                              "data_mb": data_mb, "throttle_bytes_per_s": throttle, "machine": machine()}
    with private_cluster(BROKERS, keep_dir, "odradek-reassign-") as (cluster, bootstrap, zk):
        empty, data = layout(TOPIC, partitions, OLD), layout(DATA_TOPIC, DATA_PARTITIONS, OLD)
        for topic, assignment in ((TOPIC, empty), (DATA_TOPIC, data)):
            create_topic(bootstrap, topic, len(assignment), 3, replica_assignment=list(assignment.values()),
                         timeout=max(120.0, creation_timeout_s(len(assignment))))
        wait_full_isrs(bootstrap, [TOPIC, DATA_TOPIC], timeout)
        time.sleep(2)  # followers start fetching; let the move start from a settled cluster
        result["cpu_probe_s"] = cpu_probe_s()
        result["loadavg_1m_before"] = round(os.getloadavg()[0], 2)

        target = {tp: rotated(NEW, tp[1]) for tp in empty}
        started = time.time()
        refused = reassign_client.alter_reassignments(bootstrap, target, REQUEST_TIMEOUT_S)
        answered = time.time()
        if refused:
            raise ClusterError(f"AlterPartitionReassignments: {reassign_client.refused_line(refused)}")
        progress = Progress(len(target), "partitions moved")
        completed, ar_written = _wait_moved(bootstrap, zk, TOPIC, target, timeout,
                                            lambda listed: progress.update(len(target) - listed))
        progress.close()
        result.update(partitions_moved=len(target), answered_s=round(answered - started, 3),
                      ar_written_s=round(ar_written - started, 3), completed_s=round(completed - started, 3))
        windows = {"controller_events": (started, completed)}

        result["data_produced_bytes"] = _fill(bootstrap, DATA_TOPIC, DATA_PARTITIONS, data_mb * 1024 * 1024, timeout)
        wait_full_isrs(bootstrap, [DATA_TOPIC], timeout)
        view = reassign_client.cluster_view(bootstrap, [DATA_TOPIC], REQUEST_TIMEOUT_S)
        sizes = _wait_replicated(view, data, timeout)
        data_bytes = sum(sizes[(tp, view.leaders[tp])] for tp in data)
        data_target = {tp: rotated(NEW, tp[1]) for tp in data}
        started = time.time()
        refused = reassign_client.execute(bootstrap, data_target, view, throttle, REQUEST_TIMEOUT_S)
        if refused:
            raise ClusterError(f"AlterPartitionReassignments: {reassign_client.refused_line(refused)}")
        progress = Progress(max(1, round(data_bytes / 1024 ** 2)), "MiB copied per new broker")
        completed, ar_written = _wait_moved(bootstrap, zk, DATA_TOPIC, data_target, timeout,
                                            _copied_meter(view, data, data_target, progress))
        progress.close()
        moved = completed - started
        windows["data_controller_events"] = (started, completed)
        result["throttles_removed"] = reassign_client.remove_throttles(bootstrap, [DATA_TOPIC], REQUEST_TIMEOUT_S)
        ideal = data_bytes / throttle
        result.update(data_bytes=data_bytes, moved_s=round(moved, 3), data_ar_written_s=round(ar_written - started, 3),
                      ideal_s=round(ideal, 3), ratio=round(moved / ideal, 3),
                      moved_mib_per_s_per_new_broker=round(data_bytes / moved / 1024 ** 2, 2))

        # the same data moved back without a throttle: whether the throttle or the machine set the pace
        view = reassign_client.cluster_view(bootstrap, [DATA_TOPIC], REQUEST_TIMEOUT_S)
        started = time.time()
        refused = reassign_client.execute(bootstrap, data, view, None, REQUEST_TIMEOUT_S)
        if refused:
            raise ClusterError(f"AlterPartitionReassignments: {reassign_client.refused_line(refused)}")
        progress = Progress(max(1, round(data_bytes / 1024 ** 2)), "MiB copied back per old broker")
        completed, _ = _wait_moved(bootstrap, zk, DATA_TOPIC, data, timeout,
                                   _copied_meter(view, data_target, data, progress))
        progress.close()
        result.update(unthrottled_moved_s=round(completed - started, 3),
                      unthrottled_mib_per_s_per_new_broker=round(data_bytes / (completed - started) / 1024 ** 2, 2))
        after = reassign_client.cluster_view(bootstrap, [TOPIC, DATA_TOPIC], REQUEST_TIMEOUT_S)
        result["replicas_after"] = {"empty": sorted({b for tp in empty for b in after.assignment[tp]}),
                                    "data": sorted({b for tp in data for b in after.assignment[tp]})}
        result["leaders_after"] = {"empty": _count(after.leaders[tp] for tp in empty),
                                   "data": _count(after.leaders[tp] for tp in data)}
        result["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
        # read last: the controller logs an event once its requests are answered, which may be
        # after the bench saw the move complete
        records = timing_records(cluster.broker_dir(_controller_id(zk)) / "broker.log")
        for key, (begin, end) in windows.items():
            result[key] = _controller_events(records, begin, end)
    return result


def _count(brokers: Iterable[int]) -> dict[str, int]:
    """broker -> how many of ``brokers`` are it (JSON keys are strings)."""
    counts = Counter(brokers)
    return {str(b): counts[b] for b in sorted(counts)}


def _wait_replicated(view: reassign_client.ClusterView, assignment: Assignment,
                     timeout: float) -> dict[tuple[TP, int], int]:
    """Every replica's log size (DescribeLogDirs) once each holds all of its leader's log.

    A full ISR is not enough: the fill is produced with acks=1, and a follower within
    replica.lag.time.max.ms of its leader is in the ISR while it still copies the last
    records. The move throttles every existing replica on the leader side (as Kafka's
    reassign command does), and an in-sync replica's bytes count against the quota though
    they are never held (ReplicationQuotaManager): started then, the move waited for them
    (512 MiB at 32 MiB/s: the new replicas got 3 MiB in the first 1.5 s)."""
    wanted: dict[int, set[TP]] = {}
    for tp, replicas in assignment.items():
        for broker in replicas:
            wanted.setdefault(broker, set()).add(tp)
    deadline = time.monotonic() + timeout
    while True:
        sizes = reassign_client.log_sizes(view, wanted, REQUEST_TIMEOUT_S)
        behind = [tp for tp, replicas in assignment.items()
                  if (tp, view.leaders[tp]) not in sizes
                  or any(sizes.get((tp, b)) != sizes[(tp, view.leaders[tp])] for b in replicas)]
        if not behind:
            return sizes
        if time.monotonic() > deadline:
            raise ClusterError(f"{len(behind)} partitions of {behind[0][0]} still have replicas behind "
                               f"their leader's log after {timeout:g} s")
        time.sleep(POLL_S)


def _copied_meter(view: reassign_client.ClusterView, before: Assignment, after: Assignment,
                  progress: Progress) -> Callable[[int], None]:
    """What _wait_moved calls at each poll to draw the data move's bar: the new replicas' log
    sizes (DescribeLogDirs, as `reassign --verify` reads them) averaged over the new brokers,
    in MiB, asked every SIZES_EVERY_S and only when the bar is drawn (a run whose stderr is
    not a terminal sends the brokers nothing more than before)."""
    adding: dict[int, set[TP]] = {}
    for tp, replicas in after.items():
        for b in set(replicas) - set(before[tp]):
            adding.setdefault(b, set()).add(tp)
    asked = [0.0]

    def update(_listed: int) -> None:
        now = time.monotonic()
        if not progress.enabled or now - asked[0] < SIZES_EVERY_S:
            return
        asked[0] = now
        sizes = reassign_client.log_sizes(view, adding, REQUEST_TIMEOUT_S)
        progress.update(round(sum(sizes.values()) / max(len(adding), 1) / 1024 ** 2))
    return update


def _wait_moved(bootstrap: str, zk: Any, topic: str, target: Assignment, timeout: float,
                progress: Callable[[int], None] | None = None) -> tuple[float, float]:
    """(when the bench saw the move complete, the topic znode's mtime then): ListPartitionReassignments
    lists none of ``target``'s partitions and the topic znode's AR is every target. ``progress``
    is told, at each poll, how many partitions are still listed."""
    deadline = time.monotonic() + timeout
    tps = sorted(target)
    while True:
        listed = reassign_client.list_reassignments(bootstrap, tps, REQUEST_TIMEOUT_S)
        if progress is not None:
            progress(len(listed))
        if not listed:
            data, stat = zk.get(f"/brokers/topics/{topic}")
            written = json.loads(data)["partitions"]
            if all(written.get(str(p)) == replicas for (_, p), replicas in target.items()):
                return time.time(), stat.mtime / 1000
        if time.monotonic() > deadline:
            left = len(reassign_client.list_reassignments(bootstrap, tps, REQUEST_TIMEOUT_S))
            raise ClusterError(f"reassignment of {topic} not complete after {timeout:g} s "
                               f"({left} of {len(tps)} partitions still listed)")
        time.sleep(POLL_S)


def _controller_events(records: list[dict[str, Any]], started: float, completed: float) -> dict[str, Any]:
    """The controller's AlterPartitionReassignments and IsrChangeNotification events of a move
    (dequeued between ``started`` and ``completed``), times from ``started``: the ISR changes are
    the new replicas caught up, and the last ones run phase B (B1-B8) for the partitions they complete."""
    records = [r for r in records if started <= r.get("dequeued", 0) <= completed]
    out: dict[str, Any] = {}
    alter = [r for r in records if r.get("event") == "AlterPartitionReassignments"]
    if alter:
        out["alter_phases_s"] = {"request->dequeued": round(alter[0]["dequeued"] - started, 3),
                                 **_phases(alter[0], "dequeued", ["zk_done", "sent", "lai_acked", "acked"])}
        out["alter"] = {k: alter[0][k] for k in ("lai_partitions", "requests", "zk_writes", "event_cpu_s")
                        if k in alter[0]}
    isr = [r for r in records if r.get("event") == "IsrChangeNotification"]
    out["isr_change_events"] = len(isr)
    if isr:
        out["first_isr_change_fired_s"] = round(min(r.get("fired") or r["dequeued"] for r in isr) - started, 3)
        out["last_isr_change_acked_s"] = round(max(r.get("acked", r["dequeued"]) for r in isr) - started, 3)
        out["isr_change_zk_writes"] = sum(r.get("zk_writes", 0) for r in isr)
        out["isr_change_requests"] = sum(r.get("requests", 0) for r in isr)
    return out


def _fill(bootstrap: str, topic: str, partitions: int, total: int, timeout: float) -> int:
    """Produce ``total`` bytes of random records spread evenly over ``partitions``; returns the
    bytes of values sent. acks=1 and large batches: only the amount matters, not the speed."""
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none", "queue.buffering.max.kbytes": 262_144,
                         "on_delivery": on_delivery, "logger": quiet_logger()})
    size = min(RECORD_BYTES, max(1, total // partitions))
    count = -(-total // size)
    for i in range(count):
        value = os.urandom(size)
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(timeout)
    if left or failures:
        raise AdminError(f"{len(failures) + left} of {count} records not delivered "
                         f"({failures[0] if failures else 'flush timed out'})")
    return count * size


def format_result(r: dict[str, Any]) -> str:
    from odradek.bench.common import format_machine

    events = r["controller_events"]
    lines = [
        f"{BROKERS} brokers, RF 3, brokers {OLD} -> {NEW}; {format_machine(r['machine'])}; "
        f"CPU probe {r['cpu_probe_s']:.2f} s",
        f"empty: {r['partitions_moved']:,} partitions in one AlterPartitionReassignments: answered "
        f"{r['answered_s']:.3f} s, AR written {r['ar_written_s']:.3f} s, completed {r['completed_s']:.3f} s "
        f"(polled every {POLL_S:g} s)",
        f"  controller: LeaderAndIsr to old and new replicas acknowledged "
        f"{events.get('alter_phases_s', {}).get('sent->lai_acked', float('nan')):.3f} s after it was sent; "
        f"{events.get('isr_change_events', 0)} IsrChangeNotification events, the first fired "
        f"{events.get('first_isr_change_fired_s', float('nan')):.3f} s, the last acknowledged "
        f"{events.get('last_isr_change_acked_s', float('nan')):.3f} s",
        f"data: {r['data_bytes'] / 1024 ** 2:,.1f} MiB in {r['data_partitions']} partitions, throttle "
        f"{r['throttle_bytes_per_s'] / 1024 ** 2:g} MiB/s: moved {r['moved_s']:.1f} s, ideal "
        f"{r['ideal_s']:.1f} s (data / throttle: each new broker fetches one copy), ratio {r['ratio']:.2f}; "
        f"moved back unthrottled {r['unthrottled_moved_s']:.1f} s "
        f"({r['unthrottled_mib_per_s_per_new_broker']:g} MiB/s per new broker)",
    ]
    return "\n".join(lines)
