"""Kafka's ReplicaStateMachine (as the Kafka Controller Internals design describes it), on
batches of replicas.

Deletion follows Kafka 2.4 rather than that design's single OfflineReplica -> NonExistentReplica
step: a replica goes Offline -> ReplicaDeletionStarted (StopReplica with delete) ->
ReplicaDeletionSuccessful -> NonExistentReplica, with ReplicaDeletionIneligible for a broker that
died mid-deletion, so the topic deletion manager can tell "asked" from "done" and retry.
"""
from __future__ import annotations

import functools
from typing import Iterable

from odradek.common.metadata import NO_LEADER, LeaderAndIsr, TopicPartition, new_tuple
from odradek.controller.controller_context import ControllerContext
from odradek.controller.leader_and_isr_update import LeaderAndIsrUpdate, PendingStateChange
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import ControllerZk
from odradek.controller.state_change_log import StateChangeLog
from odradek.controller.states import PartitionReplica, ReplicaStatus

_R = ReplicaStatus
_NAME = {status: status.value for status in ReplicaStatus}  # .value is a Python descriptor
VALID_PREVIOUS: dict[ReplicaStatus, frozenset[ReplicaStatus]] = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
    _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
}


class IllegalReplicaStateTransitionError(Exception):
    """The target state does not list the replica's current state among its valid ones."""


