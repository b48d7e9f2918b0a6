"""The admin fault workload's pure checks (faults/admin_checker.py): how answers are classed,
which final states the operations allow, what ZooKeeper may hold once they settled, and
which records of a re-created topic are an earlier incarnation's."""
from __future__ import annotations

import random

from odradek.faults.admin_checker import (
    BROKER_NOT_REGISTERED,
    CLIENT_EXCEPTION,
    COMPLETED,
    COMPLETED_LATE,
    CONTROLLER_UNREACHABLE,
    NOT_SETTLED,
    PENDING,
    REFUSED,
    Expectations,
    Operation,
    TopicZk,
    ZkSnapshot,
    earlier_incarnations,
    error_name_in,
    hung_calls,
    lost_values,
    operations_by_kind,
    parse_scratch_value,
    partitions_without_state,
    refusal_kind,
    refusals_by_name,
    resolve_pending,
    scratch_value,
    taken,
    throttles_left,
    unexpected_answers,
    zookeeper_leftovers,
)
from odradek.faults.admin_workload import draw_target


def test_a_controller_failing_over_is_a_clear_refusal_worth_retrying() -> None:
    for name in ("NOT_CONTROLLER", "REQUEST_TIMED_OUT", "_TRANSPORT", "_DESTROY_BROKER", "TOPIC_ALREADY_EXISTS",
                 "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_REPLICATION_FACTOR", CONTROLLER_UNREACHABLE):
        assert refusal_kind(name) == "retriable", name


def test_a_request_that_cannot_be_done_is_a_final_refusal() -> None:
    assert refusal_kind("NO_REASSIGNMENT_IN_PROGRESS") == "final"
    assert refusal_kind("INVALID_PARTITIONS") == "final"


def test_an_unknown_server_error_a_hang_or_an_exception_is_unexpected() -> None:
    for name in ("UNKNOWN_SERVER_ERROR", "HUNG", CLIENT_EXCEPTION, "INVALID_REQUEST"):
        assert refusal_kind(name) == "unexpected", name


def test_error_names_are_read_from_the_tools_one_line_errors() -> None:
    assert error_name_in("NOT_CONTROLLER: broker 2 is not the controller") == "NOT_CONTROLLER"
    assert error_name_in("leader election failed: REQUEST_TIMED_OUT: no answer") == "REQUEST_TIMED_OUT"
    assert error_name_in("_TRANSPORT: Broker: transport failure") == "_TRANSPORT"
    assert error_name_in("broker 3 is no longer the controller (after 5 attempts)") == CONTROLLER_UNREACHABLE
    assert error_name_in("cannot reach 127.0.1.1:9092: Connection refused") == CONTROLLER_UNREACHABLE
    assert error_name_in("admin-faults-2: broker 3 is not registered (registered brokers: 1,2)") \
        == BROKER_NOT_REGISTERED
    assert error_name_in("something else went wrong") == CLIENT_EXCEPTION


def test_taken_once_one_attempt_succeeded_not_taken_only_when_every_refusal_proves_it() -> None:
    assert taken(["NOT_CONTROLLER", None]) is True
    assert taken(["NOT_CONTROLLER", "INVALID_REPLICA_ASSIGNMENT"]) is False
    assert taken(["_TRANSPORT", "NOT_CONTROLLER"]) is None   # the first may have reached the controller
    assert taken(["REQUEST_TIMED_OUT"]) is None
    assert taken([]) is False                                # never asked


def test_the_last_operation_taken_decides_and_an_unanswered_one_allows_both() -> None:
    expect = Expectations()
    subject = ("replicas", "t", 0)
    expect.start(subject, (1, 2, 3))
    expect.ask(subject, (3, 1), True)
    expect.ask(subject, (2, 3), False)     # refused: nothing changes
    assert expect.allowed(subject) == {(3, 1)}
    expect.ask(subject, (1, 3, 2), None)   # no answer: either
    assert expect.allowed(subject) == {(3, 1), (1, 3, 2)}
    assert expect.mismatches({subject: (1, 3, 2)}) == []
    assert expect.mismatches({subject: (2, 3)}) == [
        "t-0 replicas: [2,3], the operations allow [1,3,2] or [3,1] (3 asked)"]


def test_a_cancelled_reassignment_allows_its_original_replicas_in_any_order() -> None:
    expect = Expectations()
    subject = ("replicas", "t", 4)
    expect.start(subject, (1, 2, 3))
    expect.ask(subject, (3, 1), True)
    expect.ask(subject, frozenset({1, 2, 3}), True)
    assert expect.mismatches({subject: (2, 3, 1)}) == []
    assert expect.mismatches({subject: (3, 1)}) != []


def test_a_config_nobody_set_is_unset_and_a_deleted_topic_has_no_count() -> None:
    expect = Expectations()
    expect.ask(("config", "t", "retention.ms"), "604800000", None)
    assert expect.allowed(("config", "t", "retention.ms")) == {None, "604800000"}
    expect.start(("count", "s"), 2)
    expect.ask(("count", "s"), None, True)   # deleted
    expect.ask(("count", "s"), 2, False)     # its re-creation refused
    assert expect.mismatches({("count", "s"): 2}) == ["s partition count: 2, the operations allow none (2 asked)"]


