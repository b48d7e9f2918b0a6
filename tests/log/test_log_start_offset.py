"""The log start moved by DeleteRecords (Log.maybe_increment_log_start_offset) and a follower
starting over at the leader's log start (Log.truncate_fully_and_start_at)."""
import pytest
from log_helpers import batch, read_all

from odradek.log.errors import OffsetOutOfRangeError
from odradek.log.log import LogCleaningAbortedError, LogConfig

SMALL = LogConfig(segment_bytes=200, cleanup_policy="compact,delete")


def filled(open_log, records: int = 30):
    log = open_log(SMALL)
    for _ in range(records):
        log.append_as_leader(batch(), 0)
    return log


def test_segments_wholly_below_the_new_log_start_go_and_the_start_survives_a_reopen(open_log) -> None:
    log = filled(open_log)
    bases = log.segment_base_offsets()
    assert len(bases) > 3
    target = bases[2] + 1
    assert log.maybe_increment_log_start_offset(target)
    assert log.segment_base_offsets() == bases[2:]      # the segment holding the start stays
    assert read_all(log) == list(range(target, 30))
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 1 << 20)
    assert not log.maybe_increment_log_start_offset(target - 1)   # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(31)                   # past the log end
    log.close()
    reopened = open_log(SMALL)
    assert reopened.log_start_offset == target
    assert read_all(reopened) == list(range(target, 30))


def test_a_clean_of_segments_deleted_meanwhile_is_aborted(open_log) -> None:
    log = filled(open_log)
    views = log.segment_views(open_files=False)[:2]
    cleaned = log.new_cleaned_segment(views[0].base_offset)
    log.maybe_increment_log_start_offset(log.segment_base_offsets()[2])
    with pytest.raises(LogCleaningAbortedError):
        log.replace_segments(cleaned, views)
    cleaned.delete()
    assert read_all(log) == list(range(log.log_start_offset, 30))


def test_truncate_fully_and_start_at_an_offset_past_the_log_end(open_log) -> None:
    log = filled(open_log, 5)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    log.append_as_follower(batch(base_offset=50))
    assert read_all(log) == [50]
