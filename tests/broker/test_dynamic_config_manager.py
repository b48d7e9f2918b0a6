"""DynamicConfigManager's listeners for entity types other than topics and brokers (the SCRAM
credential cache follows "users"), against a real ZooKeeper: every stored entity at startup,
then each entity a change notification names, re-read whole; a listener that fails does not
keep the others from the change."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.broker.dynamic_config_manager import DynamicConfigManager
from odradek.zk import admin_zk_client as azk
from odradek.zk.client import KafkaZkClient


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KafkaZkClient]:
    client = KafkaZkClient(zk_connect, session_timeout_s=4.0)
    client.start()
    try:
        yield client
    finally:
        client.close()


def manager(zk: KafkaZkClient) -> DynamicConfigManager:
    """A manager without the broker around it: broker configs go nowhere, no partitions."""
    config = SimpleNamespace(update=lambda _entity, _config: None)
    replicas = SimpleNamespace(partitions=lambda: [])
    dcm = DynamicConfigManager(1, zk, config, replicas, None)  # type: ignore[arg-type]
    dcm._apply_broker_defaults = lambda: None  # type: ignore[method-assign]
    return dcm


async def until(condition: Any, timeout_s: float = 10.0) -> float:
    """Seconds until ``condition()`` held (the event loop running meanwhile)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, "not seen in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def test_listeners_get_every_stored_entity_then_each_change(zk: KafkaZkClient) -> None:
    zk.change_entity_configs({(azk.USERS, "alice"): {"SCRAM-SHA-256": "a"}, (azk.USERS, "CN%3Dbob"): {"k": "b"},
                              ("clients", "app"): {"producer_byte_rate": "5"}})
    seen: list[tuple[str, dict[str, str]]] = []
    clients: list[tuple[str, dict[str, str]]] = []

    def failing(name: str, config: dict[str, str]) -> None:
        raise RuntimeError("a listener's bug")

    async def run() -> None:
        dcm = manager(zk)
        dcm.register(azk.USERS, failing)
        dcm.register(azk.USERS, lambda name, config: seen.append((name, config)))
        dcm.register("clients", lambda name, config: clients.append((name, config)))
        await dcm.startup()
        try:
            # loaded before startup returns, before any request is served
            assert sorted(seen) == [("CN%3Dbob", {"k": "b"}), ("alice", {"SCRAM-SHA-256": "a"})]
            assert clients == [("app", {"producer_byte_rate": "5"})]
            with pytest.raises(RuntimeError):
                dcm.register("users", lambda name, config: None)
            await until(lambda: dcm._last_executed >= 0)  # the notifications already there, taken up once
            seen.clear()
            await asyncio.to_thread(zk.change_entity_configs, {(azk.USERS, "alice"): {"SCRAM-SHA-512": "c"}})
            await until(lambda: ("alice", {"SCRAM-SHA-512": "c"}) in seen)
            for parent in ("/config/users/alice/clients", "/config/not-followed"):
                await asyncio.to_thread(zk.kazoo.ensure_path, parent)
            await asyncio.to_thread(zk.change_entity_configs, {(azk.USERS, "alice/clients/app"): {"x": "1"},
                                                               ("not-followed", "t"): {"y": "2"}})
            await until(lambda: ("alice/clients/app", {"x": "1"}) in seen)
            # an entity whose node is gone is re-read as {}: its listener drops what it held
            zk.kazoo.delete(azk.entity_path(azk.USERS, "CN%3Dbob"))
            await asyncio.to_thread(zk.kazoo.create, "/config/changes/config_change_",
                                    azk.encode_notification(azk.USERS, "CN%3Dbob"), sequence=True)
            await until(lambda: ("CN%3Dbob", {}) in seen)
        finally:
            dcm.shutdown()

    asyncio.run(run())


@pytest.mark.parametrize("entity_type", [azk.TOPICS, azk.BROKERS, "", "users/x"])
def test_topics_and_brokers_stay_the_managers_own(zk: KafkaZkClient, entity_type: str) -> None:
    with pytest.raises(ValueError):
        manager(zk).register(entity_type, lambda name, config: None)
