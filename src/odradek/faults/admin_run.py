"""`python -m odradek.faults --workload admin`: the fault run of a cluster's administration.

The same cluster and faults as the default workload (faults/__main__.py), and a main topic (6
partitions, RF 3) that two idempotent acks=all librdkafka producers write keyed, numbered
values to for the whole run. Among the faults the nemesis draws administration operations
(faults/admin_workload.py): throttled reassignments (some cancelled), preferred elections,
CreatePartitions, topic config changes, and the deletion and re-creation of scratch topics
under the same name, each run as an operator's script runs it, retrying what can change, with
the controller killed (kill -9) in the middle of half of them.

After the last fault is healed, the run waits (SETTLE_BOUND_S) until no reassignment is in
progress and ZooKeeper shows no operation half done, removes the throttles as --verify does,
and judges (faults/admin_checker.py):

- every operation completed or was refused with a clear Kafka error; any other answer, a call
  that never returned or a client exception is an anomaly;
- nothing is left in ZooKeeper: no /admin/reassign_partitions, /admin/delete_topics/T or
  /admin/preferred_replica_election, no topic znode still adding or removing replicas, no
  partition without its state znode;
- the main topic's replicas, the scratch topics' partition counts and the configs are what the
  operations asked (the last one the cluster took; either, where its answer never came), and
  no replication throttle is left;
- nothing acknowledged is lost (the main topic judged as the default workload judges it, the
  scratch topics' current incarnations), and a re-created scratch topic shows no record of an
  earlier incarnation on any replica's segment files nor through a consumer;
- the replicas of every partition are byte-identical.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoNodeError

from odradek.admin import config_command
from odradek.admin.reassign_partitions_command import BROKER_THROTTLES, TOPIC_THROTTLES
from odradek.common.metadata import TopicPartition
from odradek.faults.admin_checker import (
    PENDING,
    Expectations,
    Operation,
    TopicZk,
    ZkSnapshot,
    earlier_incarnations,
    hung_calls,
    lost_values,
    operations_by_kind,
    partitions_without_state,
    refusals_by_name,
    resolve_pending,
    throttles_left,
    unexpected_answers,
    zookeeper_leftovers,
)
from odradek.faults.admin_workload import ADMIN_KINDS, MAIN, MAIN_PARTITIONS, SCRATCH, AdminOperator, ScratchTopic
from odradek.faults.checker import differing_replicas, judge, read_everything, set_aside_librdkafka_4953
from odradek.faults.cluster import FaultCluster
from odradek.faults.nemesis import KINDS, Nemesis, fault_log, run_faults
from odradek.faults.producer_profiles import make_producer
from odradek.faults.workload import LOGGER, PROTOCOL_ERRORS, ClientTrouble, log_clients_to
from odradek.protocol.records import decode_records, iter_batches
from odradek.zk import paths

#: each admin kind twice among the cluster's own: about half the faults are operations
ALL_KINDS = KINDS + ADMIN_KINDS + ADMIN_KINDS
#: the main topic's writers: librdkafka's defaults (producer_profiles.py)
PRODUCERS = 2
#: how long, after the last fault, the operations may take to settle
SETTLE_BOUND_S = 120.0


def run_admin(args: argparse.Namespace, data_dir: Path, broker_config: dict[str, str]) -> dict[str, Any]:
    cluster = FaultCluster(data_dir, 3, args.session_timeout_ms, broker_config, args.zookeeper_nodes)
    data_dir.mkdir(parents=True, exist_ok=True)
    client_log = log_clients_to(data_dir, "%(asctime)s %(threadName)s %(message)s")
    trouble = ClientTrouble()
    producers: list[Any] = []
    producers_stopped = False
    expect = Expectations()
    operator = AdminOperator(cluster, expect)
    started = time.monotonic()
    not_recovered: list[str] = []
    brokers_exited: list[str] = []
    try:
        cluster.start()
        operator.create_topics()
        producers = [make_producer("librdkafka", i, cluster.bootstrap_servers, MAIN, 10, args.rate, trouble)
                     for i in range(PRODUCERS)]
        for producer in producers:
            producer.start()
        time.sleep(2.0)
        kinds = tuple(args.kinds.split(",")) if args.kinds else ALL_KINDS
        nemesis = Nemesis(cluster, MAIN, args.seed, kinds, operator.faults())
        run_faults(cluster, nemesis, args.faults, args.seed, brokers_exited, not_recovered)
        time.sleep(3.0)  # writes after the last fault
        not_settled = _settle(cluster, operator, SETTLE_BOUND_S)
        throttle_errors = operator.remove_throttles()
        unresolved = sum(p.stop(flush_timeout_s=180) for p in producers)
        producers_stopped = True
        snap = zookeeper_snapshot(cluster)
        if any(op.outcome == PENDING for op in operator.ops):
            resolve_pending(operator.ops, expect, _actual_values(operator, snap))
        acked_by = {p.index: dict(p.acked) for p in producers}
        writes_acknowledged = sum(len(a) for a in acked_by.values())
        main = snap.topics.get(MAIN)
        final_replicas = main.assignment if main is not None else {p: tuple(cluster.broker_ids)
                                                                   for p in range(MAIN_PARTITIONS)}
        log = read_everything(cluster.bootstrap_servers, MAIN, MAIN_PARTITIONS)
        client_4953, log = set_aside_librdkafka_4953(
            log, producers, data_dir / "librdkafka.log",
            [cluster.broker_dir(final_replicas[p][0]) / "data" / f"{MAIN}-{p}" for p in range(MAIN_PARTITIONS)],
            acked_by)
        anomalies = judge(log, {v: w for acked in acked_by.values() for v, w in acked.items()})
        anomalies["librdkafka_4953_duplicates"] = client_4953
        checked = {"on_disk": 0, "consumed": 0}
        anomalies.update({
            "operations_unexpected_answers": unexpected_answers(operator.ops),
            "operations_hung": hung_calls(operator.ops),
            "operations_not_settled": not_settled + throttle_errors,
            "zookeeper_leftovers": zookeeper_leftovers(snap),
            "partitions_without_state": partitions_without_state(snap),
            **_final_values(operator, expect, snap),
            "throttles_left": _throttles_left(cluster, operator, snap),
            **_scratch_anomalies(cluster, operator.scratch.values(), snap, checked),
            "scratch_writes_failed": operator.write_failures,
            "replicas_differing": _differing(cluster, snap),
            "clients_died": trouble.died,
            "failed_deliveries": trouble.failed_deliveries,
            "unresolved_at_end": [f"{unresolved} values"] if unresolved else [],
            "protocol_errors": PROTOCOL_ERRORS.take(),
            "cluster_not_recovered": not_recovered,
            "brokers_exited": brokers_exited,
        })
        ops = operator.ops
        _write_operations(data_dir / "operations.json", ops)
        return {
            "workload": "admin",
            "seed": args.seed,
            "faults": dict(collections.Counter(f.kind for f in nemesis.history)),
            "faults_total": len(nemesis.history),
            "writes_sent": sum(p.sent for p in producers),
            "writes_acknowledged": writes_acknowledged,
            # each admin fault's operation by its outcome (completed_late: done once the faults were over)
            "operations": operations_by_kind(ops),
            "refusals": refusals_by_name(ops),
            "operation_attempts": sum(op.attempts for op in ops),
            "controller_kills": sum(1 for op in ops if op.controller_killed is not None),
            "scratch": {"incarnations": {s.name: s.incarnation for s in operator.scratch.values()},
                        "partitions": {s.name: s.partitions for s in operator.scratch.values()},
                        "writes_sent": operator.scratch_sent, "writes_acknowledged": operator.scratch_acknowledged,
                        # what the check for earlier incarnations read: every replica's records, and a consumer's
                        "records_checked": checked},
            "final_replicas": {str(p): list(r) for p, r in sorted(final_replicas.items())},
            "duration_s": round(time.monotonic() - started, 1),
            "anomalies": {k: len(v) for k, v in anomalies.items()},
            "examples": {k: v[:5] for k, v in anomalies.items() if v},
            "fault_log": fault_log(nemesis.history),
        }
    finally:
        if not producers_stopped:
            for producer in producers:
                producer.stop(flush_timeout_s=0)
        cluster.stop()
        LOGGER.removeHandler(client_log)
        client_log.close()


def _write_operations(path: Path, ops: list[Operation]) -> None:
    """Every operation as the operator's script saw it, kept with the run's data (to look into
    an anomaly): what it asked, its outcome, attempts, refusals and unexpected answers, and the
    controller killed in its middle."""
    path.write_text(json.dumps([dataclasses.asdict(op) for op in ops], indent=1, default=str))


def _settle(cluster: FaultCluster, operator: AdminOperator, bound_s: float) -> list[str]:
    """Wait until no reassignment is in progress (ListPartitionReassignments) and ZooKeeper
    shows no operation half done, at most ``bound_s``; what is still unsettled then."""
    deadline = time.monotonic() + bound_s
    while True:
        moving = operator.in_progress()
        try:
            left = zookeeper_leftovers(zookeeper_snapshot(cluster))
        except Exception as exc:  # noqa: BLE001 - ZooKeeper restarting: not settled yet
            left = [f"ZooKeeper unreadable: {exc!r}"]
        if moving is False and not left:
            return []
        if time.monotonic() > deadline:
            return ([f"reassignments still in progress {bound_s:.0f} s after the last fault"] if moving else
                    [f"no controller answered ListPartitionReassignments {bound_s:.0f} s after the last fault"]
                    if moving is None else []) + [f"{bound_s:.0f} s after the last fault: {line}" for line in left]
        time.sleep(1.0)


def zookeeper_snapshot(cluster: FaultCluster) -> ZkSnapshot:
    """The admin znodes and every topic's assignment and partition znodes, read from ZooKeeper."""
    zk = cluster.zk()

    def data(path: str) -> bytes | None:
        try:
            return bytes(zk.get(path)[0])
        except NoNodeError:
            return None

    def children(path: str) -> list[str]:
        try:
            return list(zk.get_children(path))
        except NoNodeError:
            return []

    topics = {}
    for name in children(paths.BROKER_TOPICS):
        raw = data(paths.topic_path(name))
        if raw is None:
            continue
        a = paths.decode_topic_assignment(name, raw)
        znodes = {int(p) for p in children(paths.topic_partitions_path(name)) if p.isdigit()}
        states = {p for p in znodes if zk.exists(paths.partition_state_path(TopicPartition(name, p))) is not None}
        topics[name] = TopicZk(dict(a.partitions), dict(a.adding_replicas), dict(a.removing_replicas),
                               frozenset(znodes), frozenset(states))
    return ZkSnapshot(data(paths.REASSIGN_PARTITIONS), tuple(sorted(children(paths.DELETE_TOPICS))),
                      data(paths.PREFERRED_REPLICA_ELECTION), topics)


