"""After the faults are healed: read every partition from the start and judge the history.

The anomalies are Jepsen's for a log (lost acknowledged writes, one offset with two values,
duplicates, reordering) plus what a replicated log must also keep: replicas byte-identical,
and clients that never had to be re-created.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from odradek.faults.librdkafka_bugs import epoch_bumps, librdkafka_4953
from odradek.faults.workload import LOGGER, Value, decode_value
from odradek.protocol.records import iter_batches


def read_everything(bootstrap: str, topic: str, partitions: int,
                    timeout_s: float = 120.0) -> dict[int, list[tuple[int, bytes]]]:
    """partition -> [(offset, value)] from the log start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults-checker", "enable.auto.commit": False,
                         "logger": LOGGER})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])  # -2: the beginning
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(out[p][-1][0] + 1 < ends[p] if out[p] else ends[p] > 0 for p in out):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read every partition up to its high watermark in {timeout_s} s")
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None  # KeyedProducer's records
            out[partition].append((offset, value))
        return out
    finally:
        consumer.close()


def judge(log: dict[int, list[tuple[int, bytes]]],
          acked: dict[Value, tuple[int, int | None]]) -> dict[str, list[str]]:
    """The anomalies in what was read, given where each acknowledged value was said to land."""
    at: dict[tuple[int, int | None], Value] = {}
    seen: dict[Value, list[tuple[int, int]]] = {}
    by_key: dict[tuple[int, str], list[tuple[int, int, int]]] = {}  # (producer, key) -> (partition, offset, seq)
    for partition, entries in log.items():
        for offset, raw in entries:
            value = decode_value(raw)
            at[(partition, offset)] = value
            seen.setdefault(value, []).append((partition, offset))
            by_key.setdefault((value[0], value[1]), []).append((partition, offset, value[2]))
    lost, inconsistent = [], []
    for value, where in acked.items():
        if value not in seen:
            lost.append(f"{value} acknowledged at {where}")
        elif where[1] is None:
            # librdkafka acknowledges without an offset a batch whose response it never got
            # when the broker acknowledged a later batch of the same idempotent producer
            # (sequence numbers prove the earlier one was written): present is all we can check
            continue
        elif at.get(where) != value:
            inconsistent.append(f"{where}: acknowledged {value}, read {at.get(where)}")
    duplicates = [f"{v} at {w}" for v, w in seen.items() if len(w) > 1]
    reordered = []
    for key, key_entries in by_key.items():
        seqs = [seq for _, _, seq in sorted(key_entries)]
        if seqs != sorted(seqs):
            reordered.append(f"{key}: sequence numbers in log order {_first_inversion(seqs)}")
    return {"lost": lost, "inconsistent_offsets": inconsistent, "duplicates": duplicates,
            "reordered": reordered}


def judge_by_profile(log: dict[int, list[tuple[int, bytes]]], profiles: dict[int, str],
                     acked: dict[int, dict[Value, tuple[int, int | None]]]) -> dict[str, list[str]]:
    """``judge`` for each producer profile alone (producer_profiles.py), on rows of its own
    ("duplicates_kafka_python"): each producer writes keys of its own, so judging one
    profile's values and acknowledgements alone finds exactly that profile's anomalies."""
    out: dict[str, list[str]] = {}
    for profile in dict.fromkeys(profiles.values()):
        mine = {i for i, p in profiles.items() if p == profile}
        own_log = {partition: [(offset, raw) for offset, raw in entries if decode_value(raw)[0] in mine]
                   for partition, entries in log.items()}
        own_acked = {v: where for i in mine for v, where in acked[i].items()}
        for kind, found in judge(own_log, own_acked).items():
            out[f"{kind}_{profile.replace('-', '_')}"] = found
    return out


def duplicate_positions(log: dict[int, list[tuple[int, bytes]]]) -> dict[Value, list[tuple[int, int]]]:
    """Each value read at more than one place, with its (partition, offset)s in log order."""
    seen: dict[Value, list[tuple[int, int]]] = {}
    for partition, entries in log.items():
        for offset, raw in entries:
            seen.setdefault(decode_value(raw), []).append((partition, offset))
    return {v: w for v, w in seen.items() if len(w) > 1}


