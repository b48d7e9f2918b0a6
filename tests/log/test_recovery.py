"""Restart and crash recovery: torn tails, CRC damage past the recovery point, index rebuild."""
import os

from log_helpers import batch, read_all

from odradek.log.fd_cache import FdCache
from odradek.log.log import LogConfig

CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def fill(log, n, size=50):
    for _ in range(n):
        log.append_as_leader(batch(2, size=size), 3)


def segment_files(log):
    return sorted(p for p in log.dir.iterdir() if p.suffix == ".log")


def test_clean_restart_keeps_everything(open_log):
    log = open_log(CONFIG)
    fill(log, 40)
    bases, end = log.segment_base_offsets(), log.log_end_offset
    log.close()
    log = open_log(CONFIG)
    assert (log.segment_base_offsets(), log.log_end_offset) == (bases, end)
    assert log.recovery_point == end
    assert log.leader_epoch_cache.entries() == [(3, 0)]
    assert read_all(log) == list(range(end))
    assert log.append_as_leader(batch(), 3) == (end, end)


def test_torn_tail_is_cut_and_appends_continue(open_log):
    fds = FdCache(8)
    log = open_log(CONFIG, fds=fds)
    fill(log, 15)
    end = log.log_end_offset
    fds.close_all()  # crash: nothing flushed
    last = segment_files(log)[-1]
    good_size = last.stat().st_size
    with open(last, "ab") as f:
        f.write(batch(3)[:40])  # a partial batch
    log = open_log(CONFIG)
    assert log.log_end_offset == end
    assert last.stat().st_size == good_size
    assert log.append_as_leader(batch(2), 3) == (end, end + 1)
    assert read_all(log) == list(range(end + 2))


def test_garbage_tail_is_cut(open_log):
    log = open_log(CONFIG)
    fill(log, 5)
    end = log.log_end_offset
    log.close()
    last = segment_files(log)[-1]
    with open(last, "ab") as f:
        f.write(os.urandom(200))
    log = open_log(CONFIG)
    assert log.log_end_offset == end
    assert read_all(log) == list(range(end))


def test_crc_damage_in_unflushed_tail(open_log):
    fds = FdCache(8)
    log = open_log(CONFIG, fds=fds)
    fill(log, 5)
    log.flush()
    flushed = log.log_end_offset
    fill(log, 3)
    fds.close_all()  # crash
    last = segment_files(log)[-1]
    size = last.stat().st_size
    with open(last, "r+b") as f:  # flip a byte inside the second unflushed batch's records
        f.seek(size - len(batch(2, size=50)) - 5)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = open_log(CONFIG)
    assert log.log_end_offset == flushed + 2
    assert read_all(log) == list(range(flushed + 2))


def test_damage_in_middle_segment_drops_later_segments(open_log):
    fds = FdCache(8)
    log = open_log(CONFIG, fds=fds)
    fill(log, 40)
    bases = log.segment_base_offsets()
    fds.close_all()  # crash before any flush: every segment is past the recovery point
    second = segment_files(log)[1]
    with open(second, "r+b") as f:
        f.seek(-3, 2)
        f.write(b"\xff\xff\xff")
    log = open_log(CONFIG)
    assert log.segment_base_offsets() == bases[:2]
    assert len(segment_files(log)) == 2
    assert log.log_end_offset < bases[2]
    assert read_all(log) == list(range(log.log_end_offset))
    assert log.append_as_leader(batch(), 3)[0] == log.log_end_offset - 1


def test_flushed_segments_are_not_crc_checked(open_log):
    """Only the tail past the recovery point is verified: damage to a flushed record byte (not a
    header) goes unnoticed on open, which is what makes restarts cheap."""
    log = open_log(CONFIG)
    fill(log, 40)
    end = log.log_end_offset
    log.close()
    first = segment_files(log)[0]
    with open(first, "r+b") as f:
        f.seek(70)  # inside the first batch's records
        f.write(b"\x00")
    log = open_log(CONFIG)
    assert log.log_end_offset == end


def test_lost_index_is_rebuilt(open_log):
    log = open_log(CONFIG)
    fill(log, 40)
    end = log.log_end_offset
    log.close()
    for p in log.dir.glob("*.index"):
        p.write_bytes(b"\x00\x00\x00")  # not a whole entry
    for p in list(log.dir.glob("*.timeindex"))[:2]:
        p.unlink()
    log = open_log(CONFIG)
    assert log.log_end_offset == end
    assert all(len(s.offset_index) for s in log._segments[:-1])
    assert read_all(log) == list(range(end))


def test_epoch_cache_beyond_recovered_end_is_dropped(open_log):
    fds = FdCache(8)
    log = open_log(CONFIG, fds=fds)
    fill(log, 2)
    log.flush()
    log.append_as_leader(batch(), 4)
    fds.close_all()
    last = segment_files(log)[-1]
    os.truncate(last, last.stat().st_size - 10)
    log = open_log(CONFIG)
    assert log.log_end_offset == 4
    assert log.leader_epoch_cache.entries() == [(3, 0)]
