"""LeaderAndIsrUpdate, the rounds of conditional LeaderAndIsr writes both state machines share,
and PendingStateChange, driven through the fakes."""
from __future__ import annotations

import pytest
from controller_fakes import Rig, tp

from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.controller.leader_and_isr_update import (
    MAX_ATTEMPTS,
    LeaderAndIsrUpdate,
    PendingStateChange,
)
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.controller.states import PartitionStatus

A, B, C = tp("t", 0), tp("t", 1), tp("t", 2)


def without_broker_3(states: dict[TopicPartition, LeaderAndIsr]
                     ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
    """Broker 3 leaves every ISR it is in; a state without it stays as it is."""
    return {t: lai if 3 not in lai.isr else lai.new_leader(
        lai.leader, tuple(r for r in lai.isr if r != 3), 5) for t, lai in states.items()}


def rig_with(*stored: tuple[TopicPartition, LeaderAndIsr]) -> Rig:
    rig = Rig()
    for t, lai in stored:
        rig.add_partition(t, (1, 2, 3), lai)
    return rig


def update(rig: Rig, tps, decide=without_broker_3) -> LeaderAndIsrUpdate:
    return LeaderAndIsrUpdate(rig.ctx, rig.zk, tps, decide, lambda t, cached: True)


def test_update_writes_only_changed_states_and_caches_the_results() -> None:
    rig = rig_with((A, LeaderAndIsr(1, 0, (1, 3), 4, 0)), (B, LeaderAndIsr(1, 0, (1, 2), 4, 7)))
    updated, failed = update(rig, [A, B]).start().finish()
    assert failed == {}
    assert updated == {B: LeaderAndIsr(1, 0, (1, 2), 4, 7), A: LeaderAndIsr(1, 1, (1,), 5, 1)}
    assert rig.zk.calls_named("update_leader_and_isr") == [{A: LeaderAndIsr(1, 1, (1,), 5, 0)}]
    assert rig.ctx.partition_leadership(A) == updated[A]


def test_update_rereads_and_retries_a_lost_version_race() -> None:
    rig = rig_with((A, LeaderAndIsr(1, 0, (1, 2, 3), 4, 0)))
    rig.zk.leader_races[A] = 1  # the leader drops 2 first; ours must be decided again
    rig.zk.leader_isr_write = (  # type: ignore[method-assign]
        lambda t, isr: rig.zk.states.__setitem__(t, rig.zk.states[t]._replace(
            isr=(1, 3), zk_version=rig.zk.states[t].zk_version + 1)))
    updated, failed = update(rig, [A]).start().finish()
    assert failed == {}
    assert updated[A] == LeaderAndIsr(1, 1, (1,), 5, 2)
    assert rig.zk.calls_named("get_partition_states") == [[A]]


def test_update_gives_up_after_bounded_rounds() -> None:
    rig = rig_with((A, LeaderAndIsr(1, 0, (1, 3), 4, 0)))
    rig.zk.leader_races[A] = 100
    updated, failed = update(rig, [A]).start().finish()
    assert updated == {}
    assert isinstance(failed[A], StateChangeFailedError)
    assert len(rig.zk.calls_named("update_leader_and_isr")) == MAX_ATTEMPTS


def test_update_fails_missing_newer_and_undecided_partitions_without_writing() -> None:
    rig = rig_with((B, LeaderAndIsr(1, 0, (1, 3), 9, 0)), (C, LeaderAndIsr(1, 0, (1, 3), 4, 0)))
    rig.ctx.update_partition_replica_assignment(A, (1, 2, 3))  # no stored state at all
    refused = {C: StateChangeFailedError("no")}
    updated, failed = update(rig, [A, B, C], lambda states: {
        t: refused.get(t) or lai for t, lai in states.items()}).start().finish()
    assert updated == {}
    assert set(failed) == {A, B, C} and failed[C] is refused[C]
    assert rig.zk.calls_named("update_leader_and_isr") == []


def test_pending_state_change_applies_committed_writes_when_a_later_round_fails() -> None:
    """A's write is committed in the first round; the retry round for B cannot read (ZooKeeper
    connection lost): A must still be applied, so the controller tells brokers of it."""
    rig = rig_with((A, LeaderAndIsr(1, 0, (1, 3), 4, 0)), (B, LeaderAndIsr(1, 0, (1, 3), 4, 0)))
    rig.zk.leader_races[B] = 1

    def lost(tps: object) -> object:
        raise ConnectionError("ZooKeeper connection lost")

    rig.zk.get_partition_states = lost  # type: ignore[method-assign]
    applied: list[tuple[dict, dict]] = []
    results: dict[TopicPartition, object] = {}
    pending = PendingStateChange(results, update(rig, [A, B]).start(),
                                 lambda updated, failed: applied.append((dict(updated),
                                                                         dict(failed))))
    with pytest.raises(ConnectionError):
        pending.finish()
    assert applied == [({A: LeaderAndIsr(1, 1, (1,), 5, 1)}, {})]
    assert pending.finish() is results and len(applied) == 1  # applied once


def test_pending_state_change_without_writes_is_its_results() -> None:
    results = {A: PartitionStatus.ONLINE}
    assert PendingStateChange(results).finish() is results
