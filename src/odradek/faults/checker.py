"""After the faults are healed: read every partition from the start and judge the history.

The anomalies are Jepsen's for a log (lost acknowledged writes, one offset with two values,
duplicates, reordering) plus what a replicated log must also keep: replicas byte-identical,
and clients that never had to be re-created.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from odradek.faults.workload import LOGGER, Value, decode_value


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
