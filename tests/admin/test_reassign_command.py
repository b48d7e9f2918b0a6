"""The pure half of `odradek reassign`: the plan format, validation, the --generate planner,
throttles and --verify's partition states (no cluster needed)."""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from odradek.admin.reassign_partitions_command import (
    DONE,
    FAILED,
    IN_PROGRESS,
    Ongoing,
    PlanError,
    format_plan,
    parse_plan,
    partition_states,
    propose,
    throttles,
    validate_plan,
)


def _replica_counts(assignment, brokers):
    counts = Counter(b for replicas in assignment.values() for b in replicas)
    return [counts[b] for b in brokers]


def _leader_counts(assignment, brokers):
    counts = Counter(replicas[0] for replicas in assignment.values())
    return [counts[b] for b in brokers]


def _check_balanced(current, proposal, brokers):
    assert set(proposal) == set(current)
    for tp, replicas in proposal.items():
        assert len(replicas) == len(current[tp]), tp
        assert len(set(replicas)) == len(replicas), tp
        assert set(replicas) <= set(brokers), tp
    replicas = _replica_counts(proposal, brokers)
    leaders = _leader_counts(proposal, brokers)
    assert max(replicas) - min(replicas) <= 1, replicas
    assert max(leaders) - min(leaders) <= 1, leaders


def test_propose_spreads_a_topic_onto_a_new_broker_evenly():
    current = {("t", p): [1, 2] if p % 2 else [2, 1] for p in range(6)}
    proposal = propose(current, [1, 2, 3])
    _check_balanced(current, proposal, [1, 2, 3])
    assert _replica_counts(proposal, [1, 2, 3]) == [4, 4, 4]
    assert _leader_counts(proposal, [1, 2, 3]) == [2, 2, 2]


def test_propose_moves_only_what_balance_needs():
    current = {("t", p): [1 + p % 2] for p in range(6)}  # 3 on broker 1, 3 on broker 2
    proposal = propose(current, [1, 2, 3])
    moved = [tp for tp in current if proposal[tp] != current[tp]]
    assert len(moved) == 2
    assert _replica_counts(proposal, [1, 2, 3]) == [2, 2, 2]


def test_propose_keeps_a_balanced_assignment_as_it_is():
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("t", 2): [3, 1]}
    assert propose(current, [1, 2, 3]) == current


def test_propose_moves_everything_off_a_broker_not_given():
    current = {("t", p): [1, 2, 3] for p in range(4)}
    proposal = propose(current, [1, 2, 4])
    assert all(3 not in r for r in proposal.values())
    _check_balanced(current, proposal, [1, 2, 4])


@pytest.mark.parametrize("seed", range(40))
def test_propose_is_balanced_for_random_clusters(seed):
    rng = random.Random(seed)
    brokers = sorted(rng.sample(range(1, 10), rng.randint(2, 6)))
    rf = rng.randint(1, min(3, len(brokers)))  # one replication factor: leaders can always balance
    old = list(range(1, 10))
    current = {(f"t{t}", p): rng.sample(old, rf) for t in range(rng.randint(1, 3)) for p in range(rng.randint(1, 12))}
    proposal = propose(current, brokers)
    _check_balanced(current, proposal, brokers)
    assert propose(current, brokers) == proposal  # the same each run


@pytest.mark.parametrize("seed", range(20))
def test_propose_balances_replicas_across_mixed_replication_factors(seed):
    rng = random.Random(seed)
    brokers = [1, 2, 3, 4]
    current = {(f"t{t}", p): rng.sample(brokers, t + 1) for t in range(3) for p in range(rng.randint(1, 8))}
    proposal = propose(current, brokers)
    counts = _replica_counts(proposal, brokers)
    assert max(counts) - min(counts) <= 1


def test_propose_puts_each_replica_on_its_own_rack():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    current = {("t", p): [1, 2, 3] for p in range(12)}
    proposal = propose(current, racks, racks)
    _check_balanced(current, proposal, sorted(racks))
    for replicas in proposal.values():
        assert sorted(racks[b] for b in replicas) == ["a", "b", "c"]


def test_propose_with_fewer_racks_than_replicas_spreads_them_over_every_rack():
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    current = {("t", p): [1, 2, 3] for p in range(4)}
    proposal = propose(current, racks, racks)
    for replicas in proposal.values():
        assert set(racks[b] for b in replicas) == {"a", "b"}
    _check_balanced(current, proposal, [1, 2, 3, 4])


def test_rack_rule_wins_over_balance_when_racks_are_unequal():
    racks = {1: "a", 2: "b", 3: "b", 4: "b"}
    current = {("t", p): [2, 3] for p in range(6)}
    proposal = propose(current, racks, racks)
    assert all(sorted(racks[b] for b in r) == ["a", "b"] for r in proposal.values())
    assert _replica_counts(proposal, [1, 2, 3, 4]) == [6, 2, 2, 2]


