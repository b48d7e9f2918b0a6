"""`python -m odradek.faults --workload transactions`: the fault run of transactions (KIP-98,
KIP-447, KIP-890 part 1), with the anomalies Jepsen's Kafka tests define.

The same cluster and faults as the default workload (faults/__main__.py), plus kill -9 of the
transaction coordinator (the broker leading the most producers' `__transaction_state`
partitions), and a delayed connection: every connection passes a TCP proxy
(faults/delay_proxy.py) that holds what one of them sends (a producer's, preferably one that
carried a produce or a transactional request, or a coordinator's marker connection) for
2-20 s, so a request reaches its broker after its sender gave up on it (KAFKA-17754). Transactional producers (faults/txn_workload.py) write transactions of 1-10
records over a 6-partition RF 3 topic, a quarter of them aborted on purpose, and record each
one's outcome as their client saw it; a read_committed and a read_uncommitted consumer tail
every partition from offset 0. After the last fault: the producers finish their transaction,
the readers catch up to each partition's last stable offset (read_committed) and high
watermark (read_uncommitted), and faults/txn_checker.py judges the history.
"""
from __future__ import annotations

import argparse
import collections
import faulthandler
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.common.internal_topics import TRANSACTION_STATE_TOPIC_NAME
from odradek.faults.checker import differing_replicas, read_everything
from odradek.faults.cluster import FaultCluster
from odradek.faults.librdkafka_bugs import librdkafka_5476, send_offsets_stalls, sequences_reused_after_abort
from odradek.faults.nemesis import KINDS, Nemesis, fault_log, run_faults
from odradek.faults.txn_checker import Txn, judge_copy, judge_transactions
from odradek.faults.txn_workload import (
    CALL_TIMEOUT_S,
    Copier,
    TailReader,
    TransactionalWriter,
    coordinator_broker,
    end_offsets,
    read_again,
    transactional_id,
)
from odradek.faults.workload import LOGGER, PROTOCOL_ERRORS, ClientTrouble, KeyedProducer, encode_value, log_clients_to

TOPIC = "txn-faults"
PARTITIONS = 6
#: the copier's source (filled by a plain idempotent producer) and output topics
SOURCE, OUTPUT, COPY_PARTITIONS = "txn-copy-source", "txn-copy-output", 3
SOURCE_RATE = 50.0
COORDINATOR_KILL = "kill-transaction-coordinator"
DELAY = "delay-one-connection"
ALL_KINDS = KINDS + (COORDINATOR_KILL, DELAY)
#: values per second per producer (--rate) per transaction: 5.5 records a transaction on average
RECORDS_PER_TXN_RATE = 10.0
#: how long, after the last fault, the producers may take to finish their transaction, and the
#: readers to reach the partitions' ends
END_BOUND_S = 180.0
#: how long the end waits for a copier caught in librdkafka's send_offsets_to_transaction stall
#: (#5456), which outlives any wait: the rest of END_BOUND_S would only make the run longer
STALLED_COPIER_WAIT_S = 5.0


