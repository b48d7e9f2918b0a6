"""Kafka's PartitionStateMachine, on batches of partitions.

Legal transitions are data (``VALID_PREVIOUS``), checked before anything happens; the effects
of a transition are ZooKeeper writes through ``ControllerZk`` and requests added to the
``ControllerBrokerRequestBatch``. Both ZooKeeper writes are one call per batch, because a broker
failure can move thousands of partitions at once and per-partition writes would dominate
failover latency (one ZooKeeper write per partition, as the replication design's latency
analysis found).
"""
from __future__ import annotations

import functools
import logging
from typing import Callable, Iterable

from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.leader_and_isr_update import LeaderAndIsrUpdate, PendingStateChange
from odradek.controller.leader_selectors import (
    Election,
    ElectionStrategy,
    StateChangeFailedError,
    select_controlled_shutdown,
    select_offline,
    select_preferred,
    select_reassigned,
)
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import ControllerZk
from odradek.controller.state_change_log import StateChangeLog
from odradek.controller.states import PartitionStatus

logger = logging.getLogger(__name__)


_P = PartitionStatus
_NAME = {status: status.value for status in PartitionStatus}
VALID_PREVIOUS: dict[PartitionStatus, frozenset[PartitionStatus]] = {
    _P.NEW: frozenset({_P.NON_EXISTENT}),
    _P.ONLINE: frozenset({_P.NEW, _P.ONLINE, _P.OFFLINE}),
    _P.OFFLINE: frozenset({_P.NEW, _P.ONLINE, _P.OFFLINE}),
    _P.NON_EXISTENT: frozenset({_P.OFFLINE}),
}


class IllegalStateTransitionError(Exception):
    """The target state does not list the current state among its valid previous states."""


PartitionResults = dict[TopicPartition, "LeaderAndIsr | Exception"]


