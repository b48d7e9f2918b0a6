"""meta.properties: written in Kafka's format, read back, and a mismatch refused."""
from __future__ import annotations

import pytest

from odradek.broker import broker_metadata_checkpoint as checkpoint
from odradek.broker.broker_metadata_checkpoint import BrokerMetadata, InconsistentBrokerMetadataError


def test_written_identity_reads_back_and_a_new_dir_has_none(tmp_path) -> None:
    assert checkpoint.read(tmp_path) is None
    checkpoint.write(tmp_path, BrokerMetadata(3, "AbCdEfGhIjKlMnOpQrStUv"))
    lines = (tmp_path / "meta.properties").read_text().splitlines()
    assert {"version=0", "broker.id=3", "cluster.id=AbCdEfGhIjKlMnOpQrStUv"} <= set(lines)
    assert checkpoint.read(tmp_path) == BrokerMetadata(3, "AbCdEfGhIjKlMnOpQrStUv")


def test_another_broker_id_or_cluster_is_refused_the_same_accepted(tmp_path) -> None:
    stored = BrokerMetadata(1, "cluster-a")
    checkpoint.check_broker_id(tmp_path, stored, 1)
    checkpoint.check_cluster_id(tmp_path, stored, "cluster-a")
    checkpoint.check_broker_id(tmp_path, None, 9)  # a new dir takes any id
    with pytest.raises(InconsistentBrokerMetadataError, match="broker.id 9 does not match broker.id 1"):
        checkpoint.check_broker_id(tmp_path, stored, 9)
    with pytest.raises(InconsistentBrokerMetadataError, match="cluster-b .*does not match cluster.id cluster-a"):
        checkpoint.check_cluster_id(tmp_path, stored, "cluster-b")


def test_an_unreadable_file_is_refused_not_overwritten(tmp_path) -> None:
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=4\n")  # a KRaft controller's, say
    with pytest.raises(InconsistentBrokerMetadataError, match="not a version 0 meta.properties"):
        checkpoint.read(tmp_path)
    assert (tmp_path / "meta.properties").read_text() == "version=1\nnode.id=4\n"
