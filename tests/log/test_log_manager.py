"""LogManager: directory layout, lazy opening, and a bounded number of open descriptors."""
import os
import tempfile
from pathlib import Path

import pytest
from log_helpers import batch, offsets_in

from odradek.common.metadata import TopicPartition
from odradek.log.fd_cache import FdCache
from odradek.log.log import LogConfig
from odradek.log.log_manager import LogManager


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def fast_dir(tmp_path):
    """tmpfs when available: the 10,000-log test fsyncs ~20,000 checkpoints."""
    if Path("/dev/shm").is_dir():
        with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
            yield Path(d)
    else:
        yield tmp_path


def test_layout_get_and_delete(tmp_path):
    manager = LogManager(tmp_path, LogConfig())
    tp = TopicPartition("my-topic", 3)
    assert manager.get(tp) is None
    log = manager.get_or_create(tp)
    assert log.dir == tmp_path / "my-topic-3"
    assert manager.get(tp) is log
    log.append_as_leader(batch(2), 0)
    custom = LogConfig(segment_bytes=123)
    assert manager.get_or_create(tp, custom).config == custom
    manager.get_or_create(TopicPartition("other", 0))
    manager.flush_all()
    assert log.recovery_point == 2
    assert manager.partitions() == [TopicPartition("my-topic", 3), TopicPartition("other", 0)]
    manager.close()

    manager = LogManager(tmp_path, LogConfig())
    reopened = manager.get(tp)
    assert reopened is not None and reopened.log_end_offset == 2
    manager.delete(tp)
    assert not (tmp_path / "my-topic-3").exists() and manager.get(tp) is None
    manager.delete(TopicPartition("other", 0))  # never opened in this manager
    assert manager.partitions() == []
    manager.close()


def test_ten_thousand_logs_with_bounded_descriptors(fast_dir):
    baseline = open_fds()
    manager = LogManager(fast_dir, LogConfig(), max_open_files=200)
    tps = [TopicPartition(f"t{i % 100}", i // 100) for i in range(10_000)]
    peak = 0
    for i, tp in enumerate(tps):
        manager.get_or_create(tp).append_as_leader(batch(size=8 + i % 5), 0)
        if i % 500 == 0:
            peak = max(peak, open_fds())
    assert manager.open_file_count() <= 200
    for tp in tps:
        log = manager.get(tp)
        assert offsets_in(log.read(0, 1 << 10)) == [0]
    peak = max(peak, open_fds())
    assert peak - baseline <= 200 + 10
    manager.close()
    assert open_fds() <= baseline
    assert len(os.listdir(fast_dir)) == 10_000


def test_fd_cache_never_closes_a_pinned_descriptor(tmp_path):
    cache = FdCache(max_open=1)
    a, b = tmp_path / "a", tmp_path / "b"
    with cache.use(a) as fd_a:
        with cache.use(b) as fd_b:
            assert len(cache) == 2  # over the cap while both are in use
            os.pwrite(fd_a, b"x", 0)
            os.pwrite(fd_b, b"y", 0)
        assert len(cache) == 1
        os.fstat(fd_a)  # still open
    with cache.use(b):
        pass
    assert len(cache) == 1
    with pytest.raises(OSError):
        os.fstat(fd_a)
    cache.close_all()
    assert a.read_bytes() == b"x" and b.read_bytes() == b"y"