def run_transactions(args: argparse.Namespace, data_dir: Path, broker_config: dict[str, str]) -> dict[str, Any]:
    cluster = FaultCluster(data_dir, 3, args.session_timeout_ms, broker_config, args.zookeeper_nodes, proxied=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_clients_to(data_dir, "%(asctime)s %(threadName)s %(message)s")
    trouble = ClientTrouble()
    writers: list[TransactionalWriter] = []
    readers: list[TailReader] = []
    started = time.monotonic()
    not_recovered: list[str] = []
    brokers_exited: list[str] = []
    source: KeyedProducer | None = None
    copier: Copier | None = None
    copy_reader: TailReader | None = None
    try:
        cluster.start()
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "logger": LOGGER})  # type: ignore[dict-item]
        topics = [NewTopic(TOPIC, PARTITIONS, 3)]
        if args.copier:
            topics += [NewTopic(SOURCE, COPY_PARTITIONS, 3), NewTopic(OUTPUT, COPY_PARTITIONS, 3)]
        for future in admin.create_topics(topics).values():
            future.result(60)
        for topic in topics:
            # every partition's leader answers for it before a client asks (else the copier's
            # first ListOffsets is answered UNKNOWN_TOPIC_OR_PART, a consumer error)
            deadline = time.monotonic() + 60
            while end_offsets(cluster.bootstrap_servers, topic.topic, topic.num_partitions, False) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic.topic}: a partition without a leader 60 s after its creation")
                time.sleep(0.2)
        readers = [TailReader(cluster.bootstrap_servers, TOPIC, PARTITIONS, isolation, trouble)
                   for isolation in ("read_committed", "read_uncommitted")]
        writers = [TransactionalWriter(i, cluster.bootstrap_servers, TOPIC, PARTITIONS,
                                       args.rate / RECORDS_PER_TXN_RATE, args.seed, trouble)
                   for i in range(args.producers)]
        if args.copier:
            # its metadata answers too: one run saw the source topic answered unknown for 1.8 s
            # (librdkafka: "partition count changed from 3 to 0"), from a broker not yet named
            source = KeyedProducer(len(writers), cluster.bootstrap_servers, SOURCE, 10, SOURCE_RATE, trouble,
                                   debug="eos,metadata")
            copier = Copier(cluster.bootstrap_servers, SOURCE, OUTPUT, trouble)
            copy_reader = TailReader(cluster.bootstrap_servers, OUTPUT, COPY_PARTITIONS, "read_committed", trouble)
        for reader in readers:
            reader.start()
        for writer in writers:
            writer.start()
        if copier is not None and source is not None and copy_reader is not None:
            copy_reader.start()
            source.start()
            copier.start()
        time.sleep(3.0)
        ids = [transactional_id(w.index) for w in writers]

        def kill_coordinator(rng: random.Random) -> tuple[float, str]:
            broker, leads = coordinator_broker(cluster.leaders(TRANSACTION_STATE_TOPIC_NAME), ids)
            if broker is None or broker not in cluster.broker_ids:
                broker, what = rng.choice(cluster.broker_ids), "no coordinator known: a random broker"
            else:
                what = f"coordinator of {leads} of {len(ids)} transactional ids"
            session_s = cluster.session_timeout_ms / 1000
            hold = rng.uniform(0.2, 0.6) * session_s if rng.random() < 0.5 else rng.uniform(1.5, 2.5) * session_s
            cluster.signal_broker(broker, signal.SIGKILL)
            time.sleep(hold)
            cluster.start_broker(broker)
            return hold, f"broker {broker}, {what}"

        def delay_connection(rng: random.Random) -> tuple[float, str]:
            hold = rng.uniform(2.0, 20.0)
            what = cluster.delay_one_connection(hold, rng.randrange(1 << 30))
            time.sleep(hold)
            return hold, what

        kinds = tuple(args.kinds.split(",")) if args.kinds else ALL_KINDS
        nemesis = Nemesis(cluster, TOPIC, args.seed, kinds,
                          {COORDINATOR_KILL: kill_coordinator, DELAY: delay_connection})
        run_faults(cluster, nemesis, args.faults, args.seed, brokers_exited, not_recovered)
        time.sleep(3.0)  # transactions after the last fault
        end = time.monotonic() + END_BOUND_S
        for w in writers:
            w.stop(end)
        unresolved = source.stop(flush_timeout_s=60) if source is not None else 0
        stuck = [f"txn producer {w.index}: its thread did not finish" for w in writers if not w.join()]
        if stuck:
            stuck.append(f"(every thread's stack: {_dump_threads(data_dir)})")
        stuck += [w.gave_up for w in writers if w.gave_up]
        stuck += [f"copy source: {unresolved} values"] if unresolved else []
        copy_behind: list[str] = []
        if copier is not None:
            # the copier to the source's end (its last committed positions), then stopped
            source_end = None
            copier_end = end
            while time.monotonic() < copier_end:
                source_end = end_offsets(cluster.bootstrap_servers, SOURCE, COPY_PARTITIONS, False)
                if source_end is not None and all(copier.positions.get(p, 0) >= e for p, e in source_end.items()):
                    break
                if _copier_stalled(data_dir):  # librdkafka #5456: waiting longer changes nothing
                    copier_end = min(end, time.monotonic() + STALLED_COPIER_WAIT_S)
                time.sleep(1.0)
            else:
                copy_behind.append(f"copier committed {copier.positions}, the source ends at {source_end}")
            if not copier.stop(copier_end):
                stuck.append(f"copier: its thread did not finish (its stack: {_dump_threads(data_dir)})")
            stuck += [copier.gave_up] if copier.gave_up else []
        # the readers to the partitions' ends: the last stable offset at read_committed, the high
        # watermark at read_uncommitted (asked again each round: a transaction left open moves
        # its LSO when the coordinator aborts it after its timeout)
        ends: dict[str, dict[int, int] | None] = {}
        copy_end: dict[int, int] | None = None
        while True:
            for reader in readers:
                ends[reader.isolation] = end_offsets(cluster.bootstrap_servers, TOPIC, PARTITIONS,
                                                     reader.isolation == "read_committed")
            if copy_reader is not None:
                copy_end = end_offsets(cluster.bootstrap_servers, OUTPUT, COPY_PARTITIONS, True)
            if all(e is not None and r.caught_up(e) for r, e in zip(readers, ends.values(), strict=True)) \
                    and ends["read_committed"] == ends["read_uncommitted"] \
                    and (copy_reader is None or (copy_end is not None and copy_reader.caught_up(copy_end))):
                break
            if time.monotonic() > end:
                break
            time.sleep(1.0)
        if copy_reader is not None and (copy_end is None or not copy_reader.caught_up(copy_end)):
            copy_behind.append(f"output reader at {copy_reader.positions}, the output's LSO at {copy_end}")
        behind = [f"{r.isolation} reader at {r.positions}, the ends at {ends.get(r.isolation)}"
                  for r in readers if ends.get(r.isolation) is None or not r.caught_up(ends[r.isolation] or {})]
        lso, hw = ends.get("read_committed"), ends.get("read_uncommitted")
        hanging = [f"partition {p}: last stable offset {lso[p]}, high watermark {hw[p]}"
                   for p in range(PARTITIONS) if lso and hw and lso.get(p) != hw.get(p)]
        for reader in readers:
            reader.stop()
        # a reader whose client hung (or fell behind) read only part of the log: the check
        # takes a new consumer's reads of it instead, so what it missed is not taken for lost
        reads = {r.isolation: r.reads for r in readers}
        for reader in readers:
            reader_ends = ends.get(reader.isolation)
            if reader_ends is not None and (reader.hung or not reader.caught_up(reader_ends)):
                again = read_again(cluster.bootstrap_servers, TOPIC, PARTITIONS, reader.isolation, reader_ends,
                                   trouble)
                if again is not None:
                    reads[reader.isolation] = again
        txns = [t for w in writers for t in w.txns]
        _write_history(data_dir / "history.json", txns, readers)
        anomalies, stats = judge_transactions(txns, reads["read_committed"], reads["read_uncommitted"])
        copy: dict[str, Any] = {}
        if copier is not None and source is not None and copy_reader is not None:
            copy_reader.stop()
            copied = copy_reader.reads
            if copy_end is not None and (copy_reader.hung or not copy_reader.caught_up(copy_end)):
                copied = read_again(cluster.bootstrap_servers, OUTPUT, COPY_PARTITIONS, "read_committed", copy_end,
                                    trouble) or copied
            copy_anomalies, copy_stats = judge_copy(
                {encode_value(*v) for v in source.acked}, read_everything(cluster.bootstrap_servers, SOURCE,
                                                                          COPY_PARTITIONS), copied)
            if copy_behind:
                # what it did not copy is not lost, only not yet copied: said once, as its being behind
                copy_behind.append(f"{len(copy_anomalies['copy_lost'])} source records not copied")
                copy_anomalies["copy_lost"] = []
            anomalies.update(copy_anomalies)
            anomalies["copier_behind"] = copy_behind
            copy = {"source_acknowledged": len(source.acked), **copy_stats, "copier_transactions": copier.committed_txns,
                    "copier_abortable_errors": copier.abortable, "copier_retriable_errors": dict(copier.retriable),
                    "copier_consume_errors": len(copier.consume_errors)}
        differing = [f"{topic} partition {p}" for topic, count in
                     [(TOPIC, PARTITIONS)] + ([(OUTPUT, COPY_PARTITIONS)] if copier is not None else [])
                     for p in differing_replicas(_replica_dirs(cluster, topic), count)]
        # a client that hung in librdkafka's own deadlock (issue #5476, open) is the client's bug:
        # its own row, with the stacks as evidence, never folded into zero nor into ours
        deadlocked: list[str] = []
        if trouble.hung or stuck:
            stacks = _client_stacks(data_dir)
            if librdkafka_5476(stacks):
                deadlocked = [f"{what} (stacks in {data_dir / 'client-stacks.txt'})" for what in trouble.hung]
        # the copier stalled in librdkafka's send_offsets_to_transaction (issue #5456, open):
        # its own row, with the log's evidence; its being behind and its fencing follow from it
        stalled: list[str] = []
        died = trouble.died
        if copier is not None and (anomalies.get("copier_behind") or any(d.startswith("copier") for d in died)):
            with open(data_dir / "librdkafka.log", errors="replace") as log_lines:
                stalled = send_offsets_stalls(log_lines, "faults-txn-copier#producer", CALL_TIMEOUT_S, datetime.now())
            if stalled:
                stalled += anomalies.pop("copier_behind", []) + [d for d in died + stuck if d.startswith("copier")]
                anomalies["copier_behind"] = []
                died = [d for d in died if not d.startswith("copier")]
                stuck = [d for d in stuck if not d.startswith("copier")]
        died, reused = _sequences_reused(data_dir, died)
        anomalies.update({
            "librdkafka_5476_deadlocks": deadlocked,
            "librdkafka_send_offsets_stalls": stalled,
            "librdkafka_sequences_reused_after_abort": reused,
            "clients_hung": [] if deadlocked else trouble.hung,
            "hanging_transactions": hanging,
            "readers_behind": behind,
            "replicas_differing": differing,
            "clients_died": died,
            "unresolved_at_end": stuck,
            "consumer_errors": trouble.consumer_errors,
            "non_monotonic_polls": trouble.non_monotonic_polls,
            "protocol_errors": PROTOCOL_ERRORS.take(),
            "cluster_not_recovered": not_recovered,
            "brokers_exited": brokers_exited,
        })
        retriable: collections.Counter[str] = collections.Counter()
        for w in writers:
            retriable.update(w.retriable)
        notes = [f"{t.producer}:{t.number} {t.outcome}: {t.note}" for t in txns if t.note]
        return {
            "workload": "transactions",
            "seed": args.seed,
            "faults": dict(collections.Counter(f.kind for f in nemesis.history)),
            "faults_total": len(nemesis.history),
            "writes_acknowledged": stats["records_acknowledged"],
            "transactions": {k: stats[k] for k in ("transactions", "committed", "aborted", "unknown",
                                                   "unknown_all_delivered", "unknown_none_delivered")},
            "records": {k: stats[k] for k in ("records", "records_acknowledged", "records_committed",
                                              "read_committed_deliveries", "read_uncommitted_deliveries",
                                              "aborted_records_seen_by_control")},
            # not anomalies: what the producers handled as confluent-kafka prescribes
            "abortable_errors": sum(w.abortable for w in writers),
            "retriable_errors": dict(retriable),
            "delivery_errors": sum(w.delivery_errors for w in writers),
            "copier": copy,
            "end_offsets": {"last_stable": lso, "high_watermark": hw},
            "duration_s": round(time.monotonic() - started, 1),
            "anomalies": {k: len(v) for k, v in anomalies.items()},
            "examples": {**{k: v[:5] for k, v in anomalies.items() if v},
                         **({"transaction_notes": notes[:10]} if notes else {}),
                         **({"copier_consume_errors": copier.consume_errors[:5]}
                            if copier is not None and copier.consume_errors else {})},
            "fault_log": fault_log(nemesis.history),
        }
    finally:
        cluster.stop()


