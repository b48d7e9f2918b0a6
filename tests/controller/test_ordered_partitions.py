"""KIP-253 in the controller: ordered expansion and deletion marking (ordered_partitions.py),
the pure plan alone and the Controller over the recording fakes."""
from __future__ import annotations

import dataclasses
from collections import Counter

from controller_fakes import FakeZk, new_controller, tp
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.common.metadata import LeaderAndIsr, PartitionOrdering
from odradek.controller.controller_context import ENABLE_ORDERED_DELIVERY
from odradek.controller.events import IsrChangeNotification, PartitionModifications, Startup
from odradek.controller.ordered_partitions import OrderedPlan, plan, required_epochs
from odradek.protocol.controller_api import LeaderAndIsrRequest, UpdateMetadataRequest

ORDERED = {ENABLE_ORDERED_DELIVERY: "true"}


def _state(epoch: int, ordering: PartitionOrdering | None = None) -> LeaderAndIsr:
    return LeaderAndIsr(1, epoch, (1, 2), 1, 0, ordering)


# -- the pure plan ------------------------------------------------------------------------------
def test_an_expansion_records_the_epochs_before_the_bump_and_bumps_every_existing_partition(
) -> None:
    states = {0: _state(3), 1: _state(5), 2: _state(0)}
    decided = plan(3, None, range(5), states)
    assert decided.refused is None
    assert decided.count_to_write == 5
    assert decided.create == {3: ((0, 3), (1, 5), (2, 0)), 4: ((0, 3), (1, 5), (2, 0))}
    assert decided.bump == {0: 4, 1: 6, 2: 1}
    assert not decided.mark


def test_a_lower_count_marks_the_partitions_past_it_once() -> None:
    states = {p: _state(p) for p in range(6)}
    decided = plan(3, 4, range(6), states, applied_total=6)
    assert decided.mark == {4: ((0, 0), (1, 1), (2, 2), (3, 3)),
                            5: ((0, 0), (1, 1), (2, 2), (3, 3))}
    assert decided.bump == {0: 1, 1: 2, 2: 3, 3: 4}
    assert decided.count_to_write is None and not decided.create
    # done (the maps written, the epochs bumped): nothing more to do
    marked = {p: _state(p + 1) if p < 4 else _state(p, PartitionOrdering((), decided.mark[p]))
              for p in range(6)}
    again = plan(3, 4, range(6), marked, applied_total=6)
    assert not again.writes and not again.create


def test_a_count_below_the_initial_one_or_past_the_partitions_is_refused() -> None:
    states = {p: _state(0) for p in range(4)}
    assert "below the initial_partition_count" in (plan(3, 2, range(4), states).refused or "")
    assert "exceeds" in (plan(3, 5, range(4), states).refused or "")


def test_partitions_added_past_a_stale_count_are_an_expansion_unless_applied_before() -> None:
    states = {p: _state(1) for p in range(4)}
    # CreatePartitions kept the count 4 it read: 4 and 5 are new
    for applied in (4, None):
        expansion = plan(2, 4, range(6), states, applied_total=applied)
        assert expansion.create.keys() == {4, 5} and expansion.count_to_write == 6
    # the controller applied 6 partitions before (4 and 5 never created: their replicas were
    # down), and the count was lowered to 4: a deletion
    deleting = plan(2, 4, range(6), states, applied_total=6)
    assert not deleting.create and deleting.count_to_write is None


def test_a_crash_between_the_marks_and_the_bumps_is_repaired() -> None:
    """The maps were written by a controller that was deposed before bumping: the next one
    bumps what they name."""
    recorded = ((0, 2), (1, 2))
    states = {0: _state(2), 1: _state(2), 2: _state(0, PartitionOrdering((), recorded))}
    decided = plan(2, 2, range(3), states, applied_total=3)
    assert not decided.mark and decided.bump == {0: 3, 1: 3}


def _apply(states: dict[int, LeaderAndIsr], decided: OrderedPlan) -> dict[int, LeaderAndIsr]:
    """What OrderedPartitions does with a plan, on the stored states."""
    after = dict(states)
    for p, target in decided.bump.items():
        assert after[p].leader_epoch + 1 >= target, "one bump must be enough"
        after[p] = after[p]._replace(leader_epoch=after[p].leader_epoch + 1)
    for p, recorded in decided.mark.items():
        old = after[p].ordering
        after[p] = after[p]._replace(ordering=PartitionOrdering(
            old.after_creation if old else (), recorded))
    for p, recorded in decided.create.items():
        after[p] = _state(0, PartitionOrdering(recorded))
    return after


