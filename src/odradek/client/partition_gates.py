"""What an ordered topic's partition waits for before its records may be delivered (KIP-253
part 8), decided from the topic's layout, offsets and the group's positions alone (pure: the
OrderedConsumer gathers the inputs and applies the answers).

Two kinds of wait, both offset barriers rather than sealed segments:

- **Creation (step 4).** A partition P created by an expansion took some keys of exactly one
  existing partition, its parent (``creation_blocker``: the nearest ancestor among the
  partitions of its leader_epoch_after_creation map). The parent's records of those keys before
  the expansion end where the parent's leader epoch of the map ends: OffsetsForLeaderEpoch of
  that epoch gives the *lower threshold*, an offset in the parent. P delivers nothing until the
  group's position in the parent reaches it. Only a partition read from its start waits: a
  member resuming P from a committed offset past its start knows the group was past the
  barrier. Once open, the gate stays open for the assignment.
- **Deletion (step 5).** A partition Q marked for deletion hands its keys to one undeleted
  partition P (``deletions_blocking``). P's records up to the end of P's leader epoch recorded
  in Q's leader_epoch_before_deletion map (the *upper threshold*, an offset in P) were written
  before the deletion and flow freely; P's records from there on wait until the group has read
  Q to its end (Q takes no new records once marked, so its high watermark is final).

Thresholds are exclusive end offsets (OffsetsForLeaderEpoch's answer: the first offset after
the epoch), so "reached" is ``position >= threshold`` and a record at ``offset < threshold``
is before the barrier. A parent whose barrier records were deleted by retention has a log start
past the threshold, so any position the group reports for it passes: retention never wedges a
child (docs/architecture.md records this choice).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from odradek.common.linear_hashing import ancestors_of, creation_blocker, deletions_blocking

#: no limit: every offset may be delivered
OPEN = None


@dataclass(frozen=True)
class TopicLayout:
    """An ordered topic as the consumer last read it."""

    initial: int
    undeleted: int
    total: int
    #: partition -> its leader_epoch_after_creation map (partitions an expansion created)
    after_creation: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    #: partition -> its leader_epoch_before_deletion map (partitions marked for deletion)
    before_deletion: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    #: cleanup.policy includes compact (KIP-253 part 9's tombstones)
    compacted: bool = False

    @property
    def marked(self) -> list[int]:
        return [q for q in range(self.undeleted, self.total) if q in self.before_deletion]


def split_epoch(layout: TopicLayout, partition: int, ancestor: int) -> int | None:
    """The leader epoch ``ancestor`` had when the key space of ``partition`` (one of its
    descendants) was split off it: the entry for ``ancestor`` in the map of the child of
    ``ancestor`` on the way down to ``partition``; None if unknown."""
    path = [partition, *ancestors_of(partition, layout.initial)]
    if ancestor not in path[1:]:
        return None
    child = path[path.index(ancestor) - 1]
    return layout.after_creation.get(child, {}).get(ancestor)


#: KIP-253 part 9: the header OrderedProducer puts on the tombstones it writes into a moved
#: key's old partitions, only so compaction there drops the key's old values
MIGRATION_TOMBSTONE_HEADER = "odradek.migration"


def is_migration_tombstone(value: bytes | None, headers: list[tuple[str, bytes]] | None) -> bool:
    """Whether a record is such a tombstone, which OrderedConsumer never delivers: past the
    split, in a partition its key no longer belongs to, it would delete the key's live value.
    Told by its header rather than by the topic's current layout, which a later shrink can
    change so that the key belongs to that partition again."""
    return value is None and bool(headers) and any(name == MIGRATION_TOMBSTONE_HEADER for name, _ in headers or ())


def may_be_waited_on(layout: TopicLayout, partition: int) -> bool:
    """Whether another partition's gate can wait on the group's position in ``partition``: it
    is the parent of a partition an expansion created (step 4.2), or marked for deletion
    (step 5.1)."""
    if partition in layout.marked:
        return True
    return any(creation_blocker(child, layout.initial, creation.keys()) == partition
               for child, creation in layout.after_creation.items())


@dataclass(frozen=True)
class EpochLookups:
    """The OffsetsForLeaderEpoch lookups a partition's gate needs: (partition, epoch) pairs."""

    #: (parent, parent's epoch before the expansion) or None
    parent: tuple[int, int] | None
    #: marked partition -> this partition's epoch before the deletion
    deletions: dict[int, int]


def lookups_for(layout: TopicLayout, partition: int, reads_from_start: bool) -> EpochLookups:
    """Which epochs to turn into offsets for ``partition``'s gate (step 4.1-4.2, 5.1-5.2)."""
    parent = None
    creation = layout.after_creation.get(partition)
    if reads_from_start and creation:
        blocker = creation_blocker(partition, layout.initial, creation.keys())
        parent = (blocker, creation[blocker])
    deletions: dict[int, int] = {}
    if partition < layout.undeleted:
        for q in deletions_blocking(partition, layout.initial, layout.undeleted, layout.marked):
            epoch = layout.before_deletion[q].get(partition)
            if epoch is not None:
                deletions[q] = epoch
    return EpochLookups(parent, deletions)


@dataclass
class Gate:
    """One owned partition's barriers, offsets resolved."""

    #: (parent, lower threshold in the parent) until the group passes it; None once open
    parent: tuple[int, int] | None = None
    #: marked partition -> upper threshold in this partition, until the group drains it
    deletions: dict[int, int] = field(default_factory=dict)

    def limit(self, group_position: Callable[[int], int | None], drained: Callable[[int], bool]) -> int | None:
        """The first offset that may not be delivered yet: -1 while the parent's barrier is
        closed (nothing may be), the lowest upper threshold of an undrained marked partition,
        or OPEN. Opens barriers as their conditions hold (they never close again)."""
        if self.parent is not None:
            parent, threshold = self.parent
            position = group_position(parent)
            if position is None or position < threshold:
                return -1
            self.parent = None
        for q in [q for q in self.deletions if drained(q)]:
            del self.deletions[q]
        return min(self.deletions.values()) if self.deletions else OPEN

    def waits_on(self) -> list[int]:
        """The partitions whose group positions this gate needs."""
        return ([self.parent[0]] if self.parent is not None else []) + sorted(self.deletions)
