"""`odradek bench groups`: how fast a consumer group rebalances, survives its coordinator's
death, and commits offsets.

One run on a private cluster (3 brokers on their own ZooKeeper in a temp dir, free ports, torn
down by pid at the end), with one topic of --partitions partitions at RF 3, a producer thread
writing to every partition all the time (so a member always has something to consume), and
groups of --members confluent-kafka consumers, each in its own thread, polling continuously:

1. rebalance settle time, for an eager strategy (range: every member gives up every partition,
   then gets its new share) and for KIP-429 cooperative rebalancing (cooperative-sticky: only
   the partitions that move are revoked, in a second rebalance). A new group forms (its first
   rebalance from Empty, which waits group.initial.rebalance.delay.ms, KIP-134), then each
   round an extra member subscribes (join) and one member closes (leave), each at a random
   moment of the members' heartbeat cycle. Settled is when the members' assignments cover
   every partition exactly once (the joiner owning some) and every member that owns
   partitions has received a record since its assignment last changed (or since the change,
   for a member whose partitions did not move). The coordinator's log then splits each
   change: rebalance prepared, every member rejoined, group stable;
2. coordinator failover: a new group commits synchronously every PROBE_INTERVAL_S (0.1 s) per
   member; the coordinator's broker (DescribeGroups' coordinator, checked against the leader of
   the group's `__consumer_offsets` partition) is killed with SIGKILL, and the time to the first
   successful synchronous commit started after the kill is measured (and to every member's),
   with the controller's view of the death and the new coordinator's load from the brokers'
   logs. The broker is restarted between rounds, and once every ISR is full, leadership moves
   back to the preferred replicas (so the coordinator does too, a graceful move, also timed);
   each round starts from a Stable group of just the live members;
3. offset commits per second, on the same group (after the failovers, so that the new
   coordinators did not read these commits back): every member commits the next offsets of all
   its assigned partitions, synchronously, back to back, for ``commit_seconds``; then the same
   with asynchronous commits, at most ASYNC_IN_FLIGHT outstanding per member.

Times are wall clock in the bench process (the consumers' threads), medians over --rounds.
Rebalance members auto-commit every AUTO_COMMIT_MS; the commit and failover group commits only
explicitly. Errors the clients saw are counted by name, and broker tracebacks are reported.
"""
from __future__ import annotations

import os
import random
import signal
import statistics
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from odradek.admin.admin_client import create_topic, describe_topics, quiet_logger
from odradek.admin.errors import ClusterError
from odradek.bench.common import (
    cpu_probe_s,
    format_machine,
    machine,
    private_cluster,
    restart_broker,
    timing_records,
    wait_full_isrs,
)
from odradek.bench.group_members import ASYNC_IN_FLIGHT, AUTO_COMMIT_MS, RATE_PER_PARTITION, TOPIC, Group, Load
from odradek.cli.output import Progress
from odradek.cluster.local_cluster import LocalCluster
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.coordinator.partitioning import partition_for

BROKERS = 3
DEFAULT_ROUNDS = 3
#: Kafka's default group.initial.rebalance.delay.ms (KIP-134), set on the brokers
INITIAL_REBALANCE_DELAY_MS = 3000
#: the Java consumer's defaults before Kafka 3.0 (session 10 s, heartbeat 3 s)
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 3000
COMMIT_SECONDS = 5.0
EAGER, COOPERATIVE = "range", "cooperative-sticky"
#: goals: a join or leave settled within 1 s (+ the initial delay for a group's first rebalance
#: from Empty); a coordinator failover within the session timeout + 1 s
GOAL_REBALANCE_S = 1.0
GOAL_FAILOVER_MARGIN_S = 1.0


