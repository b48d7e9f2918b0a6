"""What the admin workload's operator does (faults/admin_run.py): the administration of a
running cluster, as scripts over the Kafka admin APIs do it, each operation a fault of the
nemesis with the controller killed in its middle half the time.

- **reassign-partitions**: kafka-reassign-partitions.sh --execute --throttle on 1-3
  partitions of the main topic (AlterPartitionReassignments, KIP-455, through odradek's own
  reassign_client, as `odradek reassign` sends it: confluent-kafka has no such call): a new
  order, a replica fewer, a replica more, or one replica moved, partitions with a replica
  fewer chosen first (on three brokers only theirs copy data); a quarter of them cancelled
  (--cancel) a moment later. The script waits until no partition of it is in progress, then
  removes the throttles (--verify's removal).
- **preferred-election**: kafka-leader-election.sh --election-type PREFERRED on some
  partitions of the main topic (ElectLeaders, KIP-460).
- **create-partitions**: kafka-topics.sh --alter --partitions on a scratch topic
  (CreatePartitions), now and then to a count the topic already has (INVALID_PARTITIONS, a
  request refused on purpose), then a burst of writes to every partition.
- **alter-config**: kafka-configs.sh --alter on the main or a scratch topic
  (IncrementalAlterConfigs, KIP-339): SET or DELETE of a config that keeps every record.
- **delete-recreate-topic**: kafka-topics.sh --delete then --create of a scratch topic under
  the same name (DeleteTopics, CreateTopics, retried while the deletion goes on:
  TOPIC_ALREADY_EXISTS), then a burst of writes whose values name the topic's new incarnation.

Each request is retried as an operator's script would: after BACKOFF_S while refused in a way
that can change (NOT_CONTROLLER, REQUEST_TIMED_OUT, a lost connection, ...), at most
MAX_ATTEMPTS times. Every answer is written down (admin_checker.Operation), and what each
operation asked goes into admin_checker.Expectations with whether the cluster took it, for the
final check of the replicas, partition counts and configs.
"""
from __future__ import annotations

import concurrent.futures
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kazoo.exceptions import KazooException, NoNodeError

from odradek.admin import reassign_client as rc
from odradek.admin.admin_client import metadata_request
from odradek.admin.errors import AdminError
from odradek.admin.reassign_partitions_command import TP, PlanError, validate_plan
from odradek.faults.admin_checker import (
    CLIENT_EXCEPTION,
    COMPLETED,
    FAILED,
    HUNG,
    PENDING,
    REFUSED,
    Expectations,
    Operation,
    error_name_in,
    refusal_kind,
    scratch_value,
    taken,
)
from odradek.faults.cluster import FaultCluster
from odradek.faults.nemesis import WorkloadFault
from odradek.faults.workload import LOGGER
from odradek.protocol.errors import error_name
from odradek.zk import paths

MAIN, MAIN_PARTITIONS = "admin-faults", 6
SCRATCH, SCRATCH_PARTITIONS, MAX_SCRATCH_PARTITIONS = ("scratch-0", "scratch-1", "scratch-2"), 2, 6
REASSIGN, ELECT, CREATE_PARTITIONS, ALTER_CONFIG, DELETE_RECREATE = (
    "reassign-partitions", "preferred-election", "create-partitions", "alter-config", "delete-recreate-topic")
