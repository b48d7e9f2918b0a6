"""Log: offsets, reads, rolls, flush policy, truncation, retention, config."""
import pytest
from log_helpers import batch, offsets_in, read_all

from odradek.log import CorruptRecordError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from odradek.log.checkpoint import read_offset
from odradek.log.log import LOG_START_FILE, RECOVERY_POINT_FILE, LogConfig
from odradek.protocol.records import iter_batches, validate_batches


def test_append_assigns_offsets_and_stamps_epoch(open_log):
    log = open_log()
    assert log.append_as_leader(batch(3), leader_epoch=5) == (0, 2)
    assert log.append_as_leader(batch(1) + batch(2), leader_epoch=5) == (3, 5)
    assert (log.log_start_offset, log.log_end_offset) == (0, 6)
    data = log.read(0, 1 << 20)
    headers = validate_batches(data)
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 5), (3, 5), (4, 5)]
    assert offsets_in(data) == list(range(6))
    assert log.leader_epoch_cache.entries() == [(5, 0)]


def test_corrupt_append_writes_nothing(open_log):
    log = open_log()
    log.append_as_leader(batch(), 0)
    bad = bytearray(batch())
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch() + bytes(bad), 0)
    assert log.log_end_offset == 1 and log.size_in_bytes() == len(batch())


def test_read_semantics(open_log):
    log = open_log()
    for _ in range(5):
        log.append_as_leader(batch(2, size=100), 0)
    one = len(batch(2, size=100))
    assert log.read(10, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(11, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert offsets_in(log.read(3, 1)) == [2, 3]  # batch containing 3, whole, despite max_bytes
    assert offsets_in(log.read(0, 2 * one + one // 2)) == [0, 1, 2, 3]
    assert offsets_in(log.read(0, 1 << 20, max_offset=5)) == [0, 1, 2, 3, 4, 5]
    assert offsets_in(log.read(0, 1 << 20, max_offset=4)) == [0, 1, 2, 3]
    assert log.read(4, 1 << 20, max_offset=4) == b""
    assert log.read(6, 1 << 20, max_offset=4) == b""


def test_roll_and_index_lookup_across_segments(open_log):
    config = LogConfig(segment_bytes=2000, index_interval_bytes=150)
    log = open_log(config)
    for i in range(300):
        log.append_as_leader(batch(1 + i % 3, size=20), 0)
    bases = log.segment_base_offsets()
    assert len(bases) > 10 and bases == sorted(bases)
    assert all(len(s.offset_index) > 0 for s in log._segments[:-1])
    for offset in range(0, log.log_end_offset, 7):
        data = log.read(offset, 1)
        (h,) = iter_batches(data)
        assert h.base_offset <= offset <= h.last_offset
    assert read_all(log) == list(range(log.log_end_offset))


def test_oversized_append_gets_its_own_segment(open_log):
    log = open_log(LogConfig(segment_bytes=200))
    log.append_as_leader(batch(size=50), 0)
    log.append_as_leader(batch(size=500), 0)
    log.append_as_leader(batch(size=50), 0)
    assert log.segment_base_offsets() == [0, 1, 2]
    assert read_all(log) == [0, 1, 2]


def test_follower_append(open_log):
    log = open_log()
    log.append_as_follower(batch(2, base_offset=0) + batch(1, base_offset=2))
    assert log.log_end_offset == 3
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(batch(1, base_offset=2))
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(batch(2, base_offset=3) + batch(1, base_offset=4))
    leader = bytearray(batch(2, base_offset=3))
    leader[12:16] = (7).to_bytes(4, "big")
    log.append_as_follower(bytes(leader))
    assert log.leader_epoch_cache.entries() == [(7, 3)]
    assert read_all(log) == [0, 1, 2, 3, 4]


def test_follower_append_steps_over_a_gap_the_leaders_cleaner_made(open_log):
    """Kafka's append refuses only a first offset below the log end offset."""
    log = open_log(LogConfig(segment_bytes=200))
    log.append_as_follower(batch(2, base_offset=0))
    log.append_as_follower(batch(1, base_offset=7) + batch(1, base_offset=9))
    assert log.log_end_offset == 10
    log.append_as_follower(batch(1, base_offset=12, size=300))  # rolls past the gap
    assert log.segment_base_offsets()[-1] == 12
    assert read_all(log) == [0, 1, 7, 9, 12]
    assert offsets_in(log.read(4, 1)) == [7]


def test_flush_by_message_count(open_log, tmp_path):
    log = open_log(LogConfig(flush_messages=3))
    log.append_as_leader(batch(2), 0)
    assert log.recovery_point == 0
    log.append_as_leader(batch(1), 0)
    assert log.recovery_point == 3
    assert read_offset(tmp_path / "log" / RECOVERY_POINT_FILE) == 3


def test_flush_by_time_uses_injected_clock(open_log, clock):
    log = open_log(LogConfig(flush_ms=1000))
    log.append_as_leader(batch(), 0)
    clock.now = 999
    log.append_as_leader(batch(), 0)
    assert log.recovery_point == 0
    clock.now = 1000
    log.append_as_leader(batch(), 0)
    assert log.recovery_point == 3


def test_truncate_to(open_log):
    log = open_log(LogConfig(segment_bytes=300))
    log.append_as_leader(batch(2), 1)
    log.append_as_leader(batch(2), 2)
    for _ in range(10):
        log.append_as_leader(batch(2), 3)
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 2), (3, 4)]
    segments = len(log.segment_base_offsets())
    log.truncate_to(15)  # inside batch [14, 15]: Kafka drops the whole batch
    assert log.log_end_offset == 14
    assert len(log.segment_base_offsets()) < segments
    assert read_all(log) == list(range(14))
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert log.leader_epoch_cache.entries() == [(1, 0), (2, 2)]
    assert log.append_as_leader(batch(), 4) == (4, 4)
    assert read_all(log) == [0, 1, 2, 3, 4]
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes()) == (0, 0, 0)
    assert log.leader_epoch_cache.entries() == []


def test_truncate_below_log_start_restarts_log(open_log, tmp_path):
    log = open_log(LogConfig(segment_bytes=100, retention_bytes=0))
    for _ in range(5):
        log.append_as_leader(batch(), 0)
    log.apply_retention(0)
    assert log.log_start_offset == 4
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.append_as_leader(batch(), 0) == (2, 2)
    assert read_offset(tmp_path / "log" / LOG_START_FILE) == 2


def test_offset_for_timestamp(open_log):
    log = open_log(LogConfig(segment_bytes=300, index_interval_bytes=50))
    for i in range(20):
        log.append_as_leader(batch(2, ts=1000 + 10 * i), 0)
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1000) == 0
    assert log.offset_for_timestamp(1001) == 2
    assert log.offset_for_timestamp(1095) == 20
    assert log.offset_for_timestamp(1190) == 38
    assert log.offset_for_timestamp(1191) is None


