"""Producer-state snapshots (Kafka's ProducerStateManager .snapshot files) on a real log: a
partition opened again replays only the batches after its newest snapshot and gets the state a
replay of the whole log gives; a snapshot that cannot be trusted (past the log end, below the
log start, damaged, or past a truncation) is never used."""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest

from odradek.broker import producer_state_snapshots
from odradek.broker.partition import Partition, _batches_with_markers
from odradek.broker.producer_state import ProducerStateManager
from odradek.common.metadata import PartitionState, TopicPartition
from odradek.log.log import Log, LogConfig
from odradek.protocol.records import TRANSACTIONAL_FLAG, build_batch

TP = TopicPartition("t", 0)


@pytest.fixture(autouse=True)
def small_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_state_snapshots, "INTERVAL_BATCHES", 10)


def leader(directory: Path) -> Partition:
    p = Partition(TP, Log.open(directory, LogConfig()), broker_id=1)
    p.apply_state(PartitionState(TP, 1, 1, 1, (1,), 0, (1,)))
    return p


def reopened(p: Partition) -> Partition:
    p.close()
    p.log.close()
    return leader(p.log.dir)


def full_replay(log_: Log) -> dict[str, Any]:
    state = ProducerStateManager()
    state.rebuild(_batches_with_markers(log_), high_watermark=log_.log_end_offset)
    return state.to_snapshot()


def state_of(p: Partition) -> dict[str, Any]:
    """The partition's producer state, with the markers below the log end forgotten as a full
    replay at that high watermark forgets them (the rest must be equal)."""
    p.producers.last_stable_offset(p.log_end_offset)
    return p.producers.to_snapshot()


def write_history(p: Partition, rounds: int) -> None:
    """Idempotent producers 1-3, transactional producer 7 committing and aborting, plain records."""
    seq = {1: 0, 2: 0, 3: 0, 7: 0}
    for r in range(rounds):
        for pid in (1, 2, 3):
            p.append_as_leader(build_batch([(b"k", b"v%d" % r)] * 2, producer_id=pid, producer_epoch=0,
                                           base_sequence=seq[pid]))
            seq[pid] += 2
        p.append_as_leader(build_batch([(b"k", b"t%d" % r)], producer_id=7, producer_epoch=0,
                                       base_sequence=seq[7], attributes=TRANSACTIONAL_FLAG))
        seq[7] += 1
        if r % 3 != 2:   # every third transaction is left open until the next round's marker
            p.append_marker(7, 0, commit=r % 2 == 0, coordinator_epoch=1)
        p.append_as_leader(build_batch([(None, b"plain")]))


def test_a_state_written_and_read_back_is_the_same_state(tmp_path: Path) -> None:
    p = leader(tmp_path / "t-0")
    write_history(p, rounds=6)   # round 5 leaves its transaction open
    state = p.producers
    back = ProducerStateManager.from_snapshot(json.loads(json.dumps(state.to_snapshot())))
    assert back.to_snapshot() == state.to_snapshot() and state.to_snapshot()["producers"]
    end = p.log_end_offset
    assert back.last_stable_offset(end) == state.last_stable_offset(end) < end   # a transaction open
    assert back.aborted_transactions(0, end) == state.aborted_transactions(0, end) != []


def test_a_reopened_partition_replays_only_the_batches_after_its_newest_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = leader(tmp_path / "t-0")
    write_history(p, rounds=20)
    p.append_as_leader(build_batch([(b"k", b"open")], producer_id=7, producer_epoch=0, base_sequence=20,
                                   attributes=TRANSACTIONAL_FLAG))
    snapshots = producer_state_snapshots.offsets(p.log.dir)
    assert len(snapshots) == producer_state_snapshots.KEEP and snapshots[-1] < p.log_end_offset
    expected, lso = full_replay(p.log), p.last_stable_offset
    assert state_of(p) == expected

    replayed_from: list[int | None] = []
    real = Log.iter_batches

    def spy(self: Log, from_offset: int | None = None) -> Any:
        replayed_from.append(from_offset)
        return real(self, from_offset)
    monkeypatch.setattr(Log, "iter_batches", spy)
    again = reopened(p)
    assert replayed_from == [snapshots[-1]]
    assert state_of(again) == expected
    assert again.last_stable_offset == lso and again.producers.ongoing_transactions() != {}


def test_a_clean_shutdown_snapshot_covers_the_tail(tmp_path: Path) -> None:
    p = leader(tmp_path / "t-0")
    write_history(p, rounds=4)
    p.write_producer_snapshot()
    assert producer_state_snapshots.offsets(p.log.dir)[-1] == p.log_end_offset
    expected = full_replay(p.log)
    assert state_of(reopened(p)) == expected


def test_a_truncation_drops_the_snapshots_past_it_and_rebuilds_the_same_state(tmp_path: Path) -> None:
    p = leader(tmp_path / "t-0")
    write_history(p, rounds=20)
    newest = producer_state_snapshots.offsets(p.log.dir)[-1]
    p.truncate_to(newest - 5)
    assert all(o <= newest - 5 for o in producer_state_snapshots.offsets(p.log.dir))
    assert state_of(p) == full_replay(p.log)
    assert state_of(reopened(p)) == full_replay(p.log)


def test_a_damaged_or_untrustworthy_snapshot_is_not_used(tmp_path: Path) -> None:
    p = leader(tmp_path / "t-0")
    write_history(p, rounds=20)
    expected = full_replay(p.log)
    older, newest = producer_state_snapshots.offsets(p.log.dir)
    path = p.log.dir / f"{newest:020d}.snapshot"
    path.write_text(path.read_text().replace('"epoch"', '"epoc"').replace("[1,", "[9,", 1))  # CRC no longer matches
    # one past the log end, as after a crash that lost the log's unflushed tail
    past = p.log_end_offset + 100
    text = json.dumps({"version": 1, "offset": past, "state": ProducerStateManager().to_snapshot()})
    (p.log.dir / f"{past:020d}.snapshot").write_text(f"{zlib.crc32(text.encode()):08x}\n{text}")
    p.close()
    p.log.close()
    again = leader(p.log.dir)
    assert state_of(again) == expected
    assert producer_state_snapshots.offsets(again.log.dir)[-1] <= again.log_end_offset  # the one past it went

    assert producer_state_snapshots.load(again.log.dir, newest + 1, again.log_end_offset) is None  # below the start
    assert producer_state_snapshots.load(again.log.dir, 0, again.log_end_offset) is not None
    assert older < newest