def _actual_values(operator: AdminOperator, snap: ZkSnapshot) -> dict[tuple[Any, ...], Any]:
    """Each subject of the expectations as the cluster has it now: the main topic's replicas
    and the scratch topics' counts from ZooKeeper, configs as DescribeConfigs answers."""
    actual: dict[tuple[Any, ...], Any] = {}
    assignment = snap.topics[MAIN].assignment if MAIN in snap.topics else {}
    for p in range(MAIN_PARTITIONS):   # a partition gone shows as none
        actual[("replicas", MAIN, p)] = tuple(assignment[p]) if p in assignment else None
    for name in SCRATCH:
        actual[("count", name)] = len(snap.topics[name].assignment) if name in snap.topics else None
    for topic, keys in sorted(operator.configured().items()):
        if topic not in snap.topics:
            continue
        own = operator.own_configs(topic)
        for key in sorted(keys):
            actual[("config", topic, key)] = "unreadable" if own is None else own.get(key)
    return actual


def _final_values(operator: AdminOperator, expect: Expectations, snap: ZkSnapshot) -> dict[str, list[str]]:
    actual = _actual_values(operator, snap)
    rows = {"replicas": "replica_sets_unexpected", "count": "partition_counts_unexpected",
            "config": "configs_unexpected"}
    return {row: expect.mismatches({s: v for s, v in actual.items() if s[0] == kind}) for kind, row in rows.items()}


