"""Table-driven tests of Kafka's four partition leader selectors and the leader-picking
algorithms."""
from __future__ import annotations

import pytest

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.leader_selectors import (
    LeaderElectionError,
    controlled_shutdown_leader,
    offline_leader,
    preferred_leader,
    reassign_leader,
    select_controlled_shutdown,
    select_offline,
    select_preferred,
    select_reassigned,
)

CURRENT = LeaderAndIsr(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=2, zk_version=7)


@pytest.mark.parametrize("assignment,isr,live,unclean,expected", [
    ((1, 2, 3), (1, 2, 3), {1, 2, 3}, False, 1),
    ((1, 2, 3), (2, 3), {1, 2, 3}, False, 2),      # preferred replica out of sync is skipped
    ((1, 2, 3), (1, 3), {2, 3}, False, 3),         # first live ISR member in assignment order
    ((3, 2, 1), (1, 2, 3), {1, 2}, False, 2),      # assignment order, not ISR order
    ((1, 2, 3), (1,), {2, 3}, False, None),        # no live ISR member, clean only
    ((1, 2, 3), (1,), {2, 3}, True, 2),            # unclean falls back to a live replica
    ((1, 2, 3), (1,), set(), True, None),          # nothing live at all
    ((1, 2, 3), (2,), {2, 3}, True, 2),            # unclean still prefers the ISR
])
def test_offline_leader(assignment, isr, live, unclean, expected) -> None:
    assert offline_leader(assignment, isr, live, unclean) == expected


@pytest.mark.parametrize("reassignment,isr,live,expected", [
    ((4, 5, 6), (1, 2, 3, 4, 5, 6), {1, 2, 3, 4, 5, 6}, 4),
    ((4, 5, 6), (1, 5, 6), {1, 4, 5, 6}, 5),
    ((4, 5, 6), (1, 4, 5, 6), {1, 6}, 6),
    ((4, 5, 6), (1, 2, 3), {1, 2, 3, 4}, None),
])
def test_reassign_leader(reassignment, isr, live, expected) -> None:
    assert reassign_leader(reassignment, isr, live) == expected


@pytest.mark.parametrize("assignment,isr,live,expected", [
    ((1, 2, 3), (1, 2, 3), {1, 2, 3}, 1),
    ((1, 2, 3), (2, 3), {1, 2, 3}, None),          # preferred not in sync: no fallback
    ((1, 2, 3), (1, 2, 3), {2, 3}, None),          # preferred dead: no fallback
    ((), (), set(), None),
])
def test_preferred_leader(assignment, isr, live, expected) -> None:
    assert preferred_leader(assignment, isr, live) == expected


@pytest.mark.parametrize("assignment,isr,live,shutting_down,expected", [
    ((1, 2, 3), (1, 2, 3), {1, 2, 3}, {1}, 2),
    ((1, 2, 3), (1, 3), {1, 2, 3}, {1}, 3),
    ((1, 2, 3), (1, 2), {1, 2, 3}, {1, 2}, None),
    ((1, 2, 3), (1, 2, 3), {1, 3}, {1}, 3),        # dead replica 2 is skipped
])
def test_controlled_shutdown_leader(assignment, isr, live, shutting_down, expected) -> None:
    assert controlled_shutdown_leader(assignment, isr, live, shutting_down) == expected


@pytest.mark.parametrize("assignment,live,unclean,leader,isr,receivers", [
    ((1, 2, 3), {2, 3}, False, 2, (2, 3), (2, 3)),   # clean: ISR shrinks to its live part
    ((1, 2, 3, 4), {4}, True, 4, (4,), (4,)),         # unclean leader is alone in its ISR
])
def test_select_offline(assignment, live, unclean, leader, isr, receivers) -> None:
    election = select_offline(CURRENT, assignment, live, unclean, controller_epoch=3)
    assert election.leader_and_isr == LeaderAndIsr(leader, 5, isr, 3, 7)
    assert election.receivers == receivers


def test_select_offline_fails_without_live_in_sync_replica_when_clean() -> None:
    with pytest.raises(LeaderElectionError):
        select_offline(CURRENT, (1, 2, 3, 4), {4}, False, controller_epoch=3)


def test_select_reassigned_keeps_isr_and_tells_all_target_replicas() -> None:
    current = LeaderAndIsr(1, 0, (1, 2, 3, 4, 5, 6), 1, 3)
    election = select_reassigned(current, (4, 5, 6), {1, 2, 3, 4, 5, 6}, controller_epoch=1)
    assert election.leader_and_isr == LeaderAndIsr(4, 1, (1, 2, 3, 4, 5, 6), 1, 3)
    assert election.receivers == (4, 5, 6)


def test_select_preferred_keeps_isr_and_tells_all_assigned() -> None:
    current = LeaderAndIsr(2, 3, (1, 2), 1, 0)
    election = select_preferred(current, (1, 2, 3), {1, 2}, controller_epoch=1)
    assert election.leader_and_isr == LeaderAndIsr(1, 4, (1, 2), 1, 0)
    assert election.receivers == (1, 2, 3)
    with pytest.raises(LeaderElectionError):
        select_preferred(current, (3, 2, 1), {1, 2}, controller_epoch=1)


def test_select_controlled_shutdown_drops_shutting_down_from_isr() -> None:
    election = select_controlled_shutdown(CURRENT, (1, 2, 3), {1, 2, 3}, {1}, controller_epoch=2)
    assert election.leader_and_isr == LeaderAndIsr(2, 5, (2, 3), 2, 7)
    assert election.receivers == (1, 2, 3)   # the old leader must hear it is a follower
    with pytest.raises(LeaderElectionError):
        select_controlled_shutdown(CURRENT, (1, 2, 3), {1, 2, 3}, {1, 2, 3}, controller_epoch=2)