class PartitionStateMachine:
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
        #: KIP-253: decides the leaderEpochAfterCreation of new partitions of ordered topics
        #: (bumping the epochs it names) right before they are created; set by the Controller
        self.prepare_ordered_creation: Callable[[Iterable[str]], None] | None = None

    def initialize_partition_states(self) -> None:
        """Kafka's PartitionStateMachine.initializePartitionState: no stored leader -> New;
        stored leader alive -> Online; else Offline."""
        for tp in self._ctx.all_partitions():
            lai = self._ctx.partition_leadership(tp)
            if lai is None:
                state = _P.NEW
            elif self._ctx.is_replica_online(lai.leader, tp):
                state = _P.ONLINE
            else:
                state = _P.OFFLINE
            self._ctx.put_partition_state(tp, state)

    def trigger_online_partition_state_change(self) -> PartitionResults:
        """Every New or Offline partition -> Online with the offline selector."""
        return self.start_online_partition_state_change()[1].finish()

    def start_online_partition_state_change(
        self,
    ) -> tuple[list[TopicPartition], PendingStateChange[TopicPartition, LeaderAndIsr | Exception]]:
        """``trigger_online_partition_state_change`` started (``start_state_changes``), with
        the partitions it moves."""
        tps = self._ctx.partitions_to_bring_online()
        return tps, self.start_state_changes(tps, _P.ONLINE, ElectionStrategy.OFFLINE)

    def handle_state_changes(
        self,
        partitions: Iterable[TopicPartition],
        target: PartitionStatus,
        selector: ElectionStrategy | None = None,
    ) -> PartitionResults:
        """Move ``partitions`` to ``target``; returns the failures, and for Online the new
        leadership of each partition that got one. Invalid and failed partitions keep their
        state. ``ControllerMovedError`` from the seam propagates: the whole event is void."""
        return self.start_state_changes(partitions, target, selector).finish()

    def start_state_changes(
        self,
        partitions: Iterable[TopicPartition],
        target: PartitionStatus,
        selector: ElectionStrategy | None = None,
    ) -> PendingStateChange[TopicPartition, LeaderAndIsr | Exception]:
        """``handle_state_changes`` up to sending the elections' ZooKeeper writes; the pending
        change's ``finish()`` waits for them, retries the partitions that lost a version race
        and applies the results. In between the caller may decide changes of *other*
        partitions while ZooKeeper works (Controller._elect_then_take_offline)."""
        results: PartitionResults = {}
        valid: list[TopicPartition] = []
        for tp in partitions:
            current = self._ctx.partition_state(tp)
            if current in VALID_PREVIOUS[target]:
                valid.append(tp)
            else:
                self._fail(tp, current, target, IllegalStateTransitionError(
                    f"partition {tp} must be in one of "
                    f"{sorted(s.value for s in VALID_PREVIOUS[target])} to move to "
                    f"{target.value}, but is in {current.value}"), results)
        if target is not _P.ONLINE:
            previous = self._ctx.swap_partition_states(valid, target)
            self._log.partition_transitions(self._controller_id, self._ctx.epoch, valid,
                                            [_NAME[p] for p in previous], _NAME[target])
            return PendingStateChange(results)
        new = [tp for tp in valid if self._ctx.partition_state(tp) is _P.NEW]
        to_elect = [tp for tp in valid if self._ctx.partition_state(tp) is not _P.NEW]
        if new:
            self._initialize_leader_and_isr(new, results)
        if not to_elect:
            return PendingStateChange(results)
        if selector is None:
            raise ValueError("electing a leader for an existing partition needs a selector")
        elections: dict[TopicPartition, tuple[Election, LeaderAndIsr]] = {}
        update = self._start_elections(to_elect, selector, elections)
        return PendingStateChange(results, update, functools.partial(
            self._apply_elections, selector, elections, results))

    # -- NewPartition -> OnlinePartition ----------------------------------------------------
    def _initialize_leader_and_isr(
        self, tps: list[TopicPartition], results: PartitionResults
    ) -> None:
        """First live replica leads, all live replicas form the ISR, all in one create multi."""
        to_create: dict[TopicPartition, LeaderAndIsr] = {}
        ordered = {tp.topic for tp in tps if self._ctx.needs_creation_ordering(tp)}
        if ordered and self.prepare_ordered_creation is not None:
            self.prepare_ordered_creation(ordered)
        for tp in tps:
            assignment = self._ctx.partition_replica_assignment(tp)
            live = tuple(r for r in assignment if self._ctx.is_replica_online(r, tp))
            if not live:
                self._fail(tp, _P.NEW, _P.ONLINE, StateChangeFailedError(
                    f"no assigned replica of {tp} is alive: assigned {list(assignment)}, live "
                    f"brokers {sorted(self._ctx.live_broker_ids())}"), results)
                continue
            ordering = self._ctx.creation_ordering(tp)
            if ordering is None and self._ctx.needs_creation_ordering(tp):
                # KIP-253: the existing partitions' epochs must be bumped first (Controller's
                # ordered expansion does it, then records the map this creation writes)
                self._fail(tp, _P.NEW, _P.ONLINE, StateChangeFailedError(
                    f"{tp} of an ordered topic waits for its leaderEpochAfterCreation"), results)
                continue
            to_create[tp] = LeaderAndIsr(live[0], self._ctx.first_leader_epoch(tp), live, self._ctx.epoch, 0,
                                         ordering)
        if not to_create:
            return
        told = []
        online: list[TopicPartition] = []
        leaderships: list[LeaderAndIsr] = []
        for tp, created in self._zk.create_partition_states(to_create).items():
            if isinstance(created, Exception):
                self._fail(tp, _P.NEW, _P.ONLINE, created, results)
                continue
            self._ctx.put_partition_leadership(tp, created)
            told.append((created.isr, tp, created, self._ctx.partition_replica_assignment(tp)))
            online.append(tp)
            leaderships.append(created)
            results[tp] = created
        self._batch.add_leader_and_isrs(told, is_new=True)
        previous = self._ctx.swap_partition_states(online, _P.ONLINE)
        self._log.partition_transitions(self._controller_id, self._ctx.epoch, online,
                                        [_NAME[p] for p in previous], _NAME[_P.ONLINE],
                                        leaderships)

    # -- OfflinePartition/OnlinePartition -> OnlinePartition --------------------------------
    def _start_elections(
        self, tps: list[TopicPartition], strategy: ElectionStrategy,
        elections: dict[TopicPartition, tuple[Election, LeaderAndIsr]],
    ) -> LeaderAndIsrUpdate:
        """Elect a leader for each of ``tps`` in rounds of conditional writes, recording each
        partition's last election with the stored state it was decided on in ``elections``.

        The first round decides on the cached state where that yields a clean election (a
        stale cache then fails the conditional write and the retry re-reads: leadership_reads.py);
        a partition the cache cannot elect, or would elect uncleanly, is read first, since
        the leader may have changed the ISR since (Kafka's ReplicaManager.maybeShrinkIsr) and
        the topic's unclean setting is read fresh too. Retry rounds read everything.
        """
        live = self._ctx.live_broker_ids()  # is_replica_online, without a call per replica
        epoch = self._ctx.epoch
        clean: dict[TopicPartition, Election] = {}  # first round: decided on the cache

        def elects_cleanly(tp: TopicPartition, cached: LeaderAndIsr) -> bool:
            if cached.controller_epoch > epoch:
                return False
            try:
                clean[tp] = self._elect(tp, cached, strategy, live, allow_unclean=False)
            except StateChangeFailedError:
                return False
            return True

        def decide(states: dict[TopicPartition, LeaderAndIsr]
                   ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
            decided: dict[TopicPartition, LeaderAndIsr | Exception] = {}
            for tp, election in clean.items():  # the cache's elections first, the read ones after
                elections[tp] = (election, states[tp])
                decided[tp] = election.leader_and_isr
            undecided = {tp: lai for tp, lai in states.items() if tp not in clean}
            clean.clear()
            if strategy is ElectionStrategy.OFFLINE:
                self._refresh_configs_for_unclean(undecided)
            for tp, lai in undecided.items():
                try:
                    election = self._elect(tp, lai, strategy, live)
                except StateChangeFailedError as e:
                    decided[tp] = e
                    continue
                elections[tp] = (election, lai)
                decided[tp] = election.leader_and_isr
            return decided

        return LeaderAndIsrUpdate(self._ctx, self._zk, tps, decide, elects_cleanly).start()

    def _apply_elections(
        self, strategy: ElectionStrategy,
        elections: dict[TopicPartition, tuple[Election, LeaderAndIsr]], results: PartitionResults,
        updated: dict[TopicPartition, LeaderAndIsr], failed: dict[TopicPartition, Exception],
    ) -> None:
        """The elected partitions go Online and their receivers are told; the failed keep
        their state."""
        assignment_of = self._ctx.partition_replica_assignment
        told = []
        elected: list[TopicPartition] = []
        leaderships: list[LeaderAndIsr] = []
        for tp, lai in updated.items():
            election, decided_on = elections[tp]
            if lai.leader not in decided_on.isr and lai.leader >= 0:
                logger.warning("unclean leader election for %s: broker %d was not in the "
                               "ISR %s; messages committed after it fell behind may be lost",
                               tp, lai.leader, list(decided_on.isr))
            told.append((election.receivers, tp, lai, assignment_of(tp)))
            elected.append(tp)
            leaderships.append(lai)
            results[tp] = lai
        previous = self._ctx.swap_partition_states(elected, _P.ONLINE)
        self._log.elections(self._controller_id, self._ctx.epoch, strategy.value, elected,
                            [_NAME[p] for p in previous], leaderships)
        self._batch.add_leader_and_isrs(told, is_new=False)
        for tp, error in failed.items():
            self._fail(tp, self._ctx.partition_state(tp), _P.ONLINE, error, results)

    def _refresh_configs_for_unclean(self, states: dict[TopicPartition, LeaderAndIsr]) -> None:
        """Read unclean.leader.election.enable fresh, as Kafka 2.4 does, for topics that need
        it (no live ISR member): a config change then takes effect at the next election."""
        topics = {tp.topic for tp, lai in states.items()
                  if not any(self._ctx.is_replica_online(r, tp) for r in lai.isr)}
        if topics:
            for topic, config in self._zk.get_topic_configs(topics).items():
                self._ctx.put_topic_config(topic, config)

    def _elect(self, tp: TopicPartition, current: LeaderAndIsr, strategy: ElectionStrategy,
               live: frozenset[int], allow_unclean: bool = True) -> Election:
        """``live``: the brokers that may lead (``ControllerContext.live_broker_ids``)."""
        ctx = self._ctx
        assignment = ctx.partition_replica_assignment(tp)
        match strategy:
            case ElectionStrategy.OFFLINE:
                # an ISR member that bounced is back, log and all: it is elected cleanly once
                # its startup is handled in the same event, so no unclean election meanwhile
                unclean = (allow_unclean and ctx.unclean_leader_election_enabled(tp.topic)
                           and ctx.returning_brokers.isdisjoint(current.isr))
                return select_offline(current, assignment, live, unclean, ctx.epoch)
            case ElectionStrategy.OFFLINE_UNCLEAN:
                return select_offline(current, assignment, live, allow_unclean, ctx.epoch)
            case ElectionStrategy.REASSIGN:
                # KafkaController.onPartitionReassignment sets RS to TRS in memory first (B2).
                return select_reassigned(current, assignment, live, ctx.epoch)
            case ElectionStrategy.PREFERRED:
                return select_preferred(current, assignment, live, ctx.epoch)
            case ElectionStrategy.CONTROLLED_SHUTDOWN:
                return select_controlled_shutdown(current, assignment,
                                                  ctx.registered_broker_ids,
                                                  ctx.shutting_down_broker_ids(), ctx.epoch)

    # -- bookkeeping ------------------------------------------------------------------------
    def _fail(self, tp: TopicPartition, current: PartitionStatus, target: PartitionStatus,
              error: Exception, results: PartitionResults) -> None:
        results[tp] = error
        self._log.failed_transition(self._controller_id, self._ctx.epoch, tp, current.value,
                                    target.value, error)
