"""The dashboard's state model: pure functions from what the poller read to what the page shows.

Nothing here does I/O, so the rules the page highlights (which broker is dead, which partition
is offline or under-replicated, how far a reassignment or a deletion got) are tested from znode
bytes and scrape text alone. The rules are the ones `odradek status` uses (admin/cluster_health.py),
but for the probe of each broker's Kafka port, which only the dashboard makes (it polls anyway;
status answers from ZooKeeper and the recorded pids in one look):

- a broker is live while /brokers/ids/N exists (its ZooKeeper session holds the ephemeral node)
  and nothing says its process is gone: it is dead when cluster.json expects it or a partition
  lists it as a replica and it is not registered, or when its Kafka port does not answer or its
  recorded pid is gone (``down``: a broker killed a moment ago keeps its registration until its
  session expires, seconds later; with ZooKeeper unreachable the last registrations read are all
  there is, and only the probes tell which of them still run);
- a partition is offline when its leader is -1 or a dead broker (Kafka's OfflinePartitionsCount),
  under-replicated when its ISR is smaller than its replica set less the replicas a reassignment
  is adding (Kafka's Partition.isUnderReplicated uses the same replication factor, KIP-455).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from odradek.admin.consumer_group_command import block_text
from odradek.admin.reassign_partitions_command import Ongoing
from odradek.ui import plain_words
from odradek.ui.plain_words import plain
from odradek.zk import paths

OK, UNDER_REPLICATED, OFFLINE = "ok", "under_replicated", "offline"


@dataclass(frozen=True)
class ZkView:
    """The znodes one poll read, undecoded: /controller, /controller_epoch, /brokers/ids/N,
    /brokers/topics/T, each partition's state znode (None before the controller wrote one) and
    the children of /admin/delete_topics."""
    controller: bytes | None = None
    controller_epoch: bytes | None = None
    brokers: Mapping[int, bytes] = field(default_factory=dict)
    topics: Mapping[str, bytes] = field(default_factory=dict)
    states: Mapping[tuple[str, int], bytes | None] = field(default_factory=dict)
    deleting: tuple[str, ...] = ()


def _decode(decoder: Any, data: bytes | None, *args: Any) -> Any:
    """A znode's value, or None when it is missing or garbled (a dashboard shows what it can)."""
    if data is None:
        return None
    try:
        return decoder(*args, data) if args else decoder(data)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def registered_addresses(view: ZkView) -> dict[int, str]:
    """host:port of each broker registered in ``view`` (what the poller probes)."""
    out = {}
    for broker_id, data in view.brokers.items():
        info = _decode(lambda d, b=broker_id: paths.decode_broker_info(b, d, 0), data)
        if info is not None:
            out[broker_id] = f"{info.host}:{info.port}"
    return out


