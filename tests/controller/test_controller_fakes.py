"""The controller tests' fakes (controller_fakes.py) honour the seams' contract: FakeZk's
LeaderAndIsr updates are conditional on the znode version, and a fenced FakeZk refuses writes
with ControllerMovedError as a deposed controller's ZooKeeper writes are refused."""
from __future__ import annotations

import pytest
from controller_fakes import BadVersionError, FakeZk, tp

from odradek.common.metadata import LeaderAndIsr
from odradek.controller.seams import ControllerMovedError


def test_fake_zk_update_is_conditional_on_zk_version() -> None:
    zk = FakeZk()
    created = zk.create_partition_states({tp("t", 0): LeaderAndIsr(1, 0, (1, 2), 1, 0)})
    assert created[tp("t", 0)].zk_version == 0  # type: ignore[union-attr]
    ok = zk.update_leader_and_isr({tp("t", 0): LeaderAndIsr(2, 1, (2,), 1, 0)})
    assert ok[tp("t", 0)] == LeaderAndIsr(2, 1, (2,), 1, 1)
    stale = zk.update_leader_and_isr({tp("t", 0): LeaderAndIsr(1, 2, (1,), 1, 0)})
    assert isinstance(stale[tp("t", 0)], BadVersionError)


def test_fake_zk_fenced_write_raises_controller_moved() -> None:
    zk = FakeZk()
    zk.fenced = True
    with pytest.raises(ControllerMovedError):
        zk.create_partition_states({tp("t", 0): LeaderAndIsr(1, 0, (1,), 1, 0)})
