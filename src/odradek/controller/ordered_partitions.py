"""KIP-253 in the controller: ordered partition expansion and the marking of partitions for
deletion, for topics with enable.ordered.delivery=true (every other topic never gets here).

Expansion (KIP-253 part 2). CreatePartitions rewrites the topic znode; for an ordered topic the
controller then writes ``undeleted_partition_count`` into it, bumps the leader epoch of every
partition that already has a state znode (same leader, same ISR: brokers learn the new epoch and
the new count from one LeaderAndIsr, so every record a leader appends after the bump was routed
with the new count), and creates each new partition's state znode with
``leader_epoch_after_creation``: the epochs of those partitions *before* the bump. A consumer
turns its parent's epoch into the offset below which the parent still holds the moved keys.

Deletion marking (part 3). A topic znode whose ``undeleted_partition_count`` is below its
partition count marks the partitions at or past the count: each marked partition's state znode
gets ``leader_epoch_before_deletion`` (every undeleted partition's epoch before the bump) and the
undeleted partitions' epochs are bumped. A count below ``initial_partition_count`` is refused
(left unapplied, logged): linear hashing cannot map keys to fewer partitions than its base.

Crash safety: nothing here trusts what an earlier controller meant to do, only what ZooKeeper
holds. Every map written names epochs that were current when it was decided, and the plan's
last rule (``required_epochs``) bumps any partition whose epoch is not yet past every epoch a
map records for it. So a controller deposed between any two writes is followed by one that
re-reads and finishes: new partitions still without a state znode get a map of the epochs it
reads (bumped once more; recording a later epoch only makes a consumer wait a little longer,
never deliver early), marked partitions without a map get one, and bumps a deposed controller
did not make are made.

``plan`` is pure; ``OrderedPartitions`` applies a plan through the seams in the order above:
the count, then the marks and bumps (one round of conditional writes), then (by the caller) the
usual onNewPartitionCreation, which creates the state znodes with the maps recorded in the
context.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from odradek.common.metadata import LeaderAndIsr, PartitionEpochs, PartitionOrdering, TopicPartition
from odradek.controller.controller_context import ControllerContext
from odradek.controller.leader_and_isr_update import LeaderAndIsrUpdate
from odradek.controller.request_batch import ControllerBrokerRequestBatch
from odradek.controller.seams import ControllerZk

logger = logging.getLogger(__name__)

#: rounds of conditional writes before an epoch bump that keeps losing version races (its
#: leader rewriting the ISR) is given up until the topic's next event
MAX_BUMP_ATTEMPTS = 5


@dataclass
class OrderedPlan:
    """What one ordered topic needs, decided from its stored states alone."""

    #: why nothing is done (a count below the initial one, an expansion while partitions are
    #: marked for deletion); None when the plan applies
    refused: str | None = None
    #: the undeleted_partition_count to write into the topic znode, if it must change
    count_to_write: int | None = None
    #: new partitions (no state znode yet) -> the leaderEpochAfterCreation to create them with
    create: dict[int, PartitionEpochs] = field(default_factory=dict)
    #: marked partitions without leaderEpochBeforeDeletion -> the map to write
    mark: dict[int, PartitionEpochs] = field(default_factory=dict)
    #: partition -> the lowest leader epoch it must reach (one bump: every recorded epoch is at
    #: most the partition's current one)
    bump: dict[int, int] = field(default_factory=dict)

    @property
    def writes(self) -> bool:
        return bool(self.count_to_write is not None or self.mark or self.bump)


def _epochs(states: Mapping[int, LeaderAndIsr], partitions: Iterable[int]) -> PartitionEpochs:
    return tuple(sorted((p, states[p].leader_epoch) for p in partitions))


def plan(initial: int, undeleted: int | None, partitions: Iterable[int],
         states: Mapping[int, LeaderAndIsr],
         pending_creations: Mapping[int, PartitionEpochs] | None = None,
         applied_total: int | None = None) -> OrderedPlan:
    """The work an ordered topic needs: ``initial`` its initial_partition_count, ``undeleted``
    the topic znode's undeleted_partition_count (None: absent), ``partitions`` every partition
    of its assignment, ``states`` the stored state of those with a state znode.
    ``pending_creations``: maps this controller already decided for partitions not yet created
    (their replicas were down); reused while still valid, so a topic whose new partition cannot
    be created yet is not bumped again at each event. ``applied_total``: the partition count
    when this controller last applied the topic (None after a failover).

    A count below the partition count is a deletion or an expansion whose count is not written
    yet (CreatePartitions keeps the count it read). With ``applied_total`` it is a deletion
    when the count is below it, an expansion of the partitions past it otherwise. Without
    (a failover), a deletion when a partition past the count has a state znode, an expansion
    otherwise: the znodes alone cannot tell the two apart, so a deletion of partitions none of
    which was ever created, first read by a new controller, is taken for an expansion.
    Partitions past the count of a deletion are marked, and those without a state znode are
    never created; so partitions added while a deletion drains are marked at once (the CLI
    refuses such an expansion)."""
    parts = sorted(partitions)
    total = len(parts)
    result = OrderedPlan()
    if undeleted is not None and undeleted < initial:
        result.refused = (f"undeleted_partition_count {undeleted} is below the "
                          f"initial_partition_count {initial}")
        return result
    if undeleted is not None and undeleted > total:
        result.refused = (f"undeleted_partition_count {undeleted} exceeds the {total} "
                          f"partitions of the assignment")
        return result
    tail = [p for p in parts if undeleted is not None and p >= undeleted]
    if not tail or undeleted is None:
        deleting = False
    elif applied_total is not None:
        deleting = undeleted < applied_total or any(p in states for p in tail)
    else:
        deleting = any(p in states for p in tail)
    marked = tail if deleting else []
    existing = [p for p in parts if p in states]
    new = [p for p in parts if p not in states and p >= initial and p not in marked]
    if new and undeleted != total and not deleting:
        result.count_to_write = total
    for p in new:
        pending = (pending_creations or {}).get(p)
        names = {q for q, _ in pending} if pending is not None else set()
        result.create[p] = (pending if pending is not None and names == set(existing)
                            else _epochs(states, existing))
    undeleted_now = [p for p in existing if p not in marked]
    for p in marked:
        if p not in states or not undeleted_now:
            # never created: nothing to mark, and it never will be; or no undeleted partition
            # has a state yet: nothing to record (marked at the topic's next event once one has)
            continue
        ordering = states[p].ordering
        if ordering is None or not ordering.before_deletion:
            result.mark[p] = _epochs(states, undeleted_now)
    result.bump = required_epochs(states, result)
    return result


def required_epochs(states: Mapping[int, LeaderAndIsr], planned: OrderedPlan) -> dict[int, int]:
    """Every partition whose current epoch is not past an epoch some map records for it (stored
    or planned), with the epoch it must reach: a recorded epoch must end before the partition's
    current one, or consumers could not tell the old count's records from the new one's."""
    needed: dict[int, int] = {}

    def need(recorded: PartitionEpochs) -> None:
        for q, epoch in recorded:
            if q in states and states[q].leader_epoch <= epoch:
                needed[q] = max(needed.get(q, 0), epoch + 1)

    for lai in states.values():
        if lai.ordering is not None:
            need(lai.ordering.after_creation)
            need(lai.ordering.before_deletion)
    for recorded in planned.create.values():
        need(recorded)
    for recorded in planned.mark.values():
        need(recorded)
    return needed


class OrderedPartitions:
    """Applies ``plan`` for ordered topics through the controller's seams (event thread only)."""

    def __init__(self, ctx: ControllerContext, zk: ControllerZk,
                 batch: ControllerBrokerRequestBatch) -> None:
        self._ctx = ctx
        self._zk = zk
        self._batch = batch

    def reconcile(self, topics: Iterable[str]) -> None:
        """Bring each ordered topic of ``topics`` to what its znodes ask for; the caller then
        creates the new partitions (onNewPartitionCreation), whose maps are in the context.
        The topics' assignments, counts and stored states must be in the context, read
        during this event."""
        ctx = self._ctx
        plans: dict[str, OrderedPlan] = {}
        for topic in sorted(topics):
            initial = ctx.initial_partition_count(topic)
            if not ctx.is_ordered(topic) or initial is None \
                    or ctx.is_topic_queued_up_for_deletion(topic):
                continue
            tps = ctx.partitions_for_topic(topic)
            states = {tp.partition: lai for tp in tps
                      if (lai := ctx.partition_leadership(tp)) is not None}
            pending = {tp.partition: o.after_creation for tp in tps
                       if tp.partition not in states and (o := ctx.creation_ordering(tp)) is not None}
            decided = plan(initial, ctx.stored_undeleted_partition_count(topic),
                           [tp.partition for tp in tps], states, pending,
                           ctx.applied_partition_total(topic))
            if decided.refused is not None:
                logger.error("ordered delivery of topic %s: %s; left as it is", topic,
                             decided.refused)
                continue
            plans[topic] = decided
        if not plans:
            return
        counts = {t: p.count_to_write for t, p in plans.items() if p.count_to_write is not None}
        if counts:
            written = self._zk.set_undeleted_partition_counts(counts)
            for topic, stored in written.items():
                ctx.set_undeleted_partition_count(topic, stored.undeleted_partition_count)
                logger.info("topic %s: undeleted_partition_count %s", topic,
                            stored.undeleted_partition_count)
            for topic in counts.keys() - written.keys():
                # the znode changed since it was read: its watch brings the next event
                logger.info("topic %s changed while its count was written; deciding again",
                            topic)
                del plans[topic]
        failed = self._mark_and_bump(plans)
        for topic, decided in plans.items():
            if topic in failed:
                logger.warning("topic %s: could not bump the leader epochs of partitions %s; "
                               "its new partitions wait for the topic's next event", topic,
                               sorted(failed[topic]))
                continue
            count = ctx.stored_undeleted_partition_count(topic)
            advertised = ctx.undeleted_partition_count(topic)
            total = len(ctx.partitions_for_topic(topic))
            ctx.set_applied_partition_count(topic, count if count is not None else total, total)
            changed = advertised != ctx.undeleted_partition_count(topic)
            for partition, recorded in decided.create.items():
                ctx.put_creation_ordering(TopicPartition(topic, partition),
                                          PartitionOrdering(after_creation=recorded))
            for tp in ctx.partitions_for_topic(topic):
                if tp.partition not in decided.create:
                    ctx.drop_creation_ordering(tp)  # marked before it was ever created
            if decided.writes or changed:
                # KIP-253: every broker learns the topic's count (UpdateMetadata carries it)
                self._batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids(),
                                                ctx.partitions_for_topic(topic))

    def prepare_creation(self, topics: Iterable[str]) -> None:
        """Called by the partition state machine before it creates new partitions of ordered
        ``topics`` (whatever the event: a broker coming back, a reassignment, an election):
        each gets a leaderEpochAfterCreation naming the partitions that have a state znode now,
        with their epochs bumped if the map decided earlier no longer names them all."""
        self.reconcile(topics)

    def restore_orderings(self, tps: Iterable[TopicPartition]) -> None:
        """Write back KIP-253's maps into state znodes a partition leader rewrote without them
        (its ISR changes), from the context's cache (which kept them), each conditional on the
        version just read: a leader writing again meanwhile notifies again, and the next
        notification restores them. The epoch stays; the replicas get a LeaderAndIsr with the
        new znode version, which the leader's next ISR write must name."""
        ctx = self._ctx
        restored = {tp: lai for tp in tps if (lai := ctx.partition_leadership(tp)) is not None
                    and lai.ordering is not None}
        if not restored:
            return
        assignment_of = ctx.partition_replica_assignment
        told = []
        for tp, outcome in self._zk.update_leader_and_isr(restored).items():
            if isinstance(outcome, Exception):
                logger.warning("could not restore the KIP-253 maps of %s: %s", tp, outcome)
            else:
                ctx.put_partition_leadership(tp, outcome)
                told.append((assignment_of(tp), tp, outcome, assignment_of(tp)))
        # the leader must learn the znode version, or its next ISR write is refused
        self._batch.add_leader_and_isrs(told, is_new=False)

    def _mark_and_bump(self, plans: Mapping[str, OrderedPlan]) -> dict[str, set[int]]:
        """One round of conditional writes for every topic: the marks (same leader epoch, the
        map added) and the bumps (same leader and ISR, the epoch raised); the bumped
        partitions' replicas get a LeaderAndIsr. Returns, per topic, the partitions whose
        write was given up."""
        ctx = self._ctx
        epoch = ctx.epoch
        marks = {TopicPartition(t, p): m for t, pl in plans.items() for p, m in pl.mark.items()}
        bumps = {TopicPartition(t, p): e for t, pl in plans.items() for p, e in pl.bump.items()}
        tps = sorted(marks.keys() | bumps.keys())
        if not tps:
            return {}

        def decide(stored: dict[TopicPartition, LeaderAndIsr]
                   ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
            out: dict[TopicPartition, LeaderAndIsr | Exception] = {}
            for tp, lai in stored.items():
                new = lai
                recorded = marks.get(tp)
                if recorded is not None and (lai.ordering is None
                                             or not lai.ordering.before_deletion):
                    after = lai.ordering.after_creation if lai.ordering is not None else ()
                    new = new._replace(ordering=PartitionOrdering(after, recorded))
                target = bumps.get(tp)
                if target is not None and lai.leader_epoch < target:
                    new = new.new_leader(new.leader, new.isr, epoch)
                out[tp] = new
            return out

        before = {tp: ctx.partition_leadership(tp) for tp in tps}
        updated, failed = LeaderAndIsrUpdate(
            ctx, self._zk, tps, decide,
            leads_to_write=lambda tp, cached: cached.controller_epoch <= epoch,
            max_attempts=MAX_BUMP_ATTEMPTS).start().finish()
        assignment_of = ctx.partition_replica_assignment
        bumped = [tp for tp, lai in updated.items()
                  if (old := before.get(tp)) is None or lai.leader_epoch != old.leader_epoch]
        # every partition written is told, the marked ones too (same epoch, new znode version):
        # a leader whose ISR write names an older version than ours would have it refused
        written = [tp for tp, lai in updated.items()
                   if (old := before.get(tp)) is None or lai.zk_version != old.zk_version]
        self._batch.add_leader_and_isrs([(assignment_of(tp), tp, updated[tp], assignment_of(tp))
                                         for tp in written], is_new=False)
        if bumped:
            logger.info("KIP-253: leader epochs bumped for %s", [str(tp) for tp in bumped])
        out: dict[str, set[int]] = {}
        for tp in failed:
            out.setdefault(tp.topic, set()).add(tp.partition)
        return out
