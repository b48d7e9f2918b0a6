"""Kafka's four partition leader selectors (OfflinePartitionLeaderSelector,
ReassignedPartitionLeaderSelector, PreferredReplicaPartitionLeaderSelector,
ControlledShutdownLeaderSelector), as pure functions.

Two layers, as in Kafka 2.4: ``*_leader`` functions (PartitionLeaderElectionAlgorithms) only pick
a broker id or None; the ``select_*`` selectors (Election.scala) turn that pick into the next
``LeaderAndIsr`` plus the replicas that must receive a LeaderAndIsr request, or raise
``LeaderElectionError``. Nothing here reads the controller context, so each rule can be tested
with a table of cases.

Preference order is always the assignment order: the first assigned replica is the preferred
replica, so walking the assignment keeps leadership balanced the way the admin laid it out.
"""
from __future__ import annotations

import enum
from typing import Collection, NamedTuple, Sequence

from odradek.common.metadata import LeaderAndIsr


class ElectionStrategy(enum.Enum):
    """Which selector an OfflinePartition/OnlinePartition -> OnlinePartition change uses."""

    OFFLINE = "OfflinePartitionLeaderSelector"
    #: the offline selector with unclean election allowed whatever the topic says: an
    #: operator's explicit ElectLeaders(UNCLEAN) for a partition with no live ISR member
    OFFLINE_UNCLEAN = "OfflinePartitionLeaderSelector(unclean)"
    REASSIGN = "ReassignedPartitionLeaderSelector"
    PREFERRED = "PreferredReplicaPartitionLeaderSelector"
    CONTROLLED_SHUTDOWN = "ControlledShutdownLeaderSelector"


class StateChangeFailedError(Exception):
    """A transition was valid but could not be carried out (Kafka's StateChangeFailedException)."""


class LeaderElectionError(StateChangeFailedError):
    """No replica satisfies the selector's rule; the partition keeps its current state."""


class Election(NamedTuple):
    leader_and_isr: LeaderAndIsr
    receivers: tuple[int, ...]


def offline_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], unclean: bool
) -> int | None:
    """First live in-sync replica; with unclean election, else the first live replica at all."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica
    return None


def reassign_leader(
    reassignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """First live in-sync replica of the target replica set (TRS)."""
    return next((r for r in reassignment if r in live and r in isr), None)


def preferred_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    """The preferred replica, only if it is live and in sync; never a fallback."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    """First live in-sync replica that is not itself shutting down."""
    return next(
        (r for r in assignment if r in live and r in isr and r not in shutting_down), None
    )


def select_offline(
    current: LeaderAndIsr,
    assignment: Sequence[int],
    live: Collection[int],
    unclean: bool,
    controller_epoch: int,
) -> Election:
    """OfflinePartitionLeaderSelector.

    New ISR = the live part of the ISR when the leader came from it; an unclean leader is
    alone in its ISR because nobody else is known to hold its log. Receivers = live replicas.
    """
    leader = offline_leader(assignment, current.isr, live, unclean)
    if leader is None:
        raise LeaderElectionError(
            f"no live in-sync replica among assignment {list(assignment)}, isr "
            f"{list(current.isr)}, live {sorted(live)} (unclean election "
            f"{'enabled' if unclean else 'disabled'})"
        )
    isr = tuple(r for r in current.isr if r in live) if leader in current.isr else (leader,)
    receivers = tuple(r for r in assignment if r in live)
    return Election(current.new_leader(leader, isr, controller_epoch), receivers)


def select_reassigned(
    current: LeaderAndIsr,
    reassignment: Sequence[int],
    live: Collection[int],
    controller_epoch: int,
) -> Election:
    """ReassignedPartitionLeaderSelector: ISR unchanged; receivers = all of TRS."""
    leader = reassign_leader(reassignment, current.isr, live)
    if leader is None:
        raise LeaderElectionError(
            f"no live in-sync replica among reassigned replicas {list(reassignment)}, "
            f"isr {list(current.isr)}"
        )
    return Election(current.new_leader(leader, current.isr, controller_epoch),
                    tuple(reassignment))


def select_preferred(
    current: LeaderAndIsr,
    assignment: Sequence[int],
    live: Collection[int],
    controller_epoch: int,
) -> Election:
    """PreferredReplicaPartitionLeaderSelector: ISR unchanged; receivers = all assigned."""
    leader = preferred_leader(assignment, current.isr, live)
    if leader is None:
        raise LeaderElectionError(
            f"preferred replica {assignment[0] if assignment else None} is not live and in isr "
            f"{list(current.isr)}"
        )
    return Election(current.new_leader(leader, current.isr, controller_epoch),
                    tuple(assignment))


def select_controlled_shutdown(
    current: LeaderAndIsr,
    assignment: Sequence[int],
    live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
    controller_epoch: int,
) -> Election:
    """ControlledShutdownLeaderSelector.

    The shutting-down brokers leave the ISR now, so a replica that is about to stop cannot
    be elected by a later offline election. Receivers = live (incl. shutting-down) replicas,
    because the old leader must hear that it has become a follower.
    """
    leader = controlled_shutdown_leader(
        assignment, current.isr, live_or_shutting_down, shutting_down
    )
    if leader is None:
        raise LeaderElectionError(
            f"no in-sync replica outside the shutting-down brokers {sorted(shutting_down)}, "
            f"isr {list(current.isr)}"
        )
    isr = tuple(r for r in current.isr if r not in shutting_down)
    receivers = tuple(r for r in assignment if r in live_or_shutting_down)
    return Election(current.new_leader(leader, isr, controller_epoch), receivers)
