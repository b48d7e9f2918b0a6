"""Deleting a partition's log (StopReplica with delete): renamed to a `-delete` directory first,
so a crash mid-delete never leaves a half-deleted log that is loaded again; and the topic id
kept with each log (partition.metadata) that tells a deleted topic's log from a new one's."""
from __future__ import annotations

from log_helpers import batch

from odradek.log.log import LogConfig
from odradek.log.log_manager import PARTITION_METADATA, LogManager
from odradek.metadata import TopicPartition


def test_delete_renames_then_removes_open_or_not(tmp_path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    tp, other = TopicPartition("t", 0), TopicPartition("t", 1)
    manager.get_or_create(tp).append_as_leader(batch(3), 0)
    manager.get_or_create(other).append_as_leader(batch(1), 0)
    manager.close()
    manager = LogManager(tmp_path, LogConfig())  # tp is on disk, not opened
    assert manager.delete(tp) is True
    assert not (tmp_path / "t-0").exists() and not list(tmp_path.glob("*-delete"))
    assert manager.delete(tp) is False
    log = manager.get_or_create(other)
    assert manager.delete(other) is True and log.deleted
    assert manager.partitions() == []
    fresh = manager.get_or_create(tp)
    assert fresh.log_end_offset == 0  # a log made again under the name starts empty


def test_a_delete_interrupted_after_the_rename_is_finished_at_the_next_start(tmp_path) -> None:
    manager = LogManager(tmp_path, LogConfig())
    manager.get_or_create(TopicPartition("t", 0)).append_as_leader(batch(3), 0)
    manager.close()
    (tmp_path / "t-0").rename(tmp_path / "t-0.0123abcd-delete")  # the crash came after the rename
    assert LogManager(tmp_path, LogConfig()).partitions() == []
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
