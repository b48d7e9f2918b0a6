"""The fault run's checker on planted histories: each anomaly it must report, it does."""
from __future__ import annotations

from odradek.faults.checker import (
    acknowledged_at_first_copy,
    batch_producers,
    duplicate_positions,
    judge,
    judge_by_profile,
    without,
)
from odradek.faults.librdkafka_bugs import epoch_bumps, librdkafka_4953
from odradek.faults.workload import encode_value
from odradek.protocol.records import build_batch


def _log(*entries: tuple[int, int, int, str, int]) -> dict[int, list[tuple[int, bytes]]]:
    out: dict[int, list[tuple[int, bytes]]] = {}
    for partition, offset, producer, key, seq in entries:
        out.setdefault(partition, []).append((offset, encode_value(producer, key, seq)))
    return out


def test_a_clean_history_has_no_anomaly() -> None:
    log = _log((0, 0, 1, "k", 1), (0, 1, 1, "k", 2), (1, 0, 1, "j", 1))
    acked = {(1, "k", 1): (0, 0), (1, "k", 2): (0, 1), (1, "j", 1): (1, 0)}
    assert all(v == [] for v in judge(log, acked).values())


def test_unacknowledged_values_in_the_log_and_gaps_in_sequence_are_allowed() -> None:
    log = _log((0, 0, 1, "k", 1), (0, 1, 1, "k", 3))  # seq 2 failed before it was written
    assert all(v == [] for v in judge(log, {(1, "k", 3): (0, 1)}).values())


def test_an_acknowledgement_without_offset_only_needs_the_value_present() -> None:
    log = _log((0, 0, 1, "k", 1))
    assert all(v == [] for v in judge(log, {(1, "k", 1): (0, None)}).values())
    assert len(judge(log, {(1, "k", 2): (0, None)})["lost"]) == 1


def test_each_planted_anomaly_is_reported() -> None:
    log = _log((0, 0, 1, "k", 1), (0, 1, 1, "k", 3), (0, 2, 1, "k", 2), (0, 3, 1, "k", 3), (1, 0, 2, "j", 1))
    acked = {(1, "k", 1): (0, 0),      # fine
             (1, "k", 9): (0, 7),      # lost
             (2, "j", 1): (1, 5)}      # read at another offset than acknowledged
    found = judge(log, acked)
    assert len(found["lost"]) == 1
    assert len(found["inconsistent_offsets"]) == 1
    assert len(found["duplicates"]) == 1   # (1, k, 3) twice
    assert len(found["reordered"]) == 1    # 3 before 2


def test_each_profile_is_judged_on_rows_of_its_own() -> None:
    """Producer 0 (librdkafka) wrote a value twice; producer 1 (kafka-python) lost one: each
    anomaly lands in its own profile's row, and the other profile's rows stay empty."""
    log = _log((0, 0, 0, "a", 1), (0, 1, 1, "b", 1), (0, 2, 0, "a", 1))
    acked = {0: {(0, "a", 1): (0, 0)}, 1: {(1, "b", 1): (0, 1), (1, "b", 2): (0, 3)}}
    found = judge_by_profile(log, {0: "librdkafka", 1: "kafka-python"}, acked)
    assert sorted(k for k, v in found.items() if v) == ["duplicates_librdkafka", "lost_kafka_python"]
    assert set(found) == {f"{kind}_{p}" for kind in ("lost", "inconsistent_offsets", "duplicates", "reordered")
                          for p in ("librdkafka", "kafka_python")}


def test_a_duplicate_is_librdkafka_4953s_only_with_the_bump_and_a_later_epoch(tmp_path) -> None:
    """Producer 0's value (0, a, 1) was written at offset 0 under epoch 0, then again at offset
    2 under epoch 1 after its log's drain for an epoch bump: #4953's. The same duplicate without
    the bump in the log, or with the copy under the same epoch, is not."""
    directory = tmp_path / "faults-0"
    directory.mkdir()
    batches = [build_batch([(b"a", b"0:a:1")], producer_id=7, producer_epoch=0, base_sequence=0),
               build_batch([(b"b", b"0:b:1")], producer_id=7, producer_epoch=0, base_sequence=1),
               build_batch([(b"a", b"0:a:1")], producer_id=7, producer_epoch=1, base_sequence=0)]
    data = b"".join(offset.to_bytes(8, "big") + b[8:] for offset, b in enumerate(batches))
    (directory / "00000000000000000000.log").write_bytes(data)
    batch_at = batch_producers([directory])
    assert batch_at[(0, 0)] == (7, 0) and batch_at[(0, 2)] == (7, 1)
    log = {0: [(0, b"0:a:1"), (1, b"0:b:1"), (2, b"0:a:1")]}
    duplicates = duplicate_positions(log)
    assert duplicates == {(0, "a", 1): [(0, 0), (0, 2)]}
    drain = ("2026-11-28 12:00:00,000 producer-0 DRAIN [faults-producer-0#producer-3] [thrd:main]: Beginning "
             "partition drain in state Assigned for PID{Id:7,Epoch:0} epoch bump for 1 partition(s) with "
             "in-flight requests: skipped sequence numbers\n")
    assert epoch_bumps([drain, drain.replace("skipped sequence numbers", "other reason")]) == {"faults-producer-0"}
    clients = {0: "faults-producer-0"}
    assert librdkafka_4953(duplicates, {"faults-producer-0"}, clients, batch_at) == [(0, "a", 1)]
    assert librdkafka_4953(duplicates, set(), clients, batch_at) == []
    same_epoch = {**batch_at, (0, 2): (7, 0)}
    assert librdkafka_4953(duplicates, {"faults-producer-0"}, clients, same_epoch) == []


def test_set_aside_copies_leave_no_inconsistent_offset_nor_reordering() -> None:
    """Seed 3's #4953 copies: (0, a, 1) written at offset 0, then again at 2 after (0, a, 2),
    and librdkafka acknowledged the re-send (offset 2). With the later copy set aside and the
    acknowledgement moved to the first, the checker finds nothing; without the move, one
    inconsistent offset."""
    log = {0: [(0, b"0:a:1"), (1, b"0:a:2"), (2, b"0:a:1")]}
    duplicates = duplicate_positions(log)
    acked_by = {0: {(0, "a", 1): (0, 2), (0, "a", 2): (0, 1)}}
    kept = without(log, [(0, 2)])
    assert judge_by_profile(kept, {0: "librdkafka"}, acked_by)["inconsistent_offsets_librdkafka"]
    acknowledged_at_first_copy([(0, "a", 1)], duplicates, acked_by)
    assert acked_by[0][(0, "a", 1)] == (0, 0)
    assert all(v == [] for v in judge_by_profile(kept, {0: "librdkafka"}, acked_by).values())