ADMIN_KINDS = (REASSIGN, ELECT, CREATE_PARTITIONS, ALTER_CONFIG, DELETE_RECREATE)
#: --throttle of the reassignments, bytes/s: a partition's log of a few hundred KB takes
#: seconds to copy, so the controller dies in the middle of the copy
THROTTLE = 50_000
#: how long the broker may take over one request (CreateTopics', DeleteTopics' operation
#: timeout), the client's bound on it, and when a call that has not returned is hung
OPERATION_TIMEOUT_S, REQUEST_TIMEOUT_S, HUNG_AFTER_S = 15.0, 20.0, 35.0
#: the operator's script: another attempt BACKOFF_S after a refusal that can change
MAX_ATTEMPTS, BACKOFF_S = 10, 2.0
#: how long the script waits for a reassignment to finish (throttled copy included)
REASSIGN_WAIT_S = 60.0
#: how long an operation (its attempts, waits and the controller's kill) may take in all
OPERATION_BOUND_S = 300.0
KILL_PROBABILITY = 0.5
#: how long after the operation's first request is sent its controller is killed: before the
#: request reaches the controller, while the controller carries it out, or after it answered;
#: a reassignment's first request sets the throttles first, and its copy lasts seconds
KILL_DELAY_S = {REASSIGN: (0.1, 1.5)}
KILL_DELAY_OTHERS_S = (0.0, 0.4)
#: how long the kill waits for the operation to send its first request (its reads come first)
ISSUE_WAIT_S = 30.0
#: values written to each partition of a scratch topic after its creation or growth
BURST = 20
#: topic configs an operation sets or deletes: none of them removes a record
CONFIGS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("604800000", "2592000000"),
    "max.message.bytes": ("524288", "1048588", "2097152"),
    "segment.bytes": ("1048576", "16777216", "1073741824"),
    "delete.retention.ms": ("3600000", "86400000"),
    "min.compaction.lag.ms": ("0", "60000"),
    "flush.messages": ("1000", "9223372036854775807"),
}


