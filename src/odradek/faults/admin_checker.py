"""The admin workload's judgments (faults/admin_run.py), pure functions of what the run saw.

- Which answers an administration request may get while its controller fails over: a clear
  refusal in Kafka's words (NOT_CONTROLLER, REQUEST_TIMED_OUT, TOPIC_ALREADY_EXISTS while a
  deletion goes on, ...), which an operator's script retries or accepts, or anything else
  (UNKNOWN_SERVER_ERROR, a call that never returns, a client exception), an anomaly.
- Which final states the operations allow (``Expectations``): a partition's replicas, a
  topic's partition count, a config's value. An operation the cluster took decides its
  subject, one it refused leaves it as it was, and one whose answer never came (a timeout, a
  lost connection to the controller it killed) may have done either.
- What ZooKeeper may hold once every operation has settled: nothing left under
  /admin/reassign_partitions, /admin/delete_topics or /admin/preferred_replica_election, no
  topic znode still naming replicas being added or removed (KIP-455), and a state znode for
  every partition a topic znode assigns (``ZkSnapshot``).
- Which records of a scratch topic, read from a replica's segment files or through a
  consumer, come from an earlier incarnation of the topic (deleted and created again under
  the same name): values carry their incarnation (``scratch_value``).
"""
from __future__ import annotations

import collections
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: the raw-request tools' (reassign_client) own failures: no controller answered after their
#: own retries; a broker named by the plan or by a broker config is not registered right now
CONTROLLER_UNREACHABLE, BROKER_NOT_REGISTERED = "CONTROLLER_UNREACHABLE", "BROKER_NOT_REGISTERED"
#: refusals that say the request can succeed later: the controller moved or is being elected,
#: the operation is still under way (a deletion's TOPIC_ALREADY_EXISTS to the re-creation), or a
#: broker it names is restarting. An operator's script retries these.
RETRIABLE = frozenset({
    "NOT_CONTROLLER", "REQUEST_TIMED_OUT", "LEADER_NOT_AVAILABLE", "NOT_LEADER_OR_FOLLOWER",
    "BROKER_NOT_AVAILABLE", "PREFERRED_LEADER_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    "TOPIC_ALREADY_EXISTS", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REPLICA_ASSIGNMENT",
    "REASSIGNMENT_IN_PROGRESS", "NOT_ENOUGH_REPLICAS",
    # a new topic's replication factor over the live brokers (Kafka's AdminUtils): one is restarting
    "INVALID_REPLICATION_FACTOR",
    # librdkafka's own: no answer in time, the connection to the (killed) broker lost, or its
    # handle destroyed with the request in flight once a Metadata answer no longer named it
    # (librdkafka 2.16 decommissions such brokers; a 100-fault run met it after a controller kill)
    "_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN", "_DESTROY_BROKER",
    CONTROLLER_UNREACHABLE, BROKER_NOT_REGISTERED,
})
#: refusals retrying cannot change: the request itself asks what cannot be done now
FINAL = frozenset({"NO_REASSIGNMENT_IN_PROGRESS", "INVALID_PARTITIONS", "TOPIC_DELETION_DISABLED"})
#: the refusals that prove the request was not carried out; after any other failure (no
#: answer, a lost connection, an unexpected error) it may have been
NOT_TAKEN = frozenset({
    "NOT_CONTROLLER", "INVALID_REPLICA_ASSIGNMENT", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_PARTITIONS",
    "TOPIC_ALREADY_EXISTS", "NO_REASSIGNMENT_IN_PROGRESS", "PREFERRED_LEADER_NOT_AVAILABLE",
    "ELIGIBLE_LEADERS_NOT_AVAILABLE", "REASSIGNMENT_IN_PROGRESS", "TOPIC_DELETION_DISABLED",
    "INVALID_REPLICATION_FACTOR", BROKER_NOT_REGISTERED,
})
#: a call that did not return within its bound, and an exception no Kafka error explains
HUNG, CLIENT_EXCEPTION = "HUNG", "CLIENT_EXCEPTION"

