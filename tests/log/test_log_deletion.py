"""Deleting a partition's log (StopReplica with delete): renamed to a `-delete` directory first,
so a crash mid-delete never leaves a half-deleted log that is loaded again; and the topic id
kept with each log (partition.metadata) that tells a deleted topic's log from a new one's."""
from __future__ import annotations

import threading

from log_helpers import batch

from odradek.common.metadata import TopicPartition
from odradek.log.log import LogConfig
from odradek.log.log_manager import PARTITION_METADATA, LogManager


def test_delete_renames_then_removes_open_or_not(tmp_path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    manager.get_or_create(tp).append_as_leader(batch(3), 0)
    manager.get_or_create(other).append_as_leader(batch(1), 0)
    manager.close()
    manager = LogManager(tmp_path, LogConfig())  # tp is on disk, not opened
    assert manager.delete(tp) is True
    assert not (tmp_path / "t-0").exists()
    manager.finish_removals()  # the renamed directory is removed on a background thread
    assert not list(tmp_path.glob("*-delete"))
    assert manager.delete(tp) is False
    log = manager.get_or_create(other)
    assert manager.delete(other) is True and log.deleted
    assert manager.partitions() == []
    fresh = manager.get_or_create(tp)
    assert fresh.log_end_offset == 0  # a log made again under the name starts empty


def test_delete_many_renames_all_with_one_directory_fsync_and_removes_off_the_caller(
        tmp_path, monkeypatch) -> None:
    import odradek.log.log_manager as log_manager

    manager = LogManager(tmp_path, LogConfig())
    tps = [TopicPartition("t", p) for p in range(5)]
    for tp in tps[:4]:
        manager.get_or_create(tp).append_as_leader(batch(2), 0)
    open_log = manager.get(tps[0])
    synced: list[object] = []
    monkeypatch.setattr(log_manager, "fsync_dir", synced.append)
    removing = threading.Event()
    release = threading.Event()
    original = log_manager._remove_dirs

    def slow_removal(directories):
        removing.set()
        release.wait(10)
        original(directories)

    monkeypatch.setattr(log_manager, "_remove_dirs", slow_removal)
    results = manager.delete_many(tps)
    # answered while the removal is still held: every log renamed away, one fsync in all
    assert results == {**{tp: True for tp in tps[:4]}, tps[4]: False}
    assert synced == [tmp_path] and open_log.deleted and manager.partitions() == []
    assert removing.wait(10) and len(list(tmp_path.glob("*-delete"))) == 4
    release.set()
    manager.close()
    assert not list(tmp_path.iterdir())


def test_a_delete_interrupted_after_the_rename_is_finished_at_the_next_start(tmp_path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    manager.get_or_create(TopicPartition("t", 0)).append_as_leader(batch(3), 0)
    manager.close()
    (tmp_path / "t-0").rename(tmp_path / "t-0.0123abcd-delete")  # the crash came after the rename
    restarted = LogManager(tmp_path, LogConfig())
    assert [p.name for p in tmp_path.iterdir()] == ["t-0.0123abcd-delete"]  # kept until the broker says
    restarted.finish_interrupted_deletions()
    assert restarted.partitions() == []
    assert not list(tmp_path.iterdir())


def test_topic_id_is_kept_with_the_log(tmp_path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    tp = TopicPartition("t", 0)
    manager.get_or_create(tp)
    assert manager.topic_id(tp) is None
    manager.write_topic_id(tp, "AbCdEfGhIjKlMnOpQrStUv")
    assert (tmp_path / "t-0" / PARTITION_METADATA).read_text() == \
        "version: 0\ntopic_id: AbCdEfGhIjKlMnOpQrStUv\n"
    assert LogManager(tmp_path, LogConfig()).topic_id(tp) == "AbCdEfGhIjKlMnOpQrStUv"
    assert manager.topic_id(TopicPartition("none", 0)) is None