class Refused(Exception):
    """A request's failure in Kafka's words: the error name, and its message."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name, self.message = name, message


def refusal(exc: BaseException) -> Refused:
    """Any failure of a client call as a Refused: a Kafka error by its Kafka name, a tool's
    AdminError or PlanError by the name it carries, no result in time as HUNG."""
    if isinstance(exc, Refused):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
        return Refused(error_name(err.code(), err.name()), err.str())
    if isinstance(exc, (AdminError, PlanError)):
        return Refused(error_name_in(str(exc)), str(exc))
    if isinstance(exc, concurrent.futures.TimeoutError):
        return Refused(HUNG, f"no result within {HUNG_AFTER_S:.0f} s")
    return Refused(CLIENT_EXCEPTION, repr(exc))


def draw_target(rng: random.Random, replicas: list[int], brokers: list[int]) -> list[int]:
    """A reassignment's target for a partition on ``replicas``: with all of ``brokers`` a
    replica fewer or a new order; with fewer a replica more or one moved to the broker it
    lacks. Never the current list."""
    others = [b for b in brokers if b not in replicas]
    if not others:
        if rng.random() < 0.5 and len(replicas) > 1:
            return rng.sample(replicas, len(replicas) - 1)
        shift = rng.randrange(1, len(replicas)) if len(replicas) > 1 else 0
        return replicas[shift:] + replicas[:shift]
    added = rng.choice(others)
    if rng.random() < 0.5:
        target = list(replicas)
        target.insert(rng.randrange(len(target) + 1), added)
        return target
    target = list(replicas)
    target[rng.randrange(len(target))] = added
    return target


@dataclass
class ScratchTopic:
    """A scratch topic as the operator knows it: the incarnation it last created for sure,
    the values of that incarnation acknowledged, the partition count."""

    name: str
    incarnation: int = 0
    partitions: int = SCRATCH_PARTITIONS
    acknowledged: set[bytes] = field(default_factory=set)
    exists: bool = True
    next_seq: int = 0
    next_incarnation: int = 1


class AdminOperator:
    def __init__(self, cluster: FaultCluster, expectations: Expectations) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers
        self.expect = expectations
        self.ops: list[Operation] = []
        self.scratch = {name: ScratchTopic(name) for name in SCRATCH}
        #: a burst's values not acknowledged (a freshly created topic refusing writes)
        self.write_failures: list[str] = []
        self.scratch_sent = self.scratch_acknowledged = 0
        self._configured: dict[str, set[str]] = {}  # topic -> keys an operation set or deleted
        #: per operation (by id): set as it sends its first request, when the kill's delay starts
        self._issued: dict[int, threading.Event] = {}

    # -- setup --------------------------------------------------------------------------------

    def create_topics(self) -> None:
        """The main topic and the scratch topics (incarnation 0, with a burst each)."""
        admin = self._admin()
        topics = [NewTopic(MAIN, MAIN_PARTITIONS, 3)]
        topics += [NewTopic(name, SCRATCH_PARTITIONS, 3) for name in SCRATCH]
        for future in admin.create_topics(topics, operation_timeout=30, request_timeout=40).values():
            future.result(60)
        view = _patiently(lambda: rc.cluster_view(self.bootstrap, [MAIN], REQUEST_TIMEOUT_S))
        for (_, p), replicas in view.assignment.items():
            self.expect.start(("replicas", MAIN, p), tuple(replicas))
        for s in self.scratch.values():
            self.expect.start(("count", s.name), SCRATCH_PARTITIONS)
            self._burst(s)

    # -- the faults -----------------------------------------------------------------------------

    def faults(self) -> dict[str, WorkloadFault]:
        bodies: dict[str, Callable[[Operation, random.Random], None]] = {
            REASSIGN: self._reassign, ELECT: self._elect, CREATE_PARTITIONS: self._create_partitions,
            ALTER_CONFIG: self._alter_config, DELETE_RECREATE: self._delete_recreate}
        return {kind: self._fault(kind, body) for kind, body in bodies.items()}

    def _fault(self, kind: str, body: Callable[[Operation, random.Random], None]) -> WorkloadFault:
        def fault(rng: random.Random) -> tuple[float, str]:
            # a fixed number of draws from the nemesis's source, whatever the operation does,
            # so the seed still decides the kinds of the faults that follow
            own = random.Random(rng.getrandbits(64))
            kill = rng.random() < KILL_PROBABILITY
            delay = rng.uniform(*KILL_DELAY_S.get(kind, KILL_DELAY_OTHERS_S))
            session_s = self.cluster.session_timeout_ms / 1000
            hold = rng.uniform(0.2, 0.6) * session_s if rng.random() < 0.5 else rng.uniform(1.5, 2.5) * session_s
            op = Operation(kind)
            self.ops.append(op)
            self._issued[id(op)] = threading.Event()
            worker = threading.Thread(target=self._guarded, args=(body, op, own), name=f"admin-{kind}", daemon=True)
            worker.start()
            killed = ""
            if kill:
                killed = self._kill_controller(op, delay, hold)
            worker.join(OPERATION_BOUND_S)
            if worker.is_alive():
                op.unexpected.append(f"{HUNG}: the operation had not ended {OPERATION_BOUND_S:.0f} s after it began")
                op.outcome = FAILED
            return (hold if op.controller_killed is not None else 0.0), f"{op.what}: {op.outcome}{killed}"
        return fault

    def _kill_controller(self, op: Operation, delay: float, hold: float) -> str:
        """kill -9 of the controller ``delay`` s after the operation sent its first request,
        started again ``hold`` s later."""
        if not self._issued[id(op)].wait(ISSUE_WAIT_S):
            return ", no request sent to kill the controller after"
        time.sleep(delay)
        victim = self.cluster.controller()
        if victim is None or not self.cluster.broker_alive(victim):
            return ", no controller to kill"
        self.cluster.signal_broker(victim, signal.SIGKILL)
        op.controller_killed = victim
        time.sleep(hold)
        self.cluster.start_broker(victim)
        return f", controller {victim} killed {delay:.2f} s after the request, back {hold:.1f} s later"

    def _guarded(self, body: Callable[[Operation, random.Random], None], op: Operation, rng: random.Random) -> None:
        try:
            body(op, rng)
        except Exception as exc:  # noqa: BLE001 - the operator's script died: an anomaly, the run goes on
            op.unexpected.append(f"{CLIENT_EXCEPTION}: {exc!r}")
            op.outcome = FAILED

    def _retry(self, op: Operation, call: Callable[[], object], done_on: frozenset[str] = frozenset()) -> list[str | None]:
        """``call`` as an operator's script runs a command: again after BACKOFF_S while it is
        refused in a way that can change (or unexpectedly), never after a refusal that cannot
        (at most MAX_ATTEMPTS in all). Each attempt's outcome: None once it succeeded (or was
        refused with a name of ``done_on``: what it asks is already so), else the error name."""
        outcomes: list[str | None] = []
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                time.sleep(BACKOFF_S)
            op.attempts += 1
            self._issued[id(op)].set()
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - every failure is judged by its name below
                r = refusal(exc)
                if r.name in done_on:
                    outcomes.append(None)
                    return outcomes
                outcomes.append(r.name)
                kind = refusal_kind(r.name)
                (op.unexpected if kind == "unexpected" else op.refusals).append(f"{r.name}: {r.message}"[:400])
                if kind == "final":
                    return outcomes
                continue
            outcomes.append(None)
            return outcomes
        return outcomes

    @staticmethod
    def _outcome(op: Operation, done: bool) -> str:
        return COMPLETED if done else FAILED if op.unexpected else REFUSED

    # -- reassign-partitions ------------------------------------------------------------------

    def _reassign(self, op: Operation, rng: random.Random) -> None:
        every: list[TP] = [(MAIN, p) for p in range(MAIN_PARTITIONS)]
        current, brokers = _patiently(lambda: self._assignment(every))
        # partitions with a replica fewer first: theirs are the moves that copy data (under the throttle)
        tps = sorted(sorted(every, key=lambda tp: (len(current[tp]), rng.random()))[:rng.randint(1, 3)])
        plan = {tp: draw_target(rng, current[tp], brokers) for tp in tps}
        cancel = rng.random() < 0.25
        op.what = ", ".join(f"{t}-{p} {current[(t, p)]} -> {plan[(t, p)]}" for t, p in tps) + \
            (" then cancelled" if cancel else "")
        op.subjects = [("replicas", *tp) for tp in tps]
        started = self._start_reassignment(op, plan, current)
        for tp in tps:
            self.expect.ask(("replicas", *tp), tuple(plan[tp]), taken(started[tp]))
        accepted = [tp for tp in tps if None in started[tp]]
        if cancel and accepted:
            time.sleep(rng.uniform(0.2, 2.0))
            cancelled = self._cancel_reassignment(op, accepted)
            for tp in accepted:
                # as in Kafka, a cancellation restores the original replicas, not their order
                self.expect.ask(("replicas", *tp), frozenset(current[tp]), taken(cancelled[tp]))
        done = self._wait_reassigned(op, accepted)
        if done is None:   # still copying: its throttles stay, the run's end removes them
            op.outcome = PENDING
            return
        # --verify: the throttles go once nothing of the plan is in progress
        removed = self._retry(op, lambda: rc.remove_throttles(self.bootstrap, [MAIN], REQUEST_TIMEOUT_S))
        op.outcome = self._outcome(op, done and len(accepted) == len(tps) and removed[-1:] == [None])

    def _assignment(self, tps: list[TP]) -> tuple[dict[TP, list[int]], list[int]]:
        """The partitions' replicas without those a reassignment in progress is adding (its
        original replicas), and the registered brokers."""
        view = rc.cluster_view(self.bootstrap, [MAIN], REQUEST_TIMEOUT_S)
        ongoing = rc.list_reassignments(self.bootstrap, tps, REQUEST_TIMEOUT_S)
        current = {tp: [r for r in view.assignment[tp] if tp not in ongoing or r not in ongoing[tp].adding]
                   for tp in tps}
        return current, sorted(view.brokers)

    def _start_reassignment(self, op: Operation, plan: dict[TP, list[int]],
                            current: dict[TP, list[int]]) -> dict[TP, list[str | None]]:
        """--execute --throttle, retried for the partitions not yet started: each partition's
        attempts (None: started)."""
        pending = dict(plan)
        outcomes: dict[TP, list[str | None]] = {tp: [] for tp in plan}

        def execute() -> None:
            try:
                view = rc.cluster_view(self.bootstrap, [], REQUEST_TIMEOUT_S)
                validate_plan(pending, current, view.brokers, allow_replication_factor_change=True)
                errors = rc.execute(self.bootstrap, pending, replace(view, assignment=current), THROTTLE,
                                    REQUEST_TIMEOUT_S)
            except Exception as exc:
                for tp in pending:
                    outcomes[tp].append(refusal(exc).name)
                raise
            for tp in list(pending):
                if tp in errors:
                    outcomes[tp].append(error_name_in(errors[tp]))
                else:
                    outcomes[tp].append(None)
                    del pending[tp]
            if errors:
                raise _first_refusal(errors)

        self._retry(op, execute)
        return outcomes

    def _cancel_reassignment(self, op: Operation, tps: list[TP]) -> dict[TP, list[str | None]]:
        """--cancel: each partition's attempts (None: cancelled); NO_REASSIGNMENT_IN_PROGRESS
        (it completed first) is a refusal that retrying cannot change."""
        pending = set(tps)
        outcomes: dict[TP, list[str | None]] = {tp: [] for tp in tps}

        def cancel() -> None:
            try:
                _, errors = rc.cancel(self.bootstrap, {tp: [] for tp in sorted(pending)}, REQUEST_TIMEOUT_S)
            except Exception as exc:
                for tp in pending:
                    outcomes[tp].append(refusal(exc).name)
                raise
            for tp in sorted(pending):
                outcomes[tp].append(error_name_in(errors[tp]) if tp in errors else None)
                if tp not in errors or refusal_kind(error_name_in(errors[tp])) == "final":
                    pending.discard(tp)
            if errors:
                raise _first_refusal(errors)

        self._retry(op, cancel)
        return outcomes

    def _wait_reassigned(self, op: Operation, tps: list[TP]) -> bool | None:
        """Until no partition of ``tps`` is in progress and each has replicas the operations
        allow (the target; a cancelled one's original replicas in any order). True then; False
        if none is in progress but one has others (an unexpected end, written down); None if
        still in progress after REASSIGN_WAIT_S (the run's end checks it again)."""
        deadline = time.monotonic() + REASSIGN_WAIT_S
        while True:
            try:
                moving = bool(rc.list_reassignments(self.bootstrap, tps, REQUEST_TIMEOUT_S)) if tps else False
                seen = rc.cluster_view(self.bootstrap, [MAIN], REQUEST_TIMEOUT_S).assignment
            except (AdminError, OSError):
                moving, seen = True, {}  # no controller to ask right now: as good as in progress
            wrong = {tp: seen.get(tp) for tp in tps
                     if not self.expect.allows(("replicas", *tp), tuple(seen.get(tp, ())))}
            if not moving and not wrong:
                return True
            if time.monotonic() > deadline:
                if moving:
                    return None
                op.unexpected.append("no longer in progress, but with replicas " + ", ".join(
                    f"{t}-{p} {replicas}" for (t, p), replicas in sorted(wrong.items())))
                return False
            time.sleep(0.5)

    # -- preferred-election ----------------------------------------------------------------------

    def _elect(self, op: Operation, rng: random.Random) -> None:
        partitions = sorted(rng.sample(range(MAIN_PARTITIONS), rng.randint(1, MAIN_PARTITIONS)))
        op.what = f"{MAIN} partitions {','.join(map(str, partitions))}"
        remaining = set(partitions)

        def elect() -> None:
            admin = self._admin()
            tps = [TopicPartition(MAIN, p) for p in sorted(remaining)]
            results = admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=HUNG_AFTER_S)
            refused = {}
            for tp, err in results.items():
                if err is None or err.code() == KafkaError.ELECTION_NOT_NEEDED:
                    remaining.discard(tp.partition)
                else:
                    refused[tp.partition] = err
            if refused:
                p = min(refused)
                raise Refused(error_name(refused[p].code(), refused[p].name()),
                              f"{MAIN}-{p}: {refused[p].str()}")

        self._retry(op, elect)
        op.outcome = self._outcome(op, not remaining)

    # -- create-partitions -------------------------------------------------------------------------

    def _create_partitions(self, op: Operation, rng: random.Random) -> None:
        s = self.scratch[rng.choice(sorted(t for t, s in self.scratch.items() if s.exists) or SCRATCH)]
        count = _patiently(lambda: self._partition_count(s.name)) or s.partitions
        # now and then a count the topic already has: refused (INVALID_PARTITIONS), on purpose
        asked = count if rng.random() < 0.2 else min(count + rng.randint(1, 2), MAX_SCRATCH_PARTITIONS)
        op.what = f"{s.name} {count} -> {asked}"

        tried: list[bool] = []

        def create() -> None:
            try:
                admin = self._admin()
                futures = admin.create_partitions([NewPartitions(s.name, asked)], operation_timeout=OPERATION_TIMEOUT_S,
                                                  request_timeout=REQUEST_TIMEOUT_S)
                futures[s.name].result(timeout=HUNG_AFTER_S)
            except Exception as exc:
                # an earlier attempt that got no answer (its controller killed) may have added them
                if tried and asked > count and refusal(exc).name == "INVALID_PARTITIONS" \
                        and _patiently(lambda: self._partition_count(s.name)) == asked:
                    return
                raise
            finally:
                tried.append(True)

        attempts = self._retry(op, create)
        op.subjects = [("count", s.name)]
        self.expect.ask(("count", s.name), asked, taken(attempts))
        if attempts[-1:] != [None]:
            op.outcome = self._outcome(op, False)
            return
        # CreatePartitions answers once the broker it asked knows the new partitions
        if not self._everywhere(lambda server: self._partition_count(s.name, server) == asked):
            op.outcome = PENDING
            return
        s.partitions = asked
        self._burst(s)
        op.outcome = COMPLETED

    # -- alter-config ------------------------------------------------------------------------------

    def _alter_config(self, op: Operation, rng: random.Random) -> None:
        topic = rng.choice([MAIN] + sorted(t for t, s in self.scratch.items() if s.exists))
        key = rng.choice(sorted(CONFIGS))
        value = None if rng.random() < 0.25 else rng.choice(CONFIGS[key])
        op.what = f"{topic} {key}={value}" if value is not None else f"{topic} delete {key}"
        self._configured.setdefault(topic, set()).add(key)

        def alter() -> None:
            entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.DELETE if value is None
                                else AlterConfigOpType.SET)
            admin = self._admin()
            futures = admin.incremental_alter_configs(
                [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])],
                request_timeout=REQUEST_TIMEOUT_S)
            for future in futures.values():
                future.result(timeout=HUNG_AFTER_S)

        attempts = self._retry(op, alter)
        op.subjects = [("config", topic, key)]
        self.expect.ask(("config", topic, key), value, taken(attempts))
        if attempts[-1:] != [None]:
            op.outcome = self._outcome(op, False)
            return
        # read back: the brokers apply a change when its notification reaches them
        deadline = time.monotonic() + 10.0
        while (own := self.own_configs(topic)) is None or own.get(key) != value:
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        op.outcome = COMPLETED if own is not None and own.get(key) == value else PENDING

    def own_configs(self, topic: str) -> dict[str, str] | None:
        """The topic's own configs (DYNAMIC_TOPIC_CONFIG) as DescribeConfigs answers; None if
        it could not be read."""
        try:
            admin = self._admin()
            futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)],
                                             request_timeout=REQUEST_TIMEOUT_S)
            entries = next(iter(futures.values())).result(timeout=HUNG_AFTER_S)
        except Exception:  # noqa: BLE001 - not readable now
            return None
        # confluent-kafka hands the source back as a plain int, not a ConfigSource
        return {name: e.value for name, e in entries.items()
                if ConfigSource(e.source) is ConfigSource.DYNAMIC_TOPIC_CONFIG and e.value is not None}

    def configured(self) -> dict[str, set[str]]:
        """topic -> the config keys operations set or deleted on it."""
        return self._configured

    # -- delete-recreate-topic -----------------------------------------------------------------------

    def _delete_recreate(self, op: Operation, rng: random.Random) -> None:
        s = self.scratch[rng.choice(SCRATCH)]
        incarnation = s.next_incarnation
        s.next_incarnation += 1
        old_id = _patiently(lambda: self._topic_id(s.name))
        op.what = f"{s.name} incarnation {s.incarnation} -> {incarnation}"

        def delete() -> None:
            admin = self._admin()
            futures = admin.delete_topics([s.name], operation_timeout=OPERATION_TIMEOUT_S,
                                          request_timeout=REQUEST_TIMEOUT_S)
            futures[s.name].result(timeout=HUNG_AFTER_S)

        # UNKNOWN_TOPIC_OR_PARTITION: gone from the brokers' metadata, the deletion under way
        deleted = self._retry(op, delete, done_on=frozenset({"UNKNOWN_TOPIC_OR_PARTITION"}))
        created_attempts: list[str | None] = []

        def create() -> None:
            try:
                admin = self._admin()
                futures = admin.create_topics([NewTopic(s.name, SCRATCH_PARTITIONS, 3)],
                                              operation_timeout=OPERATION_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S)
                futures[s.name].result(timeout=HUNG_AFTER_S)
            except Exception as exc:
                # an earlier attempt of ours that got no answer may have created it: a new topic id
                if created_attempts and refusal(exc).name == "TOPIC_ALREADY_EXISTS" \
                        and _patiently(lambda: self._topic_id(s.name)) not in (None, old_id):
                    return
                raise
            finally:
                created_attempts.append("attempted")

        created = self._retry(op, create) if deleted[-1:] == [None] else []
        recreated = created[-1:] == [None]
        # a new incarnation proves the deletion; the deletion takes the topic's configs with it
        was_deleted = True if recreated else taken(deleted)
        self.expect.ask(("count", s.name), None, was_deleted)
        for key in sorted(self._configured.get(s.name, ())):
            self.expect.ask(("config", s.name, key), None, was_deleted)
        self.expect.ask(("count", s.name), SCRATCH_PARTITIONS, taken(created))
        if was_deleted is not False:
            # the values of the incarnation deleted (or perhaps deleted) are no longer owed
            s.acknowledged = set()
        if recreated:
            s.incarnation, s.partitions, s.exists = incarnation, SCRATCH_PARTITIONS, True
            self._burst(s)
        elif was_deleted is True:
            s.exists = False
        op.outcome = self._outcome(op, recreated)

    # -- reads and writes ------------------------------------------------------------------------------

    def _admin(self) -> AdminClient:
        """A client of its own per command, as each run of a tool has, held by the caller until
        its results are in (a collected client fails its futures with _DESTROY);
        socket.timeout.ms bounds the calls whose own timeout options confluent-kafka refuses
        (elect_leaders)."""
        # confluent_kafka types conf values as str/int/float/bool; its "logger" setting takes a Logger
        return AdminClient({"bootstrap.servers": self.bootstrap, "logger": LOGGER,  # type: ignore[dict-item]
                            "socket.timeout.ms": int(REQUEST_TIMEOUT_S * 1000)})

    def _everywhere(self, holds: Callable[[str], bool], bound_s: float = 30.0) -> bool:
        """Whether ``holds(server)`` for every broker's address within ``bound_s``."""
        deadline = time.monotonic() + bound_s
        pending = self.bootstrap.split(",")
        while pending:
            pending = [server for server in pending if not _quietly(lambda: holds(server))]
            if pending and time.monotonic() > deadline:
                return False
            time.sleep(0.2 if pending else 0)
        return True

    def _partition_count(self, topic: str, server: str | None = None) -> int | None:
        meta = metadata_request(server or self.bootstrap, [topic], REQUEST_TIMEOUT_S)
        t = meta.topics[0] if meta.topics else None
        return len(t.partitions) if t is not None and t.error_code == 0 else None

    def _topic_id(self, topic: str) -> str | None:
        """The topic's id as its znode has it (None: no such topic): odradek's Metadata answers
        carry no topic id (Kafka's do since 2.8, KIP-516), so an operator's script asks ZooKeeper
        which incarnation of a name it sees."""
        try:
            raw = self.cluster.zk().get(paths.topic_path(topic))[0]
        except NoNodeError:
            return None
        return paths.decode_topic_assignment(topic, raw).topic_id

    def _burst(self, s: ScratchTopic) -> None:
        """BURST values of the topic's current incarnation to each partition, acks=all from an
        idempotent producer of their own, once every broker knows the partitions (a topic just
        created or grown is known first to the broker that answered); the acknowledged ones are
        remembered."""
        self._everywhere(lambda server: self._partition_count(s.name, server) == s.partitions)
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "compression.type": "none", "linger.ms": 5, "message.timeout.ms": 60_000,
                             "logger": LOGGER, "client.id": f"faults-scratch-{s.name}-{s.incarnation}"})
        failed: list[str] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                s.acknowledged.add(msg.value())
                self.scratch_acknowledged += 1
            else:
                failed.append(f"{msg.value().decode()}: {err}")

        for p in range(s.partitions):
            for _ in range(BURST):
                producer.produce(s.name, value=scratch_value(s.name, s.incarnation, s.next_seq), partition=p,
                                 on_delivery=delivered)
                s.next_seq += 1
                self.scratch_sent += 1
                producer.poll(0)
        left = producer.flush(90)
        self.write_failures += failed[:5] + ([f"{s.name}: {left} values unresolved"] if left else [])

    def in_progress(self) -> bool | None:
        """Whether a reassignment is in progress anywhere (None: no controller answered)."""
        try:
            return bool(rc.list_reassignments(self.bootstrap, None, REQUEST_TIMEOUT_S))
        except (AdminError, OSError):
            return None

    def remove_throttles(self) -> list[str]:
        """--verify's removal once everything settled; the errors, if it could not."""
        op = Operation("settle")
        self._issued[id(op)] = threading.Event()
        attempts = self._retry(op, lambda: rc.remove_throttles(self.bootstrap, [MAIN], REQUEST_TIMEOUT_S))
        return [] if attempts[-1:] == [None] else op.refusals + op.unexpected


def _first_refusal(errors: dict[TP, str]) -> Refused:
    """The refusal to retry on: the first partition's that retrying can change, else the first."""
    retriable = [tp for tp in sorted(errors) if refusal_kind(error_name_in(errors[tp])) != "final"]
    tp = retriable[0] if retriable else min(errors)
    return Refused(error_name_in(errors[tp]), f"{tp[0]}-{tp[1]}: {errors[tp]}")


def _quietly(read: Callable[[], bool]) -> bool:
    """A check of one broker; False while it cannot answer."""
    try:
        return read()
    except (AdminError, OSError, KafkaException):
        return False


def _patiently(read: Callable[[], Any], bound_s: float = 60.0) -> Any:
    """A read the operator's script needs before its request, again each second while the
    cluster cannot answer it (a broker or the controller restarting)."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            return read()
        except (AdminError, OSError, KafkaException, KazooException):
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