def _copier_stalled(data_dir: Path) -> bool:
    """Whether the copier's send_offsets_to_transaction is in librdkafka's stall (#5456) now."""
    with open(data_dir / "librdkafka.log", errors="replace") as log_lines:
        return bool(send_offsets_stalls(log_lines, "faults-txn-copier#producer", CALL_TIMEOUT_S, datetime.now()))


def _sequences_reused(data_dir: Path, died: list[str]) -> tuple[list[str], list[str]]:
    """``died`` without the writers that librdkafka's sequence reuse after abort_transaction
    killed (librdkafka_bugs.sequences_reused_after_abort: the client's bug, a row of its own),
    and those, one line each with the evidence."""
    if not any("OUT_OF_ORDER_SEQUENCE_NUMBER" in d for d in died):
        return died, []
    broker_lines = (line for log in sorted(data_dir.glob("broker-*/broker.log"))
                    for line in log.open(errors="replace"))
    with open(data_dir / "librdkafka.log", errors="replace") as client_lines:
        found = sequences_reused_after_abort(client_lines, broker_lines)
    reused = []
    for client, evidence in sorted(found.items()):
        prefix = client.replace("faults-txn-producer-", "txn producer ", 1) + ":"
        taken = [d for d in died if d.startswith(prefix)]
        if taken:
            reused.append(f"{evidence} ({'; '.join(taken)})")
            died = [d for d in died if not d.startswith(prefix)]
    return died, reused


