"""Judging the groups fault workload: what each consumer group's members wrote down
(faults/group_member.py), against the topic as read after the run.

The guarantees, per group:
- at least once: every acknowledged value was handed to some member of the group;
- a commit never passes a record that was not delivered: when a member sends a commit of
  offset o, every record of that partition below o was already handed to a member (otherwise a
  member that starts from that commit skips it, and nothing ever notices);
- the committed offset never moves backwards: once a commit of o was answered, no commit sent
  later shows less, and no member assigned the partition later begins below o (a coordinator
  that lost a commit it acknowledged, or fenced nobody, lets a member rewind the group);
- a record handed over is the record at that offset.
"""
from __future__ import annotations

import bisect
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: an offset that was never delivered sorts after every time
NEVER = 1 << 62


@dataclass
class Commit:
    sent_ns: int
    done_ns: int
    offsets: dict[int, int]
    source: str   # "member-0", "member-0 starting" or "observed" (the run's OffsetFetch of the group)


@dataclass
class GroupHistory:
    """What the members of one group wrote down, merged."""

    deliveries: list[tuple[int, int, int, str]] = field(default_factory=list)  # (ns, partition, offset, value)
    commits: list[Commit] = field(default_factory=list)
    commit_failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    retriable_errors: list[str] = field(default_factory=list)   # raised by a client, polled again: not anomalies
    protocol_errors: list[str] = field(default_factory=list)
    #: member -> [(ns, "A"|"V"|"L", partitions)]
    rebalance_events: dict[str, list[tuple[int, str, list[int]]]] = field(default_factory=dict)
    #: where a member began a partition it was assigned: (assigned ns, member, partition, first offset handed over)
    starts: list[tuple[int, str, int, int]] = field(default_factory=list)


def read_history(files: dict[str, Path]) -> GroupHistory:
    """member name -> its events file (group_member.py's format)."""
    history = GroupHistory()
    for member, path in files.items():
        events = history.rebalance_events.setdefault(member, [])
        if not path.exists():
            continue
        beginning: dict[int, int] = {}   # partition -> when it was assigned, until its first delivery
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "C":
                parts = rest.split(" ")
                if len(parts) != 3:
                    continue  # a line cut short by kill -9
                offsets = {int(p): int(o) for p, _, o in (po.partition(":") for po in parts[2].split(","))}
                history.commits.append(Commit(int(parts[0]), int(parts[1]), offsets, member))
                continue
            ns_text, _, text = rest.partition(" ")
            if not ns_text.isdigit():
                continue
            ns = int(ns_text)
            if kind == "D":
                fields = text.split(" ")
                if len(fields) == 3:
                    partition, offset = int(fields[0]), int(fields[1])
                    history.deliveries.append((ns, partition, offset, fields[2]))
                    if partition in beginning:
                        history.starts.append((beginning.pop(partition), member, partition, offset))
            elif kind in ("A", "V", "L"):
                partitions = [int(p) for p in text.split(",") if p]
                events.append((ns, kind, partitions))
                for p in partitions:
                    if kind == "A":
                        beginning[p] = ns
                    else:
                        beginning.pop(p, None)
            elif kind == "F":
                history.commit_failures.append(f"{member}: {text}")
            elif kind == "E":
                history.errors.append(f"{member}: {text}")
            elif kind == "R":
                history.retriable_errors.append(f"{member}: {text}")
            elif kind == "P":
                history.protocol_errors.append(f"{member}: {text}")
    history.deliveries.sort()
    return history


def judge_group(group: str, history: GroupHistory, log: dict[int, list[tuple[int, bytes]]],
                acked: Iterable[bytes]) -> dict[str, list[str]]:
    """The anomalies of one group. ``log``: partition -> [(offset, value)] read after the run;
    ``acked``: the acknowledged values (encoded)."""
    first_delivery: dict[tuple[int, int], int] = {}
    wrong = []
    at = {(p, o): v.decode(errors="replace") for p, entries in log.items() for o, v in entries}
    for ns, partition, offset, value in history.deliveries:
        first_delivery.setdefault((partition, offset), ns)
        if at.get((partition, offset), value) != value:
            wrong.append(f"{group}: {partition}:{offset} delivered {value}, the log has {at[(partition, offset)]}")
    delivered_values = {value for _, _, _, value in history.deliveries}
    not_delivered = [f"{group}: {v.decode()} never delivered" for v in acked if v.decode() not in delivered_values]
    # a member that begins a partition reads from the committed offset: as a commit sent then
    starts = [Commit(ns, ns, {partition: offset}, f"{member} starting") for ns, member, partition, offset
              in history.starts]
    return {
        "not_delivered": not_delivered,
        "delivered_wrong_value": wrong,
        "commit_passed_undelivered": _commits_past_undelivered(group, history.commits, log, first_delivery),
        "committed_backwards": _backwards(group, history.commits + starts),
    }