#: an operation's outcome: carried out; refused with a clear error (after the script's
#: retries); failed by an unexpected error; started but not finished when its fault ended
COMPLETED, REFUSED, FAILED, PENDING = "completed", "refused", "failed", "pending"
#: a pending operation once the faults are over: the cluster has what it asked (or what a
#: later operation asked since), or not
COMPLETED_LATE, NOT_SETTLED = "completed_late", "not_settled"

_NAMED = re.compile(r"\b(_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|_[A-Z]+):")


def refusal_kind(name: str) -> str:
    """"retriable", "final" (both clear refusals) or "unexpected" (an anomaly)."""
    if name in RETRIABLE:
        return "retriable"
    if name in FINAL:
        return "final"
    return "unexpected"


def error_name_in(text: str) -> str:
    """The Kafka error name a tool's one-line error starts with or carries ("leader election
    failed: NOT_CONTROLLER: ..." -> NOT_CONTROLLER); for the raw-request tools' own words, what
    they mean: no controller answered, or a broker is not registered; else CLIENT_EXCEPTION."""
    named = _NAMED.search(text)
    if named is not None:
        return named.group(1)
    if "controller" in text or "cannot reach" in text or "did not answer" in text:
        return CONTROLLER_UNREACHABLE
    if "not registered" in text or "not a live broker" in text:
        return BROKER_NOT_REGISTERED
    return CLIENT_EXCEPTION


@dataclass
class Operation:
    """One administration operation as the operator's script saw it."""

    kind: str
    what: str = ""
    outcome: str = PENDING
    attempts: int = 0
    #: each clear refusal, "NAME: message"
    refusals: list[str] = field(default_factory=list)
    #: each unexpected answer, hang or exception: the anomalies
    unexpected: list[str] = field(default_factory=list)
    #: the controller killed in its middle, if any
    controller_killed: int | None = None
    #: what it changes (Expectations' subjects)
    subjects: list[tuple[Any, ...]] = field(default_factory=list)

    def describe(self) -> str:
        return f"{self.kind} {self.what}".strip()


def operations_by_kind(ops: Iterable[Operation]) -> dict[str, dict[str, int]]:
    """kind -> outcome -> how many, kinds and outcomes in the order first seen."""
    out: dict[str, collections.Counter[str]] = {}
    for op in ops:
        out.setdefault(op.kind, collections.Counter())[op.outcome] += 1
    return {kind: dict(counts) for kind, counts in out.items()}


def refusals_by_name(ops: Iterable[Operation]) -> dict[str, int]:
    return dict(collections.Counter(r.split(":", 1)[0] for op in ops for r in op.refusals))


def unexpected_answers(ops: Iterable[Operation]) -> list[str]:
    """Every unexpected answer or exception but the hangs, naming its operation."""
    return [f"{op.describe()}: {u}" for op in ops for u in op.unexpected if not u.startswith(HUNG)]


def hung_calls(ops: Iterable[Operation]) -> list[str]:
    return [f"{op.describe()}: {u}" for op in ops for u in op.unexpected if u.startswith(HUNG)]


#: ("replicas", topic, partition), ("count", topic) or ("config", topic, key)
Subject = tuple[Any, ...]


def taken(outcomes: Iterable[str | None]) -> bool | None:
    """Whether the cluster carried out a request retried with these outcomes (None: it
    succeeded once, else the error name of each attempt): True once one succeeded, False if
    every attempt was refused in a way that proves it was not carried out, else unknown."""
    names = list(outcomes)
    if any(n is None for n in names):
        return True
    return False if all(n in NOT_TAKEN for n in names) else None


