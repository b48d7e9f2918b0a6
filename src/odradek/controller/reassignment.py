"""Partition reassignment: KafkaController.onPartitionReassignment (Kafka 2.4+, KIP-455) and
the code around it. Its steps carry the labels of Kafka's source.

Kafka's notation: RS is the partition's replica set, ORS its original replica set, TRS the
target (reassigned) replica set, AR the replicas being added (TRS - ORS), RR the replicas being
removed (ORS - TRS), ISR the in-sync replicas. In ``ReplicaAssignment``: ``replicas`` is RS,
``adding`` AR, ``removing`` RR, ``original_replicas`` ORS, ``target_replicas`` TRS.

Phase U, the assignment update (``_reassign``):
 U1. RS = ORS + TRS, with AR and RR, in ZooKeeper (the topic znode);
 U2. the same in memory;
 U3. replicas that a replaced or cancelled reassignment was adding and this one does not want
     are stopped and deleted (``_without_zombies``; one in the ISR is kept as a replica being
     removed instead).
Phase A, while TRS is not all in the ISR (``_reassign``):
 A1. LeaderAndIsr to every replica of RS, with that RS (the leader epoch bumped, so brokers
     take it);
 A2. AR -> NewReplica: the new replicas start and fetch from the leader.
 Then the wait: the leaders add the new replicas to the ISR as they catch up; their ISR changes
 reach the controller as IsrChangeNotification, and ``on_isr_change`` checks whether TRS is in
 the ISR (Kafka's isReassignmentComplete).
Phase B, once TRS is in the ISR (``_complete``):
 B1. AR -> OnlineReplica;
 B2. RS = TRS in memory;
 B3. a leader outside TRS (or dead) is replaced by the ReassignedPartitionLeaderSelector (a live
     in-sync replica of TRS); a leader in TRS gets a new leader epoch. Either way TRS hears the
     new RS;
 B4. RR -> OfflineReplica, which takes them out of the ISR;
 B5. RR -> NonExistentReplica: StopReplica with delete;
 B6. RS = TRS, AR = RR = [] in ZooKeeper;
 B7. the partition leaves /admin/reassign_partitions;
 B8. UpdateMetadata of the partition to every broker.

Kafka's example, ORS {1,2,3} and TRS {4,5,6} (both fixed throughout): the topic znode and the
partition state after each step that changes them (tests/controller/test_reassignment_steps.py
checks the sequence):

    after      RS              AR       RR       leader  ISR
    (start)    {1,2,3}         {}       {}       1       {1,2,3}
    U1         {4,5,6,1,2,3}   {4,5,6}  {1,2,3}  1       {1,2,3}
    caught up  {4,5,6,1,2,3}   {4,5,6}  {1,2,3}  1       {1,2,3,4,5,6}  (phase B follows)
    B3         {4,5,6,1,2,3}   {4,5,6}  {1,2,3}  4       {1,2,3,4,5,6}
    B4         {4,5,6,1,2,3}   {4,5,6}  {1,2,3}  4       {4,5,6}
    B6         {4,5,6}         {}       {}       4       {4,5,6}

(Kafka's table labels the second row "step A2", the state once phase A is done.)

The assignment in ZooKeeper changes to TRS last (B6) because until then it is the only durable
record of ORS: a controller that dies at any step leaves RS = ORS + TRS with AR and RR
(KIP-455's adding_replicas / removing_replicas in the topic znode), and the next one resumes
from there (``resume``). Each step is idempotent, so resuming one that was already done is
harmless.

Two ways in, as in Kafka 2.4+: the /admin/reassign_partitions znode in Kafka's JSON format
(``on_zk_reassignment``) and the AlterPartitionReassignments API (``trigger``), whose
cancellation (no target) moves the partition back to ORS. Unlike Kafka, which runs the steps
one partition at a time, every step here is one batch for all the partitions an event moves:
one ZooKeeper multi per write and one request per broker, so reassigning 1,000 partitions
costs a handful of round trips, not thousands.
"""
from __future__ import annotations

import logging
from typing import Iterable, Mapping

from odradek.common.metadata import ReplicaAssignment, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.events import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    UnknownPartitionError,
)
from odradek.controller.leader_and_isr_update import LeaderAndIsrUpdate
from odradek.controller.leader_selectors import ElectionStrategy
from odradek.controller.partition_state_machine import PartitionStateMachine
from odradek.controller.replica_state_machine import ReplicaStateMachine
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import ControllerZk
from odradek.controller.states import PartitionReplica, PartitionStatus, ReplicaStatus

logger = logging.getLogger(__name__)

