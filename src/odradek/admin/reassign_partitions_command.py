"""The pure half of Kafka's ReassignPartitionsCommand (kafka-reassign-partitions.sh) behind
`odradek reassign`: the reassignment JSON format, validating a plan, proposing one (--generate),
the replication throttles a plan needs, and the state of each partition (--verify). No I/O here:
reassign_client.py asks the cluster and hands the answers to these functions.

The JSON is Kafka's: {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]},
optionally with "log_dirs" (only "any" is accepted: odradek has one log dir per broker, so
AlterReplicaLogDirs has nothing to move).
"""
from __future__ import annotations

import json
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeGuard

#: (topic, partition)
TP = tuple[str, int]
#: partition -> replicas, the first one its preferred leader
Assignment = dict[TP, list[int]]

LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
TOPIC_THROTTLES = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)
BROKER_THROTTLES = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE)


class PlanError(ValueError):
    """A plan (or a --generate request) that cannot be carried out; one line for the operator."""


# -- the JSON format -----------------------------------------------------------------------------


def parse_plan(text: str) -> Assignment:
    """Kafka's reassignment JSON -> Assignment; PlanError naming the first problem.

    Checks what the file alone can tell: its shape, an empty or duplicated replica list, a
    partition named twice. What needs the cluster (brokers, topics, replication factors) is
    validate_plan's."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PlanError(f"the plan is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise PlanError('the plan must be a JSON object with a "partitions" list '
                        '({"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]})')
    if doc.get("version", 1) != 1:
        raise PlanError(f"unsupported plan version {doc.get('version')!r} (only 1)")
    plan: Assignment = {}
    for i, entry in enumerate(doc["partitions"]):
        if not isinstance(entry, dict):
            raise PlanError(f"partitions[{i}] is not a JSON object")
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise PlanError(f"partitions[{i}] has no topic name")
        if not _is_int(partition) or partition < 0:
            raise PlanError(f"partitions[{i}] ({topic}) has no valid partition number: {partition!r}")
        name = f"{topic}-{partition}"
        if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
            raise PlanError(f"{name}: replicas must be a list of broker ids, got {replicas!r}")
        if not replicas:
            raise PlanError(f"{name}: empty replica list")
        dupes = sorted(r for r, n in Counter(replicas).items() if n > 1)
        if dupes:
            raise PlanError(f"{name}: broker {dupes[0]} appears twice in replicas {replicas}")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (not isinstance(log_dirs, list) or len(log_dirs) != len(replicas)
                                     or any(d != "any" for d in log_dirs)):
            raise PlanError(f'{name}: log_dirs must be "any" for every replica (odradek brokers have '
                            f"one log dir), got {log_dirs!r}")
        if (topic, partition) in plan:
            raise PlanError(f"{name} appears twice in the plan")
        plan[(topic, partition)] = list(replicas)
    if not plan:
        raise PlanError("the plan names no partitions")
    return plan


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def format_plan(assignment: Assignment) -> str:
    """Kafka's reassignment JSON, one line, partitions in (topic, partition) order."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": assignment[(t, p)]} for t, p in sorted(assignment)]},
        separators=(",", ":"))


