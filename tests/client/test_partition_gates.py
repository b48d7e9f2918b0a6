"""KIP-253 part 8's gates alone: what a partition waits for, and when it opens."""
from __future__ import annotations

from odradek.client.partition_gates import OPEN, Gate, TopicLayout, lookups_for, may_be_waited_on


def test_a_created_partition_read_from_its_start_waits_for_its_one_parent() -> None:
    # 4 -> 6: partitions 4 and 5 took keys of 0 and 1; the map holds the epochs before the bump
    layout = TopicLayout(4, 6, 6, after_creation={4: {0: 3, 1: 5, 2: 0, 3: 0}, 5: {0: 3, 1: 5, 2: 0, 3: 0}})
    assert lookups_for(layout, 4, reads_from_start=True).parent == (0, 3)
    assert lookups_for(layout, 5, reads_from_start=True).parent == (1, 5)
    assert lookups_for(layout, 5, reads_from_start=False).parent is None  # resumed past its start
    assert lookups_for(layout, 1, reads_from_start=True).parent is None   # an initial partition


def test_the_parent_gate_opens_only_when_the_group_passed_the_threshold_and_stays_open() -> None:
    gate = Gate(parent=(0, 100))
    positions = {0: None}
    assert gate.limit(lambda p: positions[p], lambda p: False) == -1
    positions[0] = 99
    assert gate.limit(lambda p: positions[p], lambda p: False) == -1
    positions[0] = 100
    assert gate.limit(lambda p: positions[p], lambda p: False) is OPEN
    positions[0] = 5  # a new owner resuming behind: the gate stays open
    assert gate.limit(lambda p: positions[p], lambda p: False) is OPEN
    assert gate.waits_on() == []


def test_a_deletion_lets_records_before_the_barrier_through_and_holds_the_rest_until_drained() -> None:
    # 8 -> 6: 6 and 7 are marked; their keys go to 2 and 3 (their parents); 2 waits on 6 only
    layout = TopicLayout(4, 6, 8, before_deletion={6: {p: 7 for p in range(6)}, 7: {p: 9 for p in range(6)}})
    assert lookups_for(layout, 2, reads_from_start=False).deletions == {6: 7}
    assert lookups_for(layout, 3, reads_from_start=False).deletions == {7: 9}
    assert lookups_for(layout, 0, reads_from_start=False).deletions == {}
    gate = Gate(deletions={6: 250})
    drained = {6: False}
    assert gate.limit(lambda p: None, lambda p: drained[p]) == 250
    assert gate.waits_on() == [6]
    drained[6] = True
    assert gate.limit(lambda p: None, lambda p: drained[p]) is OPEN


def test_a_closed_parent_gate_holds_everything_even_below_a_deletion_barrier() -> None:
    gate = Gate(parent=(1, 10), deletions={7: 3})
    assert gate.limit(lambda p: 0, lambda p: False) == -1
    assert gate.limit(lambda p: 10, lambda p: False) == 3
    assert gate.waits_on() == [7]


def test_migration_tombstones_are_told_by_their_header_alone() -> None:
    from odradek.client.partition_gates import MIGRATION_TOMBSTONE_HEADER, is_migration_tombstone

    assert is_migration_tombstone(None, [(MIGRATION_TOMBSTONE_HEADER, b"1")])
    assert not is_migration_tombstone(None, None)                      # the application's tombstone
    assert not is_migration_tombstone(b"v", [(MIGRATION_TOMBSTONE_HEADER, b"1")])
    assert not is_migration_tombstone(None, [("other", b"1")])


def test_only_parents_of_created_partitions_and_marked_partitions_may_be_waited_on() -> None:
    # 4 -> 6 (4 and 5 split off 0 and 1), then 6 -> 5 marks 5 for deletion
    layout = TopicLayout(4, 5, 6, after_creation={4: {0: 3, 1: 5, 2: 0, 3: 0}, 5: {0: 3, 1: 5, 2: 0, 3: 0}},
                         before_deletion={5: {p: 7 for p in range(5)}})
    assert [p for p in range(6) if may_be_waited_on(layout, p)] == [0, 1, 5]
    assert not any(may_be_waited_on(TopicLayout(4, 4, 4), p) for p in range(4))
