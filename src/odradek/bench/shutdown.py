"""`odradek bench shutdown`: how long a controlled shutdown (SIGTERM) of a broker takes to move
its leadership away, and to exit (Kafka's KafkaController.shutdownBroker; Kafka 1.1 brought it
from 6.5 minutes to 3 s at 10,000 partitions; odradek's goal is under 1 s).

One run on a private cluster (its own ZooKeeper, brokers on free ports, a temp dir):

1. create --partitions partitions at RF 3 in one topic; the replica assignment puts the
   preferred leaders round-robin, so each of 3 brokers leads a third; wait until no partition
   is under-replicated;
2. --rounds times (default 3):
   a. read every partition state from ZooKeeper; the victim is the broker that is not the
      controller leading the most partitions (a third); SIGTERM it (what `odradek down` and
      any init system send) and poll its pid until the process is gone: exit_s;
   b. read the states of the partitions it led again: the controller's election wrote each
      once, and that write's ZooKeeper mtime (the server's clock: this machine's) is when the
      partition was led elsewhere; leaders_moved_s = the latest of them - the signal. A state
      written more than once since (states_rewritten: a new leader taking the stopping
      broker, still fetching, back into the ISR, for the controller to take it out at the
      exit) makes that an upper bound; a partition still led by the victim is reported
      (leaders_not_moved): the controlled shutdown did not move it. (Not ZooKeeper watches:
      thousands of notifications through kazoo's one callback thread reach the bench up to
      1 s after the mtimes.)
   c. from the controller's timing log, the ControlledShutdown events after the signal:
      signal -> dequeued (the broker's request reached the controller's event thread) ->
      zk_done -> sent -> lai_acked (the new leaders answered LeaderAndIsr: leaders_acked_s,
      when they act as leaders, as against leaders_moved_s, when ZooKeeper held the decision);
   d. restart the victim, wait until it is back in every ISR and move leadership back to the
      preferred replicas (bench/failover.py's restart), so every round starts balanced.
3. report the medians of leaders_moved_s, leaders_acked_s and exit_s with every round's
   values and details, and the round nearest the leaders_moved_s median.

All times are wall-clock stamps of one machine (the ZooKeeper server's mtimes, the controller's
timing log, the bench's own clock), so they compare directly.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from odradek.admin.admin_client import create_topic, creation_timeout_s
from odradek.admin.errors import ClusterError
from odradek.bench.common import cpu_probe_s, private_cluster, restart_broker, timing_records, wait_full_isrs
from odradek.bench.failover import _controller_id, _phases
from odradek.cli.output import Progress
from odradek.cluster.local_cluster import LocalCluster, pid_alive

DEFAULT_ROUNDS = 3
TOPIC = "shutdown-bench"
GOAL_S = 1.0


def partition_states(zk: Any, topic: str, partitions: list[int]) -> dict[int, tuple[dict[str, Any], Any]]:
    """partition -> (its state znode's JSON, its ZnodeStat), read in one pipelined burst."""
    pending = [(p, zk.get_async(f"/brokers/topics/{topic}/partitions/{p}/state")) for p in partitions]
    out = {}
    for p, result in pending:
        data, stat = result.get(timeout=60)
        out[p] = (json.loads(data), stat)
    return out


def run_shutdown_bench(partitions: int, brokers: int = 3, timeout: float = 600.0,
                       keep_dir: Path | None = None, rounds: int = DEFAULT_ROUNDS) -> dict[str, Any]:
    if brokers < 2:
        raise ClusterError("a controlled shutdown needs another broker to move leadership to")
    if rounds < 1:
        raise ClusterError("a shutdown bench needs at least 1 round")
    rf = min(3, brokers)
    result: dict[str, Any] = {"partitions": partitions, "brokers": brokers, "replication_factor": rf,
                              "rounds": rounds, "goal_s": GOAL_S}
    with private_cluster(brokers, keep_dir, "odradek-shutdown-") as (cluster, bootstrap, zk):
        t0 = time.time()
        create_topic(bootstrap, TOPIC, partitions, rf, timeout=max(120.0, creation_timeout_s(partitions)))
        result["isrs_full_s"] = round(wait_full_isrs(bootstrap, [TOPIC], timeout) - t0, 3)
        time.sleep(2)  # followers start fetching; let the first round settle
        result["loadavg_1m_before"] = round(os.getloadavg()[0], 2)
        result["cpu_probe_s"] = cpu_probe_s()
        progress = Progress(rounds, "shutdown rounds")
        measured = []
        for round_ in range(rounds):
            progress.update(round_)
            measured.append(_shutdown_round(cluster, zk, bootstrap, partitions, timeout,
                                            restart=round_ < rounds - 1))
        progress.update(rounds)
        progress.close()
        result["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    for key in ("leaders_moved_s", "leaders_acked_s", "exit_s"):
        values = [r[key] for r in measured if key in r]
        if values:
            result[f"{key.removesuffix('_s')}_runs_s"] = values
            result[key] = round(statistics.median(values), 3)
    median = result["leaders_moved_s"]
    result["rounds_detail"] = measured
    result["round_nearest_median"] = min(measured, key=lambda r: (abs(r["leaders_moved_s"] - median),
                                                                  r["leaders_moved_s"]))
    result["goal_met"] = median < GOAL_S
    result["goal_met_by_leaders_acked"] = result.get("leaders_acked_s", GOAL_S) < GOAL_S
    return result


def _shutdown_round(cluster: LocalCluster, zk: Any, bootstrap: str, partitions: int, timeout: float,
                    restart: bool) -> dict[str, Any]:
    controller = _controller_id(zk)
    before = partition_states(zk, TOPIC, list(range(partitions)))
    led = Counter(state["leader"] for state, _ in before.values())
    victim = max((b for b in cluster.broker_ids if b != controller), key=lambda b: (led[b], b))
    victim_led = sorted(p for p, (state, _) in before.items() if state["leader"] == victim)
    pid = cluster.broker_pid(victim)
    if pid is None:
        raise ClusterError(f"broker {victim} is not running")
    signalled = time.time()
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise ClusterError(f"broker {victim} still running {timeout:g} s after SIGTERM")
        time.sleep(0.005)
    exited = time.time()
    after = partition_states(zk, TOPIC, victim_led)
    not_moved = [p for p in victim_led if after[p][0]["leader"] in (victim, -1)]
    rewritten = [p for p in victim_led if after[p][1].version > before[p][1].version + 1]
    events: list[dict[str, Any]] = []
    logged = time.monotonic() + 10  # the controller logs an event once its requests are answered
    while not events and time.monotonic() < logged:
        events = [r for r in timing_records(cluster.broker_dir(controller) / "broker.log")
                  if r.get("event") == "ControlledShutdown" and r.get("dequeued", 0) >= signalled]
        if not events:
            time.sleep(0.2)
    out: dict[str, Any] = {
        "victim": victim, "controller": controller, "led_by_victim": len(victim_led),
        "leaders_per_broker_before": {str(b): led[b] for b in sorted(led)},
        "leaders_moved_s": round(max(after[p][1].mtime / 1000 for p in victim_led) - signalled, 3),
        "exit_s": round(exited - signalled, 3),
        "leaders_not_moved": len(not_moved), "states_rewritten": len(rewritten),
        "controlled_shutdown_events": len(events),
    }
    if events:
        first = events[0]
        out["controller_phases_s"] = {"signal->dequeued": round(first["dequeued"] - signalled, 3),
                                      **_phases(first, "dequeued", ["zk_done", "sent", "lai_acked", "acked"])}
        if "lai_acked" in first:
            out["leaders_acked_s"] = round(first["lai_acked"] - signalled, 3)
        out["controller_event"] = {k: first[k] for k in ("lai_partitions", "requests", "zk_writes", "zk_write_s",
                                                         "event_cpu_s", "process_cpu_s") if k in first}
    if restart:
        out["victim_back_in_every_isr_s"], out["preferred_leaders_restored"] = restart_broker(
            cluster, bootstrap, [TOPIC], victim, timeout, [controller])
    return out


def format_result(r: dict[str, Any]) -> str:
    d = r["round_nearest_median"]
    lines = [
        f"partitions {r['partitions']:,}, brokers {r['brokers']}, RF {r['replication_factor']}; "
        f"machine load average (1 min) {r['loadavg_1m_before']} -> {r['loadavg_1m_after']}; "
        f"CPU probe {r['cpu_probe_s']:.2f} s",
        f"controlled shutdown (SIGTERM) of a broker leading {d['led_by_victim']:,} partitions: "
        f"leaders moved {r['leaders_moved_s']:.3f} s (median of {r['leaders_moved_runs_s']}; new "
        f"leaders acknowledged {r.get('leaders_acked_s', float('nan')):.3f} s), "
        f"process exit {r['exit_s']:.3f} s (median of {r['exit_runs_s']}); goal {r['goal_s']:g} s "
        f"{'met' if r['goal_met'] else 'not met'} (by the acknowledgements: "
        f"{'met' if r.get('goal_met_by_leaders_acked') else 'not met'})",
    ]
    if "controller_phases_s" in d:
        lines.append("  round nearest the median: " + ", ".join(
            f"{k} {v:.3f}" for k, v in d["controller_phases_s"].items()))
    if d["leaders_not_moved"] or d["states_rewritten"]:
        lines.append(f"  {d['leaders_not_moved']} partitions not moved by the controlled shutdown, "
                     f"{d['states_rewritten']} states written more than once")
    return "\n".join(lines)