class Expectations:
    """The final values the operations so far allow, per subject: ("replicas", topic,
    partition) -> replica tuple, ("count", topic) -> partition count (None: no such topic),
    ("config", topic, key) -> the topic's own value (None: not set). Operations are asked in
    the order they ran, each taken (True), refused (False) or unknown (None). A replica set
    asked as a frozenset allows its members in any order."""

    def __init__(self) -> None:
        self._allowed: dict[Subject, set[Hashable]] = {}
        self._asked: collections.Counter[Subject] = collections.Counter()

    def start(self, subject: Subject, value: Hashable) -> None:
        self._allowed[subject] = {value}

    def ask(self, subject: Subject, value: Hashable, was_taken: bool | None) -> None:
        """A config nobody set before is unset; every other subject is started first."""
        allowed = self._allowed.setdefault(subject, {None} if subject[0] == "config" else set())
        self._asked[subject] += 1
        if was_taken is True:
            self._allowed[subject] = {value}
        elif was_taken is None:
            allowed.add(value)

    def allows(self, subject: Subject, value: Hashable) -> bool:
        return _allows(self._allowed.get(subject, set()), value)

    def allowed(self, subject: Subject) -> frozenset[Hashable]:
        return frozenset(self._allowed.get(subject, ()))

    def subjects(self, kind: str | None = None) -> list[Subject]:
        return [s for s in self._allowed if kind is None or s[0] == kind]

    def mismatches(self, actual: Mapping[Subject, Hashable]) -> list[str]:
        """One line per subject of ``actual`` whose value no operation allows."""
        out = []
        for subject, value in actual.items():
            allowed = self._allowed.get(subject)
            if allowed is not None and not _allows(allowed, value):
                shown = " or ".join(sorted(map(_shown, allowed)))
                out.append(f"{_subject(subject)}: {_shown(value)}, the operations allow {shown} "
                           f"({self._asked[subject]} asked)")
        return out


def resolve_pending(ops: Iterable[Operation], expect: Expectations, actual: Mapping[Subject, Hashable]) -> None:
    """Each operation still pending when its fault ended: COMPLETED_LATE if the cluster now has
    a value the operations allow for everything it changes, else NOT_SETTLED."""
    for op in ops:
        if op.outcome == PENDING:
            done = all(s in actual and expect.allows(s, actual[s]) for s in op.subjects)
            op.outcome = COMPLETED_LATE if done else NOT_SETTLED


def _allows(allowed: set[Hashable], value: Hashable) -> bool:
    """A replica list is allowed as itself, or as a set where only its members are asked (a
    cancelled reassignment restores the original replicas, not their order, as in Kafka)."""
    return value in allowed or (isinstance(value, tuple) and frozenset(value) in allowed)


def _shown(value: Hashable) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return "[" + ",".join(map(str, value)) + "]"
    if isinstance(value, frozenset):
        return "{" + ",".join(map(str, sorted(value))) + "} in any order"
    return str(value)


def _subject(subject: Subject) -> str:
    kind, topic, *rest = subject
    if kind == "replicas":
        return f"{topic}-{rest[0]} replicas"
    if kind == "count":
        return f"{topic} partition count"
    return f"{topic} config {rest[0]}"


# -- ZooKeeper once everything settled ---------------------------------------------------------


@dataclass(frozen=True)
class TopicZk:
    """A topic as ZooKeeper holds it: /brokers/topics/T's assignment (and KIP-455's replicas
    being added and removed), the children of its partitions znode, and those with a state
    znode."""

    assignment: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)
    partition_znodes: frozenset[int] = frozenset()
    states: frozenset[int] = frozenset()


@dataclass(frozen=True)
class ZkSnapshot:
    #: /admin/reassign_partitions' data (None: no such znode)
    reassign_partitions: bytes | None
    #: children of /admin/delete_topics
    delete_topics: tuple[str, ...]
    #: /admin/preferred_replica_election's data (None: no such znode)
    preferred_replica_election: bytes | None
    topics: dict[str, TopicZk]


