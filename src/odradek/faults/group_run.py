"""`python -m odradek.faults --workload groups`: consumer groups under faults.

The same cluster and faults as the default workload (faults/__main__.py). Two idempotent
acks=all producers write numbered values to a 6-partition topic while four consumer groups
read it, two member processes each (faults/group_member.py), committing by hand:

    group                         client           protocol                 membership
    faults-eager                  confluent-kafka  eager (range)            dynamic
    faults-cooperative-static     confluent-kafka  cooperative-sticky       static (KIP-345)
    faults-kafka-python-static    kafka-python     eager (range)            static
    faults-aiokafka               aiokafka         eager (roundrobin)       dynamic

Besides the broker, ZooKeeper and network faults, the nemesis kills members with kill -9
(restarted before or after their session ends) and the broker coordinating a group (the
leader of its `__consumer_offsets` partition). Meanwhile the run reads every group's committed
offsets from its coordinator each second. After the last fault is healed and the producers are
flushed, every group must be Stable with all its members and lag 0 within the members'
session.timeout.ms plus their rebalance timeout; then the members are stopped and each group
judged (faults/group_checker.py).
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.faults.checker import differing_replicas, judge, read_everything, set_aside_librdkafka_4953
from odradek.faults.cluster import FaultCluster
from odradek.faults.group_checker import Commit, judge_group, read_history, rebalance_stats, stale_readings
from odradek.faults.group_member import MAX_POLL_INTERVAL_MS, SESSION_TIMEOUT_MS
from odradek.faults.nemesis import KINDS, Nemesis, fault_log, run_faults
from odradek.faults.ordered_workload import MemberGroup
from odradek.faults.producer_profiles import make_producer
from odradek.faults.txn_workload import coordinator_broker
from odradek.faults.workload import LOGGER, PROTOCOL_ERRORS, ClientTrouble, log_clients_to

TOPIC = "group-faults"
PARTITIONS = 6
MEMBERS = 2
PRODUCERS = 2
OFFSETS_TOPIC = "__consumer_offsets"
GROUP_KINDS = ("kill-group-member", "kill-group-coordinator")
ALL_KINDS = KINDS + GROUP_KINDS
#: after the producers are flushed, every group Stable with lag 0 within this
SETTLE_BOUND_S = (SESSION_TIMEOUT_MS + MAX_POLL_INTERVAL_MS) / 1000
#: a DescribeGroups that failed gets a new admin client, at most this often (OffsetObserver._new_admin)
ADMIN_RENEWAL_S = 5.0
#: the admin client's own timeout (OffsetObserver says why it is so long)
LIBRDKAFKA_TIMEOUT_S = 600
#: and how much longer the run waits, to report how late a group settled
SETTLE_GIVE_UP_S = 120.0


@dataclass(frozen=True)
class GroupSpec:
    name: str
    flavor: str      # group_member.FLAVORS
    static: bool

    @property
    def group_id(self) -> str:
        return f"faults-{self.name}"


GROUPS = (
    GroupSpec("eager", "confluent-eager", False),
    GroupSpec("cooperative-static", "confluent-cooperative", True),
    GroupSpec("kafka-python-static", "kafka-python", True),
    GroupSpec("aiokafka", "aiokafka", False),
)


class GroupMembers(MemberGroup):
    """One group's member processes (faults/group_member.py), in a directory of the group's own."""

    def __init__(self, bootstrap: str, spec: GroupSpec, data_dir: Path) -> None:
        super().__init__(bootstrap, TOPIC, spec.group_id, data_dir / spec.name, MEMBERS)
        self.spec = spec
        self.data_dir.mkdir(parents=True, exist_ok=True)

    def member_name(self, slot: int) -> str:
        return f"{self.spec.name}-{slot}"

    def command(self, slot: int) -> list[str]:
        instance = [f"{self.group}-{slot}"] if self.spec.static else []
        return [sys.executable, "-m", "odradek.faults.group_member", self.spec.flavor, self.bootstrap, self.group,
                self.topic, self.member_name(slot), str(self.deliveries_file(slot)), *instance]

    def event_files(self) -> dict[str, Path]:
        return {self.member_name(slot): self.deliveries_file(slot) for slot in self.slots}


class OffsetObserver:
    """Reads every group's committed offsets from its coordinator once a second (OffsetFetch),
    each reading stamped with when it was asked and answered.

    Through a consumer of the group that never joins it, not the admin client: under faults,
    librdkafka 2.16's AdminClient.list_consumer_group_offsets crashes the process when the
    answer is NOT_COORDINATOR (SIGSEGV in rd_kafka_cgrp_op, reached from
    rd_kafka_handle_OffsetFetch: an admin client has no consumer group; librdkafka #5040).
    The admin requests that remain (DescribeGroups, in ``stable_members``) get librdkafka's timeout far beyond any
    fault's hold: one that times out while its coordinator is still being looked up aborts the
    process when the coordinator is found (rd_kafka_enq_once_del_source_return's assertion,
    librdkafka #4605)."""

    def __init__(self, bootstrap: str, groups: list[str]) -> None:
        self._bootstrap = bootstrap
        self._admin, self._admin_since = self._new_admin(), time.monotonic()
        self._readers = {g: Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False,
                                      "logger": LOGGER}) for g in groups}
        self._partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.observed: dict[str, list[Commit]] = {g: [] for g in groups}
        self.last_state: dict[str, str] = {}
        self._lock = threading.Lock()  # the run's own readings and the thread's share the consumers
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-observer", daemon=True)

    def _new_admin(self) -> AdminClient:
        """A new admin client, also when DescribeGroups failed (at most every ADMIN_RENEWAL_S):
        the admin client of librdkafka 2.16 never forgets a coordinator it found (its
        coordinator cache drops an entry only after it went unused for a while), so after the
        group's coordinator moved it asks the old one for ever (seen: 2 minutes of
        NOT_COORDINATOR), or waits on it (2 minutes of timeouts after a 100-fault run)."""
        return AdminClient({"bootstrap.servers": self._bootstrap, "logger": LOGGER})  # type: ignore[dict-item]

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for group in list(self.observed):
                self.observe(group)

    def observe(self, group: str) -> dict[int, int] | None:
        """The group's committed offsets now (partition -> offset; None: no answer)."""
        with self._lock:
            reader = self._readers.get(group)
            if reader is None:   # stopped
                return None
            sent = time.monotonic_ns()
            try:
                answer = reader.committed(self._partitions, timeout=10)
            except Exception:  # noqa: BLE001 - the coordinator moving or down: no reading this time
                return None
        offsets = {tp.partition: tp.offset for tp in answer if tp.error is None and tp.offset >= 0}
        self.observed[group].append(Commit(sent, time.monotonic_ns(), offsets, "observed"))
        return offsets

    def stable_members(self, group: str) -> int | None:
        """How many members the group has when it is Stable; None when it is not (or no
        answer), with what was seen in ``last_state``."""
        try:
            described = self._admin.describe_consumer_groups(
                [group], request_timeout=LIBRDKAFKA_TIMEOUT_S)[group].result(10)
        except Exception as exc:  # noqa: BLE001 - no answer this time
            self.last_state[group] = f"no description: {exc!r}"
            if time.monotonic() - self._admin_since > ADMIN_RENEWAL_S:
                self._admin, self._admin_since = self._new_admin(), time.monotonic()
            return None
        self.last_state[group] = f"{described.state.name} with {len(described.members)} members"
        return len(described.members) if described.state == ConsumerGroupState.STABLE else None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()


