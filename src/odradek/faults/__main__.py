"""`python -m odradek.faults --seed N --faults 100`: a Jepsen-style fault run.

Private network and PID namespaces (`unshare`, so root) holds one ZooKeeper and three brokers
(faults/cluster.py). Idempotent acks=all producers, one of each profile (faults/producer_profiles.py:
librdkafka's defaults, librdkafka with one request in flight, kafka-python, aiokafka), write
keyed, numbered values and a consumer tails every partition (faults/workload.py) while the
nemesis injects faults drawn under the seed (faults/nemesis.py). After the last fault is healed,
every partition is read from the start and judged, each profile on its own rows
(faults/checker.py). Prints one JSON report; exits 1 if any anomaly was seen.

`--workload ordered` runs KIP-253's ordered delivery instead (faults/ordered_run.py): an ordered
topic that the nemesis also grows and shrinks, OrderedProducers, and a group of OrderedConsumer
member processes that it also kills, judged in the group's merged delivery order.

`--workload transactions` runs transactions instead (faults/txn_run.py): transactional producers
committing and aborting transactions over the topic's partitions, a read_committed and a
read_uncommitted reader, and kills of the transaction coordinator among the faults, judged for
Jepsen's aborted reads, lost writes, duplicates, torn transactions and reorderings
(faults/txn_checker.py).

`--workload groups` runs consumer groups instead (faults/group_run.py): four groups, one per
client and rebalance protocol, static and dynamic members committing by hand, with kills of
members and of a group's coordinator among the faults, judged for at-least-once delivery,
commits that pass an undelivered record or move backwards, and every group Stable with lag 0
soon after healing (faults/group_checker.py).

`--workload admin` runs an operator's administration instead (faults/admin_run.py):
reassignments with a throttle, preferred elections, CreatePartitions, config changes and the
deletion and re-creation of scratch topics drawn among the faults, the controller killed in
the middle of half of them, judged for operations left half-done in ZooKeeper, lost writes and
a re-created topic showing its old data (faults/admin_checker.py).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.faults.admin_run import run_admin
from odradek.faults.checker import differing_replicas, judge_by_profile, read_everything, set_aside_librdkafka_4953
from odradek.faults.cluster import FaultCluster
from odradek.faults.group_run import run_groups
from odradek.faults.machine_stalls import MachineStallWatch, describe
from odradek.faults.nemesis import KINDS, Nemesis, run_faults
from odradek.faults.ordered_run import run_ordered
from odradek.faults.producer_profiles import PROFILES, make_producer
from odradek.faults.txn_run import run_transactions
from odradek.faults.workload import LOGGER, PROTOCOL_ERRORS, ClientTrouble, TailingConsumer, log_clients_to

IN_NAMESPACE = "ODRADEK_FAULTS_NETNS"
TOPIC = "faults"
PARTITIONS = 6
BROKER_CONFIG = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    # a follower cut off from its leader leaves the ISR after this, so acks=all writes go on
    "replica.lag.time.max.ms": "4000",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m odradek.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=100, help="how many faults to inject")
    parser.add_argument("--session-timeout-ms", type=int, default=2000,
                        help="the brokers' zookeeper.session.timeout.ms (hold times scale with it)")
    parser.add_argument("--zookeeper-nodes", type=int, default=3, help="ZooKeeper servers in the ensemble")
    parser.add_argument("--producers", type=int, default=3, help="ordered and transactions: how many producers")
    parser.add_argument("--profiles", default=",".join(PROFILES),
                        help="default: the producers, one per profile named (a profile named twice makes two)")
    parser.add_argument("--rate", type=float, default=100.0, help="values per second per producer")
    parser.add_argument("--kinds", help="comma-separated fault kinds to draw from (default: all of the workload's)")
    parser.add_argument("--workload", choices=("default", "ordered", "transactions", "groups", "admin"), default="default",
                        help="default: idempotent producers and a tailing consumer; ordered: KIP-253's "
                             "ordered delivery (faults/ordered_run.py) with expansions, deletions and "
                             "group member kills among the faults; transactions: transactional producers "
                             "and read_committed / read_uncommitted readers (faults/txn_run.py), with "
                             "kills of the transaction coordinator among the faults; groups: consumer "
                             "groups of every client committing by hand (faults/group_run.py), with kills "
                             "of members and of the group coordinator among the faults; admin: "
                             "reassignments, preferred elections, CreatePartitions, config changes and "
                             "topic re-creation among the faults, the controller killed in the middle "
                             "(faults/admin_run.py)")
    parser.add_argument("--no-copier", dest="copier", action="store_false",
                        help="transactions: without the consume-transform-produce copier")
    parser.add_argument("--data-dir", type=Path, help="keep the cluster's data and logs here (default: a temp dir, "
                                                      "removed unless the run found an anomaly)")
    args = parser.parse_args(argv)
    if os.environ.get(IN_NAMESPACE) != "1":
        return _reexec_in_namespace(argv if argv is not None else sys.argv[1:])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="odradek-faults-"))
    watch = MachineStallWatch().start()
    if args.workload == "ordered":
        report = run_ordered(args, data_dir, BROKER_CONFIG)
    elif args.workload == "transactions":
        report = run_transactions(args, data_dir, BROKER_CONFIG)
    elif args.workload == "groups":
        report = run_groups(args, data_dir, BROKER_CONFIG)
    elif args.workload == "admin":
        report = run_admin(args, data_dir, BROKER_CONFIG)
    else:
        report = run(args, data_dir)
    # not an anomaly: the context of any (machine_stalls.py)
    report["machine_stalls"] = describe(watch.stop())
    print(json.dumps(report, indent=2))
    clean = sum(report["anomalies"].values()) == 0
    if clean and args.data_dir is None:
        shutil.rmtree(data_dir, ignore_errors=True)
    elif not clean:
        print(f"data and logs kept in {data_dir}", file=sys.stderr)
    return 0 if clean else 1


def _reexec_in_namespace(argv: list[str]) -> int:
    """Run this command again in new network and PID namespaces of its own: its firewall rules
    and every connection of the run stay in the one and vanish with it, and the run is PID 1
    of the other, so when it ends, however it ends (a test's timeout kills it with SIGKILL),
    the kernel kills every ZooKeeper and broker it started."""
    if shutil.which("unshare") is None or shutil.which("iptables") is None:
        print("odradek: error: the fault run needs unshare and iptables (apt-get install util-linux iptables)",
              file=sys.stderr)
        return 2
    env = dict(os.environ, **{IN_NAMESPACE: "1"})
    command = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
               sys.executable, "-m", "odradek.faults", *argv]
    # exec, so whoever started us holds unshare's pid: killing it kills the run (--kill-child)
    os.execvpe(command[0], command, env)


def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    cluster = FaultCluster(data_dir, 3, args.session_timeout_ms, BROKER_CONFIG, args.zookeeper_nodes)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_clients_to(data_dir, "%(asctime)s %(message)s")
    trouble = ClientTrouble()
    producers: list[Any] = []
    consumer: TailingConsumer | None = None
    started = time.monotonic()
    not_recovered: list[str] = []
    brokers_exited: list[str] = []
    try:
        cluster.start()
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "logger": LOGGER})  # type: ignore[dict-item]
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
            future.result(60)
        producers = [make_producer(profile, i, cluster.bootstrap_servers, TOPIC, 10, args.rate, trouble)
                     for i, profile in enumerate(args.profiles.split(","))]
        consumer = TailingConsumer(cluster.bootstrap_servers, TOPIC, PARTITIONS, trouble)
        for producer in producers:
            producer.start()
        consumer.start()
        time.sleep(2.0)
        nemesis = Nemesis(cluster, TOPIC, args.seed, tuple(args.kinds.split(",")) if args.kinds else KINDS)
        run_faults(cluster, nemesis, args.faults, args.seed, brokers_exited, not_recovered)
        time.sleep(3.0)  # writes after the last fault
        unresolved = sum(p.stop(flush_timeout_s=180) for p in producers)
        consumer.stop()
        acked = {v: where for p in producers for v, where in p.acked.items()}
        log = read_everything(cluster.bootstrap_servers, TOPIC, PARTITIONS)
        acked_by = {p.index: dict(p.acked) for p in producers}
        replica = cluster.broker_ids[0]
        client_4953, log = set_aside_librdkafka_4953(
            log, producers, data_dir / "librdkafka.log",
            [cluster.broker_dir(replica) / "data" / f"{TOPIC}-{p}" for p in range(PARTITIONS)], acked_by)
        anomalies = judge_by_profile(log, {p.index: p.profile for p in producers}, acked_by)
        anomalies["librdkafka_4953_duplicates"] = client_4953
        differing = differing_replicas(
            lambda p: [cluster.broker_dir(b) / "data" / f"{TOPIC}-{p}" for b in cluster.broker_ids], PARTITIONS)
        anomalies.update({
            "replicas_differing": [f"partition {p}" for p in differing],
            "clients_died": trouble.died,
            "failed_deliveries": trouble.failed_deliveries,
            "unresolved_at_end": [f"{unresolved} values"] if unresolved else [],
            "consumer_errors": trouble.consumer_errors,
            "non_monotonic_polls": trouble.non_monotonic_polls,
            "protocol_errors": PROTOCOL_ERRORS.take(),
            "cluster_not_recovered": not_recovered,
            "brokers_exited": brokers_exited,
        })
        return {
            "seed": args.seed,
            "faults": dict(collections.Counter(f.kind for f in nemesis.history)),
            "faults_total": len(nemesis.history),
            "writes_sent": sum(p.sent for p in producers),
            "writes_acknowledged": len(acked),
            "writes_acknowledged_by_profile": dict(collections.Counter(
                p.profile for p in producers for _ in range(len(p.acked)))),
            "consumer_received": consumer.received,
            "duration_s": round(time.monotonic() - started, 1),
            "anomalies": {k: len(v) for k, v in anomalies.items()},
            "examples": {k: v[:5] for k, v in anomalies.items() if v},
        }
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