def _throttles_left(cluster: FaultCluster, operator: AdminOperator, snap: ZkSnapshot) -> list[str]:
    topics = {t: {k: v for k, v in (operator.own_configs(t) or {}).items() if k in TOPIC_THROTTLES}
              for t in [MAIN, *SCRATCH] if t in snap.topics}
    brokers: dict[int, dict[str, str]] = {}
    for b in cluster.broker_ids:
        try:
            entries = config_command.describe(cluster.bootstrap_servers, config_command.BROKER, str(b), 30.0,
                                              keys=list(BROKER_THROTTLES))
        except Exception as exc:  # noqa: BLE001 - unreadable is reported, not taken for clean
            brokers[b] = {"describe failed": repr(exc)}
            continue
        brokers[b] = {e["name"]: e["value"] for e in entries
                      if e["name"] in BROKER_THROTTLES and e["source"] == "DYNAMIC_BROKER_CONFIG"}
    return throttles_left(topics, brokers)


def segment_values(segment: Path) -> Iterator[bytes | None]:
    """The value of every record of a segment file (control batches skipped)."""
    buf = segment.read_bytes()
    for header in iter_batches(buf):
        if not header.is_control:
            for record in decode_records(buf[header.position:header.position + header.size]):
                yield record[3]


def _scratch_anomalies(cluster: FaultCluster, scratch: Any, snap: ZkSnapshot,
                       checked: dict[str, int]) -> dict[str, list[str]]:
    """Each scratch topic read from every broker's segment files and through a consumer:
    records of an earlier incarnation, partition directories of a partition the topic does not
    have, and acknowledged values of its current incarnation missing. ``checked`` counts the
    records read each way (the check saw data)."""
    on_disk: list[str] = []
    consumed: list[str] = []
    strays: list[str] = []
    lost: list[str] = []
    for s in scratch:
        assert isinstance(s, ScratchTopic)
        topic = snap.topics.get(s.name)
        count = len(topic.assignment) if topic is not None else 0
        pattern = re.compile(rf"{re.escape(s.name)}-(\d+)")
        for b in cluster.broker_ids:
            for directory in sorted((cluster.broker_dir(b) / "data").glob(f"{s.name}-*")):
                found = pattern.fullmatch(directory.name)
                if found is None:
                    continue   # another topic's, or a renamed "-delete" directory on its way out
                if int(found.group(1)) >= count:
                    strays.append(f"broker {b}: {directory.name} (the topic has {count} partitions)")
                    continue
                values = [v for seg in sorted(directory.glob("*.log")) for v in segment_values(seg)]
                checked["on_disk"] += len(values)
                on_disk += earlier_incarnations(f"broker {b} {directory.name}", values, s.name, s.incarnation)
        if topic is not None:
            log = read_everything(cluster.bootstrap_servers, s.name, count)
            values = [v for entries in log.values() for _, v in entries]
            checked["consumed"] += len(values)
            consumed += earlier_incarnations(f"{s.name} through a consumer", values, s.name, s.incarnation)
            lost += lost_values(s.name, s.acknowledged, values)
        elif s.exists:
            lost += lost_values(s.name, s.acknowledged, [])
    return {"old_incarnation_on_disk": on_disk, "old_incarnation_consumed": consumed,
            "deleted_partition_dirs_left": strays, "lost_scratch": lost}


def _differing(cluster: FaultCluster, snap: ZkSnapshot) -> list[str]:
    """Partitions of the main and scratch topics whose replicas (the final assignment's: a
    replica a reassignment removed from a broker that was down keeps a stray log there, as in
    Kafka) are not byte-identical."""
    out = []
    for name in [MAIN, *SCRATCH]:
        topic = snap.topics.get(name)
        if topic is None:
            continue
        out += [f"{name}-{p}" for p in differing_replicas(_replica_dirs(cluster, name, topic.assignment),
                                                           len(topic.assignment))]
    return out


def _replica_dirs(cluster: FaultCluster, topic: str,
                  assignment: dict[int, tuple[int, ...]]) -> Callable[[int], list[Path]]:
    return lambda p: [cluster.broker_dir(b) / "data" / f"{topic}-{p}" for b in assignment[p]]
