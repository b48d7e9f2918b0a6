"""librdkafka's own open bugs that fault runs hit, told from the evidence a run keeps, so a
client's bug gets a row of its own in the report: never folded into zero, nor into ours.

- **#5476**, a lock-order deadlock: a client call never returns. Told from gdb's stacks of the
  run's process.
- **#5456**, ``rd_kafka_send_offsets_to_transaction()`` outlives its own timeout: the
  coordinator request behind its TxnOffsetCommit has a timeout that librdkafka never checks.
  Once that request waits for a broker state change, the call waits as long, for minutes, and
  the transaction coordinator aborts the transaction at its timeout and fences the producer.
  Two ways into the wait were seen: the cached group coordinator was decommissioned (librdkafka
  2.10+ decommissions a broker missing from a Metadata answer; issue #5511, fix PR #5512
  open), and the FindCoordinator lookup used its three tries on COORDINATOR_NOT_AVAILABLE
  answers while the coordinator's partition had no live leader. Told from the copier
  producer's librdkafka log (debug contexts eos and protocol): no TxnOffsetCommit answered
  within the call's timeout of AddOffsetsToTxn's success.
- **#4953**, a duplicate after an epoch bump: after OUT_OF_ORDER_SEQUENCE_NUMBER on a request
  behind a failed one ("failed due to skipped sequence numbers ... recovering and retrying"),
  librdkafka bumps the producer epoch for every partition and re-sends their unacknowledged
  messages under the new epoch from sequence 0, also a batch the leader had written but whose
  answer was lost: the leader cannot tell it from new data (Kafka answers the same; the fix,
  PR #4972, is unreleased). Told from the producer's log (its drain for an epoch bump after
  skipped sequence numbers) and the log's own batches: the second copy was written under a
  later epoch of the same producer id than the first.
- **Sequence numbers reused after abort_transaction** (no upstream issue number yet): the
  messages still queued when a transaction is aborted are purged and
  ``rd_kafka_toppar_purge_queues`` moves the partition's sequence base back over them, without
  looking at whether a purged message had been sent and possibly written (a retry queued after
  NOT_ENOUGH_REPLICAS, whose first attempt the leader had appended). The next transaction's
  batch reuses their sequence numbers and the leader refuses it with
  OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka's does: fatal for the producer. Told from the
  producer's log (its ADVBASE line for the partition, then its fatal error for it) and the
  leader's (the sequence it expected is above the one sent).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

#: a line of the run's librdkafka.log: "2026-11-28 04:45:03,167 <thread> <FAC> [<client>] ..."
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_CLIENT = re.compile(r" \[([^\]#]+)#[^\]]*\] ")
_ADVANCED = re.compile(r"ADVBASE .*?: (\S+) \[(\d+)\] advancing epoch base msgid .* in aborted transaction")
_OUT_OF_ORDER = re.compile(r"FATAL .*out of order sequence number: ProduceRequest for (\S+) \[(\d+)\].*?base seq (\d+)")
_EXPECTED = re.compile(r"(\S+)-(\d+): rejected produce: producer \d+ sent sequence (\d+), expected (\d+)")


def librdkafka_5476(stacks: str) -> bool:
    """Whether gdb's stacks show librdkafka's lock-order deadlock (issue #5476): its main thread
    in the OffsetForLeaderEpoch response's leader query, waiting for the client's lock while
    holding a partition's, and a broker thread ending its broker (rd_kafka_broker_fail) that
    waits for that partition's lock in ``rd_kafka_toppar_forget_leader`` or, one call before
    it in the same loop, ``rd_kafka_toppar_undelegate`` (seen in a seed-3 run's close())."""
    return "rd_kafka_toppar_handle_OffsetForLeaderEpoch" in stacks and "rd_kafka_broker_fail" in stacks and (
        "rd_kafka_toppar_forget_leader" in stacks or "rd_kafka_toppar_undelegate" in stacks)


def send_offsets_stalls(lines: Iterable[str], client: str, timeout_s: float,
                        now: datetime | None = None) -> list[str]:
    """The send_offsets_to_transaction calls of ``client`` (its librdkafka log name, e.g.
    "faults-txn-copier#producer-12") whose TxnOffsetCommit was not answered within
    ``timeout_s`` (the call's own timeout) of AddOffsetsToTxn's success: issue #5456's stall,
    whether the request was never sent (#5511) or sent on a connection that then broke and
    never sent again. One line each. ``now`` (local time, as the log's): when the run asks,
    for a call still open at the log's end; a stalled client may log nothing more for minutes,
    so its last line says nothing of how long it has waited."""
    found = []
    added_at: datetime | None = None   # AddOffsetsToTxn answered NO_ERROR in the open call
    last: datetime | None = None
    for line in lines:
        if client not in line:
            continue
        stamp = _STAMP.match(line)
        if stamp is None:
            continue
        last = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if "Transactional API called: send_offsets_to_transaction" in line:
            added_at = None
        elif "AddOffsetsToTxn response" in line and "NO_ERROR" in line:
            added_at = last
        elif added_at is not None and ("Received TxnOffsetCommitResponse" in line
                                       or "send_offsets_to_transaction return" in line):
            waited = (last - added_at).total_seconds()
            if waited > timeout_s:
                found.append(f"AddOffsetsToTxn succeeded at {added_at:%H:%M:%S}, TxnOffsetCommit not answered "
                             f"for {waited:.0f} s (the call's timeout: {timeout_s:.0f} s)")
            added_at = None
    end = now if now is not None else last
    if added_at is not None and end is not None and (end - added_at).total_seconds() > timeout_s:
        found.append(f"AddOffsetsToTxn succeeded at {added_at:%H:%M:%S}, TxnOffsetCommit never answered "
                     f"({(end - added_at).total_seconds():.0f} s later)")
    return found


def librdkafka_4953(duplicates: dict[Any, list[tuple[int, int]]], bumped_clients: set[str],
                    client_of: dict[int, str], batch_at: dict[tuple[int, int], tuple[int, int]]) -> list[Any]:
    """The duplicated values that are #4953's: ``duplicates`` maps a value (producer index,
    key, seq) to the (partition, offset)s it was read at; ``bumped_clients`` the client.ids
    whose log shows the epoch bump after skipped sequence numbers (``epoch_bumps``);
    ``client_of`` a producer index's client.id; ``batch_at`` (partition, offset) -> (producer
    id, producer epoch) of the batch holding it. A value is #4953's when its producer bumped
    and every later copy's batch has the first copy's producer id and a higher epoch."""
    found = []
    for value, where in duplicates.items():
        if client_of.get(value[0]) not in bumped_clients:
            continue
        first, *later = [batch_at.get(w) for w in sorted(where)]
        if first is not None and later and all(b is not None and b[0] == first[0] and b[1] > first[1]
                                               for b in later):
            found.append(value)
    return found


def epoch_bumps(lines: Iterable[str]) -> set[str]:
    """The client.ids (e.g. "faults-producer-0") whose librdkafka log shows a drain for an
    epoch bump caused by skipped sequence numbers: #4953's first half."""
    return {m.group(1) for line in lines if "epoch bump" in line and "skipped sequence numbers" in line
            and (m := _CLIENT.search(line)) is not None}


def sequences_reused_after_abort(client_lines: Iterable[str], broker_lines: Iterable[str]) -> dict[str, str]:
    """Clients (by their client.id, e.g. "faults-txn-producer-2") that died of
    OUT_OF_ORDER_SEQUENCE_NUMBER on a partition whose queued messages an abort_transaction had
    purged before, where a leader expected a higher sequence than the one sent (the purged
    messages had been written): librdkafka's sequence reuse after abort. The evidence, one line
    each."""
    purged: set[tuple[str, str, str]] = set()
    fatal: dict[tuple[str, str], tuple[str, str]] = {}   # (topic, partition) -> (client, sequence)
    for line in client_lines:
        client = _CLIENT.search(line)
        if client is None:
            continue
        if (advanced := _ADVANCED.search(line)) is not None:
            purged.add((client.group(1), advanced.group(1), advanced.group(2)))
        elif (refused := _OUT_OF_ORDER.search(line)) is not None \
                and (client.group(1), refused.group(1), refused.group(2)) in purged:
            fatal[refused.group(1), refused.group(2)] = (client.group(1), refused.group(3))
    found: dict[str, str] = {}
    for line in broker_lines:
        expected = _EXPECTED.search(line)
        if expected is None:
            continue
        topic, partition, sent, wanted = expected.groups()
        name, sequence = fatal.get((topic, partition), ("", ""))
        if name and sent == sequence and int(wanted) > int(sent):
            found[name] = (f"{name}: {topic} [{partition}]: after abort_transaction purged its queued "
                             f"messages it sent sequence {sent} again; the leader holds them (expected {wanted})")
    return found
