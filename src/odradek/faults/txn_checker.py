"""The transactional workload's checker (`python -m odradek.faults --workload transactions`):
pure functions over the history the run recorded, the anomalies Jepsen's Kafka tests define.

The history: every transaction each producer began, with the outcome its client saw
(committed: commit_transaction returned; aborted: abort_transaction returned and no
commit_transaction had raised before; unknown: commit_transaction raised, or the transaction
was never finished), and where each of its records was produced (partition, and the offset of
its delivery report when one came back); and what two readers tailing every partition from
offset 0 were delivered, one at read_committed, one at read_uncommitted (the control).

Each record's value is "<producer>:<transaction number>:<index in the transaction>". A
producer's transactions are numbered in the order it ran them, one after the other, so that is
also the order its commits took effect. Each producer also reads, in every transaction after
its sends, what a read_committed consumer of its own (tailing the topic) is delivered: those
reads give the write-read edges of Jepsen's cycle checks (Elle's G1c) and its precommitted
reads.

The consume-transform-produce copier is judged apart (judge_copy): the output topic read at
read_committed against the source topic it copies.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field

from odradek.common.graphs import strongly_connected

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"

#: (producer, transaction number, index in the transaction)
RecordId = tuple[int, int, int]
#: one record a reader was delivered: (partition, offset, value)
Read = tuple[int, int, bytes]


def encode_record(producer: int, txn: int, index: int) -> bytes:
    return f"{producer}:{txn}:{index}".encode()


def decode_record(raw: bytes) -> RecordId | None:
    """The record's id, or None for a value no transactional producer of the run wrote."""
    try:
        producer, txn, index = raw.decode().split(":")
        return int(producer), int(txn), int(index)
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class TxnRecord:
    index: int
    partition: int
    offset: int | None = None   # from its delivery report, when one succeeded


@dataclass
class Txn:
    producer: int
    number: int
    outcome: str = UNKNOWN      # COMMITTED, ABORTED or UNKNOWN
    records: list[TxnRecord] = field(default_factory=list)
    intended: str = COMMITTED   # what the producer meant to do with it
    note: str = ""              # what went wrong on the way, if anything
    reads: list[RecordId] = field(default_factory=list)   # what its producer's reader was delivered in it


