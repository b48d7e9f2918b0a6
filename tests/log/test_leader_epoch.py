"""LeaderEpochCache: Kafka's LeaderEpochFileCache semantics and checkpoint format."""
import pytest

from odradek.log.leader_epoch import LeaderEpochCache


@pytest.fixture
def cache(tmp_path):
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")


def test_assign_and_persist(cache, tmp_path):
    assert cache.latest_epoch() is None
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch, later offset: no change
    cache.assign(3, 10)
    cache.assign(4, 20)
    assert cache.entries() == [(1, 0), (3, 10), (4, 20)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n4 20\n"
    again = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    assert again.entries() == cache.entries() and again.latest_epoch() == 4
    assert not list(tmp_path.glob("*.tmp"))


def test_assign_removes_non_monotonic_entries(cache):
    cache.assign(1, 0)
    cache.assign(3, 10)
    cache.assign(4, 20)
    cache.assign(2, 15)  # epochs >= 2 or offsets >= 15 go
    assert cache.entries() == [(1, 0), (2, 15)]
    cache.assign(5, 5)
    assert cache.entries() == [(1, 0), (5, 5)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_end_offset_for(cache):
    assert cache.end_offset_for(0, 100) == (-1, -1)  # empty cache
    cache.assign(2, 10)
    cache.assign(4, 20)
    cache.assign(6, 30)
    assert cache.end_offset_for(6, 100) == (6, 100)  # latest epoch ends at the log end offset
    assert cache.end_offset_for(6, 120) == (6, 120)
    assert cache.end_offset_for(4, 120) == (4, 30)
    assert cache.end_offset_for(2, 120) == (2, 20)
    assert cache.end_offset_for(3, 120) == (2, 20)  # unknown epoch: floor epoch, next start
    assert cache.end_offset_for(5, 120) == (4, 30)
    assert cache.end_offset_for(1, 120) == (1, 10)  # below all known: itself, first start
    assert cache.end_offset_for(7, 120) == (-1, -1)
    assert cache.end_offset_for(-1, 120) == (-1, -1)


def test_truncate_from_end(cache):
    for epoch, offset in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(25)
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_end(20)
    assert cache.entries() == [(1, 0), (2, 10)]
    cache.truncate_from_end(5)
    assert cache.entries() == [(1, 0)]


def test_truncate_from_start(cache):
    for epoch, offset in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, offset)
    cache.truncate_from_start(0)
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(2, 15), (3, 20)]
    cache.truncate_from_start(20)
    assert cache.entries() == [(3, 20)]
    cache.truncate_from_start(25)
    assert cache.entries() == [(3, 25)]


def test_log_wiring(tmp_path):
    from log_helpers import batch

    from odradek.log.log import Log, LogConfig

    log = Log.open(tmp_path / "p", LogConfig())
    log.append_as_leader(batch(2), 0)
    log.append_as_leader(batch(3), 1)
    log.append_as_leader(batch(1), 1)
    assert log.end_offset_for(0) == (0, 2)
    assert log.end_offset_for(1) == (1, 6)
    log.close()
    log = Log.open(tmp_path / "p", LogConfig())
    assert log.leader_epoch_cache.entries() == [(0, 0), (1, 2)]
    assert log.end_offset_for(1) == (1, 6)
    log.close()