def stale_readings(group: str, history: GroupHistory, observed: list[Commit]) -> list[str]:
    """Readings of the committed offsets (the run's OffsetFetch) lower than a commit answered
    before they were asked: a deposed coordinator answering from what it held when it lost its
    partition of __consumer_offsets, until the LeaderAndIsr that makes it a follower reaches it.
    Kafka's coordinator does the same, and no member acts on such a reading unless it is also
    a starting position (judged above), so they are counted, not anomalies."""
    return [line for line in _backwards(group, history.commits + observed) if line.endswith("(observed)")]


def _commits_past_undelivered(group: str, commits: list[Commit], log: dict[int, list[tuple[int, bytes]]],
                              first_delivery: dict[tuple[int, int], int]) -> list[str]:
    """Commits sent before every record below them was handed over."""
    # partition -> the log's offsets in order, and the latest first delivery up to each
    offsets: dict[int, list[int]] = {}
    latest: dict[int, list[int]] = {}
    for partition, entries in log.items():
        running = 0
        offsets[partition], latest[partition] = [], []
        for offset, _ in entries:
            running = max(running, first_delivery.get((partition, offset), NEVER))
            offsets[partition].append(offset)
            latest[partition].append(running)
    out = []
    for commit in commits:
        for partition, committed in commit.offsets.items():
            below = bisect.bisect_left(offsets.get(partition, []), committed)
            if below and latest[partition][below - 1] > commit.sent_ns:
                missing = next(o for o in offsets[partition][:below]
                               if first_delivery.get((partition, o), NEVER) > commit.sent_ns)
                when = "never delivered" if (partition, missing) not in first_delivery else "delivered later"
                out.append(f"{group}: {commit.source} committed {partition}:{committed}, but {partition}:{missing} "
                           f"was {when}")
    return out


def _backwards(group: str, commits: list[Commit]) -> list[str]:
    """A commit or observation, begun after another was answered, that shows a lower offset."""
    out = []
    partitions = {p for c in commits for p in c.offsets}
    for partition in sorted(partitions):
        known = sorted((c.done_ns, c.offsets[partition], c.source) for c in commits
                       if c.offsets.get(partition, -1) >= 0)
        dones = [done for done, _, _ in known]
        best: list[tuple[int, str]] = []   # the highest offset answered by each prefix of `known`
        for _, offset, source in known:
            best.append(max(best[-1], (offset, source)) if best else (offset, source))
        for c in commits:
            offset = c.offsets.get(partition, -1)
            if offset < 0:
                continue
            before = bisect.bisect_left(dones, c.sent_ns)
            if before and best[before - 1][0] > offset:
                higher, source = best[before - 1]
                out.append(f"{group}: partition {partition} at {higher} ({source}), then {offset} ({c.source})")
    return out


def rebalance_stats(history: GroupHistory) -> dict[str, float | int]:
    """How often the members were handed partitions, and how long each member went from a
    revocation (or loss) to its next assignment: the time its partitions stood still."""
    assignments = 0
    gaps: list[float] = []
    for events in history.rebalance_events.values():
        since = None
        for ns, kind, partitions in sorted(events):
            if kind == "A":
                assignments += 1
                if since is not None:
                    gaps.append((ns - since) / 1e9)
                    since = None
            elif since is None and partitions:   # kafka-python and aiokafka revoke nothing before a first join
                since = ns
    return {"assignments": assignments, "revocations": len(gaps),
            "revoked_to_assigned_p50_s": round(statistics.median(gaps), 2) if gaps else 0.0,
            "revoked_to_assigned_max_s": round(max(gaps), 2) if gaps else 0.0}
