"""`python -m odradek.faults --workload ordered`: the fault run of KIP-253's ordered delivery.

The same cluster and faults as the default workload (faults/__main__.py), against a topic
created with enable.ordered.delivery=true (4 partitions, RF 3). OrderedProducers write keys
with per-key sequence numbers (faults/ordered_workload.py); a group of three OrderedConsumer
members, each a process of its own, reads the topic and writes down every delivery with the
machine's monotonic clock. Besides the broker, ZooKeeper and network faults the nemesis draws
expansions (+1 to +4 partitions, at most 12 undeleted), deletions (to a count from the initial 4
up), and kill -9 of a member (restarted when the fault ends). After the last fault the
producers are flushed, the run waits until the group delivered every acknowledged value, and
the merged deliveries are judged (checker.judge_ordered): every acknowledged value delivered,
and no key's value delivered for the first time before the key's earlier ones.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import random
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.admin.consumer_group_command import GroupAdmin
from odradek.faults.checker import differing_replicas, judge_ordered, read_deliveries, undelivered
from odradek.faults.cluster import FaultCluster
from odradek.faults.nemesis import KINDS, Nemesis, fault_log, run_faults
from odradek.faults.ordered_member import SESSION_TIMEOUT_MS
from odradek.faults.ordered_workload import MemberGroup, OrderedKeyedProducer, TopicChanger
from odradek.faults.workload import LOGGER, PROTOCOL_ERRORS, ClientTrouble, log_clients_to

TOPIC = "ordered-faults"
GROUP = "ordered-faults-readers"
INITIAL_PARTITIONS = 4
MAX_PARTITIONS = 12
MEMBERS = 3
ORDERED_KINDS = ("expand-topic", "shrink-topic", "kill-group-member")
ALL_KINDS = KINDS + ORDERED_KINDS
#: how long the group may take, after the producers are flushed, to deliver every acknowledged value
DELIVERY_BOUND_S = 180.0


def owed_evidence(bootstrap: str, members: MemberGroup, data_dir: Path) -> None:
    """The group still owes values at the end: each member's threads (its log) and the
    coordinator's view of the group's blocks and positions (group-at-end.json), for the cause."""
    members.dump_stacks()
    try:
        described = GroupAdmin(bootstrap, 30).describe(GROUP)
    except Exception as exc:  # noqa: BLE001 - evidence only: the check goes on without it
        described = {"error": repr(exc)}
    (data_dir / "group-at-end.json").write_text(json.dumps(described, indent=1, default=str))
    time.sleep(1.0)  # the members' stacks reach their logs


def run_ordered(args: argparse.Namespace, data_dir: Path, broker_config: dict[str, str]) -> dict[str, Any]:
    cluster = FaultCluster(data_dir, 3, args.session_timeout_ms, broker_config, args.zookeeper_nodes)
    data_dir.mkdir(parents=True, exist_ok=True)
    client_log = log_clients_to(data_dir)
    # OrderedProducer's own lines (count changes, re-sends) go to the same file
    client_library = logging.getLogger("odradek.client")
    client_library.addHandler(client_log)
    client_library.setLevel(logging.INFO)
    trouble = ClientTrouble()
    producers: list[OrderedKeyedProducer] = []
    members = MemberGroup(cluster.bootstrap_servers, TOPIC, GROUP, data_dir, MEMBERS)
    changer: TopicChanger | None = None
    started = time.monotonic()
    not_recovered: list[str] = []
    brokers_exited: list[str] = []
    members_exited: list[str] = []
    member_kills = 0
    try:
        cluster.start()
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "logger": LOGGER})  # type: ignore[dict-item]
        topic = NewTopic(TOPIC, INITIAL_PARTITIONS, 3, config={"enable.ordered.delivery": "true"})
        for future in admin.create_topics([topic]).values():
            future.result(60)
        changer = TopicChanger(cluster.bootstrap_servers, TOPIC, GROUP, INITIAL_PARTITIONS, MAX_PARTITIONS)
        deadline = time.monotonic() + 60
        while changer.counts() != (INITIAL_PARTITIONS, INITIAL_PARTITIONS):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{TOPIC} never showed its counts")
            time.sleep(0.2)
        producers = [OrderedKeyedProducer(i, cluster.bootstrap_servers, TOPIC, 10, args.rate, trouble)
                     for i in range(args.producers)]
        members.start_all()
        for producer in producers:
            producer.start()
        changer.start()
        time.sleep(2.0)

        def kill_member(rng: random.Random) -> tuple[float, str]:
            nonlocal member_kills
            slot = rng.choice(members.slots)
            members.kill(slot)
            member_kills += 1
            session_s = SESSION_TIMEOUT_MS / 1000
            # back before the group notices (the old member lingers until its session ends) or after
            hold = rng.uniform(0.2, 0.6) * session_s if rng.random() < 0.5 else rng.uniform(1.1, 1.5) * session_s
            time.sleep(hold)
            members.start(slot)
            return hold, f"member {slot}"

        def change(grow: bool) -> Any:
            def fault(rng: random.Random) -> tuple[float, str]:
                assert changer is not None
                detail = changer.expand(rng) if grow else changer.shrink(rng)
                hold = rng.uniform(1.0, 3.0)
                time.sleep(hold)
                return hold, detail
            return fault

        kinds = tuple(args.kinds.split(",")) if args.kinds else ALL_KINDS
        nemesis = Nemesis(cluster, TOPIC, args.seed, kinds,
                          {"expand-topic": change(True), "shrink-topic": change(False),
                           "kill-group-member": kill_member})
        def restart_exited_members(i: int, what: str) -> None:
            for slot, rc in members.exited().items():
                # not the nemesis's doing (it restarts those it kills): an anomaly; start it again
                members_exited.append(f"member {slot} exited with status {rc} after fault {i} ({what})")
                members.start(slot)
        run_faults(cluster, nemesis, args.faults, args.seed, brokers_exited, not_recovered, restart_exited_members)
        time.sleep(3.0)  # writes after the last fault
        unresolved = sum(p.stop(flush_timeout_s=180) for p in producers)
        acked = {v: where for p in producers for v, where in p.acked.items()}
        # every acknowledged value delivered to the group, within a bound
        deadline = time.monotonic() + DELIVERY_BOUND_S
        while time.monotonic() < deadline:
            if undelivered(read_deliveries(members.files())[0], acked) == 0:
                break
            for slot, rc in members.exited().items():
                members_exited.append(f"member {slot} exited with status {rc} after the last fault")
                members.start(slot)
            time.sleep(2.0)
        else:
            owed_evidence(cluster.bootstrap_servers, members, data_dir)
        statuses = members.stop()
        members_exited += [f"member {slot} did not close on SIGTERM (status {rc})"
                           for slot, rc in statuses.items() if rc != 0]
        changer.stop()
        deliveries, member_errors = read_deliveries(members.files())
        anomalies, stats = judge_ordered(deliveries, acked)
        delivered_values = {(key, seq) for _, key, seq, _, _ in deliveries}
        lost_by_partition: dict[int, list[int]] = {}   # partition -> offsets never delivered
        for value, (partition, offset) in acked.items():
            if value not in delivered_values:
                lost_by_partition.setdefault(partition, []).append(-1 if offset is None else offset)
        final = changer.counts() or (INITIAL_PARTITIONS, INITIAL_PARTITIONS)
        # the undeleted partitions: a marked one may be in the middle of its removal
        differing = differing_replicas(
            lambda p: [cluster.broker_dir(b) / "data" / f"{TOPIC}-{p}" for b in cluster.broker_ids], final[0])
        anomalies.update({
            "replicas_differing": [f"partition {p}" for p in differing],
            "clients_died": trouble.died,
            "failed_deliveries": trouble.failed_deliveries,
            "unresolved_at_end": [f"{unresolved} values"] if unresolved else [],
            "members_exited": members_exited,
            "topic_changes_failed": changer.log.failures,
            "protocol_errors": PROTOCOL_ERRORS.take(),
            "cluster_not_recovered": not_recovered,
            "brokers_exited": brokers_exited,
        })
        log = changer.log
        return {
            "workload": "ordered",
            "seed": args.seed,
            "faults": dict(collections.Counter(f.kind for f in nemesis.history)),
            "faults_total": len(nemesis.history),
            "writes_sent": sum(p.sent for p in producers),
            "writes_acknowledged": len(acked),
            "deliveries": stats["deliveries"],
            "redeliveries": stats["redeliveries"],
            "topic_changes": {"expanded": log.expanded, "shrunk": log.shrunk,
                              "refused_while_draining": log.refused_while_draining, "not_now": log.not_now,
                              "delete_records": log.records_deleted, "member_kills": member_kills,
                              "member_starts": members.starts},
            "final_counts": {"undeleted": final[0], "partitions": final[1]},
            "member_poll_errors": len(member_errors),
            # where the lost values were: a partition the group stopped reading shows as one range
            "lost_by_partition": {str(p): {"values": len(o), "first_offset": min(o), "last_offset": max(o)}
                                  for p, o in sorted(lost_by_partition.items())},
            "duration_s": round(time.monotonic() - started, 1),
            "anomalies": {k: len(v) for k, v in anomalies.items()},
            "examples": {**{k: v[:5] for k, v in anomalies.items() if v},
                         **({"member_poll_errors": member_errors[:5]} if member_errors else {})},
            # with each fault's start on the monotonic clock the deliveries files use
            "fault_log": fault_log(nemesis.history),
        }
    finally:
        if changer is not None:
            changer.stop()
        for proc in members.procs.values():
            if proc.poll() is None:
                proc.kill()
        cluster.stop()