def run_groups(args: argparse.Namespace, data_dir: Path, broker_config: dict[str, str]) -> dict[str, Any]:
    cluster = FaultCluster(data_dir, 3, args.session_timeout_ms, broker_config, args.zookeeper_nodes)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_clients_to(data_dir)
    trouble = ClientTrouble()
    producers: list[Any] = []
    groups = [GroupMembers(cluster.bootstrap_servers, spec, data_dir) for spec in GROUPS]
    observer: OffsetObserver | None = None
    started = time.monotonic()
    not_recovered: list[str] = []
    brokers_exited: list[str] = []
    members_exited: list[str] = []
    kills = collections.Counter[str]()
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "logger": LOGGER})  # type: ignore[dict-item]
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            future.result(60)
        producers = [make_producer("librdkafka", i, cluster.bootstrap_servers, TOPIC, 10, args.rate, trouble)
                     for i in range(PRODUCERS)]
        for producer in producers:
            producer.start()
        for members in groups:
            members.start_all()
        observer = OffsetObserver(cluster.bootstrap_servers, [g.group for g in groups])
        _wait_stable(observer, groups, 90.0)
        observer.start()

        def kill_member(rng: random.Random) -> tuple[float, str]:
            members = rng.choice(groups)
            slot = rng.choice(members.slots)
            members.kill(slot)
            kills["members"] += 1
            session_s = SESSION_TIMEOUT_MS / 1000
            # back before the coordinator notices (a static member keeps its partitions) or after
            hold = rng.uniform(0.2, 0.6) * session_s if rng.random() < 0.5 else rng.uniform(1.1, 1.5) * session_s
            time.sleep(hold)
            members.start(slot)
            return hold, f"member {members.member_name(slot)}"

        def kill_coordinator(rng: random.Random) -> tuple[float, str]:
            members = rng.choice(groups)
            broker, _ = coordinator_broker(cluster.leaders(OFFSETS_TOPIC), [members.group])
            what = f"coordinator of {members.group}"
            if broker is None or broker not in cluster.broker_ids:
                broker, what = rng.choice(cluster.broker_ids), f"{members.group} has no coordinator: a random broker"
            cluster.signal_broker(broker, 9)
            kills["coordinators"] += 1
            session_s = cluster.session_timeout_ms / 1000
            hold = rng.uniform(0.2, 0.6) * session_s if rng.random() < 0.5 else rng.uniform(1.5, 2.5) * session_s
            time.sleep(hold)
            cluster.start_broker(broker)
            return hold, f"broker {broker}, {what}"

        def restart_exited_members(i: int, what: str) -> None:
            for members in groups:
                for slot, rc in members.exited().items():
                    members_exited.append(f"{members.member_name(slot)} exited with status {rc} after fault {i} "
                                          f"({what})")
                    members.start(slot)

        kinds = tuple(args.kinds.split(",")) if args.kinds else ALL_KINDS
        nemesis = Nemesis(cluster, TOPIC, args.seed, kinds,
                          {"kill-group-member": kill_member, "kill-group-coordinator": kill_coordinator})
        run_faults(cluster, nemesis, args.faults, args.seed, brokers_exited, not_recovered, restart_exited_members)
        time.sleep(3.0)  # writes after the last fault
        unresolved = sum(p.stop(flush_timeout_s=180) for p in producers)
        log = read_everything(cluster.bootstrap_servers, TOPIC, PARTITIONS)
        ends = {p: entries[-1][0] + 1 if entries else 0 for p, entries in log.items()}
        settle = _wait_settled(observer, groups, ends)
        observer.stop()
        (data_dir / "observed-offsets.json").write_text(json.dumps(
            {g: [[c.sent_ns, c.done_ns, c.offsets] for c in readings] for g, readings in observer.observed.items()}))
        for members in groups:
            statuses = members.stop()
            members_exited += [f"{members.member_name(slot)} did not close on SIGTERM (status {rc})"
                               for slot, rc in statuses.items() if rc != 0]
        acked_by = {p.index: dict(p.acked) for p in producers}
        client_4953, judged_log = set_aside_librdkafka_4953(
            log, producers, data_dir / "librdkafka.log",
            [cluster.broker_dir(cluster.broker_ids[0]) / "data" / f"{TOPIC}-{p}" for p in range(PARTITIONS)], acked_by)
        acked = {v: where for by in acked_by.values() for v, where in by.items()}
        acked_raw = [f"{v[0]}:{v[1]}:{v[2]}".encode() for v in acked]
        anomalies = judge(judged_log, acked)
        anomalies["librdkafka_4953_duplicates"] = client_4953
        group_reports: dict[str, Any] = {}
        consumer_errors: list[str] = []
        stale_examples: list[str] = []
        member_protocol_errors: list[str] = []
        for members in groups:
            history = read_history(members.event_files())
            for row, lines in judge_group(members.group, history, log, acked_raw).items():
                anomalies.setdefault(row, []).extend(lines)
            stale = stale_readings(members.group, history, observer.observed[members.group])
            stale_examples += stale[:3]
            consumer_errors += [f"{members.group} {e}" for e in history.errors]
            member_protocol_errors += history.protocol_errors
            delivered = len(history.deliveries)
            group_reports[members.group] = {
                "flavor": members.spec.flavor, "static": members.spec.static,
                "deliveries": delivered,
                "redeliveries": delivered - len({(p, o) for _, p, o, _ in history.deliveries}),
                "commits": sum(1 for c in history.commits),
                "commit_failures": len(history.commit_failures),
                "retriable_errors": len(history.retriable_errors),
                "member_starts": members.starts,
                "settled_s": settle.get(members.group),
                "stale_offset_readings": len(stale),
                **rebalance_stats(history),
            }
        differing = differing_replicas(
            lambda p: [cluster.broker_dir(b) / "data" / f"{TOPIC}-{p}" for b in cluster.broker_ids], PARTITIONS)
        anomalies.update({
            "groups_not_settled": [f"{g}: {'not' if s is None else f'only after {s} s,'} Stable with lag 0 "
                                   f"within {SETTLE_BOUND_S} s (last seen: {observer.last_state.get(g)}, "
                                   f"committed {observer.observed[g][-1].offsets if observer.observed[g] else None}, "
                                   f"ends {ends})" for g, s in settle.items()
                                   if s is None or s > SETTLE_BOUND_S],
            "replicas_differing": [f"partition {p}" for p in differing],
            "clients_died": trouble.died,
            "failed_deliveries": trouble.failed_deliveries,
            "unresolved_at_end": [f"{unresolved} values"] if unresolved else [],
            "members_exited": members_exited,
            "consumer_errors": consumer_errors,
            "protocol_errors": PROTOCOL_ERRORS.take() + member_protocol_errors,
            "cluster_not_recovered": not_recovered,
            "brokers_exited": brokers_exited,
        })
        return {
            "workload": "groups",
            "seed": args.seed,
            "faults": dict(collections.Counter(f.kind for f in nemesis.history)),
            "faults_total": len(nemesis.history),
            "writes_sent": sum(p.sent for p in producers),
            "writes_acknowledged": len(acked),
            "groups": group_reports,
            "kills": dict(kills),
            "duration_s": round(time.monotonic() - started, 1),
            "anomalies": {k: len(v) for k, v in anomalies.items()},
            "examples": {**{k: v[:5] for k, v in anomalies.items() if v},
                         **({"stale_offset_readings": stale_examples} if stale_examples else {})},
            "fault_log": fault_log(nemesis.history),
        }
    finally:
        if observer is not None:
            observer.stop()
        for members in groups:
            for proc in members.procs.values():
                if proc.poll() is None:
                    proc.kill()
        cluster.stop()


def _wait_stable(observer: OffsetObserver, groups: list[GroupMembers], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = {g.group for g in groups}
    while pending and time.monotonic() < deadline:
        pending = {g for g in pending if observer.stable_members(g) != MEMBERS}
        time.sleep(0.5)
    if pending:
        raise RuntimeError(f"groups never became Stable with {MEMBERS} members: {sorted(pending)}")


def _wait_settled(observer: OffsetObserver, groups: list[GroupMembers], ends: dict[int, int]) -> dict[str, float | None]:
    """group -> seconds until it was Stable with every member and committed every partition's
    end (lag 0), None if not within SETTLE_GIVE_UP_S."""
    started = time.monotonic()
    out: dict[str, float | None] = {g.group: None for g in groups}
    while time.monotonic() - started < SETTLE_GIVE_UP_S:
        for group in [g for g, s in out.items() if s is None]:
            if observer.stable_members(group) == MEMBERS and observer.observe(group) == ends:
                out[group] = round(time.monotonic() - started, 1)
        if all(s is not None for s in out.values()):
            break
        time.sleep(0.5)
    return out