def cluster_state(view: ZkView, expected_brokers: Iterable[int] = (), down: Mapping[int, str] | None = None,
                  stale: bool = False) -> dict[str, Any]:
    """Brokers (live or dead, and why dead), the controller and its epoch, and every topic's
    partition grid. ``down``: brokers known dead whatever ZooKeeper says, with the reason in
    plain words (the poller's port probes and pid checks). ``stale``: ``view`` is the last one
    read and ZooKeeper does not answer now, so who is controller is unknown and a registration
    proves nothing more than that the broker ran when ZooKeeper last answered."""
    down = down or {}
    controller = None if stale else _decode(paths.decode_controller_id, view.controller)
    epoch = _decode(paths.decode_controller_epoch, view.controller_epoch)
    live: dict[int, Any] = {}
    metrics_urls: dict[int, str | None] = {}
    for broker_id, data in view.brokers.items():
        metrics_urls[broker_id] = _decode(paths.decode_broker_metrics_url, data)
        if broker_id in down:
            continue
        live[broker_id] = _decode(lambda d, b=broker_id: paths.decode_broker_info(b, d, 0), data)
    topics = []
    referenced: set[int] = set()
    leaders: dict[int, int] = {}
    counts = {OK: 0, UNDER_REPLICATED: 0, OFFLINE: 0}
    deleting = set(view.deleting)
    for name in sorted(view.topics):
        assignment = _decode(lambda d, t=name: paths.decode_topic_assignment(t, d), view.topics[name])
        if assignment is None:
            continue
        rows = []
        for p, replicas in sorted(assignment.partitions.items()):
            referenced.update(replicas)
            lai = _decode(lambda d: paths.decode_leader_and_isr(d, 0), view.states.get((name, p)))
            leader = lai.leader if lai is not None else -1
            isr = list(lai.isr) if lai is not None else []
            adding = list(assignment.adding_replicas.get(p, ()))
            removing = list(assignment.removing_replicas.get(p, ()))
            status = partition_status(list(replicas), adding, leader, isr, live)
            counts[status] += 1
            if status != OFFLINE:
                leaders[leader] = leaders.get(leader, 0) + 1
            rows.append({"partition": p, "replicas": list(replicas), "leader": leader,
                         "leader_epoch": lai.leader_epoch if lai is not None else None, "isr": isr,
                         "adding": adding, "removing": removing, "status": status})
        topics.append({"name": name, "deleting": name in deleting,
                       "reassigning": bool(assignment.adding_replicas or assignment.removing_replicas),
                       "partitions": rows})
    ids = sorted(set(live) | set(view.brokers) | set(expected_brokers) | referenced)
    not_registered = "is not registered in ZooKeeper" + (" (as last read)" if stale else "")
    brokers = [{"id": b, "live": b in live,
                "host": live[b].host if live.get(b) is not None else None,
                "port": live[b].port if live.get(b) is not None else None,
                "controller": b == controller, "leaders": leaders.get(b, 0),
                "metrics_url": metrics_urls.get(b),
                "reason": None if b in live else down.get(b, not_registered)} for b in ids]
    return {"controller": controller, "controller_epoch": epoch, "stale": stale, "brokers": brokers, "topics": topics,
            # marked for deletion with the topic's znode already gone: the deletion is finishing
            "deleting_unknown": sorted(deleting - set(view.topics)),
            "summary": {"brokers": len(ids), "live_brokers": len(live), "topics": len(topics),
                        "partitions": sum(counts.values()), "offline": counts[OFFLINE],
                        "under_replicated": counts[UNDER_REPLICATED]}}


READING, LIVE, DEGRADED, STALE, STOPPED = "reading", "live", "degraded", "stale", "stopped"


def health(state: Mapping[str, Any] | None, zookeeper_error: str | None, read_at: float | None, now: float,
           interval: float) -> dict[str, Any]:
    """What the page's badge and banner say about the grid beside it: ``status`` READING
    (nothing read yet), LIVE (fresh and healthy), DEGRADED (fresh, with dead brokers or offline
    partitions), STALE (ZooKeeper does not answer: the grid is the last one read, as of
    ``read_at``) or STOPPED (stale, and no broker answers either: the cluster is down);
    ``problems`` the reasons in plain words, ZooKeeper's first. ``checked_at`` changes with
    every poll, so the page can tell a server that stopped polling (no health for two
    intervals) from a cluster that has nothing new."""
    brokers = (state or {}).get("brokers", [])
    summary = (state or {}).get("summary", {})
    problems = [zookeeper_error] if zookeeper_error else []
    problems += [f"broker {b['id']} {b['reason']}" for b in brokers if not b["live"] and b.get("reason")]
    if zookeeper_error:
        status = STOPPED if brokers and not any(b["live"] for b in brokers) else STALE
    elif read_at is None:
        status = READING
    else:
        status = DEGRADED if problems or summary.get("offline") else LIVE
    return {"status": status, "stale": status in (STALE, STOPPED, READING), "problems": problems,
            "read_at": None if read_at is None else int(read_at * 1000), "checked_at": int(now * 1000),
            "interval_s": interval}


def partition_status(replicas: list[int], adding: list[int], leader: int, isr: list[int],
                     live: Mapping[int, Any]) -> str:
    """OFFLINE, UNDER_REPLICATED or OK (the module docstring gives the rules)."""
    if leader == -1 or leader not in live:
        return OFFLINE
    if len(isr) < len([r for r in replicas if r not in adding]):
        return UNDER_REPLICATED
    return OK


# -- the controller's state-change log ----------------------------------------------------------


