"""The leader's ISR decisions (Partition.isr_change_wanted) on a real log."""
from __future__ import annotations

import time
from pathlib import Path

from odradek.broker.partition import Partition
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig

TP = TopicPartition("t", 0)
LAG_S = 30.0


def leader(tmp_path: Path, isr: tuple[int, ...], epoch: int = 1,
           noted: list[TopicPartition] | None = None) -> Partition:
    p = Partition(TP, Log.open(tmp_path / "t-0", LogConfig()), broker_id=1,
                  on_isr_candidate=None if noted is None else noted.append)
    p.apply_state(PartitionState(TP, 1, 1, epoch, isr, 0, (1, 2, 3)))
    return p


def test_a_follower_that_died_caught_up_is_not_written_back_into_the_isr(tmp_path: Path) -> None:
    """Idle partition: followers 2 and 3 sit at offset 0 = the log end. The controller takes
    dead broker 3 out of the ISR (new epoch, same leader); 3 never fetches again, so no
    expansion may propose it, however caught up its last known position looks."""
    p = leader(tmp_path, (1, 2, 3))
    p.update_follower_position(2, 0)
    p.update_follower_position(3, 0)
    p.apply_state(PartitionState(TP, 1, 1, 2, (1, 2), 1, (1, 2, 3)))
    p.update_follower_position(2, 0)
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) is None


def test_a_caught_up_fetch_from_outside_the_isr_proposes_it_until_it_joins(tmp_path: Path) -> None:
    noted: list[TopicPartition] = []
    p = leader(tmp_path, (1, 2), noted=noted)
    p.update_follower_position(3, 0)
    p.update_follower_position(3, 0)  # the same candidate is announced once
    assert noted == [TP]
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) == frozenset({1, 2, 3})
    # the write lost a race: proposed again without another fetch (an idle partition's
    # session would not visit it), until it is in the ISR
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) == frozenset({1, 2, 3})
    p.apply_isr(frozenset({1, 2, 3}), 1)
    assert not p.has_isr_candidates
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) is None


def test_an_unregistered_candidate_is_dropped_until_it_fetches_again(tmp_path: Path) -> None:
    p = leader(tmp_path, (1, 2))
    p.update_follower_position(3, 0)
    p.drop_isr_candidates({3})
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) is None
    p.update_follower_position(3, 0)
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) == frozenset({1, 2, 3})


def test_watching_sessions_hear_of_changes_and_dropped_sessions_are_forgotten(tmp_path: Path) -> None:
    """Partitions hold fetch sessions weakly: an evicted session is neither kept alive nor
    told anything; a live one is told of the role change, once however often it watched."""
    import gc

    from odradek.broker.fetch_session import FetchSession

    p = leader(tmp_path, (1, 2, 3))
    kept, dropped = FetchSession(1, 1), FetchSession(2, 1)
    for session in (kept, kept, dropped):
        p.watch(session)
    del dropped, session
    gc.collect()
    p.apply_state(PartitionState(TP, 1, 2, 2, (1, 2), 1, (1, 2, 3)))
    assert kept.dirty == {TP}
    assert len(p._sessions) == 1


def test_a_follower_that_catches_up_while_its_removal_is_written_is_proposed_again(
        tmp_path: Path) -> None:
    """Leader 1 decides to drop followers 2 and 3 (never fetched); before the ISR write
    returns, 2's first fetch arrives caught up, when 2 is still in the ISR. After the write
    the partition's fetch sessions must visit it again, and that visit proposes 2."""
    from odradek.broker.fetch_session import FetchSession

    noted: list[TopicPartition] = []
    p = leader(tmp_path, (1, 2, 3), noted=noted)
    session = FetchSession(7, 1)
    p.watch(session)
    session.dirty.clear()
    later = time.monotonic() + LAG_S + 1.0
    wanted = p.isr_change_wanted(LAG_S, later)
    assert wanted == frozenset({1})
    p.update_follower_position(2, 0)  # caught up, but still an ISR member: no candidate yet
    assert noted == []
    p.apply_isr(wanted, 1)
    assert session.dirty == {TP}  # the session will visit the partition on its next fetch
    p.update_follower_position(2, 0)  # that visit, at the session's fetch offset
    assert noted == [TP]
    assert p.isr_change_wanted(LAG_S, later, shrink=False) == frozenset({1, 2})