def _median(values: list[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return round(statistics.median(measured), 3) if measured else None


def _rebalances(bootstrap: str, partitions: int, members: int, rounds: int, strategy: str,
                settings: dict[str, int], timeout: float) -> dict[str, Any]:
    """(1) for one strategy: the group's forming, then ``rounds`` x (a join, a leave)."""
    group = Group(bootstrap, partitions, strategy, True, settings["session_timeout_ms"],
                  settings["heartbeat_interval_ms"])
    out: dict[str, Any] = {"strategy": strategy, "group": group.id, "join": [], "leave": []}
    try:
        started = time.time()
        out["form"] = group.form(members, timeout)
        if out["form"]:
            out["form"]["at"] = started
        progress = Progress(rounds, "rebalance rounds")
        for round_ in range(rounds):
            progress.update(round_)
            for kind in ("join", "leave"):
                # a change comes at a random moment of the members' heartbeat cycle (the last
                # rebalance lined their heartbeats up), so the wait for the next one is too
                time.sleep(1 + random.uniform(0, settings["heartbeat_interval_ms"] / 1000))
                t0 = time.time()
                group.mark_all(t0)
                if kind == "join":
                    settled = group.settle(t0, timeout, group.add())
                else:
                    group.remove(group.members[0])
                    settled = group.settle(t0, timeout)
                out[kind].append(settled and {**settled, "at": t0})
        progress.update(rounds)
        progress.close()
    finally:
        group.close()
    for kind in ("join", "leave"):
        out[f"{kind}_s"] = _median([r and r["settled_s"] for r in out[kind]])
        out[f"{kind}_assigned_s"] = _median([r and r["assigned_s"] for r in out[kind]])
    out["client_errors"] = group.errors()
    return out


def _commit_rates(group: Group, seconds: float) -> dict[str, Any]:
    """(2) synchronous, then asynchronous commits of every member's partitions, back to back."""
    out: dict[str, Any] = {"seconds": seconds}
    for mode, counter in (("sync", "sync_ok"), ("async", "async_ok")):
        for m in group.members:
            m.set_mode(mode)
        time.sleep(0.5)  # every member is committing
        before = [(getattr(m, counter), m.partitions_committed) for m in group.members]
        started = time.time()
        time.sleep(seconds)
        after = [(getattr(m, counter), m.partitions_committed) for m in group.members]
        elapsed = time.time() - started
        commits = sum(a[0] - b[0] for a, b in zip(after, before))
        out[f"{mode}_commits_per_s"] = round(commits / elapsed, 1)
        if mode == "sync":
            out["sync_partitions_per_s"] = round(sum(a[1] - b[1] for a, b in zip(after, before)) / elapsed, 1)
        for m in group.members:
            m.set_mode("consume")
        time.sleep(0.5)
    return out


def _coordinator(bootstrap: str, group_id: str) -> dict[str, Any]:
    """The group's coordinator as DescribeGroups names it, and the leader of its offsets
    partition (they must agree)."""
    # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": quiet_logger()})  # type: ignore[dict-item]
    described = admin.describe_consumer_groups([group_id], request_timeout=10)[group_id].result(15)
    offsets = describe_topics(bootstrap, [OFFSETS_TOPIC])[0]["partitions"]
    partition = partition_for(group_id, len(offsets))
    return {"describe_groups": described.coordinator.id, "offsets_partition": partition,
            "offsets_partition_leader": offsets[partition]["leader"], "state": getattr(described.state, "name", str(described.state)),
            "members": len(described.members)}


def _wait_stable(bootstrap: str, group: Group, timeout: float) -> dict[str, Any]:
    """Wait until the coordinator reports the group Stable with just its live members (members
    a failover made rejoin under new ids leave stale ones behind until their sessions expire)
    and every member owning partitions has committed since; the coordinator's description."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        described = _coordinator(bootstrap, group.id)
        if described["state"] == "STABLE" and described["members"] == len(group.members):
            since = time.time()
            if _first_commits(group, since, max(1.0, deadline - time.time()))[1] is not None:
                return described
        time.sleep(0.5)
    raise ClusterError(f"group {group.id} not stable with {len(group.members)} members after {timeout:g} s")


def _wait_coordinator(bootstrap: str, timeout: float) -> None:
    """The first FindCoordinator creates `__consumer_offsets`; a group's forming is timed only
    once coordinators answer, so the topic's creation is not counted in it."""
    deadline = time.time() + timeout
    while True:
        try:
            _coordinator(bootstrap, "bench-warm-up")
            return
        except Exception:  # noqa: BLE001 - COORDINATOR_NOT_AVAILABLE while the topic is made
            if time.time() > deadline:
                raise ClusterError(f"no group coordinator after {timeout:g} s") from None
            time.sleep(0.2)


def _first_commits(group: Group, after: float, timeout: float) -> tuple[float | None, float | None]:
    """Seconds from ``after`` to the first successful probe commit started after it, and to the
    moment every member owning partitions has had one (None: not within ``timeout``)."""
    deadline = time.time() + timeout
    first = None
    while time.time() < deadline:
        done: list[float | None] = []
        for m in group.members:
            with m.lock:
                ok = [end for start, end, err in m.probes if start > after and err is None]
                owns = bool(m.assignment)
            if ok:
                done.append(min(ok))
            elif owns:
                done.append(None)
        got = [d for d in done if d is not None]
        if got:
            first = min(got)
            if all(d is not None for d in done):
                return round(first - after, 3), round(max(got) - after, 3)
        time.sleep(0.05)
    return (round(first - after, 3) if first else None), None


def _commit_gap(group: Group, since: float) -> float | None:
    """The longest pause, after ``since``, between one member's successful probe commits (from
    its last success before ``since``), over all members."""
    gaps: list[float] = []
    for m in group.members:
        with m.lock:
            ends = [end for _, end, err in m.probes if err is None]
        before = [e for e in ends if e <= since]
        after = [e for e in ends if e > since]
        times = before[-1:] + after
        gaps.extend(b - a for a, b in zip(times, times[1:]))
    return round(max(gaps), 3) if gaps else None


def _log_time(line: str) -> float | None:
    """The wall-clock time of a broker log line ("2026-11-24 00:05:34,753 INFO ...")."""
    try:
        return time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")) + int(line[20:23]) / 1000
    except (ValueError, OverflowError):
        return None


def _failover_phases(cluster: LocalCluster, victim: int, partition: int, killed: float) -> dict[str, Any]:
    """From the brokers' logs: when the controller saw the coordinator's broker die (its
    ZooKeeper session expired), when the new leader's LeaderAndIsr was answered, and when the
    new coordinator had read the group back from its `__consumer_offsets` partition."""
    out: dict[str, Any] = {}
    others = [b for b in cluster.broker_ids if b != victim]
    for b in others:
        for rec in timing_records(cluster.broker_dir(b) / "broker.log"):
            # the coordinator's broker was the controller too: a new one is elected instead
            seen = (rec.get("event") == "BrokerChange" and rec.get("dead") == [victim]) or rec.get("event") == "Startup"
            if seen and (rec.get("fired") or 0) > killed:
                out["coordinator_was_controller"] = rec["event"] == "Startup"
                out["broker_death_seen_s"] = round(rec["fired"] - killed, 3)
                if "lai_acked" in rec:
                    out["leaders_moved_s"] = round(rec["lai_acked"] - killed, 3)
    mark = f"offsets partition {partition} (leader epoch "
    for b in others:
        try:
            lines = (cluster.broker_dir(b) / "broker.log").read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            at = _log_time(line) if mark in line and "loaded" in line else None
            if at is not None and at > killed:
                out["group_loaded_s"], out["new_coordinator"] = round(at - killed, 3), b
                # "... loaded 1 groups from 29051 records in 1732 ms"
                words = line.split()
                out["load_records"], out["load_ms"] = int(words[-5]), int(words[-2])
                break
    return out


def _failovers(cluster: LocalCluster, bootstrap: str, group: Group, rounds: int,
               timeout: float) -> dict[str, Any]:
    """(3) ``rounds`` x (kill -9 the coordinator, time the first commit, restart it, move the
    leaders back)."""
    out: dict[str, Any] = {"rounds": []}
    for m in group.members:
        m.set_mode("probe")
    for _ in range(rounds):
        coordinator = _wait_stable(bootstrap, group, timeout)
        victim = coordinator["describe_groups"]
        killed = time.time()
        cluster.kill_broker(victim, signal.SIGKILL)
        first, every = _first_commits(group, killed, timeout)
        r: dict[str, Any] = {"coordinator": coordinator, "first_commit_s": first, "every_member_commit_s": every,
                             **_failover_phases(cluster, victim, coordinator["offsets_partition"], killed)}
        # once every ISR is full the preferred leader election moves the group back to its
        # restarted coordinator: a graceful move (the old coordinator resigns and answers
        # NOT_COORDINATOR)
        restarted = time.time()
        r["isrs_full_s"], _ = restart_broker(cluster, bootstrap, [TOPIC, OFFSETS_TOPIC], victim, timeout,
                                             settle_s=3.0)
        r["moved_back_longest_commit_gap_s"] = _commit_gap(group, restarted + r["isrs_full_s"])
        r["coordinator_after"] = _coordinator(bootstrap, group.id)["describe_groups"]
        out["rounds"].append(r)
    _wait_stable(bootstrap, group, timeout)
    for m in group.members:
        m.set_mode("consume")
    for key in ("first_commit_s", "every_member_commit_s", "broker_death_seen_s", "group_loaded_s",
                "load_records", "load_ms", "moved_back_longest_commit_gap_s"):
        out[key] = _median([r.get(key) for r in out["rounds"]])
    return out


def _coordinator_steps(cluster: LocalCluster, measured: dict[str, Any]) -> None:
    """Adds to each join, leave and forming of ``measured`` (one strategy's results) what its
    coordinator logged, in seconds from the change: the rebalance prepared (the JoinGroup or
    LeaveGroup that started it arrived), every member rejoined (the generation made; members
    hear of a rebalance in a heartbeat answer) and the group stable (the leader's assignment
    stored); and how many rebalances it took (KIP-429: two for a cooperative join)."""
    prefix = f"odradek.coordinator.group.coordinator: group {measured['group']}: "
    steps: list[tuple[float, str]] = []
    for b in cluster.broker_ids:
        try:
            text = (cluster.broker_dir(b) / "broker.log").read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            at = line.find(prefix)
            when = _log_time(line) if at >= 0 else None
            if when is not None:
                steps.append((when, line[at + len(prefix):]))
    steps.sort()
    for r in [measured.get("form")] + measured["join"] + measured["leave"]:
        if not r:
            continue
        t0, end = r["at"], r["at"] + r["settled_s"] + 0.002  # log stamps are to the millisecond
        mine = [(t, what) for t, what in steps if t0 - 0.002 <= t <= end]
        prepared = [t for t, what in mine if what.startswith("preparing to rebalance")]
        made = [t for t, what in mine if what.startswith("generation ")]
        stable = [t for t, what in mine if what.startswith("stable at generation")]
        r["coordinator"] = {"prepared_s": round(prepared[0] - t0, 3) if prepared else None,
                            "all_rejoined_s": round(made[-1] - t0, 3) if made else None,
                            "stable_s": round(stable[-1] - t0, 3) if stable else None,
                            "rebalances": len(made)}
    for kind in ("join", "leave"):
        rounds = [r["coordinator"] for r in measured[kind] if r and "coordinator" in r]
        measured[f"{kind}_coordinator"] = {key: _median([c[key] for c in rounds])
                                           for key in ("prepared_s", "all_rejoined_s", "stable_s", "rebalances")}


def _broker_tracebacks(cluster: LocalCluster) -> list[str]:
    """The line after each 'Traceback' header in the broker logs (the first frame), per broker."""
    found = []
    for b in cluster.broker_ids:
        try:
            lines = (cluster.broker_dir(b) / "broker.log").read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i, line in enumerate(lines):
            if line.startswith("Traceback"):
                tail = next((x for x in lines[i + 1:i + 60] if x and not x.startswith(" ")), "")
                found.append(f"broker {b}: {lines[i - 1][:160] if i else ''} -> {tail[:200]}")
    return found


def run_groups_bench(members: int, partitions: int, rounds: int = DEFAULT_ROUNDS,
                     keep_dir: Path | None = None, *, commit_seconds: float = COMMIT_SECONDS,
                     initial_rebalance_delay_ms: int = INITIAL_REBALANCE_DELAY_MS,
                     session_timeout_ms: int = SESSION_TIMEOUT_MS,
                     heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
                     timeout: float = 120.0) -> dict[str, Any]:
    if members < 1 or partitions < members + 1 or rounds < 1:
        raise ClusterError("a groups bench needs a member, more partitions than members + 1, and a round")
    settings = {"group_initial_rebalance_delay_ms": initial_rebalance_delay_ms,
                "session_timeout_ms": session_timeout_ms, "heartbeat_interval_ms": heartbeat_interval_ms,
                "auto_commit_interval_ms": AUTO_COMMIT_MS, "records_per_s_per_partition": RATE_PER_PARTITION}
    result: dict[str, Any] = {"members": members, "partitions": partitions, "rounds": rounds,
                              "brokers": BROKERS, "replication_factor": 3, "settings": settings,
                              "machine": machine(), "cpu_probe_s": cpu_probe_s()}
    with private_cluster(BROKERS, keep_dir, "odradek-groups-", kill_at_end=True,
                         broker_args={"group_initial_rebalance_delay_ms": initial_rebalance_delay_ms}
                         ) as (cluster, bootstrap, _zk):
        try:
            _run_groups(cluster, bootstrap, result, members, partitions, rounds, settings, commit_seconds,
                        session_timeout_ms, heartbeat_interval_ms, timeout)
        finally:
            result["broker_tracebacks"] = _broker_tracebacks(cluster)
            for key in ("eager", "cooperative"):
                if key in result:
                    _coordinator_steps(cluster, result[key])
    return result


def _run_groups(cluster: LocalCluster, bootstrap: str, result: dict[str, Any], members: int, partitions: int,
                rounds: int, settings: dict[str, Any], commit_seconds: float, session_timeout_ms: int,
                heartbeat_interval_ms: int, timeout: float) -> None:
    """The bench's steps on its cluster, filling ``result``."""
    create_topic(bootstrap, TOPIC, partitions, 3, timeout=120)
    wait_full_isrs(bootstrap, [TOPIC], timeout)
    _wait_coordinator(bootstrap, timeout)
    wait_full_isrs(bootstrap, [TOPIC, OFFSETS_TOPIC], timeout)
    with Load(bootstrap, partitions) as load:
        for key, strategy in (("eager", EAGER), ("cooperative", COOPERATIVE)):
            result[key] = _rebalances(bootstrap, partitions, members, rounds, strategy, settings, timeout)
        group = Group(bootstrap, partitions, EAGER, False, session_timeout_ms, heartbeat_interval_ms)
        try:
            result["commit_group_form"] = group.form(members, timeout)
            # failovers first: the commit rates' tens of thousands of offset records would
            # otherwise be in the log the new coordinator reads back
            result["coordinator_failover"] = _failovers(cluster, bootstrap, group, rounds, timeout)
            result["commits"] = _commit_rates(group, commit_seconds)
        finally:
            group.close()
        result["commit_group_client_errors"] = group.errors()
        result["producer_errors"] = dict(load.errors)
    result["machine"]["loadavg_1m_after"] = round(os.getloadavg()[0], 2)


def _s(value: float | None, missing: str = "not settled") -> str:
    return missing if value is None else f"{value:.2f} s"


def format_result(r: dict[str, Any]) -> str:
    s = r["settings"]
    delay_s = s["group_initial_rebalance_delay_ms"] / 1000
    failover_goal = s["session_timeout_ms"] / 1000 + GOAL_FAILOVER_MARGIN_S
    lines = [
        f"{r['members']} members, {r['partitions']} partitions (RF {r['replication_factor']}, "
        f"{r['brokers']} brokers), medians of {r['rounds']} rounds; machine: {format_machine(r['machine'])}, "
        f"CPU probe {r['cpu_probe_s']:.2f} s",
        f"settings: group.initial.rebalance.delay.ms {s['group_initial_rebalance_delay_ms']} (brokers), "
        f"session.timeout.ms {s['session_timeout_ms']}, heartbeat.interval.ms {s['heartbeat_interval_ms']}, "
        f"auto.commit.interval.ms {s['auto_commit_interval_ms']} (rebalance groups)",
    ]
    for key in ("eager", "cooperative"):
        g = r[key]
        form = g["form"]
        lines.append(f"{key} ({g['strategy']}): group formed from Empty in {_s(form and form['settled_s'])} "
                     f"(goal {GOAL_REBALANCE_S + delay_s:g} s: the initial delay applies)")
        for kind in ("join", "leave"):
            runs = ", ".join(_s(x and x["settled_s"]) for x in g[kind])
            lines.append(f"  {kind}: {_s(g[kind + '_s'])} (goal {GOAL_REBALANCE_S:g} s, no initial "
                         f"delay: the group is not Empty; rounds {runs}; assignment complete "
                         f"{_s(g.get(kind + '_assigned_s'))})")
            c = g.get(f"{kind}_coordinator")
            if c:
                lines.append(f"    coordinator: rebalance prepared {_s(c['prepared_s'], '-')}, every member "
                             f"rejoined {_s(c['all_rejoined_s'], '-')}, stable {_s(c['stable_s'], '-')}, "
                             f"{c['rebalances'] or 0:g} rebalance(s)")
    c = r["commits"]
    lines.append(f"offset commits: {c['sync_commits_per_s']:,.1f} synchronous/s "
                 f"({c['sync_partitions_per_s']:,.0f} partition offsets/s), {c['async_commits_per_s']:,.1f} "
                 f"asynchronous/s (<= {ASYNC_IN_FLIGHT} in flight per member), all members together")
    f = r["coordinator_failover"]
    runs = ", ".join(_s(x["first_commit_s"]) for x in f["rounds"])
    lines.append(f"coordinator failover (kill -9 -> a synchronous commit succeeds): {_s(f['first_commit_s'])} "
                 f"(goal {failover_goal:g} s = session timeout + {GOAL_FAILOVER_MARGIN_S:g} s; rounds {runs}); "
                 f"every member committed: {_s(f['every_member_commit_s'])}")
    lines.append(f"  of which: broker death seen by the controller {_s(f.get('broker_death_seen_s'), 'unknown')} "
                 f"(the brokers' ZooKeeper session timeout), group loaded by the new coordinator "
                 f"{_s(f.get('group_loaded_s'), 'unknown')} (reading {f.get('load_records') or 0:,.0f} records "
                 f"took {f.get('load_ms') or 0:,.0f} ms); coordinator moved back by a preferred leader "
                 f"election: longest pause between a member's commits "
                 f"{_s(f.get('moved_back_longest_commit_gap_s'), 'no commit succeeded')}")
    if r.get("broker_tracebacks"):
        lines.append(f"broker tracebacks: {len(r['broker_tracebacks'])}: {r['broker_tracebacks'][:3]}")
    return "\n".join(lines)