def test_operations_are_counted_by_kind_and_outcome_and_refusals_by_name() -> None:
    ops = [Operation("reassign-partitions", outcome=COMPLETED, refusals=["NOT_CONTROLLER: moved"]),
           Operation("reassign-partitions", outcome=REFUSED, refusals=["NOT_CONTROLLER: x", "_TRANSPORT: y"]),
           Operation("alter-config", outcome=COMPLETED,
                     unexpected=["UNKNOWN_SERVER_ERROR: boom", "HUNG: no result within 35 s"])]
    assert operations_by_kind(ops) == {"reassign-partitions": {COMPLETED: 1, REFUSED: 1},
                                       "alter-config": {COMPLETED: 1}}
    assert refusals_by_name(ops) == {"NOT_CONTROLLER": 2, "_TRANSPORT": 1}
    assert unexpected_answers(ops) == ["alter-config: UNKNOWN_SERVER_ERROR: boom"]
    assert hung_calls(ops) == ["alter-config: HUNG: no result within 35 s"]


def test_a_pending_operation_completed_late_once_the_cluster_has_what_was_asked() -> None:
    expect = Expectations()
    expect.start(("replicas", "t", 0), (1, 2, 3))
    expect.ask(("replicas", "t", 0), (2, 3), True)
    done = Operation("reassign-partitions", outcome=PENDING, subjects=[("replicas", "t", 0)])
    stuck = Operation("alter-config", outcome=PENDING, subjects=[("config", "t", "segment.bytes")])
    expect.ask(("config", "t", "segment.bytes"), "1048576", True)
    resolve_pending([done, stuck], expect, {("replicas", "t", 0): (2, 3), ("config", "t", "segment.bytes"): None})
    assert (done.outcome, stuck.outcome) == (COMPLETED_LATE, NOT_SETTLED)


def _snapshot(**topics: TopicZk) -> ZkSnapshot:
    return ZkSnapshot(None, (), None, dict(topics))


def test_a_settled_cluster_leaves_nothing_in_zookeeper() -> None:
    snap = _snapshot(t=TopicZk({0: (1, 2), 1: (2, 3)}, partition_znodes=frozenset({0, 1}), states=frozenset({0, 1})))
    assert zookeeper_leftovers(snap) == [] and partitions_without_state(snap) == []


def test_request_znodes_and_half_done_reassignments_are_leftovers() -> None:
    snap = ZkSnapshot(b'{"version":1,"partitions":[]}', ("gone", "t"), b"{}",
                      {"t": TopicZk({0: (3, 1, 2)}, adding={0: (3,)}, removing={0: (2,)})})
    assert zookeeper_leftovers(snap) == [
        "/admin/reassign_partitions still holds b'{\"version\":1,\"partitions\":[]}'",
        "/admin/delete_topics/gone still marked (the topic is gone)",
        "/admin/delete_topics/t still marked (the topic still exists)",
        "/admin/preferred_replica_election still holds b'{}'",
        "/brokers/topics/t partition 0: still adding replicas [3]",
        "/brokers/topics/t partition 0: still removing replicas [2]"]


def test_a_partition_without_its_state_znode_and_a_stray_partition_znode() -> None:
    snap = _snapshot(s=TopicZk({0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)},
                               partition_znodes=frozenset({0, 1, 4}), states=frozenset({0, 1, 4})))
    assert partitions_without_state(snap) == [
        "s-2: assigned [3, 1, 2], no state znode",
        "s-4: a partition znode, but the topic znode assigns partitions 0-2"]


def test_records_of_an_earlier_incarnation_are_found_and_counted() -> None:
    assert parse_scratch_value(scratch_value("scratch-1", 3, 17)) == ("scratch-1", 3, 17)
    assert parse_scratch_value(b"0:p0-k1:5") is None
    values = [scratch_value("s", 2, 0), scratch_value("s", 1, 5), scratch_value("s", 1, 6), b"junk", None]
    assert earlier_incarnations("broker 1 s-0", values, "s", 2) == [
        "broker 1 s-0: 1 records of a value not of s: None (the topic is incarnation 2)",
        "broker 1 s-0: 1 records of a value not of s: b'junk' (the topic is incarnation 2)",
        "broker 1 s-0: 2 records of incarnation 1 (the topic is incarnation 2)"]
    assert earlier_incarnations("s through a consumer", values[:1], "s", 2) == []


def test_acknowledged_values_missing_are_lost() -> None:
    acked = {scratch_value("s", 1, 0), scratch_value("s", 1, 1)}
    assert lost_values("s", acked, [scratch_value("s", 1, 1)]) == ["s: s:1:0 acknowledged, not read"]


def test_throttles_left_are_the_topics_replica_lists_and_the_brokers_rates() -> None:
    assert throttles_left({"t": {"leader.replication.throttled.replicas": "0:1,0:2", "retention.ms": "1"},
                           "u": {"follower.replication.throttled.replicas": ""}},
                          {1: {"leader.replication.throttled.rate": "100000"}, 2: {}}) == [
        "topic t: leader.replication.throttled.replicas=0:1,0:2",
        "broker 1: leader.replication.throttled.rate=100000"]


def test_a_reassignment_target_is_never_the_current_list_and_keeps_to_the_brokers() -> None:
    rng = random.Random(7)
    kinds = set()
    for _ in range(400):
        replicas = rng.sample([1, 2, 3], rng.choice([2, 3]))
        target = draw_target(rng, replicas, [1, 2, 3])
        assert target != replicas and len(set(target)) == len(target) and set(target) <= {1, 2, 3}
        assert 2 <= len(target) <= 3
        kinds.add((len(replicas), len(target), set(target) == set(replicas)))
    # fewer, reordered, more, and moved: every kind of reassignment is drawn
    assert kinds == {(3, 2, False), (3, 3, True), (2, 3, False), (2, 2, False)}