@settings(max_examples=300, deadline=None)
@given(initial=st.integers(1, 4), extra=st.integers(0, 6),
       epochs=st.lists(st.integers(0, 9), min_size=10, max_size=10),
       undeleted=st.one_of(st.none(), st.integers(1, 10)), data=st.data())
def test_plans_settle_with_every_recorded_epoch_below_the_current_one(
        initial: int, extra: int, epochs: list[int], undeleted: int | None,
        data: st.DataObject) -> None:
    """Whatever the stored states (some partitions created, some maps written by earlier
    controllers), applying plans settles within three events (a second one only where a mark
    was written while no undeleted partition had a state yet, which the KIP writes again
    once one has), and then every map names only epochs below the current ones."""
    total = initial + extra
    created = data.draw(st.sets(st.integers(0, total - 1)), label="created")
    states = {p: _state(epochs[p]) for p in sorted(created)}
    for p in sorted(created):  # maps an earlier controller wrote, naming epochs <= current
        if p >= initial and data.draw(st.booleans()):
            named = tuple((q, data.draw(st.integers(0, states[q].leader_epoch)))
                          for q in sorted(created) if q != p)
            states[p] = states[p]._replace(ordering=PartitionOrdering(named))
    for _ in range(3):
        decided = plan(initial, undeleted, range(total), states, applied_total=total)
        if decided.refused is not None:
            assert undeleted is not None and (undeleted < initial or undeleted > total)
            return
        if not (decided.bump or decided.mark or decided.create):
            break
        states = _apply(states, decided)
    else:
        raise AssertionError(f"no fixpoint after three plans: {states}")
    assert required_epochs(states, decided) == {}
    for p, lai in states.items():
        for q, epoch in (lai.ordering.after_creation + lai.ordering.before_deletion
                         if lai.ordering else ()):
            if q in states:
                assert epoch < states[q].leader_epoch, (p, q, states)


# -- the controller -------------------------------------------------------------------------------
def _cluster(config: dict[str, str] | None) -> tuple[FakeZk, object, object]:
    zk = FakeZk()
    for b in (1, 2, 3):
        zk.register_broker(b)
    zk.create_topic("t", {0: (1, 2), 1: (2, 3)}, config)
    controller, channel, _ = new_controller(zk)
    controller.process(Startup(epoch=1, epoch_zk_version=0))
    return zk, controller, channel


def _add_partitions(zk: FakeZk, replicas: dict[int, tuple[int, ...]]) -> None:
    old = zk.topics["t"]
    zk.topics["t"] = dataclasses.replace(old, partitions={**old.partitions, **replicas})


def test_an_ordered_expansion_writes_the_count_then_bumps_then_creates_with_the_map() -> None:
    zk, controller, channel = _cluster(ORDERED)
    before = {p: zk.states[tp("t", p)].leader_epoch for p in (0, 1)}
    zk.calls.clear()
    channel.sent.clear()  # type: ignore[attr-defined]
    _add_partitions(zk, {2: (3, 1), 3: (1, 2)})
    controller.process(PartitionModifications("t"))  # type: ignore[attr-defined]

    writes = [name for name, _ in zk.calls if name in (
        "set_undeleted_partition_counts", "update_leader_and_isr", "create_partition_states")]
    assert writes == ["set_undeleted_partition_counts", "update_leader_and_isr",
                      "create_partition_states"]
    assert zk.topics["t"].undeleted_partition_count == 4
    for p in (0, 1):
        assert zk.states[tp("t", p)].leader_epoch == before[p] + 1
    for p in (2, 3):
        ordering = zk.states[tp("t", p)].ordering
        assert ordering is not None and ordering.after_creation == ((0, before[0]), (1, before[1]))
    sent = channel.sent  # type: ignore[attr-defined]
    lai = [r for _, r in sent if isinstance(r, LeaderAndIsrRequest)]
    um = [r for _, r in sent if isinstance(r, UpdateMetadataRequest)]
    assert lai and all(r.partition_counts == (("t", 4, 2),) for r in lai)
    assert um and all(r.partition_counts == (("t", 4, 2),) for r in um)
    # one request of each kind per broker, as for every event
    assert set(Counter((b, type(r).__name__) for b, r in sent).values()) == {1}