def _client_stacks(data_dir: Path) -> str:
    """Every thread's C stack of this process (gdb, if installed), kept in the run's data dir:
    a client call that never returns is librdkafka's when its threads wait on each other's
    locks."""
    # gdb stops this process while it reads it: its output goes to a file, not a pipe this
    # process would have to drain (a pipe filled up and both waited for good), and the time
    # limit is coreutils' timeout with SIGKILL, not ours (whose thread is stopped too);
    # debuginfod off, as downloads from inside the run's network namespace only hang
    path = data_dir / "client-stacks.txt"
    try:
        with open(path, "w") as out:
            subprocess.run(["timeout", "-s", "KILL", "60", "gdb", "-nx", "-batch", "-iex", "set debuginfod enabled off",
                            "-p", str(os.getpid()), "-ex", "thread apply all bt 16"],
                           stdout=out, stderr=subprocess.STDOUT, timeout=90)
    except (OSError, subprocess.TimeoutExpired) as exc:
        path.write_text(f"no stacks: {exc}")
    return path.read_text(errors="replace")


def _dump_threads(data_dir: Path) -> Path:
    """Every thread's Python stack, into the run's data dir: where a client call hangs."""
    path = data_dir / "stuck-threads.txt"
    with open(path, "a") as out:
        faulthandler.dump_traceback(out, all_threads=True)
    return path


def _replica_dirs(cluster: FaultCluster, topic: str) -> Callable[[int], list[Path]]:
    return lambda p: [cluster.broker_dir(b) / "data" / f"{topic}-{p}" for b in cluster.broker_ids]


def _write_history(path: Path, txns: list[Txn], readers: list[TailReader]) -> None:
    """The history the checker judged, kept with the run's data (to look into an anomaly):
    each transaction with its outcome and records (index, partition, acknowledged offset), and
    what it read in it (producer, transaction, index), and each reader's deliveries
    (partition, offset, value)."""
    path.write_text(json.dumps({
        "transactions": [{"producer": t.producer, "number": t.number, "outcome": t.outcome,
                          "intended": t.intended, "note": t.note,
                          "records": [[r.index, r.partition, r.offset] for r in t.records],
                          "reads": [list(rid) for rid in t.reads]} for t in txns],
        "reads": {r.isolation: [[p, o, v.decode(errors="replace")] for p, o, v in r.reads] for r in readers},
    }))