def tp_name(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


# -- validation against the cluster ----------------------------------------------------------------


def validate_plan(plan: Assignment, current: Assignment, registered: Iterable[int],
                  allow_replication_factor_change: bool = False) -> None:
    """PlanError for the first thing the cluster cannot do: a topic or partition that does not
    exist, a broker that is not registered, or (unless allowed, as Kafka allows it) a change of
    a partition's replication factor. ``current``: every partition of the plan's topics."""
    registered = set(registered)
    topics = {t for t, _ in current}
    for tp in sorted(plan):
        replicas = plan[tp]
        if tp[0] not in topics:
            raise PlanError(f"topic {tp[0]!r} does not exist")
        if tp not in current:
            count = sum(1 for t, _ in current if t == tp[0])
            raise PlanError(f"partition {tp_name(tp)} does not exist (topic {tp[0]} has {count} partitions)")
        unknown = [r for r in replicas if r not in registered]
        if unknown:
            raise PlanError(f"{tp_name(tp)}: broker {unknown[0]} is not registered "
                            f"(registered brokers: {','.join(map(str, sorted(registered)))})")
        if len(replicas) != len(current[tp]) and not allow_replication_factor_change:
            raise PlanError(f"{tp_name(tp)}: the plan changes the replication factor from {len(current[tp])} "
                            f"to {len(replicas)} (add --allow-replication-factor-change to do that)")


# -- --generate: a balanced, rack-aware proposal ----------------------------------------------------


def propose(current: Assignment, brokers: Iterable[int], racks: dict[int, str | None] | None = None) -> Assignment:
    """A new assignment of ``current``'s partitions over ``brokers``, keeping each replication factor.

    Replicas and preferred leaders (first replicas) are spread evenly: each broker ends with
    the same number, give or take one, of either. With racks (every broker has one), no
    partition has two replicas on one rack while it has fewer replicas than there are racks,
    and otherwise its replicas spread over the racks as evenly as they can (Kafka's rack-aware
    assignment); where racks of unequal sizes make the even spread impossible the rack rule
    wins, as in Kafka. Among equally balanced proposals it keeps replicas, and leaders, where
    they are: those stay put and are not copied.

    Unlike Kafka's --generate, which deals partitions out afresh from a random broker, this
    starts from the current assignment: keep what fits, place the rest on the least loaded
    brokers, then even out with chains of single-replica moves (augmenting paths), so the
    proposal moves few replicas and is the same each run.
    """
    brokers = sorted(set(brokers))
    if not brokers:
        raise PlanError("no brokers to assign replicas to")
    rack_of = _racks(brokers, racks or {})
    for tp, replicas in sorted(current.items()):
        if len(replicas) > len(brokers):
            raise PlanError(f"{tp_name(tp)} has {len(replicas)} replicas but only {len(brokers)} brokers were given")
    sets = _place_replicas(current, brokers, rack_of)
    leaders = _choose_leaders(current, sets, brokers)
    return {tp: _order(current[tp], sets[tp], leaders[tp], rack_of) for tp in current}


def _racks(brokers: list[int], racks: dict[int, str | None]) -> dict[int, str]:
    """Each broker's rack; without racks every broker is its own (the rule is then distinctness)."""
    with_rack = [b for b in brokers if racks.get(b)]
    if with_rack and len(with_rack) != len(brokers):
        missing = [b for b in brokers if not racks.get(b)]
        raise PlanError(f"brokers {','.join(map(str, missing))} have no broker.rack while others have one "
                        f"(give every broker a rack, or --disable-rack-aware)")
    return {b: (racks[b] or "") if with_rack else f"broker-{b}" for b in brokers}


def _rack_ok(replicas: Iterable[int], rack_of: dict[int, str], rf: int) -> bool:
    """The replicas spread over the racks as evenly as rf allows (at most one per rack while rf
    does not exceed the number of racks)."""
    all_racks = set(rack_of.values())
    counts = Counter(rack_of[b] for b in replicas)
    cap = -(-rf // len(all_racks))
    return all(n <= cap for n in counts.values()) and (
        sum(1 for n in counts.values() if n == cap) <= (rf % len(all_racks) or len(all_racks)))


def _place_replicas(current: Assignment, brokers: list[int], rack_of: dict[int, str]) -> dict[TP, list[int]]:
    total = sum(len(r) for r in current.values())
    high = -(-total // len(brokers))
    load = {b: 0 for b in brokers}
    sets: dict[TP, list[int]] = {tp: [] for tp in current}
    for tp in sorted(current):  # keep what fits, up to the even share of each broker
        rf = len(current[tp])
        for b in current[tp]:
            if b in load and load[b] < high and _rack_ok(sets[tp] + [b], rack_of, rf):
                sets[tp].append(b)
                load[b] += 1
    for tp in sorted(current, key=lambda tp: (-len(current[tp]), tp)):  # the rest: least loaded first
        rf = len(current[tp])
        while len(sets[tp]) < rf:
            fits = [b for b in brokers if b not in sets[tp] and _rack_ok(sets[tp] + [b], rack_of, rf)]
            if not fits:
                raise PlanError(f"{tp_name(tp)}: no broker left for a replica on its own rack")
            best = min(fits, key=lambda b: (load[b], b))
            sets[tp].append(best)
            load[best] += 1

    def moves(src: int) -> Iterable[tuple[int, TP]]:
        for tp, replicas in sets.items():
            if src in replicas:
                rest = [r for r in replicas if r != src]
                for dst in brokers:
                    if dst not in replicas and _rack_ok(rest + [dst], rack_of, len(replicas)):
                        yield dst, tp

    def move(tp: TP, src: int, dst: int) -> None:
        sets[tp][sets[tp].index(src)] = dst

    _even_out(load, moves, move)
    return sets


def _choose_leaders(current: Assignment, sets: dict[TP, list[int]], brokers: list[int]) -> dict[TP, int]:
    high = -(-len(current) // len(brokers))
    led = {b: 0 for b in brokers}
    leaders: dict[TP, int] = {}
    for tp in sorted(current):  # the current leader where it stays a replica and has room
        first = current[tp][0]
        if first in sets[tp] and led[first] < high:
            leaders[tp] = first
            led[first] += 1
    for tp in sorted(current):
        if tp not in leaders:
            leaders[tp] = min(sets[tp], key=lambda b: (led[b], b))
            led[leaders[tp]] += 1

    def moves(src: int) -> Iterable[tuple[int, TP]]:
        for tp, leader in leaders.items():
            if leader == src:
                for dst in sets[tp]:
                    if dst != src:
                        yield dst, tp

    def move(tp: TP, _src: int, dst: int) -> None:
        leaders[tp] = dst

    _even_out(led, moves, move)
    return leaders


def _even_out(load: dict[int, int], moves: Callable[[int], Iterable[tuple[int, TP]]],
              move: Callable[[TP, int, int], None]) -> None:
    """Until no broker carries two more than another: find the shortest chain of moves
    (partition p from broker a to b, q from b to c, ...) from the most loaded broker to one
    carrying at least two less, each partition at most once in a chain, and apply it. A chain
    exists whenever the even spread is reachable by moves (augmenting paths of a flow); when
    none does (racks of unequal sizes), the spread stays as even as it got."""
    while True:
        low = min(load.values())
        for top in sorted((b for b in load if load[b] >= low + 2), key=lambda b: (-load[b], b)):
            chain = _shortest_chain(top, load, moves)
            if chain is not None:
                break
        else:
            return
        for src, dst, tp in chain:
            move(tp, src, dst)
        load[top] -= 1
        load[chain[-1][1]] += 1


def _shortest_chain(start: int, load: dict[int, int],
                    moves: Callable[[int], Iterable[tuple[int, TP]]]) -> list[tuple[int, int, TP]] | None:
    came: dict[int, tuple[int, TP] | None] = {start: None}
    used: dict[int, frozenset[TP]] = {start: frozenset()}
    queue = deque([start])
    while queue:
        src = queue.popleft()
        for dst, tp in moves(src):
            if dst in came or tp in used[src]:
                continue
            came[dst] = (src, tp)
            used[dst] = used[src] | {tp}
            if load[dst] <= load[start] - 2:
                chain = []
                node = dst
                while (step := came[node]) is not None:
                    chain.append((step[0], node, step[1]))
                    node = step[0]
                return chain[::-1]
            queue.append(dst)
    return None


def _order(old: list[int], replicas: list[int], leader: int, rack_of: dict[int, str]) -> list[int]:
    """The leader first, then the others alternating racks (Kafka's rack-aware order, so the
    next preferred replica after a rack failure is on another rack); replicas kept from the
    current list keep their relative order."""
    rest = sorted((b for b in replicas if b != leader), key=lambda b: (old.index(b) if b in old else len(old), b))
    out = [leader]
    while rest:
        seen = Counter(rack_of[b] for b in out)
        pick = min(rest, key=lambda b: (seen[rack_of[b]], rest.index(b)))
        out.append(pick)
        rest.remove(pick)
    return out


# -- throttles -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Throttles:
    """The configs `--execute --throttle` sets (Kafka's ReassignPartitionsCommand): per topic,
    leader.replication.throttled.replicas names every current replica (any of them may lead,
    and so serve the copies) and follower.replication.throttled.replicas every replica being
    added; the rates go on every broker that sends or receives."""
    topic_configs: dict[str, dict[str, str]]
    brokers: frozenset[int]


def throttles(plan: Assignment, current: Assignment) -> Throttles:
    leader: dict[str, list[str]] = {}
    follower: dict[str, list[str]] = {}
    brokers: set[int] = set()
    for (topic, partition), target in sorted(plan.items()):
        now = current[(topic, partition)]
        moving = [b for b in target if b not in now]
        if not moving:
            continue
        leader.setdefault(topic, []).extend(f"{partition}:{b}" for b in now)
        follower.setdefault(topic, []).extend(f"{partition}:{b}" for b in moving)
        brokers.update(now, moving)
    configs = {t: {LEADER_THROTTLED_REPLICAS: ",".join(leader[t]), FOLLOWER_THROTTLED_REPLICAS: ",".join(follower[t])}
               for t in leader}
    return Throttles(configs, frozenset(brokers))


# -- --verify ------------------------------------------------------------------------------------

IN_PROGRESS, DONE, FAILED = "in progress", "done", "failed"


@dataclass(frozen=True)
class Ongoing:
    """A partition's reassignment as ListPartitionReassignments reports it."""
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def partition_states(plan: Assignment, current: Assignment, ongoing: dict[TP, Ongoing],
                     sizes: dict[tuple[TP, int], int], leaders: dict[TP, int]) -> list[dict[str, Any]]:
    """One row per partition of the plan: its state, current and target replicas, and the bytes
    to copy (the leader's log size) and copied so far (the smallest log among the replicas being
    added, never more than the leader's: the sizes are read one broker after another, and a
    replica read after records arrived may hold more than the leader did when it was read;
    everything once done). ``sizes``: (partition, broker) -> log size from DescribeLogDirs.
    Sizes, not DescribeLogDirs' offset_lag: Kafka reports that as the high watermark minus the
    log end offset, 0 for every follower however far behind (describe_log_dirs.py)."""
    rows = []
    for tp in sorted(plan):
        now = current.get(tp, [])
        leader = leaders.get(tp, -1)
        to_copy = sizes.get((tp, leader))
        if tp in ongoing:
            state = IN_PROGRESS
            adding = ongoing[tp].adding or tuple(b for b in plan[tp] if b not in now)
            got = [sizes.get((tp, b), 0) for b in adding]
            copied = min(got) if got else to_copy
            if copied is not None and to_copy is not None:
                copied = min(copied, to_copy)
        else:
            state = DONE if now == plan[tp] else FAILED
            copied = to_copy if state == DONE else None
        rows.append({"topic": tp[0], "partition": tp[1], "state": state, "current": now,
                     "target": plan[tp], "bytes_to_copy": to_copy, "bytes_copied": copied})
    return rows


def format_states(rows: list[dict[str, Any]]) -> str:
    header = ("Topic", "Partition", "State", "Current", "Target", "ToCopy", "Copied")
    table = [header] + [
        (r["topic"], str(r["partition"]), r["state"], ",".join(map(str, r["current"])),
         ",".join(map(str, r["target"])), _bytes(r["bytes_to_copy"]), _bytes(r["bytes_copied"]))
        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)


def _bytes(n: int | None) -> str:
    return "-" if n is None else str(n)