def acknowledged_at_first_copy(values: Iterable[Value], duplicates: dict[Value, list[tuple[int, int]]],
                               acked_by: dict[int, dict[Value, tuple[int, int | None]]]) -> None:
    """For duplicated ``values`` whose later copies are set aside (``without``): an
    acknowledgement naming a later copy (the re-send was acknowledged) now names the first."""
    for value in values:
        first, *later = sorted(duplicates[value])
        if acked_by[value[0]].get(value) in later:
            acked_by[value[0]][value] = first


def without(log: dict[int, list[tuple[int, bytes]]],
            positions: Iterable[tuple[int, int]]) -> dict[int, list[tuple[int, bytes]]]:
    """The log without the records at ``positions`` (copies already accounted for)."""
    drop = set(positions)
    return {partition: [(o, raw) for o, raw in entries if (partition, o) not in drop]
            for partition, entries in log.items()}


def batch_producers(log_dirs: Iterable[Path]) -> dict[tuple[int, int], tuple[int, int]]:
    """(partition, offset) -> (producer id, producer epoch) of the batch holding it, read from
    one replica's segment files (``log_dirs``: one "<topic>-<partition>" directory each)."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for directory in log_dirs:
        partition = int(directory.name.rsplit("-", 1)[1])
        for segment in sorted(directory.glob("*.log")):
            for header in iter_batches(segment.read_bytes()):
                for offset in range(header.base_offset, header.last_offset + 1):
                    out[(partition, offset)] = (header.producer_id, header.producer_epoch)
    return out


def set_aside_librdkafka_4953(log: dict[int, list[tuple[int, bytes]]], producers: Iterable[Any], librdkafka_log: Path,
                              replica_dirs: Iterable[Path], acked_by: dict[int, dict[Value, tuple[int, int | None]]]
                              ) -> tuple[list[str], dict[int, list[tuple[int, bytes]]]]:
    """The librdkafka producers' duplicates that the run's evidence shows to be librdkafka's
    issue #4953 (librdkafka_bugs.py), one line each, and the log without their later copies,
    which the checker then judges: the client's bug gets a row of its own, never folded into
    zero nor into ours. An acknowledgement that names a later copy (librdkafka acknowledges the
    re-send) is moved to the first one in ``acked_by``. ``replica_dirs``: one replica's
    "<topic>-<partition>" directory per partition, whose batches tell the copies' producer
    epochs; ``librdkafka_log``: the run's librdkafka.log, with the producers' epoch bumps."""
    clients = {p.index: f"faults-producer-{p.index}" for p in producers if p.profile.startswith("librdkafka")}
    duplicates = {v: w for v, w in duplicate_positions(log).items() if v[0] in clients}
    if not duplicates:
        return [], log
    with open(librdkafka_log, errors="replace") as lines:
        bumped = epoch_bumps(lines)
    found = librdkafka_4953(duplicates, bumped, clients, batch_producers(replica_dirs))
    acknowledged_at_first_copy(found, duplicates, acked_by)
    lines_4953 = [f"{v} at {sorted(duplicates[v])}: written again under a later epoch after the producer's "
                  f"epoch bump for skipped sequence numbers" for v in found]
    return lines_4953, without(log, [w for v in found for w in sorted(duplicates[v])[1:]])


def _first_inversion(seqs: list[int]) -> str:
    for i in range(1, len(seqs)):
        if seqs[i] < seqs[i - 1]:
            return f"{seqs[i - 1]} then {seqs[i]}"
    return ""


def differing_replicas(partition_dirs: Callable[[int], Iterable[Path]], partitions: int,
                       timeout_s: float = 60.0) -> list[int]:
    """Partitions whose replicas' log files are not byte-identical once the followers had
    `timeout_s` to catch up (no producer is writing: the high watermark is the log end)."""
    deadline = time.monotonic() + timeout_s
    while True:
        differing = [p for p in range(partitions)
                     if len({b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))
                             for d in partition_dirs(p)}) != 1]
        if not differing or time.monotonic() > deadline:
            return differing
        time.sleep(0.5)


# -- the ordered workload (KIP-253): judged in the group's delivery order ----------------------------

#: one delivery a member's poll() handed its application: (monotonic ns, key, seq, partition, offset)
Delivery = tuple[int, str, int, int, int]


def read_deliveries(paths: Iterable[Path]) -> tuple[list[Delivery], list[str]]:
    """Every member's deliveries merged by time (CLOCK_MONOTONIC is one clock for the machine's
    processes: the group's delivery order), and the errors poll() handed back. A killed
    member's last line may be cut: a line without all its fields is skipped (its record's
    position was never reported, since the member writes the line before its next poll)."""
    deliveries: list[Delivery] = []
    errors: list[str] = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            parts = line.split(" ", 2)
            if parts[0] == "E" and len(parts) == 3:
                errors.append(f"{path.stem}: {parts[2]}")
                continue
            fields = line.split()
            if fields[:1] == ["D"] and len(fields) == 6:
                try:
                    deliveries.append((int(fields[1]), fields[2], int(fields[3]), int(fields[4]), int(fields[5])))
                except ValueError:
                    continue
    deliveries.sort()
    return deliveries, errors


def undelivered(deliveries: Iterable[Delivery], acked: Iterable[tuple[str, int]]) -> int:
    seen = {(key, seq) for _, key, seq, _, _ in deliveries}
    return sum(1 for value in acked if value not in seen)


def judge_ordered(deliveries: list[Delivery],
                  acked: dict[tuple[str, int], tuple[int, int | None]]) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The anomalies of an ordered workload's history, and its counts.

    - lost: an acknowledged value the group never delivered;
    - inconsistent offsets: an acknowledged value never delivered from the partition and offset
      it was acknowledged at (one offset, two values; or the value written elsewhere only);
    - written twice: a value delivered from two different offsets (in the log twice);
    - reordered: in the group's delivery order, a key's value delivered for the first time
      while an earlier acknowledged value of the key had not yet been delivered at all.

    Redeliveries of a value from its one offset (a killed member's uncommitted records, read
    again by the partition's next owner) are counted, not anomalies: the group is at least once.
    """
    first: dict[tuple[str, int], int] = {}
    positions: dict[tuple[str, int], set[tuple[int, int]]] = {}
    by_key: dict[str, list[int]] = {}           # key -> seqs in first-delivery order
    for _, key, seq, partition, offset in deliveries:
        value = (key, seq)
        positions.setdefault(value, set()).add((partition, offset))
        if value not in first:
            first[value] = len(first)
            by_key.setdefault(key, []).append(seq)
    acked_by_key: dict[str, list[int]] = {}
    for key, seq in acked:
        acked_by_key.setdefault(key, []).append(seq)
    lost, inconsistent, reordered = [], [], []
    for value, where in sorted(acked.items()):
        if value not in positions:
            lost.append(f"{value[0]}:{value[1]} acknowledged at {where}")
        elif where[1] is not None and where not in positions[value]:
            inconsistent.append(f"{value[0]}:{value[1]} acknowledged at {where}, delivered from "
                                f"{sorted(positions[value])}")
    twice = [f"{k}:{s} delivered from {sorted(w)}"
             + (f", acknowledged at {acked[(k, s)]}" if (k, s) in acked else ", never acknowledged")
             for (k, s), w in sorted(positions.items()) if len(w) > 1]
    for key, order in sorted(by_key.items()):
        expected = sorted(acked_by_key.get(key, []))
        delivered: set[int] = set()
        i = 0  # expected[i] is the smallest acknowledged seq not yet delivered
        examples: list[str] = []
        late = 0
        for seq in order:
            while i < len(expected) and expected[i] in delivered:
                i += 1
            if i < len(expected) and expected[i] < seq:
                late += 1
                if len(examples) < 3:
                    examples.append(f"{seq} before {expected[i]}")
            delivered.add(seq)
        if late:
            reordered.append(f"{key}: {late} first delivered before an earlier one ({', '.join(examples)})")
    stats = {"deliveries": len(deliveries), "values_delivered": len(first),
             "redeliveries": len(deliveries) - len(first), "keys": len(by_key)}
    return ({"lost": lost, "inconsistent_offsets": inconsistent, "written_twice": twice, "reordered": reordered},
            stats)
