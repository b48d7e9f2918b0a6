"""reassign_client's controller handling without a cluster: the request follows the controller
after NOT_CONTROLLER and gives up with one line; replicas being added are not the original's."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from odradek.admin import reassign_client as rc
from odradek.admin.errors import AdminError
from odradek.admin.reassign_partitions_command import Ongoing


class Code(int):
    name = "not_controller"


class FakeCluster:
    """Metadata says broker `controllers[i]` is the controller on the i-th look; each broker answers
    the reassignment request with the error code `answers[broker]` (0: success)."""

    def __init__(self, controllers: list[int], answers: dict[int, int]) -> None:
        self.controllers, self.answers = controllers, answers
        self.sent: list[str] = []

    def view(self, bootstrap: str, topics: Any, timeout: float) -> rc.ClusterView:
        controller = self.controllers.pop(0) if len(self.controllers) > 1 else self.controllers[0]
        return rc.ClusterView({1: "h:1", 2: "h:2"}, {}, controller, {}, {})

    def send(self, address: str, api_key: int, version: int, body: dict[str, Any], timeout: float) -> Any:
        self.sent.append(address)
        return SimpleNamespace(error_code=Code(self.answers[int(address.split(":")[1])]), error_message=None,
                               topics=())


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(controllers: list[int], answers: dict[int, int]) -> FakeCluster:
        cluster = FakeCluster(controllers, answers)
        monkeypatch.setattr(rc, "cluster_view", cluster.view)
        monkeypatch.setattr(rc.config_command, "_send", cluster.send)
        monkeypatch.setattr(rc.time, "sleep", lambda s: None)
        return cluster
    return install


def test_request_follows_the_controller_after_not_controller(fake: Any) -> None:
    cluster = fake([1, 2], {1: 41, 2: 0})
    assert rc.list_reassignments("boot", None, 1.0) == {}
    assert cluster.sent == ["h:1", "h:2"]


def test_request_gives_up_after_its_attempts(fake: Any) -> None:
    cluster = fake([1], {1: 41})
    with pytest.raises(AdminError, match="broker 1 is no longer the controller .after 5 attempts"):
        rc.list_reassignments("boot", None, 1.0)
    assert len(cluster.sent) == rc.CONTROLLER_ATTEMPTS


def test_a_broker_without_the_api_is_named(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake([2], {})

    def closed(*_: Any) -> Any:
        raise ConnectionError("connection closed by broker")
    monkeypatch.setattr(rc.config_command, "_send", closed)
    with pytest.raises(AdminError, match="controller .broker 2 at h:2. did not answer .* Kafka 2.4"):
        rc.list_reassignments("boot", None, 1.0)


def test_replicas_being_added_are_not_the_originals() -> None:
    assignment = {("t", 0): [3, 2, 1], ("t", 1): [1, 2]}
    ongoing = {("t", 0): Ongoing((3, 2, 1), adding=(3,), removing=(1,))}
    assert rc._without_adding(assignment, ongoing) == {("t", 0): [2, 1], ("t", 1): [1, 2]}