def judge_transactions(txns: list[Txn], committed: list[Read],
                       uncommitted: list[Read]) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The anomalies of a transactional history, and its counts.

    - aborted read: a record of an aborted transaction delivered at read_committed;
    - lost write: a record of a committed transaction never delivered at read_committed;
    - duplicate: a record delivered from two different offsets (by either reader);
    - torn transaction: a transaction of unknown outcome some but not all of whose records were
      delivered at read_committed (a committed one partly delivered is lost writes);
    - order: within a partition, at read_committed, a producer's records not in the order of
      (transaction number, index): its transactions out of commit order, or a transaction's
      records out of their produce order (one entry a partition and producer);
    - inconsistent offsets: two different records at one partition offset across the readers, or
      a record delivered elsewhere than its delivery report (or its produce call) put it;
    - unexpected records: a value no transaction of the history wrote;
    - control blind: the read_uncommitted reader did not see what it must (an aborted record
      whose write was acknowledged, or a record the read_committed reader was delivered); a
      check that cannot fail proves nothing;
    - precommitted read, G1c and G1c-process: see judge_reads.
    """
    records: dict[RecordId, tuple[Txn, TxnRecord]] = {}
    for txn in txns:
        for rec in txn.records:
            records[(txn.producer, txn.number, rec.index)] = (txn, rec)

    at: dict[tuple[int, int], set[bytes]] = {}
    where: dict[RecordId, set[tuple[int, int]]] = {}
    unexpected: list[str] = []
    committed_where: dict[RecordId, set[tuple[int, int]]] = {}
    uncommitted_seen: set[RecordId] = set()
    for reads, seen in ((committed, committed_where), (uncommitted, None)):
        for partition, offset, raw in reads:
            at.setdefault((partition, offset), set()).add(raw)
            rid = decode_record(raw)
            if rid is None or rid not in records:
                unexpected.append(f"{raw!r} at ({partition}, {offset})")
                continue
            where.setdefault(rid, set()).add((partition, offset))
            if seen is not None:
                seen.setdefault(rid, set()).add((partition, offset))
            else:
                uncommitted_seen.add(rid)

    inconsistent = [f"({p}, {o}): {sorted(values)}" for (p, o), values in sorted(at.items()) if len(values) > 1]
    for rid, places in sorted(where.items()):
        txn, rec = records[rid]
        wrong = sorted(place for place in places if place[0] != rec.partition
                       or (rec.offset is not None and place[1] != rec.offset))
        if wrong:
            expected = (rec.partition, rec.offset) if rec.offset is not None else f"partition {rec.partition}"
            inconsistent.append(f"{_name(rid)} produced to {expected}, delivered from {wrong}")
    duplicates = [f"{_name(rid)} ({records[rid][0].outcome}) delivered from {sorted(places)}"
                  for rid, places in sorted(where.items()) if len(places) > 1]

    aborted_read, lost, torn = [], [], []
    unknown_all = unknown_none = 0
    for txn in txns:
        delivered = [rec for rec in txn.records if (txn.producer, txn.number, rec.index) in committed_where]
        delivered_indexes = {rec.index for rec in delivered}
        if txn.outcome == ABORTED:
            aborted_read += [f"{_name((txn.producer, txn.number, rec.index))} of aborted transaction "
                             f"{txn.producer}:{txn.number} delivered from "
                             f"{sorted(committed_where[(txn.producer, txn.number, rec.index)])}"
                             for rec in delivered]
        elif txn.outcome == COMMITTED:
            lost += [f"{_name((txn.producer, txn.number, rec.index))} of committed transaction "
                     f"{txn.producer}:{txn.number} ({len(delivered)}/{len(txn.records)} delivered), produced to "
                     f"{(rec.partition, rec.offset)}"
                     for rec in txn.records if rec.index not in delivered_indexes]
        elif not delivered:
            unknown_none += 1
        elif len(delivered) == len(txn.records):
            unknown_all += 1
        else:
            missing = [rec.index for rec in txn.records if rec.index not in delivered_indexes]
            torn.append(f"transaction {txn.producer}:{txn.number} of unknown outcome: "
                        f"{len(delivered)} of {len(txn.records)} records delivered, missing indexes {missing}"
                        + (f" ({txn.note})" if txn.note else ""))

    order = _order(committed)

    acked_aborted = [(txn.producer, txn.number, rec.index) for txn in txns if txn.outcome == ABORTED
                     for rec in txn.records if rec.offset is not None]
    control_blind = []
    seen_aborted = sum(1 for rid in acked_aborted if rid in uncommitted_seen)
    if acked_aborted and not seen_aborted:
        control_blind.append(f"read_uncommitted saw none of the {len(acked_aborted)} acknowledged records of "
                             f"aborted transactions")
    control_blind += [f"{_name(rid)} delivered at read_committed, never at read_uncommitted"
                      for rid in sorted(committed_where) if rid not in uncommitted_seen]

    outcomes = {o: sum(1 for t in txns if t.outcome == o) for o in (COMMITTED, ABORTED, UNKNOWN)}
    stats = {
        "transactions": len(txns),
        "committed": outcomes[COMMITTED],
        "aborted": outcomes[ABORTED],
        "unknown": outcomes[UNKNOWN],
        "unknown_all_delivered": unknown_all,
        "unknown_none_delivered": unknown_none,
        "records": len(records),
        "records_acknowledged": sum(1 for _, rec in records.values() if rec.offset is not None),
        "records_committed": sum(len(t.records) for t in txns if t.outcome == COMMITTED),
        "read_committed_deliveries": len(committed),
        "read_uncommitted_deliveries": len(uncommitted),
        "aborted_records_seen_by_control": sum(1 for rid in uncommitted_seen if records[rid][0].outcome == ABORTED),
    }
    anomalies = {"aborted_read": aborted_read, "lost_write": lost, "duplicate": duplicates,
                 "torn_transaction": torn, "order": order, "inconsistent_offsets": inconsistent,
                 "unexpected_records": unexpected, "control_blind": control_blind, **judge_reads(txns)}
    stats["reads_in_transactions"] = sum(len(t.reads) for t in txns)
    return anomalies, stats


TxnId = tuple[int, int]   # (producer, transaction number)


def judge_reads(txns: list[Txn]) -> dict[str, list[str]]:
    """What the transactions' own read_committed reads show (Jepsen's Kafka definitions, Elle's
    cycle search):

    - precommitted read: a transaction read a record of its own (a read_committed consumer
      must not see a transaction's records before its commit marker, its own included), or of
      a later transaction of its producer;
    - G1c: a cycle of write-read edges (T1 -> T2: T2 read a record T1 wrote) between
      transactions of different producers: each read the other's records before either
      committed;
    - G1c-process: a cycle of write-read edges and process order (a producer's transaction n
      before its n+1: they ran one after the other) that is no G1c: a transaction read a
      record of one that began after it had ended.

    Each cycle is reported once per strongly connected component, with one example."""
    known = {(t.producer, t.number) for t in txns}
    wr: dict[TxnId, set[TxnId]] = {}
    precommitted = []
    for t in txns:
        me = (t.producer, t.number)
        for rid in t.reads:
            writer = (rid[0], rid[1])
            if writer[0] == me[0] and writer[1] >= me[1]:
                precommitted.append(f"transaction {me[0]}:{me[1]} read {_name(rid)}"
                                    + (" (its own)" if writer == me else " (of a later transaction)"))
            elif writer in known:
                wr.setdefault(writer, set()).add(me)
    process: dict[TxnId, set[TxnId]] = {}
    for t in txns:
        if (t.producer, t.number + 1) in known:
            process.setdefault((t.producer, t.number), set()).add((t.producer, t.number + 1))
    g1c = [_cycle_text(c, wr) for c in strongly_connected(wr) if len(c) > 1]
    in_g1c = {n for c in strongly_connected(wr) if len(c) > 1 for n in c}
    both = {n: wr.get(n, set()) | process.get(n, set()) for n in set(wr) | set(process)}
    g1c_process = [_cycle_text(c, both) for c in strongly_connected(both) if len(c) > 1 and not c <= in_g1c]
    return {"precommitted_read": precommitted, "g1c": g1c, "g1c_process": g1c_process}


def _cycle_text(component: set[TxnId], graph: dict[TxnId, set[TxnId]]) -> str:
    """One cycle through the component's smallest transaction, found by breadth-first search
    inside the component."""
    start = min(component)
    came_from: dict[TxnId, TxnId] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    names = " -> ".join(f"{p}:{n}" for p, n in [start, *reversed(path[:-1]), start])
                    return f"{len(component)} transactions, e.g. {names}"
                if child in component and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    return f"{len(component)} transactions"


def _name(rid: RecordId) -> str:
    return f"{rid[0]}:{rid[1]}:{rid[2]}"


def _order(reads: list[Read]) -> list[str]:
    """Per partition and producer, the records' (transaction, index) in offset order must grow;
    a record delivered again (a duplicate, reported apart) is taken at its first offset."""
    streams: dict[tuple[int, int], list[tuple[int, int, int]]] = {}   # (partition, producer) -> (offset, txn, index)
    for partition, offset, raw in reads:
        rid = decode_record(raw)
        if rid is not None:
            streams.setdefault((partition, rid[0]), []).append((offset, rid[1], rid[2]))
    out = []
    for (partition, producer), entries in sorted(streams.items()):
        seen: set[tuple[int, int]] = set()
        last: tuple[int, int, int] | None = None
        inversions: list[str] = []
        for offset, txn, index in sorted(entries):
            if (txn, index) in seen:
                continue
            seen.add((txn, index))
            if last is not None and (txn, index) < (last[1], last[2]):
                inversions.append(f"{producer}:{txn}:{index} at {offset} after {producer}:{last[1]}:{last[2]} "
                                  f"at {last[0]}")
            last = (offset, txn, index)
        if inversions:
            out.append(f"partition {partition}, producer {producer}: {len(inversions)} out of order, first "
                       f"{inversions[0]}")
    return out


def judge_copy(acknowledged: set[bytes], source: dict[int, list[tuple[int, bytes]]],
               copied: list[Read]) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The consume-transform-produce copier's anomalies: it copies each record of the source
    topic's partition p to the output topic's partition p (reading at read_committed, its
    offsets committed in its transactions), so read at read_committed the output must hold the
    source's records exactly once each (as often as the source holds them), in the source's
    order.

    - source lost: a value the source producer was acknowledged, not in the source topic;
    - copy lost: a source record missing from the output;
    - copy duplicated: a source record in the output more often than in the source;
    - copy unexpected: an output record that is no source record, or in another partition;
    - copy order: in an output partition, records not in their source offset order.
    """
    held = collections.Counter(raw for entries in source.values() for _, raw in entries)
    out = collections.Counter(raw for _, _, raw in copied)
    source_lost = [raw.decode(errors="replace") for raw in sorted(acknowledged) if raw not in held]
    lost = [f"{raw.decode(errors='replace')} ({n} in the source, {out.get(raw, 0)} copied)"
            for raw, n in sorted(held.items()) if out.get(raw, 0) < n]
    duplicated = [f"{raw.decode(errors='replace')} ({held[raw]} in the source, {n} copied)"
                  for raw, n in sorted(out.items()) if raw in held and n > held[raw]]
    source_offset = {(p, raw): offset for p, entries in source.items() for offset, raw in reversed(entries)}
    unexpected = [f"{raw.decode(errors='replace')} at ({p}, {o})" for p, o, raw in copied
                  if (p, raw) not in source_offset]
    order = []
    seen: set[tuple[int, bytes]] = set()
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for p, o, raw in sorted(copied):
        if (p, raw) in source_offset and (p, raw) not in seen:   # a second copy is a duplicate, not late
            seen.add((p, raw))
            by_partition.setdefault(p, []).append((o, source_offset[(p, raw)]))
    for p, entries in sorted(by_partition.items()):
        last = -1
        for o, from_offset in sorted(entries):
            if from_offset < last:
                order.append(f"partition {p}: output offset {o} holds source offset {from_offset}, after {last}")
                break
            last = from_offset
    stats = {"source_records": sum(held.values()), "copied_records": sum(out.values())}
    return ({"source_lost": source_lost, "copy_lost": lost, "copy_duplicated": duplicated,
             "copy_unexpected": unexpected, "copy_order": order}, stats)
