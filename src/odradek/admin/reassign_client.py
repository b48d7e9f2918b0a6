"""The I/O half of Kafka's ReassignPartitionsCommand behind `odradek reassign`: plain Kafka requests
(Metadata, AlterPartitionReassignments and ListPartitionReassignments of KIP-455, DescribeLogDirs,
DescribeConfigs and IncrementalAlterConfigs), so it works against Apache Kafka 2.4+ too. The
decisions are reassign_partitions_command.py's pure functions.

The reassignment APIs go to the controller (Metadata's controller_id); a broker that stopped
being it answers NOT_CONTROLLER, and the request is sent again to the new one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Mapping

from odradek.admin import config_command
from odradek.admin.admin_client import metadata_request
from odradek.admin.errors import AdminError
from odradek.admin.reassign_partitions_command import (
    BROKER_THROTTLES,
    FAILED,
    TOPIC_THROTTLES,
    TP,
    Assignment,
    Ongoing,
    PlanError,
    partition_states,
    propose,
    throttles,
    tp_name,
    validate_plan,
)

ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, DESCRIBE_LOG_DIRS = 45, 46, 35
NOT_CONTROLLER = 41
NO_REASSIGNMENT_IN_PROGRESS = 85
#: how often a request is sent again after the controller moved or could not be reached
CONTROLLER_ATTEMPTS = 5


@dataclass(frozen=True)
class ClusterView:
    """What one Metadata request says about the brokers and the topics asked for."""
    brokers: dict[int, str]  # id -> host:port
    racks: dict[int, str | None]
    controller: int
    assignment: Assignment
    leaders: dict[TP, int]


def cluster_view(bootstrap: str, topics: list[str] | None, timeout: float) -> ClusterView:
    """Topics that do not exist are left out (validate_plan names them)."""
    meta = metadata_request(bootstrap, sorted(set(topics)) if topics is not None else None, timeout)
    assignment: Assignment = {}
    leaders: dict[TP, int] = {}
    for t in meta.topics:
        if t.error_code != 0:
            continue
        for p in t.partitions:
            assignment[(t.name, int(p.partition_index))] = [int(r) for r in p.replica_nodes]
            leaders[(t.name, int(p.partition_index))] = int(p.leader_id)
    return ClusterView({int(b.node_id): f"{b.host}:{b.port}" for b in meta.brokers},
                       {int(b.node_id): b.rack for b in meta.brokers}, int(meta.controller_id), assignment, leaders)


def _to_controller(bootstrap: str, api_key: int, body: dict[str, Any], timeout: float) -> Any:
    """Send a v0 request to the controller, again (fresh metadata) after NOT_CONTROLLER or a
    lost connection; AdminError once CONTROLLER_ATTEMPTS are spent."""
    problem = ""
    for attempt in range(CONTROLLER_ATTEMPTS):
        if attempt:
            time.sleep(min(0.2 * 2 ** attempt, 2.0))
        view = cluster_view(bootstrap, [], timeout)
        address = view.brokers.get(view.controller)
        if address is None:
            problem = "the cluster has no controller"
            continue
        try:
            response = config_command._send(address, api_key, 0, body, timeout)
        except (OSError, ValueError) as exc:
            problem = (f"the controller (broker {view.controller} at {address}) did not answer ({exc}; "
                       f"it must speak KIP-455's reassignment APIs, Kafka 2.4+)")
            continue
        if int(response.error_code) == NOT_CONTROLLER:
            problem = f"broker {view.controller} is no longer the controller"
            continue
        if int(response.error_code) != 0:
            raise config_command._error(response.error_code, response.error_message,
                                        "the controller refused the request")
        return response
    raise AdminError(f"{problem} (after {CONTROLLER_ATTEMPTS} attempts)")


def alter_reassignments(bootstrap: str, targets: Mapping[TP, list[int] | None], timeout: float) -> dict[TP, str]:
    """AlterPartitionReassignments: per partition its target replicas, or None to cancel (KIP-455).
    Returns the partitions refused, as `NAME: message`."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), replicas in sorted(targets.items()):
        topics.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    response = _to_controller(bootstrap, ALTER_PARTITION_REASSIGNMENTS, {
        "timeout": int(timeout * 1000),
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, timeout)
    errors = {}
    for t in response.responses:
        for p in t.partitions:
            if int(p.error_code) != 0:
                errors[(t.name, int(p.partition_index))] = (f"{p.error_code.name.upper()}: "
                                                            f"{p.error_message or ''}".rstrip(": "))
    return errors


def list_reassignments(bootstrap: str, tps: list[TP] | None, timeout: float) -> dict[TP, Ongoing]:
    """ListPartitionReassignments: the reassignments in progress among ``tps`` (None: all)."""
    topics = None
    if tps is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    response = _to_controller(bootstrap, LIST_PARTITION_REASSIGNMENTS,
                              {"timeout": int(timeout * 1000), "topics": topics}, timeout)
    return {(t.name, int(p.partition_index)): Ongoing(tuple(map(int, p.replicas)), tuple(map(int, p.adding_replicas)),
                                                      tuple(map(int, p.removing_replicas)))
            for t in response.topics for p in t.partitions}


def log_sizes(view: ClusterView, wanted: dict[int, set[TP]], timeout: float) -> dict[tuple[TP, int], int]:
    """DescribeLogDirs to each broker of ``wanted`` for its partitions: (partition, broker) -> bytes.
    A broker that cannot be reached is left out (its sizes are unknown, not zero)."""
    sizes: dict[tuple[TP, int], int] = {}
    for broker, tps in sorted(wanted.items()):
        address = view.brokers.get(broker)
        if address is None or not tps:
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        try:
            response = config_command._send(address, DESCRIBE_LOG_DIRS, 1, {
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}, timeout)
        except (OSError, ValueError):
            continue
        for result in response.results:
            for t in result.topics:
                for p in t.partitions:
                    if not p.is_future_key:
                        sizes[((t.name, int(p.partition_index)), broker)] = int(p.partition_size)
    return sizes


# -- the commands ----------------------------------------------------------------------------------


def generate(bootstrap: str, topics: list[str], brokers: list[int], rack_aware: bool,
             timeout: float) -> tuple[Assignment, Assignment]:
    """(current assignment of ``topics``, proposed assignment over ``brokers``)."""
    view = cluster_view(bootstrap, topics, timeout)
    present = {t for t, _ in view.assignment}
    missing = [t for t in dict.fromkeys(topics) if t not in present]
    if missing:
        raise PlanError(f"topic {missing[0]!r} does not exist")
    unknown = [b for b in brokers if b not in view.brokers]
    if unknown:
        raise PlanError(f"broker {unknown[0]} is not registered "
                        f"(registered brokers: {','.join(map(str, sorted(view.brokers)))})")
    racks = view.racks if rack_aware else {}
    current = _without_adding(view.assignment, list_reassignments(bootstrap, sorted(view.assignment), timeout))
    return current, propose(current, brokers, racks)


def prepare(bootstrap: str, plan: Assignment, allow_replication_factor_change: bool,
            timeout: float) -> ClusterView:
    """The cluster as the plan finds it, once the plan has passed validate_plan against it."""
    view = cluster_view(bootstrap, [t for t, _ in plan], timeout)
    ongoing = list_reassignments(bootstrap, sorted(tp for tp in plan if tp in view.assignment), timeout)
    view = replace(view, assignment=_without_adding(view.assignment, ongoing))
    validate_plan(plan, view.assignment, view.brokers, allow_replication_factor_change)
    return view


def _without_adding(assignment: Assignment, ongoing: dict[TP, Ongoing]) -> Assignment:
    """Each partition's replicas less those a reassignment in progress is adding: while it moves,
    Metadata lists the target and the original replicas together (KIP-455), and its replication
    factor, the rollback plan and the throttles are the original's."""
    return {tp: [r for r in replicas if tp not in ongoing or r not in ongoing[tp].adding]
            for tp, replicas in assignment.items()}


def execute(bootstrap: str, plan: Assignment, view: ClusterView, throttle: int | None,
            timeout: float) -> dict[TP, str]:
    """Set the throttles (if asked), then start the reassignment; returns the partitions the
    controller refused."""
    if throttle is not None:
        wanted = throttles(plan, view.assignment)
        rate = str(throttle)
        changes: list[tuple[int, str, dict[str, str], list[str]]] = [
            (config_command.TOPIC, t, configs, []) for t, configs in sorted(wanted.topic_configs.items())]
        changes += [(config_command.BROKER, str(b), {k: rate for k in BROKER_THROTTLES}, [])
                    for b in sorted(wanted.brokers)]
        config_command.alter_many(bootstrap, changes, timeout)
    return alter_reassignments(bootstrap, dict(plan), timeout)


#: how often --verify reads a partition that looks failed again: the controller forgets a finished
#: reassignment at once, while brokers' metadata lists the old replicas until its UpdateMetadata
VERIFY_READS, VERIFY_READ_INTERVAL_S = 10, 0.2


def verify(bootstrap: str, plan: Assignment, timeout: float) -> list[dict[str, Any]]:
    """--verify's rows (reassign_partitions_command.partition_states)."""
    for _ in range(VERIFY_READS - 1):
        rows = verify_once(bootstrap, plan, timeout)
        if all(r["state"] != FAILED for r in rows):
            return rows
        time.sleep(VERIFY_READ_INTERVAL_S)
    return verify_once(bootstrap, plan, timeout)


def verify_once(bootstrap: str, plan: Assignment, timeout: float) -> list[dict[str, Any]]:
    """One read of the plan's state (verify reads again while a partition looks failed; the
    dashboard, which reads every few seconds anyway, takes one)."""
    ongoing = list_reassignments(bootstrap, sorted(plan), timeout)
    view = cluster_view(bootstrap, [t for t, _ in plan], timeout)
    wanted: dict[int, set[TP]] = {}
    for tp in plan:
        for broker in [view.leaders.get(tp, -1), *(ongoing[tp].adding if tp in ongoing else ())]:
            wanted.setdefault(broker, set()).add(tp)
    return partition_states(plan, view.assignment, ongoing, log_sizes(view, wanted, timeout), view.leaders)


def cancel(bootstrap: str, plan: Assignment, timeout: float) -> tuple[list[TP], dict[TP, str]]:
    """(partitions whose reassignment was cancelled, partitions refused: not in progress or other)."""
    errors = alter_reassignments(bootstrap, {tp: None for tp in plan}, timeout)
    return [tp for tp in sorted(plan) if tp not in errors], errors


def remove_throttles(bootstrap: str, topics: list[str], timeout: float) -> list[str]:
    """Remove the replication throttles of ``topics`` and, once no reassignment is left in the
    cluster, the brokers' throttle rates (Kafka's --verify clears them when its plan is done;
    other reassignments still running keep theirs). Only configs that are set are deleted.
    Returns what was removed, one phrase each."""
    removed = []
    overrides = config_command.topic_overrides(bootstrap, sorted(set(topics)), timeout)
    changes: list[tuple[int, str, dict[str, str], list[str]]] = []
    for topic, configs in sorted(overrides.items()):
        keys = [k for k in TOPIC_THROTTLES if k in configs]
        if keys:
            changes.append((config_command.TOPIC, topic, {}, keys))
            removed.append(f"topic {topic}: {', '.join(keys)}")
    if not list_reassignments(bootstrap, None, timeout):
        for broker in sorted(cluster_view(bootstrap, [], timeout).brokers):
            entries = config_command.describe(bootstrap, config_command.BROKER, str(broker), timeout,
                                              keys=list(BROKER_THROTTLES))
            keys = [e["name"] for e in entries
                    if e["name"] in BROKER_THROTTLES and e["source"] == "DYNAMIC_BROKER_CONFIG"]
            if keys:
                changes.append((config_command.BROKER, str(broker), {}, keys))
                removed.append(f"broker {broker}: {', '.join(keys)}")
    if changes:
        config_command.alter_many(bootstrap, changes, timeout)
    return removed


def refused_line(errors: dict[TP, str]) -> str:
    first = min(errors)
    return f"{len(errors)} partition(s) refused, first {tp_name(first)}: {errors[first]}"
