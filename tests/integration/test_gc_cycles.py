"""The broker's collection policy never thaws what it froze (common/gc_policy.py), so a reference
cycle among frozen objects is never freed. Two brokers run in this process under that policy,
ticking every 0.2 s so that everything living longer is frozen, through a churn of what a
broker drops while it runs: client connections, fetch sessions and a consumer group, a broker
failover (its ZooKeeper session expired), a controller failover, leadership moved back by
ElectLeaders, and topics deleted. Then the permanent generation is thawed and collected: no
object of odradek's, no frame of its code and no asyncio transport may be in a cycle there."""
from __future__ import annotations

import asyncio
import collections
import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

import odradek.broker.server as server_module
from cluster_helpers import SESSION_TIMEOUT_MS
from odradek.broker.config import BrokerConfig
from odradek.broker.server import Broker
from odradek.common.gc_policy import GcPolicy
from odradek.common.netutil import free_port

pytestmark = pytest.mark.integration

TICK_S = 0.2
TOPIC = "gc-cycles"
PARTITIONS = 6


def _config(broker_id: int, zk_connect: str, tmp_path: Path) -> BrokerConfig:
    return BrokerConfig(broker_id=broker_id, host="127.0.0.1", port=free_port(), zookeeper=zk_connect,
                        data_dir=tmp_path / f"broker-{broker_id}", zookeeper_session_timeout_ms=SESSION_TIMEOUT_MS,
                        default_replication_factor=2, offsets_topic_num_partitions=3, log_cleaner_enable=False,
                        controlled_shutdown_enable=False)


def _wait(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.1)


def _full_isrs(admin: AdminClient, topic: str, replicas: int) -> bool:
    try:
        partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
    except Exception:  # noqa: BLE001 - a broker still coming back
        return False
    return len(partitions) == PARTITIONS and all(len(p.isrs) == replicas and p.leader >= 0
                                                 for p in partitions.values())


def _controller(admin: AdminClient) -> int:
    return admin.describe_cluster(request_timeout=10).result(10).controller.id


def _expire_session(brokers: dict[int, Broker], broker_id: int) -> None:
    """ZooKeeper expires the broker's session (another client joins it and closes it): the
    controller sees the broker die; the broker registers again under a new session."""
    zk = brokers[broker_id].zk
    session_id, password = zk.kazoo.client_id
    other = KazooClient(hosts=zk.connect.partition("/")[0], client_id=(session_id, password))
    other.start()
    other.stop()
    other.close()


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=b"v" * 100)
    assert producer.flush(30) == 0


def _consume_in_group(bootstrap: str, topic: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gc-cycles", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 60
    try:
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert got >= count


def _churn(brokers: dict[int, Broker], bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _wait(lambda: len(admin.list_topics(timeout=5).brokers) == 2, "both brokers registered")
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 2)]).values():
        future.result(30)
    _wait(lambda: _full_isrs(admin, TOPIC, 2), "the topic's ISRs full")
    _produce(bootstrap, TOPIC, 600)
    _consume_in_group(bootstrap, TOPIC, 600)
    time.sleep(5 * TICK_S)  # connections, sessions, partitions: all frozen by now
    follower = next(b for b in brokers if b != _controller(admin))
    _expire_session(brokers, follower)  # a broker failover, then the broker is back
    _produce(bootstrap, TOPIC, 300)
    _wait(lambda: _full_isrs(admin, TOPIC, 2), "the expired broker back in every ISR")
    _expire_session(brokers, _controller(admin))  # a controller failover
    _wait(lambda: _full_isrs(admin, TOPIC, 2), "both brokers in every ISR after the controller failover")
    time.sleep(5 * TICK_S)
    partitions = [KafkaPartition(TOPIC, p) for p in range(PARTITIONS)]
    _wait(lambda: _elect_preferred(admin, partitions), "leadership back on the preferred replicas")
    _produce(bootstrap, TOPIC, 300)
    _consume_in_group(bootstrap, TOPIC, 300)
    time.sleep(5 * TICK_S)
    for future in admin.delete_topics([TOPIC]).values():
        future.result(30)
    _wait(lambda: not any((b.config.data_dir / f"{TOPIC}-0").exists() for b in brokers.values()),
          "the deleted topic's logs gone from both brokers")
    time.sleep(5 * TICK_S)


def _elect_preferred(admin: AdminClient, partitions: list[KafkaPartition]) -> bool:
    from confluent_kafka import ElectionType
    try:
        admin.elect_leaders(ElectionType.PREFERRED, partitions).result(10)
    except Exception:  # noqa: BLE001 - ELECTION_NOT_NEEDED and the like: look at the leaders
        pass
    topic = admin.list_topics(TOPIC, timeout=5).topics[TOPIC]
    return all(p.leader == p.replicas[0] for p in topic.partitions.values())


def _cycles_among_frozen() -> collections.Counter[str]:
    """What a full collection of the thawed permanent generation finds that is odradek's: its
    objects, frames of its code, asyncio transports (its connections' ends). The young
    generations are collected first: their cycles are the ticks' to free, not leaks."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.unfreeze()
        gc.collect()
        found: collections.Counter[str] = collections.Counter()
        for obj in gc.garbage:
            name = _ours(obj)
            if name:
                found[name] += 1
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()


#: kazoo's create_async makes a cycle of its closures and its result on every call, failed or
#: not (the result class is odradek's only to drop a failure's traceback, zk/kazoo_handler.py);
#: a broker creates znodes a few times per ZooKeeper session (its registration, an election)
KAZOO_RESULT = "odradek.zk.kazoo_handler.AsyncResult"


def _ours(obj: Any) -> str | None:
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__module__.startswith("odradek.") and name != KAZOO_RESULT:
        return name
    if kind.__name__ == "frame" and "/odradek/" in obj.f_code.co_filename:
        return f"frame of {obj.f_code.co_name} ({Path(obj.f_code.co_filename).name})"
    if kind.__name__.endswith("SocketTransport"):
        return kind.__name__
    return None


def test_churn_leaves_no_cycle_of_odradek_among_frozen_objects(zk_connect: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "FREEZE_EVERY_S", TICK_S)
    thresholds = gc.get_threshold()
    configs = {b: _config(b, zk_connect, tmp_path) for b in (1, 2)}
    bootstrap = ",".join(f"127.0.0.1:{c.port}" for c in configs.values())

    async def run() -> collections.Counter[str]:
        brokers = {b: Broker(c) for b, c in configs.items()}
        tasks = [asyncio.create_task(b.run()) for b in brokers.values()]
        try:
            await asyncio.to_thread(_churn, brokers, bootstrap)
            return _cycles_among_frozen()  # on the loop's thread: no tick in between
        finally:
            for broker in brokers.values():
                broker._stopping.set()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)

    try:
        leaked = asyncio.run(run())
    finally:
        GcPolicy().uninstall()
        gc.set_threshold(*thresholds)
    assert not leaked, f"reference cycles among frozen objects: {dict(leaked.most_common())}"