def parse_state_changes(lines: Iterable[str], broker_id: int) -> list[dict[str, Any]]:
    """The JSON lines of one broker's state-change log (controller/state_change_log.py), each
    with the broker whose log it came from; lines that are not JSON objects are skipped. A
    failed transition's error loses the exception's class name the log keeps for developers."""
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            record["log_broker"] = broker_id
            if isinstance(record.get("error"), str):
                record["error"] = plain(record["error"])
            out.append(record)
    return out


def merge_timeline(per_broker: Mapping[int, Iterable[dict[str, Any]]], limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` records of every broker's log, newest first. Each controller writes
    only its own log, so after a failover the story continues in another broker's file; sorting
    by (time, controller epoch) puts it back together."""
    records = [r for rs in per_broker.values() for r in rs]
    records.sort(key=lambda r: (r.get("time_ms") or 0, r.get("controller_epoch") or 0), reverse=True)
    return records[:limit]


# -- reassignments and deletions ----------------------------------------------------------------


def reassignment_plan(ongoing: Mapping[tuple[str, int], Ongoing]) -> dict[tuple[str, int], list[int]]:
    """The target replicas of each reassignment in progress: ListPartitionReassignments lists
    the full set (original plus adding) and the replicas being removed (KIP-455)."""
    return {tp: [r for r in o.replicas if r not in o.removing] for tp, o in ongoing.items()}


def progress(done: int | None, total: int | None) -> float | None:
    """A fraction in [0, 1] for a progress bar; None when unknown. Nothing to do is done."""
    if done is None or total is None:
        return None
    if total <= 0:
        return 1.0
    return max(0.0, min(1.0, done / total))


def deletion_progress(state: Mapping[str, Any], logs: Mapping[tuple[tuple[str, int], int], int]) -> list[dict[str, Any]]:
    """Per topic marked for deletion (/admin/delete_topics): how many of its replicas' logs are
    gone, from DescribeLogDirs of the live brokers (``logs``: (partition, broker) -> bytes, the
    logs still there). A replica on a dead broker cannot be deleted until it returns (Kafka's
    TopicDeletionManager marks the topic ineligible), so it is named as what the deletion waits for."""
    live = {b["id"] for b in state["brokers"] if b["live"]}
    out = []
    for topic in state["topics"]:
        if not topic["deleting"]:
            continue
        replicas = [((topic["name"], p["partition"]), r) for p in topic["partitions"] for r in p["replicas"]]
        remaining = [key for key in replicas if key in logs or key[1] not in live]
        waiting = sorted({r for _, r in replicas if r not in live})
        out.append({"topic": topic["name"], "replicas": len(replicas), "deleted": len(replicas) - len(remaining),
                    "progress": progress(len(replicas) - len(remaining), len(replicas)),
                    "waiting_for_brokers": waiting})
    for name in state.get("deleting_unknown", ()):
        out.append({"topic": name, "replicas": 0, "deleted": 0, "progress": 1.0, "waiting_for_brokers": []})
    return out


# -- consumer groups ------------------------------------------------------------------------------


def group_blocks(ordered: Mapping[str, Any] | None, now_ms: float) -> dict[str, Any] | None:
    """What the groups view shows of a group's KIP-253 blocks (``ordered``: the "ordered"
    section `odradek groups describe` computes, None for a group reading no ordered topic):
    each blocked partition, the longest-blocked first, with how long it has waited as of
    ``now_ms`` (the page's rows stay current between the slower reads of the groups), and
    the describe line's words; or why the blocks are not known."""
    if ordered is None:
        return None
    rows = []
    for b in ordered.get("blocked", ()):
        row = {**b, "blocked_s": max(0.0, now_ms - b["blocked_since_ms"]) / 1000}
        rows.append({"partition": f"{b['topic']}-{b['partition']}", "member_id": b["member_id"],
                     "waits_on": f"{b['topic']}-{b['waits_on']}",
                     "until": "read to its end" if b["read_to_end"] else f"offset {b['barrier_offset']}",
                     "group_position": b["group_position"], "blocked_s": row["blocked_s"],
                     "text": block_text(row)})
    rows.sort(key=lambda r: -r["blocked_s"])
    return {"topics": list(ordered.get("topics", ())), "error": ordered.get("error"), "blocked": rows,
            "oldest_s": rows[0]["blocked_s"] if rows else None}


# -- transactions --------------------------------------------------------------------------------

#: the states of a transaction that is open or being completed (Kafka's ListTransactions names)
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
#: the family of each broker's scrape that says which led partitions' last stable offset lags
LSO_LAG = "kafka_cluster_partition_laststableoffsetlag"
#: a partition's last stable offset lagging this long with no open transaction including it is named
LAG_NOTICE_S = 10.0
#: lagging partitions listed (the furthest behind first) and notices given, at most
MAX_LAGGING = 50
MAX_NOTICES = 20

Partition = tuple[str, int]


@dataclass(frozen=True)
class LsoLags:
    """What the brokers' scrapes say of last stable offsets: ``lags`` each lagging partition's
    high watermark minus last stable offset (the brokers omit the partitions that do not lag),
    ``brokers`` whose last scrape answered (a partition they lead and do not list does not lag),
    ``at_ms`` when the last scrape was made, ``since`` since when each partition has lagged in
    every scrape (lagging_since)."""
    lags: Mapping[Partition, int] = field(default_factory=dict)
    brokers: frozenset[int] = frozenset()
    at_ms: float | None = None
    since: Mapping[Partition, float] = field(default_factory=dict)


def lso_lags(text: str) -> dict[Partition, int]:
    """The partitions one scrape lists in kafka_cluster_partition_laststableoffsetlag (only the
    lagging ones: its leader exports no 0)."""
    out: dict[Partition, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name != LSO_LAG:
            continue
        for sample in family.samples:
            try:
                tp = (sample.labels["topic"], int(sample.labels["partition"]))
            except (KeyError, ValueError):
                continue
            if sample.value > 0:
                out[tp] = max(out.get(tp, 0), int(sample.value))
    return out


def lagging_since(previous: Mapping[Partition, float], lags: Mapping[Partition, int],
                  now_ms: float) -> dict[Partition, float]:
    """Since when each partition in ``lags`` has lagged: ``previous``'s time if it lagged in the
    scrape before, else ``now_ms`` (a scrape in which it did not lag starts it afresh)."""
    return {tp: previous.get(tp, now_ms) for tp, lag in lags.items() if lag > 0}


def _holders(read: Mapping[str, Any]) -> dict[Partition, list[str]]:
    """The open transactions of a read that include each partition."""
    out: dict[Partition, list[str]] = {}
    for t in read["transactions"]:
        if t["state"] in OPEN_STATES and t["error"] is None:
            for topic, partition in t["partitions"]:
                out.setdefault((topic, partition), []).append(t["transactional_id"])
    return out


def transactions_view(reads: Sequence[Mapping[str, Any]], leaders: Mapping[Partition, int], lso: LsoLags | None,
                      now_ms: float) -> dict[str, Any]:
    """The transactions section: the newest of ``reads`` (txn_reader.read_transactions' rounds,
    oldest first) with each transaction's open time as of ``now_ms``, whether it is ``overdue``
    (open or being completed past its timeout), each partition's last stable offset lag (None:
    not known, its leader's metrics were not read; ``leaders`` from the grid); the lagging
    partitions with the open transactions that include them; and ``problems`` in plain words.

    A lagging partition is named a problem when it has lagged for LAG_NOTICE_S and no open
    transaction included it in a read made wholly while it lagged: the newest read that ended
    before the last scrape, with the partition lagging since before it started. Against a read
    made before the lag was sampled a transaction committed in between would look hanging, and
    against one ended after, a transaction begun in between. Nothing is named while some open
    transactions were not described (MAX_DESCRIBED, or a coordinator that did not answer): one
    of them may hold the partition. ``lso`` None: no broker's metrics are read."""
    lso_known = lso if lso is not None else LsoLags()

    def lag_of(tp: Partition) -> int | None:
        if tp in lso_known.lags:
            return lso_known.lags[tp]
        return 0 if leaders.get(tp) in lso_known.brokers else None

    latest = reads[-1] if reads else {"transactions": [], "listed": 0, "open": 0, "ended_ms": None}
    rows = []
    for t in latest["transactions"]:
        is_open = t["state"] in OPEN_STATES
        open_s = max(0.0, now_ms - t["start_time_ms"]) / 1000 if is_open and t["start_time_ms"] is not None else None
        overdue = open_s is not None and bool(t["timeout_ms"]) and open_s * 1000 > t["timeout_ms"]
        rows.append({**t, "open": is_open, "open_s": open_s, "overdue": overdue,
                     "partitions": [{"topic": topic, "partition": p, "name": f"{topic}-{p}",
                                     "lso_lag": lag_of((topic, p))} for topic, p in t["partitions"]]})
    rows.sort(key=lambda r: (not r["open"], -(r["open_s"] or 0.0), r["transactional_id"]))
    problems = [plain_words.transaction_overdue(r["transactional_id"], r["state"], r["coordinator"], r["open_s"],
                                                r["timeout_ms"] / 1000, (p["topic"] for p in r["partitions"]))
                for r in rows if r["overdue"]]

    holders = _holders(latest)
    at_ms = lso_known.at_ms
    lagging = []
    for tp, lag in sorted(lso_known.lags.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_LAGGING]:
        since = lso_known.since.get(tp)
        lagging.append({"topic": tp[0], "partition": tp[1], "name": f"{tp[0]}-{tp[1]}", "lso_lag": lag,
                        "lagging_s": None if since is None or at_ms is None else max(0.0, at_ms - since) / 1000,
                        "held_by": holders.get(tp, [])})
    judged = [r for r in reads if at_ms is not None and r["ended_ms"] <= at_ms]
    if judged and at_ms is not None:
        read = judged[-1]
        held = _holders(read)
        if not read["undescribed_open"] and not read["errors"]:
            for tp, lag in sorted(lso_known.lags.items()):
                since = lso_known.since.get(tp, at_ms)
                if tp not in held and since <= read["started_ms"] and at_ms - since >= LAG_NOTICE_S * 1000:
                    problems.append(plain_words.lso_unexplained(tp[0], tp[1], lag, (at_ms - since) / 1000))
    if len(problems) > MAX_NOTICES:
        problems = problems[:MAX_NOTICES] + [f"and {len(problems) - MAX_NOTICES} more"]
    return {"read": bool(reads), "transactions": rows, "listed": latest["listed"], "open": latest["open"],
            "shown": len(rows), "lagging": lagging, "lagging_total": len(lso_known.lags),
            "lso_known": lso is not None, "problems": problems, "read_at": latest["ended_ms"]}


# -- Prometheus metrics ---------------------------------------------------------------------------

#: what the charts draw: (key, metric family as the broker exports it, kind)
CHARTED = (
    ("messages_in", "kafka_server_brokertopicmetrics_messagesin", "rate"),
    ("bytes_in", "kafka_server_brokertopicmetrics_bytesin", "rate"),
    ("requests", "kafka_network_requestmetrics_requests", "rate"),
    ("under_replicated", "kafka_server_replicamanager_underreplicatedpartitions", "gauge"),
    ("leaders", "kafka_server_replicamanager_leadercount", "gauge"),
)


def metric_sample(text: str) -> dict[str, float]:
    """The charted figures of one scrape: every family's samples summed over their labels
    (counters' ``_total`` samples only, not ``_created``)."""
    wanted = {family: key for key, family, _ in CHARTED}
    out = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(text):
        key = wanted.get(family.name)
        if key is None:
            continue
        for sample in family.samples:
            if family.type == "counter" and not sample.name.endswith("_total"):
                continue
            out[key] += sample.value
    return out


def chart_point(previous: tuple[float, Mapping[str, float]] | None, now: float,
                sample: Mapping[str, float]) -> dict[str, float | None]:
    """One point of each chart: rates per second between two scrapes for counters (None for the
    first scrape, or after a restart reset the counter), the value for gauges."""
    point: dict[str, float | None] = {"t": now}
    for key, _, kind in CHARTED:
        if kind == "gauge":
            point[key] = sample.get(key)
        elif previous is None or now <= previous[0] or sample.get(key, 0) < previous[1].get(key, 0):
            point[key] = None
        else:
            point[key] = (sample.get(key, 0) - previous[1].get(key, 0)) / (now - previous[0])
    return point