def zookeeper_leftovers(snap: ZkSnapshot) -> list[str]:
    """What a finished operation must not leave: its request znode (Kafka's controller deletes
    /admin/reassign_partitions once its last partition is done, a topic's
    /admin/delete_topics/T with the topic, /admin/preferred_replica_election once elected), and
    a topic znode still naming replicas being added or removed."""
    out = []
    if snap.reassign_partitions is not None:
        out.append(f"/admin/reassign_partitions still holds {snap.reassign_partitions[:200]!r}")
    out += [f"/admin/delete_topics/{t} still marked" + (" (the topic still exists)" if t in snap.topics else
                                                        " (the topic is gone)")
            for t in snap.delete_topics]
    if snap.preferred_replica_election is not None:
        out.append(f"/admin/preferred_replica_election still holds {snap.preferred_replica_election[:200]!r}")
    for name, topic in sorted(snap.topics.items()):
        for what, moving in (("adding", topic.adding), ("removing", topic.removing)):
            out += [f"/brokers/topics/{name} partition {p}: still {what} replicas {list(r)}"
                    for p, r in sorted(moving.items())]
    return out


def partitions_without_state(snap: ZkSnapshot) -> list[str]:
    """Every partition the topic znode assigns has its partitions/P/state znode (the
    controller's NewPartition -> OnlinePartition writes it), and no partition znode is left of a
    partition the topic no longer has."""
    out = []
    for name, topic in sorted(snap.topics.items()):
        out += [f"{name}-{p}: assigned {list(topic.assignment[p])}, no state znode"
                for p in sorted(set(topic.assignment) - topic.states)]
        out += [f"{name}-{p}: a partition znode, but the topic znode assigns partitions "
                f"0-{len(topic.assignment) - 1}" for p in sorted(topic.partition_znodes - set(topic.assignment))]
    return out


# -- scratch topics: deleted and created again under the same name ----------------------------


def scratch_value(topic: str, incarnation: int, seq: int) -> bytes:
    return f"{topic}:{incarnation}:{seq}".encode()


def parse_scratch_value(raw: bytes | None) -> tuple[str, int, int] | None:
    """(topic, incarnation, seq) of a scratch value, None for anything else."""
    try:
        topic, incarnation, seq = (raw or b"").decode().rsplit(":", 2)
        return topic, int(incarnation), int(seq)
    except ValueError:
        return None


def earlier_incarnations(where: str, values: Iterable[bytes | None], topic: str, current: int) -> list[str]:
    """One line per incarnation other than ``current`` that ``values`` (a replica's records, or
    what a consumer read) hold records of, or per foreign value: the old data a re-created
    topic must never show."""
    found: collections.Counter[str] = collections.Counter()
    for raw in values:
        parsed = parse_scratch_value(raw)
        if parsed is None or parsed[0] != topic:
            found[f"a value not of {topic}: {raw!r}"[:120]] += 1
        elif parsed[1] != current:
            found[f"incarnation {parsed[1]}"] += 1
    return [f"{where}: {n} records of {what} (the topic is incarnation {current})" for what, n in sorted(found.items())]


def lost_values(where: str, acknowledged: Iterable[bytes], read: Iterable[bytes | None]) -> list[str]:
    """Acknowledged values of the current incarnation missing from what was read."""
    present = set(read)
    return [f"{where}: {v.decode(errors='replace')} acknowledged, not read" for v in sorted(acknowledged)
            if v not in present]


def throttles_left(topic_configs: Mapping[str, Mapping[str, str]],
                   broker_configs: Mapping[int, Mapping[str, str]]) -> list[str]:
    """The replication throttles kafka-reassign-partitions.sh --verify removes once every
    reassignment is done: the topics' *.replication.throttled.replicas and the brokers'
    *.replication.throttled.rate (each map: the resource's own configs)."""
    out = [f"topic {t}: {k}={v}" for t, configs in sorted(topic_configs.items()) for k, v in sorted(configs.items())
           if k.endswith(".replication.throttled.replicas") and v]
    out += [f"broker {b}: {k}={v}" for b, configs in sorted(broker_configs.items())
            for k, v in sorted(configs.items()) if k.endswith(".replication.throttled.rate")]
    return out