_R = ReplicaStatus
#: rounds of the leader-epoch bump's conditional write before a partition is left for the
#: next event (a leader's concurrent ISR write is what makes one fail)
MAX_EPOCH_BUMP_ATTEMPTS = 3

#: per partition: None when the reassignment was started (or there was nothing to do), or
#: why it was refused
Results = dict[TopicPartition, Exception | None]


class ReassignmentManager:
    """Runs on the controller's event thread, over the controller's own state machines."""

    def __init__(self, ctx: ControllerContext, zk: ControllerZk,
                 partitions: PartitionStateMachine, replicas: ReplicaStateMachine,
                 batch: ControllerBrokerRequestBatch) -> None:
        self._ctx = ctx
        self._zk = zk
        self._partitions = partitions
        self._replicas = replicas
        self._batch = batch

    # -- entry points -------------------------------------------------------------------------
    def trigger(self, targets: Mapping[TopicPartition, tuple[int, ...] | None],
                through_znode: bool = False) -> Results:
        """AlterPartitionReassignments (Kafka's maybeTriggerPartitionReassignment): start,
        replace or (target None) cancel each partition's reassignment. What the API accepts
        overrides what /admin/reassign_partitions asked for those partitions, so they leave
        the znode (Kafka's maybeRemoveFromZkReassignment)."""
        results: Results = {}
        start: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in sorted(targets.items()):
            try:
                assignment = self._build(tp, target)
            except (UnknownPartitionError, InvalidReplicaAssignmentError,
                    NoReassignmentInProgressError) as exc:
                results[tp] = exc
                continue
            results[tp] = None
            if assignment is not None:
                start[tp] = assignment
        if start:
            logger.info("reassigning %d partitions: %s", len(start), _describe(start))
            self._reassign(start)
        # through the znode, what needs nothing done (already on those replicas) is done
        self._remove_from_znode([tp for tp, r in results.items() if r is None and (
            not through_znode or (tp not in start and not self._ctx.is_being_reassigned(tp)))])
        return results

    def on_zk_reassignment(self) -> set[TopicPartition]:
        """/admin/reassign_partitions changed (Kafka's processZkPartitionReassignment): start
        what it asks that is not already under way; refused entries leave the znode. Returns
        the partitions started."""
        requested = self._zk.get_partition_reassignments()
        if requested is None:
            return set()
        if not requested:  # malformed or empty: removed, so the admin can write it again
            self._zk.set_partition_reassignments({})
            return set()
        ctx = self._ctx
        new = {tp: target for tp, target in requested.items()
               if not (ctx.is_being_reassigned(tp)
                       and ctx.partition_full_replica_assignment(tp).target_replicas == target)}
        if not new:
            return set()
        results = self.trigger(new, through_znode=True)
        refused = {tp: r for tp, r in results.items() if r is not None}
        for tp, error in sorted(refused.items()):
            logger.warning("refusing the reassignment of %s to %s from %s: %s", tp,
                           list(requested[tp]), "/admin/reassign_partitions", error)
        if refused:
            self._remove_from_znode(refused)
        return {tp for tp, r in results.items() if r is None}

    def on_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        """The wait between phases A and B: partitions whose TRS has all joined the ISR go
        through phase B now (Kafka's PartitionReassignmentIsrChange). ``tps``' leaderships
        were just read."""
        ctx = self._ctx
        done = {tp: ctx.partition_full_replica_assignment(tp) for tp in tps
                if ctx.is_being_reassigned(tp)}
        done = {tp: a for tp, a in done.items() if self._caught_up(tp, a)}
        if done:
            self._complete(done)

    def on_brokers_started(self, broker_ids: Iterable[int]) -> None:
        """KafkaController.onBrokerStartup's last step: reassignments waiting for a replica on
        a broker that just started go on (its new replicas are told to start)."""
        ids = set(broker_ids)
        ctx = self._ctx
        waiting = {tp: a for tp in ctx.partitions_being_reassigned()
                   if not ids.isdisjoint((a := ctx.partition_full_replica_assignment(tp)).replicas)}
        if waiting:
            self._reassign(waiting)

    def resume(self) -> None:
        """At controller failover (initializePartitionReassignments): the znode's requests,
        then every reassignment the topic znodes show in progress, from the step it reached."""
        ctx = self._ctx
        self.abandon(ctx.topics_queued_for_deletion())
        started = self.on_zk_reassignment()
        pending = {tp: ctx.partition_full_replica_assignment(tp)
                   for tp in ctx.partitions_being_reassigned() if tp not in started}
        if pending:
            logger.info("resuming the reassignment of %d partitions: %s", len(pending),
                        _describe(pending))
            self._reassign(pending)

    def abandon(self, topics: Iterable[str]) -> None:
        """Topics queued for deletion end their reassignments where they stand: every replica,
        old and new, stays assigned, so the deletion deletes them all. (Kafka instead halts
        the deletion until the reassignments complete, which never happens when a partition
        of a topic being deleted loses its leader: such partitions are not elected.)"""
        ctx = self._ctx
        topics = set(topics)
        moving = [tp for tp in ctx.partitions_being_reassigned() if tp.topic in topics]
        if not moving:
            return
        logger.info("topics %s are being deleted: their reassignments of %d partitions end",
                    sorted({tp.topic for tp in moving}), len(moving))
        for tp in moving:
            ctx.update_partition_full_replica_assignment(
                tp, ReplicaAssignment(ctx.partition_full_replica_assignment(tp).replicas))
        self._remove_from_znode(moving)

    def list_reassignments(self, tps: Iterable[TopicPartition] | None
                           ) -> dict[TopicPartition, ReplicaAssignment]:
        """ListPartitionReassignments: the partitions (of ``tps``, or all) being reassigned."""
        ctx = self._ctx
        wanted = ctx.partitions_being_reassigned() if tps is None else sorted(tps)
        return {tp: ctx.partition_full_replica_assignment(tp) for tp in wanted
                if ctx.is_being_reassigned(tp)}

    # -- validation (Kafka's maybeBuildReassignment and validateReplicas) -------------------
    def _build(self, tp: TopicPartition, target: tuple[int, ...] | None
               ) -> ReplicaAssignment | None:
        """The assignment to move to; None when there is nothing to do (the partition already
        has exactly these replicas, or is already moving to them)."""
        ctx = self._ctx
        current = ctx.partition_full_replica_assignment(tp)
        if not current.replicas or ctx.is_being_deleted(tp):  # (a drained one too, KIP-253)
            raise UnknownPartitionError(f"partition {tp} does not exist")
        if target is None:
            if not current.is_being_reassigned:
                raise NoReassignmentInProgressError(f"no reassignment of {tp} is in progress")
            return current.reassign_to(current.original_replicas)
        target = tuple(target)
        if not target:
            raise InvalidReplicaAssignmentError(
                f"empty replica list for {tp} in the partition reassignment")
        if len(set(target)) != len(target):
            raise InvalidReplicaAssignmentError(
                f"duplicate replica ids in the reassignment of {tp}: {list(target)}")
        if any(r < 0 for r in target):
            raise InvalidReplicaAssignmentError(
                f"negative replica id in the reassignment of {tp}: {list(target)}")
        registered = ctx.live_or_shutting_down_broker_ids()
        if not registered.issuperset(target):
            raise InvalidReplicaAssignmentError(
                f"the reassignment of {tp} names brokers that are not alive: "
                f"{sorted(set(target) - registered)} (live brokers: {sorted(registered)})")
        if current.is_being_reassigned and current.target_replicas == target:
            return None
        if not current.is_being_reassigned and current.replicas == target:
            return None
        return current.reassign_to(target)

    # -- onPartitionReassignment: phases U, A and B -------------------------------------------
    def _reassign(self, assignments: dict[TopicPartition, ReplicaAssignment]) -> None:
        """KafkaController.onPartitionReassignment for a batch of partitions: phase U (U1-U3),
        then phase A (A1-A2) for those whose TRS is not yet in the ISR, phase B for the others."""
        ctx = self._ctx
        for tp, lai in self._zk.get_partition_states(sorted(assignments)).items():
            ctx.put_partition_leadership(tp, lai)
        assignments, unneeded = self._without_zombies(assignments)
        # U1-U2: RS = ORS + TRS with AR and RR, in ZooKeeper then in memory (only where it
        # changes: resuming rewrites nothing)
        changed = {tp: a for tp, a in assignments.items()
                   if ctx.partition_full_replica_assignment(tp) != a}
        if changed:
            self._zk.set_replica_assignments(changed)
            for tp, a in changed.items():
                ctx.update_partition_full_replica_assignment(tp, a)
        if unneeded:  # U3
            self._stop_removed_replicas(unneeded)
        # a cancellation, or a target equal to ORS, has nothing to wait for
        done = {tp: a for tp, a in assignments.items()
                if not a.is_being_reassigned or self._caught_up(tp, a)}
        started = {tp: a for tp, a in assignments.items() if tp not in done}
        if started:
            # A1: every replica of RS hears RS = ORS + TRS, under a new leader epoch
            self._bump_leader_epochs(started)
            # A2: AR -> NewReplica (a resumed reassignment's are already started)
            adding = [PartitionReplica(tp, r) for tp, a in started.items() for r in a.adding]
            self._replicas.handle_state_changes(
                [pr for pr, s in zip(adding, ctx.replica_states(adding)) if s is _R.NON_EXISTENT],
                _R.NEW)
            # a partition that never had a leader (its replicas have all been down since its
            # creation) is brought online by a new replica that is live: there is no data to
            # lose, and otherwise it would wait for an old replica's broker
            leaderless = [tp for tp in started if ctx.partition_state(tp) is PartitionStatus.NEW]
            if leaderless:
                self._partitions.handle_state_changes(leaderless, PartitionStatus.ONLINE,
                                                      ElectionStrategy.OFFLINE)
                self.on_isr_change(leaderless)
            # then the wait for TRS to join the ISR: on_isr_change (or on_brokers_started)
            # runs phase B
        if done:
            self._complete(done)

    def _without_zombies(self, assignments: dict[TopicPartition, ReplicaAssignment]
                         ) -> tuple[dict[TopicPartition, ReplicaAssignment], list[PartitionReplica]]:
        """Replicas that an earlier, replaced (or cancelled) reassignment of a partition was
        adding and this one does not want (KIP-455's zombie replicas): those out of the ISR
        are returned to be stopped and deleted now, as Kafka's U3 does. One in the ISR is kept as a
        replica being removed instead, so it goes only once leadership has moved to a target
        replica in the ISR: Kafka stops it at once, which, when it is the last in-sync replica
        (its original replicas died while it led), leaves the partition offline and deletes
        the only up-to-date copy."""
        ctx = self._ctx
        kept: dict[TopicPartition, ReplicaAssignment] = {}
        unneeded: list[PartitionReplica] = []
        for tp, a in assignments.items():
            lai = ctx.partition_leadership(tp)
            isr = lai.isr if lai is not None else ()
            zombies = [r for r in ctx.partition_full_replica_assignment(tp).replicas
                       if r not in a.replicas]
            keep = tuple(r for r in zombies if r in isr)
            unneeded.extend(PartitionReplica(tp, r) for r in zombies if r not in isr)
            kept[tp] = ReplicaAssignment(a.replicas + keep, a.adding, a.removing + keep) if keep else a
        return kept, unneeded

    def _complete(self, assignments: dict[TopicPartition, ReplicaAssignment]) -> None:
        """Phase B (B1-B8) for partitions whose TRS is all in the ISR."""
        ctx = self._ctx
        # B1: AR -> OnlineReplica
        adding = [PartitionReplica(tp, r) for tp, a in assignments.items() for r in a.adding]
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(adding, ctx.replica_states(adding)) if s is not _R.ONLINE],
            _R.ONLINE)
        # B2: RS = TRS in memory
        for tp, a in assignments.items():
            ctx.update_partition_full_replica_assignment(tp, ReplicaAssignment(a.target_replicas))
        # B3: the leader moves into TRS if it is not there or not alive, else TRS hears
        # RS = TRS under a new leader epoch
        move, keep = [], {}
        for tp, a in assignments.items():
            lai = ctx.partition_leadership(tp)
            if lai is None or lai.leader not in a.target_replicas \
                    or not ctx.is_replica_online(lai.leader, tp):
                move.append(tp)
            else:
                keep[tp] = a
        failed = {tp: r for tp, r in self._partitions.handle_state_changes(
            sorted(move), PartitionStatus.ONLINE, ElectionStrategy.REASSIGN).items()
            if isinstance(r, Exception)}
        failed.update(self._bump_leader_epochs(keep))
        # not one live in-sync replica of TRS to lead (it died since it joined the ISR): a
        # partition with replicas to remove stays mid-reassignment, which a broker's return or
        # the next ISR change picks up again (its old replicas must keep serving meanwhile);
        # one with none (a cancellation) is done, and offline like any leaderless partition
        failed = {tp: e for tp, e in failed.items() if assignments[tp].removing}
        if failed:
            for tp in failed:
                ctx.update_partition_full_replica_assignment(tp, assignments[tp])
            logger.warning("reassignment of %s waits: %s", sorted(map(str, failed)),
                           "; ".join(f"{tp}: {e}" for tp, e in sorted(failed.items())))
            assignments = {tp: a for tp, a in assignments.items() if tp not in failed}
            if not assignments:
                return
        # B4-B5: RR -> OfflineReplica (out of the ISR) -> NonExistentReplica
        self._stop_removed_replicas([PartitionReplica(tp, r) for tp, a in assignments.items()
                                     for r in a.removing])
        # the requests so far go out now: once B6 is written nothing records that ORS's
        # replicas were ever replicas, so if this controller were deposed at B6 or B7
        # (which drops an event's unsent requests) the next one would never stop them, and a
        # stale leader among them could go on taking writes from clients with old metadata
        self._batch.send_requests(ctx.epoch)
        # B6: RS = TRS (AR and RR empty) in ZooKeeper, the last record of ORS gone
        self._zk.set_replica_assignments({tp: ReplicaAssignment(a.target_replicas)
                                          for tp, a in assignments.items()})
        # B7: the partitions leave /admin/reassign_partitions
        self._remove_from_znode(assignments)
        # B8: UpdateMetadata: every broker learns the partitions' new replicas and leadership
        self._batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids(), sorted(assignments))
        logger.info("reassignment of %d partitions completed: %s", len(assignments),
                    ", ".join(f"{tp} -> {list(a.target_replicas)}"
                              for tp, a in sorted(assignments.items())[:20]))

    def _stop_removed_replicas(self, replicas: list[PartitionReplica]) -> None:
        """Kafka's stopRemovedReplicasOfReassignedPartition: Offline (StopReplica, out of the
        ISR), then deleted (StopReplica with delete, merged with the first into one request
        per broker). Like Kafka, the deletion is not waited for: a broker that misses it (dead)
        keeps a stray log, which it never serves since the partition is no longer its."""
        ctx = self._ctx
        states = ctx.replica_states(replicas)
        self._replicas.handle_state_changes(
            [pr for pr, s in zip(replicas, states) if s in (_R.NEW, _R.ONLINE, _R.OFFLINE)],
            _R.OFFLINE)
        offline = [pr for pr in replicas if ctx.replica_state(pr) is _R.OFFLINE]
        self._replicas.handle_state_changes(offline, _R.DELETION_STARTED)
        self._replicas.handle_state_changes(offline, _R.DELETION_SUCCESSFUL)
        self._replicas.handle_state_changes(offline, _R.NON_EXISTENT)

    def _bump_leader_epochs(self, assignments: Mapping[TopicPartition, ReplicaAssignment]
                            ) -> dict[TopicPartition, Exception]:
        """Kafka's updateLeaderEpochAndSendRequest for a batch: the leader and ISR kept, the
        leader epoch bumped (brokers ignore a LeaderAndIsr that does not raise it), and every
        replica of the partition's current RS told (A1, and B3 for a leader that stays). Returns the partitions it could not do.
        The states were read at the start of the event; a leader's ISR write since fails the
        conditional write, and the retry reads again (LeaderAndIsrUpdate)."""
        ctx = self._ctx
        epoch = ctx.epoch
        updated, failed = LeaderAndIsrUpdate(
            ctx, self._zk, sorted(assignments),
            decide=lambda stored: {tp: lai.new_leader(lai.leader, lai.isr, epoch)
                                   for tp, lai in stored.items()},
            leads_to_write=lambda tp, cached: cached.controller_epoch <= epoch,
            max_attempts=MAX_EPOCH_BUMP_ATTEMPTS).start().finish()
        assignment_of = ctx.partition_replica_assignment
        self._batch.add_leader_and_isrs([(assignment_of(tp), tp, lai, assignment_of(tp))
                                         for tp, lai in updated.items()], is_new=False)
        return failed

    # -- helpers ------------------------------------------------------------------------------
    def _caught_up(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        """Kafka's isReassignmentComplete: every replica of TRS is in the ISR."""
        lai = self._ctx.partition_leadership(tp)
        return lai is not None and set(assignment.target_replicas).issubset(lai.isr)

    def _remove_from_znode(self, tps: Iterable[TopicPartition]) -> None:
        """B7 (Kafka's removePartitionsFromZkReassignment): rewritten without ``tps``,
        deleted once empty; untouched when it names none of them."""
        tps = set(tps)
        if not tps:
            return
        requested = self._zk.get_partition_reassignments()
        if requested is None or tps.isdisjoint(requested):
            return
        self._zk.set_partition_reassignments({tp: t for tp, t in requested.items()
                                              if tp not in tps})


def _describe(assignments: Mapping[TopicPartition, ReplicaAssignment], most: int = 20) -> str:
    shown = [f"{tp} {list(a.original_replicas)} -> {list(a.target_replicas)}"
             for tp, a in sorted(assignments.items())[:most]]
    more = len(assignments) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
