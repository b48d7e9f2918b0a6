"""The log cleaner on real log directories: what stays, what goes, and what is never touched."""
import gzip
import os

import crc32c
import pytest
from cleaner_helpers import TP, Setup, batches, compact_config, latest_per_key, put, records
from log_helpers import read_all

from odradek.broker.producer_state import ProducerStateManager
from odradek.log.checkpoint import read_offsets
from odradek.log.log import Log
from odradek.log.log_cleaner import CHECKPOINT_FILE, LogCleaner
from odradek.protocol.records import HEADER_SIZE, build_batch, decode_records, validate_batches


def fill(log, rounds: int, keys: int = 5, ts: int = 1000) -> list:
    """`rounds` x `keys` records, key k<i> with value "<round>-<i>"."""
    for r in range(rounds):
        for i in range(keys):
            put(log, f"k{i}", f"{r}-{i}", ts)
    return records(log)


def test_keeps_the_latest_value_of_each_key_at_its_offset(tmp_path, clock):
    s = Setup(tmp_path, clock, compact_config())
    before = fill(s.log, rounds=8)
    active = s.log.segment_base_offsets()[-1]
    assert s.cleaner.clean_once()
    after = records(s.log)
    assert latest_per_key(after) == latest_per_key(before)
    assert set(after) <= set(before)  # same offsets, same values: nothing moved or changed
    cleaned = [r for r in after if r[0] < active]
    assert len({key for _, key, _ in cleaned}) == len(cleaned)  # one record per key below
    assert [r for r in after if r[0] >= active] == [r for r in before if r[0] >= active]
    assert read_all(s.log) == [offset for offset, _, _ in after]  # reads step over the gaps
    assert s.log.offset_for_timestamp(0) == after[0][0]
    checkpoint = read_offsets(tmp_path / "data" / CHECKPOINT_FILE)
    assert checkpoint == {(TP.topic, TP.partition): active}
    assert not s.cleaner.clean_once()  # the clean section is not cleaned again for nothing
    before = fill(s.log, rounds=8)
    cleaned_segments = len([b for b in s.log.segment_base_offsets() if b < active])
    assert s.cleaner.clean_once()
    assert len([b for b in s.log.segment_base_offsets() if b < active]) < cleaned_segments
    after = records(s.log)  # the small cleaned segments were cleaned again as one
    assert latest_per_key(after) == latest_per_key(before)
    s.manager.close()
    reopened = Log.open(s.log.dir, s.log.config, now_ms=clock)
    assert records(reopened) == after


def test_nothing_at_or_past_the_high_watermark_is_cleaned(tmp_path, clock):
    s = Setup(tmp_path, clock, compact_config())
    before = fill(s.log, rounds=8)
    bases = s.log.segment_base_offsets()
    s.high_watermark = bases[3] + 1  # inside the fourth segment: it and later ones stay
    assert s.cleaner.clean_once()
    after = records(s.log)
    assert [r for r in after if r[0] >= bases[3]] == [r for r in before if r[0] >= bases[3]]
    assert len([r for r in after if r[0] < bases[3]]) < len([r for r in before if r[0] < bases[3]])
    s.high_watermark = 0
    assert not s.cleaner.clean_once()


def test_min_compaction_lag_keeps_young_segments(tmp_path, clock):
    clock.now = 10_000
    s = Setup(tmp_path, clock, compact_config(min_compaction_lag_ms=5_000))
    fill(s.log, rounds=4, ts=1_000)
    young = s.log.segment_base_offsets()[-1]
    before = fill(s.log, rounds=4, ts=9_000)
    cut = min(b for b in s.log.segment_base_offsets() if b >= young)
    assert s.cleaner.clean_once()
    after = records(s.log)
    assert [r for r in after if r[0] >= cut] == [r for r in before if r[0] >= cut]


def test_tombstones_stay_until_delete_retention_after_first_clean(tmp_path, clock):
    clock.now = 1_000_000
    s = Setup(tmp_path, clock, compact_config(delete_retention_ms=60_000))
    fill(s.log, rounds=3, keys=2)
    gone = put(s.log, "k0", None)
    fill(s.log, rounds=3, keys=3)
    put(s.log, "k0", None)  # the latest for k0 is a tombstone again
    tombstone = put(s.log, "gone", None)
    fill(s.log, rounds=6, keys=1)
    assert s.cleaner.clean_once()
    after = records(s.log)
    assert (tombstone, "gone", None) in after
    assert all(o != gone for o, _, _ in after)  # an older tombstone goes like any old value
    marked = [h for h in batches(s.log) if h.base_offset == tombstone]
    assert marked[0].delete_horizon_ms == clock.now + 60_000
    clock.now += 59_000
    fill(s.log, rounds=6, keys=1)
    assert s.cleaner.clean_once()
    assert (tombstone, "gone", None) in records(s.log)
    clock.now += 2_000
    fill(s.log, rounds=6, keys=1)
    assert s.cleaner.clean_once()
    remaining = records(s.log)
    assert all(key != "gone" for _, key, _ in remaining)
    assert latest_per_key(remaining)["k1"][1] == "2-1"


