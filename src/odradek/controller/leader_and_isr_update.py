"""A batch of conditional LeaderAndIsr writes in rounds, and a state change waiting for one.

Both state machines change partition state znodes the same way: the partition state machine's
elections (Kafka's PartitionStateMachine.doElectLeaderForPartitions) and the replica state
machine's ISR shrinks (ReplicaStateMachine.doRemoveReplicasFromIsr). Each round decides every
partition's next state from its stored one, writes them all in one batch, each conditional on
the znode version it was decided from, and re-reads and decides again the partitions that lost a
version race (their leader changed the ISR meanwhile: Kafka's ReplicaManager.maybeShrinkIsr),
up to a bound, so a partition whose leader keeps rewriting cannot stall the event thread.
The first round decides on the cached state where that leads to a write (leadership_reads.py).

Both are split at the first round's writes: ``start()`` sends them and returns, so the
controller can decide other partitions' changes while ZooKeeper applies them
(Controller._elect_then_take_offline); ``finish()`` waits for them and runs the retry rounds.
"""
from __future__ import annotations

from typing import Callable, Generic, Iterable, TypeVar

from odradek.common.metadata import LeaderAndIsr, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.leader_selectors import StateChangeFailedError
from odradek.controller.leadership_reads import states_for_writes
from odradek.controller.seams import ControllerZk, PendingLeaderAndIsrWrites

#: Rounds of writes before a partition that keeps losing version races is given up.
MAX_ATTEMPTS = 5

#: Given the stored states (present, written by no newer controller), each partition's next
#: state, or why it has none. A next state equal to the stored one needs no write.
Decide = Callable[[dict[TopicPartition, LeaderAndIsr]],
                  dict[TopicPartition, "LeaderAndIsr | Exception"]]
#: Applies an update's outcome: the new (or unchanged) states and the failures.
Apply = Callable[[dict[TopicPartition, LeaderAndIsr], dict[TopicPartition, Exception]], None]


class LeaderAndIsrUpdate:
    """Conditional LeaderAndIsr writes for ``tps``, in up to ``max_attempts`` rounds.

    ``leads_to_write(tp, cached)``: whether the cached state decides ``tp`` with a write, so the
    first round may take it from the cache (``leadership_reads.states_for_writes``); ``decide``
    (``Decide``) gives each round's next states. ``updated`` and ``failed`` fill as rounds are
    collected: every written state goes into the context's cache when its write succeeds."""

    def __init__(self, ctx: ControllerContext, zk: ControllerZk, tps: Iterable[TopicPartition],
                 decide: Decide, leads_to_write: Callable[[TopicPartition, LeaderAndIsr], bool],
                 max_attempts: int = MAX_ATTEMPTS) -> None:
        self._ctx = ctx
        self._zk = zk
        self._tps = list(tps)
        self._decide = decide
        self._leads_to_write = leads_to_write
        self._max_attempts = max_attempts
        self._attempts = 0
        self._writing: PendingLeaderAndIsrWrites | None = None
        #: the partitions done, with their new state (or their stored one where it was already
        #: what the decision asked for), in the order they were done
        self.updated: dict[TopicPartition, LeaderAndIsr] = {}
        #: the partitions given up: no stored state, a newer controller's, no decision, or
        #: still losing version races after the last round
        self.failed: dict[TopicPartition, Exception] = {}

    def start(self) -> LeaderAndIsrUpdate:
        """Read what the cache cannot decide, decide, and send the first round's writes."""
        self._send_round(self._tps)
        return self

    def finish(self) -> tuple[dict[TopicPartition, LeaderAndIsr], dict[TopicPartition, Exception]]:
        """Wait for the writes, run the retry rounds; returns ``(updated, failed)``."""
        remaining = self._collect()
        while remaining and self._attempts < self._max_attempts:
            self._send_round(list(remaining))
            remaining = self._collect()
        for tp, error in remaining.items():
            self.failed[tp] = StateChangeFailedError(
                f"gave up updating the leader and ISR of {tp} after {self._attempts} "
                f"attempts: {error}")
        return self.updated, self.failed

    def _send_round(self, tps: list[TopicPartition]) -> None:
        ctx = self._ctx
        stored = (states_for_writes(ctx, self._zk, tps, self._leads_to_write)
                  if self._attempts == 0 else self._zk.get_partition_states(tps))
        if ctx.has_orderings:  # KIP-253's maps survive a leader's ISR rewrite
            known = ctx.with_known_ordering
            stored = {tp: known(tp, lai) if lai[5] is None else lai for tp, lai in stored.items()}
        self._attempts += 1
        epoch = ctx.epoch
        current: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in tps:
            lai = stored.get(tp)
            if lai is None:
                self.failed[tp] = StateChangeFailedError(
                    f"LeaderAndIsr information doesn't exist for partition {tp}")
            elif lai.controller_epoch > epoch:
                self.failed[tp] = StateChangeFailedError(
                    f"{tp}'s state was written by controller epoch {lai.controller_epoch}, "
                    f"newer than ours ({epoch}): another controller is active")
            else:
                current[tp] = lai
        writes: dict[TopicPartition, LeaderAndIsr] = {}
        for tp, decided in self._decide(current).items():
            if isinstance(decided, Exception):
                self.failed[tp] = decided
            elif decided == current[tp]:
                self.updated[tp] = decided
                ctx.put_partition_leadership(tp, decided)
            else:
                writes[tp] = decided
        self._writing = self._zk.start_update_leader_and_isr(writes) if writes else None

    def _collect(self) -> dict[TopicPartition, Exception]:
        """The round's results: successes into ``updated`` and the cache; returns the
        partitions to retry with their write's error."""
        writing, self._writing = self._writing, None
        if writing is None:
            return {}
        retry: dict[TopicPartition, Exception] = {}
        put = self._ctx.put_partition_leadership
        for tp, outcome in writing.result().items():
            if isinstance(outcome, Exception):
                retry[tp] = outcome
            else:
                self.updated[tp] = outcome
                put(tp, outcome)
        return retry


K = TypeVar("K")
V = TypeVar("V")


class PendingStateChange(Generic[K, V]):
    """A state machine's batch of transitions (``start_state_changes``) whose LeaderAndIsr
    writes may still be in flight. ``finish()`` waits for them, has the machine ``apply`` their
    outcome (context, requests, state-change log) and returns the machine's results: every
    transition's outcome or only the failures, as the machine's ``handle_state_changes`` does.

    Writes committed before a later round failed (ZooKeeper connection loss) are applied all
    the same, so the controller still tells brokers of them (Controller._run sends the batch of
    an event that raised)."""

    def __init__(self, results: dict[K, V], update: LeaderAndIsrUpdate | None = None,
                 apply: Apply | None = None) -> None:
        self._results = results
        self._update = update
        self._apply = apply

    def finish(self) -> dict[K, V]:
        update, self._update = self._update, None
        if update is not None and self._apply is not None:
            try:
                update.finish()
            finally:
                self._apply(update.updated, update.failed)
        return self._results