def test_propose_refuses_some_brokers_without_a_rack():
    with pytest.raises(PlanError, match="no broker.rack"):
        propose({("t", 0): [1]}, [1, 2], {1: "a", 2: None})


def test_propose_refuses_more_replicas_than_brokers():
    with pytest.raises(PlanError, match="3 replicas but only 2 brokers"):
        propose({("t", 0): [1, 2, 3]}, [1, 2])


def test_plan_round_trips_through_kafkas_json():
    plan = {("b", 0): [2, 3], ("a", 1): [1]}
    text = format_plan(plan)
    assert json.loads(text) == {"version": 1, "partitions": [{"topic": "a", "partition": 1, "replicas": [1]},
                                                             {"topic": "b", "partition": 0, "replicas": [2, 3]}]}
    assert parse_plan(text) == plan
    kafka = '{"version":1,"partitions":[{"topic":"a","partition":1,"replicas":[1,2],"log_dirs":["any","any"]}]}'
    assert parse_plan(kafka) == {("a", 1): [1, 2]}


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"version":1}', 'with a "partitions" list'),
    ('{"version":2,"partitions":[]}', "unsupported plan version"),
    ('{"partitions":[]}', "names no partitions"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}', "t-0: empty replica list"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,2,1]}]}', "t-0: broker 1 appears twice"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}',
     "t-0 appears twice"),
    ('{"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}', "no valid partition number"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}', "list of broker ids"),
    ('{"partitions":[{"partition":0,"replicas":[1]}]}', "has no topic name"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data"]}]}', 'log_dirs must be "any"'),
])
def test_parse_plan_names_the_problem(text, message):
    with pytest.raises(PlanError, match=message):
        parse_plan(text)


CURRENT = {("t", 0): [1, 2], ("t", 1): [2, 3]}


@pytest.mark.parametrize("plan, message", [
    ({("u", 0): [1, 2]}, "topic 'u' does not exist"),
    ({("t", 2): [1, 2]}, "partition t-2 does not exist .topic t has 2 partitions"),
    ({("t", 0): [1, 7]}, "t-0: broker 7 is not registered .registered brokers: 1,2,3"),
    ({("t", 0): [1, 2, 3]}, "changes the replication factor from 2 to 3"),
])
def test_validate_plan_refuses(plan, message):
    with pytest.raises(PlanError, match=message):
        validate_plan(plan, CURRENT, [1, 2, 3])


def test_validate_plan_allows_a_replication_factor_change_when_asked():
    plan = {("t", 0): [1, 2, 3]}
    with pytest.raises(PlanError, match="replication factor"):
        validate_plan(plan, CURRENT, [1, 2, 3])
    validate_plan(plan, CURRENT, [1, 2, 3], allow_replication_factor_change=True)  # no PlanError


def test_throttles_name_current_replicas_as_leaders_and_new_ones_as_followers():
    current = {("t", 0): [1, 2], ("t", 1): [2, 3], ("u", 0): [1]}
    plan = {("t", 0): [2, 3], ("t", 1): [3, 2], ("u", 0): [4]}
    result = throttles(plan, current)
    assert result.topic_configs == {
        "t": {"leader.replication.throttled.replicas": "0:1,0:2",
              "follower.replication.throttled.replicas": "0:3"},
        "u": {"leader.replication.throttled.replicas": "0:1",
              "follower.replication.throttled.replicas": "0:4"}}
    assert result.brokers == {1, 2, 3, 4}


def test_partition_states():
    plan = {("t", 0): [2, 3], ("t", 1): [1, 3], ("t", 2): [3, 1]}
    current = {("t", 0): [1, 2, 3], ("t", 1): [1, 3], ("t", 2): [1, 2]}
    ongoing = {("t", 0): Ongoing((1, 2, 3), adding=(3,), removing=(1,))}
    sizes = {(("t", 0), 1): 1000, (("t", 0), 3): 400, (("t", 1), 1): 50, (("t", 2), 1): 70}
    rows = partition_states(plan, current, ongoing, sizes, {("t", 0): 1, ("t", 1): 1, ("t", 2): 1})
    assert [(r["state"], r["bytes_to_copy"], r["bytes_copied"]) for r in rows] == [
        (IN_PROGRESS, 1000, 400), (DONE, 50, 50), (FAILED, 70, None)]
    # records arrived between reading the leader (1000 bytes) and the new replica (1200): all
    # of what there was to copy is copied, not more
    rows = partition_states(plan, current, ongoing, {**sizes, (("t", 0), 3): 1200},
                            {("t", 0): 1, ("t", 1): 1, ("t", 2): 1})
    assert (rows[0]["bytes_to_copy"], rows[0]["bytes_copied"]) == (1000, 1000)
