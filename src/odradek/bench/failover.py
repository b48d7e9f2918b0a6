"""`odradek bench failover`: how long leadership takes to move when a broker or the controller dies.

One run on a private cluster (its own ZooKeeper, brokers on free ports, a temp dir):

1. create --partitions partitions (replication factor min(3, brokers)) in one topic, or, above
   MAX_PARTITIONS_PER_TOPIC (50,000), in as few topics of near-equal size as keep each at most
   that (100,000 partitions: two topics of 50,000): a topic's replica assignment is one
   ZooKeeper znode, and 50,000 partitions at RF 3 are 789 KB of JSON, 76% of what one request
   may carry under jute.maxbuffer (a topic of 100,000 would be 1.59 MB and is refused,
   broker/topic_admin.py); wait until the controller's TopicChange events are acknowledged by
   every broker and no partition is under-replicated;
2. --rounds times (default 3), each failover preceded by a measurement of the floor:
   set_data on as many scratch znodes as there are partitions, in ZooKeeper multi
   transactions of 1,000 ops committed one after another (what the controller's writes cost
   with no controller logic at all);
   a. broker failover: SIGKILL a broker that is not the controller and read, from the
      controller's timing log (controller/timing.py), the BrokerChange event that noticed
      it: watch fired -> dequeued -> ZooKeeper writes done -> requests queued -> last
      LeaderAndIsr answered. broker_failover_s = last LeaderAndIsr answered - watch fired;
      then restart that broker, wait until it is back in every ISR (no partition
      under-replicated) and move leadership back to the preferred replicas (ElectLeaders),
      as the controller's automatic leader rebalance would;
   b. controller failover: SIGKILL the controller and read the new controller's Startup
      event: elected -> context loaded -> states written -> requests queued -> last
      LeaderAndIsr answered. controller_failover_s = last LeaderAndIsr answered - elected;
      then (but for the last round) restart the old controller the same way.
3. report the median of each: the floor's, the broker failovers' and the controller
   failovers' (with every round's value and the phases of the round nearest the median);
4. report each broker's garbage-collection pauses from its metrics (broker/metrics.GcCollector:
   the longest pause per generation, its CPU time, how many lasted over 100 ms) and CPython's
   allocated blocks, once per life of the broker: read right before it is killed and at the
   end, each covering the time since it (re)started, topic creation included for the first.

The time from the kill to the watch (or the election) is ZooKeeper's session timeout, reported
as detection_s but not counted: it is a setting, not work. Everything is read from wall-clock
stamps the brokers log, so the bench process's own speed does not enter the numbers.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from odradek.admin.admin_client import create_topic, creation_timeout_s
from odradek.admin.errors import ClusterError
from odradek.admin.zookeeper import connect_zk
from odradek.bench.common import (
    cpu_probe_s,
    exit_on_sigterm,
    restart_broker,
    tear_down,
    wait_full_isrs,
    wait_record,
)
from odradek.cli.output import Progress
from odradek.client.metrics_http import open_metrics
from odradek.cluster.local_cluster import LocalCluster
from odradek.common.netutil import free_port, free_port_block

FLOOR_BATCH = 1000
DEFAULT_ROUNDS = 3
_TOPIC = "failover-bench"
#: the most partitions the bench puts in one topic (see the module doc: 76% of jute.maxbuffer
#: at RF 3 with single-digit broker ids, checked by tests/bench/test_bench_failover.py)
MAX_PARTITIONS_PER_TOPIC = 50_000
TOPIC_RULE = (f"at most {MAX_PARTITIONS_PER_TOPIC:,} partitions per topic, in as few topics of "
              f"near-equal size as that allows: one topic's replica assignment is one ZooKeeper "
              f"znode, under jute.maxbuffer")


def bench_topics(partitions: int) -> dict[str, int]:
    """Topic name -> partition count for ``partitions`` spread by TOPIC_RULE; one topic keeps
    the name of the single-topic runs."""
    count = -(-partitions // MAX_PARTITIONS_PER_TOPIC)
    if count == 1:
        return {_TOPIC: partitions}
    base, extra = divmod(partitions, count)
    return {f"{_TOPIC}-{i}": base + (1 if i < extra else 0) for i in range(count)}


def _controller_id(zk: Any) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if zk.exists("/controller"):
            try:
                return int(json.loads(zk.get("/controller")[0])["brokerid"])
            except Exception:  # noqa: BLE001 - it moved between exists and get
                pass
        time.sleep(0.05)
    raise ClusterError("no controller elected")


def _cpu_s(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _idle_cpu(cluster: LocalCluster, seconds: float = 2.0) -> dict[str, float]:
    """Share of one core each broker burns while nothing but follower fetches happen."""
    pids = {b: cluster.broker_pid(b) for b in cluster.broker_ids}
    before = {b: _cpu_s(p) for b, p in pids.items()}
    time.sleep(seconds)
    return {str(b): round((_cpu_s(p) - before[b]) / seconds, 2) for b, p in pids.items()}


def zk_multi_floor(zk: Any, count: int, batch: int = FLOOR_BATCH) -> float:
    """Seconds to set_data `count` leader-state-sized znodes in multis of `batch` ops,
    committed one after another, on a scratch path (created and removed untimed)."""
    root = f"/odradek-bench-floor-{os.getpid()}"
    zk.ensure_path(root)
    data = json.dumps({"version": 1, "leader": 1, "leader_epoch": 1, "isr": [1, 2],
                       "controller_epoch": 1}).encode()
    names = [f"{root}/p{i}" for i in range(count)]

    def run(op) -> None:
        for start in range(0, count, batch):
            tx = zk.transaction()
            for path in names[start:start + batch]:
                op(tx, path)
            results = tx.commit()
            bad = [r for r in results if isinstance(r, Exception)]
            if bad:
                raise ClusterError(f"floor multi failed: {bad[0]!r}")

    try:
        run(lambda tx, p: tx.create(p, data))
        t0 = time.perf_counter()
        run(lambda tx, p: tx.set_data(p, data))
        return time.perf_counter() - t0
    finally:
        try:
            run(lambda tx, p: tx.delete(p))
            zk.delete(root)
        except Exception:  # noqa: BLE001 - scratch cleanup; the cluster is thrown away anyway
            pass


def _phases(r: dict[str, Any], start_key: str, keys: list[str]) -> dict[str, float]:
    """Durations between consecutive stamps, starting at `start_key`."""
    out: dict[str, float] = {}
    prev_key = start_key
    for key in keys:
        if r.get(key) is not None:
            out[f"{prev_key}->{key}"] = round(r[key] - r[prev_key], 3)
            prev_key = key
    return out


def run_failover_bench(partitions: int, brokers: int = 3, timeout: float = 600.0,
                       keep_dir: Path | None = None, rounds: int = DEFAULT_ROUNDS) -> dict[str, Any]:
    if brokers < 2:
        raise ClusterError("a failover needs at least 2 brokers")
    if rounds < 1:
        raise ClusterError("a failover bench needs at least 1 round")
    previous_sigterm = exit_on_sigterm()
    tmp = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="odradek-failover-"))
    cluster = LocalCluster(tmp, brokers, base_port=free_port_block(brokers), zk_port=free_port(),
                           metrics_base_port=free_port_block(brokers))
    topics = bench_topics(partitions)
    result: dict[str, Any] = {"partitions": partitions, "brokers": brokers,
                              "replication_factor": min(3, brokers), "rounds": rounds,
                              "topics": topics, "topic_rule": TOPIC_RULE}
    try:
        bootstrap = cluster.up(timeout=120)
        zk = connect_zk(cluster.zookeeper_connect)
        try:
            t0 = time.time()
            for name, count in topics.items():
                last = time.time()
                create_topic(bootstrap, name, count, result["replication_factor"],
                             timeout=max(120.0, creation_timeout_s(count)))
            _, created = wait_record(cluster, cluster.broker_ids, "TopicChange", last, timeout,
                                      lambda r: r.get("lai_partitions", 0) > 0)
            result["topic_create_s"] = round(created["acked"] - t0, 3)
            # at 50,000 partitions creating the logs outlasts replica.lag.time.max.ms, so the
            # leaders shrink and re-expand ISRs for a while: start from a settled cluster
            result["isrs_full_s"] = round(wait_full_isrs(bootstrap, list(topics), timeout) - t0, 3)
            time.sleep(2)  # followers start fetching; let the first round settle
            result["idle_cpu_per_broker"] = _idle_cpu(cluster)
            result["loadavg_1m_before_failovers"] = round(os.getloadavg()[0], 2)
            result["cpu_probe_s"] = cpu_probe_s()

            # A shared machine's speed moves by 2x from one minute to the next, so one
            # failover against one floor says little: each round measures the floor right
            # before each failover, and the medians of all rounds are compared.
            floors: list[float] = []
            runs: dict[str, list[tuple[float, dict[str, Any]]]] = {"broker_failover": [],
                                                                   "controller_failover": []}
            lives: dict[str, list[dict[str, Any]]] = {}  # broker -> its GC figures, life by life
            progress = Progress(rounds, "failover rounds")
            for round_ in range(rounds):
                progress.update(round_)
                floors.append(round(zk_multi_floor(zk, partitions), 3))
                runs["broker_failover"].append(_broker_failover(cluster, zk, bootstrap,
                                                                list(topics), timeout, lives))
                floors.append(round(zk_multi_floor(zk, partitions), 3))
                runs["controller_failover"].append(_controller_failover(
                    cluster, zk, bootstrap, list(topics), timeout, lives, restart=round_ < rounds - 1))
            progress.update(rounds)
            progress.close()
            floors.sort()
            result["zk_multi_floor_runs_s"] = floors
            floor = result["zk_multi_floor_s"] = round(statistics.median(floors), 3)
            for key, measured in runs.items():
                values = [value for value, _ in measured]
                median = result[f"{key}_s"] = round(statistics.median(values), 3)
                result[f"{key}_runs_s"] = values
                # the phases of the round nearest the median (the lower one of an even count)
                result[key] = min(measured, key=lambda run: (abs(run[0] - median), run[0]))[1]
                result[f"{key}_vs_floor"] = round(median / floor, 2)
            result["loadavg_1m_after_failovers"] = round(os.getloadavg()[0], 2)
            for b in cluster.broker_ids:
                if cluster.broker_pid(b) is not None:
                    lives.setdefault(str(b), []).append({"until": "end", **gc_pauses(cluster.metrics_url(b))})
            result["gc_pauses"] = lives
        finally:
            zk.stop()
            zk.close()
    finally:
        tear_down(cluster, tmp, keep_dir, previous_sigterm)
    return result


#: what gc_pauses reads of a broker's metrics (a scrape of these only: the whole one is 28 MB at
#: 100,000 partitions)
GC_METRICS = ("odradek_gc_pause_seconds", "odradek_gc_longest_pause_seconds", "odradek_gc_longest_pause_cpu_seconds",
              "odradek_python_allocated_blocks")


def gc_pauses(metrics_url: str | None) -> dict[str, Any]:
    """A broker's garbage-collection figures since it last started: the longest pause per
    generation (wall and CPU seconds), the pauses over 100 ms per generation, and CPython's
    allocated blocks; empty without metrics or when the broker does not answer."""
    if metrics_url is None:
        return {}
    query = "&".join(f"name[]={name}" for name in GC_METRICS)
    try:
        with open_metrics(f"{metrics_url}?{query}", timeout=60) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    out: dict[str, Any] = {"longest_s": {}, "longest_cpu_s": {}, "over_100ms": {}}
    buckets: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            generation = sample.labels.get("generation", "")
            if sample.name == "odradek_gc_longest_pause_seconds":
                out["longest_s"][generation] = round(sample.value, 3)
            elif sample.name == "odradek_gc_longest_pause_cpu_seconds":
                out["longest_cpu_s"][generation] = round(sample.value, 3)
            elif sample.name == "odradek_gc_pause_seconds_bucket":
                buckets.setdefault(generation, {})[sample.labels["le"]] = sample.value
            elif sample.name == "odradek_python_allocated_blocks":
                out["allocated_blocks"] = int(sample.value)
    for generation, counts in buckets.items():
        out["over_100ms"][generation] = int(counts.get("+Inf", 0) - counts.get("0.1", 0))
    return out


def _kill(cluster: LocalCluster, broker: int, lives: dict[str, list[dict[str, Any]]]) -> float:
    """SIGKILL ``broker`` once its GC figures are read (into ``lives``); when it was killed."""
    lives.setdefault(str(broker), []).append({"until": "killed", **gc_pauses(cluster.metrics_url(broker))})
    killed = time.time()
    cluster.kill_broker(broker, signal.SIGKILL)
    return killed


def _broker_failover(cluster: LocalCluster, zk: Any, bootstrap: str, topics: list[str],
                     timeout: float, lives: dict[str, list[dict[str, Any]]]) -> tuple[float, dict[str, Any]]:
    """(a): SIGKILL a broker that is not the controller, read the controller's BrokerChange
    event, then bring the broker back into every ISR with preferred leaders restored."""
    controller = _controller_id(zk)
    victim = max(b for b in cluster.broker_ids if b != controller)
    killed = _kill(cluster, victim, lives)
    _, rec = wait_record(cluster, [controller], "BrokerChange", killed, timeout,
                          lambda r: r.get("dead") == [victim])
    details = {"killed_broker": victim, "controller": controller,
               **_event_details(rec, killed, ["dequeued", "zk_done", "sent", "lai_acked", "acked"])}
    details["victim_back_in_every_isr_s"], details["preferred_leaders_restored"] = restart_broker(
        cluster, bootstrap, topics, victim, timeout, [controller])
    return round(rec["lai_acked"] - rec["fired"], 3), details


def _controller_failover(cluster: LocalCluster, zk: Any, bootstrap: str, topics: list[str],
                         timeout: float, lives: dict[str, list[dict[str, Any]]],
                         restart: bool) -> tuple[float, dict[str, Any]]:
    """(b): SIGKILL the controller and read the new controller's Startup event; with
    ``restart`` the old controller comes back as a broker for the next round."""
    old_controller = _controller_id(zk)
    killed = _kill(cluster, old_controller, lives)
    others = [b for b in cluster.broker_ids if b != old_controller]
    new_controller, rec = wait_record(cluster, others, "Startup", killed, timeout)
    details = {"killed_controller": old_controller, "new_controller": new_controller,
               **_event_details(rec, killed, ["dequeued", "loaded", "zk_done", "sent",
                                              "lai_acked", "acked"])}
    if restart:
        restart_broker(cluster, bootstrap, topics, old_controller, timeout, [new_controller])
    return round(rec["lai_acked"] - rec["fired"], 3), details


def _event_details(rec: dict[str, Any], killed: float, stamps: list[str]) -> dict[str, Any]:
    return {
        "detection_s": round(rec["fired"] - killed, 3),
        "leaders_moved": rec.get("leaderless", 0),
        "lai_partition_states": rec.get("lai_partitions", 0),
        "requests": rec.get("requests", 0),
        "phases_s": _phases(rec, "fired", stamps),
        "zk": {k: rec[k] for k in ("zk_reads", "zk_writes", "zk_read_s", "zk_write_s") if k in rec},
        "cpu_s": {k: rec[k] for k in ("event_cpu_s", "process_cpu_s") if k in rec},
    }


def format_result(r: dict[str, Any]) -> str:
    topics = r.get("topics") or {_TOPIC: r["partitions"]}
    lines = [
        f"partitions {r['partitions']:,} in {len(topics)} topic{'s' if len(topics) > 1 else ''} "
        f"({r.get('topic_rule', 'one topic')}), brokers {r['brokers']}, RF {r['replication_factor']}; "
        f"topic created and acknowledged in {r['topic_create_s']:.1f} s; idle CPU per broker "
        f"{r['idle_cpu_per_broker']}; machine load average (1 min) "
        f"{r['loadavg_1m_before_failovers']} -> {r['loadavg_1m_after_failovers']}; "
        f"CPU probe {r['cpu_probe_s']:.2f} s",
        f"ZooKeeper multi floor ({r['partitions']:,} set_data, batches of {FLOOR_BATCH:,}): "
        f"{r['zk_multi_floor_s']:.3f} s (median of {r['zk_multi_floor_runs_s']})",
    ]
    for key, label in (("broker_failover", "broker failover"), ("controller_failover", "controller failover")):
        d = r[key]
        lines.append(f"{label}: {r[key + '_s']:.3f} s ({r[key + '_vs_floor']:.1f}x floor; median "
                     f"of {r[key + '_runs_s']}), {d['leaders_moved']:,} leaders moved, detection "
                     f"(session timeout) {d['detection_s']:.1f} s")
        lines.append("  round nearest the median: " + ", ".join(f"{k} {v:.3f}" for k, v in d["phases_s"].items()))
    for broker, lives in sorted(r.get("gc_pauses", {}).items()):
        for gc in lives:
            if "longest_s" in gc:
                lines.append(f"broker {broker} garbage collection (until {gc['until']}): longest pause by generation "
                             f"{gc['longest_s']} s ({gc['longest_cpu_s']} s of CPU), over 100 ms "
                             f"{gc['over_100ms']}, {gc.get('allocated_blocks', 0):,} allocated blocks")
    return "\n".join(lines)