def test_offset_for_timestamp_after_restart(open_log):
    log = open_log(LogConfig(segment_bytes=300, index_interval_bytes=50))
    for i in range(20):
        log.append_as_leader(batch(2, ts=1000 + 10 * i), 0)
    log.close()
    log = open_log(LogConfig(segment_bytes=300, index_interval_bytes=50))
    assert [log.offset_for_timestamp(t) for t in (999, 1055, 1190, 1200)] == [0, 12, 38, None]


def test_retention_by_time(open_log):
    log = open_log(LogConfig(segment_bytes=200, retention_ms=1000))
    for i in range(10):
        log.append_as_leader(batch(size=100, ts=1000 * i), 0)
    assert len(log.segment_base_offsets()) == 10
    assert log.apply_retention(now_ms=5500) == 5  # segments with ts 0..4000 are > 1000 ms old
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    assert log.apply_retention(now_ms=10**9) == 4  # never the active segment
    assert log.segment_base_offsets() == [9]
    assert read_all(log) == [9]


def test_retention_by_size_and_restart(open_log):
    config = LogConfig(segment_bytes=200, retention_bytes=450, retention_ms=-1)
    log = open_log(config)
    for _ in range(10):
        log.append_as_leader(batch(size=100), 0)
    one = len(batch(size=100))
    # Kafka's rule: delete a segment only if the log stays >= retention_bytes without it
    assert log.apply_retention(now_ms=10**12) == 7
    assert log.size_in_bytes() == 3 * one >= 450 > 2 * one
    start = log.log_start_offset
    log.close()
    log = open_log(config)
    assert log.log_start_offset == start
    assert read_all(log) == list(range(start, 10))


def test_unlimited_retention_deletes_nothing(open_log):
    log = open_log(LogConfig(segment_bytes=100, retention_ms=-1, retention_bytes=-1))
    for _ in range(5):
        log.append_as_leader(batch(), 0)
    assert log.apply_retention(10**15) == 0


def test_config_from_topic_config():
    default = LogConfig(segment_bytes=1000)
    config = LogConfig.from_topic_config(
        {"retention.ms": "60000", "retention.bytes": "-1", "flush.messages": "1",
         "flush.ms": "5", "cleanup.policy": "delete"}, default)
    assert config == LogConfig(segment_bytes=1000, retention_ms=60000, retention_bytes=-1,
                               flush_messages=1, flush_ms=5)
    assert LogConfig.from_topic_config({"segment.bytes": "7"}, default).segment_bytes == 7
