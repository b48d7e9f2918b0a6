"""Kafka's ZkData.defaultAcls (zk/zk_acls.py): open without zookeeper.set.acl; with it ALL for
the broker's SASL user plus world READ, the sensitive paths without any world access."""
from __future__ import annotations

import pytest
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id

from odradek.zk import paths
from odradek.zk.raw_session import _OPEN_ACL_PERSISTENT, _PERSISTENT, encode_acls
from odradek.zk.zk_acls import default_acls, sensitive_path

ALL_KAFKA = ACL(31, Id("sasl", "kafka"))
WORLD_READ = ACL(1, Id("world", "anyone"))


@pytest.mark.parametrize("path", ["/brokers/ids/1", "/config/users/alice", "/consumers", "/"])
def test_open_when_not_secure(path: str) -> None:
    assert default_acls(path, False) == OPEN_ACL_UNSAFE == default_acls(path, False, "kafka")


@pytest.mark.parametrize("path", [*(p for p in paths.PERSISTENT_PATHS if p not in ("/config/users", "/config/brokers")),
                                  paths.CONTROLLER, paths.CONTROLLER_EPOCH, paths.CLUSTER_ID,
                                  "/config", "/config/topics/t", "/config/changes/config_change_0000000001",
                                  "/brokers/topics/t/partitions/0/state", "/kafka-acl/Topic/t", "/delegation_token",
                                  "/odradek-chroot"])
def test_creator_all_and_world_read(path: str) -> None:
    assert not sensitive_path(path)
    assert default_acls(path, True, "kafka") == [ALL_KAFKA, WORLD_READ]


@pytest.mark.parametrize("path", ["/config/users", "/config/users/alice", "/config/users/alice/clients/c",
                                  "/config/brokers", "/config/brokers/<default>", "/config/brokers/1",
                                  "/delegation_token/tokens", "/delegation_token/tokens/t1"])
def test_sensitive_paths_have_no_world_access(path: str) -> None:
    assert sensitive_path(path)
    assert default_acls(path, True, "kafka") == [ALL_KAFKA]


def test_the_old_consumers_tree_stays_open_and_a_user_is_needed() -> None:
    assert default_acls("/consumers", True, "kafka") == OPEN_ACL_UNSAFE
    assert not sensitive_path("/config/topics/users") and not sensitive_path("/config")
    with pytest.raises(ValueError, match="needs the SASL user"):
        default_acls("/brokers", True)


def test_wire_form() -> None:
    assert encode_acls(OPEN_ACL_UNSAFE) + _PERSISTENT == _OPEN_ACL_PERSISTENT
    assert encode_acls([ALL_KAFKA, WORLD_READ]) == (
        b"\0\0\0\x02" + b"\0\0\0\x1f" + b"\0\0\0\x04sasl" + b"\0\0\0\x05kafka"
        + b"\0\0\0\x01" + b"\0\0\0\x05world" + b"\0\0\0\x06anyone")