class ReplicaStateMachine:
    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        zk: ControllerZk,
        batch: ControllerBrokerRequestBatch,
        log: StateChangeLog,
    ) -> None:
        self._controller_id = controller_id
        self._ctx = context
        self._zk = zk
        self._batch = batch
        self._log = log

    def initialize_replica_states(self) -> tuple[list[PartitionReplica], list[PartitionReplica]]:
        """Kafka's ReplicaStateMachine.initializeReplicaState: a replica on a live broker is
        Online, any other Offline; returns both lists so the controller can then move them (see
        Controller._failover for the order)."""
        live = self._ctx.live_broker_ids()  # is_replica_online, without a call per replica
        assignment = self._ctx.partition_replica_assignment
        replicas = [new_tuple(PartitionReplica, (tp, r)) for tp in self._ctx.all_partitions()
                    for r in assignment(tp)]
        online = [pr for pr in replicas if pr.replica in live]
        offline = [pr for pr in replicas if pr.replica not in live]
        self._ctx.swap_replica_states(online, _R.ONLINE)
        self._ctx.swap_replica_states(offline, _R.OFFLINE)
        return online, offline

    def handle_state_changes(
        self, replicas: Iterable[PartitionReplica], target: ReplicaStatus
    ) -> dict[PartitionReplica, Exception]:
        """Move ``replicas`` to ``target``; returns only the failures (invalid transitions
        included), whose replicas keep their state."""
        return self.start_state_changes(replicas, target).finish()

    def start_state_changes(
        self, replicas: Iterable[PartitionReplica], target: ReplicaStatus
    ) -> PendingStateChange[PartitionReplica, Exception]:
        """``handle_state_changes`` started, as the partition state machine's: for
        OfflineReplica this sends the ISR shrinks' ZooKeeper writes and the pending change's
        ``finish()`` applies them; every other change is done before this returns."""
        errors: dict[PartitionReplica, Exception] = {}
        valid: list[PartitionReplica] = []
        allowed = VALID_PREVIOUS[target]
        replicas = list(replicas)
        for pr, current in zip(replicas, self._ctx.replica_states(replicas)):
            if current in allowed:
                valid.append(pr)
            else:
                self._fail(pr, current, target, IllegalReplicaStateTransitionError(
                    f"replica {pr.replica} of {pr.tp} must be in one of "
                    f"{sorted(s.value for s in VALID_PREVIOUS[target])} to move to "
                    f"{target.value}, but is in {current.value}"), errors)
        match target:
            case _R.NEW:
                for pr in valid:
                    self._to_new(pr, errors)
            case _R.ONLINE:
                self._to_online(valid)
            case _R.OFFLINE:
                return self._start_offline(valid, errors)
            case _R.DELETION_STARTED:
                self._batch.add_stop_replicas(valid, delete=True)
                self._transition_all(valid, target)
            case _R.DELETION_SUCCESSFUL | _R.DELETION_INELIGIBLE:
                self._transition_all(valid, target)
            case _R.NON_EXISTENT:
                for pr in valid:
                    assignment = self._ctx.partition_replica_assignment(pr.tp)
                    self._ctx.update_partition_replica_assignment(
                        pr.tp, [r for r in assignment if r != pr.replica])
                self._transition_all(valid, target)
        return PendingStateChange(errors)

    def _to_new(self, pr: PartitionReplica, errors: dict[PartitionReplica, Exception]) -> None:
        """A new replica starts as a follower of the current leader, if there is one yet."""
        lai = self._ctx.partition_leadership(pr.tp)
        if lai is not None:
            if lai.leader == pr.replica:
                self._fail(pr, self._ctx.replica_state(pr), _R.NEW, StateChangeFailedError(
                    f"replica {pr.replica} of {pr.tp} cannot become a NewReplica: it is the "
                    f"leader"), errors)
                return
            self._batch.add_leader_and_isr([pr.replica], pr.tp, lai,
                                           self._ctx.partition_replica_assignment(pr.tp),
                                           is_new=True)
        self._transition(pr, _R.NEW)

    def _to_online(self, replicas: list[PartitionReplica]) -> None:
        """A new replica joins the assignment; any other gets its partition's current state
        again (one entry per partition for all its receivers), since a broker coming back, or
        a new controller, cannot know what it was told before."""
        receivers: dict[TopicPartition, list[int]] = {}
        assignment_of = self._ctx.partition_replica_assignment
        for pr, previous in zip(replicas, self._transition_all(replicas, _R.ONLINE)):
            tp = pr.tp
            if previous is _R.NEW:
                assignment = assignment_of(tp)
                if pr.replica not in assignment:
                    self._ctx.update_partition_replica_assignment(tp, (*assignment, pr.replica))
            elif tp in receivers:
                receivers[tp].append(pr.replica)
            else:
                receivers[tp] = [pr.replica]
        leadership = self._ctx.partition_leadership
        self._batch.add_leader_and_isrs(
            [(brokers, tp, lai, assignment_of(tp)) for tp, brokers in receivers.items()
             if (lai := leadership(tp)) is not None], is_new=False)

    def _start_offline(self, replicas: list[PartitionReplica],
                       errors: dict[PartitionReplica, Exception]
                       ) -> PendingStateChange[PartitionReplica, Exception]:
        """Stop the replicas, then take them out of their ISRs in one batched write, whose
        results the pending change applies (``_apply_isr_shrinks``)."""
        self._batch.add_stop_replicas(replicas, delete=False)
        removed: dict[TopicPartition, set[int]] = {}
        gone: dict[TopicPartition, list[PartitionReplica]] = {}  # in the order given
        leaderless: list[PartitionReplica] = []
        deleting: list[PartitionReplica] = []
        leadership = self._ctx.partition_leadership
        being_deleted = self._ctx.is_being_deleted
        for pr in replicas:
            tp = pr.tp
            if being_deleted(tp):
                # a topic being deleted: its replicas are only stopped, then deleted; shrinking
                # its ISRs would be ZooKeeper writes for znodes about to go (Kafka writes them,
                # and then tells no broker)
                deleting.append(pr)
            elif leadership(tp) is None:
                leaderless.append(pr)
            elif tp in gone:
                removed[tp].add(pr.replica)
                gone[tp].append(pr)
            else:
                removed[tp] = {pr.replica}
                gone[tp] = [pr]
        if leaderless:
            self._batch.add_update_metadata(self._ctx.live_or_shutting_down_broker_ids(),
                                            [pr.tp for pr in leaderless])
            self._transition_all(leaderless, _R.OFFLINE)
        if deleting:
            self._transition_all(deleting, _R.OFFLINE)
        if not removed:
            return PendingStateChange(errors)
        return PendingStateChange(errors, self._start_remove_from_isr(removed), functools.partial(
            self._apply_isr_shrinks, removed, gone, errors))

    def _start_remove_from_isr(self, removed: dict[TopicPartition, set[int]]
                               ) -> LeaderAndIsrUpdate:
        """Each partition's ``removed`` replicas out of its leadership (``_shrink``); a
        partition they are already out of needs no write."""
        epoch = self._ctx.epoch

        def shrinks(tp: TopicPartition, cached: LeaderAndIsr) -> bool:
            return cached.controller_epoch <= epoch and _in_leadership(removed[tp], cached)

        def decide(states: dict[TopicPartition, LeaderAndIsr]
                   ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
            return {tp: _shrink(lai, gone, epoch) if _in_leadership(gone := removed[tp], lai)
                    else lai for tp, lai in states.items()}

        return LeaderAndIsrUpdate(self._ctx, self._zk, sorted(removed), decide, shrinks).start()

    def _apply_isr_shrinks(
        self, removed: dict[TopicPartition, set[int]],
        gone: dict[TopicPartition, list[PartitionReplica]],
        errors: dict[PartitionReplica, Exception],
        updated: dict[TopicPartition, LeaderAndIsr], failed: dict[TopicPartition, Exception],
    ) -> None:
        """The new state goes to every remaining replica, not only the leader as the controller
        internals design says, because the write bumps the leader epoch (Kafka 2.4) and
        followers fetch with it."""
        assignment_of = self._ctx.partition_replica_assignment
        told = []
        for tp, lai in updated.items():
            assignment = assignment_of(tp)
            told.append(([r for r in assignment if r not in removed[tp]], tp, lai, assignment))
        self._batch.add_leader_and_isrs(told, is_new=False)
        self._transition_all([pr for tp in updated for pr in gone[tp]], _R.OFFLINE)
        for tp, error in failed.items():
            for pr in gone[tp]:
                self._fail(pr, self._ctx.replica_state(pr), _R.OFFLINE, error, errors)

    def _transition(self, pr: PartitionReplica, target: ReplicaStatus) -> None:
        self._transition_all([pr], target)

    def _transition_all(self, replicas: list[PartitionReplica],
                        target: ReplicaStatus) -> list[ReplicaStatus]:
        """Move every replica to ``target`` and log each move; returns the previous states."""
        previous = self._ctx.swap_replica_states(replicas, target)
        self._log.replica_transitions(self._controller_id, self._ctx.epoch, replicas,
                                      [_NAME[p] for p in previous], _NAME[target])
        return previous

    def _fail(self, pr: PartitionReplica, current: ReplicaStatus, target: ReplicaStatus,
              error: Exception, errors: dict[PartitionReplica, Exception]) -> None:
        errors[pr] = error
        self._log.failed_transition(self._controller_id, self._ctx.epoch, pr.tp, current.value,
                                    target.value, error, replica=pr.replica)


def _in_leadership(replicas: set[int], lai: LeaderAndIsr) -> bool:
    """Whether any of ``replicas`` leads or is in the ISR."""
    return lai.leader in replicas or not replicas.isdisjoint(lai.isr)


def _shrink(lai: LeaderAndIsr, gone: set[int], controller_epoch: int) -> LeaderAndIsr:
    """Remove ``gone`` from the ISR as Kafka 2.4 does one replica at a time: the last ISR
    member is never removed (it is the only record of who held the committed log, which
    a later clean election needs), and a removed leader leaves the partition leaderless."""
    isr = list(lai.isr)
    for replica in (gone if len(gone) == 1 else sorted(gone)):
        if replica in isr and len(isr) > 1:
            isr.remove(replica)
    leader = NO_LEADER if lai.leader in gone else lai.leader
    return lai.new_leader(leader, tuple(isr), controller_epoch)