def test_a_follower_caught_up_at_its_fetch_joins_and_holds_the_high_watermark_meanwhile(tmp_path: Path) -> None:
    """Kafka's maybeExpandIsr judges a follower at its fetch, and its maximal ISR (KIP-497)
    counts the follower for the high watermark from then on. Follower 3 (outside the ISR)
    fetches at the high watermark; before the ISR round, records arrive and in-sync follower
    2 fetches them. Re-judged in the round, 3 was dropped (and, throttled while outside the
    ISR, stayed out for as long as records kept arriving), so it still joins. Left out of the
    high watermark meanwhile, records 5-9 were acknowledged without it, and 3, once in the
    ISR, could be elected and truncate them: a fault run lost acknowledged records so."""
    from odradek.protocol.records import build_batch

    p = leader(tmp_path, (1, 2))
    p.append_as_leader(build_batch([(None, b"x")] * 5))
    p.update_follower_position(2, 5)
    assert p.high_watermark == 5
    p.update_follower_position(3, 5)  # caught up at this fetch: a candidate
    assert p.in_maximal_isr(3) and not p.in_maximal_isr(4)
    p.append_as_leader(build_batch([(None, b"y")] * 5))
    p.update_follower_position(2, 10)
    assert p.high_watermark == 5          # 3 does not hold 5-9 yet
    assert p.isr_change_wanted(LAG_S, 0.0, shrink=False) == frozenset({1, 2, 3})
    p.apply_isr(frozenset({1, 2, 3}), 1)
    assert p.high_watermark == 5
    p.update_follower_position(3, 10)
    assert p.high_watermark == 10


def test_a_dropped_candidate_no_longer_holds_the_high_watermark(tmp_path: Path) -> None:
    from odradek.protocol.records import build_batch

    p = leader(tmp_path, (1, 2))
    p.update_follower_position(3, 0)
    p.append_as_leader(build_batch([(None, b"x")] * 3))
    p.update_follower_position(2, 3)
    assert p.high_watermark == 0
    p.drop_isr_candidates({3})            # its broker is not registered: it may not join
    assert p.high_watermark == 3


def test_latest_offset_is_not_available_while_a_new_leaders_high_watermark_lags(tmp_path: Path) -> None:
    """Kafka's Partition.fetchOffsetForTimestamp: a new leader whose high watermark is below
    the offset its epoch began at answers "latest" (and times past the last fetchable record)
    with OFFSET_NOT_AVAILABLE, never with the lagging high watermark, which is below offsets
    consumers may have committed under the old leader."""
    from odradek.broker.kafka_apis import _offset_for
    from odradek.protocol.records import build_batch

    p = Partition(TP, Log.open(tmp_path / "t-0", LogConfig()), broker_id=1)
    p.apply_state(PartitionState(TP, 1, 2, 1, (1, 2), 0, (1, 2)))  # a follower of 2
    p.append_as_follower(build_batch([(b"k", b"v")] * 5), leader_high_watermark=3)
    assert p.high_watermark == 3
    p.apply_state(PartitionState(TP, 1, 1, 2, (1, 2), 1, (1, 2)))  # elected, its epoch starts at 5
    assert _offset_for(p, -1, False) is None
    assert _offset_for(p, 2**50, False) is None
    assert _offset_for(p, -2, False) == 0
    p.update_follower_position(2, 5)  # the follower has it all: the high watermark catches up
    assert p.high_watermark == 5
    assert _offset_for(p, -1, False) == 5
    assert _offset_for(p, 2**50, False) == -1