@pytest.mark.parametrize("from_producer_state", [False, True])
def test_an_idempotent_producers_last_batch_stays_as_an_empty_batch(tmp_path, clock, monkeypatch,
                                                                    from_producer_state):
    s = Setup(tmp_path, clock, compact_config())
    for seq in range(3):
        put(s.log, "p", f"from-producer-{seq}", producer_id=7, producer_epoch=2, base_sequence=seq)
    last = batches(s.log)[-1]
    before_state = ProducerStateManager()
    before_state.rebuild((h, None) for h in batches(s.log))
    fill(s.log, rounds=6, keys=1)
    put(s.log, "p", "overwritten")  # every record of the producer is superseded
    fill(s.log, rounds=6, keys=1)
    if from_producer_state:
        # the broker's way: the partition's producer state names the last batches (Kafka's
        # lastRecordsOfActiveProducers), and the log is not read again for them
        state = ProducerStateManager()
        state.rebuild((h, None) for h in batches(s.log))
        assert state.last_offsets() == {7: last.last_offset}
        s.cleaner = LogCleaner(s.manager, s._hw, now_ms=clock,
                               producer_last_offsets=lambda tp: state.last_offsets())

        def no_rescan(*_):
            raise AssertionError("the log was read again for the producers' last batches")
        monkeypatch.setattr(s.cleaner.cleaner, "_last_batches_of_producers", no_rescan)
    assert s.cleaner.clean_once()
    kept = [h for h in batches(s.log) if h.producer_id == 7]
    assert len(kept) == 1
    (empty,) = kept
    assert empty.record_count == 0
    assert (empty.base_offset, empty.last_offset, empty.producer_epoch, empty.base_sequence) == (
        last.base_offset, last.last_offset, 2, 2)
    assert empty.max_timestamp == last.max_timestamp
    after_state = ProducerStateManager()
    after_state.rebuild((h, None) for h in batches(s.log))
    assert after_state.entry(7).epoch == 2
    assert after_state.entry(7).batches[-1] == before_state.entry(7).batches[-1]
    assert all(value != "from-producer-2" for _, _, value in records(s.log))


def test_the_active_segment_is_never_cleaned(tmp_path, clock):
    s = Setup(tmp_path, clock, compact_config(segment_bytes=1 << 20))
    before = fill(s.log, rounds=8)
    assert len(s.log.segment_base_offsets()) == 1
    assert not s.cleaner.clean_once()
    assert records(s.log) == before


def test_a_truncation_during_a_clean_aborts_it(tmp_path, clock):
    s = Setup(tmp_path, clock, compact_config())
    before = fill(s.log, rounds=8)
    cut = s.log.segment_base_offsets()[2] + 1
    new_cleaned_segment = s.log.new_cleaned_segment

    def truncating(base_offset: int):
        s.log.truncate_to(cut)  # as a follower would, on the event loop's thread
        return new_cleaned_segment(base_offset)

    s.log.new_cleaned_segment = truncating
    assert not s.cleaner.clean_once()
    assert records(s.log) == [r for r in before if r[0] < s.log.log_end_offset]
    assert not [n for n in os.listdir(s.log.dir) if n.endswith((".cleaned", ".swap"))]


def test_compact_alone_keeps_segments_past_retention(tmp_path, clock):
    s = Setup(tmp_path, clock, compact_config(retention_ms=1, retention_bytes=1))
    fill(s.log, rounds=4)
    assert s.log.apply_retention(10**12) == 0
    both = Setup(tmp_path / "both", clock,
                 compact_config(cleanup_policy="compact,delete", retention_ms=1))
    fill(both.log, rounds=4)
    assert both.log.apply_retention(10**12) > 0


def _compressed(records: list[tuple[bytes, bytes]], codec: int) -> bytes:
    """A batch of records whose records section is gzipped (codec 1), or merely labelled with
    another codec (the cleaner must not try to read those)."""
    plain = bytearray(build_batch(records, timestamp_ms=1000))
    body = gzip.compress(bytes(plain[HEADER_SIZE:])) if codec == 1 else bytes(plain[HEADER_SIZE:])
    batch = plain[:HEADER_SIZE] + body
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    batch[21:23] = codec.to_bytes(2, "big")
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


def test_compressed_batches_are_recompressed_or_kept_whole(tmp_path, clock, caplog):
    s = Setup(tmp_path, clock, compact_config(segment_bytes=300))
    gzipped = s.log.append_as_leader(_compressed([(b"a", b"old-a"), (b"b", b"old-b")], 1), 0)[0]
    snappy = s.log.append_as_leader(_compressed([(b"c", b"old-c"), (b"d", b"old-d")], 2), 0)[0]
    for key in ("a", "c", "d") * 3:
        put(s.log, key, f"new-{key}")
    assert s.cleaner.clean_once()
    by_offset = {h.base_offset: h for h in batches(s.log)}
    kept = s.log.read(gzipped, 1)[:by_offset[gzipped].size]
    validate_batches(kept)  # a correct CRC-32C
    assert by_offset[gzipped].attributes & 7 == 1
    assert [(o, k, v) for o, _, k, v, _ in decode_records(kept)] == [(gzipped + 1, b"b", b"old-b")]
    assert by_offset[snappy].record_count == 2  # left as it was: no snappy codec here
    assert "compression codec 2 is not available" in caplog.text