def test_a_topic_without_ordered_delivery_keeps_kafkas_expansion() -> None:
    zk, controller, channel = _cluster(None)
    before = {p: zk.states[tp("t", p)] for p in (0, 1)}
    zk.calls.clear()
    channel.sent.clear()  # type: ignore[attr-defined]
    _add_partitions(zk, {2: (3, 1)})
    controller.process(PartitionModifications("t"))  # type: ignore[attr-defined]

    assert not zk.calls_named("set_undeleted_partition_counts")
    assert not zk.calls_named("update_leader_and_isr")
    assert {p: zk.states[tp("t", p)] for p in (0, 1)} == before
    assert zk.states[tp("t", 2)].ordering is None
    assert zk.topics["t"].undeleted_partition_count is None
    assert all(r.partition_counts == ()  # type: ignore[attr-defined]
               for _, r in channel.sent)  # type: ignore[attr-defined]


def test_a_lower_count_marks_partitions_bumps_the_undeleted_and_tells_every_broker() -> None:
    zk, controller, channel = _cluster(ORDERED)
    _add_partitions(zk, {2: (3, 1), 3: (1, 2)})
    controller.process(PartitionModifications("t"))  # type: ignore[attr-defined]
    epochs = {p: zk.states[tp("t", p)].leader_epoch for p in range(4)}
    channel.sent.clear()  # type: ignore[attr-defined]
    zk.topics["t"] = dataclasses.replace(zk.topics["t"], undeleted_partition_count=3)
    controller.process(PartitionModifications("t"))  # type: ignore[attr-defined]

    marked = zk.states[tp("t", 3)]
    assert marked.ordering is not None
    assert marked.ordering.before_deletion == tuple((p, epochs[p]) for p in range(3))
    assert marked.leader_epoch == epochs[3]  # a marked partition keeps its epoch
    assert {p: zk.states[tp("t", p)].leader_epoch for p in range(3)} == {
        p: epochs[p] + 1 for p in range(3)}
    sent = channel.sent  # type: ignore[attr-defined]
    assert {b for b, r in sent if isinstance(r, UpdateMetadataRequest)
            and r.partition_counts == (("t", 3, 2),)} == {1, 2, 3}


def test_a_count_below_the_initial_one_is_left_unapplied() -> None:
    zk, controller, channel = _cluster(ORDERED)
    states = dict(zk.states)
    zk.calls.clear()
    channel.sent.clear()  # type: ignore[attr-defined]
    zk.topics["t"] = dataclasses.replace(zk.topics["t"], undeleted_partition_count=1)
    controller.process(PartitionModifications("t"))  # type: ignore[attr-defined]
    assert zk.states == states
    assert not zk.calls_named("update_leader_and_isr")
    assert not channel.sent  # type: ignore[attr-defined]


def test_maps_a_leader_isr_write_dropped_are_written_back() -> None:
    """Today's broker rewrites the state znode without KIP-253's maps when it changes the
    ISR; the controller kept them and puts them back on the ISR change notification."""
    zk, controller, channel = _cluster(ORDERED)
    _add_partitions(zk, {2: (3, 1)})
    controller.process(PartitionModifications("t"))  # type: ignore[attr-defined]
    kept = zk.states[tp("t", 2)].ordering
    assert kept is not None and kept.after_creation
    zk.leaders_drop_orderings = True
    zk.leader_isr_write(tp("t", 2), (3,))
    assert zk.states[tp("t", 2)].ordering is None
    zk.isr_notifications.add(tp("t", 2))
    channel.sent.clear()  # type: ignore[attr-defined]
    controller.process(IsrChangeNotification())  # type: ignore[attr-defined]
    stored = zk.states[tp("t", 2)]
    assert stored.ordering == kept and stored.isr == (3,)
    # its replicas learn the znode version the leader's next ISR write must name
    told = {b: s.zk_version for b, r in channel.sent  # type: ignore[attr-defined]
            if isinstance(r, LeaderAndIsrRequest) for s in r.partition_states
            if s.tp == tp("t", 2)}
    assert told == {3: stored.zk_version, 1: stored.zk_version}
